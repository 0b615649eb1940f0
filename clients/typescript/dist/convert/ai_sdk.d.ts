import { type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions, type ProviderJson } from "./common.js";
/** The AI SDK values as the JSON this converter reads (binary as base64, a `URL` as its text). */
export declare function aiSdkJson(value: ProviderJson): JsonValue;
/**
 * Converts AI SDK messages (`ModelMessage[]`, a `LanguageModelV4Prompt`, or `{ messages }`) to a
 * History: one row per message, except a tool message, which is one tool row per `tool-result`.
 */
export declare function fromAISDK(input: ProviderJson, options?: ConvertOptions): History;
/**
 * Converts a History (either shape) to AI SDK messages: plain JSON objects, typed as `Message`
 * when asked (`toAISDK<ModelMessage>(history)` with `ai`).
 */
export declare function toAISDK(history: History): JsonObject[];
export declare function toAISDK<Message extends object>(history: History): Message[];
