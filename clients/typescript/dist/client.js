import { setMaxListeners } from "node:events";
import { isIP, connect as netConnect } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { callError } from "./errors.js";
import { TrimEventSubscription } from "./events.js";
import { DEFAULT_RETRY_POLICY, retryInterceptor } from "./retry.js";
import { HistoryService, } from "./gen/turnkeeper/v1/history_service_pb.js";
/** The server's message-size limit (64 MiB), used for both directions by default. */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** The default deadline of a unary call. Every RPC is pure computation, so this is generous. */
export const DEFAULT_TIMEOUT_MS = 10_000;
/**
 * A client of `turnkeeper.v1.HistoryService` over gRPC (HTTP/2), on TCP or a Unix socket.
 *
 * Requests accept either generated messages or plain init objects. Failed calls reject with a
 * {@link TurnkeeperError} carrying the decoded ErrorInfo, BadRequest and CapacityReport details.
 * One client holds one HTTP/2 connection; call {@link close} when done.
 */
export class TurnkeeperClient {
    /** The underlying Connect client, for calls this wrapper does not cover. */
    raw;
    session;
    timeoutMs;
    closing = closingController();
    constructor(target, options = {}) {
        const { baseUrl, socketPath } = secured(parseTarget(target), options.tls);
        const maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
        if ((options.tls?.cert === undefined) !== (options.tls?.key === undefined)) {
            throw new TypeError("turnkeeper: give tls.cert and tls.key together");
        }
        // Owning the session manager lets close() end the connection; for Unix sockets the HTTP/2
        // session runs over a socket we open ourselves, while the URL only supplies :authority.
        const connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
        const tls = options.tls;
        const open = socketPath === undefined ? () => tcpSocket(baseUrl, tls) : () => netConnect(socketPath);
        this.session = new Http2SessionManager(baseUrl, {}, { createConnection: () => dial(open, connectTimeoutMs) });
        // The retry interceptor is outermost: the others (and the caller's) see every attempt.
        const retry = options.retry ?? DEFAULT_RETRY_POLICY;
        const interceptors = [
            ...(retry === false ? [] : [retryInterceptor(retry)]),
            ...(options.token === undefined ? [] : [bearer(options.token)]),
            ...(options.interceptors ?? []),
        ];
        const transport = createGrpcTransport({
            baseUrl,
            sessionManager: this.session,
            readMaxBytes: maxBytes,
            writeMaxBytes: maxBytes,
            interceptors,
        });
        this.raw = createClient(HistoryService, transport);
        this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    }
    /** Prices a history with the pinned heuristic, total and per row. */
    estimateTokens(request, options) {
        return this.unary(options, (o) => this.raw.estimateTokens(request, o));
    }
    /** Resolves the route, its capacity, the proactive token budget and the turn limit. */
    resolveBudget(request, options) {
        return this.unary(options, (o) => this.raw.resolveBudget(request, o));
    }
    /** Applies one trimming operation; `historyTrimmed` is set when the trim dropped turns on the agent path. */
    trimHistory(request, options) {
        return this.unary(options, (o) => this.raw.trimHistory(request, o));
    }
    /**
     * Prepares a history for one provider call. Rejects with FAILED_PRECONDITION and
     * `capacityReport` set when the request does not fit the model's capacity.
     */
    prepareModelCall(request, options) {
        return this.unary(options, (o) => this.raw.prepareModelCall(request, o));
    }
    /** Runs the capacity pre-flight alone; rejects like {@link prepareModelCall} when it does not fit. */
    checkCapacity(request, options) {
        return this.unary(options, (o) => this.raw.checkCapacity(request, o));
    }
    /** Removes tool results without a call and tool calls without a result. */
    sweepOrphans(request, options) {
        return this.unary(options, (o) => this.raw.sweepOrphans(request, o));
    }
    /**
     * Says whether a provider's error is a context-window overflow (spec §10.4) and which phrase
     * matched: the decision that starts reactive recovery (`prepareModelCall` with `overflowRecovery`).
     */
    classifyProviderError(request, options) {
        return this.unary(options, (o) => this.raw.classifyProviderError(request, o));
    }
    /**
     * Says what to condense instead of dropping it and the summary request that fits the summarizer's
     * route (spec §15.3): a plan, or a refusal saying why there is none (not an error). It never calls
     * a model: send `plan.summaryRequest`, then apply the plan with the answer (`applyCompaction`).
     */
    planCompaction(request, options) {
        return this.unary(options, (o) => this.raw.planCompaction(request, o));
    }
    /** Applies the `max_tool_result_chars` cap to tool results as they are recorded. */
    capToolResults(request, options) {
        return this.unary(options, (o) => this.raw.capToolResults(request, o));
    }
    /**
     * Subscribes to the trim feed. The subscription remembers the last cursor it saw and, when the
     * stream breaks (UNAVAILABLE, a clean end, or silence past the heartbeat watchdog), reconnects
     * with backoff and resumes after that cursor, so each event is delivered once.
     *
     * `request.afterCursor` (or `options.afterCursor`) resumes an earlier subscription. The stream
     * opens when iteration starts; {@link subscribeTrimEvents} also waits until the server has
     * registered it.
     */
    watchTrimEvents(request = {}, options = {}) {
        return new TrimEventSubscription({
            raw: this.raw,
            closed: this.closing.signal,
            resetConnection: (reason) => this.session.abort(reason),
        }, request, options);
    }
    /**
     * {@link watchTrimEvents}, resolving only once the server has answered the subscription (its first
     * heartbeat, or the first replayed item when resuming): a trim made after it resolves is always
     * delivered, so subscribe-then-trim needs no sleep. The answering item is still the first one
     * iterated. The wait, reconnects included, is bounded by `timeoutMs` (default: the client's
     * deadline; <= 0 waits as long as the subscription retries); on failure the subscription is closed
     * and the promise rejects with a {@link TurnkeeperError} (DEADLINE_EXCEEDED on timeout).
     */
    async subscribeTrimEvents(request = {}, options = {}) {
        const subscription = this.watchTrimEvents(request, options);
        await subscription.waitSubscribed(options.timeoutMs ?? this.timeoutMs);
        return subscription;
    }
    /**
     * Closes the connection, ending open calls and subscriptions. The client stays usable: a later
     * call opens a new connection.
     */
    close() {
        this.closing.abort();
        this.closing = closingController();
        this.session.abort();
    }
    [Symbol.dispose]() {
        this.close();
    }
    async unary(options, call) {
        try {
            return await call({ ...options, timeoutMs: options?.timeoutMs ?? this.timeoutMs });
        }
        catch (e) {
            throw callError(e, options?.signal);
        }
    }
}
/**
 * The controller whose signal ends a client's subscriptions. Each open subscription listens to it
 * (and removes its listener when it ends), so any number of them at once is expected: no
 * MaxListenersExceededWarning at 11.
 */
function closingController() {
    const controller = new AbortController();
    setMaxListeners(0, controller.signal);
    return controller;
}
/** Opens a client; see {@link TurnkeeperClient}. */
export function connect(target, options) {
    return new TurnkeeperClient(target, options);
}
function parseTarget(target) {
    if (typeof target !== "string") {
        return "unix" in target ? unixTarget(target.unix) : { baseUrl: `http://${target.address}` };
    }
    if (target.startsWith("unix:")) {
        // gRPC name syntax: unix:relative/or/absolute and unix:///absolute.
        return unixTarget(target.startsWith("unix://") ? target.slice("unix://".length) : target.slice("unix:".length));
    }
    if (target.startsWith("/"))
        return unixTarget(target);
    if (/^https?:\/\//.test(target))
        return { baseUrl: target };
    return { baseUrl: `http://${target}` };
}
/** An https:// URL for a TCP target when TLS is asked for; a Unix socket stays plaintext. */
function secured(parsed, tls) {
    if (tls === undefined || parsed.socketPath !== undefined)
        return parsed;
    return { baseUrl: parsed.baseUrl.replace(/^http:\/\//, "https://") };
}
function bearer(token) {
    const value = `Bearer ${token.trim()}`;
    return (next) => (request) => {
        request.header.set("authorization", value);
        return next(request);
    };
}
/** A TCP socket to the host and port of the base URL; TLS (offering h2, with `tls`) for `https://`. */
function tcpSocket(baseUrl, tls) {
    const url = new URL(baseUrl);
    // URL keeps an IPv6 host in brackets; net.connect wants it bare.
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (url.protocol === "https:") {
        const port = url.port === "" ? 443 : Number(url.port);
        const servername = tls?.serverName ?? (isIP(host) === 0 ? host : undefined);
        return tlsConnect({ host, port, ALPNProtocols: ["h2"], ca: tls?.ca, cert: tls?.cert, key: tls?.key, servername });
    }
    return netConnect({ host, port: url.port === "" ? 80 : Number(url.port) });
}
/** Opens the HTTP/2 session's socket; one not connected within `timeoutMs` (> 0) is destroyed as UNAVAILABLE. */
function dial(open, timeoutMs) {
    const socket = open();
    if (timeoutMs > 0) {
        const timer = setTimeout(() => socket.destroy(new ConnectError(`connection not established within ${timeoutMs} ms`, Code.Unavailable)), timeoutMs);
        const stop = () => clearTimeout(timer);
        socket.once("connect", stop);
        socket.once("close", stop);
    }
    return socket;
}
function unixTarget(path) {
    if (path === "")
        throw new TypeError("turnkeeper: empty Unix socket path");
    // :authority for a Unix socket is conventionally "localhost" (as grpc-go and grpc-core send).
    return { baseUrl: "http://localhost", socketPath: path };
}
//# sourceMappingURL=client.js.map