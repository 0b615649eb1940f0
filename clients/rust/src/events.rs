//! A resuming subscription to the `TrimEvents` feed.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tonic::transport::Channel;
use tonic::{Code, Request, Status, Streaming};

use crate::credentials::Credentials;
use crate::error::Result;
use crate::pb::history_service_client::HistoryServiceClient;
use crate::pb::trim_events_response::Item;
use crate::pb::{TrimEventsRequest, TrimEventsResponse};

/// One item of the feed: an event, a heartbeat, or a gap notice.
pub type FeedItem = Item;

/// The server's heartbeat interval when the request leaves it unset.
const SERVER_DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);

/// How a [`TrimEventStream`] reconnects after the connection drops.
///
/// Delays grow exponentially from `initial_backoff` to `max_backoff`, each randomised to between
/// half and all of its value so that many runtimes do not reconnect in lockstep.
#[derive(Debug, Clone)]
pub struct ReconnectPolicy {
    /// The delay before the first reconnection attempt.
    pub initial_backoff: Duration,
    /// The largest delay between two attempts.
    pub max_backoff: Duration,
    /// Give up after this many consecutive failed attempts; `None` retries forever.
    pub max_attempts: Option<u32>,
    /// Treat the stream as dead when nothing (not even a heartbeat) arrives for this long.
    /// `None` derives it from the requested heartbeat interval: three intervals.
    pub stall_timeout: Option<Duration>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_attempts: None,
            stall_timeout: None,
        }
    }
}

impl ReconnectPolicy {
    fn delay(&self, attempt: u32) -> Duration {
        let exponential = self.initial_backoff.saturating_mul(1u32 << attempt.min(16));
        let capped = exponential.min(self.max_backoff);
        // A fresh RandomState is randomly keyed: a dependency-free source of jitter.
        let unit = RandomState::new().hash_one(attempt) as f64 / u64::MAX as f64;
        capped.mul_f64(0.5 + unit / 2.0)
    }
}

/// A `TrimEvents` subscription that survives disconnects.
///
/// It remembers the cursor of the last event (and the resume position heartbeats carry) and, when
/// the stream ends, stalls, or fails with a transport error or `UNAVAILABLE`, resubscribes with
/// `after_cursor` set to it after a backoff, so the consumer sees every event once. Other errors
/// (a bad request, an unreadable cursor) end the stream after being returned once.
///
/// The server answers a new subscription at once with a heartbeat naming the stream's resume
/// position, so a live tail has a cursor before its first event: a resubscription before any
/// event still receives what was published while disconnected. (Only a Redis-backed feed whose
/// stream holds no entry at all sends an empty cursor; the subscription then stays a live tail.)
///
/// It is a [`futures::Stream`](Stream) of `Result<FeedItem>`, so stream combinators apply; the
/// inherent [`next`](Self::next) needs no extension trait in scope.
pub struct TrimEventStream {
    /// The subscription, while no poll holds it.
    idle: Option<Subscription>,
    /// The step in flight: it owns the subscription and gives it back with the item.
    step: Option<Step>,
    /// The resume cursor as of the last item returned.
    cursor: Option<String>,
}

type Step = Pin<Box<dyn Future<Output = (Subscription, Option<Result<FeedItem>>)> + Send>>;

impl TrimEventStream {
    pub(crate) async fn open(
        stub: HistoryServiceClient<Channel>,
        request: TrimEventsRequest,
        policy: ReconnectPolicy,
        credentials: Credentials,
    ) -> Result<Self> {
        let subscription = Subscription::open(stub, request, policy, credentials).await?;
        Ok(TrimEventStream {
            cursor: subscription.cursor.clone(),
            idle: Some(subscription),
            step: None,
        })
    }

    /// The cursor to resume after: the last event's or heartbeat's, or before any item the one
    /// the subscription started from.
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }

    /// The next item of the feed, reconnecting as needed; `None` once the subscription ended
    /// for good (a non-retryable error was returned, or reconnection attempts ran out).
    pub async fn next(&mut self) -> Option<Result<FeedItem>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for TrimEventStream {
    type Item = Result<FeedItem>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.step.is_none() {
            let Some(mut subscription) = this.idle.take() else {
                return Poll::Ready(None);
            };
            this.step = Some(Box::pin(async move {
                let item = subscription.next().await;
                (subscription, item)
            }));
        }
        let step = this.step.as_mut().expect("a step is in flight");
        let (subscription, item) = std::task::ready!(step.as_mut().poll(cx));
        this.step = None;
        this.cursor = subscription.cursor.clone();
        this.idle = Some(subscription);
        Poll::Ready(item)
    }
}

impl fmt::Debug for TrimEventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrimEventStream")
            .field("cursor", &self.cursor)
            .field("polling", &self.step.is_some())
            .finish_non_exhaustive()
    }
}

/// The batch size a subscription asks for when its request leaves `max_batch_events` at 0; set it
/// to 1 for one item per stream message.
pub const DEFAULT_MAX_BATCH_EVENTS: u32 = 100;

/// The reconnecting subscription behind a [`TrimEventStream`], driven one item at a time.
struct Subscription {
    stub: HistoryServiceClient<Channel>,
    credentials: Credentials,
    request: TrimEventsRequest,
    policy: ReconnectPolicy,
    stall_timeout: Duration,
    cursor: Option<String>,
    stream: Option<Streaming<TrimEventsResponse>>,
    /// Items received but not yet handed out: the one that answered the current stream, or the
    /// rest of a batch. A cursor counts only once its item is handed out, so a cursor persisted
    /// before that cannot skip it.
    pending: VecDeque<FeedItem>,
    failures: u32,
    finished: bool,
}

impl Subscription {
    async fn open(
        stub: HistoryServiceClient<Channel>,
        request: TrimEventsRequest,
        policy: ReconnectPolicy,
        credentials: Credentials,
    ) -> Result<Self> {
        let heartbeat = request
            .heartbeat_interval
            .and_then(|d| Duration::try_from(d).ok())
            .unwrap_or(SERVER_DEFAULT_HEARTBEAT)
            .clamp(Duration::from_secs(1), Duration::from_secs(300));
        let cursor = Some(request.after_cursor.clone()).filter(|c| !c.is_empty());
        let mut request = request;
        if request.max_batch_events == 0 {
            // Batches let a subscriber keep up with a loaded server; items are handed out one by one.
            request.max_batch_events = DEFAULT_MAX_BATCH_EVENTS;
        }
        let mut this = Subscription {
            stub,
            credentials,
            stall_timeout: policy.stall_timeout.unwrap_or(heartbeat * 3),
            request,
            policy,
            cursor,
            stream: None,
            pending: VecDeque::new(),
            failures: 0,
            finished: false,
        };
        this.subscribe().await?;
        Ok(this)
    }

    async fn next(&mut self) -> Option<Result<FeedItem>> {
        while !self.finished {
            while let Some(pending) = self.pending.pop_front() {
                if let Some(item) = self.observe(pending) {
                    return Some(Ok(item));
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                if let Err(error) = self.reconnect().await {
                    self.finished = true;
                    return Some(Err(error));
                }
                continue;
            };
            let status = match tokio::time::timeout(self.stall_timeout, stream.message()).await {
                Ok(Ok(Some(TrimEventsResponse { item: Some(item) }))) => {
                    self.failures = 0;
                    self.pending.extend(unpacked(item));
                    continue;
                }
                // An empty oneof is a newer server's item kind this client cannot show.
                Ok(Ok(Some(TrimEventsResponse { item: None }))) => continue,
                Ok(Ok(None)) => Status::unavailable("the server ended the TrimEvents stream"),
                Ok(Err(status)) => status,
                Err(_) => Status::unavailable(format!(
                    "no TrimEvents item or heartbeat for {:?}",
                    self.stall_timeout
                )),
            };
            self.stream = None;
            if !is_resumable(&status) {
                self.finished = true;
                return Some(Err(status.into()));
            }
            tracing::debug!(cursor = ?self.cursor, %status, "TrimEvents disconnected; resuming");
        }
        None
    }

    /// Records the resume position and filters the replay of an event already delivered.
    fn observe(&mut self, item: FeedItem) -> Option<FeedItem> {
        match &item {
            Item::Event(event) => {
                if self.cursor.as_deref() == Some(event.cursor.as_str()) {
                    return None;
                }
                self.cursor = Some(event.cursor.clone());
            }
            // A meter update's cursor is the feed position of the trims before it, shared by
            // every update until the next trim: it moves the resume point but names no item.
            Item::MeterUpdate(update) => self.cursor = Some(update.cursor.clone()),
            Item::Heartbeat(beat) if !beat.cursor.is_empty() => {
                self.cursor = Some(beat.cursor.clone());
            }
            // Batches are unpacked before they get here.
            Item::Heartbeat(_) | Item::Gap(_) | Item::Batch(_) => {}
        }
        Some(item)
    }

    async fn reconnect(&mut self) -> Result<()> {
        loop {
            tokio::time::sleep(self.policy.delay(self.failures)).await;
            self.failures = self.failures.saturating_add(1);
            match self.subscribe().await {
                Ok(()) => return Ok(()),
                Err(error) => {
                    let exhausted = self
                        .policy
                        .max_attempts
                        .is_some_and(|max| self.failures >= max);
                    let resumable = error.rpc().is_some_and(|rpc| is_resumable(rpc.status()));
                    if exhausted || !resumable {
                        return Err(error);
                    }
                    tracing::debug!(attempt = self.failures, %error, "TrimEvents reconnect failed");
                }
            }
        }
    }

    /// Opens one stream and waits for the server's answer: the heartbeat it sends once the
    /// subscription is registered, or the first replayed item when resuming. Only then can no
    /// later trim be missed, so [`Client::trim_events`](crate::Client::trim_events) returns after
    /// it. The stall timeout bounds the wait.
    async fn subscribe(&mut self) -> Result<()> {
        let mut request = self.request.clone();
        request.after_cursor = self.cursor.clone().unwrap_or_default();
        let mut request = Request::new(request);
        self.credentials.apply(&mut request);
        let opening = async {
            let mut stream = self.stub.trim_events(request).await?.into_inner();
            loop {
                match stream.message().await? {
                    Some(TrimEventsResponse { item: Some(item) }) => return Ok((stream, item)),
                    // An empty oneof is a newer server's item kind: it still answers.
                    Some(TrimEventsResponse { item: None }) => continue,
                    None => {
                        return Err(Status::unavailable(
                            "the server ended the TrimEvents stream before answering",
                        ));
                    }
                }
            }
        };
        match tokio::time::timeout(self.stall_timeout, opening).await {
            Ok(Ok((stream, item))) => {
                self.pending = unpacked(item).collect();
                self.stream = Some(stream);
                Ok(())
            }
            Ok(Err(status)) => Err(status.into()),
            Err(_) => Err(Status::unavailable(format!(
                "TrimEvents not answered within {:?}",
                self.stall_timeout
            ))
            .into()),
        }
    }
}

/// The items of one stream message: a batch's (sent when the request set `max_batch_events`
/// above 1), in order, or the item itself.
fn unpacked(item: Item) -> impl Iterator<Item = Item> {
    let (batch, single) = match item {
        Item::Batch(batch) => (batch.items, None),
        other => (Vec::new(), Some(other)),
    };
    batch
        .into_iter()
        .filter_map(|response| response.item)
        .chain(single)
}

/// Whether a failed stream is worth resuming: the server is unavailable (restarting, shutting
/// down, feed backend down), or the status was synthesised locally from a transport failure
/// (tonic only attaches a source error then; a status the server sent has none).
fn is_resumable(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable => true,
        Code::Unknown | Code::Internal | Code::Cancelled => {
            std::error::Error::source(status).is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_with_jitter() {
        let policy = ReconnectPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..ReconnectPolicy::default()
        };
        for (attempt, nominal) in [
            (0, 100),
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1000),
            (40, 1000),
        ] {
            let delay = policy.delay(attempt);
            let nominal = Duration::from_millis(nominal);
            assert!(
                delay >= nominal / 2 && delay <= nominal,
                "attempt {attempt}: {delay:?}"
            );
        }
    }

    #[test]
    fn a_batch_unpacks_into_its_items_in_order_and_a_single_item_stays_one() {
        use crate::pb::{Heartbeat, TrimEvent, TrimEventsBatch};
        let event = |cursor: &str| {
            Item::Event(TrimEvent {
                cursor: cursor.to_owned(),
                ..TrimEvent::default()
            })
        };
        let batch = Item::Batch(TrimEventsBatch {
            items: ["a", "b", "c"]
                .map(|cursor| TrimEventsResponse {
                    item: Some(event(cursor)),
                })
                .to_vec(),
        });
        assert_eq!(
            unpacked(batch).collect::<Vec<_>>(),
            vec![event("a"), event("b"), event("c")]
        );
        let beat = Item::Heartbeat(Heartbeat::default());
        assert_eq!(unpacked(beat.clone()).collect::<Vec<_>>(), vec![beat]);
    }

    #[test]
    fn server_statuses_are_not_resumable_unless_unavailable() {
        assert!(is_resumable(&Status::unavailable("restarting")));
        assert!(!is_resumable(&Status::invalid_argument("bad cursor")));
        assert!(!is_resumable(&Status::unknown("server said so")));
        let transport = Status::from_error(Box::new(std::io::Error::other("connection reset")));
        assert_eq!(transport.code(), Code::Unknown);
        assert!(is_resumable(&transport));
    }
}
