import { type JsonObject } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { type ConvertOptions, type ProviderJson } from "./common.js";
/**
 * Converts an Anthropic Messages request (`system` and `messages`; other keys are the caller's and
 * are not read), or a bare `messages` array, to a History.
 */
export declare function fromAnthropic(input: ProviderJson, options?: ConvertOptions): History;
/**
 * Converts a History (either shape) to `{system?, messages}`: plain JSON, typed as `Conversation`
 * when asked (`toAnthropic<Pick<MessageCreateParams, "system" | "messages">>(history)` with the
 * Anthropic SDK).
 */
export declare function toAnthropic(history: History): JsonObject;
export declare function toAnthropic<Conversation extends object>(history: History): Conversation;
