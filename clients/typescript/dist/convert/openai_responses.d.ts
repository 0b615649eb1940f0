import { type JsonObject } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions, type ProviderJson } from "./common.js";
/**
 * Converts Responses input items (or a request object holding them as `input`) to a History: one
 * row per item, except that consecutive `function_call` items (parallel calls) are one assistant row.
 */
export declare function fromOpenAIResponses(input: ProviderJson, options?: ConvertOptions): History;
/**
 * Converts a History (either shape) to Responses input items: plain JSON objects, typed as `Item`
 * when asked (`toOpenAIResponses<ResponseInputItem>(history)` with the openai SDK).
 */
export declare function toOpenAIResponses(history: History): JsonObject[];
export declare function toOpenAIResponses<Item extends object>(history: History): Item[];
