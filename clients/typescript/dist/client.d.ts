import type { MessageInitShape } from "@bufbuild/protobuf";
import { type CallOptions, type Client, type Interceptor } from "@connectrpc/connect";
import { TrimEventSubscription, type WatchOptions } from "./events.js";
import { type RetryPolicy } from "./retry.js";
import { HistoryService, type CapToolResultsRequestSchema, type CapToolResultsResponse, type CheckCapacityRequestSchema, type CheckCapacityResponse, type ClassifyProviderErrorRequestSchema, type ClassifyProviderErrorResponse, type EstimateTokensRequestSchema, type EstimateTokensResponse, type PlanCompactionRequestSchema, type PlanCompactionResponse, type PrepareModelCallRequestSchema, type PrepareModelCallResponse, type ResolveBudgetRequestSchema, type ResolveBudgetResponse, type SweepOrphansRequestSchema, type SweepOrphansResponse, type TrimEventsRequestSchema, type TrimHistoryRequestSchema, type TrimHistoryResponse } from "./gen/turnkeeper/v1/history_service_pb.js";
/** The server's message-size limit (64 MiB), used for both directions by default. */
export declare const DEFAULT_MAX_MESSAGE_BYTES: number;
/** The default deadline of a unary call. Every RPC is pure computation, so this is generous. */
export declare const DEFAULT_TIMEOUT_MS = 10000;
/** Where the sidecar listens. */
export type Target = 
/** `host:port`, `unix:/path`, `unix:///path`, an absolute socket path, or an `http://` URL. */
string | {
    readonly address: string;
} | {
    readonly unix: string;
};
export interface ClientOptions {
    /** Deadline of each unary call unless the call overrides it; <= 0 disables it. Default 10 s, as in every turnkeeper client. */
    readonly timeoutMs?: number;
    /** Largest message sent or accepted, in bytes. Default 64 MiB, as the server. */
    readonly maxMessageBytes?: number;
    /** How long establishing the HTTP/2 connection may take. Default 10 s. */
    readonly connectTimeoutMs?: number;
    /** Connect interceptors (auth headers, logging, metrics). */
    readonly interceptors?: Interceptor[];
    /** TLS to a sidecar started with `--tls-cert` (TCP targets only); `cert` + `key` for mTLS. */
    readonly tls?: TlsOptions;
    /** Sent as `authorization: Bearer <token>` on every call, for a sidecar with `--auth-tokens`. */
    readonly token?: string;
    /**
     * How unary calls (`raw`'s too) refused with RESOURCE_EXHAUSTED or UNAVAILABLE are retried;
     * `false` never retries. Default {@link DEFAULT_RETRY_POLICY}, as in every turnkeeper client.
     */
    readonly retry?: RetryPolicy | false;
}
/** PEM contents (not paths) for a TLS connection; `ca` replaces Node's default roots. */
export interface TlsOptions {
    readonly ca?: string | Buffer;
    readonly cert?: string | Buffer;
    readonly key?: string | Buffer;
    /** The name the server certificate must carry; the target's host by default. */
    readonly serverName?: string;
}
/**
 * A client of `turnkeeper.v1.HistoryService` over gRPC (HTTP/2), on TCP or a Unix socket.
 *
 * Requests accept either generated messages or plain init objects. Failed calls reject with a
 * {@link TurnkeeperError} carrying the decoded ErrorInfo, BadRequest and CapacityReport details.
 * One client holds one HTTP/2 connection; call {@link close} when done.
 */
export declare class TurnkeeperClient {
    /** The underlying Connect client, for calls this wrapper does not cover. */
    readonly raw: Client<typeof HistoryService>;
    private readonly session;
    private readonly timeoutMs;
    private closing;
    constructor(target: Target, options?: ClientOptions);
    /** Prices a history with the pinned heuristic, total and per row. */
    estimateTokens(request: MessageInitShape<typeof EstimateTokensRequestSchema>, options?: CallOptions): Promise<EstimateTokensResponse>;
    /** Resolves the route, its capacity, the proactive token budget and the turn limit. */
    resolveBudget(request: MessageInitShape<typeof ResolveBudgetRequestSchema>, options?: CallOptions): Promise<ResolveBudgetResponse>;
    /** Applies one trimming operation; `historyTrimmed` is set when the trim dropped turns on the agent path. */
    trimHistory(request: MessageInitShape<typeof TrimHistoryRequestSchema>, options?: CallOptions): Promise<TrimHistoryResponse>;
    /**
     * Prepares a history for one provider call. Rejects with FAILED_PRECONDITION and
     * `capacityReport` set when the request does not fit the model's capacity.
     */
    prepareModelCall(request: MessageInitShape<typeof PrepareModelCallRequestSchema>, options?: CallOptions): Promise<PrepareModelCallResponse>;
    /** Runs the capacity pre-flight alone; rejects like {@link prepareModelCall} when it does not fit. */
    checkCapacity(request: MessageInitShape<typeof CheckCapacityRequestSchema>, options?: CallOptions): Promise<CheckCapacityResponse>;
    /** Removes tool results without a call and tool calls without a result. */
    sweepOrphans(request: MessageInitShape<typeof SweepOrphansRequestSchema>, options?: CallOptions): Promise<SweepOrphansResponse>;
    /**
     * Says whether a provider's error is a context-window overflow (spec §10.4) and which phrase
     * matched: the decision that starts reactive recovery (`prepareModelCall` with `overflowRecovery`).
     */
    classifyProviderError(request: MessageInitShape<typeof ClassifyProviderErrorRequestSchema>, options?: CallOptions): Promise<ClassifyProviderErrorResponse>;
    /**
     * Says what to condense instead of dropping it and the summary request that fits the summarizer's
     * route (spec §15.3): a plan, or a refusal saying why there is none (not an error). It never calls
     * a model: send `plan.summaryRequest`, then apply the plan with the answer (`applyCompaction`).
     */
    planCompaction(request: MessageInitShape<typeof PlanCompactionRequestSchema>, options?: CallOptions): Promise<PlanCompactionResponse>;
    /** Applies the `max_tool_result_chars` cap to tool results as they are recorded. */
    capToolResults(request: MessageInitShape<typeof CapToolResultsRequestSchema>, options?: CallOptions): Promise<CapToolResultsResponse>;
    /**
     * Subscribes to the trim feed. The subscription remembers the last cursor it saw and, when the
     * stream breaks (UNAVAILABLE, a clean end, or silence past the heartbeat watchdog), reconnects
     * with backoff and resumes after that cursor, so each event is delivered once.
     *
     * `request.afterCursor` (or `options.afterCursor`) resumes an earlier subscription. The stream
     * opens when iteration starts; {@link subscribeTrimEvents} also waits until the server has
     * registered it.
     */
    watchTrimEvents(request?: MessageInitShape<typeof TrimEventsRequestSchema>, options?: WatchOptions): TrimEventSubscription;
    /**
     * {@link watchTrimEvents}, resolving only once the server has answered the subscription (its first
     * heartbeat, or the first replayed item when resuming): a trim made after it resolves is always
     * delivered, so subscribe-then-trim needs no sleep. The answering item is still the first one
     * iterated. The wait, reconnects included, is bounded by `timeoutMs` (default: the client's
     * deadline; <= 0 waits as long as the subscription retries); on failure the subscription is closed
     * and the promise rejects with a {@link TurnkeeperError} (DEADLINE_EXCEEDED on timeout).
     */
    subscribeTrimEvents(request?: MessageInitShape<typeof TrimEventsRequestSchema>, options?: WatchOptions & {
        readonly timeoutMs?: number;
    }): Promise<TrimEventSubscription>;
    /**
     * Closes the connection, ending open calls and subscriptions. The client stays usable: a later
     * call opens a new connection.
     */
    close(): void;
    [Symbol.dispose](): void;
    private unary;
}
/** Opens a client; see {@link TurnkeeperClient}. */
export declare function connect(target: Target, options?: ClientOptions): TurnkeeperClient;
