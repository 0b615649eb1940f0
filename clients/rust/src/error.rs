//! The client's error type, with turnkeeper's rich status details decoded.

use std::fmt;

use prost::{Message, Name};
use tonic::Code;
use tonic_types::pb;
use tonic_types::{ErrorInfo, FieldViolation, PreconditionFailure, RpcStatusExt};

use crate::pb::{CapacityReport, ErrorReason};

/// The `google.rpc.ErrorInfo` domain of every error turnkeeper returns.
pub const ERROR_DOMAIN: &str = "turnkeeper.v1";

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a [`Client`](crate::Client) call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The target string is neither `host:port`, `http://host:port`, nor a Unix socket path.
    #[error("invalid turnkeeper target `{target}`: {reason}")]
    InvalidTarget {
        /// The target as given.
        target: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The connection could not be established (only on eager connects). Display names the
    /// root cause, such as the OS error of a refused connection, which tonic nests several
    /// `source()` levels down.
    #[error("cannot connect to turnkeeper at {target}: {}", root_cause(source))]
    Connect {
        /// The target that was dialled.
        target: String,
        /// The transport failure.
        #[source]
        source: tonic::transport::Error,
    },
    /// The call reached the server (or its deadline passed) and failed with a gRPC status.
    #[error(transparent)]
    Rpc(Box<RpcError>),
    /// Provider JSON, or a history, that a converter cannot carry.
    #[error(transparent)]
    Conversion(#[from] ConversionError),
}

/// A value a converter cannot carry: `path` names the offending element from the converted
/// value's root (such as `messages[3].content[1]`; empty when the whole value is at fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot convert {}{reason}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct ConversionError {
    /// Where the problem is.
    pub path: String,
    /// What is wrong there.
    pub reason: String,
}

impl ConversionError {
    /// A conversion failure at `path`.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        ConversionError {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// The innermost error of a `source()` chain: the one that says what actually went wrong.
fn root_cause<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> &'a (dyn std::error::Error + 'static) {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    current
}

impl Error {
    /// The gRPC status code, when the failure is an RPC status.
    pub fn code(&self) -> Option<Code> {
        self.rpc().map(RpcError::code)
    }

    /// The decoded RPC failure, when there is one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Error::Rpc(rpc) => Some(rpc),
            _ => None,
        }
    }

    /// The turnkeeper reason of an RPC failure (from its `ErrorInfo`).
    pub fn reason(&self) -> Option<ErrorReason> {
        self.rpc().and_then(RpcError::reason)
    }
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        Error::Rpc(Box::new(RpcError::from(status)))
    }
}

impl From<RpcError> for Error {
    fn from(error: RpcError) -> Self {
        Error::Rpc(Box::new(error))
    }
}

/// A failed RPC with the details turnkeeper packs into `grpc-status-details-bin` decoded:
/// the `ErrorInfo` reason, the `BadRequest` field violations, the `PreconditionFailure`,
/// the `turnkeeper.v1.CapacityReport` of a `FAILED_PRECONDITION`, and the `RetryInfo` of an
/// overloaded server.
#[derive(Debug, Clone)]
pub struct RpcError {
    status: tonic::Status,
    error_info: Option<ErrorInfo>,
    field_violations: Vec<FieldViolation>,
    precondition_failure: Option<PreconditionFailure>,
    capacity_report: Option<CapacityReport>,
    retry_delay: Option<std::time::Duration>,
}

impl RpcError {
    /// The gRPC status code.
    pub fn code(&self) -> Code {
        self.status.code()
    }

    /// The status message.
    pub fn message(&self) -> &str {
        self.status.message()
    }

    /// The reason as this client's enum, when the `ErrorInfo` is turnkeeper's and the reason is
    /// one this client knows. See [`reason_name`](Self::reason_name) for the raw value.
    pub fn reason(&self) -> Option<ErrorReason> {
        self.error_info
            .as_ref()
            .filter(|info| info.domain == ERROR_DOMAIN)
            .and_then(|info| ErrorReason::from_str_name(&info.reason))
    }

    /// The raw `ErrorInfo` reason, e.g. `ERROR_REASON_INVALID_HISTORY`; kept as text so a reason
    /// added to a newer server is still visible to an older client.
    pub fn reason_name(&self) -> Option<&str> {
        self.error_info.as_ref().map(|info| info.reason.as_str())
    }

    /// The full `google.rpc.ErrorInfo`, including its metadata.
    pub fn error_info(&self) -> Option<&ErrorInfo> {
        self.error_info.as_ref()
    }

    /// Every `google.rpc.BadRequest` field violation; paths use proto field names from the
    /// request root, e.g. `history.chat.messages[1].tool_call_id`.
    pub fn field_violations(&self) -> &[FieldViolation] {
        &self.field_violations
    }

    /// The `google.rpc.PreconditionFailure` detail, if any.
    pub fn precondition_failure(&self) -> Option<&PreconditionFailure> {
        self.precondition_failure.as_ref()
    }

    /// The pre-flight breakdown attached when the prepared request does not fit the model's
    /// capacity (`ERROR_REASON_CONTEXT_WINDOW_EXCEEDED`).
    pub fn capacity_report(&self) -> Option<&CapacityReport> {
        self.capacity_report.as_ref()
    }

    /// The `google.rpc.RetryInfo` delay an overloaded server asks for (the client's
    /// [`RetryPolicy`](crate::RetryPolicy) honours it).
    pub fn retry_delay(&self) -> Option<std::time::Duration> {
        self.retry_delay
    }

    /// The underlying status, with its metadata and raw details.
    pub fn status(&self) -> &tonic::Status {
        &self.status
    }

    /// Gives back the underlying status.
    pub fn into_status(self) -> tonic::Status {
        self.status
    }
}

impl From<tonic::Status> for RpcError {
    fn from(status: tonic::Status) -> Self {
        // Undecodable details are left out rather than turned into a second error: the code and
        // the message still describe the failure.
        let rich = pb::Status::decode(status.details()).ok();
        let details = rich
            .as_ref()
            .and_then(|s| s.check_error_details().ok())
            .unwrap_or_default();
        let capacity_report = rich.as_ref().and_then(|s| {
            s.details
                .iter()
                .find(|any| type_name(&any.type_url) == CapacityReport::full_name())
                .and_then(|any| CapacityReport::decode(any.value.as_slice()).ok())
        });
        RpcError {
            error_info: details.error_info().cloned(),
            field_violations: details
                .bad_request()
                .map(|bad| bad.field_violations.clone())
                .unwrap_or_default(),
            precondition_failure: details.precondition_failure().cloned(),
            retry_delay: details.retry_info().and_then(|info| info.retry_delay),
            capacity_report,
            status,
        }
    }
}

/// The message name of an `Any` type URL, whatever its domain.
fn type_name(type_url: &str) -> &str {
    type_url.rsplit_once('/').map_or(type_url, |(_, name)| name)
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "turnkeeper call failed: {:?}: {}",
            self.code(),
            self.message()
        )?;
        if let Some(reason) = self.reason_name() {
            write!(f, " [{reason}]")?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.status)
    }
}
