//! TLS, mTLS and bearer tokens against the servers of `with_server.py --secure`, with
//! certificates issued when the run started.

use turnkeeper_client::pb::{ChatMessage, ErrorReason, EstimateTokensRequest, History};
use turnkeeper_client::{Client, Code, ConnectOptions, Result, TlsOptions};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `make -C clients/rust test` (with_server.py --secure)")
    })
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(env(name)).expect("read a PEM file exported by with_server.py")
}

fn tls(mtls: bool) -> TlsOptions {
    let options = TlsOptions::new().ca_pem(read("TURNKEEPER_TLS_CA"));
    if mtls {
        options.identity_pem(
            read("TURNKEEPER_TLS_CLIENT_CERT"),
            read("TURNKEEPER_TLS_CLIENT_KEY"),
        )
    } else {
        options
    }
}

async fn estimate(client: &Client) -> Result<u32> {
    let history = History::chat(vec![
        ChatMessage::user("hello"),
        ChatMessage::assistant("hi"),
        ChatMessage::user("again"),
    ]);
    let response = client
        .estimate_tokens(EstimateTokensRequest {
            history: Some(history),
        })
        .await?;
    Ok(response.turns)
}

#[tokio::test]
async fn tls_with_a_token() {
    let client = ConnectOptions::new()
        .tls(tls(false))
        .token(env("TURNKEEPER_TOKEN"))
        .unwrap()
        .connect(&env("TURNKEEPER_TLS_ADDRESS"))
        .await
        .expect("TLS connect");
    assert_eq!(estimate(&client).await.unwrap(), 2);
}

#[tokio::test]
async fn tls_without_a_token_is_unauthenticated() {
    let client = ConnectOptions::new()
        .tls(tls(false))
        .connect(&env("TURNKEEPER_TLS_ADDRESS"))
        .await
        .expect("TLS connect");
    let error = estimate(&client).await.unwrap_err();
    assert_eq!(error.code(), Some(Code::Unauthenticated));
    assert_eq!(error.reason(), Some(ErrorReason::Unauthenticated));
}

#[tokio::test]
async fn mtls_with_a_client_certificate_and_a_token() {
    let client = ConnectOptions::new()
        .tls(tls(true))
        .token(env("TURNKEEPER_TOKEN"))
        .unwrap()
        .connect(&env("TURNKEEPER_MTLS_ADDRESS"))
        .await
        .expect("mTLS connect");
    assert_eq!(estimate(&client).await.unwrap(), 2);
}

#[tokio::test]
async fn mtls_without_a_client_certificate_fails() {
    let connected = ConnectOptions::new()
        .tls(tls(false))
        .token(env("TURNKEEPER_TOKEN"))
        .unwrap()
        .lazy(true)
        .connect(&env("TURNKEEPER_MTLS_ADDRESS"))
        .await
        .expect("a lazy connect does not dial");
    let error = estimate(&connected).await.unwrap_err();
    // The handshake is refused. Depending on when the server's TLS 1.3 alert lands, tonic reports
    // the dead connection as UNAVAILABLE, CANCELLED or UNKNOWN ("transport error"): never an
    // answer of the server, which would carry an ErrorInfo.
    assert!(
        matches!(
            error.code(),
            Some(Code::Unavailable | Code::Cancelled | Code::Unknown)
        ),
        "{error}"
    );
    assert_eq!(error.reason(), None, "{error}");
}

#[test]
fn a_token_must_be_a_header_value() {
    assert!(ConnectOptions::new().token("bad\ntoken").is_err());
}

#[tokio::test]
async fn trim_events_carry_the_token_and_honour_the_subscribe_right() {
    use turnkeeper_client::FeedItem;
    use turnkeeper_client::pb::TrimEventsRequest;
    let allowed = ConnectOptions::new()
        .tls(tls(false))
        .token(env("TURNKEEPER_TOKEN"))
        .unwrap()
        .connect(&env("TURNKEEPER_TLS_ADDRESS"))
        .await
        .expect("TLS connect");
    let mut events = allowed
        .trim_events(TrimEventsRequest::default())
        .await
        .expect("a token with trim_events may subscribe");
    let first = events.next().await.expect("an item").expect("no error");
    assert!(matches!(first, FeedItem::Heartbeat(_)), "{first:?}");

    let denied = ConnectOptions::new()
        .tls(tls(false))
        .token(env("TURNKEEPER_TOKEN_NO_EVENTS"))
        .unwrap()
        .connect(&env("TURNKEEPER_TLS_ADDRESS"))
        .await
        .expect("TLS connect");
    let Err(error) = denied.trim_events(TrimEventsRequest::default()).await else {
        panic!("a token without trim_events was allowed to subscribe");
    };
    assert_eq!(error.code(), Some(Code::PermissionDenied), "{error}");
    assert_eq!(error.reason(), Some(ErrorReason::PermissionDenied));
}
