import { type JsonObject } from "@bufbuild/protobuf";
import { type History } from "../gen/turnkeeper/v1/history_pb.js";
import { CacheLifetime } from "../gen/turnkeeper/v1/profile_pb.js";
import { type ConvertOptions, type ProviderJson } from "./common.js";
/** The `cache_control` breakpoints a Messages request may carry (spec §14). */
export declare const MAX_CACHE_MARKS = 4;
/** What {@link toAnthropic} takes besides the history. */
export interface AnthropicExportOptions {
    /**
     * A PrepareModelCallResponse's `cacheBreakpoints` (indices into the prepared history, which is the
     * history exported): each row's last block gets `cache_control` (spec §14).
     */
    cacheBreakpoints?: readonly number[];
    /** The route's `ProviderProfile.cacheLifetime`: the marks' `ttl` when declared. */
    cacheLifetime?: CacheLifetime;
}
/**
 * Converts an Anthropic Messages request (`system` and `messages`; other keys are the caller's and
 * are not read), or a bare `messages` array, to a History.
 */
export declare function fromAnthropic(input: ProviderJson, options?: ConvertOptions): History;
/**
 * Converts a History (either shape) to `{system?, messages}`: plain JSON, typed as `Conversation`
 * when asked (`toAnthropic<Pick<MessageCreateParams, "system" | "messages">>(history)` with the
 * Anthropic SDK).
 *
 * `options.cacheBreakpoints` puts `cache_control` (`{type: "ephemeral"}`, with the `ttl` of
 * `options.cacheLifetime` when declared) on the last block of each breakpoint row; never more than
 * four marks counting those the rows already carry: past four, the candidates of spec §14 are left
 * out in the order 2, 1, 3 (docs/converters.md).
 */
export declare function toAnthropic(history: History, options?: AnthropicExportOptions): JsonObject;
export declare function toAnthropic<Conversation extends object>(history: History, options?: AnthropicExportOptions): Conversation;
