import { Code, type Interceptor } from "@connectrpc/connect";
import { type TurnkeeperError } from "./errors.js";
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
export declare const DEFAULT_RETRY_POLICY: RetryPolicy;
/** The codes a retry may cure. */
export declare const RETRYABLE_CODES: readonly Code[];
/** The wait before retry number `retry` (1 for the first) after `error`; undefined: do not retry. */
export declare function retryDelayMs(policy: RetryPolicy, error: TurnkeeperError, retry: number): number | undefined;
/**
 * The interceptor that applies `policy` to unary calls (streams pass through). The call's deadline
 * is its `grpc-timeout`, which each attempt is sent with what is left of it; the call's signal (which
 * the transport aborts at the deadline) ends a wait early.
 */
export declare function retryInterceptor(policy: RetryPolicy): Interceptor;
