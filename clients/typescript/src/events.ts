import { setTimeout as sleep } from "node:timers/promises";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions, type Client } from "@connectrpc/connect";
import { callError, TurnkeeperError } from "./errors.js";
import {
  TrimEventsRequestSchema,
  type HistoryService,
  type TrimEventsRequest,
  type TrimEventsResponse,
} from "./gen/turnkeeper/v1/history_service_pb.js";

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
  readonly onReconnect?: (info: { attempt: number; delayMs: number; error: TurnkeeperError | undefined }) => void;
}

/**
 * The errors after which a subscription reconnects by default: the server or the connection is
 * (temporarily) gone. Client-side mistakes such as an unreadable cursor are not retried.
 */
export function isRetryableStreamError(error: TurnkeeperError): boolean {
  return error.code === Code.Unavailable || error.code === Code.Aborted || error.code === Code.ResourceExhausted;
}

const DEFAULT_HEARTBEAT_MS = 15_000;

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
export const DEFAULT_MAX_BATCH_EVENTS = 100;

export class TrimEventSubscription implements AsyncIterable<TrimEventsResponse> {
  private lastCursor: string;
  private readonly request: TrimEventsRequest;
  private readonly closer = new AbortController();
  /** Removes the abort listeners on the caller's and the client's signals. */
  private readonly unlisten: (() => void)[] = [];
  private readonly idleTimeoutMs: number;
  private started = false;
  private source: AsyncGenerator<TrimEventsResponse, void, undefined> | undefined;
  /**
   * The item that answered the subscription, held by {@link waitSubscribed} for the iteration. Its
   * cursor counts once it is yielded, so a cursor persisted before cannot skip it.
   */
  private first: TrimEventsResponse | undefined;

  /** @internal Use {@link TurnkeeperClient.watchTrimEvents}. */
  constructor(
    private readonly host: SubscriptionHost,
    request: MessageInitShape<typeof TrimEventsRequestSchema>,
    private readonly options: WatchOptions,
  ) {
    this.request = create(TrimEventsRequestSchema, request);
    // Batches let a subscriber keep up with a loaded server; they are yielded item by item.
    if (this.request.maxBatchEvents === 0) this.request.maxBatchEvents = DEFAULT_MAX_BATCH_EVENTS;
    this.lastCursor = options.afterCursor ?? this.request.afterCursor;
    this.idleTimeoutMs = options.idleTimeoutMs ?? 3 * heartbeatMs(this.request);
    for (const signal of [options.signal, host.closed]) {
      if (signal === undefined) continue;
      if (signal.aborted) {
        this.close();
        continue;
      }
      // Removed again by close(): the client's signal outlives every subscription made on it.
      const onAbort = (): void => this.close();
      signal.addEventListener("abort", onAbort, { once: true });
      this.unlisten.push(() => signal.removeEventListener("abort", onAbort));
    }
  }

  /** The last cursor seen (event or heartbeat); pass it as `afterCursor` to resume in a later subscription. */
  get cursor(): string {
    return this.lastCursor;
  }

  /** Ends the subscription; a pending `next()` resolves as done. */
  close(): void {
    for (const remove of this.unlisten.splice(0)) remove();
    this.closer.abort();
  }

  [Symbol.asyncIterator](): AsyncIterator<TrimEventsResponse> {
    if (this.started) throw new Error("turnkeeper: a TrimEventSubscription can be iterated only once");
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
  async waitSubscribed(timeoutMs: number): Promise<void> {
    if (this.first !== undefined) return;
    let expired = false;
    const timer =
      timeoutMs > 0
        ? setTimeout(() => {
            expired = true;
            this.close();
          }, timeoutMs)
        : undefined;
    let result: IteratorResult<TrimEventsResponse, void>;
    try {
      result = await this.items().next();
    } catch (e) {
      this.close();
      throw e;
    } finally {
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

  private items(): AsyncGenerator<TrimEventsResponse, void, undefined> {
    this.source ??= this.run();
    return this.source;
  }

  /** What the consumer sees: the held answer, then the stream; each item's cursor counts as it is yielded. */
  private async *iterate(): AsyncGenerator<TrimEventsResponse, void, undefined> {
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
    } finally {
      // However the iteration ended (a break, the error it gave up on), nothing stays registered.
      this.close();
    }
  }

  private async *run(): AsyncGenerator<TrimEventsResponse, void, undefined> {
    let failures = 0;
    while (!this.closer.signal.aborted) {
      const attempt = new AbortController();
      const stopAttempt = (): void => attempt.abort();
      this.closer.signal.addEventListener("abort", stopAttempt, { once: true });
      let watchdog: NodeJS.Timeout | undefined;
      let stalled = false;
      const arm = (): void => {
        clearTimeout(watchdog);
        if (this.idleTimeoutMs > 0) {
          watchdog = setTimeout(() => {
            stalled = true;
            attempt.abort();
          }, this.idleTimeoutMs);
        }
      };
      let failure: TurnkeeperError | undefined;
      try {
        arm();
        const stream = this.host.raw.trimEvents(
          { ...this.request, afterCursor: this.lastCursor },
          { signal: attempt.signal, ...(this.options.headers ? { headers: this.options.headers } : {}) },
        );
        for await (const message of stream) {
          failures = 0;
          // A slow consumer is not a stalled stream: the watchdog pauses while the item is handled.
          clearTimeout(watchdog);
          // A batch (the request set `maxBatchEvents` above 1) is yielded item by item.
          yield* message.item.case === "batch" ? message.item.value.items : [message];
          arm();
        }
        // A clean end (the server drains its streams on shutdown): resume like after a failure.
      } catch (e) {
        if (this.closer.signal.aborted) return;
        if (stalled) {
          // A half-open connection would swallow the next attempt too: start over on a new one.
          this.host.resetConnection(new ConnectError("no TrimEvents item within the idle timeout", Code.Unavailable));
        } else {
          failure = callError(e, attempt.signal);
          if (!(this.options.isRetryable ?? isRetryableStreamError)(failure)) throw failure;
        }
      } finally {
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
      } catch {
        return; // closed while waiting
      }
    }
  }

  private remember(response: TrimEventsResponse): void {
    const item = response.item;
    if ((item.case === "event" || item.case === "meterUpdate") && item.value.cursor !== "") this.lastCursor = item.value.cursor;
    // A heartbeat names the stream's resume position; it is empty only while a Redis stream holds
    // no entry at all: keep the current resume point then.
    if (item.case === "heartbeat" && item.value.cursor !== "") this.lastCursor = item.value.cursor;
  }
}

/** The heartbeat interval the server will use for `request`, in milliseconds. */
export function heartbeatMs(request: TrimEventsRequest): number {
  const interval = request.heartbeatInterval;
  const ms = interval === undefined ? 0 : Number(interval.seconds) * 1000 + interval.nanos / 1e6;
  // Mirror the server: unset or zero means the default, anything else is clamped to [1 s, 300 s].
  if (ms === 0) return DEFAULT_HEARTBEAT_MS;
  return Math.min(Math.max(ms, 1000), 300_000);
}

/** The delay before retry number `failures` (1-based). */
export function backoffDelay(failures: number, options: BackoffOptions = {}): number {
  const initial = options.initialMs ?? 200;
  const max = options.maxMs ?? 10_000;
  const base = Math.min(max, initial * (options.multiplier ?? 2) ** Math.max(0, failures - 1));
  const jitter = options.jitter ?? 0.2;
  return Math.max(0, Math.round(base * (1 + jitter * (2 * Math.random() - 1))));
}
