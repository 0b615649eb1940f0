//! A history with its prices, kept in step as plans and the sweep are applied
//! (`turnkeeper/core/working.py`), and written back as response bytes: kept rows are copied
//! from the request, never re-encoded.

use crate::conventions::{Conventions, Prices};
use crate::plan::{Layout, Plan};
use crate::pricing::{strip_sent_images, text_tokens};
use crate::rows::{History, Marks, Row, RowBytes, RowKind, Shape};
use crate::sweep::{self, OrphanKind};
use crate::wire::{self, put_len, put_len_header, put_uint, varint_len, Field, Reader, LEN};

#[derive(Debug, Clone)]
pub struct Working {
    pub history: History,
    pub tokens: Vec<u64>,
    pub images: Vec<u64>,
    pub prices: Prices,
}

/// One removal of the sweep: what, in which input row, the tool-call id's range, row removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub kind: OrphanKind,
    pub index: usize,
    pub id: (usize, usize),
    pub row_removed: bool,
}

impl Working {
    /// Prices every row (§9): attachments are sent only in the current user turn.
    pub fn of(history: History, prices: Prices) -> Working {
        let rows = &history.rows;
        let current_from = rows
            .iter()
            .rposition(Row::is_turn_boundary)
            .map_or(0, |i| i + 1);
        let mut tokens = Vec::with_capacity(rows.len());
        let mut images = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let sent = u64::from(row.marker_images)
                + if i >= current_from {
                    u64::from(row.attachments)
                } else {
                    0
                };
            images.push(sent);
            tokens.push(
                row.text_tokens
                    + prices.framing_tokens * u64::from(row.provider_rows)
                    + prices.tokens_per_image * sent,
            );
        }
        Working {
            history,
            tokens,
            images,
            prices,
        }
    }

    pub fn total_tokens(&self) -> u64 {
        self.tokens.iter().sum()
    }

    pub fn image_tokens(&self) -> u64 {
        self.prices.tokens_per_image * self.images.iter().sum::<u64>()
    }

    /// The estimate of the leading system rows, which no trim drops.
    pub fn system_floor_tokens(&self) -> u64 {
        self.tokens[..self.system_rows()].iter().sum()
    }

    pub fn turns(&self) -> u64 {
        self.history
            .rows
            .iter()
            .filter(|r| r.is_turn_boundary())
            .count() as u64
    }

    /// The output of a plan (§15.1 order): the rows before `drop`, the pinned turns kept inside
    /// it, the breadcrumb (the input's, moved, or a new one) where planned, the rows after it.
    pub fn apply(&self, plan: &Plan, breadcrumb_text: &str) -> Working {
        if !plan.trimmed() {
            return self.clone();
        }
        let (start, stop) = (plan.drop_start, plan.drop_stop);
        let crumb = plan.breadcrumb_at.map(|_| match plan.breadcrumb_from {
            Some(from) => (
                self.history.rows[from].clone(),
                self.tokens[from],
                self.images[from],
            ),
            None => (
                self.breadcrumb_row(breadcrumb_text),
                self.prices.price_text(breadcrumb_text),
                0,
            ),
        });
        let kept: usize = plan.kept_in_drop.iter().map(|(s, e)| e - s).sum();
        let len = self.history.rows.len() - (stop - start) + kept + usize::from(crumb.is_some());
        let mut rows = Vec::with_capacity(len);
        let mut tokens = Vec::with_capacity(len);
        let mut images = Vec::with_capacity(len);
        let old = &self.history.rows;
        let mut copy = |from: usize, to: usize| {
            rows.extend_from_slice(&old[from..to]);
            tokens.extend_from_slice(&self.tokens[from..to]);
            images.extend_from_slice(&self.images[from..to]);
        };
        copy(0, start);
        for &(from, to) in &plan.kept_in_drop {
            copy(from, to);
        }
        if let Some((row, cost, sent)) = crumb {
            rows.push(row);
            tokens.push(cost);
            images.push(sent);
        }
        rows.extend_from_slice(&old[stop..]);
        tokens.extend_from_slice(&self.tokens[stop..]);
        images.extend_from_slice(&self.images[stop..]);
        let history = History {
            rows,
            ..self.history_without_rows()
        };
        Working {
            history,
            tokens,
            images,
            prices: self.prices,
        }
    }

    /// The estimate of the pinned turns (§15.1).
    pub fn pinned_tokens(&self) -> u64 {
        if !self.has_pins() {
            return 0;
        }
        let turns = Layout::of(&self.history.rows).pinned_turns(&self.history.rows);
        turns
            .iter()
            .map(|&(s, e)| self.tokens[s..e].iter().sum::<u64>())
            .sum()
    }

    /// The fixed prefix's breadcrumb when pinned turns stand before it (§15.1): the row §14's
    /// first breakpoint moves to.
    pub fn pinned_prefix_breadcrumb(&self) -> Option<usize> {
        let lay = Layout::of(&self.history.rows);
        if lay.prefix_turns.is_empty() {
            None
        } else {
            lay.breadcrumb
        }
    }

    /// §15.1's fixed floor: the leading system rows, the summary row and every pinned turn but
    /// the newest turn.
    pub fn fixed_floor_tokens(&self) -> u64 {
        let rows = &self.history.rows;
        if !self.has_pins() {
            let system = self.system_rows();
            let summary = rows.get(system).is_some_and(|r| r.kind == RowKind::Summary);
            return self.tokens[..system + usize::from(summary)].iter().sum();
        }
        let lay = Layout::of(rows);
        let newest = rows.iter().rposition(Row::is_turn_boundary);
        let head = lay.system_rows + usize::from(lay.summary.is_some());
        let pinned = lay.pinned_turns(rows).into_iter();
        let older = pinned.filter(|&(s, e)| newest.is_none_or(|b| !(s..e).contains(&b)));
        let turns: u64 = older
            .map(|(s, e)| self.tokens[s..e].iter().sum::<u64>())
            .sum();
        self.tokens[..head].iter().sum::<u64>() + turns
    }

    /// Whether a row is pinned: without one, the pinned figures cost a look at each flag.
    fn has_pins(&self) -> bool {
        self.history.rows.iter().any(|r| r.marks.pinned)
    }

    /// §15.3's summary request: rows `0..stop` as they are, then one user row holding
    /// `instruction`, encoded as protobuf encodes `ChatMessage(role=ROLE_USER, content=...)`;
    /// priced anew, as the new row becomes the current turn's start.
    pub fn summary_request(
        &self,
        stop: usize,
        instruction: &str,
        conventions: &Conventions,
    ) -> Working {
        let stop = stop.min(self.history.rows.len());
        let mut chat = Vec::with_capacity(instruction.len() + 8);
        put_uint(&mut chat, 1, i64::from(conventions.roles.user) as u64);
        if !instruction.is_empty() {
            put_len(&mut chat, 2, instruction.as_bytes());
        }
        let (nbytes, images) = strip_sent_images(instruction);
        let end = self.history.ids.len();
        let row = Row {
            kind: RowKind::User,
            provider_rows: 1,
            text_bytes: nbytes,
            text_tokens: text_tokens(nbytes),
            marker_images: images,
            attachments: 0,
            bytes: RowBytes::Owned(self.in_shape(&chat).into()),
            calls: (end, end),
            results: (end, end),
            marks: Marks::default(),
        };
        let mut rows = Vec::with_capacity(stop + 1);
        rows.extend_from_slice(&self.history.rows[..stop]);
        rows.push(row);
        let history = History {
            rows,
            ..self.history_without_rows()
        };
        Working::of(history, self.prices)
    }

    /// A chat row's bytes as an entry of this history's messages list: in the conversation
    /// shape, the `chat` member of a ConversationMessage.
    pub(crate) fn in_shape(&self, chat: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(chat.len() + 12);
        if self.history.shape == Some(Shape::Conversation) {
            let mut member = Vec::with_capacity(chat.len() + 6);
            put_len(&mut member, 1, chat);
            put_len(&mut bytes, 1, &member);
        } else {
            put_len(&mut bytes, 1, chat);
        }
        bytes
    }

    /// The number of leading system rows (§9 layout).
    pub fn system_rows(&self) -> usize {
        let rows = &self.history.rows;
        rows.iter()
            .take_while(|r| r.kind == RowKind::System)
            .count()
    }

    /// The estimate of rows 0 through `index` (all of them when it is past the end).
    pub fn tokens_through(&self, index: usize) -> u64 {
        let stop = index.saturating_add(1).min(self.tokens.len());
        self.tokens[..stop].iter().sum()
    }

    /// The first row of the current user turn (§9: after the last real user row).
    pub(crate) fn current_turn_from(&self) -> usize {
        let rows = &self.history.rows;
        rows.iter()
            .rposition(Row::is_turn_boundary)
            .map_or(0, |i| i + 1)
    }

    pub(crate) fn history_without_rows(&self) -> History {
        History {
            shape: self.history.shape,
            rows: Vec::new(),
            history_unknown: self.history.history_unknown.clone(),
            list_unknown: self.history.list_unknown.clone(),
            ids: self.history.ids.clone(),
            written: self.history.written.clone(),
        }
    }

    /// A breadcrumb: a user chat row with `breadcrumb: true`, as protobuf encodes it.
    fn breadcrumb_row(&self, text: &str) -> Row {
        let mut chat = vec![0x08, 0x02];
        put_len(&mut chat, 2, text.as_bytes());
        chat.extend_from_slice(&[0x30, 0x01]);
        let bytes = self.in_shape(&chat);
        let nbytes = text.len() as u64;
        let end = self.history.ids.len();
        Row {
            kind: RowKind::Breadcrumb,
            provider_rows: 1,
            text_bytes: nbytes,
            text_tokens: text_tokens(nbytes),
            marker_images: 0,
            attachments: 0,
            bytes: RowBytes::Owned(bytes.into()),
            calls: (end, end),
            results: (end, end),
            marks: Marks::default(),
        }
    }

    /// The orphan sweep: the swept history (re-priced) and the removals in input order.
    pub fn sweep(&self, buf: &[u8]) -> wire::Result<(Working, Vec<Removal>)> {
        let swept = self.sweep_changes(buf)?;
        Ok(swept.unwrap_or_else(|| (self.clone(), Vec::new())))
    }

    /// The orphan sweep, or None when it removes nothing: the history is then its own sweep,
    /// and a caller that can share it need not copy its rows.
    pub fn sweep_changes(&self, buf: &[u8]) -> wire::Result<Option<(Working, Vec<Removal>)>> {
        let orphans = sweep::find(buf, &self.history);
        if orphans.is_empty() {
            return Ok(None);
        }
        let none = Vec::new();
        let mut removals = Vec::new();
        // A repaired row's kept calls and results are appended: its ranges stay contiguous.
        let mut ids = self.history.ids.clone();
        let mut rows = Vec::with_capacity(self.history.rows.len());
        for (i, row) in self.history.rows.iter().enumerate() {
            let results = orphans.results.get(&i).unwrap_or(&none);
            let calls = orphans.calls.get(&i).unwrap_or(&none);
            if results.is_empty() && calls.is_empty() {
                rows.push(row.clone());
                continue;
            }
            let repaired = self.without(buf, row, results, calls, &mut ids)?;
            let gone = repaired.is_none();
            let ids = &self.history.ids;
            for &j in results {
                removals.push(Removal {
                    kind: OrphanKind::ToolResultWithoutCall,
                    index: i,
                    id: ids[row.results.0 + j],
                    row_removed: gone,
                });
            }
            for &j in calls {
                removals.push(Removal {
                    kind: OrphanKind::ToolCallWithoutResult,
                    index: i,
                    id: ids[row.calls.0 + j],
                    row_removed: gone,
                });
            }
            rows.extend(repaired);
        }
        let history = History {
            rows,
            ids,
            ..self.history_without_rows()
        };
        Ok(Some((Working::of(history, self.prices), removals)))
    }

    /// The row without the given results and calls (positions), or None when nothing worth
    /// keeping is left (`sweep._without`); the ids it keeps are appended to `ids`. The row is
    /// re-read from the request: rare path.
    fn without(
        &self,
        buf: &[u8],
        row: &Row,
        results: &[usize],
        calls: &[usize],
        ids: &mut Vec<(usize, usize)>,
    ) -> wire::Result<Option<Row>> {
        let RowBytes::Request(start, end) = row.bytes else {
            return Ok(Some(row.clone()));
        };
        let occurrence = Reader::new(buf, start, end).next_message_field(0)?;
        let conversation = self.history.shape == Some(Shape::Conversation);
        // The member (or the chat message) whose fields are filtered, merged over occurrences.
        let (member, payloads) = if conversation {
            winning_member(buf, &occurrence)?
        } else {
            (1, vec![occurrence])
        };
        let is_chat = !conversation || member == 1;
        if is_chat && !results.is_empty() {
            return Ok(None); // a tool row holds exactly one result
        }
        // Field number of the repeated entries being filtered, in the filtered message.
        let entries = match (is_chat, member) {
            (true, _) => 4,  // ChatMessage.tool_calls
            (false, 2) => 2, // AssistantToolCalls.tool_calls
            _ => 1,          // ToolResults.results
        };
        // Ascending positions, walked in step with the entries: one pass, however many go.
        let mut removed = if entries == 1 { results } else { calls }.iter().peekable();
        let first_id = if entries == 1 {
            row.results.0
        } else {
            row.calls.0
        };
        let kept_from = ids.len();
        let mut payload = Vec::new();
        let mut index = 0usize;
        let mut kept_entries = 0u32;
        let mut stats = Stats::default();
        for p in &payloads {
            let mut reader = Reader::new(buf, p.payload_start, p.end);
            while !reader.at_end() {
                let f = reader.next_message_field(0)?;
                if f.wire_type == LEN && f.number == entries {
                    let gone = removed.next_if_eq(&&index).is_some();
                    index += 1;
                    if gone {
                        continue;
                    }
                    kept_entries += 1;
                    ids.push(self.history.ids[first_id + index - 1]);
                    stats.entry(buf, &f, entries == 1)?;
                } else if f.wire_type == LEN {
                    stats.text_field(buf, &f, is_chat, member);
                }
                payload.extend_from_slice(&buf[f.start..f.end]);
            }
        }
        // Content (chat), or text or reasoning (assistant step), keeps a row without calls.
        let text_present = if is_chat {
            stats.last_text[2] > 0
        } else {
            stats.last_text[1] > 0 || stats.last_text[3] > 0
        };
        if kept_entries == 0 && (entries == 1 || !text_present) {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(payload.len() + 12);
        if conversation {
            let inner_len = payload.len();
            let member_len = 1 + varint_len(inner_len as u64) + inner_len;
            put_len_header(&mut bytes, 1, member_len);
            put_len(&mut bytes, member, &payload);
        } else {
            put_len(&mut bytes, 1, &payload);
        }
        let mut repaired = row.clone();
        repaired.bytes = RowBytes::Owned(bytes.into());
        let end = ids.len();
        let kept = (kept_from, end);
        (repaired.calls, repaired.results) = if entries == 1 {
            ((end, end), kept)
        } else {
            (kept, (end, end))
        };
        if entries == 1 {
            repaired.provider_rows = kept_entries;
            repaired.text_bytes = stats.result_bytes;
            repaired.text_tokens = stats.result_tokens;
            repaired.attachments = stats.attachments;
        } else {
            repaired.text_bytes = stats.text + stats.call_bytes;
            repaired.text_tokens = text_tokens(repaired.text_bytes);
        }
        Ok(Some(repaired))
    }

    /// Field 1 (`history`) of a response: History{shape: list{rows, unknown}, unknown}.
    pub fn history_field(&self, buf: &[u8]) -> Vec<u8> {
        let mut out = vec![0; self.history_field_len()];
        self.write_history_field(buf, &mut out);
        out
    }

    /// The encoded size of `history_field`.
    pub fn history_field_len(&self) -> usize {
        let (header, list_len) = self.history_field_header();
        header.len() + list_len + spans_len(&self.history.history_unknown)
    }

    /// Writes `history_field` into `out`, which is `history_field_len()` bytes: straight into the
    /// response's buffer, so a response history is copied once.
    pub fn write_history_field(&self, buf: &[u8], out: &mut [u8]) {
        let (header, _) = self.history_field_header();
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&header);
        for row in &self.history.rows {
            put(self.history.row_bytes(buf, row));
        }
        for r in self
            .history
            .list_unknown
            .iter()
            .chain(&self.history.history_unknown)
        {
            put(&buf[r.0..r.1]);
        }
        debug_assert_eq!(at, out.len());
    }

    /// The tags and lengths of field 1 and of the shape field in it, and the shape's payload size.
    fn history_field_header(&self) -> (Vec<u8>, usize) {
        let row_bytes = |row: &Row| self.history.row_len(row);
        let list_len: usize = self.history.rows.iter().map(row_bytes).sum::<usize>()
            + spans_len(&self.history.list_unknown);
        let shape_number = match self.history.shape {
            Some(Shape::Conversation) => 2,
            _ => 1,
        };
        let history_len =
            1 + varint_len(list_len as u64) + list_len + spans_len(&self.history.history_unknown);
        let mut header = Vec::with_capacity(12);
        put_len_header(&mut header, 1, history_len);
        put_len_header(&mut header, shape_number, list_len);
        (header, list_len)
    }

    /// Field 2 (`messages`) of EstimateTokensResponse: one MessageEstimate per row.
    pub fn estimates_field(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.history.rows.len() * 24);
        let mut estimate = Vec::with_capacity(48);
        for (i, row) in self.history.rows.iter().enumerate() {
            estimate.clear();
            let provider_rows = u64::from(row.provider_rows);
            put_uint(&mut estimate, 1, provider_rows);
            put_uint(&mut estimate, 2, row.text_bytes);
            put_uint(&mut estimate, 3, row.text_tokens);
            put_uint(&mut estimate, 4, self.prices.framing_tokens * provider_rows);
            put_uint(&mut estimate, 5, self.images[i]);
            put_uint(
                &mut estimate,
                6,
                self.prices.tokens_per_image * self.images[i],
            );
            put_uint(&mut estimate, 7, self.tokens[i]);
            put_uint(&mut estimate, 8, u64::from(row.is_turn_boundary()));
            put_len(&mut out, 2, &estimate);
        }
        out
    }
}

/// The bytes the request ranges span together.
fn spans_len(ranges: &[(usize, usize)]) -> usize {
    ranges.iter().map(|r| r.1 - r.0).sum()
}

/// The oneof member of a ConversationMessage that wins, with its occurrences in order.
pub(crate) fn winning_member(buf: &[u8], occurrence: &Field) -> wire::Result<(u32, Vec<Field>)> {
    let mut member = 0;
    let mut payloads = Vec::new();
    let mut reader = Reader::new(buf, occurrence.payload_start, occurrence.end);
    while !reader.at_end() {
        let f = reader.next_message_field(0)?;
        if f.wire_type == LEN && (1..=3).contains(&f.number) {
            if f.number != member {
                member = f.number;
                payloads.clear();
            }
            payloads.push(f);
        }
    }
    Ok((member, payloads))
}

/// Text and entry sizes of a repaired row, for its new estimate.
#[derive(Default)]
struct Stats {
    text: u64,
    call_bytes: u64,
    result_bytes: u64,
    result_tokens: u64,
    attachments: u32,
    last_text: [u64; 4],
}

impl Stats {
    /// A non-entry LEN field: chat content/tool_call_id or step text/reasoning (last wins).
    fn text_field(&mut self, buf: &[u8], f: &Field, is_chat: bool, member: u32) {
        let priced = if is_chat {
            f.number == 2 || f.number == 3
        } else {
            member == 2 && (f.number == 1 || f.number == 3)
        };
        if priced {
            let len = f.payload(buf).len() as u64;
            let slot = f.number as usize;
            self.text = self.text - self.last_text[slot] + len;
            self.last_text[slot] = len;
        }
    }

    /// A kept tool call (its id, name and arguments priced) or tool result.
    fn entry(&mut self, buf: &[u8], f: &Field, is_result: bool) -> wire::Result<()> {
        let mut last = [0u64; 6];
        let mut attachments = 0;
        let mut reader = Reader::new(buf, f.payload_start, f.end);
        while !reader.at_end() {
            let g = reader.next_message_field(0)?;
            if g.wire_type != LEN {
                continue;
            }
            let slot = g.number as usize;
            if is_result && slot == 4 {
                attachments += 1;
            } else if slot < last.len() {
                last[slot] = g.payload(buf).len() as u64;
            }
        }
        if is_result {
            // tool_call_id (1) and content (3); tool_name is never priced.
            let nbytes = last[1] + last[3];
            self.result_bytes += nbytes;
            self.result_tokens += text_tokens(nbytes);
            self.attachments += attachments;
        } else {
            self.call_bytes += last[1] + last[2] + last[3];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::scan;
    use crate::testing::{call, chat, conventions, member, request, ASSISTANT, SYSTEM, TOOL, USER};

    fn working(buf: &[u8]) -> Working {
        let scanned = scan(buf, 100, &conventions()).expect("decodes");
        assert_eq!(scanned.violations.total, 0);
        Working::of(scanned.history, conventions().prices)
    }

    /// The history field a working history writes, scanned again.
    fn rescan(w: &Working, buf: &[u8]) -> (Vec<u8>, Working) {
        let out = w.history_field(buf);
        assert_eq!(out.len(), w.history_field_len());
        let again = working(&out);
        (out, again)
    }

    fn attachment() -> Vec<u8> {
        let mut a = Vec::new();
        put_len(&mut a, 1, b"image/png");
        a
    }

    #[test]
    fn rows_are_priced_and_attachments_sent_only_in_the_current_turn() {
        let mut old_tool = chat(TOOL, b"12345678", b"c1", &[]);
        put_len(&mut old_tool, 5, &attachment());
        let mut new_tool = chat(TOOL, b"", b"c2", &[]);
        put_len(&mut new_tool, 5, &attachment());
        let rows = [
            chat(SYSTEM, b"sys", b"", &[]),
            chat(USER, b"one", b"", &[]),
            chat(ASSISTANT, b"", b"", &[call(b"c1", b"f")]),
            old_tool,
            chat(USER, b"two", b"", &[]),
            chat(ASSISTANT, b"", b"", &[call(b"c2", b"f")]),
            new_tool,
        ];
        let w = working(&request(1, &rows, &[]));
        assert_eq!(w.images, [0, 0, 0, 0, 0, 0, 1]);
        // "12345678" + "c1": 10 bytes, 3 tokens, + 4 framing; the sent image costs 1600.
        assert_eq!(w.tokens[3], 3 + 4);
        assert_eq!(w.tokens[6], 1 + 4 + 1600);
        assert_eq!(w.image_tokens(), 1600);
        assert_eq!(w.system_floor_tokens(), 1 + 4);
        assert_eq!(w.turns(), 2);
        assert_eq!(w.total_tokens(), w.tokens.iter().sum::<u64>());
    }

    #[test]
    fn an_untouched_history_is_written_back_as_the_request_wrote_it() {
        for shape in [1, 2] {
            let rows = [
                chat(USER, b"hi", b"", &[]),
                chat(ASSISTANT, b"yo", b"", &[]),
            ];
            let rows: Vec<_> = if shape == 1 {
                rows.to_vec()
            } else {
                rows.iter().map(|r| member(1, r)).collect()
            };
            let buf = request(shape, &rows, &[0x10, 0x01]);
            let w = working(&buf);
            assert_eq!(w.history_field(&buf), buf[..buf.len() - 2]);
        }
    }

    #[test]
    fn a_plan_drops_its_rows_and_inserts_the_breadcrumb() {
        let rows: Vec<_> = [
            chat(SYSTEM, b"sys", b"", &[]),
            chat(USER, b"one", b"", &[]),
            chat(ASSISTANT, b"a1", b"", &[]),
            chat(USER, b"two", b"", &[]),
        ]
        .iter()
        .map(|r| member(1, r))
        .collect();
        let buf = request(2, &rows, &[]);
        let w = working(&buf);
        let plan = Plan {
            drop_start: 1,
            drop_stop: 3,
            breadcrumb_at: Some(1),
            dropped_turns: 1,
            kept_turns: 1,
            tokens_before: 0,
            tokens_after: 0,
            target_tokens: 0,
            cut_step: 0,
            cut_drop_target: 0,
            kept_in_drop: Vec::new(),
            breadcrumb_from: None,
            pinned_turns: 0,
            pinned_tokens: 0,
        };
        let trimmed = w.apply(&plan, "earlier turns dropped");
        use RowKind::*;
        let kinds: Vec<_> = trimmed.history.rows.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [System, Breadcrumb, User]);
        assert_eq!(
            trimmed.tokens[1],
            conventions().prices.price_text("earlier turns dropped")
        );
        assert_eq!(trimmed.tokens[2], w.tokens[3]);
        let (_, again) = rescan(&trimmed, &buf);
        let kinds: Vec<_> = again.history.rows.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [System, Breadcrumb, User]);
        assert_eq!(again.tokens, trimmed.tokens);
    }

    #[test]
    fn the_sweep_removes_an_unanswered_call_and_reprices_the_row() {
        let mut step = Vec::new();
        put_len(&mut step, 1, b"thinking");
        put_len(&mut step, 2, &call(b"gone", b"f"));
        put_len(&mut step, 2, &call(b"kept", b"f"));
        let mut results = Vec::new();
        let mut result = Vec::new();
        put_len(&mut result, 1, b"kept");
        put_len(&mut result, 3, b"ok");
        put_len(&mut results, 1, &result);
        let rows = [
            member(1, &chat(USER, b"go", b"", &[])),
            member(2, &step),
            member(3, &results),
            member(1, &chat(USER, b"next", b"", &[])),
        ];
        let buf = request(2, &rows, &[]);
        let w = working(&buf);
        let (swept, removals) = w.sweep(&buf).expect("re-reads");
        assert_eq!(removals.len(), 1);
        let r = &removals[0];
        assert_eq!(
            (r.kind, r.index, r.row_removed),
            (OrphanKind::ToolCallWithoutResult, 1, false)
        );
        assert_eq!(&buf[r.id.0..r.id.1], b"gone");
        // "thinking" + "kept" + "f": 13 bytes.
        assert_eq!(swept.history.rows[1].text_bytes, 13);
        let (_, again) = rescan(&swept, &buf);
        assert_eq!(again.tokens, swept.tokens);
        assert!(again
            .sweep(&swept.history_field(&buf))
            .expect("re-reads")
            .1
            .is_empty());
    }

    #[test]
    fn the_sweep_drops_a_row_left_empty() {
        let rows = [
            chat(USER, b"go", b"", &[]),
            chat(ASSISTANT, b"", b"", &[call(b"c1", b"f")]),
            chat(USER, b"next", b"", &[]),
        ];
        let buf = request(1, &rows, &[]);
        let (swept, removals) = working(&buf).sweep(&buf).expect("re-reads");
        assert_eq!(removals.len(), 1);
        assert!(removals[0].row_removed);
        assert_eq!(swept.history.rows.len(), 2);
        assert_eq!(swept.turns(), 2);
    }

    /// A ChatMessage with `pinned` (field 9) or `summary` (field 10) set.
    fn marked(role: u8, content: &[u8], field: u8) -> Vec<u8> {
        let mut row = chat(role, content, b"", &[]);
        row.extend_from_slice(&[field << 3, 0x01]);
        row
    }

    /// Spec §11's history: a 104-token system row, then turns of a user and an assistant row
    /// of 104 tokens each; the turns in `pinned` are pinned.
    fn section_11_history(turns: usize, pinned: &[usize]) -> Vec<Vec<u8>> {
        let text = [b'x'; 400];
        let mut rows = vec![chat(SYSTEM, &text, b"", &[])];
        for t in 0..turns {
            rows.push(if pinned.contains(&t) {
                marked(USER, &text, 9)
            } else {
                chat(USER, &text, b"", &[])
            });
            rows.push(chat(ASSISTANT, &text, b"", &[]));
        }
        rows
    }

    fn kinds(w: &Working) -> Vec<RowKind> {
        w.history.rows.iter().map(|r| r.kind).collect()
    }

    #[test]
    fn a_pinned_first_turn_survives_the_token_budget_trim() {
        // Spec §15.1's example: j = 1 drops nothing, j = 2 keeps the system row, the first
        // turn, the breadcrumb and turns 3 to 10: 1,993 tokens.
        let buf = request(1, &section_11_history(10, &[0]), &[]);
        let w = working(&buf);
        assert_eq!(w.total_tokens(), 2_184);
        let rows = &w.history.rows;
        let plan = crate::plan::token_budget(rows, &w.tokens, 2_000, Some(17), 1.0, 2_000, false);
        assert_eq!((plan.drop_start, plan.drop_stop), (3, 5));
        assert_eq!(plan.breadcrumb_at, Some(3));
        assert!(plan.kept_in_drop.is_empty() && plan.breadcrumb_from.is_none());
        assert_eq!((plan.dropped_turns, plan.kept_turns), (1, 9));
        assert_eq!(
            (plan.tokens_after, plan.pinned_turns, plan.pinned_tokens),
            (1_993, 1, 208)
        );
        assert_eq!(plan.dropped_messages(), 2);
        let trimmed = w.apply(&plan, "[cut]");
        use RowKind::*;
        assert_eq!(
            kinds(&trimmed)[..5],
            [System, User, Assistant, Breadcrumb, User]
        );
        // The output is valid: its breadcrumb stands after the pinned turn of the fixed prefix.
        let (_, again) = rescan(&trimmed, &buf);
        assert_eq!(again.tokens, trimmed.tokens);
        assert_eq!(again.pinned_tokens(), 208);
        // Recovery's fixed floor: the system row and the pinned turn (not the newest).
        assert_eq!(again.fixed_floor_tokens(), 104 + 208);
    }

    #[test]
    fn every_turn_before_the_cut_pinned_leaves_the_history_unchanged() {
        let buf = request(1, &section_11_history(3, &[0, 1]), &[]);
        let w = working(&buf);
        let rows = &w.history.rows;
        for limit in [0, 1] {
            let plan = crate::plan::turn_count(rows, &w.tokens, limit, Some(17), 1.0);
            assert!(!plan.trimmed(), "{limit}");
            assert_eq!((plan.kept_turns, plan.pinned_turns), (3, 2));
        }
        let plan = crate::plan::token_budget(rows, &w.tokens, 100, Some(17), 0.5, 100, false);
        assert!(!plan.trimmed());
        assert_eq!(plan.cut_step, 0);
        // The newest turn pinned too: the fixed floor leaves it out.
        let buf = request(1, &section_11_history(3, &[0, 1, 2]), &[]);
        assert_eq!(working(&buf).fixed_floor_tokens(), 104 + 2 * 208);
    }

    #[test]
    fn pinned_turns_move_ahead_of_a_kept_breadcrumb() {
        let crumb = {
            let mut row = chat(USER, b"[cut]", b"", &[]);
            row.extend_from_slice(&[0x30, 0x01]);
            row
        };
        let mut rows = section_11_history(3, &[0]);
        rows.insert(1, crumb);
        let rows: Vec<_> = rows.iter().map(|r| member(1, r)).collect();
        let buf = request(2, &rows, &[]);
        let w = working(&buf);
        let plan = crate::plan::turn_count(&w.history.rows, &w.tokens, 1, Some(17), 1.0);
        // sys, crumb, u0 (pinned), a0, u1, a1, u2, a2: the pinned turn moves ahead of the crumb.
        assert_eq!((plan.drop_start, plan.drop_stop), (1, 6));
        assert_eq!(plan.kept_in_drop, [(2, 4)]);
        assert_eq!(
            (plan.breadcrumb_from, plan.breadcrumb_at),
            (Some(1), Some(3))
        );
        assert_eq!(
            (plan.dropped_turns, plan.kept_turns, plan.dropped_messages()),
            (1, 2, 2)
        );
        let trimmed = w.apply(&plan, "unused: the breadcrumb is moved");
        use RowKind::*;
        assert_eq!(
            kinds(&trimmed),
            [System, User, Assistant, Breadcrumb, User, Assistant]
        );
        let (out, again) = rescan(&trimmed, &buf);
        assert_eq!(again.tokens, trimmed.tokens);
        // The moved breadcrumb is the request's row, byte for byte.
        let RowBytes::Request(s, e) = w.history.rows[1].bytes else {
            panic!("a scanned row is a range of the request")
        };
        assert!(out.windows(e - s).any(|window| window == &buf[s..e]));
    }

    #[test]
    fn the_summary_row_is_no_turn_and_is_priced_as_text() {
        let rows = [
            chat(SYSTEM, b"sys", b"", &[]),
            marked(USER, b"[IMAGE:/x.png] so far", 10),
            chat(USER, b"one", b"", &[]),
            chat(ASSISTANT, b"a1", b"", &[]),
            chat(USER, b"two", b"", &[]),
        ];
        let w = working(&request(1, &rows, &[]));
        use RowKind::*;
        assert_eq!(kinds(&w), [System, Summary, User, Assistant, User]);
        assert_eq!((w.turns(), w.tokens[1]), (2, 6 + 4));
        // Never dropped: the breadcrumb follows it.
        let plan = crate::plan::turn_count(&w.history.rows, &w.tokens, 1, Some(17), 1.0);
        assert_eq!(
            (plan.drop_start, plan.drop_stop, plan.breadcrumb_at),
            (2, 4, Some(2))
        );
        assert_eq!(w.fixed_floor_tokens(), w.tokens[0] + w.tokens[1]);
    }

    #[test]
    fn the_summary_request_ends_with_the_instruction_as_protobuf_encodes_it() {
        let rows = [
            chat(SYSTEM, b"sys", b"", &[]),
            chat(USER, b"one", b"", &[]),
            chat(ASSISTANT, b"a1", b"", &[]),
            chat(USER, b"two", b"", &[]),
        ];
        for shape in [1, 2] {
            let rows: Vec<_> = if shape == 1 {
                rows.to_vec()
            } else {
                rows.iter().map(|r| member(1, r)).collect()
            };
            let buf = request(shape, &rows, &[]);
            let w = working(&buf);
            let asked = w.summary_request(3, "Summarize.", &conventions());
            let mut expected = rows[..3].to_vec();
            let prompt = chat(USER, b"Summarize.", b"", &[]);
            expected.push(if shape == 1 {
                prompt
            } else {
                member(1, &prompt)
            });
            let want = request(shape, &expected, &[]);
            assert_eq!(asked.history_field(&buf), want);
            assert_eq!(asked.tokens, working(&want).tokens);
            // An empty instruction is an unset field: protobuf writes no content.
            let empty = w.summary_request(1, "", &conventions()).history_field(&buf);
            let prompt = vec![0x08, USER];
            let prompt = if shape == 1 {
                prompt
            } else {
                member(1, &prompt)
            };
            assert_eq!(empty, request(shape, &[rows[0].clone(), prompt], &[]));
        }
    }
}
