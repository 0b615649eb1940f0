import { type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions } from "./common.js";
/** Converts Responses input items (or a request object holding them as `input`) to a History: one row per item. */
export declare function fromOpenAIResponses(items: JsonValue, options?: ConvertOptions): History;
/** Converts a History (either shape) to Responses input items. */
export declare function toOpenAIResponses(history: History): JsonObject[];
