import type { MessageInitShape } from "@bufbuild/protobuf";
import type { CallOptions } from "@connectrpc/connect";
import type { TurnkeeperClient } from "../client.js";
import type { History } from "../gen/turnkeeper/v1/history_pb.js";
import type { PrepareModelCallResponse } from "../gen/turnkeeper/v1/history_service_pb.js";
import type { ProfilesSchema } from "../gen/turnkeeper/v1/profile_pb.js";
/** The options every adapter takes: what `prepareModelCall` needs beyond the history. */
export interface AdapterOptions<Args> {
    /** The budget and routes (spec §6); unset is the server's defaults. */
    profiles?: MessageInitShape<typeof ProfilesSchema>;
    /** The session the trims are published under (TrimEvents), fixed or read from the framework's call. */
    sessionId?: string | ((args: Args) => string | undefined);
    /** The rest of the caller context (runtime, agent, turn ids). */
    caller?: {
        runtimeId?: string;
        agentId?: string;
        turnId?: string;
    };
    /** Output tokens reserved for the reply in the capacity pre-flight. */
    reservedOutputTokens?: bigint;
    /** Asked after each preparation, with the framework's call and turnkeeper's response (meters, trims). */
    onPrepared?: (response: PrepareModelCallResponse, args: Args) => void;
    /** Connect call options for each `prepareModelCall` (deadline, signal, headers). */
    callOptions?: CallOptions;
}
/** Sends one model call's history, with the texts and tool schemas that go beside it, through `prepareModelCall`. */
export declare function prepareHistory<Args>(client: TurnkeeperClient, options: AdapterOptions<Args>, args: Args, history: History, beside: {
    hookTexts: string[];
    toolSchemas: string[];
}): Promise<History>;
/**
 * The prepared items with the framework's own objects in place of every item that came back
 * unchanged (in order: the kept items are a subsequence of the originals, plus the breadcrumb and
 * items the orphan sweep changed, which are the converter's plain JSON).
 */
export declare function withOriginals<T>(prepared: readonly unknown[], originals: readonly T[], asJson: (item: T) => unknown): T[];
