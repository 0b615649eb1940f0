//! The history view the scan builds: its shape, its rows reduced as `turnkeeper/core/rows.py`
//! reduces them, each row remembered as its byte range in the request, and the tool-call ids
//! the rows refer to. Plans, the sweep and the writer (`working.rs`) work on this view only.

use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    System,
    User,
    Carrier,
    Breadcrumb,
    /// The summary row of §15.2: a user row that stands for the turns it replaced, no turn
    /// boundary, priced as text.
    Summary,
    Assistant,
    Tool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Chat,
    Conversation,
}

/// Where a row's bytes are: a range of the request, or bytes the engine wrote (breadcrumb,
/// repaired row, summary, cleared row), shared by the histories made from it. Each is the
/// row's whole occurrence in the messages list, tag included.
#[derive(Debug, Clone)]
pub enum RowBytes {
    Request(usize, usize),
    Owned(Arc<[u8]>),
    /// Bytes written once and stood for by many rows (the projection's tool-exchange
    /// summaries): an index into `History::written`, so that copying or dropping such a row
    /// touches no reference count.
    Written(usize),
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
    pub marks: Marks,
}

/// What §13 tells apart among rows of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// A user row whose content begins with the parse-error prefix: a turn boundary of §9, no
    /// retention boundary of §13.1.
    pub parse_error: bool,
    /// An `AssistantToolCalls` row: never a closing reply, even without calls (§13.1).
    pub tool_step: bool,
    /// A real user row marked `pinned` (§15.1): its whole turn survives every trim.
    pub pinned: bool,
}

impl Row {
    pub fn is_turn_boundary(&self) -> bool {
        self.kind == RowKind::User
    }

    /// A turn boundary the §13.1 projection and §13.4 clearing start a turn at.
    pub fn is_retention_boundary(&self) -> bool {
        self.kind == RowKind::User && !self.marks.parse_error
    }

    /// A turn boundary that pins its turn (§15.1).
    pub fn pins_its_turn(&self) -> bool {
        self.kind == RowKind::User && self.marks.pinned
    }

    /// The tool calls the row makes.
    pub fn call_count(&self) -> usize {
        self.calls.1 - self.calls.0
    }
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
    /// The bytes `RowBytes::Written` rows refer to.
    pub written: Vec<Arc<[u8]>>,
}

impl History {
    /// A row's bytes: its range of the request `buf`, or what the engine wrote for it.
    pub fn row_bytes<'a>(&'a self, buf: &'a [u8], row: &'a Row) -> &'a [u8] {
        match &row.bytes {
            RowBytes::Request(s, e) => &buf[*s..*e],
            RowBytes::Owned(v) => v,
            RowBytes::Written(i) => &self.written[*i],
        }
    }

    /// The length of a row's bytes.
    pub fn row_len(&self, row: &Row) -> usize {
        match &row.bytes {
            RowBytes::Request(s, e) => e - s,
            RowBytes::Owned(v) => v.len(),
            RowBytes::Written(i) => self.written[*i].len(),
        }
    }
}
