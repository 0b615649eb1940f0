//! The values the engine shares with the Python side. Python defines each of them once (the
//! proto's `Role` numbers, `core.rows.TOOL_RESULTS_PREFIX`, `core.pricing`,
//! `server.errors.MAX_FIELD_VIOLATIONS`) and hands them over when the native engine starts
//! (`turnkeeper._native.Conventions`); the engine never spells them itself.

use crate::pricing::text_tokens;

/// The `Role` enum numbers of history.proto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    pub system: i32,
    pub user: i32,
    pub assistant: i32,
    pub tool: i32,
}

impl Roles {
    /// One of the four roles a row may have (ROLE_UNSPECIFIED and unknown numbers are not).
    pub fn is_known(&self, role: i32) -> bool {
        [self.system, self.user, self.assistant, self.tool].contains(&role)
    }
}

/// The pinned costs of §9 that are not ceil(bytes / 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prices {
    /// Charged once per provider row.
    pub framing_tokens: u64,
    /// One image that is actually sent.
    pub tokens_per_image: u64,
}

impl Prices {
    /// A text priced like one row: ceil(bytes / 4) + the framing tokens.
    pub fn price_text(&self, text: &str) -> u64 {
        text_tokens(text.len() as u64) + self.framing_tokens
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conventions {
    pub roles: Roles,
    /// A user row whose content starts with it carries tool results (a carrier row, §1).
    pub tool_results_prefix: String,
    /// A real user row whose content starts with it is the loop's parse-error feedback (§13.1).
    pub parse_error_prefix: String,
    /// A tool-exchange summary's text: these two parts around the count (§13.1).
    pub exchange_summary: (String, String),
    /// A cleared tool result's text: these two parts around the original length (§13.4).
    pub cleared_result: (String, String),
    /// The most violations named; the rest are only counted.
    pub max_named_violations: usize,
    pub prices: Prices,
}
