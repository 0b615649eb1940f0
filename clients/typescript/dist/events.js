import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { callError, TurnkeeperError } from "./errors.js";
import { TrimEventsRequestSchema, } from "./gen/turnkeeper/v1/history_service_pb.js";
/**
 * The errors after which a subscription reconnects by default: the server or the connection is
 * (temporarily) gone. Client-side mistakes such as an unreadable cursor are not retried.
 */
export function isRetryableStreamError(error) {
    return error.code === Code.Unavailable || error.code === Code.Aborted || error.code === Code.ResourceExhausted;
}
const DEFAULT_HEARTBEAT_MS = 15_000;
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
export class TrimEventSubscription {
    host;
    options;
    lastCursor;
    request;
    closer = new AbortController();
    /** Removes the abort listeners on the caller's and the client's signals. */
    unlisten = [];
    idleTimeoutMs;
    started = false;
    source;
    /**
     * The item that answered the subscription, held by {@link waitSubscribed} for the iteration. Its
     * cursor counts once it is yielded, so a cursor persisted before cannot skip it.
     */
    first;
    /** @internal Use {@link TurnkeeperClient.watchTrimEvents}. */
    constructor(host, request, options) {
        this.host = host;
        this.options = options;
        this.request = create(TrimEventsRequestSchema, request);
        this.lastCursor = options.afterCursor ?? this.request.afterCursor;
        this.idleTimeoutMs = options.idleTimeoutMs ?? 3 * heartbeatMs(this.request);
        for (const signal of [options.signal, host.closed]) {
            if (signal === undefined)
                continue;
            if (signal.aborted) {
                this.close();
                continue;
            }
            // Removed again by close(): the client's signal outlives every subscription made on it.
            const onAbort = () => this.close();
            signal.addEventListener("abort", onAbort, { once: true });
            this.unlisten.push(() => signal.removeEventListener("abort", onAbort));
        }
    }
    /** The last cursor seen (event or heartbeat); pass it as `afterCursor` to resume in a later subscription. */
    get cursor() {
        return this.lastCursor;
    }
    /** Ends the subscription; a pending `next()` resolves as done. */
    close() {
        for (const remove of this.unlisten.splice(0))
            remove();
        this.closer.abort();
    }
    [Symbol.asyncIterator]() {
        if (this.started)
            throw new Error("turnkeeper: a TrimEventSubscription can be iterated only once");
        this.started = true;
        return this.iterate();
    }
    /**
     * Resolves once the server has answered the subscription (its first heartbeat, or the first
     * replayed item when resuming), so a trim made afterwards is delivered; that item is still the
     * first the iteration yields. Reconnects per the options while waiting. Rejects, closing the
     * subscription, with DEADLINE_EXCEEDED when no answer came within `timeoutMs` (<= 0: no limit),
     * with CANCELLED when it was closed first, or with the error the subscription gave up on.
     */
    async waitSubscribed(timeoutMs) {
        if (this.first !== undefined)
            return;
        let expired = false;
        const timer = timeoutMs > 0
            ? setTimeout(() => {
                expired = true;
                this.close();
            }, timeoutMs)
            : undefined;
        let result;
        try {
            result = await this.items().next();
        }
        catch (e) {
            this.close();
            throw e;
        }
        finally {
            clearTimeout(timer);
        }
        if (expired) {
            throw TurnkeeperError.from(new ConnectError(`the server did not answer the TrimEvents subscription within ${timeoutMs} ms`, Code.DeadlineExceeded));
        }
        if (result.done === true) {
            throw TurnkeeperError.from(new ConnectError("the TrimEvents subscription was closed before the server answered it", Code.Canceled));
        }
        this.first = result.value;
    }
    items() {
        this.source ??= this.run();
        return this.source;
    }
    /** What the consumer sees: the held answer, then the stream; each item's cursor counts as it is yielded. */
    async *iterate() {
        try {
            const first = this.first;
            this.first = undefined;
            if (first !== undefined) {
                this.remember(first);
                yield first;
            }
            for await (const item of this.items()) {
                this.remember(item);
                yield item;
            }
        }
        finally {
            // However the iteration ended (a break, the error it gave up on), nothing stays registered.
            this.close();
        }
    }
    async *run() {
        let failures = 0;
        while (!this.closer.signal.aborted) {
            const attempt = new AbortController();
            const stopAttempt = () => attempt.abort();
            this.closer.signal.addEventListener("abort", stopAttempt, { once: true });
            let watchdog;
            let stalled = false;
            const arm = () => {
                clearTimeout(watchdog);
                if (this.idleTimeoutMs > 0) {
                    watchdog = setTimeout(() => {
                        stalled = true;
                        attempt.abort();
                    }, this.idleTimeoutMs);
                }
            };
            let failure;
            try {
                arm();
                const stream = this.host.raw.trimEvents({ ...this.request, afterCursor: this.lastCursor }, { signal: attempt.signal, ...(this.options.headers ? { headers: this.options.headers } : {}) });
                for await (const message of stream) {
                    failures = 0;
                    // A slow consumer is not a stalled stream: the watchdog pauses while the item is handled.
                    clearTimeout(watchdog);
                    // A batch (the request set `maxBatchEvents` above 1) is yielded item by item.
                    yield* message.item.case === "batch" ? message.item.value.items : [message];
                    arm();
                }
                // A clean end (the server drains its streams on shutdown): resume like after a failure.
            }
            catch (e) {
                if (this.closer.signal.aborted)
                    return;
                if (stalled) {
                    // A half-open connection would swallow the next attempt too: start over on a new one.
                    this.host.resetConnection(new ConnectError("no TrimEvents item within the idle timeout", Code.Unavailable));
                }
                else {
                    failure = callError(e, attempt.signal);
                    if (!(this.options.isRetryable ?? isRetryableStreamError)(failure))
                        throw failure;
                }
            }
            finally {
                clearTimeout(watchdog);
                this.closer.signal.removeEventListener("abort", stopAttempt);
                attempt.abort();
            }
            failures++;
            if (failures > (this.options.maxRetries ?? Infinity)) {
                throw failure ?? TurnkeeperError.from(new ConnectError("trim event stream kept ending without events", Code.Unavailable));
            }
            const delayMs = backoffDelay(failures, this.options.backoff);
            this.options.onReconnect?.({ attempt: failures, delayMs, error: failure });
            try {
                await sleep(delayMs, undefined, { signal: this.closer.signal });
            }
            catch {
                return; // closed while waiting
            }
        }
    }
    remember(response) {
        const item = response.item;
        if ((item.case === "event" || item.case === "meterUpdate") && item.value.cursor !== "")
            this.lastCursor = item.value.cursor;
        // A heartbeat names the stream's resume position; it is empty only while a Redis stream holds
        // no entry at all: keep the current resume point then.
        if (item.case === "heartbeat" && item.value.cursor !== "")
            this.lastCursor = item.value.cursor;
    }
}
/** The heartbeat interval the server will use for `request`, in milliseconds. */
export function heartbeatMs(request) {
    const interval = request.heartbeatInterval;
    const ms = interval === undefined ? 0 : Number(interval.seconds) * 1000 + interval.nanos / 1e6;
    // Mirror the server: unset or zero means the default, anything else is clamped to [1 s, 300 s].
    if (ms === 0)
        return DEFAULT_HEARTBEAT_MS;
    return Math.min(Math.max(ms, 1000), 300_000);
}
/** The delay before retry number `failures` (1-based). */
export function backoffDelay(failures, options = {}) {
    const initial = options.initialMs ?? 200;
    const max = options.maxMs ?? 10_000;
    const base = Math.min(max, initial * (options.multiplier ?? 2) ** Math.max(0, failures - 1));
    const jitter = options.jitter ?? 0.2;
    return Math.max(0, Math.round(base * (1 + jitter * (2 * Math.random() - 1))));
}
//# sourceMappingURL=events.js.map