import { Code } from "@connectrpc/connect";
import { callError } from "./errors.js";
/** On unless `retry: false` (or another policy) is given; the values are in tests/conformance/client-defaults.json. */
export const DEFAULT_RETRY_POLICY = { maxAttempts: 3, maxDelayMs: 5_000, backoffMs: 100, multiplier: 2, jitter: 0.2 };
/** The codes a retry may cure. */
export const RETRYABLE_CODES = [Code.ResourceExhausted, Code.Unavailable];
/** The wait before retry number `retry` (1 for the first) after `error`; undefined: do not retry. */
export function retryDelayMs(policy, error, retry) {
    if (retry >= policy.maxAttempts || !RETRYABLE_CODES.includes(error.code))
        return undefined;
    if (error.retryDelayMs !== undefined)
        return error.retryDelayMs <= policy.maxDelayMs ? error.retryDelayMs : undefined;
    if (error.code !== Code.Unavailable)
        return undefined;
    const base = policy.backoffMs * policy.multiplier ** (retry - 1);
    return Math.max(0, base * (1 + policy.jitter * (2 * Math.random() - 1)));
}
/**
 * The interceptor that applies `policy` to unary calls (streams pass through). The call's deadline
 * is its `grpc-timeout`, which each attempt is sent with what is left of it; the call's signal (which
 * the transport aborts at the deadline) ends a wait early.
 */
export function retryInterceptor(policy) {
    return (next) => async (req) => {
        if (req.stream)
            return next(req);
        const timeout = /^(\d+)m$/.exec(req.header.get("grpc-timeout") ?? "");
        const deadline = timeout === null ? undefined : Date.now() + Number(timeout[1]);
        for (let retry = 1;; retry++) {
            try {
                return await next(req);
            }
            catch (e) {
                const delay = retryDelayMs(policy, callError(e, req.signal), retry);
                const left = deadline === undefined ? Infinity : deadline - Date.now();
                if (delay === undefined || delay >= left || req.signal.aborted)
                    throw e;
                await sleep(delay, req.signal);
                if (deadline !== undefined)
                    req.header.set("grpc-timeout", `${Math.max(1, Math.floor(deadline - Date.now()))}m`);
            }
        }
    };
}
function sleep(ms, signal) {
    return new Promise((resolve) => {
        const done = () => {
            clearTimeout(timer);
            signal.removeEventListener("abort", done);
            resolve();
        };
        const timer = setTimeout(done, ms);
        signal.addEventListener("abort", done);
    });
}
//# sourceMappingURL=retry.js.map