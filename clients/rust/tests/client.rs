//! The unary wrapper against the live server: decoded error details, deadlines and connection
//! handling.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::net::TcpListener;
use turnkeeper_client::pb::{
    self, ChatMessage, CheckCapacityRequest, EstimateTokensRequest, History, Profiles,
    ProviderProfile, RuntimeProfile,
};
use turnkeeper_client::{Client, Code, ConnectOptions, Error};

#[tokio::test]
async fn invalid_history_decodes_field_violations() {
    let client = common::unix_client().await;
    let history = History::chat([
        ChatMessage {
            content: "no role".into(),
            ..Default::default()
        },
        ChatMessage::tool("", "a result that answers no call id"),
    ]);
    let error = client
        .estimate_tokens(EstimateTokensRequest {
            history: Some(history),
        })
        .await
        .expect_err("the history is invalid");

    assert_eq!(error.code(), Some(Code::InvalidArgument));
    assert_eq!(error.reason(), Some(pb::ErrorReason::InvalidHistory));
    let rpc = error.rpc().unwrap();
    assert_eq!(rpc.reason_name(), Some("ERROR_REASON_INVALID_HISTORY"));
    assert_eq!(
        rpc.error_info().unwrap().domain,
        turnkeeper_client::ERROR_DOMAIN
    );
    let fields: BTreeSet<&str> = rpc
        .field_violations()
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            "history.chat.messages[0].role",
            "history.chat.messages[1].tool_call_id"
        ])
    );
    assert!(
        rpc.field_violations()
            .iter()
            .all(|v| !v.description.is_empty())
    );
    assert!(
        error.to_string().contains("ERROR_REASON_INVALID_HISTORY"),
        "{error}"
    );
}

#[tokio::test]
async fn capacity_overflow_decodes_the_capacity_report() {
    let client = common::tcp_client().await;
    let profiles = Profiles {
        runtime: Some(RuntimeProfile {
            default_provider: "small".into(),
            ..Default::default()
        }),
        providers: vec![ProviderProfile {
            alias: "small".into(),
            model: String::new(),
            context_window: Some(100),
            ..Default::default()
        }],
        selection: None,
    };
    let request = CheckCapacityRequest {
        history: Some(History::chat([ChatMessage::user("y".repeat(1000))])),
        profiles: Some(profiles),
        reserved_output_tokens: 10,
        ..Default::default()
    };
    let error = client
        .check_capacity(request)
        .await
        .expect_err("254 + 10 tokens exceed 100");

    assert_eq!(error.code(), Some(Code::FailedPrecondition));
    assert_eq!(error.reason(), Some(pb::ErrorReason::ContextWindowExceeded));
    let rpc = error.rpc().unwrap();
    let report = rpc.capacity_report().expect("a CapacityReport detail");
    assert_eq!(
        (
            report.message_tokens,
            report.reserved_output_tokens,
            report.total_tokens
        ),
        (254, 10, 264)
    );
    assert!(!report.fits);
    let capacity = report.capacity.as_ref().unwrap();
    assert_eq!((capacity.known, capacity.safety_tokens), (true, 100));
    assert!(
        rpc.precondition_failure()
            .is_some_and(|p| !p.violations.is_empty())
    );
}

#[tokio::test]
async fn per_call_deadline_overrides_the_default() {
    let client = common::tcp_client().await;
    // 100,000 rows take the server far longer than 20 ms to price, so the deadline always wins
    // (a microsecond deadline races tokio's millisecond timer on a fast loopback call).
    let big = EstimateTokensRequest {
        history: Some(History::chat((0..100_000).map(|_| ChatMessage::user("hi")))),
    };
    let error = client
        .with_timeout(Duration::from_millis(20))
        .estimate_tokens(big)
        .await
        .expect_err("pricing 100,000 rows takes longer than 20 ms");
    assert_eq!(error.code(), Some(Code::DeadlineExceeded));
    let request = EstimateTokensRequest {
        history: Some(History::chat([ChatMessage::user("hi")])),
    };
    // The original client keeps its own deadline.
    assert_eq!(client.timeout(), Duration::from_secs(20));
    assert_eq!(
        client.estimate_tokens(request).await.unwrap().total_tokens,
        5
    );
}

#[tokio::test]
async fn connect_failures_are_eager_or_deferred() {
    let missing =
        std::env::temp_dir().join(format!("turnkeeper-missing-{}.sock", std::process::id()));
    let eager = ConnectOptions::new()
        .connect_unix(&missing)
        .await
        .expect_err("no socket there");
    assert!(matches!(eager, Error::Connect { .. }), "{eager:?}");
    // Display carries the root cause, not only "cannot connect".
    let shown = eager.to_string();
    assert!(
        shown.contains("No such file or directory (os error 2)"),
        "{shown}"
    );

    let lazy = ConnectOptions::new()
        .lazy(true)
        .connect_unix(&missing)
        .await
        .expect("lazy connect");
    let error = lazy
        .estimate_tokens(EstimateTokensRequest {
            history: Some(History::chat([])),
        })
        .await
        .expect_err("nothing listens");
    assert_eq!(error.code(), Some(Code::Unavailable));
    // A deferred connect failure names its OS error too.
    let shown = error.to_string();
    assert!(
        shown.contains("No such file or directory (os error 2)"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_refused_connection_shows_the_os_error() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = Client::connect(&format!("127.0.0.1:{port}"))
        .await
        .expect_err("refused");
    let shown = error.to_string();
    assert!(
        shown.starts_with(&format!(
            "cannot connect to turnkeeper at http://127.0.0.1:{port}"
        )) && shown.contains("Connection refused (os error 111)"),
        "{shown}"
    );
}
