//! §13.4 clearing (`turnkeeper/core/clearing.py`): the running turn's oldest tool results are
//! cleared one at a time, never the newest `R`, until the history fits. A cleared row is written
//! anew (its fields in protobuf's order, by number); every other row stays a slice.

use crate::conventions::Conventions;
use crate::pricing::text_tokens;
use crate::rows::{Row, RowBytes, RowKind, Shape};
use crate::wire::{self, put_len, Field, Reader, LEN};
use crate::working::{winning_member, Working};

/// ChatMessage fields a cleared row rewrites.
const CHAT_CONTENT: u32 = 2;
const CHAT_ATTACHMENTS: u32 = 5;
/// ToolResult fields a cleared result rewrites.
const RESULT_CONTENT: u32 = 3;
const RESULT_ATTACHMENTS: u32 = 4;
/// ConversationMessage members.
const CHAT_MEMBER: u32 = 1;
const RESULTS_MEMBER: u32 = 3;

/// One tool result as a row holds it: its content's range in the row's message bytes, the rest
/// of its priced text, its attachments.
struct ToolResult {
    content: (usize, usize),
    other_bytes: u64,
    attachments: u32,
}

/// A tool row or carrier, re-read: its message (the member's occurrences merged into one body)
/// and its results in order.
struct ResultRow {
    /// The ConversationMessage member (0 in the ChatMessage shape).
    member: u32,
    body: Vec<u8>,
    /// The ConversationMessage's other fields (unknown ones), kept after the member.
    rest: Vec<u8>,
    results: Vec<ToolResult>,
}

impl Working {
    /// §13.4 with `R = keep_newest`: the cleared history and the number of results cleared, or
    /// None when none is.
    pub fn clear_tool_results(
        &self,
        buf: &[u8],
        keep_newest: u64,
        stop_tokens: u64,
        conventions: &Conventions,
    ) -> wire::Result<Option<(Working, u64)>> {
        let mut total = self.total_tokens();
        let from = self.running_turn_from();
        let rows = &self.history.rows;
        let results: u64 = rows[from..].iter().map(results_in).sum();
        let clearable = results.saturating_sub(keep_newest);
        if clearable == 0 || total <= stop_tokens {
            return Ok(None);
        }
        let current_from = self.current_turn_from();
        let framing = self.prices.framing_tokens;
        let per_image = self.prices.tokens_per_image;
        let mut out = self.clone();
        let mut seen = 0u64;
        let mut cleared = 0u64;
        for (i, row) in rows.iter().enumerate().skip(from) {
            if results_in(row) == 0 {
                continue;
            }
            if seen >= clearable || total <= stop_tokens {
                break;
            }
            let read = ResultRow::read(self.history.row_bytes(buf, row), row, self.history.shape)?;
            let sent = i >= current_from;
            let mut texts: Vec<Option<String>> = Vec::with_capacity(read.results.len());
            let mut repriced = row.clone();
            for result in &read.results {
                let clear = seen < clearable && total > stop_tokens;
                seen += 1;
                let content = read.content(result);
                let text = clear
                    .then(|| cleared_text(content, row.kind, conventions))
                    .flatten();
                let Some(text) = text else {
                    texts.push(None);
                    continue;
                };
                let images = if sent {
                    u64::from(result.attachments)
                } else {
                    0
                };
                let before = text_tokens(result.other_bytes + content.len() as u64);
                let after = text_tokens(result.other_bytes + text.len() as u64);
                if after >= before + per_image * images {
                    texts.push(None);
                    continue;
                }
                total -= before + per_image * images - after;
                repriced.text_bytes =
                    repriced.text_bytes - content.len() as u64 + text.len() as u64;
                repriced.text_tokens = repriced.text_tokens - before + after;
                repriced.attachments -= result.attachments;
                cleared += 1;
                texts.push(Some(text));
            }
            if texts.iter().all(Option::is_none) {
                continue;
            }
            repriced.bytes = RowBytes::Owned(read.write(&texts).into());
            let images = u64::from(repriced.marker_images)
                + if sent {
                    u64::from(repriced.attachments)
                } else {
                    0
                };
            out.images[i] = images;
            out.tokens[i] = repriced.text_tokens
                + framing * u64::from(repriced.provider_rows)
                + per_image * images;
            out.history.rows[i] = repriced;
        }
        Ok((cleared > 0).then_some((out, cleared)))
    }

    /// Where the running turn starts (§13.4): at the last retention boundary; without one, after
    /// the leading system rows and the breadcrumb that follows them (§9's prefix).
    fn running_turn_from(&self) -> usize {
        let rows = &self.history.rows;
        if let Some(i) = rows.iter().rposition(Row::is_retention_boundary) {
            return i;
        }
        let system = self.system_rows();
        let crumb = rows
            .get(system)
            .is_some_and(|r| r.kind == RowKind::Breadcrumb);
        system + usize::from(crumb)
    }
}

/// The tool results a row holds: each result of a tool row, a carrier's one.
fn results_in(row: &Row) -> u64 {
    match row.kind {
        RowKind::Tool => u64::from(row.provider_rows),
        RowKind::Carrier => 1,
        _ => 0,
    }
}

/// The text a result is cleared to, or None when it is cleared already (sent back by a runtime
/// that keeps what it was given).
fn cleared_text(content: &str, kind: RowKind, conventions: &Conventions) -> Option<String> {
    let (before, after) = &conventions.cleared_result;
    let carrier_head = (kind == RowKind::Carrier).then(|| {
        let mut head = conventions.tool_results_prefix.clone();
        head.push('\n');
        head
    });
    let head = carrier_head.as_deref().unwrap_or("");
    let already = content
        .strip_prefix(head)
        .and_then(|c| c.strip_prefix(before.as_str()))
        .and_then(|c| c.strip_suffix(after.as_str()))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if already {
        return None;
    }
    let n = content.chars().count();
    Some(format!("{head}{before}{n}{after}"))
}

impl ResultRow {
    /// Re-reads a tool row or carrier (`bytes`: its whole occurrence in the messages list).
    fn read(bytes: &[u8], row: &Row, shape: Option<Shape>) -> wire::Result<ResultRow> {
        let occurrence = Reader::new(bytes, 0, bytes.len()).next_message_field(0)?;
        let (member, payloads, rest) = if shape == Some(Shape::Conversation) {
            let (member, payloads) = winning_member(bytes, &occurrence)?;
            (member, payloads, other_fields(bytes, &occurrence)?)
        } else {
            (0, vec![occurrence], Vec::new())
        };
        let mut body = Vec::with_capacity(occurrence.end - occurrence.payload_start);
        for p in &payloads {
            body.extend_from_slice(p.payload(bytes));
        }
        let mut results = Vec::new();
        if member == RESULTS_MEMBER {
            let mut reader = Reader::new(&body, 0, body.len());
            while !reader.at_end() {
                let f = reader.next_message_field(0)?;
                if f.wire_type == LEN && f.number == 1 {
                    results.push(read_result(&body, &f)?);
                }
            }
        } else {
            // A chat tool row or carrier: its content is the last one; the rest of its priced
            // text (tool-call id, calls) is the row's text without it.
            let content = last_len_field(&body, 0, body.len(), CHAT_CONTENT)?;
            results.push(ToolResult {
                content,
                other_bytes: row.text_bytes - (content.1 - content.0) as u64,
                attachments: row.attachments,
            });
        }
        Ok(ResultRow {
            member,
            body,
            rest,
            results,
        })
    }

    fn content(&self, result: &ToolResult) -> &str {
        // Validated as UTF-8 by the scan; a failure here is a bug and reads as empty.
        std::str::from_utf8(&self.body[result.content.0..result.content.1]).unwrap_or_default()
    }

    /// The row's new occurrence: `texts[j]` replaces result j's content when given.
    fn write(&self, texts: &[Option<String>]) -> Vec<u8> {
        let body = &self.body;
        let message = if self.member == RESULTS_MEMBER {
            let mut out = Vec::with_capacity(body.len());
            let mut reader = Reader::new(body, 0, body.len());
            let mut j = 0;
            while let Some(f) = next_field(&mut reader) {
                let text = (f.wire_type == LEN && f.number == 1).then(|| {
                    j += 1;
                    texts[j - 1].as_deref()
                });
                match text.flatten() {
                    Some(text) => {
                        let result = rewritten(body, &f, RESULT_CONTENT, RESULT_ATTACHMENTS, text);
                        put_len(&mut out, 1, &result);
                    }
                    None => out.extend_from_slice(&body[f.start..f.end]),
                }
            }
            out
        } else {
            let whole = Field {
                number: 0,
                wire_type: LEN,
                start: 0,
                end: body.len(),
                value: 0,
                payload_start: 0,
            };
            let text = texts[0].as_deref().unwrap_or_default();
            rewritten(body, &whole, CHAT_CONTENT, CHAT_ATTACHMENTS, text)
        };
        let mut element = Vec::with_capacity(message.len() + self.rest.len() + 12);
        if self.member == 0 {
            put_len(&mut element, 1, &message);
        } else {
            let mut inner = Vec::with_capacity(message.len() + self.rest.len() + 6);
            put_len(&mut inner, self.member, &message);
            inner.extend_from_slice(&self.rest);
            put_len(&mut element, 1, &inner);
        }
        element
    }
}

/// The next field of a body the scan has read already (so it decodes).
fn next_field(reader: &mut Reader) -> Option<Field> {
    if reader.at_end() {
        return None;
    }
    reader.next_message_field(0).ok()
}

/// A ConversationMessage's fields other than its members, in order.
fn other_fields(bytes: &[u8], occurrence: &Field) -> wire::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut reader = Reader::new(bytes, occurrence.payload_start, occurrence.end);
    while !reader.at_end() {
        let f = reader.next_message_field(0)?;
        let is_member = f.wire_type == LEN && (CHAT_MEMBER..=RESULTS_MEMBER).contains(&f.number);
        if !is_member {
            out.extend_from_slice(&bytes[f.start..f.end]);
        }
    }
    Ok(out)
}

/// The payload range of the last LEN field `number` in `buf[start..end]` (empty when absent).
fn last_len_field(
    buf: &[u8],
    start: usize,
    end: usize,
    number: u32,
) -> wire::Result<(usize, usize)> {
    let mut found = (start, start);
    let mut reader = Reader::new(buf, start, end);
    while !reader.at_end() {
        let f = reader.next_message_field(0)?;
        if f.wire_type == LEN && f.number == number {
            found = (f.payload_start, f.end);
        }
    }
    Ok(found)
}

/// One ToolResult: tool_call_id (1) and content (3) are priced, tool_name never is.
fn read_result(body: &[u8], f: &Field) -> wire::Result<ToolResult> {
    let mut id = 0;
    let mut content = (f.payload_start, f.payload_start);
    let mut attachments = 0;
    let mut reader = Reader::new(body, f.payload_start, f.end);
    while !reader.at_end() {
        let g = reader.next_message_field(0)?;
        if g.wire_type != LEN {
            continue;
        }
        match g.number {
            1 => id = g.end - g.payload_start,
            RESULT_CONTENT => content = (g.payload_start, g.end),
            RESULT_ATTACHMENTS => attachments += 1,
            _ => {}
        }
    }
    Ok(ToolResult {
        content,
        other_bytes: id as u64,
        attachments,
    })
}

/// The message `f` (a payload in `body`) with `text` as its content and no attachments, its
/// fields in protobuf's order: those before the content by number, the content, the rest.
fn rewritten(body: &[u8], f: &Field, content: u32, attachments: u32, text: &str) -> Vec<u8> {
    let mut before = Vec::with_capacity(f.end - f.payload_start + text.len());
    let mut after = Vec::new();
    let mut reader = Reader::new(body, f.payload_start, f.end);
    while let Some(g) = next_field(&mut reader) {
        let raw = &body[g.start..g.end];
        if g.wire_type == LEN && (g.number == content || g.number == attachments) {
            continue;
        }
        if g.number < content {
            before.extend_from_slice(raw);
        } else {
            after.extend_from_slice(raw);
        }
    }
    put_len(&mut before, content, text.as_bytes());
    before.extend_from_slice(&after);
    before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::scan;
    use crate::testing::{call, chat, conventions, member, request, ASSISTANT, TOOL, USER};

    fn working(buf: &[u8]) -> Working {
        let scanned = scan(buf, 1000, &conventions()).expect("decodes");
        assert_eq!(scanned.violations.total, 0);
        Working::of(scanned.history, conventions().prices)
    }

    fn content_of(w: &Working, buf: &[u8], i: usize, kind: RowKind) -> String {
        let row = &w.history.rows[i];
        let read =
            ResultRow::read(w.history.row_bytes(buf, row), row, w.history.shape).expect("reads");
        assert_eq!(row.kind, kind);
        read.content(&read.results[0]).to_owned()
    }

    #[test]
    fn the_oldest_results_are_cleared_never_the_newest() {
        let mut with_image = chat(TOOL, "é".repeat(40).as_bytes(), b"c1", &[]);
        let mut attachment = Vec::new();
        put_len(&mut attachment, 1, b"/a.png");
        put_len(&mut with_image, 5, &attachment);
        let rows = [
            chat(USER, b"go", b"", &[]),
            chat(ASSISTANT, b"", b"", &[call(b"c1", b"f"), call(b"c2", b"f")]),
            with_image,
            chat(
                USER,
                format!("[Tool results] {}", "z".repeat(285)).as_bytes(),
                b"",
                &[],
            ),
            chat(TOOL, &[b'x'; 400], b"c2", &[]),
        ];
        let buf = request(1, &rows, &[]);
        let w = working(&buf);
        let (cleared, n) = w
            .clear_tool_results(&buf, 1, 0, &conventions())
            .expect("reads")
            .expect("clears");
        assert_eq!(n, 2);
        let text = "[Tool result cleared to fit the context window: 40 characters]";
        assert_eq!(content_of(&cleared, &buf, 2, RowKind::Tool), text);
        assert_eq!(cleared.images[2], 0);
        let carrier = content_of(&cleared, &buf, 3, RowKind::Carrier);
        let expected =
            "[Tool results]\n[Tool result cleared to fit the context window: 300 characters]";
        assert_eq!(carrier, expected);
        // The newest result is kept; the output re-reads as it is priced.
        assert_eq!(cleared.tokens[4], w.tokens[4]);
        let out = cleared.history_field(&buf);
        let again = working(&out);
        assert_eq!(again.tokens, cleared.tokens);
        assert_eq!(again.images, cleared.images);
        // Cleared results are not cleared again.
        let more = again.clear_tool_results(&out, 1, 0, &conventions());
        assert!(more.expect("reads").is_none());
        // A history within the stop clears nothing.
        let total = w.total_tokens();
        assert!(w
            .clear_tool_results(&buf, 0, total, &conventions())
            .expect("reads")
            .is_none());
    }

    #[test]
    fn each_result_of_a_tool_results_row_is_cleared_alone() {
        let mut results = Vec::new();
        for (id, content) in [(&b"c1"[..], &[b'y'; 200][..]), (b"c2", b"short")] {
            let mut result = Vec::new();
            put_len(&mut result, 1, id);
            put_len(&mut result, 2, b"f");
            put_len(&mut result, 3, content);
            put_len(&mut results, 1, &result);
        }
        let mut calls = Vec::new();
        put_len(&mut calls, 2, &call(b"c1", b"f"));
        put_len(&mut calls, 2, &call(b"c2", b"f"));
        let rows = [
            member(1, &chat(USER, b"go", b"", &[])),
            member(2, &calls),
            member(3, &results),
        ];
        let buf = request(2, &rows, &[]);
        let w = working(&buf);
        // Both are candidates; the short one's cleared form is not cheaper, so it is skipped.
        let (cleared, n) = w
            .clear_tool_results(&buf, 0, 0, &conventions())
            .expect("reads")
            .expect("clears");
        assert_eq!(n, 1);
        let row = &cleared.history.rows[2];
        let read = ResultRow::read(
            cleared.history.row_bytes(&buf, row),
            row,
            cleared.history.shape,
        )
        .expect("reads");
        let text = "[Tool result cleared to fit the context window: 200 characters]";
        assert_eq!(read.content(&read.results[0]), text);
        assert_eq!(read.content(&read.results[1]), "short");
        let again = working(&cleared.history_field(&buf));
        assert_eq!(again.tokens, cleared.tokens);
        assert_eq!(again.history.rows[2].provider_rows, 2);
    }
}
