// The scripted session every framework adapter runs (issue: one line in every agent framework):
// six user turns of tool calls, with parallel calls and a twelve-call turn, and the checks made
// on every request the scripted model receives.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import type { History, TrimEventSubscription, TurnkeeperClient } from "../src/index.js";
import { Role } from "../src/index.js";

/** The history budget of the loop (a tenth of the model's window): small enough that the later turns are trimmed. */
export const BUDGET = 800n;
export const PROFILES = {
  runtime: { defaultProvider: "scripted", contextCompactRatio: 0.1 },
  providers: [{ alias: "scripted", model: "scripted-model", contextWindow: 8_000n }],
};
export const SYSTEM = "You are a research agent. Use the search tool, then answer in one sentence.";

/** One model step: the calls it makes at once (parallel when more than one), or its final answer. */
export type Step = { calls: string[] } | { answer: string };

/** Per user turn, the model's steps; turn 3 makes twelve calls, turns 2 and 5 parallel ones. */
export const TURNS: { user: string; steps: Step[] }[] = [
  { user: "What is turnkeeper?", steps: [{ calls: ["turnkeeper"] }, { answer: "A history sidecar." }] },
  { user: "Compare two engines.", steps: [{ calls: ["python engine", "native engine"] }, { answer: "They answer alike." }] },
  {
    user: "Survey twelve frameworks.",
    steps: [
      { calls: ["f1", "f2", "f3"] },
      { calls: ["f4", "f5", "f6"] },
      { calls: ["f7", "f8", "f9"] },
      { calls: ["f10", "f11", "f12"] },
      { answer: "Twelve surveyed." },
    ],
  },
  { user: "What did the first say?", steps: [{ calls: ["f1 again"] }, { answer: "It said the same." }] },
  { user: "Check two more.", steps: [{ calls: ["g1", "g2"] }, { answer: "Both checked." }] },
  { user: "Summarise.", steps: [{ calls: ["summary"] }, { answer: "Done." }] },
];

export const TOTAL_CALLS = TURNS.flatMap((t) => t.steps).reduce((n, s) => n + ("calls" in s ? s.calls.length : 0), 0);

/** The search tool's result: long enough that six turns do not fit the budget. */
export function searchResult(query: string): string {
  return `Results for ${query}: ` + "a finding that matters to the answer. ".repeat(6);
}

/** A request as the provider sees it: each tool call and tool result, in order, and other rows. */
export type Entry = { call: string } | { result: string } | { other: true };

/** Every call is answered by the results right after its run of calls, and no result is without its call. */
export function assertProviderValid(entries: Entry[], where: string): void {
  for (let i = 0; i < entries.length; ) {
    const entry = entries[i] as Entry;
    if ("result" in entry) assert.fail(`${where}: result ${entry.result} at ${i} has no call before it`);
    if (!("call" in entry)) {
      i++;
      continue;
    }
    const calls: string[] = [];
    while (i < entries.length && "call" in (entries[i] as Entry)) calls.push((entries[i++] as { call: string }).call);
    const results: string[] = [];
    while (i < entries.length && "result" in (entries[i] as Entry)) results.push((entries[i++] as { result: string }).result);
    assert.deepEqual([...results].sort(), [...calls].sort(), `${where}: calls ${calls.join(",")} answered by ${results.join(",")}`);
  }
}

/** The user turns of a history (user rows that are not the breadcrumb). */
function userTurns(history: History): number {
  if (history.shape.case !== "chat") return 0;
  return history.shape.value.messages.filter((m) => m.role === Role.USER && !m.breadcrumb).length;
}

/** The history is within the budget, unless it is down to its newest turn (spec §9: kept whole). */
export async function assertWithinBudget(client: TurnkeeperClient, history: History, where: string): Promise<void> {
  const { totalTokens } = await client.estimateTokens({ history });
  if (userTurns(history) > 1) assert.ok(totalTokens <= BUDGET, `${where}: ${totalTokens} tokens over the budget ${BUDGET}`);
}

/** A session id and its TrimEvents subscription, opened before the loop. */
export async function watchSession(client: TurnkeeperClient): Promise<{ sessionId: string; events: TrimEventSubscription }> {
  const sessionId = `loop-${randomUUID()}`;
  const events = await client.subscribeTrimEvents({ sessionIds: [sessionId] });
  return { sessionId, events };
}

/** Reads the subscription until a trim event arrives; every event must carry the session. */
export async function assertTrimEventsCarry(events: TrimEventSubscription, sessionId: string): Promise<void> {
  const timer = setTimeout(() => events.close(), 10_000);
  let seen = 0;
  try {
    for await (const { item } of events) {
      if (item.case !== "event") continue;
      assert.equal(item.value.trimmed?.caller?.sessionId, sessionId);
      seen++;
      break;
    }
  } finally {
    clearTimeout(timer);
    events.close();
  }
  assert.ok(seen > 0, `no trim event for session ${sessionId}`);
}
