// The Vercel AI SDK with turnkeeper as a model middleware: every call of the wrapped model is
// prepared, here with `streamText`.
//
//   TURNKEEPER_ADDRESS=127.0.0.1:50051 node ai_sdk_middleware.js   (compiled with the client's tsc)
//
// The SDK's own MockLanguageModelV4 streams the model's steps through three user turns of tool
// calls (parallel in the second). Each search result is long, so the history outgrows its budget:
// the middleware trims each prompt, and the application keeps its whole history. The last line is
// a JSON summary (clients/typescript/test/examples.test.ts runs this file and reads it).
import { stepCountIs, streamText, tool, wrapLanguageModel, type ModelMessage } from "ai";
import { MockLanguageModelV4, simulateReadableStream } from "ai/test";
import type { LanguageModelV4StreamPart } from "@ai-sdk/provider";
import { z } from "zod";
import { connect } from "@turnkeeper/client";
import { turnkeeperMiddleware } from "@turnkeeper/client/ai-sdk";

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
const finish = (unified: "stop" | "tool-calls"): LanguageModelV4StreamPart => ({ type: "finish", finishReason: { unified, raw: unified }, usage });

const client = connect(process.env.TURNKEEPER_ADDRESS ?? "127.0.0.1:50051");
const requestMessages: number[] = [];
const mock = new MockLanguageModelV4({
  doStream: (options) => {
    const step = steps[requestMessages.length];
    requestMessages.push(options.prompt.filter((m) => m.role !== "system").length);
    if (step === undefined) throw new Error("the script has no more steps");
    const chunks: LanguageModelV4StreamPart[] =
      "answer" in step
        ? [{ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: step.answer }, { type: "text-end", id: "t" }, finish("stop")]
        : [
            ...step.calls.map(({ q, callId }): LanguageModelV4StreamPart => ({ type: "tool-call", toolCallId: callId, toolName: "search", input: JSON.stringify({ q }) })),
            finish("tool-calls"),
          ];
    return Promise.resolve({ stream: simulateReadableStream({ chunks }) });
  },
});
const model = wrapLanguageModel({ model: mock, middleware: turnkeeperMiddleware(client, { profiles, sessionId: "example-middleware" }) });
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
    const result = streamText({ model, instructions: "Search, then answer in one sentence.", messages, tools, stopWhen: stepCountIs(5) });
    messages.push(...(await result.responseMessages));
  }
} finally {
  client.close();
}
console.log(JSON.stringify({ modelCalls: requestMessages.length, historyMessages: messages.length, lastRequestMessages: requestMessages.at(-1) }));
