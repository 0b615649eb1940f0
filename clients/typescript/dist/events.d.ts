import { type MessageInitShape } from "@bufbuild/protobuf";
import { type CallOptions, type Client } from "@connectrpc/connect";
import { TurnkeeperError } from "./errors.js";
import { TrimEventsRequestSchema, type HistoryService, type TrimEventsRequest, type TrimEventsResponse } from "./gen/turnkeeper/v1/history_service_pb.js";
/** Exponential backoff between reconnect attempts. */
export interface BackoffOptions {
    /** Delay before the first retry. Default 200 ms. */
    readonly initialMs?: number;
    /** Upper bound of the delay. Default 10 s. */
    readonly maxMs?: number;
    /** Growth factor per consecutive failure. Default 2. */
    readonly multiplier?: number;
    /** Random spread, as a fraction of the delay (0.2 = +-20 %), so many clients do not reconnect in step. Default 0.2. */
    readonly jitter?: number;
}
export interface WatchOptions {
    /** Resume after this cursor (wins over `request.afterCursor`). Empty means a live tail from now. */
    readonly afterCursor?: string;
    /** Ends the subscription, like {@link TrimEventSubscription.close}. */
    readonly signal?: AbortSignal;
    /** Headers sent with every (re)subscription. */
    readonly headers?: CallOptions["headers"];
    readonly backoff?: BackoffOptions;
    /** Consecutive failed attempts tolerated before the last error is thrown to the consumer. Default unlimited. */
    readonly maxRetries?: number;
    /**
     * Reconnect when nothing, not even a heartbeat, arrives for this long: a half-open connection
     * otherwise stalls forever. Default three heartbeat intervals; <= 0 disables the watchdog.
     */
    readonly idleTimeoutMs?: number;
    /** Which errors end the current stream with a reconnect instead of failing. Default {@link isRetryableStreamError}. */
    readonly isRetryable?: (error: TurnkeeperError) => boolean;
    /** Called before each reconnect, with the error that ended the stream (undefined for a clean end or a stall). */
    readonly onReconnect?: (info: {
        attempt: number;
        delayMs: number;
        error: TurnkeeperError | undefined;
    }) => void;
}
/**
 * The errors after which a subscription reconnects by default: the server or the connection is
 * (temporarily) gone. Client-side mistakes such as an unreadable cursor are not retried.
 */
export declare function isRetryableStreamError(error: TurnkeeperError): boolean;
/** @internal What a subscription needs from the client that opened it. */
export interface SubscriptionHost {
    readonly raw: Client<typeof HistoryService>;
    /** Fires when the client is closed; its subscriptions end with it. */
    readonly closed: AbortSignal;
    /** Drops the client's connection so the next attempt opens a fresh one. */
    resetConnection(reason: Error): void;
}
/**
 * A resumable TrimEvents subscription. Iterate it (once) with `for await`; every feed item is yielded,
 * events, heartbeats and gaps alike. Breaking out of the loop or calling {@link close} ends it.
 *
 * It tracks {@link cursor}, the last cursor seen on any stream (events carry theirs, heartbeats the
 * stream's resume position), and after a disconnect resubscribes with `after_cursor` set to it, so
 * the consumer sees every event exactly once. The server answers a new subscription at once with a
 * heartbeat, so a live tail has a cursor before its first event and a reconnect never turns into a
 * fresh live tail. Events the server could no longer deliver are reported as a Gap item.
 */
/**
 * The batch size a watch asks for when its request leaves `maxBatchEvents` unset; set it to 1 for
 * one item per stream message.
 */
export declare const DEFAULT_MAX_BATCH_EVENTS = 100;
export declare class TrimEventSubscription implements AsyncIterable<TrimEventsResponse> {
    private readonly host;
    private readonly options;
    private lastCursor;
    private readonly request;
    private readonly closer;
    /** Removes the abort listeners on the caller's and the client's signals. */
    private readonly unlisten;
    private readonly idleTimeoutMs;
    private started;
    private source;
    /**
     * The item that answered the subscription, held by {@link waitSubscribed} for the iteration. Its
     * cursor counts once it is yielded, so a cursor persisted before cannot skip it.
     */
    private first;
    /** @internal Use {@link TurnkeeperClient.watchTrimEvents}. */
    constructor(host: SubscriptionHost, request: MessageInitShape<typeof TrimEventsRequestSchema>, options: WatchOptions);
    /** The last cursor seen (event or heartbeat); pass it as `afterCursor` to resume in a later subscription. */
    get cursor(): string;
    /** Ends the subscription; a pending `next()` resolves as done. */
    close(): void;
    [Symbol.asyncIterator](): AsyncIterator<TrimEventsResponse>;
    /**
     * Resolves once the server has answered the subscription (its first heartbeat, or the first
     * replayed item when resuming), so a trim made afterwards is delivered; that item is still the
     * first the iteration yields. Reconnects per the options while waiting. Rejects, closing the
     * subscription, with DEADLINE_EXCEEDED when no answer came within `timeoutMs` (<= 0: no limit),
     * with CANCELLED when it was closed first, or with the error the subscription gave up on.
     */
    waitSubscribed(timeoutMs: number): Promise<void>;
    private items;
    /** What the consumer sees: the held answer, then the stream; each item's cursor counts as it is yielded. */
    private iterate;
    private run;
    private remember;
}
/** The heartbeat interval the server will use for `request`, in milliseconds. */
export declare function heartbeatMs(request: TrimEventsRequest): number;
/** The delay before retry number `failures` (1-based). */
export declare function backoffDelay(failures: number, options?: BackoffOptions): number;
