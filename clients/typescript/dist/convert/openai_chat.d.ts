import { type JsonObject } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions, type ProviderJson } from "./common.js";
/** Converts Chat Completions `messages` (or a request object holding them) to a History. */
export declare function fromOpenAI(input: ProviderJson, options?: ConvertOptions): History;
/**
 * Converts a History (either shape) to Chat Completions `messages`: plain JSON objects, typed as
 * `Message` when asked (`toOpenAI<ChatCompletionMessageParam>(history)` with the openai SDK).
 */
export declare function toOpenAI(history: History): JsonObject[];
export declare function toOpenAI<Message extends object>(history: History): Message[];
