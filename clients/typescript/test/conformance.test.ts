// Runs every language-neutral vector in $TURNKEEPER_CONFORMANCE_DIR through the wrapper against the
// live server (format: docs/conventions.md).
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { equals, fromJson, toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { isSafeNumber, parse } from "lossless-json";
import {
  CapacityReportSchema,
  CapToolResultsRequestSchema,
  CapToolResultsResponseSchema,
  CheckCapacityRequestSchema,
  CheckCapacityResponseSchema,
  ClassifyProviderErrorRequestSchema,
  ClassifyProviderErrorResponseSchema,
  ERROR_DOMAIN,
  EstimateTokensRequestSchema,
  EstimateTokensResponseSchema,
  HistoryService,
  PlanCompactionRequestSchema,
  PlanCompactionResponseSchema,
  PrepareModelCallRequestSchema,
  PrepareModelCallResponseSchema,
  ResolveBudgetRequestSchema,
  ResolveBudgetResponseSchema,
  SweepOrphansRequestSchema,
  SweepOrphansResponseSchema,
  TrimHistoryRequestSchema,
  TrimHistoryResponseSchema,
  TurnkeeperError,
  type TurnkeeperClient,
} from "../src/index.js";
import { conformanceDir, show, tcpClient } from "./support.js";

interface Vector {
  name: string;
  rule?: string;
  rpc: string;
  request: JsonValue;
  expect: { response?: JsonValue; error?: ExpectedError };
}

interface ExpectedError {
  code: string;
  reason: string;
  fieldViolations?: string[];
  capacityReport?: JsonValue;
}

/** One unary RPC as the wrapper exposes it, with the schemas to parse the vector's JSON. */
interface Rpc {
  output: DescMessage;
  call(client: TurnkeeperClient, request: JsonValue): Promise<unknown>;
}

function rpc<I extends DescMessage, O extends DescMessage>(
  input: I,
  output: O,
  call: (client: TurnkeeperClient, request: MessageShape<I>) => Promise<MessageShape<O>>,
): Rpc {
  // fromJson rejects unknown fields by default, as the vector format requires.
  return { output, call: (client, request) => call(client, fromJson(input, request)) };
}

const rpcs: Record<string, Rpc> = {
  EstimateTokens: rpc(EstimateTokensRequestSchema, EstimateTokensResponseSchema, (c, r) => c.estimateTokens(r)),
  ResolveBudget: rpc(ResolveBudgetRequestSchema, ResolveBudgetResponseSchema, (c, r) => c.resolveBudget(r)),
  TrimHistory: rpc(TrimHistoryRequestSchema, TrimHistoryResponseSchema, (c, r) => c.trimHistory(r)),
  PrepareModelCall: rpc(PrepareModelCallRequestSchema, PrepareModelCallResponseSchema, (c, r) => c.prepareModelCall(r)),
  PlanCompaction: rpc(PlanCompactionRequestSchema, PlanCompactionResponseSchema, (c, r) => c.planCompaction(r)),
  CheckCapacity: rpc(CheckCapacityRequestSchema, CheckCapacityResponseSchema, (c, r) => c.checkCapacity(r)),
  SweepOrphans: rpc(SweepOrphansRequestSchema, SweepOrphansResponseSchema, (c, r) => c.sweepOrphans(r)),
  CapToolResults: rpc(CapToolResultsRequestSchema, CapToolResultsResponseSchema, (c, r) => c.capToolResults(r)),
  ClassifyProviderError: rpc(ClassifyProviderErrorRequestSchema, ClassifyProviderErrorResponseSchema, (c, r) =>
    c.classifyProviderError(r),
  ),
};

function loadVectors(dir: string): { file: string; vector: Vector }[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((file) => ({ file, vector: parseVector(readFileSync(join(dir, file), "utf8")) }));
}

/**
 * Vectors may write 64-bit integers as JSON numbers beyond 2^53 (docs/conventions.md), which
 * JSON.parse would round: those stay the decimal strings proto3 JSON also accepts.
 */
function parseVector(text: string): Vector {
  return parse(text, null, (value) => (isSafeNumber(value) ? Number(value) : value)) as Vector;
}

describe("conformance vectors", () => {
  const client = tcpClient();
  after(() => client.close());
  const dir = conformanceDir();
  const vectors = loadVectors(dir);

  test("the wrapper covers every unary RPC of HistoryService", () => {
    const unary = HistoryService.methods.filter((m) => m.methodKind === "unary").map((m) => m.name);
    assert.deepEqual(Object.keys(rpcs).sort(), unary.sort());
  });

  test("vectors exist", () => {
    assert.ok(vectors.length > 0, `no conformance vectors in ${dir}`);
  });

  for (const { file, vector } of vectors) {
    test(`${file} (${vector.name})`, async () => {
      const target = rpcs[vector.rpc];
      assert.ok(target, `unknown or non-unary rpc ${vector.rpc}`);
      const expected = vector.expect;
      assert.ok((expected.response === undefined) !== (expected.error === undefined), "expect needs exactly one of response, error");

      let actual: unknown;
      let failure: unknown;
      try {
        actual = await target.call(client, vector.request);
      } catch (e) {
        failure = e;
      }

      if (expected.response !== undefined) {
        assert.ifError(failure);
        const want = fromJson(target.output, expected.response);
        const got = actual as MessageShape<typeof target.output>;
        // The diff of the JSON forms explains a failure; equality is decided by proto equality.
        if (!equals(target.output, got, want)) {
          assert.deepEqual(toJson(target.output, got), toJson(target.output, want), "response differs");
          assert.fail(`response differs by proto equality:\n${show(toJson(target.output, got))}`);
        }
        return;
      }

      const want = expected.error!;
      assert.ok(failure !== undefined, `expected ${want.code}, got a response:\n${show(actual)}`);
      assert.ok(failure instanceof TurnkeeperError, `not a TurnkeeperError: ${show(failure)}`);
      assert.equal(failure.codeName, want.code, failure.message);
      assert.equal(failure.domain, ERROR_DOMAIN);
      assert.equal(failure.reasonName, want.reason);
      if (want.fieldViolations !== undefined) {
        const got = [...new Set(failure.fieldViolations.map((v) => v.field))].sort();
        assert.deepEqual(got, [...new Set(want.fieldViolations)].sort(), "field violations differ");
      }
      if (want.capacityReport !== undefined) {
        assert.ok(failure.capacityReport, "no CapacityReport detail");
        const wantReport = fromJson(CapacityReportSchema, want.capacityReport);
        if (!equals(CapacityReportSchema, failure.capacityReport, wantReport)) {
          assert.deepEqual(toJson(CapacityReportSchema, failure.capacityReport), toJson(CapacityReportSchema, wantReport));
          assert.fail("CapacityReport differs by proto equality");
        }
      }
    });
  }
});
