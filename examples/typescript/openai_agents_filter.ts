// The OpenAI Agents SDK (JS) with turnkeeper: one option to `run`.
//
//   TURNKEEPER_ADDRESS=127.0.0.1:50051 node openai_agents_filter.js   (compiled with the client's tsc)
//
// The SDK's own ScriptedModel plays the model through three user turns of tool calls (parallel in
// the second). Each search result is long, so the history outgrows its budget: the filter trims
// what the model receives, and the SDK keeps its whole history. The last line is a JSON summary
// (clients/typescript/test/examples.test.ts runs this file and reads it).
import { Agent, Runner, tool, user, type AgentInputItem } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder, type RecordedModelCall } from "@openai/agents-core/testing";
import { z } from "zod";
import { connect } from "@turnkeeper/client";
import { turnkeeperInputFilter } from "@turnkeeper/client/agents";

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

const client = connect(process.env.TURNKEEPER_ADDRESS ?? "127.0.0.1:50051");
const requestItems: number[] = [];
const model = new ScriptedModel(
  steps.map((step) =>
    modelResponder((call: RecordedModelCall) => {
      requestItems.push(typeof call.request.input === "string" ? 1 : call.request.input.length);
      if ("answer" in step) return [assistantMessage(step.answer)];
      return step.calls.map(({ q, callId }) => functionCall("search", { q }, { callId }));
    }),
  ),
);
const search = tool({
  name: "search",
  description: "Searches the web.",
  parameters: z.object({ q: z.string() }),
  execute: ({ q }) => `Results for ${q}: ${"a long page of search results. ".repeat(50)}`,
});
const agent = new Agent({ name: "researcher", instructions: "Search, then answer in one sentence.", model, tools: [search] });
const runner = new Runner({ tracingDisabled: true });

let history: AgentInputItem[] = [];
try {
  for (const turn of turns) {
    const result = await runner.run(agent, [...history, user(turn.user)], {
      callModelInputFilter: turnkeeperInputFilter(client, { profiles, sessionId: "example-agents" }),
    });
    history = result.history;
  }
} finally {
  client.close();
}
console.log(JSON.stringify({ modelCalls: requestItems.length, historyItems: history.length, lastRequestItems: requestItems.at(-1) }));
