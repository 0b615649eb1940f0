//! The §13.1 projection (`turnkeeper/core/projection.py`): every turn older than the newest
//! `K + 1` retention turns is sent as its prompt, one tool-exchange summary in place of its tool
//! activity, and its closing reply. Kept rows stay slices of the request and keep their prices
//! (a collapsed turn lies before the last real user row, so no kept row changes turn); only the
//! summaries are written and priced.

use std::sync::Arc;

use crate::conventions::Conventions;
use crate::pricing::text_tokens;
use crate::rows::{History, Marks, Row, RowBytes, RowKind};
use crate::wire::{put_len, put_uint};
use crate::working::Working;

/// One collapsed turn, in the history given and in the projection: the prompt row starts both
/// ranges, which run to one past the turn's last row (`protocol.CollapsedTurn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollapsedTurn {
    pub input_start: usize,
    pub input_stop: usize,
    pub output_start: usize,
    pub output_stop: usize,
}

/// A projection that collapsed at least one turn.
#[derive(Debug, Clone)]
pub struct Projection {
    pub working: Working,
    pub collapsed: Vec<CollapsedTurn>,
    /// Every drained row of every collapsed turn.
    pub rows_left_out: usize,
}

/// How one turn's span (the rows strictly between its prompt and the next prompt) projects.
struct Span {
    /// The span's last row, when it is an assistant reply without tool calls.
    closing: Option<usize>,
    drained: usize,
    /// The summary's N (§13.1), when the first drained row is an assistant row.
    summary_calls: Option<usize>,
}

impl Span {
    /// The span `start..stop`, or None when the turn is copied unchanged: nothing drained, or no
    /// tool activity drained. A turn collapsed earlier and sent back drains to its one summary,
    /// which has no tool activity (the history rule keeps calls off a summary): it is copied, as
    /// §13.1 asks of exactly one summary.
    fn collapsing(rows: &[Row], start: usize, stop: usize) -> Option<Span> {
        // A pinned turn of the fixed prefix ends with its breadcrumb (§15.1): the closing reply
        // is the row before it.
        let last = match stop.checked_sub(1) {
            Some(i) if rows[i].kind == RowKind::Breadcrumb => i.checked_sub(1),
            last => last,
        };
        let closing = last.filter(|&i| i >= start && is_closing_reply(&rows[i]));
        let drained_stop = closing.unwrap_or(stop);
        let mut drained = 0;
        let mut first: Option<&Row> = None;
        let mut calls = 0;
        let mut results = 0;
        for row in &rows[start..drained_stop] {
            if row.kind == RowKind::Breadcrumb {
                continue;
            }
            drained += 1;
            first = first.or(Some(row));
            match row.kind {
                RowKind::Assistant => calls += row.call_count(),
                RowKind::Tool => results += row.provider_rows as usize,
                RowKind::Carrier => results += 1,
                _ => {}
            }
        }
        let first = first?;
        if calls == 0 && results == 0 {
            return None;
        }
        // N: the calls, or without any the results (at least one, as the activity is).
        let n = if calls > 0 { calls } else { results };
        Some(Span {
            closing,
            drained,
            summary_calls: (first.kind == RowKind::Assistant).then_some(n),
        })
    }
}

/// An assistant row without tool calls; in the ConversationMessage shape a `Chat` one.
fn is_closing_reply(row: &Row) -> bool {
    row.kind == RowKind::Assistant && row.call_count() == 0 && !row.marks.tool_step
}

impl Working {
    /// The §13.1 projection with `K = keep_turns`; None when no turn collapses.
    pub fn project(&self, keep_turns: u64, conventions: &Conventions) -> Option<Projection> {
        let rows = &self.history.rows;
        let boundaries: Vec<usize> = (0..rows.len())
            .filter(|&i| rows[i].is_retention_boundary())
            .collect();
        let kept = usize::try_from(keep_turns.saturating_add(1)).unwrap_or(usize::MAX);
        let older = boundaries.len().checked_sub(kept).filter(|&n| n > 0)?;
        let mut out = Projected::new(self);
        let mut collapsed = Vec::new();
        let mut rows_left_out = 0;
        let mut copied = 0;
        for t in 0..older {
            let (prompt, next) = (boundaries[t], boundaries[t + 1]);
            let Some(span) = Span::collapsing(rows, prompt + 1, next) else {
                continue;
            };
            out.copy(self, copied, prompt);
            let output_start = out.rows.len();
            out.copy(self, prompt, prompt + 1);
            let mut summary = span.summary_calls;
            for (i, row) in rows.iter().enumerate().take(next).skip(prompt + 1) {
                if row.kind == RowKind::Breadcrumb || span.closing == Some(i) {
                    out.copy(self, i, i + 1);
                } else if let Some(n) = summary.take() {
                    out.push_summary(self, n, conventions);
                }
            }
            collapsed.push(CollapsedTurn {
                input_start: prompt,
                input_stop: next,
                output_start,
                output_stop: out.rows.len(),
            });
            rows_left_out += span.drained;
            copied = next;
        }
        if collapsed.is_empty() {
            return None;
        }
        out.copy(self, copied, rows.len());
        let history = History {
            rows: out.rows,
            written: out.written,
            ..self.history_without_rows()
        };
        let working = Working {
            history,
            tokens: out.tokens,
            images: out.images,
            prices: self.prices,
        };
        Some(Projection {
            working,
            collapsed,
            rows_left_out,
        })
    }

    /// A tool-exchange summary: an assistant chat row with `tool_exchange_summary: true`, as
    /// protobuf encodes it (fields by number), and its price; its bytes are `written`, once for
    /// every summary of that many calls.
    fn exchange_summary_row(
        &self,
        calls: usize,
        written: usize,
        conventions: &Conventions,
    ) -> (Row, Vec<u8>, u64) {
        let (before, after) = &conventions.exchange_summary;
        let text = format!("{before}{calls}{after}");
        let mut chat = Vec::with_capacity(text.len() + 8);
        // An enum is an int32 on the wire: a negative one takes ten bytes, as protobuf writes it.
        put_uint(&mut chat, 1, i64::from(conventions.roles.assistant) as u64);
        put_len(&mut chat, 2, text.as_bytes());
        put_uint(&mut chat, 8, 1);
        let bytes = self.in_shape(&chat);
        let nbytes = text.len() as u64;
        let end = self.history.ids.len();
        let row = Row {
            kind: RowKind::Assistant,
            provider_rows: 1,
            text_bytes: nbytes,
            text_tokens: text_tokens(nbytes),
            marker_images: 0,
            attachments: 0,
            bytes: RowBytes::Written(written),
            calls: (end, end),
            results: (end, end),
            marks: Marks::default(),
        };
        (row, bytes, self.prices.price_text(&text))
    }
}

/// The projection's rows and prices as they are built.
struct Projected {
    rows: Vec<Row>,
    tokens: Vec<u64>,
    images: Vec<u64>,
    /// The history's written bytes, then the summaries' (`RowBytes::Written`).
    written: Vec<Arc<[u8]>>,
    /// The summaries written so far, by their count of calls, with their prices.
    summaries: Vec<(usize, Row, u64)>,
}

impl Projected {
    fn new(from: &Working) -> Projected {
        let n = from.history.rows.len();
        Projected {
            rows: Vec::with_capacity(n),
            tokens: Vec::with_capacity(n),
            images: Vec::with_capacity(n),
            written: from.history.written.clone(),
            summaries: Vec::new(),
        }
    }

    /// Rows `start..stop` of `from`, with their prices.
    fn copy(&mut self, from: &Working, start: usize, stop: usize) {
        self.rows.extend_from_slice(&from.history.rows[start..stop]);
        self.tokens.extend_from_slice(&from.tokens[start..stop]);
        self.images.extend_from_slice(&from.images[start..stop]);
    }

    /// A summary of `calls` calls; written once per count, its bytes shared by every turn with
    /// that count.
    fn push_summary(&mut self, from: &Working, calls: usize, conventions: &Conventions) {
        let known = self.summaries.iter().find(|(n, _, _)| *n == calls);
        let (row, tokens) = match known {
            Some((_, row, tokens)) => (row.clone(), *tokens),
            None => {
                let at = self.written.len();
                let (row, bytes, tokens) = from.exchange_summary_row(calls, at, conventions);
                self.written.push(bytes.into());
                self.summaries.push((calls, row.clone(), tokens));
                (row, tokens)
            }
        };
        self.rows.push(row);
        self.tokens.push(tokens);
        self.images.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::scan;
    use crate::testing::{call, chat, conventions, member, request, ASSISTANT, SYSTEM, TOOL, USER};

    fn working(buf: &[u8]) -> Working {
        let scanned = scan(buf, 1000, &conventions()).expect("decodes");
        assert_eq!(scanned.violations.total, 0);
        Working::of(scanned.history, conventions().prices)
    }

    /// A finished turn of §13.3's example: a prompt, two calls, their results, a reply.
    fn finished_turn(n: u8) -> Vec<Vec<u8>> {
        let (a, b) = ([b'a', n], [b'b', n]);
        vec![
            chat(USER, &[b'u', n], b"", &[]),
            chat(ASSISTANT, b"", b"", &[call(&a, b"f"), call(&b, b"f")]),
            chat(TOOL, b"result one", &a, &[]),
            chat(TOOL, b"result two", &b, &[]),
            chat(ASSISTANT, b"done", b"", &[]),
        ]
    }

    fn kinds(w: &Working) -> Vec<RowKind> {
        w.history.rows.iter().map(|r| r.kind).collect()
    }

    #[test]
    fn the_spec_example_collapses_the_two_oldest_turns() {
        let mut rows = vec![chat(SYSTEM, b"sys", b"", &[])];
        for n in 1..=4 {
            rows.extend(finished_turn(n));
        }
        rows.push(chat(USER, b"u5", b"", &[]));
        rows.push(chat(ASSISTANT, b"", b"", &[call(b"c5", b"f")]));
        rows.push(chat(TOOL, b"r5", b"c5", &[]));
        let buf = request(1, &rows, &[]);
        let w = working(&buf);
        let p = w.project(2, &conventions()).expect("two turns collapse");
        assert_eq!(p.rows_left_out, 6);
        assert_eq!(p.working.history.rows.len(), 20);
        let turns: Vec<_> = p
            .collapsed
            .iter()
            .map(|c| (c.input_start, c.input_stop))
            .collect();
        assert_eq!(turns, [(1, 6), (6, 11)]);
        let outputs: Vec<_> = p
            .collapsed
            .iter()
            .map(|c| (c.output_start, c.output_stop))
            .collect();
        assert_eq!(outputs, [(1, 4), (4, 7)]);
        // The summary is protobuf's encoding of the marked assistant row.
        let text = "[Tool exchange: 2 tool call(s) \u{2014} results collapsed]";
        let mut summary = vec![0x08, ASSISTANT];
        put_len(&mut summary, 2, text.as_bytes());
        summary.extend_from_slice(&[0x40, 0x01]);
        let mut element = Vec::new();
        put_len(&mut element, 1, &summary);
        let RowBytes::Written(_) = &p.working.history.rows[2].bytes else {
            panic!("a summary is written, not copied")
        };
        let written = p
            .working
            .history
            .row_bytes(&buf, &p.working.history.rows[2]);
        assert_eq!(written, &element[..]);
        assert_eq!(p.working.tokens[2], conventions().prices.price_text(text));
        // Kept rows keep their prices; the projection re-reads as it is priced, and projects to
        // itself.
        assert_eq!(p.working.tokens[7..], w.tokens[11..]);
        let out = p.working.history_field(&buf);
        let again = working(&out);
        assert_eq!(again.tokens, p.working.tokens);
        let RowBytes::Request(s, e) = again.history.rows[2].bytes else {
            panic!("a scanned row is a range of the request")
        };
        assert_eq!(&out[s..e], &element[..]);
        assert!(again.project(2, &conventions()).is_none());
        assert!(w.project(4, &conventions()).is_none());
    }

    #[test]
    fn parse_error_feedback_stays_in_the_turn_it_interrupts() {
        let rows = [
            chat(USER, b"go", b"", &[]),
            chat(ASSISTANT, b"", b"", &[call(b"c1", b"f")]),
            chat(USER, b"[Tool call parse error] bad", b"", &[]),
            chat(TOOL, b"ok", b"c1", &[]),
            chat(USER, b"next", b"", &[]),
        ];
        let buf = request(1, &rows, &[]);
        let w = working(&buf);
        assert_eq!(w.turns(), 3);
        let p = w
            .project(0, &conventions())
            .expect("the first turn collapses");
        use RowKind::*;
        assert_eq!(kinds(&p.working), [User, Assistant, User]);
        assert_eq!(p.rows_left_out, 3);
    }

    #[test]
    fn a_turn_without_tool_activity_or_already_collapsed_is_copied() {
        let text = b"[Tool exchange: 1 tool call(s) \xe2\x80\x94 results collapsed]";
        let mut summary = chat(ASSISTANT, text, b"", &[]);
        summary.extend_from_slice(&[0x40, 0x01]);
        let rows = [
            chat(USER, b"one", b"", &[]),
            chat(SYSTEM, b"note", b"", &[]),
            chat(ASSISTANT, b"said", b"", &[]),
            chat(USER, b"two", b"", &[]),
            summary,
            chat(USER, b"three", b"", &[]),
        ];
        let w = working(&request(1, &rows, &[]));
        assert!(w.project(0, &conventions()).is_none());
    }

    #[test]
    fn a_row_the_sweep_repaired_keeps_its_calls() {
        let rows = [
            chat(USER, b"one", b"", &[]),
            chat(
                ASSISTANT,
                b"",
                b"",
                &[call(b"c1", b"f"), call(b"gone", b"f")],
            ),
            chat(TOOL, b"ok", b"c1", &[]),
            chat(ASSISTANT, b"", b"", &[call(b"c2", b"f")]),
            chat(USER, b"two", b"", &[]),
        ];
        let buf = request(1, &rows, &[]);
        let (swept, removals) = working(&buf).sweep(&buf).expect("re-reads");
        // The unanswered calls go; the repaired row still makes its kept call, so it is drained
        // and counted, not taken for a reply.
        assert_eq!(removals.len(), 2);
        assert_eq!(swept.history.rows[1].call_count(), 1);
        let p = swept.project(0, &conventions()).expect("collapses");
        assert_eq!(p.rows_left_out, 2);
        let text = "[Tool exchange: 1 tool call(s) \u{2014} results collapsed]";
        assert_eq!(p.working.tokens[1], conventions().prices.price_text(text));
    }

    #[test]
    fn a_structured_step_is_never_a_closing_reply() {
        let mut step = Vec::new();
        put_len(&mut step, 1, b"thinking aloud");
        let mut results = Vec::new();
        let mut result = Vec::new();
        put_len(&mut result, 1, b"c1");
        put_len(&mut result, 3, b"ok");
        put_len(&mut results, 1, &result);
        put_len(&mut results, 1, &result);
        let mut calls = Vec::new();
        put_len(&mut calls, 2, &call(b"c1", b"f"));
        let rows = [
            member(1, &chat(USER, b"one", b"", &[])),
            member(2, &calls),
            member(3, &results),
            member(2, &step),
            member(1, &chat(USER, b"two", b"", &[])),
        ];
        let buf = request(2, &rows, &[]);
        let p = working(&buf).project(0, &conventions()).expect("collapses");
        use RowKind::*;
        // The prompt, the summary (one call) in place of the step; the text-only step is
        // drained, not kept as a reply.
        assert_eq!(kinds(&p.working), [User, Assistant, User]);
        assert_eq!(p.rows_left_out, 3);
        let again = working(&p.working.history_field(&buf));
        assert_eq!(again.tokens, p.working.tokens);
        assert_eq!(again.history.rows[1].text_bytes, 53);
    }
}
