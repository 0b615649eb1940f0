// The framework adapters against the real framework packages, each driving its framework's own
// test model through the scripted six-turn session of framework_loop.ts with a live server.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { Agent, Runner, tool as agentTool, user, type AgentInputItem } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder, type RecordedModelCall } from "@openai/agents-core/testing";
import { generateText, stepCountIs, streamText, tool as aiTool, wrapLanguageModel, type ModelMessage } from "ai";
import { MockLanguageModelV4, simulateReadableStream } from "ai/test";
import type { LanguageModelV4StreamPart } from "@ai-sdk/provider";
import { z } from "zod";
import { fromAISDK, fromOpenAIAgents, type History } from "../src/index.js";
import { turnkeeperPrepareStep, turnkeeperMiddleware } from "../src/adapters/ai_sdk.js";
import { turnkeeperInputFilter } from "../src/adapters/openai_agents.js";
import {
  assertProviderValid,
  assertTrimEventsCarry,
  assertWithinBudget,
  PROFILES,
  searchResult,
  SYSTEM,
  TOTAL_CALLS,
  TURNS,
  watchSession,
  type Entry,
  type Step,
} from "./framework_loop.js";
import { tcpClient } from "./support.js";

/** The scripted steps in order, each with its call ids (`c<step>_<k>`). */
const STEPS: Step[] = TURNS.flatMap((t) => t.steps);
const callId = (step: number, k: number): string => `c${step}_${k}`;

/**
 * Checks every request the model receives: provider-valid, and holding every call and result of
 * the current turn (the turn is never trimmed, so none may be lost); the checks that need the
 * server run after the loop.
 */
class RequestLog {
  readonly histories: History[] = [];
  private turnCalls: string[] = [];
  newTurn(): void {
    this.turnCalls = [];
  }
  issued(ids: string[]): void {
    this.turnCalls.push(...ids);
  }
  record(entries: Entry[], history: History, where: string): void {
    assertProviderValid(entries, where);
    const calls = entries.flatMap((e) => ("call" in e ? [e.call] : []));
    for (const id of this.turnCalls) assert.ok(calls.includes(id), `${where}: call ${id} of the current turn is missing`);
    this.histories.push(history);
  }
}

/** The model's reply for scripted step `here`, in the log's terms: the call ids it issues. */
function issue(log: RequestLog, scripted: Step, here: number): void {
  if ("calls" in scripted) log.issued(scripted.calls.map((_q, k) => callId(here, k)));
}

function agentsEntries(input: string | AgentInputItem[]): Entry[] {
  if (typeof input === "string") return [{ other: true }];
  return input.map((item): Entry => {
    if (item.type === "function_call") return { call: item.callId };
    if (item.type === "function_call_result") return { result: item.callId };
    return { other: true };
  });
}

type PromptMessage = { role: string; content: unknown };
function aiSdkEntries(prompt: readonly PromptMessage[]): Entry[] {
  return prompt.flatMap((message): Entry[] => {
    if (!Array.isArray(message.content)) return [{ other: true }];
    const parts = message.content as { type: string; toolCallId?: string }[];
    if (message.role === "tool") return parts.map((p) => (p.type === "tool-result" ? { result: p.toolCallId ?? "" } : { other: true }));
    const calls = parts.filter((p) => p.type === "tool-call").map((p): Entry => ({ call: p.toolCallId ?? "" }));
    return calls.length > 0 ? calls : [{ other: true }];
  });
}

describe("framework adapters: the scripted six-turn session", () => {
  const client = tcpClient();
  after(() => client.close());

  test("OpenAI Agents SDK: callModelInputFilter: turnkeeperInputFilter(client, {...})", async () => {
    const { sessionId, events } = await watchSession(client);
    const log = new RequestLog();
    let step = 0;
    const model = new ScriptedModel(
      STEPS.map(() =>
        modelResponder((call: RecordedModelCall) => {
          const input = call.request.input;
          log.record(agentsEntries(input), fromOpenAIAgents(typeof input === "string" ? [user(input)] : input), `request ${call.index}`);
          const scripted = STEPS[step] as Step;
          const here = step++;
          issue(log, scripted, here);
          if ("answer" in scripted) return [assistantMessage(scripted.answer)];
          return scripted.calls.map((q, k) => functionCall("search", { q }, { callId: callId(here, k) }));
        }),
      ),
    );
    const search = agentTool({
      name: "search",
      description: "Searches the web.",
      parameters: z.object({ q: z.string() }),
      execute: ({ q }) => searchResult(q),
    });
    const agent = new Agent({ name: "researcher", instructions: SYSTEM, model, tools: [search] });
    const runner = new Runner({ tracingDisabled: true });
    let history: AgentInputItem[] = [];
    for (const turn of TURNS) {
      log.newTurn();
      const result = await runner.run(agent, [...history, user(turn.user)], {
        callModelInputFilter: turnkeeperInputFilter(client, { profiles: PROFILES, sessionId }),
        maxTurns: 10,
      });
      history = result.history;
    }
    model.assertComplete();
    // The SDK kept its whole history: every call and every result of the session.
    assert.equal(history.filter((i) => i.type === "function_call").length, TOTAL_CALLS);
    assert.equal(history.filter((i) => i.type === "function_call_result").length, TOTAL_CALLS);
    assert.equal(log.histories.length, STEPS.length);
    for (const [i, h] of log.histories.entries()) await assertWithinBudget(client, h, `agents request ${i}`);
    await assertTrimEventsCarry(events, sessionId);
  });

  const aiTools = {
    search: aiTool({ description: "Searches the web.", inputSchema: z.object({ q: z.string() }), execute: ({ q }) => searchResult(q) }),
  };
  const usage = {
    inputTokens: { total: undefined, noCache: undefined, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: undefined, text: undefined, reasoning: undefined },
  };

  test("AI SDK: prepareStep: turnkeeperPrepareStep(client, {profiles, sessionId, tools})", async () => {
    const { sessionId, events } = await watchSession(client);
    const log = new RequestLog();
    let step = 0;
    const model = new MockLanguageModelV4({
      doGenerate: (options) => {
        const rows = options.prompt.filter((m) => m.role !== "system"); // the instructions are priced beside the history
        log.record(aiSdkEntries(options.prompt), fromAISDK(rows), `request ${step}`);
        const scripted = STEPS[step] as Step;
        const here = step++;
        issue(log, scripted, here);
        if ("answer" in scripted) {
          return Promise.resolve({ content: [{ type: "text", text: scripted.answer }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] });
        }
        const content = scripted.calls.map((q, k) => ({ type: "tool-call" as const, toolCallId: callId(here, k), toolName: "search", input: JSON.stringify({ q }) }));
        return Promise.resolve({ content, finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] });
      },
    });
    const messages: ModelMessage[] = [];
    for (const turn of TURNS) {
      log.newTurn();
      messages.push({ role: "user", content: turn.user });
      const result = await generateText({
        model,
        instructions: SYSTEM,
        messages,
        tools: aiTools,
        stopWhen: stepCountIs(10),
        prepareStep: turnkeeperPrepareStep(client, { profiles: PROFILES, sessionId, tools: aiTools }),
      });
      messages.push(...result.responseMessages);
    }
    assert.equal(step, STEPS.length);
    assertAllCallsKept(messages);
    for (const [i, h] of log.histories.entries()) await assertWithinBudget(client, h, `prepareStep request ${i}`);
    await assertTrimEventsCarry(events, sessionId);
  });

  test("AI SDK: wrapLanguageModel({ model, middleware: turnkeeperMiddleware(client, {...}) }) with streamText", async () => {
    const { sessionId, events } = await watchSession(client);
    const log = new RequestLog();
    let step = 0;
    const finish = (unified: "stop" | "tool-calls") => ({ type: "finish" as const, finishReason: { unified, raw: unified }, usage });
    const mock = new MockLanguageModelV4({
      doStream: (options) => {
        log.record(aiSdkEntries(options.prompt), fromAISDK(options.prompt), `request ${step}`);
        const scripted = STEPS[step] as Step;
        const here = step++;
        issue(log, scripted, here);
        const chunks: LanguageModelV4StreamPart[] =
          "answer" in scripted
            ? [
                { type: "text-start" as const, id: "t" },
                { type: "text-delta" as const, id: "t", delta: scripted.answer },
                { type: "text-end" as const, id: "t" },
                finish("stop"),
              ]
            : [
                ...scripted.calls.map((q, k) => ({ type: "tool-call" as const, toolCallId: callId(here, k), toolName: "search", input: JSON.stringify({ q }) })),
                finish("tool-calls"),
              ];
        return Promise.resolve({ stream: simulateReadableStream({ chunks }) });
      },
    });
    const model = wrapLanguageModel({ model: mock, middleware: turnkeeperMiddleware(client, { profiles: PROFILES, sessionId }) });
    const messages: ModelMessage[] = [];
    for (const turn of TURNS) {
      log.newTurn();
      messages.push({ role: "user", content: turn.user });
      const result = streamText({ model, instructions: SYSTEM, messages, tools: aiTools, stopWhen: stepCountIs(10) });
      messages.push(...(await result.responseMessages));
    }
    assert.equal(step, STEPS.length);
    assertAllCallsKept(messages);
    for (const [i, h] of log.histories.entries()) await assertWithinBudget(client, h, `middleware request ${i}`);
    await assertTrimEventsCarry(events, sessionId);
  });
});

/** The application's own history still holds every call and every result of the session. */
function assertAllCallsKept(messages: ModelMessage[]): void {
  const entries = aiSdkEntries(messages);
  assert.equal(entries.filter((e) => "call" in e).length, TOTAL_CALLS);
  assert.equal(entries.filter((e) => "result" in e).length, TOTAL_CALLS);
  assertProviderValid(entries, "the application's history");
}
