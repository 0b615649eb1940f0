import { type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions } from "./common.js";
/** Converts Chat Completions `messages` (or a request object holding them) to a History. */
export declare function fromOpenAI(messages: JsonValue, options?: ConvertOptions): History;
/** Converts a History (either shape) to Chat Completions `messages`. */
export declare function toOpenAI(history: History): JsonObject[];
