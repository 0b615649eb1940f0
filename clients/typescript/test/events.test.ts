// TrimEvents through the subscription helper: delivery, resume after a disconnect, reconnects.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { getEventListeners } from "node:events";
import { after, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { runInNewContext } from "node:vm";
import { setFlagsFromString } from "node:v8";
import { equals } from "@bufbuild/protobuf";
import {
  CallerPath,
  connect,
  HistoryTrimmedSchema,
  Role,
  TrimMode,
  TrimReason,
  TurnkeeperError,
  type HistoryTrimmed,
  type TrimEvent,
  type TrimEventSubscription,
  type TrimEventsResponse,
  type TurnkeeperClient,
} from "../src/index.js";
import { FlakyProxy } from "./proxy.js";
import { serverAddress, show, tcpClient } from "./support.js";

const ONE_SECOND = { seconds: 1n };

/** Causes one agent-path token-budget trim attributed to `sessionId` and returns its HistoryTrimmed. */
async function causeTrim(client: TurnkeeperClient, sessionId: string, turnId: string): Promise<HistoryTrimmed> {
  const turn = (n: number) => [
    { role: Role.USER, content: `question ${n}: ${"q".repeat(60)}` },
    { role: Role.ASSISTANT, content: `answer ${n}: ${"a".repeat(60)}` },
  ];
  const response = await client.trimHistory({
    history: { shape: { case: "chat", value: { messages: [...turn(1), ...turn(2), ...turn(3)] } } },
    mode: TrimMode.TOKEN_BUDGET,
    callerPath: CallerPath.AGENT,
    limits: { case: "explicitLimits", value: { budgetTokens: 60n } },
    caller: { sessionId, turnId },
  });
  assert.ok(response.historyTrimmed, `the trim dropped nothing:\n${show(response.outcome)}`);
  assert.equal(response.historyTrimmed.reason, TrimReason.TOKEN_BUDGET);
  return response.historyTrimmed;
}

type Items = AsyncIterator<TrimEventsResponse>;

async function next(items: Items, within = 5000): Promise<TrimEventsResponse> {
  const timeout = new AbortController();
  try {
    const result = await Promise.race([
      items.next(),
      sleep(within, undefined, { signal: timeout.signal }).then(() => assert.fail(`no TrimEvents item within ${within} ms`)),
    ]);
    assert.ok(!result.done, "the subscription ended");
    return result.value;
  } finally {
    timeout.abort();
  }
}

async function nextHeartbeat(items: Items, within?: number): Promise<string> {
  const item = (await next(items, within)).item;
  assert.equal(item.case, "heartbeat", `expected a heartbeat, got ${show(item)}`);
  return item.value.cursor;
}

async function nextEvent(items: Items): Promise<TrimEvent> {
  const item = (await next(items)).item;
  assert.equal(item.case, "event", `expected an event, got ${show(item)}`);
  return item.value;
}

/**
 * Takes the heartbeat that answers a live tail: the server sends it as soon as the subscription is
 * registered (well within the one-second interval the tests ask for), so no event can slip past it,
 * and it names the resume position, which the subscription adopts as its cursor.
 */
async function open(subscription: TrimEventSubscription): Promise<Items> {
  const items = subscription[Symbol.asyncIterator]();
  const cursor = await nextHeartbeat(items, 800);
  assert.notEqual(cursor, "", "the first heartbeat names the resume position");
  assert.equal(subscription.cursor, cursor);
  return items;
}

function assertSameTrim(event: TrimEvent, returned: HistoryTrimmed): void {
  assert.ok(equals(HistoryTrimmedSchema, event.trimmed!, returned), `event differs from the trim:\n${show(event.trimmed)}\n${show(returned)}`);
}

describe("TrimEvents subscription", () => {
  const client = tcpClient();
  after(() => client.close());

  test("receives a trim, disconnects, and resumes with exactly the event it missed", async () => {
    const sessionId = `ts-resume-${randomUUID()}`;
    const first = client.watchTrimEvents({ sessionIds: [sessionId], heartbeatInterval: ONE_SECOND });
    assert.equal(first.cursor, "");
    const items = await open(first);

    const trim1 = await causeTrim(client, sessionId, "turn-1");
    const event1 = await nextEvent(items);
    assertSameTrim(event1, trim1);
    assert.equal(event1.trimmed?.caller?.turnId, "turn-1");
    assert.equal(first.cursor, event1.cursor);

    first.close();
    assert.deepEqual(await items.next(), { done: true, value: undefined });

    const trim2 = await causeTrim(client, sessionId, "turn-2");
    const second = client.watchTrimEvents({ sessionIds: [sessionId], heartbeatInterval: ONE_SECOND }, { afterCursor: first.cursor });
    const resumed = second[Symbol.asyncIterator]();
    const event2 = await nextEvent(resumed);
    assertSameTrim(event2, trim2);
    assert.equal(event2.trimmed?.caller?.turnId, "turn-2");
    assert.notEqual(event2.cursor, event1.cursor);
    // Nothing else was owed: the next item is a heartbeat naming the event just delivered.
    assert.equal(await nextHeartbeat(resumed), event2.cursor);
    assert.equal(second.cursor, event2.cursor);
    await resumed.return?.();
  });

  test("a batched subscription yields the same single items in order", async () => {
    const sessionId = `ts-batch-${randomUUID()}`;
    const first = client.watchTrimEvents({ sessionIds: [sessionId], heartbeatInterval: ONE_SECOND });
    const opening = await open(first);
    const start = first.cursor;
    await opening.return?.();
    const trims = [];
    for (let i = 0; i < 5; i++) trims.push(await causeTrim(client, sessionId, `turn-${i}`));
    const batched = client.watchTrimEvents(
      { sessionIds: [sessionId], heartbeatInterval: ONE_SECOND, maxBatchEvents: 50 },
      { afterCursor: start },
    );
    const items = batched[Symbol.asyncIterator]();
    for (const trim of trims) assertSameTrim(await nextEvent(items), trim);
    await items.return?.();
  });

  test("reconnects by itself after the connection drops and delivers what it missed once", async () => {
    const proxy = await FlakyProxy.start(serverAddress());
    const viaProxy = connect(proxy.address);
    try {
      const sessionId = `ts-reconnect-${randomUUID()}`;
      const reconnects: { attempt: number; error: TurnkeeperError | undefined }[] = [];
      const subscription = viaProxy.watchTrimEvents(
        { sessionIds: [sessionId], heartbeatInterval: ONE_SECOND },
        { backoff: { initialMs: 20, maxMs: 100 }, onReconnect: (r) => reconnects.push(r) },
      );
      const items = await open(subscription);
      const trim1 = await causeTrim(client, sessionId, "before");
      const event1 = await nextEvent(items);
      assertSameTrim(event1, trim1);

      // Break the connection and keep the server unreachable while the next trim happens.
      proxy.refuse(true);
      proxy.cut();
      const pending = next(items, 10_000);
      const trim2 = await causeTrim(client, sessionId, "during");
      while (reconnects.length < 2) await sleep(20);
      proxy.refuse(false);

      const item = (await pending).item;
      assert.equal(item.case, "event", show(item));
      assertSameTrim(item.value, trim2);
      assert.notEqual(item.value.cursor, event1.cursor);
      assert.equal(subscription.cursor, item.value.cursor);
      assert.equal(reconnects[0]?.error?.codeName, "UNAVAILABLE");
      assert.equal(reconnects[0]?.attempt, 1);
      assert.equal(reconnects[1]?.attempt, 2); // consecutive failures back off further
      assert.equal(await nextHeartbeat(items), item.value.cursor);
      subscription.close();
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });

  test("a silent connection trips the watchdog and the stream resumes on a new one", async () => {
    const proxy = await FlakyProxy.start(serverAddress());
    const viaProxy = connect(proxy.address);
    try {
      const sessionId = `ts-stall-${randomUUID()}`;
      const reconnects: (TurnkeeperError | undefined)[] = [];
      const subscription = viaProxy.watchTrimEvents(
        { sessionIds: [sessionId], heartbeatInterval: ONE_SECOND },
        { idleTimeoutMs: 1500, backoff: { initialMs: 20 }, onReconnect: (r) => reconnects.push(r.error) },
      );
      const items = await open(subscription); // its heartbeat already gave the resume point
      assert.equal(proxy.connections, 1);

      proxy.muteOpenConnections(); // the connection stays open but nothing arrives any more
      const pending = next(items, 10_000);
      const trim = await causeTrim(client, sessionId, "stalled");
      const item = (await pending).item;
      assert.equal(item.case, "event", show(item));
      assertSameTrim(item.value, trim);
      assert.deepEqual(reconnects, [undefined]); // a stall, not an error
      assert.equal(proxy.connections, 2, "the stalled connection was reused");
      subscription.close();
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });

  test("a live tail cut off before any event resumes from its first heartbeat and gets the missed trim once", async () => {
    const proxy = await FlakyProxy.start(serverAddress());
    const viaProxy = connect(proxy.address);
    try {
      const sessionId = `ts-live-tail-${randomUUID()}`;
      const reconnects: (TurnkeeperError | undefined)[] = [];
      const subscription = viaProxy.watchTrimEvents(
        { sessionIds: [sessionId], heartbeatInterval: ONE_SECOND },
        { backoff: { initialMs: 20, maxMs: 100 }, onReconnect: (r) => reconnects.push(r.error) },
      );
      const items = await open(subscription);
      const resumeFrom = subscription.cursor;

      // Disconnected before any event; the trim happens while the server is unreachable.
      proxy.refuse(true);
      proxy.cut();
      const pending = next(items, 10_000);
      const missed = await causeTrim(client, sessionId, "while-away");
      while (reconnects.length < 1) await sleep(20);
      proxy.refuse(false);

      const item = (await pending).item;
      assert.equal(item.case, "event", show(item));
      assertSameTrim(item.value, missed);
      assert.notEqual(item.value.cursor, resumeFrom);
      assert.equal(subscription.cursor, item.value.cursor);
      // Exactly once: the next item is an idle heartbeat naming that event.
      assert.equal(await nextHeartbeat(items), item.value.cursor);
      subscription.close();
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });

  test("subscribeTrimEvents then an immediate trim (no sleep) always delivers the trim (docs/events.md)", async () => {
    for (let round = 0; round < 5; round++) {
      const sessionId = `ts-subscribe-${randomUUID()}`;
      const subscription = await client.subscribeTrimEvents({ sessionIds: [sessionId], heartbeatInterval: ONE_SECOND });
      try {
        const trimmed = await causeTrim(client, sessionId, `round-${round}`);
        assert.equal(subscription.cursor, "", "the held answer's cursor counts only once it is yielded");
        const items = subscription[Symbol.asyncIterator]();
        // The heartbeat that answered the subscription comes first, then the trim, then only idle heartbeats.
        const cursor = await nextHeartbeat(items, 800);
        assert.notEqual(cursor, "");
        assertSameTrim(await nextEvent(items), trimmed);
        assert.equal(await nextHeartbeat(items), subscription.cursor);
      } finally {
        subscription.close();
      }
    }
  });

  test("subscribeTrimEvents resuming from a cursor is answered by the owed event", async () => {
    const sessionId = `ts-subscribe-resume-${randomUUID()}`;
    const first = await client.subscribeTrimEvents({ sessionIds: [sessionId], heartbeatInterval: ONE_SECOND });
    const cursor = await nextHeartbeat(first[Symbol.asyncIterator]());
    first.close();
    const owed = await causeTrim(client, sessionId, "owed");
    const resumed = await client.subscribeTrimEvents({ sessionIds: [sessionId], heartbeatInterval: ONE_SECOND }, { afterCursor: cursor });
    try {
      assert.equal(resumed.cursor, cursor, "persisting the cursor now must not skip the held event");
      const event = await nextEvent(resumed[Symbol.asyncIterator]());
      assertSameTrim(event, owed);
      assert.equal(resumed.cursor, event.cursor);
    } finally {
      resumed.close();
    }
  });

  test("subscribeTrimEvents rejects with DEADLINE_EXCEEDED when the server never answers", async () => {
    const proxy = await FlakyProxy.start(serverAddress());
    const viaProxy = connect(proxy.address);
    try {
      proxy.refuse(true);
      const began = Date.now();
      await assert.rejects(viaProxy.subscribeTrimEvents({}, { timeoutMs: 500, backoff: { initialMs: 20, maxMs: 100 } }), (e: unknown) => {
        assert.ok(e instanceof TurnkeeperError, String(e));
        assert.equal(e.codeName, "DEADLINE_EXCEEDED");
        return true;
      });
      assert.ok(Date.now() - began < 5000);
    } finally {
      viaProxy.close();
      await proxy.close();
    }
  });

  test("subscribeTrimEvents rejects with the server's error for an unreadable cursor", async () => {
    await assert.rejects(client.subscribeTrimEvents({}, { afterCursor: "not-a-cursor" }), (e: unknown) => {
      assert.ok(e instanceof TurnkeeperError, String(e));
      assert.equal(e.codeName, "INVALID_ARGUMENT");
      assert.deepEqual(e.fieldViolations.map((v) => v.field), ["after_cursor"]);
      return true;
    });
  });

  test("an unreadable cursor fails without retrying", async () => {
    let reconnects = 0;
    const subscription = client.watchTrimEvents({}, { afterCursor: "not-a-cursor", onReconnect: () => reconnects++ });
    await assert.rejects(subscription[Symbol.asyncIterator]().next(), (e: unknown) => {
      assert.ok(e instanceof TurnkeeperError, String(e));
      assert.equal(e.codeName, "INVALID_ARGUMENT");
      assert.equal(e.reasonName, "ERROR_REASON_INVALID_SUBSCRIPTION");
      assert.deepEqual(e.fieldViolations.map((v) => v.field), ["after_cursor"]);
      return true;
    });
    assert.equal(reconnects, 0);
  });

  test("closing the client ends its subscriptions", async () => {
    const own = tcpClient();
    const subscription = own.watchTrimEvents({ sessionIds: [`ts-close-${randomUUID()}`], heartbeatInterval: ONE_SECOND });
    const items = await open(subscription);
    const pending = items.next();
    own.close();
    assert.deepEqual(await pending, { done: true, value: undefined });
  });

  test("2,000 subscribe/close cycles on one client leave no abort listener and a bounded heap", async () => {
    const own = tcpClient();
    const caller = new AbortController();
    // The client's own signal, which every subscription listens to (private: read for this test).
    const clientSignal = (): AbortSignal => (own as unknown as { closing: AbortController }).closing.signal;
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => {
      if (warning.name === "MaxListenersExceededWarning") warnings.push(warning);
    };
    process.on("warning", onWarning);
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const heap = (): number => {
      gc();
      return process.memoryUsage().heapUsed;
    };
    const cycles = async (n: number): Promise<void> => {
      // In batches of 8 (the caller's signal warns past 10 listeners at once), so the run stays short
      // on a loaded machine; each subscription is answered by the server before it is closed.
      for (let done = 0; done < n; done += 8) {
        await Promise.all(
          Array.from({ length: Math.min(8, n - done) }, async (_, k) => {
            const sub = await own.subscribeTrimEvents({ sessionIds: [`ts-leak-${done + k}`] }, { signal: caller.signal });
            if (k % 2 === 0) {
              sub.close();
            } else {
              // The other half ends by breaking out of the iteration rather than by close().
              for await (const _item of sub) break;
            }
          }),
        );
      }
    };
    try {
      await cycles(200);
      const before = heap();
      await cycles(2000);
      const grown = heap() - before;
      assert.equal(getEventListeners(caller.signal, "abort").length, 0, "listeners left on the caller's signal");
      assert.equal(getEventListeners(clientSignal(), "abort").length, 0, "listeners left on the client's signal");
      assert.deepEqual(warnings, []);
      // A leaked subscription kept about 39 KB alive (+77.8 MB over 2,000): 8 MB is far below that.
      assert.ok(grown < 8 * 1024 * 1024, `heap grew by ${(grown / 1048576).toFixed(1)} MB over 2,000 cycles`);
    } finally {
      process.off("warning", onWarning);
      own.close();
    }
  });
});
