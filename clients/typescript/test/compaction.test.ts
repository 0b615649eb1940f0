// The shared apply-plan vectors (tests/conformance/compaction, spec §15.3 step 4) through
// applyCompaction: each gives its expected history exactly, or throws ConversionError.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { equals, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { applyCompaction, CompactionPlanSchema, ConversionError, HistorySchema } from "../src/index.js";
import { conformanceDir } from "./support.js";

interface Vector {
  name: string;
  history: JsonValue;
  plan: JsonValue;
  summaryText: string;
  expect: { history?: JsonValue; error?: true };
}

const KEYS = ["description", "expect", "history", "name", "plan", "rule", "summaryText"];
const dir = join(conformanceDir(), "..", "compaction");
const files = readdirSync(dir)
  .filter((f) => f.endsWith(".json"))
  .sort();

test("there are compaction vectors", () => {
  assert.ok(files.length >= 6);
});

for (const file of files) {
  const vector = JSON.parse(readFileSync(join(dir, file), "utf8")) as Vector;
  test(`compaction vector ${file}`, () => {
    assert.deepEqual(Object.keys(vector).sort(), KEYS);
    assert.equal(file.replace(/^\d+-/, "").replace(/\.json$/, ""), vector.name);
    const history = fromJson(HistorySchema, vector.history);
    const plan = fromJson(CompactionPlanSchema, vector.plan);
    if (vector.expect.error === true) {
      assert.throws(() => applyCompaction(history, plan, vector.summaryText), ConversionError);
      return;
    }
    assert.ok(vector.expect.history !== undefined);
    const expected = fromJson(HistorySchema, vector.expect.history);
    const applied = applyCompaction(history, plan, vector.summaryText);
    assert.ok(equals(HistorySchema, applied, expected), JSON.stringify(toJson(HistorySchema, applied)));
  });
}
