//! What the Python side hands the engine (`turnkeeper._native.Conventions`), for tests that
//! run without Python: the proto's roles, `core.rows`, `core.pricing`, `server.errors`.

use turnkeeper_native::conventions::{Conventions, Prices, Roles};

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
