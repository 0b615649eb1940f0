// The Vercel AI SDK with turnkeeper: one option to `generateText` (or `streamText`, or an agent).
//
//   TURNKEEPER_ADDRESS=127.0.0.1:50051 node ai_sdk_prepare_step.js   (compiled with the client's tsc)
//
// The SDK's own MockLanguageModelV4 plays the model through three user turns of tool calls
// (parallel in the second). Each search result is long, so the history outgrows its budget:
// prepareStep trims the messages of each step, and the application keeps its whole history. The
// last line is a JSON summary (clients/typescript/test/examples.test.ts runs this file and reads it).
import { generateText, stepCountIs, tool, type ModelMessage } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { connect } from "@turnkeeper/client";
import { turnkeeperPrepareStep } from "@turnkeeper/client/ai-sdk";

const profiles = {
  runtime: { defaultProvider: "scripted", contextCompactRatio: 0.1 },
  providers: [{ alias: "scripted", model: "scripted-model", contextWindow: 8_000n }],
};
const turns = [
  { user: "What is turnkeeper?", calls: ["turnkeeper"], answer: "A history sidecar." },
  { user: "Compare the two engines.", calls: ["python engine", "native engine"], answer: "They answer alike." },
  { user: "Summarise.", calls: ["summary"], answer: "Done." },
];
/** One model step: the calls it makes at once, or its answer. */
type Step = { calls: { q: string; callId: string }[] } | { answer: string };
const steps: Step[] = turns.flatMap((t, i): Step[] => [{ calls: t.calls.map((q, k) => ({ q, callId: `c${i}_${k}` })) }, { answer: t.answer }]);
const usage = {
  inputTokens: { total: undefined, noCache: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: undefined, text: undefined, reasoning: undefined },
};

const client = connect(process.env.TURNKEEPER_ADDRESS ?? "127.0.0.1:50051");
const requestMessages: number[] = [];
const model = new MockLanguageModelV4({
  doGenerate: (options) => {
    const step = steps[requestMessages.length];
    requestMessages.push(options.prompt.filter((m) => m.role !== "system").length);
    if (step === undefined) throw new Error("the script has no more steps");
    if ("answer" in step) {
      return Promise.resolve({ content: [{ type: "text", text: step.answer }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] });
    }
    const content = step.calls.map(({ q, callId }) => ({ type: "tool-call" as const, toolCallId: callId, toolName: "search", input: JSON.stringify({ q }) }));
    return Promise.resolve({ content, finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] });
  },
});
const tools = {
  search: tool({
    description: "Searches the web.",
    inputSchema: z.object({ q: z.string() }),
    execute: ({ q }) => `Results for ${q}: ${"a long page of search results. ".repeat(50)}`,
  }),
};

const messages: ModelMessage[] = [];
try {
  for (const turn of turns) {
    messages.push({ role: "user", content: turn.user });
    const result = await generateText({
      model,
      instructions: "Search, then answer in one sentence.",
      messages,
      tools,
      stopWhen: stepCountIs(5),
      prepareStep: turnkeeperPrepareStep(client, { profiles, sessionId: "example-prepare-step", tools }),
    });
    messages.push(...result.responseMessages);
  }
} finally {
  client.close();
}
console.log(JSON.stringify({ modelCalls: requestMessages.length, historyMessages: messages.length, lastRequestMessages: requestMessages.at(-1) }));
