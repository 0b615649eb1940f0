// The second-edition wrappers (spec §10) against the live server.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { create, equals } from "@bufbuild/protobuf";
import {
  CallerPath,
  CapacityReportSchema,
  ContextMeterSchema,
  CountSource,
  ErrorReason,
  HistorySchema,
  PhraseSource,
  PrepareModelCallRequestSchema,
  RecoveryBlocker,
  reportedUsageOf,
  Role,
  RouteSchema,
  TrimMode,
  TurnkeeperError,
  type History,
  type TrimEventsResponse,
} from "../src/index.js";
import { tcpClient } from "./support.js";

/** A system row and three short turns. */
function sevenRows(): History {
  const messages: { role: Role; content: string }[] = [{ role: Role.SYSTEM, content: "sys" }];
  for (const turn of ["one", "two", "three"]) {
    messages.push({ role: Role.USER, content: `user turn ${turn} asks` }, { role: Role.ASSISTANT, content: `answer ${turn}` });
  }
  return create(HistorySchema, { shape: { case: "chat", value: { messages } } });
}

/** The route p/m with a known 1,000-token window and input prices for m. */
function pricedProfiles(maxContextTokens?: bigint) {
  return {
    runtime: { defaultProvider: "p", ...(maxContextTokens === undefined ? {} : { maxContextTokens }) },
    providers: [
      { alias: "p", model: "m", contextWindow: 1000n, prices: { inputPerMillionTokens: 2.5, cachedInputPerMillionTokens: 0.25, currency: "USD" } },
    ],
  };
}

function near(got: number | undefined, want: number): void {
  assert.ok(got !== undefined && Math.abs(got - want) <= 1e-12 * Math.max(1, Math.abs(want)), `${got} != ${want}`);
}

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

  test("reportedUsageOf is the estimate of what was sent (spec §10.3)", () => {
    const report = create(CapacityReportSchema, {
      messageTokens: 80n,
      hookTokens: 7n,
      toolSchemaTokens: 9n,
      reservedOutputTokens: 100n,
      totalTokens: 196n,
    });
    const usage = reportedUsageOf(report, 250n);
    assert.deepEqual([usage.reportedInputTokens, usage.estimatedInputTokens, usage.toolSchemaTokens], [250n, 96n, 9n]);
  });

  test("prepareModelCall calibrates with the previous call's reported usage; meter and cost on the route (spec §10.3, §10.5)", async () => {
    const request = create(PrepareModelCallRequestSchema, {
      history: sevenRows(),
      profiles: pricedProfiles(100n),
      hookTexts: ["Be brief."],
      reservedOutputTokens: 100n,
      cachedInputTokens: 40n,
    });
    const first = await client.prepareModelCall(request);
    assert.equal(first.trims.length, 0);
    const report = first.capacityReport!;
    const used = report.totalTokens - report.reservedOutputTokens;
    const meter = first.contextMeter!;
    assert.deepEqual([meter.usedTokens, meter.budgetTokens, meter.capacityTokens], [used, 100n, 1000n]);
    near(meter.capacityFraction, Number(used) / 1000);
    const cost = first.inputCost!;
    assert.deepEqual([cost.currency, cost.cachedInputTokens, cost.uncachedInputTokens], ["USD", 40n, used - 40n]);
    near(cost.cost, (Number(used - 40n) * 2.5 + 40 * 0.25) / 1e6);

    // The provider counted twice as much as estimated: more than the budget of 100.
    request.reportedUsage = reportedUsageOf(report, 2n * used);
    const second = await client.prepareModelCall(request);
    const calibrated = second.trims.at(-1);
    assert.ok(calibrated, "a reported count above the budget trims");
    assert.equal(calibrated.countSource, CountSource.PROVIDER_REPORTED);
    // spec §16.2 step 5 scales the history, tool schemas included, not the hooks the count covered.
    assert.equal(calibrated.tokensBefore, 2n * (report.messageTokens + report.toolSchemaTokens));
    const target = (100n * used) / (2n * used);
    assert.equal(calibrated.calibration?.calibratedTargetTokens, target > 1n ? target : 1n);
  });

  test("trimHistory in reported-usage mode counts provider tokens (spec §10.3)", async () => {
    const estimate = await client.estimateTokens({ history: sevenRows() });
    const total = estimate.totalTokens;
    const request = {
      history: sevenRows(),
      mode: TrimMode.REPORTED_USAGE,
      callerPath: CallerPath.AGENT,
      limits: { case: "explicitLimits" as const, value: { budgetTokens: total } },
      reportedUsage: { reportedInputTokens: 3n * total, estimatedInputTokens: total },
      caller: { sessionId: `ts-usage-${randomUUID()}` },
    };
    const trimmed = await client.trimHistory(request);
    assert.equal(trimmed.outcome?.trimmed, true);
    assert.equal(trimmed.outcome?.countSource, CountSource.PROVIDER_REPORTED);
    assert.equal(trimmed.outcome?.tokensBefore, 3n * total);
    assert.equal(trimmed.historyTrimmed?.countSource, CountSource.PROVIDER_REPORTED);

    const unchanged = await client.trimHistory({ ...request, reportedUsage: { reportedInputTokens: total, estimatedInputTokens: total } });
    assert.equal(unchanged.outcome?.trimmed, false);
    assert.deepEqual([unchanged.outcome?.tokensBefore, unchanged.outcome?.tokensAfter], [total, total]);
  });

  test("the meter of an unknown capacity has no capacity, and no prices mean no cost (spec §10.5)", async () => {
    const prepared = await client.prepareModelCall({ history: sevenRows() });
    assert.equal(prepared.contextMeter?.usedTokens, prepared.capacityReport?.totalTokens);
    assert.equal(prepared.contextMeter?.capacityTokens, undefined);
    assert.equal(prepared.contextMeter?.capacityFraction, undefined);
    assert.equal(prepared.inputCost, undefined);
  });

  test("a recovery that cannot trim says why (spec §10.1)", async () => {
    const history = create(HistorySchema, {
      shape: { case: "chat", value: { messages: [{ role: Role.SYSTEM, content: "s".repeat(400) }, { role: Role.USER, content: "the only turn" }] } },
    });
    const prepared = await client.prepareModelCall({ history, profiles: pricedProfiles(50n), overflowRecovery: true });
    const recovery = prepared.recovery!;
    assert.equal(recovery.trimmed, false);
    assert.equal(recovery.blocker, RecoveryBlocker.SINGLE_TURN);
    assert.equal(recovery.targetTokens, (2n * recovery.baselineTokens) / 3n);
    assert.equal(recovery.budgetTokens, 50n);
    assert.ok(recovery.systemFloorTokens > 50n && recovery.systemFloorReachesBudget);
    assert.deepEqual([recovery.route?.provider, recovery.route?.model], ["p", "m"]);
  });

  test("the tool-result cap resolves from the profiles: unset is 50,000, 0 disables (spec §10.6)", async () => {
    const long = "x".repeat(50_001);
    const byDefault = await client.capToolResults({ contents: [long], profiles: {} });
    assert.equal(byDefault.maxToolResultChars, 50_000n);
    assert.ok(byDefault.results[0]!.truncatedChars > 0n);
    const off = await client.capToolResults({ contents: [long], profiles: { runtime: { maxToolResultChars: 0n } } });
    assert.equal(off.maxToolResultChars, 0n);
    assert.equal(off.results[0]!.content, long);
  });

  test("meter updates reach only subscribers that opt in (spec §10.5)", async () => {
    const sessionId = `ts-meter-${randomUUID()}`;
    const heartbeatInterval = { seconds: 1n };
    const metered = await client.subscribeTrimEvents({ sessionIds: [sessionId], heartbeatInterval, includeMeterUpdates: true });
    const plain = await client.subscribeTrimEvents({ sessionIds: [sessionId], heartbeatInterval });
    try {
      const prepared = await client.prepareModelCall({ history: sevenRows(), profiles: pricedProfiles(), caller: { sessionId } });
      const items = metered[Symbol.asyncIterator]();
      const kind = async (it: AsyncIterator<TrimEventsResponse>) => {
        const next = await it.next();
        return next.done ? undefined : next.value.item;
      };
      assert.equal((await kind(items))?.case, "heartbeat"); // the subscription's answer
      const item = await kind(items);
      assert.ok(item?.case === "meterUpdate", `got ${item?.case}`);
      const update = item.value;
      assert.equal(update.caller?.sessionId, sessionId);
      assert.ok(update.meter && prepared.contextMeter && prepared.resolution?.route && update.route);
      assert.ok(equals(ContextMeterSchema, update.meter, prepared.contextMeter));
      assert.ok(equals(RouteSchema, update.route, prepared.resolution.route));
      assert.equal(metered.cursor, update.cursor);
      // With no trim in between the next update shares that cursor (the feed position of the trims
      // before it): it is delivered all the same.
      const again = await client.prepareModelCall({ history: sevenRows(), profiles: pricedProfiles(), caller: { sessionId } });
      const next = await kind(items);
      assert.ok(next?.case === "meterUpdate", `got ${next?.case}`);
      assert.ok(next.value.meter && again.contextMeter);
      assert.ok(equals(ContextMeterSchema, next.value.meter, again.contextMeter));
      // The plain subscriber sees the answer, then an idle heartbeat: no meter update.
      const plainItems = plain[Symbol.asyncIterator]();
      assert.deepEqual([(await kind(plainItems))?.case, (await kind(plainItems))?.case], ["heartbeat", "heartbeat"]);
    } finally {
      metered.close();
      plain.close();
    }
  });
});
