//! The unary retry policy (docs/conventions.md, Client defaults): `RetryInfo` honoured on
//! `RESOURCE_EXHAUSTED` / `UNAVAILABLE`, bounded attempts, never past the deadline, and off with
//! `RetryPolicy::disabled()`.
//!
//! `with_server.py --overloaded` starts a real server that refuses every call with a 1 s
//! `RetryInfo` (TURNKEEPER_OVERLOADED_ADDRESS) and a scripted fake (tests/support/flaky.py,
//! TURNKEEPER_FLAKY_ADDRESS): each request names its refusals, and the answer's `total_tokens`
//! is the number of attempts it took.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use turnkeeper_client::pb::{ChatMessage, EstimateTokensRequest, History};
use turnkeeper_client::{Client, Code, ConnectOptions, Error, RetryPolicy};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `make -C clients/rust test` (with_server.py --overloaded)")
    })
}

async fn connect(variable: &str, policy: RetryPolicy) -> Client {
    ConnectOptions::new()
        .retry(policy)
        .connect(&env(variable))
        .await
        .expect("connect")
}

/// A request the fake refuses per `script` ("CODE:delay_ms ...", -1: no RetryInfo), under a
/// call id of its own.
fn scripted(script: &str) -> EstimateTokensRequest {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let id = format!("rust-{nanos}");
    EstimateTokensRequest {
        history: Some(History::chat([ChatMessage::user(format!("{id} {script}"))])),
    }
}

fn rpc_code(error: &Error) -> Code {
    error.code().expect("an RPC status")
}

#[tokio::test]
async fn retry_info_is_waited_for_then_the_call_succeeds() {
    let client = connect("TURNKEEPER_FLAKY_ADDRESS", RetryPolicy::default()).await;
    let started = Instant::now();
    let response = client
        .estimate_tokens(scripted("RESOURCE_EXHAUSTED:300 UNAVAILABLE:200"))
        .await
        .expect("the third attempt succeeds");
    assert_eq!(response.total_tokens, 3, "attempts");
    assert!(started.elapsed() >= Duration::from_millis(500));
}

#[tokio::test]
async fn attempts_are_bounded() {
    let client = connect("TURNKEEPER_FLAKY_ADDRESS", RetryPolicy::default()).await;
    let request = scripted("RESOURCE_EXHAUSTED:10 RESOURCE_EXHAUSTED:10 RESOURCE_EXHAUSTED:10");
    let error = client
        .estimate_tokens(request.clone())
        .await
        .expect_err("three refusals use up the attempts");
    assert_eq!(rpc_code(&error), Code::ResourceExhausted);
    assert_eq!(
        error.rpc().and_then(|rpc| rpc.retry_delay()),
        Some(Duration::from_millis(10))
    );
    // The fake's next answer counts the attempts made so far: three, and this one.
    let once = client.with_retry(RetryPolicy::disabled());
    let response = once
        .estimate_tokens(request)
        .await
        .expect("the fourth attempt");
    assert_eq!(response.total_tokens, 4);

    let five = RetryPolicy {
        max_attempts: 5,
        ..RetryPolicy::default()
    };
    let response = client
        .with_retry(five)
        .estimate_tokens(scripted(
            "RESOURCE_EXHAUSTED:10 RESOURCE_EXHAUSTED:10 UNAVAILABLE:10 UNAVAILABLE:10",
        ))
        .await
        .expect("the fifth attempt succeeds");
    assert_eq!(response.total_tokens, 5);
}

#[tokio::test]
async fn not_retried() {
    let small_max_delay = RetryPolicy {
        max_delay: Duration::from_millis(200),
        ..RetryPolicy::default()
    };
    for (why, script, policy, code) in [
        (
            "retrying turned off",
            "RESOURCE_EXHAUSTED:50",
            RetryPolicy::disabled(),
            Code::ResourceExhausted,
        ),
        (
            "RESOURCE_EXHAUSTED without RetryInfo",
            "RESOURCE_EXHAUSTED:-1",
            RetryPolicy::default(),
            Code::ResourceExhausted,
        ),
        (
            "RetryInfo over max_delay",
            "RESOURCE_EXHAUSTED:500",
            small_max_delay,
            Code::ResourceExhausted,
        ),
        (
            "a code the policy does not retry",
            "INTERNAL:50",
            RetryPolicy::default(),
            Code::Internal,
        ),
    ] {
        let client = connect("TURNKEEPER_FLAKY_ADDRESS", policy).await;
        let request = scripted(script);
        let error = client
            .estimate_tokens(request.clone())
            .await
            .expect_err(why);
        assert_eq!(rpc_code(&error), code, "{why}");
        let next = client.with_retry(RetryPolicy::disabled());
        let response = next.estimate_tokens(request).await.expect(why);
        assert_eq!(
            response.total_tokens, 2,
            "{why}: one attempt, then this one"
        );
    }
}

#[tokio::test]
async fn unavailable_without_retry_info_backs_off() {
    let policy = RetryPolicy {
        backoff: Duration::from_millis(200),
        multiplier: 2.0,
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    let client = connect("TURNKEEPER_FLAKY_ADDRESS", policy).await;
    let started = Instant::now();
    let response = client
        .estimate_tokens(scripted("UNAVAILABLE:-1 UNAVAILABLE:-1"))
        .await
        .expect("the third attempt succeeds");
    assert_eq!(response.total_tokens, 3);
    assert!(started.elapsed() >= Duration::from_millis(200 + 400));
}

#[tokio::test]
async fn a_delay_past_the_deadline_returns_the_error_at_once() {
    let client = connect("TURNKEEPER_FLAKY_ADDRESS", RetryPolicy::default())
        .await
        .with_timeout(Duration::from_secs(1));
    let started = Instant::now();
    let error = client
        .estimate_tokens(scripted("RESOURCE_EXHAUSTED:2000"))
        .await
        .expect_err("a 2 s RetryInfo does not fit a 1 s deadline");
    assert_eq!(rpc_code(&error), Code::ResourceExhausted);
    assert!(started.elapsed() < Duration::from_millis(500));
}

fn hello() -> EstimateTokensRequest {
    EstimateTokensRequest {
        history: Some(History::chat([ChatMessage::user("hello")])),
    }
}

#[tokio::test]
async fn the_overloaded_server_is_retried_max_attempts_times() {
    let client = connect("TURNKEEPER_OVERLOADED_ADDRESS", RetryPolicy::default()).await;
    let started = Instant::now();
    let error = client
        .estimate_tokens(hello())
        .await
        .expect_err("overloaded");
    let elapsed = started.elapsed();
    let rpc = error.rpc().expect("an RPC status");
    assert_eq!(rpc.reason_name(), Some("ERROR_REASON_OVERLOADED"));
    let delay = rpc.retry_delay().expect("RetryInfo");
    // Three attempts: two waits of the RetryInfo delay, and not a third.
    assert!(elapsed >= 2 * delay && elapsed < 3 * delay, "{elapsed:?}");
}

#[tokio::test]
async fn the_overloaded_server_within_the_deadline() {
    let client = connect("TURNKEEPER_OVERLOADED_ADDRESS", RetryPolicy::default())
        .await
        .with_timeout(Duration::from_millis(1500));
    let started = Instant::now();
    let error = client
        .estimate_tokens(hello())
        .await
        .expect_err("overloaded");
    let elapsed = started.elapsed();
    // Refused at 0 s, waited 1 s, refused again; a second wait would pass the 1.5 s deadline.
    assert_eq!(rpc_code(&error), Code::ResourceExhausted);
    assert_eq!(
        error.rpc().and_then(|rpc| rpc.retry_delay()),
        Some(Duration::from_secs(1))
    );
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_millis(1500),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn the_overloaded_server_with_retrying_off() {
    let client = connect("TURNKEEPER_OVERLOADED_ADDRESS", RetryPolicy::disabled()).await;
    let started = Instant::now();
    let error = client
        .estimate_tokens(hello())
        .await
        .expect_err("overloaded");
    assert_eq!(rpc_code(&error), Code::ResourceExhausted);
    assert!(started.elapsed() < Duration::from_millis(900));
}
