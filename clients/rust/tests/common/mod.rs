//! Shared by the integration tests: the live server `with_server.py` started for this run.
#![allow(dead_code)] // each test binary uses its own subset

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use turnkeeper_client::{Client, ConnectOptions, Error};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run the suite against a live server with `make -C clients/rust test` \
             (tests/support/with_server.py exports it)"
        )
    })
}

/// `host:port` of the live server.
pub(crate) fn tcp_address() -> String {
    env("TURNKEEPER_ADDRESS")
}

/// The Unix socket path of the live server.
pub(crate) fn unix_path() -> String {
    env("TURNKEEPER_UNIX")
}

/// The conformance vector directory.
pub(crate) fn conformance_dir() -> String {
    env("TURNKEEPER_CONFORMANCE_DIR")
}

fn options() -> ConnectOptions {
    ConnectOptions::new().timeout(Duration::from_secs(20))
}

pub(crate) async fn tcp_client() -> Client {
    options()
        .connect(&tcp_address())
        .await
        .expect("connect over TCP")
}

pub(crate) async fn unix_client() -> Client {
    options()
        .connect_unix(unix_path())
        .await
        .expect("connect over the Unix socket")
}

/// The fields an error's `BadRequest` names, in server order (empty for other errors).
pub(crate) fn violated_fields(error: &Error) -> Vec<&str> {
    error.rpc().map_or_else(Vec::new, |rpc| {
        rpc.field_violations()
            .iter()
            .map(|v| v.field.as_str())
            .collect()
    })
}

/// A session id no other test (or earlier run) publishes under, so the feed filter isolates us.
pub(crate) fn session_id(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("rust-{test}-{}-{nanos}", std::process::id())
}
