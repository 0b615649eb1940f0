// turnkeeper dashboard: reads the TrimEvents feed over Server-Sent Events and renders sessions,
// their context meters, a timeline and charts. No build step: plain script, Chart.js as a global.
//
// Incoming messages only update in-memory state (bounded); the DOM is updated at most once per
// animation frame, tables and charts at most every TABLE_EVERY_MS / CHART_EVERY_MS, so the page
// stays responsive with thousands of sessions and a hundred events per second.
"use strict";

(() => {
  const TRIMS_KEPT = 20000; // trims kept for charts and filtering
  const TIMELINE_KEPT = 5000; // timeline entries (trims and gaps) kept for filtering
  const TIMELINE_SHOWN = 200; // timeline rows in the DOM
  const SESSIONS_SHOWN = 100; // session rows in the DOM (the fullest first)
  const SESSIONS_KEPT = 10000; // sessions remembered (the least recently seen are forgotten)
  const SESSION_OPTIONS = 500; // suggestions offered by the session filter
  const MINUTES = 30; // width of the tokens-saved chart
  const TOP_SESSIONS = 10; // bars of the dropped-turns chart
  const BURNING_SHARE = 0.5; // a session whose cut moved on more of its recent calls burns its cache
  const BURNING_MIN_CALLS = 5; // ... judged once it made this many prepared calls
  const TIMELINE_EVERY_MS = 200;
  const TABLE_EVERY_MS = 500;
  const CHART_EVERY_MS = 1000;
  const RETRY_MIN_MS = 1000;
  const RETRY_MAX_MS = 15000;

  const REASONS = {
    TRIM_REASON_TOKEN_BUDGET: "Token budget",
    TRIM_REASON_TURN_LIMIT: "Turn limit",
  };
  const GAP_CAUSES = {
    GAP_CAUSE_BUFFER_OVERFLOW: "evicted from the retained window before they reached this page",
    GAP_CAUSE_SLOW_CONSUMER: "dropped because this page read too slowly",
    GAP_CAUSE_RESTART: "the feed restarted; what happened in between is unknown",
    GAP_CAUSE_PUBLISH_FAILED: "a replica could not publish them to the shared feed",
  };

  const numberFormat = new Intl.NumberFormat("en-US");
  const percentFormat = new Intl.NumberFormat("en-US", { style: "percent", minimumFractionDigits: 1, maximumFractionDigits: 1 });
  const fmt = (value) => numberFormat.format(value);
  // uint64 fields arrive as JSON strings (protobuf JSON mapping) and are omitted when zero.
  const num = (value) => Number(value ?? 0);
  // Formatters are built once: toLocaleTimeString() builds one per call, which dominates at load.
  const clockFormat = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  const minuteFormat = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit", hour12: false });
  const clock = (ms) => clockFormat.format(ms);
  const minuteLabel = (ms) => minuteFormat.format(ms);
  const $ = (id) => document.getElementById(id);
  const plural = (count, word) => `${fmt(count)} ${word}${count === 1 ? "" : "s"}`;

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "className") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // Drops the oldest entries in batches, so keeping an array bounded costs O(1) per push.
  function pushBounded(list, item, limit) {
    list.push(item);
    if (list.length > limit * 1.25) list.splice(0, list.length - limit);
  }

  // ---- state ---------------------------------------------------------------------------------

  const sessions = new Map(); // session id -> session record
  const trims = []; // trim records, oldest first
  const timeline = []; // {seq, kind: "trim" | "gap", ...}, oldest first
  const runtimes = new Set();
  const totals = { gaps: 0 };
  let timelineSeq = 0;
  let renderedTimelineSeq = 0; // newest timeline entry already in the DOM
  let lastHeartbeat = 0;
  let cursor = ""; // the feed position to resume from
  let paused = false;
  let pendingWhilePaused = 0;
  const dirty = { totals: true, sessions: true, timeline: true, charts: true, options: true, rebuild: true };
  let filter = { session: "", runtime: "", reason: "" };

  function forgetOldestSessions() {
    const byAge = Array.from(sessions.values()).sort((a, b) => a.lastSeen - b.lastSeen);
    for (const record of byAge.slice(0, sessions.size - SESSIONS_KEPT)) sessions.delete(record.id);
  }

  function sessionRecord(caller) {
    const id = (caller && caller.sessionId) || "";
    let record = sessions.get(id);
    if (!record) {
      record = { id, runtime: "", agent: "", route: null, meter: null, lastTrim: null,
        state: null, reasons: new Set(), lastSeen: Date.now() };
      sessions.set(id, record);
      dirty.options = true;
      if (sessions.size > SESSIONS_KEPT * 1.25) forgetOldestSessions();
    }
    if (caller && caller.runtimeId) {
      record.runtime = caller.runtimeId;
      if (!runtimes.has(caller.runtimeId)) {
        runtimes.add(caller.runtimeId);
        dirty.options = true;
      }
    }
    if (caller && caller.agentId) record.agent = caller.agentId;
    return record;
  }

  // The session's latest state, as the server's ledger counted it over what the feed retains
  // (ledger.py): the page never adds trims up itself, so a resent history is counted once.
  function takeCounts(record, counted) {
    if (counted && counted.session) record.state = counted.session;
  }

  function onTrim(event) {
    const t = event.trimmed || {};
    const caller = t.caller || {};
    const at = Date.parse(event.time) || Date.now();
    const trim = {
      at,
      session: caller.sessionId || "",
      runtime: caller.runtimeId || "",
      turn: caller.turnId || "",
      reason: t.reason || "TRIM_REASON_UNSPECIFIED",
      recovery: Boolean(t.overflowRecovery),
      droppedTurns: num(t.droppedTurns),
      droppedMessages: num(t.droppedMessages),
      keptTurns: num(t.keptTurns),
      before: num(t.tokensBefore),
      after: num(t.tokensAfter),
    };
    pushBounded(trims, trim, TRIMS_KEPT);
    pushBounded(timeline, { seq: ++timelineSeq, kind: "trim", at, trim }, TIMELINE_KEPT);
    const record = sessionRecord(caller);
    record.lastTrim = trim;
    record.reasons.add(trim.reason);
    record.lastSeen = at;
    if (t.route && !record.route) record.route = t.route;
    takeCounts(record, event.dashboard);
    changed("totals", "sessions", "timeline", "charts");
  }

  // A context meter per prepared call (spec §10.5): used tokens, budget, capacity only when known.
  // A compaction plan (spec §15.3) comes as a meter update without a meter: it keeps the meter
  // of the session's latest prepared call and only brings the ledger's counts.
  function onMeter(update) {
    const record = sessionRecord(update.caller || { sessionId: update.sessionId });
    record.lastSeen = Date.parse(update.time) || Date.now();
    if (update.compaction) {
      takeCounts(record, update.dashboard);
      changed("totals", "sessions");
      return;
    }
    const meter = update.meter || {};
    record.meter = {
      used: num(meter.usedTokens),
      budget: num(meter.budgetTokens),
      capacity: meter.capacityTokens === undefined ? null : num(meter.capacityTokens),
      fraction: meter.capacityFraction === undefined ? null : Number(meter.capacityFraction),
    };
    if (update.route) record.route = update.route;
    takeCounts(record, update.dashboard);
    changed("totals", "sessions", "charts");
  }

  function onGap(gap) {
    totals.gaps += 1;
    pushBounded(timeline, { seq: ++timelineSeq, kind: "gap", at: Date.now(), gap }, TIMELINE_KEPT);
    changed("totals", "timeline");
  }

  function onHeartbeat(beat) {
    lastHeartbeat = Date.parse(beat.time) || Date.now();
    setConnection("live");
  }

  // ---- connection ----------------------------------------------------------------------------

  let source = null;
  let retryMs = RETRY_MIN_MS;
  let connection = "connecting";

  function setConnection(state) {
    connection = state;
    renderStatus();
  }

  function listen(name, handler) {
    source.addEventListener(name, (message) => {
      if (message.lastEventId) cursor = message.lastEventId;
      let body;
      try {
        body = JSON.parse(message.data);
      } catch (error) {
        console.error("turnkeeper: unreadable message", name, error);
        return;
      }
      handler(body);
      if (paused && name !== "heartbeat") pendingWhilePaused += 1;
    });
  }

  // Where the ops port is not loopback and --auth-tokens is set, the stream needs a browser
  // session first (a cookie, since EventSource cannot send an Authorization header).
  async function connectWhenAllowed() {
    let session;
    try {
      const response = await fetch(new URL("dashboard/session", document.baseURI), { cache: "no-store" });
      session = await response.json();
    } catch (error) {
      setConnection("reconnecting");
      window.setTimeout(connectWhenAllowed, retryMs);
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
      return;
    }
    if (session.loginRequired && !session.signedIn) {
      setConnection("signed-out");
      $("login").hidden = false;
      $("login-token").focus();
      return;
    }
    $("login").hidden = true;
    connect();
  }

  async function signIn(event) {
    event.preventDefault();
    const input = $("login-token");
    const response = await fetch(new URL("dashboard/session", document.baseURI), {
      method: "POST",
      headers: { Authorization: `Bearer ${input.value.trim()}` },
    });
    input.value = "";
    if (response.ok) {
      $("login-error").textContent = "";
      connectWhenAllowed();
    } else {
      const body = await response.json().catch(() => ({}));
      $("login-error").textContent = `Not signed in: ${body.error || response.statusText}.`;
      input.focus();
    }
  }

  function connect() {
    const url = new URL("dashboard/events", document.baseURI);
    // The browser resends the last id itself on its own reconnects (Last-Event-ID); this covers
    // a new EventSource after the old one failed for good.
    if (cursor) url.searchParams.set("after", cursor);
    source = new EventSource(url);
    source.onopen = () => {
      retryMs = RETRY_MIN_MS;
      setConnection("live");
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        source.close();
        setConnection("reconnecting");
        window.setTimeout(connectWhenAllowed, retryMs); // the session may have expired
        retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
      } else {
        setConnection("reconnecting");
      }
    };
    listen("trim", onTrim);
    listen("meter", onMeter);
    listen("gap", onGap);
    listen("heartbeat", onHeartbeat);
  }

  // ---- rendering -----------------------------------------------------------------------------

  let frameRequested = false;
  let laterTimer = 0;
  let laterDue = 0;
  let lastTimelineRender = 0;
  let lastTableRender = 0;
  let lastChartRender = 0;

  function changed(...parts) {
    for (const part of parts) dirty[part] = true;
    schedule();
  }

  function schedule() {
    if (paused || frameRequested) return;
    frameRequested = true;
    window.requestAnimationFrame(frame);
  }

  // One timer, due at the earliest of the throttled renders that are waiting.
  function later(ms) {
    const due = performance.now() + ms;
    if (laterTimer && laterDue <= due) return;
    window.clearTimeout(laterTimer);
    laterDue = due;
    laterTimer = window.setTimeout(() => {
      laterTimer = 0;
      schedule();
    }, ms);
  }

  function frame(now) {
    frameRequested = false;
    if (paused) return;
    if (dirty.totals) renderTotals();
    if (dirty.options) renderOptions();
    if (dirty.timeline || dirty.rebuild) {
      if (dirty.rebuild || now - lastTimelineRender >= TIMELINE_EVERY_MS) {
        renderTimeline(dirty.rebuild);
        lastTimelineRender = now;
      } else {
        later(TIMELINE_EVERY_MS - (now - lastTimelineRender));
      }
    }
    if (dirty.sessions || dirty.rebuild) {
      if (dirty.rebuild || now - lastTableRender >= TABLE_EVERY_MS) {
        renderSessions();
        lastTableRender = now;
      } else {
        later(TABLE_EVERY_MS - (now - lastTableRender));
      }
    }
    if (dirty.charts || dirty.rebuild) {
      if (dirty.rebuild || now - lastChartRender >= CHART_EVERY_MS) {
        renderCharts();
        lastChartRender = now;
      } else {
        later(CHART_EVERY_MS - (now - lastChartRender));
      }
    }
    dirty.rebuild = false;
  }

  function renderStatus() {
    const pill = $("status");
    const state = paused ? "paused" : connection;
    const labels = { live: "Live", connecting: "Connecting…", reconnecting: "Reconnecting…", paused: "Paused",
      "signed-out": "Signed out" };
    if (pill.dataset.state !== state) {
      pill.dataset.state = state;
      pill.className = `pill pill-${state}`;
      pill.textContent = labels[state];
    }
    $("status-detail").textContent = lastHeartbeat ? `last heartbeat ${clock(lastHeartbeat)}` : "";
  }

  function renderTotals() {
    dirty.totals = false;
    $("total-sessions").textContent = fmt(sessions.size);
    // Sums of each session's latest state.
    const sum = { trimEvents: 0, cutMoves: 0, savedByLastCall: 0, droppedTurns: 0,
      collapsedByLastCall: 0, savedByLastCollapse: 0, pinnedTokens: 0, savedByLastCompaction: 0 };
    for (const record of sessions.values()) {
      if (!record.state) continue;
      for (const key of Object.keys(sum)) sum[key] += record.state[key];
    }
    $("total-trims").textContent = fmt(sum.trimEvents);
    $("total-moves").textContent = fmt(sum.cutMoves);
    $("total-saved").textContent = fmt(sum.savedByLastCall);
    $("total-dropped").textContent = fmt(sum.droppedTurns);
    $("total-collapsed").textContent = fmt(sum.collapsedByLastCall);
    $("total-collapse-saved").textContent = fmt(sum.savedByLastCollapse);
    $("total-pinned").textContent = fmt(sum.pinnedTokens);
    $("total-compaction-saved").textContent = fmt(sum.savedByLastCompaction);
    $("total-gaps").textContent = fmt(totals.gaps);
  }

  function renderOptions() {
    dirty.options = false;
    const select = $("filter-runtime");
    const present = new Set(Array.from(select.options, (o) => o.value));
    for (const runtime of Array.from(runtimes).sort()) {
      if (!present.has(runtime)) select.append(el("option", { value: runtime }, runtime));
    }
    const list = $("session-ids");
    if (list.children.length < SESSION_OPTIONS && list.children.length < sessions.size) {
      list.replaceChildren(...Array.from(sessions.keys()).filter(Boolean).slice(0, SESSION_OPTIONS)
        .map((id) => el("option", { value: id })));
    }
  }

  function trimMatches(trim) {
    if (filter.session && !trim.session.toLowerCase().includes(filter.session)) return false;
    if (filter.runtime && trim.runtime !== filter.runtime) return false;
    return !filter.reason || trim.reason === filter.reason;
  }

  function sessionMatches(record) {
    if (filter.session && !record.id.toLowerCase().includes(filter.session)) return false;
    if (filter.runtime && record.runtime !== filter.runtime) return false;
    return !filter.reason || record.reasons.has(filter.reason);
  }

  function reasonBadge(trim) {
    if (trim.recovery) return el("span", { className: "badge badge-recovery" }, "Overflow recovery");
    const label = REASONS[trim.reason] || trim.reason;
    const kind = trim.reason === "TRIM_REASON_TURN_LIMIT" ? "turns" : "budget";
    return el("span", { className: `badge badge-${kind}` }, label);
  }

  function sessionCell(id, runtime) {
    return el("td", { className: "session-cell" },
      el("span", { className: "ident" }, id || "(no session id)"),
      runtime ? el("span", { className: "sub" }, el("span", { className: "visually-hidden" }, "runtime "), runtime) : null);
  }

  function routeText(route) {
    if (!route || (!route.provider && !route.model)) return "—";
    return [route.provider, route.model].filter(Boolean).join(" / ");
  }

  function timelineRow(entry) {
    if (entry.kind === "gap") {
      const gap = entry.gap;
      const missed = num(gap.missedEvents);
      const count = missed ? `${fmt(missed)} event${missed === 1 ? "" : "s"} missed` : "events missed (number unknown)";
      const why = GAP_CAUSES[gap.cause] || gap.cause || "unknown cause";
      return el("tr", { className: "gap", dataset: { kind: "gap", cause: gap.cause || "" } },
        el("td", {}, clock(entry.at)),
        el("td", { colspan: 4 }, `Gap: ${count}: ${why}`));
    }
    const t = entry.trim;
    return el("tr", { dataset: { kind: "trim", session: t.session } },
      el("td", {}, clock(t.at)),
      sessionCell(t.session, t.runtime),
      el("td", {}, reasonBadge(t)),
      el("td", { className: "num" }, plural(t.droppedTurns, "turn"),
        el("span", { className: "sub" }, plural(t.droppedMessages, "message"))),
      el("td", { className: "num" }, `${fmt(t.before)} → ${fmt(t.after)}`,
        el("span", { className: "sub saved" }, `−${fmt(Math.max(0, t.before - t.after))}`)));
  }

  function entryShown(entry) {
    return entry.kind === "gap" || trimMatches(entry.trim); // gaps are never filtered away
  }

  function renderTimeline(rebuild) {
    dirty.timeline = false;
    const body = $("timeline-body");
    if (rebuild) {
      const rows = [];
      for (let i = timeline.length - 1; i >= 0 && rows.length < TIMELINE_SHOWN; i--) {
        if (entryShown(timeline[i])) rows.push(timelineRow(timeline[i]));
      }
      body.replaceChildren(...rows);
    } else {
      const fresh = [];
      for (let i = timeline.length - 1; i >= 0 && timeline[i].seq > renderedTimelineSeq; i--) {
        if (entryShown(timeline[i])) fresh.push(timelineRow(timeline[i]));
        if (fresh.length >= TIMELINE_SHOWN) break;
      }
      if (fresh.length) body.prepend(...fresh);
      while (body.children.length > TIMELINE_SHOWN) body.lastElementChild.remove();
    }
    renderedTimelineSeq = timelineSeq;
    $("timeline-empty").hidden = body.children.length > 0;
  }

  // How full a session is, for sorting and colour: of the capacity when known, else of the budget.
  function fill(meter) {
    if (!meter) return -1;
    if (meter.fraction !== null) return meter.fraction;
    return meter.budget > 0 ? meter.used / meter.budget : 0;
  }

  // What the session keeps whatever the cut (spec §15.1) and what its latest compaction plan
  // would save (spec §15.3), under its meter.
  function keptNotes(state) {
    const notes = [];
    if (state && state.pinnedTokens) {
      notes.push(el("span", { className: "sub pinned" }, `pinned turns ${fmt(state.pinnedTokens)} tokens`));
    }
    if (state && state.compactions) {
      notes.push(el("span", { className: "sub compaction" },
        `latest compaction plan condenses ${plural(state.condensedByLastCompaction, "turn")} · saves ${fmt(state.savedByLastCompaction)} tokens`));
    }
    return notes;
  }

  function keptData(state) {
    return { pinnedTokens: state ? state.pinnedTokens : 0, compactionSaved: state ? state.savedByLastCompaction : 0 };
  }

  function meterCell(meter, state) {
    if (!meter) {
      return el("td", { dataset: keptData(state) },
        el("span", { className: "muted" }, "no prepared call seen yet"), ...keptNotes(state));
    }
    const scale = meter.capacity !== null ? meter.capacity : meter.budget;
    const parts = [`${fmt(meter.used)} tokens`];
    parts.push(meter.budget > 0 ? `budget ${fmt(meter.budget)}` : "no budget");
    const capacityText = meter.capacity !== null
      ? `${percentFormat.format(meter.fraction ?? meter.used / meter.capacity)} of ${fmt(meter.capacity)} capacity`
      : null;
    const text = el("div", { className: "meter-text" }, parts.join(" · "), " · ",
      capacityText || el("span", { className: "unknown" }, "capacity unknown"));
    const valueText = `${parts.join(", ")}, ${capacityText || "capacity unknown"}`;
    const wrap = el("div", { className: "meter" });
    if (scale > 0) {
      const level = fill(meter);
      const over = meter.budget > 0 && meter.used > meter.budget;
      const fillClass = over || level >= 0.9 ? "danger" : level >= 0.7 ? "warn" : "";
      const bar = el("div", { className: `meter-fill ${fillClass}` });
      bar.style.width = `${Math.min(100, (meter.used / scale) * 100)}%`;
      const track = el("div", {
        className: "meter-track", role: "meter", "aria-label": "context used",
        "aria-valuemin": 0, "aria-valuemax": scale, "aria-valuenow": Math.min(meter.used, scale),
        "aria-valuetext": valueText,
      }, bar);
      if (meter.capacity !== null && meter.budget > 0 && meter.budget < meter.capacity) {
        const mark = el("div", { className: "meter-budget", title: `budget ${fmt(meter.budget)}` });
        mark.style.left = `${(meter.budget / meter.capacity) * 100}%`;
        track.append(mark);
      }
      wrap.append(track);
    }
    wrap.append(text);
    return el("td", { dataset: { used: meter.used, budget: meter.budget,
      capacity: meter.capacity === null ? "unknown" : meter.capacity, ...keptData(state) } },
    wrap, ...keptNotes(state));
  }

  function lastTrimCell(trim, state) {
    if (!trim) return el("td", {}, el("span", { className: "muted" }, "none"));
    const history = state
      ? el("span", { className: "sub history" },
        `${plural(state.droppedTurns, "turn")} dropped from its history · last call saved ${fmt(state.savedByLastCall)} tokens`)
      : null;
    return el("td", { dataset: { droppedTurns: state ? state.droppedTurns : "", saved: state ? state.savedByLastCall : "" } },
      reasonBadge(trim), " ", plural(trim.droppedTurns, "turn"),
      el("span", { className: "sub" }, `${fmt(trim.before)} → ${fmt(trim.after)} tokens · ${clock(trim.at)}`),
      history);
  }

  // How often the cut moved over the session's last prepared calls: each move rewrites the
  // request from the cut on, so the provider's prompt cache serves only what comes before it.
  function burning(state) {
    return Boolean(state) && state.recentCalls >= BURNING_MIN_CALLS &&
      state.recentCutMoves / state.recentCalls > BURNING_SHARE;
  }

  // What the latest prepared call's projection left out (spec §13.3): old turns' tool calls and
  // results sent as one summary row each.
  function collapseNote(state) {
    if (!state || !state.collapsedByLastCall) return null;
    return el("span", { className: "sub collapse" },
      `latest call collapsed ${plural(state.collapsedByLastCall, "turn")} · saved ${fmt(state.savedByLastCollapse)} tokens`);
  }

  function collapseData(state) {
    return { collapsedTurns: state ? state.collapsedByLastCall : 0, collapseSaved: state ? state.savedByLastCollapse : 0 };
  }

  function cutCell(state) {
    if (!state || !state.recentCalls) {
      const moves = state ? state.cutMoves : 0;
      return el("td", { dataset: { recentCalls: 0, recentMoves: 0, ...collapseData(state) } },
        el("span", { className: "muted" }, state ? `${plural(moves, "move")}; no prepared call seen yet` : "—"),
        collapseNote(state));
    }
    const share = state.recentCutMoves / state.recentCalls;
    const hot = burning(state);
    const bar = el("div", { className: `meter-fill ${hot ? "danger" : share > 0.2 ? "warn" : ""}` });
    bar.style.width = `${Math.round(share * 100)}%`;
    const text = `moved on ${fmt(state.recentCutMoves)} of the last ${plural(state.recentCalls, "call")}`;
    return el("td", { className: hot ? "burning" : "",
      dataset: { recentCalls: state.recentCalls, recentMoves: state.recentCutMoves, ...collapseData(state) } },
      el("div", { className: "meter" },
        el("div", { className: "meter-track", role: "meter", "aria-label": "share of recent prepared calls that moved the cut",
          "aria-valuemin": 0, "aria-valuemax": state.recentCalls, "aria-valuenow": state.recentCutMoves, "aria-valuetext": text }, bar),
        el("div", { className: "meter-text" }, text),
        hot ? el("span", { className: "sub burning-note" }, "burning its prompt cache: try a lower ",
          el("code", {}, "history_trim_low_water")) : null,
        collapseNote(state)));
  }

  function renderSessions() {
    dirty.sessions = false;
    const shown = [];
    for (const record of sessions.values()) if (sessionMatches(record)) shown.push(record);
    shown.sort((a, b) => fill(b.meter) - fill(a.meter) || b.lastSeen - a.lastSeen);
    const rows = shown.slice(0, SESSIONS_SHOWN).map((record) =>
      el("tr", { dataset: { session: record.id } },
        sessionCell(record.id, record.runtime),
        el("td", { className: "route" }, routeText(record.route)),
        meterCell(record.meter, record.state),
        cutCell(record.state),
        lastTrimCell(record.lastTrim, record.state)));
    $("sessions-body").replaceChildren(...rows);
    $("sessions-empty").hidden = rows.length > 0;
    const total = sessions.size;
    $("sessions-note").textContent = shown.length > SESSIONS_SHOWN
      ? `the ${SESSIONS_SHOWN} fullest of ${fmt(shown.length)} shown; filter to see others`
      : shown.length === total ? `${fmt(total)} in all` : `${fmt(shown.length)} of ${fmt(total)} match`;
  }

  // ---- charts --------------------------------------------------------------------------------

  const charts = {};
  const colors = {};

  function cssColor(name) {
    if (!(name in colors)) colors[name] = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return colors[name];
  }

  // The OS theme can change while the page is open: re-read the palette and re-colour every
  // chart (axis labels, grid lines, bars), which Chart.js only takes from its options.
  function applyTheme() {
    for (const name of Object.keys(colors)) delete colors[name];
    const text = cssColor("--text");
    const grid = cssColor("--line");
    for (const chart of Object.values(charts)) {
      if (!chart) continue;
      for (const axis of ["x", "y"]) {
        chart.options.scales[axis].ticks.color = text;
        chart.options.scales[axis].grid.color = grid;
      }
      chart.update("none"); // redraws the axes now, also on a chart with no data yet
      chart.data.labels = []; // forces setChart to re-colour the bars on the next render
    }
    changed("rebuild", "charts");
  }

  // Counts are whole numbers: no 0.5 ticks on count axes.
  function makeChart(id, type, horizontal) {
    if (typeof window.Chart !== "function") return null;
    const text = cssColor("--text");
    const grid = cssColor("--line");
    return new window.Chart($(id), {
      type,
      data: { labels: [], datasets: [{ data: [], borderWidth: 0, borderRadius: 3 }] },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        indexAxis: horizontal ? "y" : "x",
        plugins: { legend: { display: false } },
        scales: {
          x: { ticks: { color: text, maxRotation: 0, autoSkipPadding: 8, precision: 0 }, grid: { color: grid } },
          y: { ticks: { color: text, autoSkip: !horizontal, precision: 0 }, grid: { color: grid }, beginAtZero: true },
        },
      },
    });
  }

  function sameList(a, b) {
    return a.length === b.length && a.every((x, i) => x === b[i]);
  }

  // Chart.js measures every label on each update, so an unchanged chart is not updated.
  function setChart(chart, labels, values, colors) {
    if (!chart) return;
    if (sameList(chart.data.labels, labels) && sameList(chart.data.datasets[0].data, values)) return;
    chart.data.labels = labels;
    chart.data.datasets[0].data = values;
    chart.data.datasets[0].backgroundColor = Array.isArray(colors) ? colors : values.map(() => colors);
    chart.update("none");
  }

  function setDataTable(id, header, rows) {
    const head = el("tr", {}, ...header.map((h) => el("th", { scope: "col" }, h)));
    $(id).replaceChildren(el("thead", {}, head),
      el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))));
  }

  function renderCharts() {
    dirty.charts = false;
    const now = Date.now();
    const minuteMs = 60000;
    const lastMinute = Math.floor(now / minuteMs) * minuteMs;
    const firstMinute = lastMinute - (MINUTES - 1) * minuteMs;
    const saved = new Array(MINUTES).fill(0);
    const byReason = { TRIM_REASON_TOKEN_BUDGET: 0, TRIM_REASON_TURN_LIMIT: 0 };
    let recoveries = 0;
    for (const trim of trims) {
      if (!trimMatches(trim)) continue;
      const slot = Math.floor((trim.at - firstMinute) / minuteMs);
      if (slot >= 0 && slot < MINUTES) saved[slot] += Math.max(0, trim.before - trim.after);
      byReason[trim.reason] = (byReason[trim.reason] || 0) + 1;
      if (trim.recovery) recoveries += 1;
    }
    // Each session's latest state: a resent history trimmed again is not dropped again.
    const dropped = [];
    for (const record of sessions.values()) {
      if (record.state && record.state.droppedTurns > 0 && sessionMatches(record)) {
        dropped.push([record.id, record.state.droppedTurns]);
      }
    }
    const accent = cssColor("--accent");
    const ok = cssColor("--ok");

    const minutes = saved.map((_, i) => minuteLabel(firstMinute + i * minuteMs));
    setChart(charts.saved, minutes, saved, accent);
    const savedNow = saved[MINUTES - 1];
    const savedAll = saved.reduce((a, b) => a + b, 0);
    $("chart-saved-summary").textContent =
      `${fmt(savedAll)} tokens saved in the last ${MINUTES} minutes, ${fmt(savedNow)} in the current minute.`;
    setDataTable("chart-saved-data", ["Minute", "Tokens saved"],
      minutes.map((m, i) => [m, fmt(saved[i])]).filter((_, i) => saved[i] > 0));

    const reasonKeys = Object.keys(byReason);
    const reasonLabels = reasonKeys.map((k) => REASONS[k] || k);
    const reasonValues = reasonKeys.map((k) => byReason[k]);
    setChart(charts.reasons, reasonLabels, reasonValues,
      reasonKeys.map((k) => (k === "TRIM_REASON_TURN_LIMIT" ? ok : accent)));
    $("chart-reasons-summary").textContent = reasonKeys
      .map((k, i) => `${reasonLabels[i]}: ${fmt(byReason[k])}`).join("; ") +
      (recoveries ? ` (${fmt(recoveries)} of them overflow recoveries).` : ".");
    setDataTable("chart-reasons-data", ["Reason", "Trims"],
      reasonKeys.map((k, i) => [reasonLabels[i], fmt(byReason[k])]));

    const top = dropped.sort((a, b) => b[1] - a[1]).slice(0, TOP_SESSIONS);
    setChart(charts.dropped, top.map(([s]) => s || "(no session id)"), top.map(([, v]) => v), ok);
    $("chart-dropped-summary").textContent = top.length
      ? `Most dropped: ${top[0][0] || "(no session id)"} with ${fmt(top[0][1])} turns.`
      : "No turns dropped yet.";
    setDataTable("chart-dropped-data", ["Session", "Dropped turns"],
      top.map(([s, v]) => [s || "(no session id)", fmt(v)]));
  }

  // ---- interaction ---------------------------------------------------------------------------

  function readFilters() {
    filter = {
      session: $("filter-session").value.trim().toLowerCase(),
      runtime: $("filter-runtime").value,
      reason: $("filter-reason").value,
    };
    changed("rebuild", "sessions", "timeline", "charts");
  }

  function togglePause() {
    paused = !paused;
    const button = $("pause");
    button.setAttribute("aria-pressed", String(paused));
    if (paused) {
      pendingWhilePaused = 0;
      button.textContent = "Resume live view";
    } else {
      button.textContent = "Pause live view";
      changed("rebuild", "totals", "options");
    }
    renderStatus();
  }

  function updatePausedLabel() {
    if (paused) $("pause").textContent = `Resume live view (${fmt(pendingWhilePaused)} new)`;
  }

  function start() {
    charts.saved = makeChart("chart-saved", "bar", false);
    charts.reasons = makeChart("chart-reasons", "bar", false);
    charts.dropped = makeChart("chart-dropped", "bar", true);
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
    const form = $("filters");
    form.addEventListener("input", readFilters);
    form.addEventListener("change", readFilters);
    form.addEventListener("reset", () => window.setTimeout(readFilters, 0));
    form.addEventListener("submit", (event) => event.preventDefault());
    $("pause").addEventListener("click", togglePause);
    window.setInterval(() => {
      updatePausedLabel();
      if (!paused) changed("charts"); // the minute axis moves even when nothing happens
      renderStatus();
    }, 1000);
    $("login-form").addEventListener("submit", signIn);
    connectWhenAllowed();
    schedule();
  }

  start();
})();
