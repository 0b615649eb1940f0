// The runnable examples of examples/typescript, each run as its own program against the live server
// with the real framework packages and their own mock models. They are copied into this package and
// compiled with its tsc, so `@turnkeeper/client` is this package (its committed dist, what a user
// installs) and the frameworks resolve from its node_modules.
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { before, describe, test } from "node:test";
import { serverAddress } from "./support.js";

const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const EXAMPLES = join(PACKAGE, "..", "..", "examples", "typescript");
const WORK = join(PACKAGE, "build", "examples");

type Summary = { modelCalls: number; historyItems?: number; lastRequestItems?: number; historyMessages?: number; lastRequestMessages?: number };

/** Runs a compiled example and returns the JSON summary its last line prints. */
async function run(name: string): Promise<Summary> {
  const { stdout } = await promisify(execFile)(process.execPath, [join(WORK, "out", `${name}.js`)], {
    env: { ...process.env, TURNKEEPER_ADDRESS: serverAddress() },
    timeout: 120_000,
  });
  const lines = stdout.trim().split("\n");
  return JSON.parse(lines[lines.length - 1] ?? "") as Summary;
}

describe("examples/typescript", () => {
  before(() => {
    rmSync(WORK, { recursive: true, force: true });
    mkdirSync(WORK, { recursive: true });
    for (const file of readdirSync(EXAMPLES).filter((f) => f.endsWith(".ts"))) copyFileSync(join(EXAMPLES, file), join(WORK, file));
    const config = { extends: "../../tsconfig.json", compilerOptions: { rootDir: ".", outDir: "out", declaration: false, sourceMap: false }, include: ["*.ts"] };
    writeFileSync(join(WORK, "tsconfig.json"), JSON.stringify(config));
    execFileSync(join(PACKAGE, "node_modules", ".bin", "tsc"), ["-p", join(WORK, "tsconfig.json")], { cwd: PACKAGE, stdio: "inherit" });
  });

  // Three turns of tool calls, two model calls each. Untrimmed, the last request would hold the whole
  // history but the final answer; the budget leaves less, while the framework keeps every item.
  test("openai_agents_filter: the Agents SDK's ScriptedModel behind turnkeeperInputFilter", async () => {
    const summary = await run("openai_agents_filter");
    assert.equal(summary.modelCalls, 6);
    assert.equal(summary.historyItems, 14);
    assert.ok((summary.lastRequestItems ?? Infinity) < 13, `the last request was not trimmed: ${JSON.stringify(summary)}`);
  });

  test("ai_sdk_prepare_step: generateText with MockLanguageModelV4 and turnkeeperPrepareStep", async () => {
    const summary = await run("ai_sdk_prepare_step");
    assert.equal(summary.modelCalls, 6);
    assert.equal(summary.historyMessages, 12);
    assert.ok((summary.lastRequestMessages ?? Infinity) < 11, `the last request was not trimmed: ${JSON.stringify(summary)}`);
  });

  test("ai_sdk_middleware: streamText through wrapLanguageModel with turnkeeperMiddleware", async () => {
    const summary = await run("ai_sdk_middleware");
    assert.equal(summary.modelCalls, 6);
    assert.equal(summary.historyMessages, 12);
    assert.ok((summary.lastRequestMessages ?? Infinity) < 11, `the last request was not trimmed: ${JSON.stringify(summary)}`);
  });
});
