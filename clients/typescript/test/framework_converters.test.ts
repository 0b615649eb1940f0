// What the frameworks hand over, through the converters and the live server: parallel calls stay
// one row and survive the orphan sweep, opaque items are priced and come back unchanged.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import type { JsonObject } from "@bufbuild/protobuf";
import {
  CallerPath,
  fromAISDK,
  fromOpenAIAgents,
  fromOpenAIResponses,
  Role,
  toAISDK,
  toOpenAIAgents,
  toOpenAIResponses,
  TrimMode,
  type History,
  type TurnkeeperClient,
} from "../src/index.js";
import { aiSdkJson } from "../src/convert/ai_sdk.js";
import { tcpClient } from "./support.js";

function chatRows(history: History) {
  assert.equal(history.shape.case, "chat");
  return history.shape.value.messages;
}

async function keptWithoutPressure(client: TurnkeeperClient, history: History): Promise<History> {
  const response = await client.trimHistory({
    history,
    mode: TrimMode.TOKEN_BUDGET,
    callerPath: CallerPath.AGENT,
    limits: { case: "explicitLimits", value: { budgetTokens: 1_000_000_000n } },
  });
  assert.ok(response.history);
  return response.history;
}

const PARALLEL_RESPONSES: JsonObject[] = [
  { role: "user", content: "two lookups" },
  { type: "function_call", id: "fc_a", call_id: "a", name: "search", arguments: '{"q":"x"}', status: "completed" },
  { type: "function_call", id: "fc_b", call_id: "b", name: "search", arguments: '{"q":"y"}', status: "completed" },
  { type: "function_call_output", call_id: "a", output: "x found" },
  { type: "function_call_output", call_id: "b", output: "y found" },
];

const AGENTS_ITEMS: JsonObject[] = [
  { type: "message", role: "user", content: [{ type: "input_text", text: "read this" }, { type: "input_file", file: "data:application/pdf;base64,JVBERi0=", filename: "a.pdf" }] },
  { type: "hosted_tool_call", id: "ws_1", name: "web_search_call", status: "completed", providerData: { action: { query: "q" } } },
  { type: "reasoning", id: "rs_1", content: [{ type: "input_text", text: "think" }], providerData: { encryptedContent: "gAAA" } },
  { type: "function_call", callId: "a", name: "search", arguments: "{}", status: "completed", id: "fc_a" },
  { type: "function_call", callId: "b", name: "fetch", arguments: '{"u":1}', status: "completed", id: "fc_b" },
  { type: "function_call_result", callId: "a", name: "search", status: "completed", output: { type: "text", text: "found" } },
  { type: "function_call_result", callId: "b", name: "fetch", status: "completed", output: "fetched" },
  { type: "computer_call", callId: "cc", status: "completed", action: { type: "screenshot" } },
  { type: "computer_call_result", callId: "cc", output: { type: "computer_screenshot", data: "https://x.test/s.png" } },
  { type: "compaction", encrypted_content: "enc", id: "cp_1" },
  { role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] },
];

describe("framework converters", () => {
  const client = tcpClient();
  after(() => client.close());

  test("Responses: consecutive function_call items are one assistant row that the orphan sweep keeps", async () => {
    const history = fromOpenAIResponses(PARALLEL_RESPONSES);
    const rows = chatRows(history);
    assert.deepEqual(
      rows.map((r) => [r.role, r.toolCalls.map((c) => c.id)]),
      [[Role.USER, []], [Role.ASSISTANT, ["a", "b"]], [Role.TOOL, []], [Role.TOOL, []]],
    );
    const swept = await client.sweepOrphans({ history });
    assert.deepEqual(swept.removals, []);
    assert.ok(swept.history);
    assert.deepEqual(toOpenAIResponses(swept.history), PARALLEL_RESPONSES);
  });

  test("Responses: hosted-tool items and input_file parts are priced opaque rows and come back unchanged", async () => {
    const items: JsonObject[] = [
      { role: "user", content: [{ type: "input_text", text: "see " }, { type: "input_file", file_id: "file_1" }] },
      { type: "web_search_call", id: "ws_1", status: "completed", action: { type: "search", query: "q" } },
      { type: "file_search_call", id: "fs_1", status: "completed", queries: ["q"] },
      { type: "mcp_call", id: "mcp_1", server_label: "s", name: "t", arguments: "{}", output: "o" },
      { type: "computer_call", id: "cu_1", call_id: "cc", action: { type: "screenshot" }, status: "completed", pending_safety_checks: [] },
      { type: "computer_call_output", call_id: "cc", output: { type: "computer_screenshot", image_url: "https://x.test/s.png" } },
      { type: "item_reference", id: "msg_0" },
      { type: "compaction", id: "cp_1", encrypted_content: "enc" },
      { role: "assistant", content: "ok" },
    ];
    const history = fromOpenAIResponses(items);
    const rows = chatRows(history);
    assert.equal(rows.length, items.length);
    assert.ok(rows[1]?.content.includes('"web_search_call"'), "the item's JSON is the row's priced text");
    const bare = await client.estimateTokens({ history: fromOpenAIResponses([items[0] as JsonObject, items[8] as JsonObject]) });
    const whole = await client.estimateTokens({ history });
    assert.ok(whole.totalTokens > bare.totalTokens + 50n, `${whole.totalTokens} vs ${bare.totalTokens}`);
    assert.deepEqual(toOpenAIResponses(await keptWithoutPressure(client, history)), items);
  });

  test("Agents SDK: camelCase calls in parallel, results, hosted tools and files round-trip through the server", async () => {
    for (const shape of ["chat", "conversation"] as const) {
      const history = fromOpenAIAgents(AGENTS_ITEMS, { shape });
      const swept = await client.sweepOrphans({ history });
      assert.deepEqual(swept.removals, [], shape);
      assert.deepEqual(toOpenAIAgents(await keptWithoutPressure(client, history)), AGENTS_ITEMS, shape);
    }
    const rows = chatRows(fromOpenAIAgents({ input: AGENTS_ITEMS }));
    assert.deepEqual(rows[3]?.toolCalls.map((c) => c.id), ["a", "b"]);
    assert.equal(rows[4]?.toolCallId, "a");
  });

  test("AI SDK: ModelMessage parts, binary data and several results in one tool message round-trip", async () => {
    const messages: unknown[] = [
      { role: "system", content: "be brief" },
      {
        role: "user",
        content: [
          { type: "text", text: "look " },
          { type: "image", image: "https://x.test/a.png" },
          { type: "file", data: new Uint8Array([1, 2, 3]), mediaType: "application/pdf" },
        ],
      },
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "two searches" },
          { type: "tool-call", toolCallId: "a", toolName: "search", input: { q: "x", n: 2 } },
          { type: "tool-call", toolCallId: "b", toolName: "search", input: { q: "y" } },
          { type: "tool-call", toolCallId: "w", toolName: "web_search", input: {}, providerExecuted: true },
        ],
        providerOptions: { openai: { itemId: "msg_1" } },
      },
      {
        role: "tool",
        content: [
          { type: "tool-result", toolCallId: "a", toolName: "search", output: { type: "json", value: { hits: [1, 2] } } },
          { type: "tool-result", toolCallId: "b", toolName: "search", output: { type: "content", value: [{ type: "text", text: "y" }, { type: "image-url", url: "https://x.test/b.png" }] } },
        ],
      },
      { role: "assistant", content: "done" },
    ];
    const expected = aiSdkJson(messages);
    for (const shape of ["chat", "conversation"] as const) {
      const history = fromAISDK(messages, { shape });
      const swept = await client.sweepOrphans({ history });
      assert.deepEqual(swept.removals, [], shape);
      assert.deepEqual(toAISDK(await keptWithoutPressure(client, history)), expected, shape);
    }
    const rows = chatRows(fromAISDK(messages));
    assert.deepEqual(rows[2]?.toolCalls.map((c) => [c.id, c.arguments]), [["a", '{"n":2,"q":"x"}'], ["b", '{"q":"y"}']]);
    assert.deepEqual(rows.slice(3, 5).map((r) => r.toolCallId), ["a", "b"]);
  });

  test("AI SDK: a call the orphan sweep removes takes its part with it, and its result row is gone", async () => {
    const messages: JsonObject[] = [
      { role: "user", content: "go" },
      { role: "assistant", content: [{ type: "tool-call", toolCallId: "a", toolName: "s", input: {} }, { type: "tool-call", toolCallId: "b", toolName: "s", input: {} }] },
      { role: "tool", content: [{ type: "tool-result", toolCallId: "b", toolName: "s", output: { type: "text", value: "b" } }] },
    ];
    const swept = await client.sweepOrphans({ history: fromAISDK(messages) });
    assert.ok(swept.history);
    assert.deepEqual(toAISDK(swept.history), [
      messages[0],
      { role: "assistant", content: [{ type: "tool-call", toolCallId: "b", toolName: "s", input: {} }] },
      messages[2],
    ]);
  });
});
