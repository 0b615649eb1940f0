// Pure helpers, no server needed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { backoffDelay, Code, codeName } from "../src/index.js";

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
