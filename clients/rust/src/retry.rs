//! The retry policy of unary calls (docs/conventions.md, Client defaults).

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use tonic::Code;

use crate::error::RpcError;

/// The codes a retry may cure.
pub const RETRYABLE_CODES: [Code; 2] = [Code::ResourceExhausted, Code::Unavailable];

/// How a unary call is retried. Every `HistoryService` unary RPC is idempotent (`TrimEvents`
/// resumes from its cursor instead, see [`ReconnectPolicy`](crate::ReconnectPolicy)). A call
/// refused with one of [`RETRYABLE_CODES`] is made again, at most `max_attempts` times in all
/// (the first call included) and within the call's deadline:
/// - with a `google.rpc.RetryInfo` (what an overloaded server sends) after its `retry_delay`,
///   unless that is over `max_delay` or would pass the deadline: then the error is returned at once;
/// - without one, `UNAVAILABLE` after `backoff * multiplier^(retry - 1)`, plus or minus `jitter`
///   of it; `RESOURCE_EXHAUSTED` without `RetryInfo` (a message over a size limit) is not retried.
///
/// The defaults are in tests/conformance/client-defaults.json; [`RetryPolicy::disabled`] is off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 turns retrying off.
    pub max_attempts: u32,
    /// The longest `RetryInfo` delay waited for.
    pub max_delay: Duration,
    /// The wait before the first retry of an `UNAVAILABLE` without `RetryInfo`.
    pub backoff: Duration,
    /// What each further retry multiplies that wait by.
    pub multiplier: f64,
    /// The share of the wait added or taken at random.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            max_delay: Duration::from_secs(5),
            backoff: Duration::from_millis(100),
            multiplier: 2.0,
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// No retries: every call is attempted once.
    pub fn disabled() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The wait before retry number `retry` (1 for the first) after `error`; `None`: do not retry.
    pub(crate) fn delay(&self, error: &RpcError, retry: u32) -> Option<Duration> {
        if retry >= self.max_attempts || !RETRYABLE_CODES.contains(&error.code()) {
            return None;
        }
        if let Some(delay) = error.retry_delay() {
            return (delay <= self.max_delay).then_some(delay);
        }
        if error.code() != Code::Unavailable {
            return None;
        }
        let base = self.backoff.as_secs_f64() * self.multiplier.powi(retry as i32 - 1);
        // A fresh RandomState is randomly keyed: a dependency-free source of jitter.
        let unit = RandomState::new().hash_one(retry) as f64 / u64::MAX as f64;
        Some(Duration::from_secs_f64(
            (base * (1.0 + self.jitter * (2.0 * unit - 1.0))).max(0.0),
        ))
    }
}
