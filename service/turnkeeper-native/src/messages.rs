//! One row's messages, merged over their occurrences as protobuf merges them (last scalar
//! wins, repeated fields append): a ChatMessage, or the winning member of a ConversationMessage
//! (AssistantToolCalls, ToolResults), with the ToolCalls inside them. Each state validates what
//! it reads, counts its items against the request-item limit, and becomes one `Row`.

use crate::conventions::Conventions;
use crate::plan::PrefixWalk;
use crate::pricing::{strip_sent_images, text_tokens};
use crate::rows::{Marks, Row, RowBytes, RowKind};
use crate::rules::{Rule, Violations};
use crate::wire::{self, Field, Malformed, Reader, Result, LEN, VARINT};

/// Why the scan stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Halt {
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

pub(crate) type Scanned<T> = std::result::Result<T, Halt>;

/// The items the request-item limit still allows in the history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) left: u64,
}

impl Tally {
    /// No limit: more items than any request can hold.
    pub(crate) const UNLIMITED: Tally = Tally { left: u64::MAX };

    pub(crate) fn take(&mut self, items: u64) -> Scanned<()> {
        match self.left.checked_sub(items) {
            Some(rest) => {
                self.left = rest;
                Ok(())
            }
            None => Err(Halt::Counted),
        }
    }
}

pub(crate) enum Member {
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
    fn bytes(self, buf: &[u8]) -> &[u8] {
        &buf[self.0..self.1]
    }
    /// Whether the text begins with `prefix`: compared as bytes, which is what `str::starts_with`
    /// does, so the text, validated when it was read, is not validated again.
    fn starts_with(self, buf: &[u8], prefix: &str) -> bool {
        self.bytes(buf).starts_with(prefix.as_bytes())
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
pub(crate) struct ChatState {
    role: i32,
    content: Text,
    tool_call_id: Text,
    /// The row's calls start at this index of `History::ids`.
    calls_from: usize,
    calls: CallTally,
    attachments: u32,
    breadcrumb: bool,
    exchange_summary: bool,
    pinned: bool,
    summary: bool,
}

impl ChatState {
    pub(crate) fn new(calls_from: usize) -> Self {
        ChatState {
            role: 0,
            content: Text::default(),
            tool_call_id: Text::default(),
            calls_from,
            calls: CallTally::default(),
            attachments: 0,
            breadcrumb: false,
            exchange_summary: false,
            pinned: false,
            summary: false,
        }
    }

    /// Merges one ChatMessage occurrence whose body is at `depth`.
    pub(crate) fn merge(
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
                (8, VARINT) => self.exchange_summary = f.value != 0,
                (9, VARINT) => self.pinned = f.value != 0,
                (10, VARINT) => self.summary = f.value != 0,
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

    /// Whether the row is marked pinned (valid only on a real user row).
    pub(crate) fn pinned(&self) -> bool {
        self.pinned
    }

    pub(crate) fn kind(&self, buf: &[u8], conventions: &Conventions) -> RowKind {
        let roles = &conventions.roles;
        let prefix = conventions.tool_results_prefix.as_str();
        match self.role {
            // A row marked both is invalid (§15.2); the summary mark is read first.
            r if r == roles.user && self.summary => RowKind::Summary,
            r if r == roles.user && self.breadcrumb => RowKind::Breadcrumb,
            r if r == roles.user && self.content.starts_with(buf, prefix) => RowKind::Carrier,
            r if r == roles.user => RowKind::User,
            r if r == roles.system => RowKind::System,
            r if r == roles.tool => RowKind::Tool,
            _ => RowKind::Assistant,
        }
    }

    /// The row, of `kind` (what `kind` gave: the caller classified it for the placement rules
    /// already, and the content is not read again for it).
    pub(crate) fn finish(
        self,
        buf: &[u8],
        conventions: &Conventions,
        kind: RowKind,
        ids: &mut Vec<(usize, usize)>,
        occurrence: &Field,
    ) -> Row {
        let roles = &conventions.roles;
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
            marks: Marks {
                parse_error: kind == RowKind::User
                    && self
                        .content
                        .starts_with(buf, conventions.parse_error_prefix.as_str()),
                tool_step: false,
                pinned: kind == RowKind::User && self.pinned,
            },
        }
    }
}

/// AssistantToolCalls, merged over the occurrences of one member.
pub(crate) struct CallsState {
    text: Text,
    reasoning: Text,
    calls_from: usize,
    calls: CallTally,
}

impl CallsState {
    pub(crate) fn new(calls_from: usize) -> Self {
        CallsState {
            text: Text::default(),
            reasoning: Text::default(),
            calls_from,
            calls: CallTally::default(),
        }
    }

    pub(crate) fn merge(
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

    /// The violations of its calls; `path` is the AssistantToolCalls' own.
    pub(crate) fn violations(&self, path: impl Fn() -> String, out: &mut Violations) {
        self.calls
            .violations(|| format!("{}.tool_calls", path()), out);
    }

    pub(crate) fn finish(self, occurrence: &Field) -> Row {
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
            marks: Marks {
                tool_step: true,
                ..Marks::default()
            },
        }
    }
}

/// ToolResults, merged over the occurrences of one member.
pub(crate) struct ResultsState {
    from: usize,
    results: u32,
    empty_ids: Vec<u32>,
    text_bytes: u64,
    text_tokens: u64,
    attachments: u32,
}

impl ResultsState {
    pub(crate) fn new(from: usize) -> Self {
        ResultsState {
            from,
            results: 0,
            empty_ids: Vec::new(),
            text_bytes: 0,
            text_tokens: 0,
            attachments: 0,
        }
    }

    pub(crate) fn merge(
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

    /// No results, or a result without its tool-call id; `path` is the ToolResults' own.
    pub(crate) fn violations(&self, path: impl Fn() -> String, out: &mut Violations) {
        if self.results == 0 {
            out.add(Rule::ResultsRequired, || format!("{}.results", path()));
        }
        for j in &self.empty_ids {
            out.add(Rule::ResultId, || {
                format!("{}.results[{j}].tool_call_id", path())
            });
        }
    }

    pub(crate) fn finish(self, occurrence: &Field) -> Row {
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
            marks: Marks::default(),
        }
    }
}

/// The rules of one chat row; `kind` is what `ChatState::kind` gave for it.
pub(crate) fn chat_violations(
    conventions: &Conventions,
    chat: &ChatState,
    kind: RowKind,
    path: impl Fn() -> String,
    slots: Slots,
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
    if chat.attachments > 0 && !matches!(kind, RowKind::Tool | RowKind::Carrier) {
        out.add(Rule::Attachments, || format!("{}.attachments", path()));
    }
    if chat.breadcrumb {
        if chat.role != roles.user {
            out.add(Rule::BreadcrumbRole, || format!("{}.breadcrumb", path()));
        } else if !slots.breadcrumb {
            out.add(Rule::BreadcrumbPlace, || format!("{}.breadcrumb", path()));
        }
    }
    // A pin on any row but a real user row would split its turn's exchange (§15.1).
    if chat.pinned && kind != RowKind::User {
        out.add(Rule::Pinned, || format!("{}.pinned", path()));
    }
    // One summary row, a user row, right after the leading system rows (§15.2).
    if chat.summary && (chat.role != roles.user || !slots.summary) {
        out.add(Rule::Summary, || format!("{}.summary", path()));
    }
    let plain_assistant = chat.role == roles.assistant && chat.calls.count == 0;
    if chat.exchange_summary && (!plain_assistant || chat.breadcrumb) {
        out.add(Rule::ToolExchangeSummary, || {
            format!("{}.tool_exchange_summary", path())
        });
    }
}

/// Where a row may stand, from the rows before it (§15.1, §15.2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slots {
    /// Every row before is a system row: the summary row's only place.
    pub(crate) summary: bool,
    /// The row is the breadcrumb of the fixed prefix (`PrefixWalk`): the breadcrumb's place.
    pub(crate) breadcrumb: bool,
}

/// The placement rules' view of the rows read so far (`_slots` in history_rules.py).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    all_system: bool,
    walk: PrefixWalk,
}

impl Placement {
    pub(crate) const START: Placement = Placement {
        all_system: true,
        walk: PrefixWalk::START,
    };

    /// Where the next row, of `kind` and `pinned`, stands; called once for every row.
    pub(crate) fn next(&mut self, kind: RowKind, pinned: bool) -> Slots {
        let summary = self.all_system;
        // The walk starts after the leading system rows and the summary row that follows them.
        let in_head = summary && matches!(kind, RowKind::System | RowKind::Summary);
        let breadcrumb = !in_head && self.walk.is_breadcrumb(kind, pinned);
        self.all_system &= kind == RowKind::System;
        Slots {
            summary,
            breadcrumb,
        }
    }
}

/// The tool calls of one row (ChatMessage or AssistantToolCalls), tallied as they are read.
#[derive(Default)]
pub(crate) struct CallTally {
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
    pub(crate) fn violations(&self, path: impl Fn() -> String, out: &mut Violations) {
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
