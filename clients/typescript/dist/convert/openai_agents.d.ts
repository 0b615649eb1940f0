import { type JsonObject } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions, type ProviderJson } from "./common.js";
/**
 * Converts Agents SDK items (`AgentInputItem[]`, or `{ input }` as a `callModelInputFilter` gets
 * it) to a History: one row per item, consecutive `function_call` items (parallel calls) one
 * assistant row, and every item type turnkeeper has no row for an opaque assistant row.
 */
export declare function fromOpenAIAgents(input: ProviderJson, options?: ConvertOptions): History;
/**
 * Converts a History (either shape) to Agents SDK items: plain JSON objects, typed as `Item` when
 * asked (`toOpenAIAgents<AgentInputItem>(history)` with @openai/agents).
 */
export declare function toOpenAIAgents(history: History): JsonObject[];
export declare function toOpenAIAgents<Item extends object>(history: History): Item[];
