//! Connecting to the sidecar and calling its unary RPCs.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::time::Instant;
#[cfg(feature = "tls")]
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Response, Status};

use crate::credentials::Credentials;
use crate::error::{Error, Result, RpcError};
use crate::events::{ReconnectPolicy, TrimEventStream};
use crate::pb::history_service_client::HistoryServiceClient;
use crate::pb::{
    CapToolResultsRequest, CapToolResultsResponse, CheckCapacityRequest, CheckCapacityResponse,
    ClassifyProviderErrorRequest, ClassifyProviderErrorResponse, EstimateTokensRequest,
    EstimateTokensResponse, PlanCompactionRequest, PlanCompactionResponse, PrepareModelCallRequest,
    PrepareModelCallResponse, ResolveBudgetRequest, ResolveBudgetResponse, SweepOrphansRequest,
    SweepOrphansResponse, TrimEventsRequest, TrimHistoryRequest, TrimHistoryResponse,
};
use crate::retry::RetryPolicy;

/// The server accepts messages up to 64 MiB; the client matches so large histories round-trip.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;
/// The default deadline of a unary call. Calls are local and CPU-bound: seconds mean trouble.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default limit on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the sidecar listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A TCP endpoint as an `http://host:port` URI.
    Tcp(String),
    /// A Unix domain socket path.
    Unix(PathBuf),
}

impl Target {
    /// A Unix socket target.
    pub fn unix(path: impl Into<PathBuf>) -> Self {
        Target::Unix(path.into())
    }
}

impl FromStr for Target {
    type Err = Error;

    /// Accepts `host:port`, `http://host:port`, `unix:/path`, `unix:///path`, or a path that
    /// starts with `/` or `.` (a Unix socket).
    fn from_str(target: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidTarget {
            target: target.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = target
            .strip_prefix("unix://")
            .or_else(|| target.strip_prefix("unix:"))
        {
            return if path.is_empty() {
                Err(invalid("empty socket path"))
            } else {
                Ok(Target::Unix(PathBuf::from(path)))
            };
        }
        if target.starts_with('/') || target.starts_with('.') {
            return Ok(Target::Unix(PathBuf::from(target)));
        }
        if target.starts_with("https://") {
            return Err(invalid(
                "give host:port and ConnectOptions::tls(...) for a TLS connection",
            ));
        }
        let uri = if target.starts_with("http://") {
            target.to_owned()
        } else {
            format!("http://{target}")
        };
        let parsed: Uri = uri.parse().map_err(|e| invalid(&format!("{e}")))?;
        if parsed.port_u16().is_none() {
            return Err(invalid("a TCP target needs a port, e.g. 127.0.0.1:50051"));
        }
        Ok(Target::Tcp(uri))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp(uri) => f.write_str(uri),
            Target::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// TLS settings for a sidecar started with `--tls-cert` (and, for mTLS, `--tls-client-ca`).
///
/// ```no_run
/// # async fn demo() -> turnkeeper_client::Result<()> {
/// let ca = std::fs::read("ca.pem").unwrap();
/// let tls = turnkeeper_client::TlsOptions::new().ca_pem(ca);
/// let client = turnkeeper_client::ConnectOptions::new()
///     .tls(tls)
///     .token("a-token-from-the-token-file")?
///     .connect("10.0.0.7:50051")
///     .await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "tls")]
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    domain_name: Option<String>,
}

#[cfg(feature = "tls")]
impl TlsOptions {
    /// Presents no client certificate and trusts no CA until [`ca_pem`](Self::ca_pem) (or a tonic
    /// root-store feature such as `tls-native-roots`, enabled by the application).
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts this PEM CA bundle instead of the system roots.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Presents this PEM certificate and private key (mTLS).
    pub fn identity_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// The name to verify the server certificate against; the target's host by default.
    pub fn domain_name(mut self, name: impl Into<String>) -> Self {
        self.domain_name = Some(name.into());
        self
    }

    fn config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        config = match &self.ca_pem {
            Some(pem) => config.ca_certificate(Certificate::from_pem(pem)),
            None => config.with_enabled_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(name) = &self.domain_name {
            config = config.domain_name(name.clone());
        }
        config
    }
}

/// How to connect: deadlines, message-size limit, TLS, token and whether to dial eagerly.
///
/// ```no_run
/// # async fn demo() -> turnkeeper_client::Result<()> {
/// use std::time::Duration;
/// let client = turnkeeper_client::ConnectOptions::new()
///     .timeout(Duration::from_secs(2))
///     .connect("unix:/run/turnkeeper.sock")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    timeout: Duration,
    connect_timeout: Duration,
    max_message_size: usize,
    lazy: bool,
    #[cfg(feature = "tls")]
    tls: Option<TlsOptions>,
    credentials: Credentials,
    retry: RetryPolicy,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            lazy: false,
            #[cfg(feature = "tls")]
            tls: None,
            credentials: Credentials::default(),
            retry: RetryPolicy::default(),
        }
    }
}

impl ConnectOptions {
    /// The defaults: 10 s per call, 5 s to connect, 64 MiB messages, eager connect.
    pub fn new() -> Self {
        Self::default()
    }

    /// The default deadline of every unary call; override per call with [`Client::with_timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How unary calls refused with `RESOURCE_EXHAUSTED` or `UNAVAILABLE` are retried
    /// ([`RetryPolicy::disabled`]: never); override per client with [`Client::with_retry`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The limit on establishing each connection (and each reconnection).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest message sent or received, in bytes.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Dial on the first call instead of in `connect`, so a runtime can start before its sidecar.
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// Connects over TLS (TCP targets only; a Unix socket stays plaintext).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sends `authorization: Bearer <token>` with every call, TrimEvents included.
    pub fn token(mut self, token: impl AsRef<str>) -> Result<Self> {
        self.credentials = Credentials::bearer(token.as_ref())?;
        Ok(self)
    }

    /// Connects to a target string (see [`Target`]'s `FromStr` for the accepted forms).
    pub async fn connect(&self, target: &str) -> Result<Client> {
        self.connect_to(target.parse()?).await
    }

    /// Connects to a Unix socket path.
    pub async fn connect_unix(&self, path: impl AsRef<Path>) -> Result<Client> {
        self.connect_to(Target::unix(path.as_ref())).await
    }

    /// Connects to a parsed target.
    pub async fn connect_to(&self, target: Target) -> Result<Client> {
        let failed = |source: tonic::transport::Error| Error::Connect {
            target: target.to_string(),
            source,
        };
        let channel = match &target {
            Target::Tcp(uri) => {
                #[cfg(feature = "tls")]
                let endpoint = match &self.tls {
                    // tonic speaks TLS only to https:// URIs.
                    Some(tls) => Endpoint::from_shared(uri.replacen("http://", "https://", 1))
                        .and_then(|endpoint| endpoint.tls_config(tls.config()))
                        .map_err(failed)?,
                    None => Endpoint::from_shared(uri.clone()).map_err(failed)?,
                };
                #[cfg(not(feature = "tls"))]
                let endpoint = Endpoint::from_shared(uri.clone()).map_err(failed)?;
                let endpoint = endpoint
                    .tcp_nodelay(true)
                    .connect_timeout(self.connect_timeout);
                if self.lazy {
                    endpoint.connect_lazy()
                } else {
                    endpoint.connect().await.map_err(failed)?
                }
            }
            Target::Unix(path) => {
                // The URI only fills the :authority header; the connector dials the socket.
                let endpoint =
                    Endpoint::from_static("http://localhost").connect_timeout(self.connect_timeout);
                let path = path.clone();
                let connector = tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { UnixStream::connect(path).await.map(TokioIo::new) }
                });
                if self.lazy {
                    endpoint.connect_with_connector_lazy(connector)
                } else {
                    endpoint
                        .connect_with_connector(connector)
                        .await
                        .map_err(failed)?
                }
            }
        };
        Ok(Client::from_channel_with(channel, self))
    }
}

/// An async client of turnkeeper's `HistoryService`.
///
/// Cheap to clone: clones share one HTTP/2 connection, which reconnects by itself after a failure.
/// Every unary call carries a deadline (10 s unless configured) that is both sent to the server
/// and enforced locally.
#[derive(Debug, Clone)]
pub struct Client {
    inner: HistoryServiceClient<Channel>,
    timeout: Duration,
    credentials: Credentials,
    retry: RetryPolicy,
}

macro_rules! unary {
    ($(#[$doc:meta])* $name:ident($req:ty) -> $resp:ty) => {
        $(#[$doc])*
        pub async fn $name(&self, request: $req) -> Result<$resp> {
            self.unary(request, |mut stub, request| async move { stub.$name(request).await }).await
        }
    };
}

impl Client {
    /// Connects with the default [`ConnectOptions`] to `host:port`, `unix:/path` or a socket path.
    pub async fn connect(target: &str) -> Result<Self> {
        ConnectOptions::new().connect(target).await
    }

    /// Connects with the default [`ConnectOptions`] to a Unix socket path.
    pub async fn connect_unix(path: impl AsRef<Path>) -> Result<Self> {
        ConnectOptions::new().connect_unix(path).await
    }

    /// Wraps a channel built elsewhere (another connector, extra tower layers), with default options.
    pub fn from_channel(channel: Channel) -> Self {
        Self::from_channel_with(channel, &ConnectOptions::new())
    }

    fn from_channel_with(channel: Channel, options: &ConnectOptions) -> Self {
        let inner = HistoryServiceClient::new(channel)
            .max_decoding_message_size(options.max_message_size)
            .max_encoding_message_size(options.max_message_size);
        Client {
            inner,
            timeout: options.timeout,
            credentials: options.credentials.clone(),
            retry: options.retry,
        }
    }

    /// A client sharing this one's connection whose calls use another deadline:
    /// `client.with_timeout(Duration::from_millis(300)).trim_history(req).await`.
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        Client {
            timeout,
            ..self.clone()
        }
    }

    /// A client sharing this one's connection whose unary calls retry per `policy`.
    pub fn with_retry(&self, policy: RetryPolicy) -> Self {
        Client {
            retry: policy,
            ..self.clone()
        }
    }

    /// The deadline of each unary call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The generated tonic stub, configured with this client's message-size limits, for what the
    /// wrapper does not cover (custom metadata, per-request extensions).
    pub fn stub(&self) -> HistoryServiceClient<Channel> {
        self.inner.clone()
    }

    /// One unary call: the deadline (sent as grpc-timeout and enforced locally) spans every
    /// attempt, and a refusal the [`RetryPolicy`] allows is retried after its delay.
    async fn unary<Req, Resp, F, Fut>(&self, message: Req, call: F) -> Result<Resp>
    where
        Req: Clone + Default,
        F: Fn(HistoryServiceClient<Channel>, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let deadline = Instant::now() + self.timeout;
        let deadline_exceeded = || {
            Error::from(Status::deadline_exceeded(format!(
                "no response within the {:?} deadline",
                self.timeout
            )))
        };
        let mut message = message;
        let mut retry = 0;
        loop {
            // The last attempt the policy allows takes the message; earlier ones send a copy.
            let body = if retry + 1 >= self.retry.max_attempts {
                std::mem::take(&mut message)
            } else {
                message.clone()
            };
            let mut request = Request::new(body);
            self.credentials.apply(&mut request);
            // grpc-timeout lets the server give up too; the local timer also covers a server that
            // never answers at all.
            let left = deadline.saturating_duration_since(Instant::now());
            request.set_timeout(left);
            let status = match tokio::time::timeout(left, call(self.inner.clone(), request)).await {
                Ok(Ok(response)) => return Ok(response.into_inner()),
                // tonic's channel enforces grpc-timeout too, but reports it as CANCELLED.
                Ok(Err(status)) if caused_by_timeout(&status) => return Err(deadline_exceeded()),
                Ok(Err(status)) => status,
                Err(_) => return Err(deadline_exceeded()),
            };
            let error = RpcError::from(status);
            retry += 1;
            match self.retry.delay(&error, retry) {
                Some(delay) if delay < deadline.saturating_duration_since(Instant::now()) => {
                    tokio::time::sleep(delay).await;
                }
                _ => return Err(Error::Rpc(Box::new(error))),
            }
        }
    }

    unary! {
        /// Prices a history with the pinned heuristic, in total and per row.
        estimate_tokens(EstimateTokensRequest) -> EstimateTokensResponse
    }
    unary! {
        /// Resolves the effective route, its capacity, the proactive token budget and the turn limit.
        resolve_budget(ResolveBudgetRequest) -> ResolveBudgetResponse
    }
    unary! {
        /// Applies one trimming operation. When turns were dropped on the agent path,
        /// `history_trimmed` carries the `HistoryTrimmed` event that was also published.
        trim_history(TrimHistoryRequest) -> TrimHistoryResponse
    }
    unary! {
        /// Prepares a history for one provider call: resolve, orphan sweep, turn limit,
        /// token-budget trim or overflow recovery, capacity pre-flight. A request that does not
        /// fit fails with `FAILED_PRECONDITION` and [`RpcError::capacity_report`](crate::RpcError::capacity_report).
        prepare_model_call(PrepareModelCallRequest) -> PrepareModelCallResponse
    }
    unary! {
        /// Runs the capacity pre-flight alone; fails like `prepare_model_call` when it does not fit.
        check_capacity(CheckCapacityRequest) -> CheckCapacityResponse
    }
    unary! {
        /// Removes tool results without a call and tool calls without a result.
        sweep_orphans(SweepOrphansRequest) -> SweepOrphansResponse
    }
    unary! {
        /// Applies the `max_tool_result_chars` cap to tool results being recorded.
        cap_tool_results(CapToolResultsRequest) -> CapToolResultsResponse
    }
    unary! {
        /// Says whether a provider error is a context-window overflow (spec §10.4) and which
        /// phrase matched: the decision that starts reactive recovery (`overflow_recovery`).
        classify_provider_error(ClassifyProviderErrorRequest) -> ClassifyProviderErrorResponse
    }
    unary! {
        /// Says what to condense instead of dropping it (spec §15.3) and hands over a summary
        /// request that fits the summarizer's route. It never calls a model: send the plan's
        /// `summary_request`, then build the new history with
        /// [`apply_compaction`](crate::apply_compaction). A response without a plan carries its
        /// `CompactionRefusal` (nothing to condense, too large, no saving); that is not an error.
        plan_compaction(PlanCompactionRequest) -> PlanCompactionResponse
    }

    /// Subscribes to the `TrimEvents` feed with the default [`ReconnectPolicy`].
    ///
    /// Returns only once the server has answered the subscription (its first heartbeat, or the
    /// first replayed item when resuming; that item is still the first `next()` yields), so a
    /// trim made after it returns is always delivered. Fails with the server's error, or
    /// `UNAVAILABLE` when no answer came within the stall timeout (three heartbeat intervals by
    /// default). The stream remembers the last cursor and, when the connection drops,
    /// resubscribes after it, so each event is seen once.
    pub async fn trim_events(&self, request: TrimEventsRequest) -> Result<TrimEventStream> {
        self.trim_events_with(request, ReconnectPolicy::default())
            .await
    }

    /// Subscribes to the `TrimEvents` feed with a custom reconnect policy.
    pub async fn trim_events_with(
        &self,
        request: TrimEventsRequest,
        policy: ReconnectPolicy,
    ) -> Result<TrimEventStream> {
        TrimEventStream::open(
            self.inner.clone(),
            request,
            policy,
            self.credentials.clone(),
        )
        .await
    }
}

fn caused_by_timeout(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let tcp = |s: &str| Target::Tcp(s.to_owned());
        assert_eq!(
            "127.0.0.1:50051".parse::<Target>().unwrap(),
            tcp("http://127.0.0.1:50051")
        );
        assert_eq!(
            "http://localhost:7".parse::<Target>().unwrap(),
            tcp("http://localhost:7")
        );
        assert_eq!("[::1]:9".parse::<Target>().unwrap(), tcp("http://[::1]:9"));
        assert_eq!(
            "unix:/tmp/a.sock".parse::<Target>().unwrap(),
            Target::unix("/tmp/a.sock")
        );
        assert_eq!(
            "unix:///tmp/a.sock".parse::<Target>().unwrap(),
            Target::unix("/tmp/a.sock")
        );
        assert_eq!(
            "/tmp/a.sock".parse::<Target>().unwrap(),
            Target::unix("/tmp/a.sock")
        );
        assert_eq!(
            "./a.sock".parse::<Target>().unwrap(),
            Target::unix("./a.sock")
        );
        for bad in ["localhost", "unix:", "https://x:1", "a b:1"] {
            assert!(
                matches!(bad.parse::<Target>(), Err(Error::InvalidTarget { .. })),
                "{bad} should be rejected"
            );
        }
    }
}
