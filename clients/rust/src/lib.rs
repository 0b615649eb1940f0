//! Async Rust client for turnkeeper, the gRPC sidecar that manages LLM conversation history.
//!
//! ```no_run
//! use turnkeeper_client::{Client, pb};
//! use turnkeeper_client::pb::ChatMessage;
//!
//! # async fn demo() -> turnkeeper_client::Result<()> {
//! let client = Client::connect("127.0.0.1:50051").await?;
//! let history = vec![ChatMessage::system("You are terse."), ChatMessage::user("hello")];
//! let estimate = client
//!     .estimate_tokens(pb::EstimateTokensRequest { history: Some(history.into()) })
//!     .await?;
//! println!("{} tokens", estimate.total_tokens);
//! # Ok(()) }
//! ```
//!
//! - [`Client`] wraps every unary RPC with a deadline and 64 MiB message limits, over TCP or a
//!   Unix socket ([`ConnectOptions`]).
//! - Failures are an [`Error`]; an RPC failure decodes turnkeeper's `ErrorInfo` reason, the
//!   `BadRequest` field violations and the `CapacityReport` ([`RpcError`]).
//! - [`Client::trim_events`] returns a [`TrimEventStream`] that resumes after the last cursor.
//! - [`Client::plan_compaction`] says what to condense (spec §15.3); [`apply_compaction`]
//!   builds the history from the plan and the summarizer's answer.
//! - [`convert`] turns OpenAI Chat Completions, OpenAI Responses and Anthropic Messages JSON
//!   into histories and back, losslessly.
//! - [`pb`] holds the generated contract types; [`FILE_DESCRIPTOR_SET`] describes them.

mod client;
mod compaction;
pub mod convert;
mod credentials;
mod error;
mod events;
mod history;
mod retry;
mod usage;

#[cfg(feature = "tls")]
pub use client::TlsOptions;
pub use client::{
    Client, ConnectOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_TIMEOUT,
    Target,
};
pub use compaction::apply_compaction;
pub use error::{ConversionError, ERROR_DOMAIN, Error, Result, RpcError};
pub use events::{DEFAULT_MAX_BATCH_EVENTS, FeedItem, ReconnectPolicy, TrimEventStream};
pub use retry::{RETRYABLE_CODES, RetryPolicy};
/// The converters take and give `serde_json::Value`: re-exported so that
/// `turnkeeper_client::serde_json::json!` works without a dependency of your own (and cannot
/// differ in version from the one the converters use).
pub use serde_json;
pub use tonic::Code;
pub use tonic_types::{ErrorInfo, FieldViolation, PreconditionFailure};

/// The `turnkeeper.v1` contract, generated from `proto/` by `make generate` (see the README).
#[allow(
    missing_docs,
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags
)]
pub mod pb {
    include!("gen/turnkeeper.v1.rs");
}

/// The encoded `FileDescriptorSet` of the contract (with its imports), for reflection such as
/// the proto JSON mapping via `prost-reflect`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/turnkeeper.v1.bin");

// Compiles the README's examples as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
