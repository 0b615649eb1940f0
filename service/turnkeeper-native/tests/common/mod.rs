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
        max_named_violations: 100,
        prices: Prices {
            framing_tokens: 4,
            tokens_per_image: 1600,
        },
    }
}
