//! Hand-built wire bytes and conventions for the unit tests (`cfg(test)` only).

use crate::conventions::{Conventions, Prices, Roles};
use crate::wire::put_len;

pub const SYSTEM: u8 = 1;
pub const USER: u8 = 2;
pub const ASSISTANT: u8 = 3;
pub const TOOL: u8 = 4;

/// What the Python side hands the engine: the proto's roles and the pinned prices.
pub fn conventions() -> Conventions {
    Conventions {
        roles: Roles {
            system: 1,
            user: 2,
            assistant: 3,
            tool: 4,
        },
        tool_results_prefix: "[Tool results]".to_owned(),
        parse_error_prefix: "[Tool call parse error]".to_owned(),
        exchange_summary: (
            "[Tool exchange: ".to_owned(),
            " tool call(s) \u{2014} results collapsed]".to_owned(),
        ),
        cleared_result: (
            "[Tool result cleared to fit the context window: ".to_owned(),
            " characters]".to_owned(),
        ),
        max_named_violations: 100,
        prices: Prices {
            framing_tokens: 4,
            tokens_per_image: 1600,
        },
    }
}

/// A ToolCall: id (1), name (2).
pub fn call(id: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_len(&mut out, 1, id);
    put_len(&mut out, 2, name);
    out
}

/// A ChatMessage: role (1), content (2), tool_call_id (3) when given, tool_calls (4).
pub fn chat(role: u8, content: &[u8], tool_call_id: &[u8], calls: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![0x08, role];
    put_len(&mut out, 2, content);
    if !tool_call_id.is_empty() {
        put_len(&mut out, 3, tool_call_id);
    }
    for c in calls {
        put_len(&mut out, 4, c);
    }
    out
}

/// A ConversationMessage with the member `number` (1 chat, 2 assistant step, 3 tool results).
pub fn member(number: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_len(&mut out, number, body);
    out
}

/// A request: its history (field 1) in the chat (1) or conversation (2) shape, then `tail`.
pub fn request(shape: u32, messages: &[Vec<u8>], tail: &[u8]) -> Vec<u8> {
    let mut list = Vec::new();
    for m in messages {
        put_len(&mut list, 1, m);
    }
    let mut history = Vec::new();
    put_len(&mut history, shape, &list);
    let mut out = Vec::new();
    put_len(&mut out, 1, &history);
    out.extend_from_slice(tail);
    out
}
