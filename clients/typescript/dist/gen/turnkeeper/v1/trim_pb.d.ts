import type { GenEnum, GenFile, GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { Capacity, Route } from "./resolution_pb.js";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file turnkeeper/v1/trim.proto.
 */
export declare const file_turnkeeper_v1_trim: GenFile;
/**
 * ReportedUsage is what the provider reported for the previous request, next to what turnkeeper estimated for it.
 *
 * @generated from message turnkeeper.v1.ReportedUsage
 */
export type ReportedUsage = Message<"turnkeeper.v1.ReportedUsage"> & {
    /**
     * The input tokens the provider reported for the previous request (`reported`).
     *
     * @generated from field: uint64 reported_input_tokens = 1;
     */
    reportedInputTokens: bigint;
    /**
     * turnkeeper's estimate of that same request, tool schemas included (`estimated`), such as the
     * `total_tokens - reserved_output_tokens` of its CapacityReport.
     *
     * @generated from field: uint64 estimated_input_tokens = 2;
     */
    estimatedInputTokens: bigint;
    /**
     * The part of `estimated_input_tokens` spent on tool schemas (`tool_schema`); at most `estimated_input_tokens`.
     *
     * @generated from field: uint64 tool_schema_tokens = 3;
     */
    toolSchemaTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.ReportedUsage.
 * Use `create(ReportedUsageSchema)` to create a new message.
 */
export declare const ReportedUsageSchema: GenMessage<ReportedUsage>;
/**
 * UsageCalibration shows the estimate-space steps of a reported-usage trim (spec §10.3 steps 2 to 4, as amended by
 * spec §16.2). It is present whenever the budget is positive and both counts are; the trim of step 4 may then keep
 * the history unchanged.
 *
 * @generated from message turnkeeper.v1.UsageCalibration
 */
export type UsageCalibration = Message<"turnkeeper.v1.UsageCalibration"> & {
    /**
     * Step 2: max(1, floor(budget x estimated / reported)), in exact integer arithmetic, saturated at 2^64-1.
     *
     * @generated from field: uint64 calibrated_target_tokens = 1;
     */
    calibratedTargetTokens: bigint;
    /**
     * Step 3: max(1, calibrated target - tool_schema); the token-budget trim of step 4 aims for it. In PrepareModelCall
     * it is at most `capacity - extras` (spec §12).
     *
     * @generated from field: uint64 history_target_tokens = 2;
     */
    historyTargetTokens: bigint;
    /**
     * Step 4: the estimate of the history after the trim (the history as given when it was kept), breadcrumb included
     * (`kept`).
     *
     * @generated from field: uint64 kept_estimate_tokens = 3;
     */
    keptEstimateTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.UsageCalibration.
 * Use `create(UsageCalibrationSchema)` to create a new message.
 */
export declare const UsageCalibrationSchema: GenMessage<UsageCalibration>;
/**
 * CallerContext identifies who asked, so events can be attributed and filtered. All fields are optional.
 * Each id is at most 256 bytes of UTF-8; a longer one is refused with INVALID_ARGUMENT
 * (ERROR_REASON_INVALID_CALLER). Ids may hold any character: logs escape control characters.
 *
 * @generated from message turnkeeper.v1.CallerContext
 */
export type CallerContext = Message<"turnkeeper.v1.CallerContext"> & {
    /**
     * The agent session the history belongs to.
     *
     * @generated from field: string session_id = 1;
     */
    sessionId: string;
    /**
     * The runtime instance that sent the request.
     *
     * @generated from field: string runtime_id = 2;
     */
    runtimeId: string;
    /**
     * The agent within the runtime.
     *
     * @generated from field: string agent_id = 3;
     */
    agentId: string;
    /**
     * The user turn being served.
     *
     * @generated from field: string turn_id = 4;
     */
    turnId: string;
};
/**
 * Describes the message turnkeeper.v1.CallerContext.
 * Use `create(CallerContextSchema)` to create a new message.
 */
export declare const CallerContextSchema: GenMessage<CallerContext>;
/**
 * IndexRange is a half-open range [start, end) of row indices.
 *
 * @generated from message turnkeeper.v1.IndexRange
 */
export type IndexRange = Message<"turnkeeper.v1.IndexRange"> & {
    /**
     * The first index in the range.
     *
     * @generated from field: uint32 start = 1;
     */
    start: number;
    /**
     * One past the last index in the range; equal to `start` when the range is empty.
     *
     * @generated from field: uint32 end = 2;
     */
    end: number;
};
/**
 * Describes the message turnkeeper.v1.IndexRange.
 * Use `create(IndexRangeSchema)` to create a new message.
 */
export declare const IndexRangeSchema: GenMessage<IndexRange>;
/**
 * HistoryTrimmed reports one trim that dropped older turns. It is returned to the caller and published on TrimEvents.
 *
 * @generated from message turnkeeper.v1.HistoryTrimmed
 */
export type HistoryTrimmed = Message<"turnkeeper.v1.HistoryTrimmed"> & {
    /**
     * Which limit caused the trim.
     *
     * @generated from field: turnkeeper.v1.TrimReason reason = 1;
     */
    reason: TrimReason;
    /**
     * True when the trim was the reactive recovery after a provider overflow.
     *
     * @generated from field: bool overflow_recovery = 2;
     */
    overflowRecovery: boolean;
    /**
     * The number of input rows dropped.
     *
     * @generated from field: uint32 dropped_messages = 3;
     */
    droppedMessages: number;
    /**
     * The number of complete user turns dropped.
     *
     * @generated from field: uint32 dropped_turns = 4;
     */
    droppedTurns: number;
    /**
     * The number of complete user turns retained.
     *
     * @generated from field: uint32 kept_turns = 5;
     */
    keptTurns: number;
    /**
     * The history before the trim, in tokens: the estimate, or the provider-reported count (see `count_source`).
     *
     * @generated from field: uint64 tokens_before = 6;
     */
    tokensBefore: bigint;
    /**
     * The history after the trim, breadcrumb included, in tokens: the estimate, or scaled to the provider's count.
     *
     * @generated from field: uint64 tokens_after = 7;
     */
    tokensAfter: bigint;
    /**
     * The token target the trim aimed for: the budget (reported-usage trims included), or the recovery target;
     * 0 for turn-limit trims. PrepareModelCall's budget trim aims at min(budget, capacity - extras) (spec §12).
     *
     * @generated from field: uint64 target_tokens = 8;
     */
    targetTokens: bigint;
    /**
     * The resolved proactive budget in tokens, when profiles were supplied; 0 otherwise or when disabled.
     *
     * @generated from field: uint64 budget_tokens = 9;
     */
    budgetTokens: bigint;
    /**
     * The turn limit applied, for turn-limit trims; 0 otherwise.
     *
     * @generated from field: uint32 turn_limit = 10;
     */
    turnLimit: number;
    /**
     * The capacity of the route's model, when profiles were supplied.
     *
     * @generated from field: turnkeeper.v1.Capacity capacity = 11;
     */
    capacity?: Capacity | undefined;
    /**
     * The effective route, when profiles were supplied.
     *
     * @generated from field: turnkeeper.v1.Route route = 12;
     */
    route?: Route | undefined;
    /**
     * The caller identifiers supplied with the request.
     *
     * @generated from field: turnkeeper.v1.CallerContext caller = 13;
     */
    caller?: CallerContext | undefined;
    /**
     * True when a breadcrumb row was inserted.
     *
     * @generated from field: bool breadcrumb_inserted = 14;
     */
    breadcrumbInserted: boolean;
    /**
     * Where `tokens_before` and `tokens_after` come from: the estimate, or provider-reported usage (spec §10.3).
     *
     * @generated from field: turnkeeper.v1.CountSource count_source = 15;
     */
    countSource: CountSource;
    /**
     * The estimate-space steps, for reported-usage trims; absent otherwise.
     *
     * @generated from field: turnkeeper.v1.UsageCalibration calibration = 16;
     */
    calibration?: UsageCalibration | undefined;
    /**
     * The step of the low-water grid cut, as `TrimOutcome.cut_step` (spec §11.2); 0 for the minimal cut.
     *
     * @generated from field: uint64 cut_step = 17;
     */
    cutStep: bigint;
    /**
     * The drop the grid cut rounded up to, as `TrimOutcome.cut_drop_target` (spec §11.2); 0 for the minimal cut.
     *
     * @generated from field: uint64 cut_drop_target = 18;
     */
    cutDropTarget: bigint;
    /**
     * The tool context the same preparation collapsed before this trim (spec §13.3); absent for TrimHistory and when
     * nothing was collapsed. The trim's counts are of the history it was given: the projection.
     *
     * @generated from field: turnkeeper.v1.ToolContextCollapse collapse = 19;
     */
    collapse?: ToolContextCollapse | undefined;
    /**
     * The tool results cleared, for a `TRIM_REASON_TOOL_RESULTS_CLEARED` trim (spec §13.4); absent otherwise.
     *
     * @generated from field: turnkeeper.v1.ToolResultClearing clearing = 20;
     */
    clearing?: ToolResultClearing | undefined;
};
/**
 * Describes the message turnkeeper.v1.HistoryTrimmed.
 * Use `create(HistoryTrimmedSchema)` to create a new message.
 */
export declare const HistoryTrimmedSchema: GenMessage<HistoryTrimmed>;
/**
 * ToolContextCollapse is what the projection of a prepared request left out (spec §13.1, §13.3).
 *
 * @generated from message turnkeeper.v1.ToolContextCollapse
 */
export type ToolContextCollapse = Message<"turnkeeper.v1.ToolContextCollapse"> & {
    /**
     * The turns sent as their prompt, one tool-exchange summary and their closing reply.
     *
     * @generated from field: uint32 collapsed_turns = 1;
     */
    collapsedTurns: number;
    /**
     * The rows left out: every drained row of a collapsed turn (each summary stands in place of some of them).
     *
     * @generated from field: uint32 rows_left_out = 2;
     */
    rowsLeftOut: number;
    /**
     * The estimate of the turn-limited history minus that of its projection, in tokens; 0 when the projection
     * estimates no less (a summary can cost more than a short exchange it stands for).
     *
     * @generated from field: uint64 saved_tokens = 3;
     */
    savedTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.ToolContextCollapse.
 * Use `create(ToolContextCollapseSchema)` to create a new message.
 */
export declare const ToolContextCollapseSchema: GenMessage<ToolContextCollapse>;
/**
 * ToolResultClearing is what clearing the running turn's oldest tool results did (spec §13.4).
 *
 * @generated from message turnkeeper.v1.ToolResultClearing
 */
export type ToolResultClearing = Message<"turnkeeper.v1.ToolResultClearing"> & {
    /**
     * The tool results cleared (each result of a ToolResults row counts alone).
     *
     * @generated from field: uint32 results_cleared = 1;
     */
    resultsCleared: number;
    /**
     * The estimate before the clearing minus the estimate after it, in tokens.
     *
     * @generated from field: uint64 saved_tokens = 2;
     */
    savedTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.ToolResultClearing.
 * Use `create(ToolResultClearingSchema)` to create a new message.
 */
export declare const ToolResultClearingSchema: GenMessage<ToolResultClearing>;
/**
 * RecoveryReport says what an overflow recovery did, and when it could not trim, why (spec §10.1).
 * It is returned whenever recovery was asked for, so a failed recovery is never a silent `trimmed = false`.
 *
 * @generated from message turnkeeper.v1.RecoveryReport
 */
export type RecoveryReport = Message<"turnkeeper.v1.RecoveryReport"> & {
    /**
     * True when the recovery dropped turns from the baseline history, making it smaller.
     *
     * @generated from field: bool trimmed = 1;
     */
    trimmed: boolean;
    /**
     * Why nothing could be trimmed; unset when `trimmed` is true.
     *
     * @generated from field: turnkeeper.v1.RecoveryBlocker blocker = 2;
     */
    blocker: RecoveryBlocker;
    /**
     * The estimate of the baseline: the history given (TrimHistory), or the history PrepareModelCall would have
     * prepared without recovery (after the sweep, the turn limit and the budget trim), in tokens.
     *
     * @generated from field: uint64 baseline_tokens = 3;
     */
    baselineTokens: bigint;
    /**
     * floor(2 x baseline_tokens / 3).
     *
     * @generated from field: uint64 target_tokens = 4;
     */
    targetTokens: bigint;
    /**
     * The estimate of the recovered history, breadcrumb included, in tokens.
     *
     * @generated from field: uint64 tokens_after = 5;
     */
    tokensAfter: bigint;
    /**
     * True when `tokens_after` is at most `target_tokens`.
     *
     * @generated from field: bool target_reached = 6;
     */
    targetReached: boolean;
    /**
     * The number of complete user turns in the recovered history.
     *
     * @generated from field: uint32 kept_turns = 7;
     */
    keptTurns: number;
    /**
     * The estimate of the leading system rows, which no trim removes (the "system floor"), in tokens.
     *
     * @generated from field: uint64 system_floor_tokens = 8;
     */
    systemFloorTokens: bigint;
    /**
     * The proactive budget the floor is compared with: the resolved budget, or the explicit `budget_tokens`;
     * 0 when none was given or trimming is disabled.
     *
     * @generated from field: uint64 budget_tokens = 9;
     */
    budgetTokens: bigint;
    /**
     * True when `budget_tokens` is positive and the system floor alone is at least that budget.
     *
     * @generated from field: bool system_floor_reaches_budget = 10;
     */
    systemFloorReachesBudget: boolean;
    /**
     * The resolved route, when profiles were supplied.
     *
     * @generated from field: turnkeeper.v1.Route route = 11;
     */
    route?: Route | undefined;
};
/**
 * Describes the message turnkeeper.v1.RecoveryReport.
 * Use `create(RecoveryReportSchema)` to create a new message.
 */
export declare const RecoveryReportSchema: GenMessage<RecoveryReport>;
/**
 * ContextMeter is how full the prepared request makes the resolved route's context (spec §10.5).
 *
 * @generated from message turnkeeper.v1.ContextMeter
 */
export type ContextMeter = Message<"turnkeeper.v1.ContextMeter"> & {
    /**
     * The tokens the prepared request sends: messages, hook texts and tool schemas (reserved output excluded).
     * Saturates at 2^64-1.
     *
     * @generated from field: uint64 used_tokens = 1;
     */
    usedTokens: bigint;
    /**
     * The resolved proactive budget in tokens; 0 when proactive trimming is disabled.
     *
     * @generated from field: uint64 budget_tokens = 2;
     */
    budgetTokens: bigint;
    /**
     * The model's context window, only when it is known for the route; absent when unknown (never the fallback).
     *
     * @generated from field: optional uint64 capacity_tokens = 3;
     */
    capacityTokens?: bigint | undefined;
    /**
     * used_tokens / capacity_tokens as an IEEE-754 double, only when the capacity is known.
     *
     * @generated from field: optional double capacity_fraction = 4;
     */
    capacityFraction?: number | undefined;
};
/**
 * Describes the message turnkeeper.v1.ContextMeter.
 * Use `create(ContextMeterSchema)` to create a new message.
 */
export declare const ContextMeterSchema: GenMessage<ContextMeter>;
/**
 * InputCostEstimate is the estimated price of the prepared request's input on the resolved route (spec §10.5).
 *
 * @generated from message turnkeeper.v1.InputCostEstimate
 */
export type InputCostEstimate = Message<"turnkeeper.v1.InputCostEstimate"> & {
    /**
     * ((uncached_input_tokens - cache_write_tokens) x input price + cached_input_tokens x cached price
     * + cache_write_tokens x write price) / 1,000,000, in IEEE-754 doubles (spec §10.5, §14).
     *
     * @generated from field: double cost = 1;
     */
    cost: number;
    /**
     * The currency of the route's prices, as the provider profile declares it.
     *
     * @generated from field: string currency = 2;
     */
    currency: string;
    /**
     * The input tokens priced at the input price: the meter's `used_tokens` minus `cached_input_tokens`.
     *
     * @generated from field: uint64 uncached_input_tokens = 3;
     */
    uncachedInputTokens: bigint;
    /**
     * The input tokens priced at the cached price: the request's `cached_input_tokens`, at most `used_tokens`.
     *
     * @generated from field: uint64 cached_input_tokens = 4;
     */
    cachedInputTokens: bigint;
    /**
     * The input tokens priced at the cache-write price (spec §14): the request's `cache_write_tokens`, at most the
     * uncached input tokens; included in `uncached_input_tokens`.
     *
     * @generated from field: uint64 cache_write_tokens = 5;
     */
    cacheWriteTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.InputCostEstimate.
 * Use `create(InputCostEstimateSchema)` to create a new message.
 */
export declare const InputCostEstimateSchema: GenMessage<InputCostEstimate>;
/**
 * MessageEstimate is the token estimate of one input row, with its parts visible.
 *
 * @generated from message turnkeeper.v1.MessageEstimate
 */
export type MessageEstimate = Message<"turnkeeper.v1.MessageEstimate"> & {
    /**
     * The number of provider rows this input row stands for (a ToolResults row stands for one per result).
     *
     * @generated from field: uint32 provider_rows = 1;
     */
    providerRows: number;
    /**
     * The UTF-8 bytes counted as text, after removing image markers that are sent.
     *
     * @generated from field: uint64 text_bytes = 2;
     */
    textBytes: bigint;
    /**
     * ceil(text_bytes / 4), summed per provider row.
     *
     * @generated from field: uint64 text_tokens = 3;
     */
    textTokens: bigint;
    /**
     * 4 framing tokens per provider row.
     *
     * @generated from field: uint64 framing_tokens = 4;
     */
    framingTokens: bigint;
    /**
     * The number of images sent with this row.
     *
     * @generated from field: uint32 images = 5;
     */
    images: number;
    /**
     * 1,600 tokens per image sent.
     *
     * @generated from field: uint64 image_tokens = 6;
     */
    imageTokens: bigint;
    /**
     * text_tokens + framing_tokens + image_tokens.
     *
     * @generated from field: uint64 total_tokens = 7;
     */
    totalTokens: bigint;
    /**
     * True when this row starts a turn.
     *
     * @generated from field: bool turn_boundary = 8;
     */
    turnBoundary: boolean;
};
/**
 * Describes the message turnkeeper.v1.MessageEstimate.
 * Use `create(MessageEstimateSchema)` to create a new message.
 */
export declare const MessageEstimateSchema: GenMessage<MessageEstimate>;
/**
 * OrphanRemoval is one thing the orphan sweep removed.
 *
 * @generated from message turnkeeper.v1.OrphanRemoval
 */
export type OrphanRemoval = Message<"turnkeeper.v1.OrphanRemoval"> & {
    /**
     * Why it was removed.
     *
     * @generated from field: turnkeeper.v1.OrphanKind kind = 1;
     */
    kind: OrphanKind;
    /**
     * The index of the input row it was removed from.
     *
     * @generated from field: uint32 message_index = 2;
     */
    messageIndex: number;
    /**
     * The tool call identifier involved.
     *
     * @generated from field: string tool_call_id = 3;
     */
    toolCallId: string;
    /**
     * True when the whole row was removed; false when only the call or result was removed from a row that remains.
     *
     * @generated from field: bool row_removed = 4;
     */
    rowRemoved: boolean;
};
/**
 * Describes the message turnkeeper.v1.OrphanRemoval.
 * Use `create(OrphanRemovalSchema)` to create a new message.
 */
export declare const OrphanRemovalSchema: GenMessage<OrphanRemoval>;
/**
 * CapacityReport is the pre-flight breakdown of a prepared request against the model's capacity.
 *
 * @generated from message turnkeeper.v1.CapacityReport
 */
export type CapacityReport = Message<"turnkeeper.v1.CapacityReport"> & {
    /**
     * The estimate of the prepared messages, images included.
     *
     * @generated from field: uint64 message_tokens = 1;
     */
    messageTokens: bigint;
    /**
     * The part of `message_tokens` spent on images.
     *
     * @generated from field: uint64 image_tokens = 2;
     */
    imageTokens: bigint;
    /**
     * The hook-injected texts, each priced like a row.
     *
     * @generated from field: uint64 hook_tokens = 3;
     */
    hookTokens: bigint;
    /**
     * The tool schemas (JSON text), each priced like a row.
     *
     * @generated from field: uint64 tool_schema_tokens = 4;
     */
    toolSchemaTokens: bigint;
    /**
     * The output tokens the caller reserved.
     *
     * @generated from field: uint64 reserved_output_tokens = 5;
     */
    reservedOutputTokens: bigint;
    /**
     * The sum of the parts above, saturated at 2^64-1; `fits` is decided on the exact sum.
     *
     * @generated from field: uint64 total_tokens = 6;
     */
    totalTokens: bigint;
    /**
     * The capacity the total is checked against.
     *
     * @generated from field: turnkeeper.v1.Capacity capacity = 7;
     */
    capacity?: Capacity | undefined;
    /**
     * True when `total_tokens` is at most `capacity.safety_tokens`.
     *
     * @generated from field: bool fits = 8;
     */
    fits: boolean;
};
/**
 * Describes the message turnkeeper.v1.CapacityReport.
 * Use `create(CapacityReportSchema)` to create a new message.
 */
export declare const CapacityReportSchema: GenMessage<CapacityReport>;
/**
 * CappedToolResult is one tool result after the `max_tool_result_chars` cap.
 *
 * @generated from message turnkeeper.v1.CappedToolResult
 */
export type CappedToolResult = Message<"turnkeeper.v1.CappedToolResult"> & {
    /**
     * The result text, unchanged when within the cap.
     *
     * @generated from field: string content = 1;
     */
    content: string;
    /**
     * The number of characters (code points) removed; 0 when unchanged.
     *
     * @generated from field: uint64 truncated_chars = 2;
     */
    truncatedChars: bigint;
};
/**
 * Describes the message turnkeeper.v1.CappedToolResult.
 * Use `create(CappedToolResultSchema)` to create a new message.
 */
export declare const CappedToolResultSchema: GenMessage<CappedToolResult>;
/**
 * TrimReason says which limit caused older turns to be dropped.
 *
 * @generated from enum turnkeeper.v1.TrimReason
 */
export declare enum TrimReason {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: TRIM_REASON_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * The estimated history exceeded the token budget (proactive), or the provider reported an overflow (reactive).
     *
     * @generated from enum value: TRIM_REASON_TOKEN_BUDGET = 1;
     */
    TOKEN_BUDGET = 1,
    /**
     * The history held more complete user turns than the turn limit.
     *
     * @generated from enum value: TRIM_REASON_TURN_LIMIT = 2;
     */
    TURN_LIMIT = 2,
    /**
     * The running turn alone exceeded the target, and its oldest tool results were cleared (spec §13.4). No turn was
     * dropped; `clearing` says how many results and tokens.
     *
     * @generated from enum value: TRIM_REASON_TOOL_RESULTS_CLEARED = 3;
     */
    TOOL_RESULTS_CLEARED = 3
}
/**
 * Describes the enum turnkeeper.v1.TrimReason.
 */
export declare const TrimReasonSchema: GenEnum<TrimReason>;
/**
 * TrimMode selects the trimming operation of a TrimHistory call.
 *
 * @generated from enum turnkeeper.v1.TrimMode
 */
export declare enum TrimMode {
    /**
     * Not set; rejected with INVALID_ARGUMENT.
     *
     * @generated from enum value: TRIM_MODE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * Drop the oldest whole turns until the estimate fits the token budget.
     *
     * @generated from enum value: TRIM_MODE_TOKEN_BUDGET = 1;
     */
    TOKEN_BUDGET = 1,
    /**
     * Keep the newest `max(limit, 1)` complete user turns.
     *
     * @generated from enum value: TRIM_MODE_TURN_COUNT = 2;
     */
    TURN_COUNT = 2,
    /**
     * Reactive recovery after a provider overflow: token-budget trim to floor(2/3 of the estimate of the history given).
     * The response carries a RecoveryReport, also when nothing could be trimmed (spec §10.1).
     *
     * @generated from enum value: TRIM_MODE_OVERFLOW_RECOVERY = 3;
     */
    OVERFLOW_RECOVERY = 3,
    /**
     * Keep the leading system rows and the newest N other rows (the channel sender cache; 0 means 50).
     *
     * @generated from enum value: TRIM_MODE_ROW_COUNT = 4;
     */
    ROW_COUNT = 4,
    /**
     * Token-budget trim calibrated by the provider-reported input tokens of the previous request (spec §10.3).
     * Requires `reported_usage`; counts in the outcome and the event are provider-reported.
     *
     * @generated from enum value: TRIM_MODE_REPORTED_USAGE = 5;
     */
    REPORTED_USAGE = 5
}
/**
 * Describes the enum turnkeeper.v1.TrimMode.
 */
export declare const TrimModeSchema: GenEnum<TrimMode>;
/**
 * CountSource says where the token counts of a trim come from.
 *
 * @generated from enum turnkeeper.v1.CountSource
 */
export declare enum CountSource {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: COUNT_SOURCE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * The counts are turnkeeper's estimate (spec §4, §9).
     *
     * @generated from enum value: COUNT_SOURCE_ESTIMATE = 1;
     */
    ESTIMATE = 1,
    /**
     * `tokens_before` and `tokens_after` are the history's estimates scaled by the provider-reported input count (spec
     * §10.3 step 5, as amended by spec §16.2).
     *
     * @generated from enum value: COUNT_SOURCE_PROVIDER_REPORTED = 2;
     */
    PROVIDER_REPORTED = 2
}
/**
 * Describes the enum turnkeeper.v1.CountSource.
 */
export declare const CountSourceSchema: GenEnum<CountSource>;
/**
 * CallerPath says which runtime path a trim serves; it decides the breadcrumb and the event.
 *
 * @generated from enum turnkeeper.v1.CallerPath
 */
export declare enum CallerPath {
    /**
     * Not set; treated as CALLER_PATH_AGENT.
     *
     * @generated from enum value: CALLER_PATH_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * The structured agent and its tool loop: trims that drop turns insert a breadcrumb and emit HistoryTrimmed.
     * Serves TRIM_MODE_TOKEN_BUDGET, TRIM_MODE_TURN_COUNT and TRIM_MODE_OVERFLOW_RECOVERY.
     *
     * @generated from enum value: CALLER_PATH_AGENT = 1;
     */
    AGENT = 1,
    /**
     * The legacy agent loop: count-based trimming is only logged, with no breadcrumb and no event.
     * Serves TRIM_MODE_TURN_COUNT only.
     *
     * @generated from enum value: CALLER_PATH_LEGACY_LOOP = 2;
     */
    LEGACY_LOOP = 2,
    /**
     * The channel sender cache: a row cap with no breadcrumb and no event. Serves TRIM_MODE_ROW_COUNT only.
     *
     * @generated from enum value: CALLER_PATH_CHANNEL_SENDER_CACHE = 3;
     */
    CHANNEL_SENDER_CACHE = 3
}
/**
 * Describes the enum turnkeeper.v1.CallerPath.
 */
export declare const CallerPathSchema: GenEnum<CallerPath>;
/**
 * RecoveryBlocker says why an overflow recovery could not trim.
 *
 * @generated from enum turnkeeper.v1.RecoveryBlocker
 */
export declare enum RecoveryBlocker {
    /**
     * Not set: the recovery trimmed.
     *
     * @generated from enum value: RECOVERY_BLOCKER_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * Fewer than two complete turns remain, and the newest turn is always kept (spec §2, §10.1).
     *
     * @generated from enum value: RECOVERY_BLOCKER_SINGLE_TURN = 1;
     */
    SINGLE_TURN = 1,
    /**
     * Dropping the older turns would save less than the breadcrumb it inserts costs, so the request would not
     * shrink; the baseline is returned as it is (spec §10.1: recovery never grows the request).
     *
     * @generated from enum value: RECOVERY_BLOCKER_NO_SAVING = 2;
     */
    NO_SAVING = 2
}
/**
 * Describes the enum turnkeeper.v1.RecoveryBlocker.
 */
export declare const RecoveryBlockerSchema: GenEnum<RecoveryBlocker>;
/**
 * OrphanKind says why the orphan sweep removed something.
 *
 * @generated from enum turnkeeper.v1.OrphanKind
 */
export declare enum OrphanKind {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: ORPHAN_KIND_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * A tool result whose call is not in the nearest assistant row above it, reached through a contiguous run of
     * assistant and tool rows (spec §10.2).
     *
     * @generated from enum value: ORPHAN_KIND_TOOL_RESULT_WITHOUT_CALL = 1;
     */
    TOOL_RESULT_WITHOUT_CALL = 1,
    /**
     * An assistant tool call with no result in the run of tool rows right after its row, and no `[Tool results]`
     * carrier later in its turn (spec §10.2).
     *
     * @generated from enum value: ORPHAN_KIND_TOOL_CALL_WITHOUT_RESULT = 2;
     */
    TOOL_CALL_WITHOUT_RESULT = 2
}
/**
 * Describes the enum turnkeeper.v1.OrphanKind.
 */
export declare const OrphanKindSchema: GenEnum<OrphanKind>;
