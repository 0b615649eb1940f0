//! The §13.1 projection (`turnkeeper/core/projection.py`): every turn older than the newest
//! `K + 1` retention turns is sent as its prompt, one tool-exchange summary in place of its tool
//! activity, and its closing reply. Kept rows stay slices of the request and keep their prices
//! (a collapsed turn lies before the last real user row, so no kept row changes turn); only the
//! summaries are written and priced.

use crate::conventions::Conventions;
use crate::pricing::text_tokens;
use crate::rows::{History, Marks, Row, RowBytes, RowKind, Shape};
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
    /// The span `start..stop`, or None when the turn is copied unchanged (nothing drained, no
    /// tool activity drained, or exactly one tool-exchange summary drained).
    fn collapsing(rows: &[Row], start: usize, stop: usize) -> Option<Span> {
        let closing = (stop > start && is_closing_reply(&rows[stop - 1])).then_some(stop - 1);
        let drained_stop = closing.unwrap_or(stop);
        let mut drained = 0;
        let mut first: Option<&Row> = None;
        let mut activity = false;
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
            activity = activity || calls > 0 || results > 0;
        }
        let first = first?;
        if !activity || (drained == 1 && first.marks.exchange_summary) {
            return None;
        }
        let n = if calls > 0 { calls } else { results.max(1) };
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
        let mut out = Projected::with_capacity(rows.len());
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
    /// protobuf encodes it (fields by number), and its price.
    fn exchange_summary_row(&self, calls: usize, conventions: &Conventions) -> (Row, u64) {
        let (before, after) = &conventions.exchange_summary;
        let text = format!("{before}{calls}{after}");
        let mut chat = Vec::with_capacity(text.len() + 8);
        // An enum is an int32 on the wire: a negative one takes ten bytes, as protobuf writes it.
        put_uint(&mut chat, 1, i64::from(conventions.roles.assistant) as u64);
        put_len(&mut chat, 2, text.as_bytes());
        put_uint(&mut chat, 8, 1);
        let mut bytes = Vec::with_capacity(chat.len() + 8);
        if self.history.shape == Some(Shape::Conversation) {
            let mut member = Vec::with_capacity(chat.len() + 4);
            put_len(&mut member, 1, &chat);
            put_len(&mut bytes, 1, &member);
        } else {
            put_len(&mut bytes, 1, &chat);
        }
        let nbytes = text.len() as u64;
        let end = self.history.ids.len();
        let row = Row {
            kind: RowKind::Assistant,
            provider_rows: 1,
            text_bytes: nbytes,
            text_tokens: text_tokens(nbytes),
            marker_images: 0,
            attachments: 0,
            bytes: RowBytes::Owned(bytes),
            calls: (end, end),
            results: (end, end),
            marks: Marks {
                exchange_summary: true,
                ..Marks::default()
            },
        };
        (row, self.prices.price_text(&text))
    }
}

/// The projection's rows and prices as they are built.
struct Projected {
    rows: Vec<Row>,
    tokens: Vec<u64>,
    images: Vec<u64>,
}

impl Projected {
    fn with_capacity(n: usize) -> Projected {
        Projected {
            rows: Vec::with_capacity(n),
            tokens: Vec::with_capacity(n),
            images: Vec::with_capacity(n),
        }
    }

    /// Rows `start..stop` of `from`, with their prices.
    fn copy(&mut self, from: &Working, start: usize, stop: usize) {
        self.rows.extend_from_slice(&from.history.rows[start..stop]);
        self.tokens.extend_from_slice(&from.tokens[start..stop]);
        self.images.extend_from_slice(&from.images[start..stop]);
    }

    fn push_summary(&mut self, from: &Working, calls: usize, conventions: &Conventions) {
        let (row, tokens) = from.exchange_summary_row(calls, conventions);
        self.rows.push(row);
        self.tokens.push(tokens);
        self.images.push(0);
    }
}
