// The second-edition wrappers (spec §10) against the live server.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { ErrorReason, PhraseSource, TurnkeeperError } from "../src/index.js";
import { tcpClient } from "./support.js";

describe("spec §10 wrappers", () => {
  const client = tcpClient();
  after(() => client.close());

  test("classifyProviderError names the matched phrase, rejects near misses and bad statuses (spec §10.4)", async () => {
    const overflow = await client.classifyProviderError({
      message: "Error 400: Prompt is too long: 250000 tokens > 200000 maximum",
      httpStatus: 400,
      provider: "anthropic",
    });
    assert.equal(overflow.overflow, true);
    assert.equal(overflow.matchedPhrase, "prompt is too long");
    assert.equal(overflow.phraseSource, PhraseSource.BUILT_IN);

    const nearMiss = await client.classifyProviderError({ message: "rate limit exceeded: too many requests" });
    assert.equal(nearMiss.overflow, false);
    assert.equal(nearMiss.matchedPhrase, "");
    assert.equal(nearMiss.phraseSource, PhraseSource.UNSPECIFIED);

    await assert.rejects(client.classifyProviderError({ message: "x", httpStatus: 700 }), (e: unknown) => {
      assert.ok(e instanceof TurnkeeperError, String(e));
      assert.equal(e.codeName, "INVALID_ARGUMENT");
      assert.equal(e.reason, ErrorReason.INVALID_PROVIDER_ERROR);
      assert.deepEqual(e.fieldViolations.map((v) => v.field), ["http_status"]);
      return true;
    });
  });
});
