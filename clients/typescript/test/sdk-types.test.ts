// The converters take what the openai and @anthropic-ai/sdk packages type (no TS2345 for SDK-typed
// code) and give it back typed as the SDKs' params when asked. Compiling this file is half of the
// test (the SDKs are dev dependencies; nothing in src imports them); the other half converts the
// SDK-dump converter vectors through SDK-typed values at run time.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import type { ContentBlock, MessageCreateParams, MessageParam } from "@anthropic-ai/sdk/resources/messages";
import type { ChatCompletionMessage, ChatCompletionMessageParam } from "openai/resources/chat/completions";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import { fromAnthropic, fromOpenAI, fromOpenAIResponses, toAnthropic, toOpenAI, toOpenAIResponses } from "../src/index.js";
import { conformanceDir } from "./support.js";

type AnthropicConversation = Pick<MessageCreateParams, "system" | "messages">;

/**
 * The SDKs' tool-loop shapes, checked by the compiler only (TS2345 before `ProviderJson`): a
 * response message pushed onto the params, and a response's content blocks as an assistant turn.
 */
export function toolLoopsTypeCheck(reply: ChatCompletionMessage, blocks: ContentBlock[], output: ResponseInputItem[]): void {
  const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
  messages.push(reply);
  fromOpenAI(messages);
  fromOpenAIResponses([{ role: "user", content: "Weather in Paris?" }, ...output]);
  const turns: MessageParam[] = [{ role: "assistant", content: blocks }];
  fromAnthropic({ system: "Be terse.", messages: turns });
}

function sdkVectors(format: string): { name: string; shape: "chat" | "conversation"; provider: unknown }[] {
  const dir = join(conformanceDir(), "..", "converters");
  return readdirSync(dir)
    .filter((file) => file.includes("-sdk-dump-"))
    .map((file) => JSON.parse(readFileSync(join(dir, file), "utf8")) as { name: string; format: string; shape: "chat" | "conversation"; provider: unknown })
    .filter((v) => v.format === format);
}

test("Chat Completions: SDK-typed messages in, ChatCompletionMessageParam[] out", () => {
  const vectors = sdkVectors("openai_chat");
  assert.ok(vectors.length > 0);
  for (const vector of vectors) {
    // As a runtime holds them: params, and the SDK's ChatCompletionMessage (a response object).
    const messages = vector.provider as (ChatCompletionMessageParam | ChatCompletionMessage)[];
    const history = fromOpenAI(messages, { shape: vector.shape });
    const back: ChatCompletionMessageParam[] = toOpenAI<ChatCompletionMessageParam>(history);
    assert.deepEqual(back, vector.provider, vector.name);
  }
  // A property set to undefined is absent, as JSON.stringify (and the SDK's request body) has it.
  const withUndefined: ChatCompletionMessageParam[] = [{ role: "user", content: "hi", name: undefined }];
  assert.deepEqual(toOpenAI(fromOpenAI(withUndefined)), [{ role: "user", content: "hi" }]);
});

test("Responses: SDK-typed items in, ResponseInputItem[] out", () => {
  const vectors = sdkVectors("openai_responses");
  assert.ok(vectors.length > 0);
  for (const vector of vectors) {
    const items = vector.provider as ResponseInputItem[];
    const back: ResponseInputItem[] = toOpenAIResponses<ResponseInputItem>(fromOpenAIResponses(items, { shape: vector.shape }));
    assert.deepEqual(back, vector.provider, vector.name);
  }
});

test("Anthropic: SDK-typed request in, the SDK's system and messages out", () => {
  const vectors = sdkVectors("anthropic");
  assert.ok(vectors.length > 0);
  for (const vector of vectors) {
    const request = vector.provider as AnthropicConversation;
    const back: AnthropicConversation = toAnthropic<AnthropicConversation>(fromAnthropic(request, { shape: vector.shape }));
    const messages: MessageParam[] = back.messages;
    assert.deepEqual(back, vector.provider, vector.name);
    assert.equal(messages.length, request.messages.length);
  }
});
