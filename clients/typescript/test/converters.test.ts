// The shared converter vectors (tests/conformance/converters, docs/converters.md) and one round-trip
// property per format over seeded random provider JSON, through the live server.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { create, fromJson, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import {
  ConversionError,
  fromAISDK,
  fromAnthropic,
  fromOpenAI,
  fromOpenAIAgents,
  fromOpenAIResponses,
  HistorySchema,
  ChatMessageSchema,
  Role,
  toAISDK,
  toAnthropic,
  toOpenAI,
  toOpenAIAgents,
  toOpenAIResponses,
  TrimMode,
  CallerPath,
  CacheLifetime,
  type AnthropicExportOptions,
  type ConvertOptions,
  type History,
  turnMarks,
  type TurnkeeperClient,
} from "../src/index.js";
import { conformanceDir, tcpClient } from "./support.js";

type From = (provider: JsonValue, options?: ConvertOptions) => History;
type To = (history: History, options?: AnthropicExportOptions) => JsonValue;
const FORMATS: Record<string, [From, To]> = {
  openai_chat: [fromOpenAI, toOpenAI],
  openai_responses: [fromOpenAIResponses, toOpenAIResponses],
  anthropic: [fromAnthropic, toAnthropic],
  openai_agents: [fromOpenAIAgents, toOpenAIAgents],
  ai_sdk: [fromAISDK, toAISDK],
};

interface Vector {
  name: string;
  format: string;
  shape: "chat" | "conversation";
  direction: "both" | "export" | "import-error";
  provider: JsonValue;
  history?: JsonValue;
  estimate?: { totalTokens: number };
  /** Anthropic only: the cache breakpoints and lifetime of spec §14, passed to every export. */
  exportOptions?: { cacheBreakpoints?: number[]; cacheLifetime?: string };
  /** The spec §15 marks no provider format carries, passed to every import; `turnMarks` gives them back. */
  marks?: { summary?: boolean; pinnedTurns?: number[] };
}

/** The vector's `marks` with the defaults filled in, as {@link turnMarks} returns them. */
function marksOf(vector: Vector): { summary: boolean; pinnedTurns: number[] } {
  const marks = vector.marks ?? {};
  assert.ok(Object.keys(marks).every((key) => key === "summary" || key === "pinnedTurns"));
  return { summary: marks.summary ?? false, pinnedTurns: marks.pinnedTurns ?? [] };
}

/** The vector's `exportOptions` as the converters take them (the lifetime by its proto enum name). */
function exportOptions(vector: Vector): AnthropicExportOptions {
  const options = vector.exportOptions ?? {};
  assert.ok(Object.keys(options).every((key) => key === "cacheBreakpoints" || key === "cacheLifetime"));
  const lifetime = options.cacheLifetime?.replace(/^CACHE_LIFETIME_/, "") as keyof typeof CacheLifetime | undefined;
  return {
    ...(options.cacheBreakpoints === undefined ? {} : { cacheBreakpoints: options.cacheBreakpoints }),
    ...(lifetime === undefined ? {} : { cacheLifetime: CacheLifetime[lifetime] }),
  };
}

const dir = join(conformanceDir(), "..", "converters");
const vectors: Vector[] = readdirSync(dir)
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")) as Vector);

async function trimWithoutPressure(client: TurnkeeperClient, history: History): Promise<History> {
  const response = await client.trimHistory({
    history,
    mode: TrimMode.TOKEN_BUDGET,
    callerPath: CallerPath.AGENT,
    limits: { case: "explicitLimits", value: { budgetTokens: 1_000_000_000n } },
  });
  assert.equal(response.outcome?.trimmed, false);
  assert.ok(response.history);
  return response.history;
}

const asJson = (history: History): JsonValue => toJson(HistorySchema, history);

describe("converter vectors", () => {
  const client = tcpClient();
  after(() => client.close());
  assert.ok(vectors.length >= 12);
  for (const vector of vectors) {
    test(vector.name, async () => {
      const [from, to] = FORMATS[vector.format] ?? assert.fail(`unknown format ${vector.format}`);
      if (vector.direction === "import-error") {
        assert.throws(() => from(vector.provider, { shape: vector.shape, marks: marksOf(vector) }), ConversionError);
        return;
      }
      const history = fromJson(HistorySchema, vector.history ?? null);
      const marks = marksOf(vector);
      if (vector.direction === "both") assert.deepStrictEqual(asJson(from(vector.provider, { shape: vector.shape, marks })), asJson(history));
      assert.deepStrictEqual(turnMarks(history), marks);
      const options = exportOptions(vector);
      assert.deepStrictEqual(to(history, options), vector.provider);
      const estimate = await client.estimateTokens({ history });
      assert.equal(estimate.totalTokens, BigInt(vector.estimate?.totalTokens ?? -1));
      const kept = await trimWithoutPressure(client, history);
      assert.deepStrictEqual(asJson(kept), asJson(history));
      assert.deepStrictEqual(to(kept, options), vector.provider);
    });
  }
});

// --- Round-trip properties over seeded random provider JSON -------------------------------------

/** mulberry32: a small seeded PRNG, so a failure names the seed that reproduces it. */
class Random {
  constructor(private state: number) {}
  next(): number {
    this.state = (this.state + 0x6d2b79f5) | 0;
    let t = Math.imul(this.state ^ (this.state >>> 15), 1 | this.state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  bool(): boolean {
    return this.next() < 0.5;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)] as T;
  }
  text(): string {
    const alphabet = ["a", "b", " ", "é", "🦀", "[", "]", ":", "/", "\n", '"', "[IMAGE:https://x/y.png]", "[Tool results]"];
    return Array.from({ length: this.int(0, 6) }, () => this.pick(alphabet)).join("");
  }
  id(): string {
    return Array.from({ length: this.int(1, 6) }, () => this.pick(["a", "b", "c", "_", "1", "2"])).join("");
  }
  extra(base: JsonObject): JsonObject {
    const out: JsonObject = {};
    if (this.bool()) out.cache_control = { type: "ephemeral" };
    if (this.bool()) out.x_note = this.pick([null, true, 3, this.text()]);
    return { ...out, ...base };
  }
}

const IMAGE_URLS = ["https://x.test/a.png", "http://h/b.jpg", "data:image/png;base64,AAAA", "data:;base64,"];

function openaiMessages(r: Random): JsonValue {
  return Array.from({ length: r.int(0, 6) }, (): JsonObject => {
    const role = r.pick(["system", "developer", "user", "assistant", "tool"]);
    const message: JsonObject = { role };
    if (r.bool()) message.name = r.text();
    if (role === "tool") return { ...message, tool_call_id: r.id(), content: r.text() };
    if (role === "assistant") {
      message.content = r.bool() ? null : r.text();
      if (r.bool()) {
        message.tool_calls = Array.from({ length: r.int(1, 2) }, () => ({ id: r.id(), type: "function", function: { name: r.id(), arguments: r.text() } }));
      }
      if (r.bool()) message.refusal = r.bool() ? null : r.text();
      return message;
    }
    if (role === "user" && r.bool()) {
      message.content = Array.from({ length: r.int(0, 3) }, (): JsonObject => {
        if (r.bool()) return { type: "text", text: r.text() };
        const image: JsonObject = { url: r.pick(IMAGE_URLS) };
        if (r.bool()) image.detail = r.pick(["low", "high", "auto"]);
        return { type: "image_url", image_url: image };
      });
      return message;
    }
    message.content = r.bool() ? r.text() : Array.from({ length: r.int(0, 2) }, () => ({ type: "text", text: r.text() }));
    return message;
  });
}

function responsesItems(r: Random): JsonValue {
  return Array.from({ length: r.int(0, 6) }, (): JsonObject => {
    const kind = r.pick(["message", "function_call", "output", "reasoning"]);
    if (kind === "message") {
      const role = r.pick(["system", "developer", "user", "assistant"]);
      let content: JsonValue = r.text();
      if (r.bool()) {
        const parts: JsonObject[] = [{ type: role === "assistant" ? "output_text" : "input_text", text: r.text() }];
        if (role === "user" && r.bool()) parts.push({ type: "input_image", image_url: r.pick(IMAGE_URLS), detail: r.pick(["low", "high", "auto"]) });
        content = parts;
      }
      const item: JsonObject = { role, content };
      return r.bool() ? { ...item, type: "message", id: r.id(), status: "completed" } : item;
    }
    if (kind === "function_call") return r.extra({ type: "function_call", call_id: r.id(), name: r.id(), arguments: r.text() });
    if (kind === "output") return { type: "function_call_output", call_id: r.id(), output: r.bool() ? r.text() : [{ type: "input_text", text: "o" }] };
    const item: JsonObject = { type: "reasoning", id: r.id(), summary: Array.from({ length: r.int(0, 2) }, () => ({ type: "summary_text", text: r.text() })) };
    if (r.bool()) item.encrypted_content = r.bool() ? null : r.text();
    return item;
  });
}

function anthropicImage(r: Random): JsonObject {
  return {
    type: "image",
    source: r.bool() ? { type: "url", url: r.pick(IMAGE_URLS) } : { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" },
  };
}

function anthropicRequest(r: Random): JsonValue {
  const request: JsonObject = {};
  const system = r.pick(["none", "string", "blocks"]);
  if (system === "string") request.system = r.text();
  if (system === "blocks") request.system = Array.from({ length: r.int(1, 2) }, () => r.extra({ type: "text", text: r.text() }));
  request.messages = Array.from({ length: r.int(0, 5) }, (): JsonObject => {
    if (r.bool()) {
      const blocks = Array.from({ length: r.int(0, 4) }, (): JsonObject => {
        const kind = r.pick(["text", "thinking", "redacted", "tool_use"]);
        if (kind === "text") return r.extra({ type: "text", text: r.text() });
        if (kind === "thinking") return { type: "thinking", thinking: r.text(), signature: r.id() };
        if (kind === "redacted") return { type: "redacted_thinking", data: r.text() };
        const input: JsonObject = {};
        for (let i = r.int(0, 3); i > 0; i--) input[r.text()] = r.pick([1, -2, true, null, r.text()]);
        return r.extra({ type: "tool_use", id: r.id(), name: r.id(), input });
      });
      return { role: "assistant", content: r.bool() ? r.text() : blocks };
    }
    const blocks: JsonObject[] = Array.from({ length: r.int(0, 2) }, () => {
      const result: JsonObject = { type: "tool_result", tool_use_id: r.id() };
      const shape = r.pick(["absent", "string", "blocks"]);
      if (shape === "string") result.content = r.text();
      if (shape === "blocks") result.content = [{ type: "text", text: r.text() }, anthropicImage(r)];
      if (r.bool()) result.is_error = r.bool();
      return r.extra(result);
    });
    for (let i = r.int(0, 2); i > 0; i--) blocks.push(r.bool() ? r.extra({ type: "text", text: r.text() }) : anthropicImage(r));
    return { role: "user", content: r.bool() ? r.text() : blocks };
  });
  return request;
}

const GENERATORS: Record<string, (r: Random) => JsonValue> = {
  openai_chat: openaiMessages,
  openai_responses: responsesItems,
  anthropic: anthropicRequest,
};

describe("round-trip properties", () => {
  const client = tcpClient();
  after(() => client.close());
  for (const [format, generate] of Object.entries(GENERATORS)) {
    test(`${format}: convert, trim without budget pressure, convert back gives the input`, async () => {
      const [from, to] = FORMATS[format] as [From, To];
      for (let seed = 1; seed <= 60; seed++) {
        const provider = generate(new Random(seed));
        const shape = seed % 2 === 0 ? "chat" : "conversation";
        const history = from(provider, { shape });
        const kept = await trimWithoutPressure(client, history);
        assert.deepStrictEqual(to(kept), provider, `seed ${seed} (${shape})`);
      }
    });
  }
});

// --- Spec §13.1 summaries and §14 cache breakpoints, without a server -----------------------------

const SUMMARY = "[Tool exchange: 2 tool call(s) \u2014 results collapsed]";

function chatHistory(...rows: Parameters<typeof create<typeof ChatMessageSchema>>[1][]): History {
  return create(HistorySchema, { shape: { case: "chat", value: { messages: rows.map((r) => create(ChatMessageSchema, r)) } } });
}

/** The text of every block carrying cache_control, system first. */
function markedBlocks(request: JsonObject): JsonValue[] {
  const blocks: JsonObject[] = Array.isArray(request.system) ? (request.system as JsonObject[]) : [];
  for (const message of request.messages as JsonObject[]) if (Array.isArray(message.content)) blocks.push(...(message.content as JsonObject[]));
  return blocks.filter((b) => "cache_control" in b).map((b) => b.text ?? b.content ?? null);
}

describe("summaries and cache breakpoints", () => {
  const pairs: [string, From, To, "chat" | "conversation"][] = [
    ["openai_chat", fromOpenAI, toOpenAI, "chat"],
    ["openai_responses", fromOpenAIResponses, toOpenAIResponses, "chat"],
    ["openai_responses", fromOpenAIResponses, toOpenAIResponses, "conversation"],
    ["anthropic", fromAnthropic, toAnthropic, "chat"],
  ];
  for (const [name, from, to, shape] of pairs) {
    test(`${name} (${shape}): a tool-exchange summary comes back as a plain assistant row`, () => {
      const history = chatHistory(
        { role: Role.USER, content: "q" },
        { role: Role.ASSISTANT, content: SUMMARY, toolExchangeSummary: true },
        { role: Role.ASSISTANT, content: "a" },
      );
      const back = asJson(from(to(history), { shape })) as JsonObject;
      const rows = shape === "chat" ? (back.chat as JsonObject).messages : ((back.conversation as JsonObject).messages as JsonObject[]).map((m) => m.chat ?? null);
      assert.deepStrictEqual((rows as JsonValue[])[1], { role: "ROLE_ASSISTANT", content: SUMMARY });
    });
  }

  test("four marks of the caller's leave no room for turnkeeper's", () => {
    const own = { anthropic: { role: "user", content: [{ type: "text", text: 1, cache_control: { type: "ephemeral" } }] } };
    const history = chatHistory(
      { role: Role.SYSTEM, content: "s" },
      ...[0, 1, 2, 3].map((k) => ({ role: Role.USER, content: String(k), passthrough: own })),
      { role: Role.ASSISTANT, content: "a" },
    );
    const request = toAnthropic(history, { cacheBreakpoints: [0, 5] });
    assert.deepStrictEqual(markedBlocks(request), ["0", "1", "2", "3"]);
    assert.equal(request.system, "s"); // a left-out mark leaves its row as it was
    assert.deepStrictEqual((request.messages as JsonValue[])[4], { role: "assistant", content: "a" });
  });

  test("without the caller's marks every candidate is marked", () => {
    const history = chatHistory(
      { role: Role.SYSTEM, content: "s" },
      { role: Role.USER, content: "q1" },
      { role: Role.ASSISTANT, content: "a1" },
      { role: Role.USER, content: "q2" },
    );
    assert.deepStrictEqual(markedBlocks(toAnthropic(history, { cacheBreakpoints: [0, 2, 3] })), ["s", "a1", "q2"]);
    assert.deepStrictEqual(toAnthropic(history, { cacheBreakpoints: [] }), toAnthropic(history));
  });

  for (const index of [-1, 2, 0.5]) {
    test(`a cache breakpoint ${index} outside the history is refused`, () => {
      const history = chatHistory({ role: Role.USER, content: "q" }, { role: Role.ASSISTANT, content: "a" });
      assert.throws(() => toAnthropic(history, { cacheBreakpoints: [1, index] }), (e) => e instanceof ConversionError && e.message.includes("cacheBreakpoints[1]"));
    });
  }
});
