import { Code, type Interceptor } from "@connectrpc/connect";
import { callError, type TurnkeeperError } from "./errors.js";

/**
 * How a unary call is retried (docs/conventions.md, Client defaults). Every HistoryService unary RPC
 * is idempotent (TrimEvents resumes from its cursor instead, see `BackoffOptions`). A call refused
 * with one of {@link RETRYABLE_CODES} is made again, at most `maxAttempts` times in all (the first
 * call included) and within the call's deadline:
 * - with a `google.rpc.RetryInfo` (what an overloaded server sends) after its `retry_delay`, unless
 *   that is over `maxDelayMs` or would pass the deadline: then the error is thrown at once;
 * - without one, UNAVAILABLE after `backoffMs * multiplier^(retry - 1)`, plus or minus `jitter` of
 *   it; RESOURCE_EXHAUSTED without RetryInfo (a message over a size limit) is not retried.
 */
export interface RetryPolicy {
  /** Attempts in all, the first included; 1 turns retrying off. */
  readonly maxAttempts: number;
  /** The longest RetryInfo delay waited for. */
  readonly maxDelayMs: number;
  /** The wait before the first retry of an UNAVAILABLE without RetryInfo. */
  readonly backoffMs: number;
  /** What each further retry multiplies that wait by. */
  readonly multiplier: number;
  /** The share of the wait added or taken at random. */
  readonly jitter: number;
}

/** On unless `retry: false` (or another policy) is given; the values are in tests/conformance/client-defaults.json. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxAttempts: 3, maxDelayMs: 5_000, backoffMs: 100, multiplier: 2, jitter: 0.2 };

/** The codes a retry may cure. */
export const RETRYABLE_CODES: readonly Code[] = [Code.ResourceExhausted, Code.Unavailable];

/** The wait before retry number `retry` (1 for the first) after `error`; undefined: do not retry. */
export function retryDelayMs(policy: RetryPolicy, error: TurnkeeperError, retry: number): number | undefined {
  if (retry >= policy.maxAttempts || !RETRYABLE_CODES.includes(error.code)) return undefined;
  if (error.retryDelayMs !== undefined) return error.retryDelayMs <= policy.maxDelayMs ? error.retryDelayMs : undefined;
  if (error.code !== Code.Unavailable) return undefined;
  const base = policy.backoffMs * policy.multiplier ** (retry - 1);
  return Math.max(0, base * (1 + policy.jitter * (2 * Math.random() - 1)));
}

/**
 * The interceptor that applies `policy` to unary calls (streams pass through). The call's deadline
 * is its `grpc-timeout`, which each attempt is sent with what is left of it; the call's signal (which
 * the transport aborts at the deadline) ends a wait early.
 */
export function retryInterceptor(policy: RetryPolicy): Interceptor {
  return (next) => async (req) => {
    if (req.stream) return next(req);
    const timeout = /^(\d+)m$/.exec(req.header.get("grpc-timeout") ?? "");
    const deadline = timeout === null ? undefined : Date.now() + Number(timeout[1]);
    for (let retry = 1; ; retry++) {
      try {
        return await next(req);
      } catch (e) {
        const delay = retryDelayMs(policy, callError(e, req.signal), retry);
        const left = deadline === undefined ? Infinity : deadline - Date.now();
        if (delay === undefined || delay >= left || req.signal.aborted) throw e;
        await sleep(delay, req.signal);
        if (deadline !== undefined) req.header.set("grpc-timeout", `${Math.max(1, Math.floor(deadline - Date.now()))}m`);
      }
    }
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}
