//! The bearer token a client attaches to its calls.
//!
//! Its own module because both the unary client and the `TrimEvents` subscription send it, and
//! neither should have to import the other to do so.

use tonic::Request;
use tonic::metadata::AsciiMetadataValue;

use crate::error::{Error, Result};

/// The bearer token sent with every call, when the sidecar requires one (`--auth-tokens`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Credentials(Option<AsciiMetadataValue>);

impl Credentials {
    /// `authorization: Bearer <token>`, refused unless the token is printable ASCII.
    pub(crate) fn bearer(token: &str) -> Result<Self> {
        let value = format!("Bearer {}", token.trim())
            .parse::<AsciiMetadataValue>()
            .map_err(|_| Error::InvalidTarget {
                target: "token".to_owned(),
                reason: "a token must be printable ASCII".to_owned(),
            })?;
        Ok(Credentials(Some(value)))
    }

    pub(crate) fn apply<T>(&self, request: &mut Request<T>) {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
    }
}
