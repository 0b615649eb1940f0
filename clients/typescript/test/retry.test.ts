// The unary retry policy (docs/conventions.md, Client defaults): RetryInfo honoured on
// RESOURCE_EXHAUSTED / UNAVAILABLE, bounded attempts, never past the deadline, off with `retry: false`.
//
// `with_server.py --overloaded` starts a real server that refuses every call with a 1 s RetryInfo
// (TURNKEEPER_OVERLOADED_ADDRESS) and a scripted fake (tests/support/flaky.py,
// TURNKEEPER_FLAKY_ADDRESS): each request names its refusals, and the answer's `totalTokens` is the
// number of attempts it took.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import {
  Code,
  connect,
  DEFAULT_RETRY_POLICY,
  EstimateTokensRequestSchema,
  HistorySchema,
  Role,
  TurnkeeperError,
  type ClientOptions,
  type EstimateTokensRequest,
  type TurnkeeperClient,
} from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run \`make -C clients/typescript test\` (with_server.py --overloaded)`);
  return value;
}

function request(content: string): EstimateTokensRequest {
  return create(EstimateTokensRequestSchema, {
    history: create(HistorySchema, { shape: { case: "chat", value: { messages: [{ role: Role.USER, content }] } } }),
  });
}

/** A request the fake refuses per `script` ("CODE:delay_ms ...", -1: no RetryInfo), under its own call id. */
const scripted = (script: string): EstimateTokensRequest => request(`ts-${randomUUID()} ${script}`);

/** A client of `variable`'s server that counts the attempts it makes. */
function counting(variable: string, options: ClientOptions = {}): { client: TurnkeeperClient; attempts: () => number } {
  let attempts = 0;
  const count: Interceptor = (next) => (req) => {
    attempts++;
    return next(req);
  };
  const client = connect(env(variable), { ...options, interceptors: [count] });
  return { client, attempts: () => attempts };
}

async function failure(call: Promise<unknown>): Promise<TurnkeeperError> {
  try {
    await call;
  } catch (e) {
    assert.ok(e instanceof TurnkeeperError, String(e));
    return e;
  }
  assert.fail("the call succeeded");
}

async function timed<T>(call: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const result = await call();
  return [result, performance.now() - started];
}

describe("against a scripted fake", () => {
  test("RetryInfo is waited for, then the call succeeds", async () => {
    using client = connect(env("TURNKEEPER_FLAKY_ADDRESS"));
    const [response, elapsed] = await timed(() => client.estimateTokens(scripted("RESOURCE_EXHAUSTED:300 UNAVAILABLE:200")));
    assert.equal(response.totalTokens, 3n);
    assert.ok(elapsed >= 500, `${elapsed} ms`);
  });

  test("attempts are bounded", async () => {
    const { client, attempts } = counting("TURNKEEPER_FLAKY_ADDRESS");
    using _ = client;
    const error = await failure(client.estimateTokens(scripted("RESOURCE_EXHAUSTED:10 ".repeat(5))));
    assert.equal(error.code, Code.ResourceExhausted);
    assert.equal(error.retryDelayMs, 10);
    assert.equal(attempts(), DEFAULT_RETRY_POLICY.maxAttempts);
    using five = connect(env("TURNKEEPER_FLAKY_ADDRESS"), { retry: { ...DEFAULT_RETRY_POLICY, maxAttempts: 5 } });
    const response = await five.estimateTokens(scripted("RESOURCE_EXHAUSTED:10 RESOURCE_EXHAUSTED:10 UNAVAILABLE:10 UNAVAILABLE:10"));
    assert.equal(response.totalTokens, 5n);
  });

  const cases: [string, string, ClientOptions, Code][] = [
    ["retrying turned off", "RESOURCE_EXHAUSTED:50", { retry: false }, Code.ResourceExhausted],
    ["RESOURCE_EXHAUSTED without RetryInfo", "RESOURCE_EXHAUSTED:-1", {}, Code.ResourceExhausted],
    ["RetryInfo over maxDelayMs", "RESOURCE_EXHAUSTED:500", { retry: { ...DEFAULT_RETRY_POLICY, maxDelayMs: 200 } }, Code.ResourceExhausted],
    ["a code the policy does not retry", "INTERNAL:50", {}, Code.Internal],
  ];
  for (const [why, script, options, code] of cases) {
    test(`not retried: ${why}`, async () => {
      const { client, attempts } = counting("TURNKEEPER_FLAKY_ADDRESS", options);
      using _ = client;
      const error = await failure(client.estimateTokens(scripted(script)));
      assert.equal(error.code, code);
      assert.equal(attempts(), 1);
    });
  }

  test("UNAVAILABLE without RetryInfo backs off", async () => {
    using client = connect(env("TURNKEEPER_FLAKY_ADDRESS"), { retry: { ...DEFAULT_RETRY_POLICY, backoffMs: 200, multiplier: 2, jitter: 0 } });
    const [response, elapsed] = await timed(() => client.estimateTokens(scripted("UNAVAILABLE:-1 UNAVAILABLE:-1")));
    assert.equal(response.totalTokens, 3n);
    assert.ok(elapsed >= 200 + 400, `${elapsed} ms`);
  });

  test("a delay past the deadline returns the error at once", async () => {
    const { client, attempts } = counting("TURNKEEPER_FLAKY_ADDRESS");
    using _ = client;
    const [error, elapsed] = await timed(() => failure(client.estimateTokens(scripted("RESOURCE_EXHAUSTED:2000"), { timeoutMs: 1000 })));
    assert.equal(error.code, Code.ResourceExhausted);
    assert.equal(attempts(), 1);
    assert.ok(elapsed < 500, `${elapsed} ms`);
  });
});

describe("against the overloaded server", () => {
  const hello = request("hello");

  test("it is retried maxAttempts times", async () => {
    const { client, attempts } = counting("TURNKEEPER_OVERLOADED_ADDRESS");
    using _ = client;
    const [error, elapsed] = await timed(() => failure(client.estimateTokens(hello)));
    assert.equal(error.reasonName, "ERROR_REASON_OVERLOADED");
    assert.ok(error.retryDelayMs !== undefined);
    assert.equal(attempts(), 3);
    // Two waits of the RetryInfo delay, well within the 10 s default deadline.
    assert.ok(elapsed >= 2 * error.retryDelayMs && elapsed < 10_000, `${elapsed} ms`);
  });

  test("within the deadline", async () => {
    const { client, attempts } = counting("TURNKEEPER_OVERLOADED_ADDRESS");
    using _ = client;
    const [error, elapsed] = await timed(() => failure(client.estimateTokens(hello, { timeoutMs: 1500 })));
    // Refused at 0 s, waited 1 s, refused again; a second wait would pass the 1.5 s deadline.
    assert.equal(error.code, Code.ResourceExhausted);
    assert.equal(error.retryDelayMs, 1000);
    assert.equal(attempts(), 2);
    assert.ok(elapsed >= 1000 && elapsed < 1500, `${elapsed} ms`);
  });

  test("with retrying off", async () => {
    const { client, attempts } = counting("TURNKEEPER_OVERLOADED_ADDRESS", { retry: false });
    using _ = client;
    const error = await failure(client.estimateTokens(hello));
    assert.equal(error.code, Code.ResourceExhausted);
    assert.equal(attempts(), 1);
  });
});
