//! The history rules of docs/conventions.md and the violations a scan reports: the first few
//! named in request order, all of them counted.

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
    ToolExchangeSummary,
    Pinned,
    Summary,
}

impl Rule {
    pub const ALL: [Rule; 16] = [
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
        Rule::ToolExchangeSummary,
        Rule::Pinned,
        Rule::Summary,
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
            Rule::ToolExchangeSummary => "tool_exchange_summary",
            Rule::Pinned => "pinned",
            Rule::Summary => "summary",
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
    pub(crate) fn new(cap: usize) -> Violations {
        Violations {
            named: Vec::new(),
            total: 0,
            cap,
        }
    }

    /// A history-wide violation (its path is the history), the only one reported.
    pub(crate) fn only(rule: Rule, count: u64) -> Violations {
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

    pub(crate) fn add(&mut self, rule: Rule, path: impl FnOnce() -> String) {
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
