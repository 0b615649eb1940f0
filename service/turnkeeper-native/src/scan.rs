//! One pass over a request's wire bytes: the top-level split, the history's occurrences and
//! its messages lists read into the view of `rows.rs`, validated (framing, UTF-8, the rules of
//! docs/conventions.md) as they are read.
//!
//! Merging follows protobuf: repeated occurrences of a message field merge (last scalar wins,
//! repeated fields append), a oneof member replaces a different earlier one. How one row's
//! messages merge is `messages.rs`.
//!
//! The same pass counts the history's items for the request-item limit (`items.rs` has the
//! rules): every element of a repeated field inside the history, in every occurrence the wire
//! holds, replaced oneof members included, so the count is the one `items::crossing_field` makes
//! of the history's bytes. The request's other top-level fields are counted by `items.rs` while
//! the top level is split, and the scan stops as soon as the allowance is passed.

use crate::conventions::Conventions;
use crate::items::{self, ItemSchema};
use crate::messages::{
    chat_violations, CallsState, ChatState, Halt, Member, Placement, ResultsState, Scanned, Tally,
};
use crate::rows::{History, Marks, Row, RowBytes, RowKind, Shape};
use crate::rules::{Rule, Violations};
use crate::wire::{Field, Malformed, Reader, Result, LEN};

/// A scanned request: where its non-history fields are, and its history when it decodes.
pub struct Scan {
    /// Ranges of every top-level occurrence that is not the history (field 1, LEN).
    pub rest: Vec<(usize, usize)>,
    pub history: History,
    pub violations: Violations,
}

/// The request's history field number in every history-bearing request message.
const HISTORY_FIELD: u32 = 1;

/// The request-item limit of one request: the counting rules, the request type's index among
/// them, and how many items this request may hold.
pub struct ItemLimit<'a> {
    pub schema: &'a ItemSchema,
    pub root: usize,
    pub allowed: u64,
}

/// Why a counted scan gives no history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The bytes do not decode (the caller names the culprit).
    Malformed,
    /// The request holds more items than it may; the number of the top-level field in which
    /// the count passed the allowance, counted in wire order as `items::crossing_field` does.
    TooManyItems(u32),
}

/// Scans a request. `Err` means the bytes do not decode (the caller names the culprit).
pub fn scan(buf: &[u8], max_rows: u64, conventions: &Conventions) -> Result<Scan> {
    scan_within(buf, max_rows, conventions, None).map_err(|_| Malformed)
}

/// Scans a request under the request-item limit, refusing it exactly when
/// `items::crossing_field` would, naming the same field. The common case costs no pass of its
/// own: the history's items are counted by the scan that reads them, the other top-level fields
/// as the top level is split. When the scan stops early (the count passed, or the bytes do not
/// decode) the whole request is counted again in wire order, which is what names the field and
/// decides between the two refusals, as the Python engine's count before parsing does.
pub fn scan_counted(
    buf: &[u8],
    max_rows: u64,
    conventions: &Conventions,
    limit: &ItemLimit,
) -> std::result::Result<Scan, Refusal> {
    let halt = match scan_within(buf, max_rows, conventions, Some(limit)) {
        Ok(scanned) => return Ok(scanned),
        Err(halt) => halt,
    };
    if let Some(field) = items::crossing_field(buf, limit.schema, limit.root, limit.allowed) {
        return Err(Refusal::TooManyItems(field));
    }
    match halt {
        Halt::Malformed => Err(Refusal::Malformed),
        // The count in wire order breaks before it passes the allowance (the count of the
        // fields after the history, taken first, reached it): the bytes answer for themselves.
        Halt::Counted => scan(buf, max_rows, conventions).map_err(|_| Refusal::Malformed),
    }
}

fn scan_within(
    buf: &[u8],
    max_rows: u64,
    conventions: &Conventions,
    limit: Option<&ItemLimit>,
) -> Scanned<Scan> {
    let mut top = Reader::new(buf, 0, buf.len());
    let mut rest = Vec::new();
    let mut history_payloads = Vec::new();
    let mut items = limit.map_or(Tally::UNLIMITED, |l| Tally { left: l.allowed });
    while !top.at_end() {
        let field = top.next_message_field(0)?;
        if field.number == HISTORY_FIELD && field.wire_type == LEN {
            history_payloads.push(field);
        } else {
            rest.push((field.start, field.end));
            if let Some(l) = limit {
                items::count_top_field(buf, l.schema, l.root, &field, &mut items.left)
                    .map_err(|_| Halt::Counted)?;
            }
        }
    }
    let mut scanner = Scanner::new(buf, conventions, None);
    scanner.items = items;
    let present = !history_payloads.is_empty();
    for payload in &history_payloads {
        scanner.read_history(payload)?;
    }
    let lists = std::mem::take(&mut scanner.list_payloads);
    for list in &lists {
        scanner.read_list(list)?;
    }
    let Scanner {
        history,
        mut violations,
        ..
    } = scanner;
    if !present || history.shape.is_none() {
        violations = Violations::only(Rule::HistoryRequired, 0);
    } else if history.rows.len() as u64 > max_rows {
        // Only the size is reported: the rows of a too-large history are not inspected.
        violations = Violations::only(Rule::TooManyRows, history.rows.len() as u64);
    }
    Ok(Scan {
        rest,
        history,
        violations,
    })
}

struct Scanner<'a> {
    buf: &'a [u8],
    conventions: &'a Conventions,
    history: History,
    /// Payloads of the current shape's list occurrences (merged in order).
    list_payloads: Vec<Field>,
    violations: Violations,
    /// Where the next row may stand (the breadcrumb, the summary row).
    placement: Placement,
    items: Tally,
}

impl<'a> Scanner<'a> {
    fn new(buf: &'a [u8], conventions: &'a Conventions, shape: Option<Shape>) -> Scanner<'a> {
        Scanner {
            buf,
            conventions,
            history: History {
                shape,
                rows: Vec::new(),
                history_unknown: Vec::new(),
                list_unknown: Vec::new(),
                ids: Vec::new(),
                written: Vec::new(),
            },
            list_payloads: Vec::new(),
            violations: Violations::new(conventions.max_named_violations),
            placement: Placement::START,
            items: Tally::UNLIMITED,
        }
    }

    /// A History occurrence (depth 1): its shape fields are collected, the rest kept as unknown.
    fn read_history(&mut self, occurrence: &Field) -> Scanned<()> {
        let mut reader = Reader::new(self.buf, occurrence.payload_start, occurrence.end);
        while !reader.at_end() {
            let field = reader.next_message_field(1)?;
            let shape = match (field.number, field.wire_type) {
                (1, LEN) => Shape::Chat,
                (2, LEN) => Shape::Conversation,
                _ => {
                    self.history.history_unknown.push((field.start, field.end));
                    continue;
                }
            };
            if self.history.shape != Some(shape) {
                // Another oneof member replaces the earlier one, rows and unknown fields too;
                // protobuf still parsed the earlier one, so its bytes must decode.
                if let Some(replaced) = self.history.shape {
                    self.check_replaced(replaced)?;
                }
                self.history.shape = Some(shape);
                self.list_payloads.clear();
            }
            self.list_payloads.push(field);
        }
        Ok(())
    }

    /// Reads the list occurrences of a replaced shape into a scratch history, for their errors
    /// and their items (protobuf parsed them).
    fn check_replaced(&mut self, shape: Shape) -> Scanned<()> {
        let mut scratch = Scanner::new(self.buf, self.conventions, Some(shape));
        scratch.items = self.items;
        for list in &self.list_payloads {
            scratch.read_list(list)?;
        }
        self.items = scratch.items;
        Ok(())
    }

    /// A ChatHistory or ConversationHistory occurrence (depth 2).
    fn read_list(&mut self, occurrence: &Field) -> Scanned<()> {
        let mut reader = Reader::new(self.buf, occurrence.payload_start, occurrence.end);
        while !reader.at_end() {
            let field = reader.next_message_field(2)?;
            if field.number != 1 || field.wire_type != LEN {
                self.history.list_unknown.push((field.start, field.end));
                continue;
            }
            self.items.take(1)?;
            let i = self.history.rows.len();
            let row = match self.history.shape {
                Some(Shape::Conversation) => self.conversation_row(&field, i)?,
                _ => {
                    let mut chat = ChatState::new(self.history.ids.len());
                    let ids = &mut self.history.ids;
                    chat.merge(self.buf, &field, 3, ids, &mut self.items)?;
                    let kind = chat.kind(self.buf, self.conventions);
                    let slots = self.placement.next(kind, chat.pinned());
                    chat_violations(
                        self.conventions,
                        &chat,
                        kind,
                        || format!("history.chat.messages[{i}]"),
                        slots,
                        &mut self.violations,
                    );
                    chat.finish(
                        self.buf,
                        self.conventions,
                        kind,
                        &mut self.history.ids,
                        &field,
                    )
                }
            };
            self.history.rows.push(row);
        }
        Ok(())
    }

    /// A ConversationMessage occurrence (depth 3); its member is one level deeper.
    fn conversation_row(&mut self, occurrence: &Field, i: usize) -> Scanned<Row> {
        let buf = self.buf;
        let conventions = self.conventions;
        let out = &mut self.violations;
        let placement = &mut self.placement;
        let path = || format!("history.conversation.messages[{i}]");
        let ids = &mut self.history.ids;
        let items = &mut self.items;
        let mark = ids.len();
        let mut member = Member::None;
        let mut reader = Reader::new(buf, occurrence.payload_start, occurrence.end);
        while !reader.at_end() {
            let field = reader.next_message_field(3)?;
            if field.wire_type != LEN || !(1..=3).contains(&field.number) {
                continue;
            }
            let same = matches!(
                (&member, field.number),
                (Member::Chat(_), 1) | (Member::Calls(_), 2) | (Member::Results(_), 3)
            );
            if !same {
                ids.truncate(mark);
                member = match field.number {
                    1 => Member::Chat(ChatState::new(mark)),
                    2 => Member::Calls(CallsState::new(mark)),
                    _ => Member::Results(ResultsState::new(mark)),
                };
            }
            match &mut member {
                Member::Chat(chat) => chat.merge(buf, &field, 4, ids, items)?,
                Member::Calls(calls) => calls.merge(buf, &field, 4, ids, items)?,
                Member::Results(results) => results.merge(buf, &field, 4, ids, items)?,
                Member::None => {}
            }
        }
        Ok(match member {
            Member::Chat(chat) => {
                let chat_path = || format!("{}.chat", path());
                let kind = chat.kind(buf, conventions);
                let slots = placement.next(kind, chat.pinned());
                chat_violations(conventions, &chat, kind, chat_path, slots, out);
                chat.finish(buf, conventions, kind, ids, occurrence)
            }
            Member::Calls(calls) => {
                placement.next(RowKind::Assistant, false);
                calls.violations(|| format!("{}.assistant_tool_calls", path()), out);
                calls.finish(occurrence)
            }
            Member::Results(results) => {
                placement.next(RowKind::Tool, false);
                results.violations(|| format!("{}.tool_results", path()), out);
                results.finish(occurrence)
            }
            Member::None => {
                placement.next(RowKind::Assistant, false);
                out.add(Rule::MessageRequired, || format!("{}.message", path()));
                Row {
                    kind: RowKind::Assistant,
                    provider_rows: 1,
                    text_bytes: 0,
                    text_tokens: 0,
                    marker_images: 0,
                    attachments: 0,
                    bytes: RowBytes::Request(occurrence.start, occurrence.end),
                    calls: (mark, mark),
                    results: (mark, mark),
                    marks: Marks::default(),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{call, chat, conventions, member, request, ASSISTANT, SYSTEM, TOOL, USER};
    use crate::wire::put_len;

    fn kinds(scan: &Scan) -> Vec<RowKind> {
        scan.history.rows.iter().map(|r| r.kind).collect()
    }

    fn rules(scan: &Scan) -> Vec<(Rule, String)> {
        let named = &scan.violations.named;
        named.iter().map(|v| (v.rule, v.path.clone())).collect()
    }

    #[test]
    fn a_chat_history_becomes_rows_with_their_ranges_and_ids() {
        let rows = [
            chat(SYSTEM, b"be brief", b"", &[]),
            chat(USER, b"hi", b"", &[]),
            chat(ASSISTANT, b"", b"", &[call(b"c1", b"f")]),
            chat(TOOL, b"ok", b"c1", &[]),
            chat(USER, b"[Tool results] more", b"", &[]),
        ];
        let buf = request(1, &rows, &[0x10, 0x01]);
        let scan = scan(&buf, 10, &conventions()).expect("decodes");
        use RowKind::*;
        assert_eq!(kinds(&scan), [System, User, Assistant, Tool, Carrier]);
        assert_eq!(scan.violations.total, 0);
        assert_eq!(scan.history.shape, Some(Shape::Chat));
        // The mode field after the history is the rest, by its range.
        assert_eq!(scan.rest, [(buf.len() - 2, buf.len())]);
        let id = |r: (usize, usize)| &buf[r.0..r.1];
        let h = &scan.history;
        assert_eq!(id(h.ids[h.rows[2].calls.0]), b"c1");
        assert_eq!(id(h.ids[h.rows[3].results.0]), b"c1");
        // A row's range is its whole occurrence in the list: it re-reads as one message.
        let RowBytes::Request(s, e) = h.rows[1].bytes else {
            panic!("a scanned row is a range of the request")
        };
        assert_eq!(buf[s], 0x0a);
        assert_eq!(&buf[e - 2..e], b"hi");
        // "hi" and "be brief": ceil(bytes / 4).
        assert_eq!((h.rows[0].text_tokens, h.rows[1].text_tokens), (2, 1));
    }

    #[test]
    fn no_history_and_too_many_rows_are_the_only_violation() {
        let scan_of = |buf: &[u8], max| scan(buf, max, &conventions()).expect("decodes");
        let none = scan_of(&[0x10, 0x01], 10);
        assert_eq!(
            rules(&none),
            [(Rule::HistoryRequired, "history".to_owned())]
        );
        let rows = [chat(0, b"", b"", &[]), chat(USER, b"a", b"", &[])];
        let big = scan_of(&request(1, &rows, &[]), 1);
        assert_eq!(rules(&big), [(Rule::TooManyRows, "history".to_owned())]);
        assert_eq!(big.violations.named[0].count, 2);
    }

    #[test]
    fn violations_are_named_by_their_field_paths_in_request_order() {
        let mut results = Vec::new();
        let mut result = Vec::new();
        put_len(&mut result, 3, b"no id");
        put_len(&mut results, 1, &result);
        let messages = [
            member(1, &chat(9, b"x", b"", &[])),
            member(3, &results),
            Vec::new(),
            member(2, &{
                let mut step = Vec::new();
                put_len(&mut step, 2, &call(b"", b"f"));
                step
            }),
        ];
        let scan = scan(&request(2, &messages, &[]), 10, &conventions()).expect("decodes");
        let m = "history.conversation.messages";
        assert_eq!(
            rules(&scan),
            [
                (Rule::Role, format!("{m}[0].chat.role")),
                (
                    Rule::ResultId,
                    format!("{m}[1].tool_results.results[0].tool_call_id")
                ),
                (Rule::MessageRequired, format!("{m}[2].message")),
                (
                    Rule::CallId,
                    format!("{m}[3].assistant_tool_calls.tool_calls[0].id")
                ),
            ]
        );
        assert_eq!(scan.history.rows[1].provider_rows, 1);
    }

    #[test]
    fn a_replaced_shape_must_still_decode() {
        // A chat shape whose row is not UTF-8, replaced by a valid conversation shape.
        let mut history = Vec::new();
        let mut list = Vec::new();
        put_len(&mut list, 1, &chat(USER, b"\xff", b"", &[]));
        put_len(&mut history, 1, &list);
        let mut list = Vec::new();
        put_len(&mut list, 1, &member(1, &chat(USER, b"ok", b"", &[])));
        put_len(&mut history, 2, &list);
        let mut buf = Vec::new();
        put_len(&mut buf, 1, &history);
        assert!(scan(&buf, 10, &conventions()).is_err());
        // Without the broken first shape it decodes, and the later shape wins.
        let good = request(2, &[member(1, &chat(USER, b"ok", b"", &[]))], &[]);
        let scanned = scan(&good, 10, &conventions()).expect("decodes");
        assert_eq!(scanned.history.shape, Some(Shape::Conversation));
    }

    #[test]
    fn broken_framing_does_not_decode() {
        let buf = request(1, &[chat(USER, b"hello", b"", &[])], &[]);
        assert!(scan(&buf[..buf.len() - 1], 10, &conventions()).is_err());
    }

    #[test]
    fn pins_and_the_summary_row_have_their_places() {
        let mark = |mut row: Vec<u8>, field: u8| {
            row.extend_from_slice(&[field << 3, 0x01]);
            row
        };
        let crumb = || mark(chat(USER, b"[cut]", b"", &[]), 6);
        let rows = [
            chat(SYSTEM, b"s", b"", &[]),
            mark(chat(USER, b"so far", b"", &[]), 10),
            mark(chat(USER, b"task", b"", &[]), 9),
            mark(chat(ASSISTANT, b"ok", b"", &[]), 9),
            crumb(),
            mark(chat(USER, b"late", b"", &[]), 10),
            chat(USER, b"next", b"", &[]),
            crumb(),
        ];
        let scanned = scan(&request(1, &rows, &[]), 20, &conventions()).expect("decodes");
        let m = "history.chat.messages";
        assert_eq!(
            rules(&scanned),
            [
                (Rule::Pinned, format!("{m}[3].pinned")),
                (Rule::Summary, format!("{m}[5].summary")),
                (Rule::BreadcrumbPlace, format!("{m}[7].breadcrumb")),
            ]
        );
        use RowKind::*;
        assert_eq!(
            kinds(&scanned),
            [System, Summary, User, Assistant, Breadcrumb, Summary, User, Breadcrumb]
        );
        assert!(scanned.history.rows[2].marks.pinned);
        // After an unpinned turn no breadcrumb has a place.
        let rows = [chat(USER, b"u", b"", &[]), crumb()];
        let scan = scan(
            &request(2, &rows.map(|r| member(1, &r)), &[]),
            20,
            &conventions(),
        );
        let named = rules(&scan.expect("decodes"));
        let path = "history.conversation.messages[1].chat.breadcrumb";
        assert_eq!(named, [(Rule::BreadcrumbPlace, path.to_owned())]);
    }
}
