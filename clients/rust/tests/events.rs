//! TrimEvents through the wrapper against the live server: subscribe-then-trim, resume by
//! cursor, reconnects through a cut connection, stalls, and the stream as a futures `Stream`.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use turnkeeper_client::pb::{
    self, CallerContext, CallerPath, ChatMessage, ExplicitLimits, History, HistoryTrimmed,
    TrimEvent, TrimEventsRequest, TrimHistoryRequest, TrimMode, trim_history_request,
};
use turnkeeper_client::{Client, Code, ConnectOptions, FeedItem, ReconnectPolicy, TrimEventStream};

use common::session_id;

fn subscription(session: &str) -> TrimEventsRequest {
    TrimEventsRequest {
        session_ids: vec![session.to_owned()],
        // Short, so an idle stream proves it is alive quickly. (The first heartbeat, and with it
        // the server's headers, comes at once: it answers the subscription.)
        heartbeat_interval: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        ..Default::default()
    }
}

/// A token-budget trim on the agent path that must drop the two older of three turns.
fn budget_trim(session: &str, turn: &str) -> TrimHistoryRequest {
    let filler = "x".repeat(400);
    let mut rows = vec![ChatMessage::system("You are a careful agent.")];
    for i in 0..3 {
        rows.push(ChatMessage::user(format!("{turn} question {i}: {filler}")));
        rows.push(ChatMessage::assistant(format!("answer {i}: {filler}")));
    }
    TrimHistoryRequest {
        history: Some(History::chat(rows)),
        mode: TrimMode::TokenBudget.into(),
        caller_path: CallerPath::Agent.into(),
        limits: Some(trim_history_request::Limits::ExplicitLimits(
            ExplicitLimits {
                budget_tokens: Some(300),
                ..Default::default()
            },
        )),
        caller: Some(CallerContext {
            session_id: session.to_owned(),
            turn_id: turn.to_owned(),
            ..Default::default()
        }),
        reported_usage: None,
    }
}

async fn trim(client: &Client, session: &str, turn: &str) -> HistoryTrimmed {
    let response = client
        .trim_history(budget_trim(session, turn))
        .await
        .expect("TrimHistory");
    let outcome = response.outcome.expect("outcome");
    assert!(outcome.trimmed);
    assert_eq!((outcome.dropped_turns, outcome.kept_turns), (2, 1));
    response
        .history_trimmed
        .expect("an agent-path trim that drops turns returns HistoryTrimmed")
}

/// The next event, skipping heartbeats; fails on anything else or after 15 s.
async fn next_event(stream: &mut TrimEventStream) -> TrimEvent {
    let wait = async {
        loop {
            match stream.next().await {
                Some(Ok(FeedItem::Event(event))) => return event,
                Some(Ok(FeedItem::Heartbeat(_))) => continue,
                other => panic!("expected an event, got {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(15), wait)
        .await
        .expect("an event within 15 s")
}

/// Asserts no further event arrives for `quiet` (heartbeats may).
async fn assert_no_event(stream: &mut TrimEventStream, quiet: Duration) {
    let _ = tokio::time::timeout(quiet, async {
        loop {
            match stream.next().await {
                Some(Ok(FeedItem::Heartbeat(_))) => continue,
                other => panic!("expected only heartbeats, got {other:?}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn trim_events_resume_after_the_last_cursor() {
    let client = common::tcp_client().await;
    let session = session_id("resume");

    let mut events = client
        .trim_events(subscription(&session))
        .await
        .expect("subscribe");
    let first = trim(&client, &session, "turn-1").await;
    let event = next_event(&mut events).await;
    assert_eq!(event.trimmed.as_ref(), Some(&first));
    assert!(!event.cursor.is_empty());
    assert_eq!(events.cursor(), Some(event.cursor.as_str()));
    let cursor = event.cursor.clone();
    drop(events); // disconnect

    let second = trim(&client, &session, "turn-2").await;
    let mut resumed = client
        .trim_events(TrimEventsRequest {
            after_cursor: cursor.clone(),
            ..subscription(&session)
        })
        .await
        .expect("resubscribe");
    assert_eq!(resumed.cursor(), Some(cursor.as_str()));
    let event = next_event(&mut resumed).await;
    assert_eq!(
        event.trimmed.as_ref(),
        Some(&second),
        "exactly the event missed while away"
    );
    assert_ne!(event.cursor, cursor);
    assert_no_event(&mut resumed, Duration::from_millis(1500)).await;
}

/// A TCP forwarder whose connections the test can cut, to make the stream fail mid-flight.
struct Proxy {
    address: SocketAddr,
    connections: Arc<Mutex<JoinSet<()>>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let tracked = connections.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tracked.lock().unwrap().spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Proxy {
            address,
            connections,
            acceptor,
        }
    }

    fn cut(&self) {
        self.connections.lock().unwrap().abort_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}

/// A parallel test keeps the server busy for seconds (100,000 rows to price), so an answer may
/// take longer than the default stall timeout of three 1 s heartbeat intervals.
fn patient() -> ReconnectPolicy {
    ReconnectPolicy {
        stall_timeout: Some(Duration::from_secs(15)),
        ..Default::default()
    }
}

/// docs/events.md: `trim_events` returns only once the server has answered, i.e. registered,
/// the subscription, so a trim made right after it, with no sleep in between, is delivered.
#[tokio::test]
async fn subscribe_then_trim_at_once_never_misses_the_trim() {
    let client = common::tcp_client().await;
    for round in 0..5 {
        let session = session_id("subscribe-then-trim");
        let mut events = client
            .trim_events_with(subscription(&session), patient())
            .await
            .expect("subscribe");
        let trimmed = trim(&client, &session, &format!("round-{round}")).await;
        // The heartbeat that answered the subscription before trim_events returned comes first;
        // its cursor counts only once it is handed out.
        assert_eq!(events.cursor(), None);
        match events.next().await {
            Some(Ok(FeedItem::Heartbeat(beat))) => {
                assert!(!beat.cursor.is_empty());
                assert_eq!(events.cursor(), Some(beat.cursor.as_str()));
            }
            other => panic!("expected the heartbeat answering the subscription, got {other:?}"),
        }
        assert_eq!(
            next_event(&mut events).await.trimmed.as_ref(),
            Some(&trimmed)
        );
    }
}

/// A resumed subscription is answered by its replay: the owed event is the first item.
#[tokio::test]
async fn a_resumed_subscription_is_answered_by_the_owed_event() {
    let client = common::tcp_client().await;
    let session = session_id("answered-by-replay");
    let mut live = client
        .trim_events_with(subscription(&session), patient())
        .await
        .expect("subscribe");
    assert!(matches!(
        live.next().await,
        Some(Ok(FeedItem::Heartbeat(_)))
    ));
    let cursor = live.cursor().expect("the answer named a cursor").to_owned();
    drop(live);
    let owed = trim(&client, &session, "owed").await;
    let mut resumed = client
        .trim_events_with(
            TrimEventsRequest {
                after_cursor: cursor.clone(),
                ..subscription(&session)
            },
            patient(),
        )
        .await
        .expect("resubscribe");
    // Held, not yet handed out: the cursor still names the resume point.
    assert_eq!(resumed.cursor(), Some(cursor.as_str()));
    match resumed.next().await {
        Some(Ok(FeedItem::Event(event))) => {
            assert_eq!(event.trimmed.as_ref(), Some(&owed));
            assert_eq!(resumed.cursor(), Some(event.cursor.as_str()));
        }
        other => panic!("expected the owed event first, got {other:?}"),
    }
}

/// A server that accepts the connection but never answers fails the subscription after the
/// stall timeout instead of hanging.
#[tokio::test]
async fn a_subscription_nobody_answers_fails_after_the_stall_timeout() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket); // never read, never written
        }
    });
    let client = ConnectOptions::new()
        .lazy(true)
        .connect(&address.to_string())
        .await
        .expect("lazy connect");
    let policy = ReconnectPolicy {
        stall_timeout: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    let began = Instant::now();
    let error = client
        .trim_events_with(TrimEventsRequest::default(), policy)
        .await
        .expect_err("nobody answers");
    assert_eq!(error.code(), Some(Code::Unavailable), "{error:?}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    holder.abort();
}

#[tokio::test]
async fn trim_events_reconnect_by_themselves_after_a_dropped_connection() {
    let direct = common::tcp_client().await;
    let proxy = Proxy::start(common::tcp_address()).await;
    let via_proxy = Client::connect(&proxy.address.to_string())
        .await
        .expect("connect via proxy");
    let session = session_id("reconnect");
    let policy = ReconnectPolicy {
        initial_backoff: Duration::from_millis(50),
        ..Default::default()
    };

    let mut events = via_proxy
        .trim_events_with(subscription(&session), policy)
        .await
        .unwrap();
    let first = trim(&direct, &session, "turn-1").await;
    assert_eq!(next_event(&mut events).await.trimmed.as_ref(), Some(&first));

    proxy.cut();
    let second = trim(&direct, &session, "turn-2").await;
    let event = next_event(&mut events).await;
    assert_eq!(
        event.trimmed.as_ref(),
        Some(&second),
        "resumed after the cursor, nothing replayed"
    );
    assert_eq!(events.cursor(), Some(event.cursor.as_str()));

    let third = trim(&direct, &session, "turn-3").await;
    assert_eq!(next_event(&mut events).await.trimmed.as_ref(), Some(&third));
    assert_no_event(&mut events, Duration::from_millis(1500)).await;
}

#[tokio::test]
async fn a_live_tail_cut_off_before_any_event_resumes_from_its_first_heartbeat() {
    let direct = common::tcp_client().await;
    let proxy = Proxy::start(common::tcp_address()).await;
    let via_proxy = Client::connect(&proxy.address.to_string())
        .await
        .expect("connect via proxy");
    let session = session_id("live-tail");
    let policy = ReconnectPolicy {
        initial_backoff: Duration::from_millis(50),
        ..Default::default()
    };

    // A live tail is answered at once (well within the 1 s heartbeat interval) with a heartbeat
    // naming the stream's resume position, which the subscription adopts as its cursor.
    let began = Instant::now();
    let mut events = via_proxy
        .trim_events_with(subscription(&session), policy)
        .await
        .unwrap();
    let beat = match events.next().await {
        Some(Ok(FeedItem::Heartbeat(beat))) => beat,
        other => panic!("expected the heartbeat answering the subscription, got {other:?}"),
    };
    assert!(
        began.elapsed() < Duration::from_millis(800),
        "first heartbeat after {:?}",
        began.elapsed()
    );
    assert!(!beat.cursor.is_empty());
    assert_eq!(events.cursor(), Some(beat.cursor.as_str()));

    // Cut before any event; the trim is published while the stream is down (it only reconnects
    // when next() is polled again), so it must come from resuming after the heartbeat's cursor.
    proxy.cut();
    let missed = trim(&direct, &session, "turn-1").await;
    let event = next_event(&mut events).await;
    assert_eq!(event.trimmed.as_ref(), Some(&missed));
    assert_eq!(events.cursor(), Some(event.cursor.as_str()));
    assert_no_event(&mut events, Duration::from_millis(1500)).await; // exactly once
}

#[tokio::test]
async fn unreadable_cursor_is_a_decoded_error_not_a_retry() {
    let client = common::unix_client().await;
    let request = TrimEventsRequest {
        after_cursor: "not-a-cursor".into(),
        ..subscription("x")
    };
    let error = client
        .trim_events(request)
        .await
        .expect_err("the cursor is unreadable");
    assert_eq!(error.code(), Some(Code::InvalidArgument));
    assert_eq!(error.reason(), Some(pb::ErrorReason::InvalidSubscription));
    assert_eq!(common::violated_fields(&error), ["after_cursor"]);
}

#[tokio::test]
async fn the_event_stream_is_a_futures_stream() {
    fn assert_stream<
        S: futures_util::Stream<Item = turnkeeper_client::Result<FeedItem>> + Unpin + Send,
    >(
        _: &S,
    ) {
    }
    let client = common::tcp_client().await;
    let session = session_id("stream");
    let mut events = client.trim_events(subscription(&session)).await.unwrap();
    assert_stream(&events);
    let published = trim(&client, &session, "turn-1").await;
    // Stream combinators: the first event, skipping the heartbeats.
    let first = tokio::time::timeout(
        Duration::from_secs(15),
        (&mut events)
            .filter_map(|item| {
                futures_util::future::ready(match item {
                    Ok(FeedItem::Event(event)) => Some(event),
                    _ => None,
                })
            })
            .next(),
    )
    .await
    .expect("an event within 15 s")
    .expect("the stream goes on");
    assert_eq!(first.trimmed.as_ref(), Some(&published));
    assert_eq!(events.cursor(), Some(first.cursor.as_str()));
}
