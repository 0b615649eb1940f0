// Pure helpers, no server needed.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { heartbeatMs } from "../src/events.js";
import {
  backoffDelay,
  Code,
  codeName,
  DEFAULT_MAX_MESSAGE_BYTES,
  DEFAULT_RETRY_POLICY,
  DEFAULT_TIMEOUT_MS,
  RETRYABLE_CODES,
  TrimEventsRequestSchema,
} from "../src/index.js";
import { conformanceDir } from "./support.js";

test("codeName gives the canonical gRPC names", () => {
  assert.equal(codeName(Code.InvalidArgument), "INVALID_ARGUMENT");
  assert.equal(codeName(Code.FailedPrecondition), "FAILED_PRECONDITION");
  assert.equal(codeName(Code.Unavailable), "UNAVAILABLE");
  assert.equal(codeName(Code.DeadlineExceeded), "DEADLINE_EXCEEDED");
  assert.equal(codeName(Code.Canceled), "CANCELLED");
  assert.equal(codeName(Code.Unauthenticated), "UNAUTHENTICATED");
});

test("backoff grows per failure, is capped, and stays within its jitter", () => {
  const options = { initialMs: 100, maxMs: 1000, multiplier: 2, jitter: 0.2 };
  for (let i = 0; i < 50; i++) {
    const first = backoffDelay(1, options);
    assert.ok(first >= 80 && first <= 120, `first retry ${first}`);
    const third = backoffDelay(3, options);
    assert.ok(third >= 320 && third <= 480, `third retry ${third}`);
    const late = backoffDelay(30, options);
    assert.ok(late >= 800 && late <= 1200, `capped retry ${late}`);
  }
  assert.equal(backoffDelay(4, { ...options, jitter: 0 }), 800);
});

test("the watchdog's heartbeat interval mirrors the server's defaults and clamps", () => {
  const interval = (seconds: bigint, nanos = 0) => heartbeatMs(create(TrimEventsRequestSchema, { heartbeatInterval: { seconds, nanos } }));
  assert.equal(heartbeatMs(create(TrimEventsRequestSchema)), 15_000);
  assert.equal(interval(0n), 15_000);
  assert.equal(interval(0n, 200_000_000), 1000);
  assert.equal(interval(2n, 500_000_000), 2500);
  assert.equal(interval(3600n), 300_000);
});

test("the defaults are the ones every client shares (tests/conformance/client-defaults.json)", () => {
  const file = join(conformanceDir(), "..", "client-defaults.json");
  const shared = JSON.parse(readFileSync(file, "utf8")) as {
    unaryDeadlineSeconds: number;
    maxMessageBytes: number;
    retry: {
      maxAttempts: number;
      retryableCodes: string[];
      maxDelaySeconds: number;
      backoffSeconds: number;
      backoffMultiplier: number;
      backoffJitter: number;
    };
  };
  assert.equal(DEFAULT_TIMEOUT_MS, shared.unaryDeadlineSeconds * 1000);
  assert.equal(DEFAULT_MAX_MESSAGE_BYTES, shared.maxMessageBytes);
  const retry = shared.retry;
  assert.deepEqual(DEFAULT_RETRY_POLICY, {
    maxAttempts: retry.maxAttempts,
    maxDelayMs: retry.maxDelaySeconds * 1000,
    backoffMs: retry.backoffSeconds * 1000,
    multiplier: retry.backoffMultiplier,
    jitter: retry.backoffJitter,
  });
  assert.deepEqual(RETRYABLE_CODES.map(codeName), retry.retryableCodes);
});
