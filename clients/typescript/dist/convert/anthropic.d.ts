import { type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions } from "./common.js";
/**
 * Converts an Anthropic Messages request (`system` and `messages`; other keys are the caller's and
 * are not read), or a bare `messages` array, to a History.
 */
export declare function fromAnthropic(request: JsonValue, options?: ConvertOptions): History;
/** Converts a History (either shape) to `{system?, messages}`. */
export declare function toAnthropic(history: History): JsonObject;
