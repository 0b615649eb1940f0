//! Lossless converters between provider conversation JSON and turnkeeper.v1 histories: OpenAI
//! Chat Completions, OpenAI Responses items and Anthropic Messages (docs/converters.md).
//!
//! Convert, trim with no budget pressure, convert back, and you get the input exactly. What a
//! format carries that turnkeeper does not price rides in each row's `passthrough`.

mod anthropic;
mod cache;
mod common;
mod marks;
mod openai_chat;
mod openai_responses;

pub use anthropic::{from_anthropic, to_anthropic, to_anthropic_with};
pub use cache::AnthropicExportOptions;
pub use common::{CARRIER_PREFIX, ConvertOptions, DEFAULT_BREADCRUMB, Shape};
pub use marks::{TurnMarks, turn_marks};
pub use openai_chat::{from_openai, to_openai};
pub use openai_responses::{from_openai_responses, to_openai_responses};
