//! One pass over a request's wire bytes: the top-level split, the history's rows validated
//! (framing, UTF-8, the rules of docs/conventions.md) and reduced to the row view of
//! `turnkeeper/core/rows.py`, each row remembered as its byte range in the request.
//!
//! Merging follows protobuf: repeated occurrences of a message field merge (last scalar wins,
//! repeated fields append), a oneof member replaces a different earlier one.
//!
//! The same pass counts the history's items for the request-item limit (`items.rs` has the
//! rules): every element of a repeated field inside the history, in every occurrence the wire
//! holds, replaced oneof members included, so the count is the one `items::crossing_field` makes
//! of the history's bytes. The request's other top-level fields are counted by `items.rs` while
//! the top level is split, and the scan stops as soon as the allowance is passed.

use crate::conventions::Conventions;
use crate::items::{self, ItemSchema};
use crate::pricing::{strip_sent_images, text_tokens};
use crate::wire::{self, Field, Malformed, Reader, Result, LEN, VARINT};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    System,
    User,
    Carrier,
    Breadcrumb,
    Assistant,
    Tool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Chat,
    Conversation,
}

/// Where a row's bytes are: a range of the request, or bytes the engine wrote (breadcrumb,
/// repaired row). Either is the row's whole occurrence in the messages list, tag included.
#[derive(Debug, Clone)]
pub enum RowBytes {
    Request(usize, usize),
    Owned(Vec<u8>),
}

/// One row of the view; `calls` and `results` index `History::ids`.
#[derive(Debug, Clone)]
pub struct Row {
    pub kind: RowKind,
    pub provider_rows: u32,
    pub text_bytes: u64,
    pub text_tokens: u64,
    pub marker_images: u32,
    pub attachments: u32,
    pub bytes: RowBytes,
    /// Tool-call ids this row calls (assistant rows) and tool-result ids it carries.
    pub calls: (usize, usize),
    pub results: (usize, usize),
}

impl Row {
    pub fn is_turn_boundary(&self) -> bool {
        self.kind == RowKind::User
    }
}

/// The history rules of docs/conventions.md, by the names both engines report them under. The
/// Python side's enum (`HistoryRule`) holds each rule's reason and description; a test checks
/// that the two sets of names are equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    HistoryRequired,
    TooManyRows,
    Role,
    ToolCallId,
    ToolCalls,
    CallId,
    CallName,
    Attachments,
    BreadcrumbRole,
    BreadcrumbPlace,
    ResultsRequired,
    ResultId,
    MessageRequired,
}

impl Rule {
    pub const ALL: [Rule; 13] = [
        Rule::HistoryRequired,
        Rule::TooManyRows,
        Rule::Role,
        Rule::ToolCallId,
        Rule::ToolCalls,
        Rule::CallId,
        Rule::CallName,
        Rule::Attachments,
        Rule::BreadcrumbRole,
        Rule::BreadcrumbPlace,
        Rule::ResultsRequired,
        Rule::ResultId,
        Rule::MessageRequired,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Rule::HistoryRequired => "history_required",
            Rule::TooManyRows => "too_many_rows",
            Rule::Role => "role",
            Rule::ToolCallId => "tool_call_id",
            Rule::ToolCalls => "tool_calls",
            Rule::CallId => "call_id",
            Rule::CallName => "call_name",
            Rule::Attachments => "attachments",
            Rule::BreadcrumbRole => "breadcrumb_role",
            Rule::BreadcrumbPlace => "breadcrumb_place",
            Rule::ResultsRequired => "results_required",
            Rule::ResultId => "result_id",
            Rule::MessageRequired => "message_required",
        }
    }
}

/// A violation of a history rule at `path`; `count` is the row count of `TooManyRows`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    pub path: String,
    pub count: u64,
}

/// The first `cap` violations in request order, and how many there are.
#[derive(Debug)]
pub struct Violations {
    pub named: Vec<Violation>,
    pub total: u64,
    cap: usize,
}

impl Violations {
    fn new(cap: usize) -> Violations {
        Violations {
            named: Vec::new(),
            total: 0,
            cap,
        }
    }

    /// A history-wide violation (its path is the history), the only one reported.
    fn only(rule: Rule, count: u64) -> Violations {
        Violations {
            named: vec![Violation {
                rule,
                path: "history".to_owned(),
                count,
            }],
            total: 1,
            cap: 1,
        }
    }

    fn add(&mut self, rule: Rule, path: impl FnOnce() -> String) {
        self.total += 1;
        if self.named.len() < self.cap {
            self.named.push(Violation {
                rule,
                path: path(),
                count: 0,
            });
        }
    }
}

/// A scanned request: where its non-history fields are, and its history when it decodes.
pub struct Scan {
    /// Ranges of every top-level occurrence that is not the history (field 1, LEN).
    pub rest: Vec<(usize, usize)>,
    pub history: History,
    pub violations: Violations,
}

/// The history: its shape, rows, the wrapper fields kept for writing it back, and the ids.
#[derive(Debug, Clone)]
pub struct History {
    pub shape: Option<Shape>,
    pub rows: Vec<Row>,
    /// Unknown fields of History and of the ChatHistory/ConversationHistory, as ranges.
    pub history_unknown: Vec<(usize, usize)>,
    pub list_unknown: Vec<(usize, usize)>,
    /// Tool-call and tool-result ids (string ranges in the request) that rows refer to.
    pub ids: Vec<(usize, usize)>,
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

/// Why the scan stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Halt {
    Malformed,
    /// The item count stopped it: the allowance was passed, or the framing of a field outside
    /// the history broke while it was counted.
    Counted,
}

impl From<Malformed> for Halt {
    fn from(_: Malformed) -> Halt {
        Halt::Malformed
    }
}

type Scanned<T> = std::result::Result<T, Halt>;

/// The items the request-item limit still allows in the history.
#[derive(Debug, Clone, Copy)]
struct Tally {
    left: u64,
}

impl Tally {
    /// No limit: more items than any request can hold.
    const UNLIMITED: Tally = Tally { left: u64::MAX };

    fn take(&mut self, items: u64) -> Scanned<()> {
        match self.left.checked_sub(items) {
            Some(rest) => {
                self.left = rest;
                Ok(())
            }
            None => Err(Halt::Counted),
        }
    }
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
    /// Every row so far is a system row: the next row is the breadcrumb's only place.
    all_system_before: bool,
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
            },
            list_payloads: Vec::new(),
            violations: Violations::new(conventions.max_named_violations),
            all_system_before: true,
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
            let crumb_slot = self.all_system_before;
            let row = match self.history.shape {
                Some(Shape::Conversation) => self.conversation_row(&field, i, crumb_slot)?,
                _ => {
                    let mut chat = ChatState::new(self.history.ids.len());
                    let ids = &mut self.history.ids;
                    chat.merge(self.buf, &field, 3, ids, &mut self.items)?;
                    chat_violations(
                        self.buf,
                        self.conventions,
                        &chat,
                        || format!("history.chat.messages[{i}]"),
                        crumb_slot,
                        &mut self.violations,
                    );
                    chat.finish(self.buf, self.conventions, &mut self.history.ids, &field)
                }
            };
            self.all_system_before = self.all_system_before && row.kind == RowKind::System;
            self.history.rows.push(row);
        }
        Ok(())
    }

    /// A ConversationMessage occurrence (depth 3); its member is one level deeper.
    fn conversation_row(&mut self, occurrence: &Field, i: usize, crumb_slot: bool) -> Scanned<Row> {
        let buf = self.buf;
        let conventions = self.conventions;
        let out = &mut self.violations;
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
                chat_violations(buf, conventions, &chat, chat_path, crumb_slot, out);
                chat.finish(buf, conventions, ids, occurrence)
            }
            Member::Calls(calls) => {
                calls.calls.violations(
                    || format!("{}.assistant_tool_calls.tool_calls", path()),
                    out,
                );
                calls.finish(occurrence)
            }
            Member::Results(results) => {
                if results.results == 0 {
                    out.add(Rule::ResultsRequired, || {
                        format!("{}.tool_results.results", path())
                    });
                }
                for j in &results.empty_ids {
                    out.add(Rule::ResultId, || {
                        format!("{}.tool_results.results[{j}].tool_call_id", path())
                    });
                }
                results.finish(occurrence)
            }
            Member::None => {
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
                }
            }
        })
    }
}

enum Member {
    None,
    Chat(ChatState),
    Calls(CallsState),
    Results(ResultsState),
}

/// A string field's last occurrence, as a range (empty when unset).
#[derive(Clone, Copy, Default)]
struct Text(usize, usize);

impl Text {
    fn of(buf: &[u8], field: &Field) -> Result<Text> {
        wire::check_utf8(field.payload(buf))?;
        Ok(Text(field.payload_start, field.end))
    }
    fn len(self) -> u64 {
        (self.1 - self.0) as u64
    }
    fn is_empty(self) -> bool {
        self.1 == self.0
    }
    fn str(self, buf: &[u8]) -> &str {
        // Validated as UTF-8 when it was read; a failure here is a bug and prices as empty.
        std::str::from_utf8(&buf[self.0..self.1]).unwrap_or_default()
    }
}

/// A reader over a message occurrence's body at `depth`, refused past the nesting limit.
fn body<'a>(buf: &'a [u8], occurrence: &Field, depth: u32) -> Result<Reader<'a>> {
    if depth > wire::MAX_DEPTH {
        return Err(Malformed);
    }
    Ok(Reader::new(buf, occurrence.payload_start, occurrence.end))
}

/// One ToolCall (depth `depth`): id, name, arguments, last occurrence of each.
struct Call {
    id: Text,
    name: Text,
    arguments: Text,
}

fn read_call(buf: &[u8], field: &Field, depth: u32) -> Result<Call> {
    let mut reader = body(buf, field, depth)?;
    let mut call = Call {
        id: Text::default(),
        name: Text::default(),
        arguments: Text::default(),
    };
    while !reader.at_end() {
        let f = reader.next_message_field(depth)?;
        if f.wire_type != LEN {
            continue;
        }
        match f.number {
            1 => call.id = Text::of(buf, &f)?,
            2 => call.name = Text::of(buf, &f)?,
            3 => call.arguments = Text::of(buf, &f)?,
            _ => {}
        }
    }
    Ok(call)
}

/// ChatMessage fields, merged over the occurrences of one row.
struct ChatState {
    role: i32,
    content: Text,
    tool_call_id: Text,
    /// The row's calls start at this index of `History::ids`.
    calls_from: usize,
    calls: CallTally,
    attachments: u32,
    breadcrumb: bool,
}

impl ChatState {
    fn new(calls_from: usize) -> Self {
        ChatState {
            role: 0,
            content: Text::default(),
            tool_call_id: Text::default(),
            calls_from,
            calls: CallTally::default(),
            attachments: 0,
            breadcrumb: false,
        }
    }

    /// Merges one ChatMessage occurrence whose body is at `depth`.
    fn merge(
        &mut self,
        buf: &[u8],
        occurrence: &Field,
        depth: u32,
        ids: &mut Vec<(usize, usize)>,
        items: &mut Tally,
    ) -> Scanned<()> {
        let mut reader = body(buf, occurrence, depth)?;
        while !reader.at_end() {
            let f = reader.next_message_field(depth)?;
            match (f.number, f.wire_type) {
                // An enum is an int32: its low 32 bits, sign included.
                (1, VARINT) => self.role = f.value as u32 as i32,
                (6, VARINT) => self.breadcrumb = f.value != 0,
                (2, LEN) => self.content = Text::of(buf, &f)?,
                (3, LEN) => self.tool_call_id = Text::of(buf, &f)?,
                (4, LEN) => self.calls.read(buf, &f, depth + 1, ids, items)?,
                (5, LEN) => {
                    items.take(1)?;
                    wire::validate(buf, f.payload_start, f.end, &wire::ATTACHMENT, depth + 1)?;
                    self.attachments += 1;
                }
                (7, LEN) => items.take(wire::validate(
                    buf,
                    f.payload_start,
                    f.end,
                    &wire::STRUCT,
                    depth + 1,
                )?)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn kind(&self, buf: &[u8], conventions: &Conventions) -> RowKind {
        let roles = &conventions.roles;
        let prefix = conventions.tool_results_prefix.as_str();
        match self.role {
            r if r == roles.user && self.breadcrumb => RowKind::Breadcrumb,
            r if r == roles.user && self.content.str(buf).starts_with(prefix) => RowKind::Carrier,
            r if r == roles.user => RowKind::User,
            r if r == roles.system => RowKind::System,
            r if r == roles.tool => RowKind::Tool,
            _ => RowKind::Assistant,
        }
    }

    fn finish(
        self,
        buf: &[u8],
        conventions: &Conventions,
        ids: &mut Vec<(usize, usize)>,
        occurrence: &Field,
    ) -> Row {
        let roles = &conventions.roles;
        let kind = self.kind(buf, conventions);
        let (mut nbytes, images) = if kind == RowKind::User {
            strip_sent_images(self.content.str(buf))
        } else {
            (self.content.len(), 0)
        };
        nbytes += self.tool_call_id.len() + self.calls.bytes;
        let calls_end = self.calls_from + self.calls.count as usize;
        // Calls count for the sweep only on assistant rows; results only on tool rows.
        let calls = if self.role == roles.assistant {
            (self.calls_from, calls_end)
        } else {
            (calls_end, calls_end)
        };
        let results = if self.role == roles.tool {
            ids.push((self.tool_call_id.0, self.tool_call_id.1));
            (calls_end, calls_end + 1)
        } else {
            (ids.len(), ids.len())
        };
        let attachments = match kind {
            RowKind::Tool | RowKind::Carrier => self.attachments,
            _ => 0,
        };
        Row {
            kind,
            provider_rows: 1,
            text_bytes: nbytes,
            text_tokens: text_tokens(nbytes),
            marker_images: images,
            attachments,
            bytes: RowBytes::Request(occurrence.start, occurrence.end),
            calls,
            results,
        }
    }
}

/// AssistantToolCalls, merged over the occurrences of one member.
struct CallsState {
    text: Text,
    reasoning: Text,
    calls_from: usize,
    calls: CallTally,
}

impl CallsState {
    fn new(calls_from: usize) -> Self {
        CallsState {
            text: Text::default(),
            reasoning: Text::default(),
            calls_from,
            calls: CallTally::default(),
        }
    }

    fn merge(
        &mut self,
        buf: &[u8],
        occurrence: &Field,
        depth: u32,
        ids: &mut Vec<(usize, usize)>,
        items: &mut Tally,
    ) -> Scanned<()> {
        let mut reader = body(buf, occurrence, depth)?;
        while !reader.at_end() {
            let f = reader.next_message_field(depth)?;
            match (f.number, f.wire_type) {
                (1, LEN) => self.text = Text::of(buf, &f)?,
                (3, LEN) => self.reasoning = Text::of(buf, &f)?,
                (2, LEN) => self.calls.read(buf, &f, depth + 1, ids, items)?,
                (4, LEN) => items.take(wire::validate(
                    buf,
                    f.payload_start,
                    f.end,
                    &wire::STRUCT,
                    depth + 1,
                )?)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn finish(self, occurrence: &Field) -> Row {
        let nbytes = self.text.len() + self.reasoning.len() + self.calls.bytes;
        let end = self.calls_from + self.calls.count as usize;
        Row {
            kind: RowKind::Assistant,
            provider_rows: 1,
            text_bytes: nbytes,
            text_tokens: text_tokens(nbytes),
            marker_images: 0,
            attachments: 0,
            bytes: RowBytes::Request(occurrence.start, occurrence.end),
            calls: (self.calls_from, end),
            results: (end, end),
        }
    }
}

/// ToolResults, merged over the occurrences of one member.
struct ResultsState {
    from: usize,
    results: u32,
    empty_ids: Vec<u32>,
    text_bytes: u64,
    text_tokens: u64,
    attachments: u32,
}

impl ResultsState {
    fn new(from: usize) -> Self {
        ResultsState {
            from,
            results: 0,
            empty_ids: Vec::new(),
            text_bytes: 0,
            text_tokens: 0,
            attachments: 0,
        }
    }

    fn merge(
        &mut self,
        buf: &[u8],
        occurrence: &Field,
        depth: u32,
        ids: &mut Vec<(usize, usize)>,
        items: &mut Tally,
    ) -> Scanned<()> {
        let mut reader = body(buf, occurrence, depth)?;
        while !reader.at_end() {
            let f = reader.next_message_field(depth)?;
            if f.number != 1 || f.wire_type != LEN {
                continue;
            }
            items.take(1)?;
            let result_depth = depth + 1;
            if result_depth > wire::MAX_DEPTH {
                return Err(Halt::Malformed);
            }
            let mut id = Text::default();
            let mut content = Text::default();
            let mut inner = Reader::new(buf, f.payload_start, f.end);
            while !inner.at_end() {
                let g = inner.next_message_field(result_depth)?;
                match (g.number, g.wire_type) {
                    (1, LEN) => id = Text::of(buf, &g)?,
                    (2, LEN) => wire::check_utf8(g.payload(buf))?,
                    (3, LEN) => content = Text::of(buf, &g)?,
                    (4, LEN) => {
                        items.take(1)?;
                        wire::validate(
                            buf,
                            g.payload_start,
                            g.end,
                            &wire::ATTACHMENT,
                            result_depth + 1,
                        )?;
                        self.attachments += 1;
                    }
                    (5, LEN) => items.take(wire::validate(
                        buf,
                        g.payload_start,
                        g.end,
                        &wire::STRUCT,
                        result_depth + 1,
                    )?)?,
                    _ => {}
                }
            }
            if id.is_empty() {
                self.empty_ids.push(self.results);
            }
            let nbytes = id.len() + content.len();
            self.text_bytes += nbytes;
            self.text_tokens += text_tokens(nbytes);
            ids.push((id.0, id.1));
            self.results += 1;
        }
        Ok(())
    }

    fn finish(self, occurrence: &Field) -> Row {
        let end = self.from + self.results as usize;
        Row {
            kind: RowKind::Tool,
            provider_rows: self.results,
            text_bytes: self.text_bytes,
            text_tokens: self.text_tokens,
            marker_images: 0,
            attachments: self.attachments,
            bytes: RowBytes::Request(occurrence.start, occurrence.end),
            calls: (self.from, self.from),
            results: (self.from, end),
        }
    }
}

fn chat_violations(
    buf: &[u8],
    conventions: &Conventions,
    chat: &ChatState,
    path: impl Fn() -> String,
    crumb_slot: bool,
    out: &mut Violations,
) {
    let roles = &conventions.roles;
    if !roles.is_known(chat.role) {
        out.add(Rule::Role, || format!("{}.role", path()));
    }
    if chat.role == roles.tool && chat.tool_call_id.is_empty() {
        out.add(Rule::ToolCallId, || format!("{}.tool_call_id", path()));
    }
    if chat.calls.count > 0 {
        if chat.role != roles.assistant {
            out.add(Rule::ToolCalls, || format!("{}.tool_calls", path()));
        } else {
            chat.calls
                .violations(|| format!("{}.tool_calls", path()), out);
        }
    }
    let kind = chat.kind(buf, conventions);
    if chat.attachments > 0 && !matches!(kind, RowKind::Tool | RowKind::Carrier) {
        out.add(Rule::Attachments, || format!("{}.attachments", path()));
    }
    if chat.breadcrumb {
        if chat.role != roles.user {
            out.add(Rule::BreadcrumbRole, || format!("{}.breadcrumb", path()));
        } else if !crumb_slot {
            out.add(Rule::BreadcrumbPlace, || format!("{}.breadcrumb", path()));
        }
    }
}

/// The tool calls of one row (ChatMessage or AssistantToolCalls), tallied as they are read.
#[derive(Default)]
struct CallTally {
    count: u32,
    /// The (id, name, arguments) bytes the calls are priced by.
    bytes: u64,
    empty_ids: Vec<u32>,
    empty_names: Vec<u32>,
}

impl CallTally {
    /// Reads one ToolCall occurrence; its id goes to `History::ids`.
    fn read(
        &mut self,
        buf: &[u8],
        field: &Field,
        depth: u32,
        ids: &mut Vec<(usize, usize)>,
        items: &mut Tally,
    ) -> Scanned<()> {
        items.take(1)?;
        let call = read_call(buf, field, depth)?;
        if call.id.is_empty() {
            self.empty_ids.push(self.count);
        }
        if call.name.is_empty() {
            self.empty_names.push(self.count);
        }
        self.bytes += call.id.len() + call.name.len() + call.arguments.len();
        ids.push((call.id.0, call.id.1));
        self.count += 1;
        Ok(())
    }

    /// An empty id or name of call j, in call order (ids before names within a call).
    fn violations(&self, path: impl Fn() -> String, out: &mut Violations) {
        let mut ids = self.empty_ids.iter().peekable();
        let mut names = self.empty_names.iter().peekable();
        for j in 0..self.count {
            if ids.next_if_eq(&&j).is_some() {
                out.add(Rule::CallId, || format!("{}[{j}].id", path()));
            }
            if names.next_if_eq(&&j).is_some() {
                out.add(Rule::CallName, || format!("{}[{j}].name", path()));
            }
        }
    }
}
