import type { GenEnum, GenFile, GenMessage, GenService } from "@bufbuild/protobuf/codegenv2";
import type { Duration } from "@bufbuild/protobuf/wkt";
import type { Gap, Heartbeat, MeterUpdate, TrimEvent } from "./events_pb.js";
import type { History } from "./history_pb.js";
import type { Profiles, RouteSelection } from "./profile_pb.js";
import type { Resolution } from "./resolution_pb.js";
import type { CallerContext, CallerPath, CapacityReport, CappedToolResult, ContextMeter, CountSource, HistoryTrimmed, IndexRange, InputCostEstimate, MessageEstimate, OrphanRemoval, RecoveryReport, ReportedUsage, ToolContextCollapse, ToolResultClearing, TrimMode, TrimReason, UsageCalibration } from "./trim_pb.js";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file turnkeeper/v1/history_service.proto.
 */
export declare const file_turnkeeper_v1_history_service: GenFile;
/**
 * EstimateTokensRequest asks for the token estimate of a history.
 *
 * @generated from message turnkeeper.v1.EstimateTokensRequest
 */
export type EstimateTokensRequest = Message<"turnkeeper.v1.EstimateTokensRequest"> & {
    /**
     * The history to price.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
};
/**
 * Describes the message turnkeeper.v1.EstimateTokensRequest.
 * Use `create(EstimateTokensRequestSchema)` to create a new message.
 */
export declare const EstimateTokensRequestSchema: GenMessage<EstimateTokensRequest>;
/**
 * EstimateTokensResponse is the estimate of a history, total and per row.
 *
 * @generated from message turnkeeper.v1.EstimateTokensResponse
 */
export type EstimateTokensResponse = Message<"turnkeeper.v1.EstimateTokensResponse"> & {
    /**
     * The estimate of the whole history in tokens.
     *
     * @generated from field: uint64 total_tokens = 1;
     */
    totalTokens: bigint;
    /**
     * The estimate of each input row, in input order.
     *
     * @generated from field: repeated turnkeeper.v1.MessageEstimate messages = 2;
     */
    messages: MessageEstimate[];
    /**
     * The number of complete user turns in the history.
     *
     * @generated from field: uint32 turns = 3;
     */
    turns: number;
    /**
     * The part of `total_tokens` spent on images.
     *
     * @generated from field: uint64 image_tokens = 4;
     */
    imageTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.EstimateTokensResponse.
 * Use `create(EstimateTokensResponseSchema)` to create a new message.
 */
export declare const EstimateTokensResponseSchema: GenMessage<EstimateTokensResponse>;
/**
 * ResolveBudgetRequest asks for the resolution of a route, its capacity and its budget.
 *
 * @generated from message turnkeeper.v1.ResolveBudgetRequest
 */
export type ResolveBudgetRequest = Message<"turnkeeper.v1.ResolveBudgetRequest"> & {
    /**
     * The profiles and the route selection to resolve.
     *
     * @generated from field: turnkeeper.v1.Profiles profiles = 1;
     */
    profiles?: Profiles | undefined;
};
/**
 * Describes the message turnkeeper.v1.ResolveBudgetRequest.
 * Use `create(ResolveBudgetRequestSchema)` to create a new message.
 */
export declare const ResolveBudgetRequestSchema: GenMessage<ResolveBudgetRequest>;
/**
 * ResolveBudgetResponse is the resolved route, capacity, budget and turn limit.
 *
 * @generated from message turnkeeper.v1.ResolveBudgetResponse
 */
export type ResolveBudgetResponse = Message<"turnkeeper.v1.ResolveBudgetResponse"> & {
    /**
     * The resolution.
     *
     * @generated from field: turnkeeper.v1.Resolution resolution = 1;
     */
    resolution?: Resolution | undefined;
};
/**
 * Describes the message turnkeeper.v1.ResolveBudgetResponse.
 * Use `create(ResolveBudgetResponseSchema)` to create a new message.
 */
export declare const ResolveBudgetResponseSchema: GenMessage<ResolveBudgetResponse>;
/**
 * ExplicitLimits gives the limits of a trim directly, instead of resolving them from profiles.
 *
 * @generated from message turnkeeper.v1.ExplicitLimits
 */
export type ExplicitLimits = Message<"turnkeeper.v1.ExplicitLimits"> & {
    /**
     * The token budget for TRIM_MODE_TOKEN_BUDGET, where it is required. 0 disables trimming.
     *
     * @generated from field: optional uint64 budget_tokens = 1;
     */
    budgetTokens?: bigint | undefined;
    /**
     * The turn limit for TRIM_MODE_TURN_COUNT (unset means 50, 0 keeps the newest turn),
     * or the row limit for TRIM_MODE_ROW_COUNT (unset or 0 means 50).
     *
     * @generated from field: optional uint32 max_history_messages = 2;
     */
    maxHistoryMessages?: number | undefined;
    /**
     * The breadcrumb text; empty means the default text.
     *
     * @generated from field: string breadcrumb_text = 3;
     */
    breadcrumbText: string;
    /**
     * The low-water fraction of the cache-stable cut, as `RuntimeProfile.history_trim_low_water` (spec §11).
     * Unset, or outside (0.0, 1.0], means the minimal cut.
     *
     * @generated from field: optional double history_trim_low_water = 4;
     */
    historyTrimLowWater?: number | undefined;
    /**
     * K, as `RuntimeProfile.keep_tool_context_turns` (spec §13.1). TrimHistory never collapses: only the resolution
     * reports it.
     *
     * @generated from field: optional uint32 keep_tool_context_turns = 5;
     */
    keepToolContextTurns?: number | undefined;
    /**
     * R, as `RuntimeProfile.keep_running_turn_tool_results` (spec §13.4); TrimHistory never clears.
     *
     * @generated from field: optional uint32 keep_running_turn_tool_results = 6;
     */
    keepRunningTurnToolResults?: number | undefined;
};
/**
 * Describes the message turnkeeper.v1.ExplicitLimits.
 * Use `create(ExplicitLimitsSchema)` to create a new message.
 */
export declare const ExplicitLimitsSchema: GenMessage<ExplicitLimits>;
/**
 * TrimHistoryRequest asks for one trimming operation on a history.
 *
 * @generated from message turnkeeper.v1.TrimHistoryRequest
 */
export type TrimHistoryRequest = Message<"turnkeeper.v1.TrimHistoryRequest"> & {
    /**
     * The history to trim, in either shape.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
    /**
     * The trimming operation. Required.
     *
     * @generated from field: turnkeeper.v1.TrimMode mode = 2;
     */
    mode: TrimMode;
    /**
     * The runtime path the trim serves; it decides the breadcrumb and the event.
     *
     * @generated from field: turnkeeper.v1.CallerPath caller_path = 3;
     */
    callerPath: CallerPath;
    /**
     * Where the limits come from. Unset means profiles with every setting at its default.
     *
     * @generated from oneof turnkeeper.v1.TrimHistoryRequest.limits
     */
    limits: {
        /**
         * Limits given directly.
         *
         * @generated from field: turnkeeper.v1.ExplicitLimits explicit_limits = 4;
         */
        value: ExplicitLimits;
        case: "explicitLimits";
    } | {
        /**
         * Profiles and a route selection to resolve the limits from.
         *
         * @generated from field: turnkeeper.v1.Profiles profiles = 5;
         */
        value: Profiles;
        case: "profiles";
    } | {
        case: undefined;
        value?: undefined;
    };
    /**
     * Who asked; copied into the HistoryTrimmed event.
     *
     * @generated from field: turnkeeper.v1.CallerContext caller = 6;
     */
    caller?: CallerContext | undefined;
    /**
     * The previous request's provider-reported usage. Required with TRIM_MODE_REPORTED_USAGE, rejected otherwise.
     *
     * @generated from field: turnkeeper.v1.ReportedUsage reported_usage = 7;
     */
    reportedUsage?: ReportedUsage | undefined;
};
/**
 * Describes the message turnkeeper.v1.TrimHistoryRequest.
 * Use `create(TrimHistoryRequestSchema)` to create a new message.
 */
export declare const TrimHistoryRequestSchema: GenMessage<TrimHistoryRequest>;
/**
 * TrimOutcome is what a trim did, reported on every path.
 *
 * @generated from message turnkeeper.v1.TrimOutcome
 */
export type TrimOutcome = Message<"turnkeeper.v1.TrimOutcome"> & {
    /**
     * True when rows were dropped.
     *
     * @generated from field: bool trimmed = 1;
     */
    trimmed: boolean;
    /**
     * The number of input rows dropped.
     *
     * @generated from field: uint32 dropped_messages = 2;
     */
    droppedMessages: number;
    /**
     * The number of complete user turns dropped; 0 for row-count trims.
     *
     * @generated from field: uint32 dropped_turns = 3;
     */
    droppedTurns: number;
    /**
     * The number of complete user turns in the output.
     *
     * @generated from field: uint32 kept_turns = 4;
     */
    keptTurns: number;
    /**
     * The estimate of the input history in tokens.
     *
     * @generated from field: uint64 tokens_before = 5;
     */
    tokensBefore: bigint;
    /**
     * The estimate of the output history in tokens.
     *
     * @generated from field: uint64 tokens_after = 6;
     */
    tokensAfter: bigint;
    /**
     * The token target used: the budget (reported-usage trims included), or the recovery target; 0 for count-based trims.
     *
     * @generated from field: uint64 target_tokens = 7;
     */
    targetTokens: bigint;
    /**
     * The input rows dropped, as a half-open index range from the first to one past the last; absent when nothing was
     * dropped. Pinned turns inside it are kept (`kept_in_dropped_range`), and a breadcrumb inside it is moved.
     *
     * @generated from field: turnkeeper.v1.IndexRange dropped_range = 8;
     */
    droppedRange?: IndexRange | undefined;
    /**
     * The output index of the inserted breadcrumb; absent when none was inserted.
     *
     * @generated from field: optional uint32 breadcrumb_index = 9;
     */
    breadcrumbIndex?: number | undefined;
    /**
     * Where `tokens_before` and `tokens_after` come from: the estimate, or provider-reported usage (spec §10.3).
     * A reported-usage trim that changes nothing reports `tokens_before = tokens_after = reported`.
     *
     * @generated from field: turnkeeper.v1.CountSource count_source = 10;
     */
    countSource: CountSource;
    /**
     * The estimate-space steps of a reported-usage trim that ran them; absent otherwise.
     *
     * @generated from field: turnkeeper.v1.UsageCalibration calibration = 11;
     */
    calibration?: UsageCalibration | undefined;
    /**
     * The step of the low-water grid cut (spec §11.1): tokens for a token-budget trim, turns for a turn-count trim.
     * 0 when the minimal cut of spec §9 was used (a low water of 1.0, a trim that dropped nothing, or a mode the
     * grid does not apply to).
     *
     * @generated from field: uint64 cut_step = 12;
     */
    cutStep: bigint;
    /**
     * What the grid cut rounded the minimal drop up to: `ceil(D(j0) / step) x step` tokens for a token-budget trim,
     * `ceil(j0 / step) x step` turns for a turn-count trim (spec §11.2). 0 when `cut_step` is 0. When no turn
     * boundary reaches it, only the newest turn is kept and this is the target the cut fell short of.
     *
     * @generated from field: uint64 cut_drop_target = 13;
     */
    cutDropTarget: bigint;
    /**
     * The pinned turns in the output (spec §15.1): every trim keeps them.
     *
     * @generated from field: uint32 pinned_turns = 14;
     */
    pinnedTurns: number;
    /**
     * The estimate of the pinned turns in the output, in tokens.
     *
     * @generated from field: uint64 pinned_tokens = 15;
     */
    pinnedTokens: bigint;
    /**
     * The pinned turns inside `dropped_range` that the trim kept, as ascending input row ranges (spec §15.1): they
     * move ahead of the breadcrumb. Empty when nothing inside the range is pinned.
     *
     * @generated from field: repeated turnkeeper.v1.IndexRange kept_in_dropped_range = 16;
     */
    keptInDroppedRange: IndexRange[];
};
/**
 * Describes the message turnkeeper.v1.TrimOutcome.
 * Use `create(TrimOutcomeSchema)` to create a new message.
 */
export declare const TrimOutcomeSchema: GenMessage<TrimOutcome>;
/**
 * TrimHistoryResponse is the trimmed history and what the trim did.
 *
 * @generated from message turnkeeper.v1.TrimHistoryResponse
 */
export type TrimHistoryResponse = Message<"turnkeeper.v1.TrimHistoryResponse"> & {
    /**
     * The output history, in the shape of the input. Identical to the input when nothing was trimmed.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
    /**
     * What the trim did.
     *
     * @generated from field: turnkeeper.v1.TrimOutcome outcome = 2;
     */
    outcome?: TrimOutcome | undefined;
    /**
     * The HistoryTrimmed payload, set when the trim dropped turns on a path that emits events; it was also published on TrimEvents.
     *
     * @generated from field: turnkeeper.v1.HistoryTrimmed history_trimmed = 3;
     */
    historyTrimmed?: HistoryTrimmed | undefined;
    /**
     * The resolution used, when the limits came from profiles.
     *
     * @generated from field: turnkeeper.v1.Resolution resolution = 4;
     */
    resolution?: Resolution | undefined;
    /**
     * What the recovery did, for TRIM_MODE_OVERFLOW_RECOVERY; absent for other modes.
     *
     * @generated from field: turnkeeper.v1.RecoveryReport recovery = 5;
     */
    recovery?: RecoveryReport | undefined;
};
/**
 * Describes the message turnkeeper.v1.TrimHistoryResponse.
 * Use `create(TrimHistoryResponseSchema)` to create a new message.
 */
export declare const TrimHistoryResponseSchema: GenMessage<TrimHistoryResponse>;
/**
 * PrepareModelCallRequest asks for a history prepared for one provider call.
 *
 * @generated from message turnkeeper.v1.PrepareModelCallRequest
 */
export type PrepareModelCallRequest = Message<"turnkeeper.v1.PrepareModelCallRequest"> & {
    /**
     * The history as the runtime holds it.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
    /**
     * The profiles and route selection of this call.
     *
     * @generated from field: turnkeeper.v1.Profiles profiles = 2;
     */
    profiles?: Profiles | undefined;
    /**
     * Who asked; copied into HistoryTrimmed events.
     *
     * @generated from field: turnkeeper.v1.CallerContext caller = 3;
     */
    caller?: CallerContext | undefined;
    /**
     * True when the provider just reported a context-window overflow: trim to floor(2/3 of the estimate of the history
     * this call would have prepared without recovery), that is of the request the provider rejected (spec §10.1).
     * Pass the same history as on the call that overflowed (the full history, or the prepared one that was sent).
     *
     * @generated from field: bool overflow_recovery = 4;
     */
    overflowRecovery: boolean;
    /**
     * Texts that hooks inject into the request, each priced like a row.
     *
     * @generated from field: repeated string hook_texts = 5;
     */
    hookTexts: string[];
    /**
     * The tool schemas sent with the request, as JSON text, each priced like a row.
     *
     * @generated from field: repeated string tool_schemas = 6;
     */
    toolSchemas: string[];
    /**
     * Output tokens to reserve within the capacity.
     *
     * @generated from field: uint64 reserved_output_tokens = 7;
     */
    reservedOutputTokens: bigint;
    /**
     * The previous request's provider-reported usage; when set, the token-budget step is the reported-usage trim of
     * spec §10.3 instead of the estimate-based one.
     *
     * @generated from field: turnkeeper.v1.ReportedUsage reported_usage = 8;
     */
    reportedUsage?: ReportedUsage | undefined;
    /**
     * The input tokens the runtime expects the provider to serve from its prompt cache (for example the cached count
     * of the previous response); priced at the cached price, at most the request's input tokens. Unset means 0.
     *
     * @generated from field: optional uint64 cached_input_tokens = 9;
     */
    cachedInputTokens?: bigint | undefined;
    /**
     * The input tokens the runtime's last request wrote to the provider's prompt cache (spec §14); priced at the
     * cache-write price, at most the request's uncached input tokens. Unset means 0.
     *
     * @generated from field: optional uint64 cache_write_tokens = 10;
     */
    cacheWriteTokens?: bigint | undefined;
};
/**
 * Describes the message turnkeeper.v1.PrepareModelCallRequest.
 * Use `create(PrepareModelCallRequestSchema)` to create a new message.
 */
export declare const PrepareModelCallRequestSchema: GenMessage<PrepareModelCallRequest>;
/**
 * PrepareModelCallResponse is the history to send and everything done to it.
 *
 * @generated from message turnkeeper.v1.PrepareModelCallResponse
 */
export type PrepareModelCallResponse = Message<"turnkeeper.v1.PrepareModelCallResponse"> & {
    /**
     * The prepared history, in the shape of the input.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
    /**
     * The resolution used.
     *
     * @generated from field: turnkeeper.v1.Resolution resolution = 2;
     */
    resolution?: Resolution | undefined;
    /**
     * What the orphan sweep removed, in input indices.
     *
     * @generated from field: repeated turnkeeper.v1.OrphanRemoval orphans_removed = 3;
     */
    orphansRemoved: OrphanRemoval[];
    /**
     * Each trim that dropped turns, in the order applied (turn limit, then token budget); each was published on TrimEvents.
     * With overflow recovery the token-budget entry is one trim from the turn-limited history to the recovery target
     * (`overflow_recovery` set), which drops exactly what the budget trim and then the recovery trim would; when the
     * recovery cannot trim (see `recovery.blocker`) it is the plain budget trim of the history that is sent.
     *
     * @generated from field: repeated turnkeeper.v1.HistoryTrimmed trims = 4;
     */
    trims: HistoryTrimmed[];
    /**
     * The capacity pre-flight of the prepared request.
     *
     * @generated from field: turnkeeper.v1.CapacityReport capacity_report = 5;
     */
    capacityReport?: CapacityReport | undefined;
    /**
     * The estimate of the input history in tokens.
     *
     * @generated from field: uint64 tokens_before = 6;
     */
    tokensBefore: bigint;
    /**
     * What the recovery did, when `overflow_recovery` was set; absent otherwise.
     *
     * @generated from field: turnkeeper.v1.RecoveryReport recovery = 7;
     */
    recovery?: RecoveryReport | undefined;
    /**
     * The context meter of the prepared request on the resolved route.
     *
     * @generated from field: turnkeeper.v1.ContextMeter context_meter = 8;
     */
    contextMeter?: ContextMeter | undefined;
    /**
     * The estimated input cost on the resolved route; absent when its provider profile declares no prices for the model.
     *
     * @generated from field: turnkeeper.v1.InputCostEstimate input_cost = 9;
     */
    inputCost?: InputCostEstimate | undefined;
    /**
     * What the projection collapsed (spec §13.1, §13.3); absent when nothing was collapsed.
     *
     * @generated from field: turnkeeper.v1.ToolContextCollapse collapse = 10;
     */
    collapse?: ToolContextCollapse | undefined;
    /**
     * Where the runtime should put cache breakpoints (spec §14): at most three increasing indices into `history`,
     * each the row after which a breakpoint belongs: the last leading system row, the last row of the newest
     * collapsed turn, the last row. A candidate not after the previous one, or whose prefix is below the route's
     * `min_cacheable_tokens`, is left out.
     *
     * @generated from field: repeated uint32 cache_breakpoints = 11;
     */
    cacheBreakpoints: number[];
    /**
     * The sorted indices, in the request's own history, of every row of every turn this preparation's trims dropped
     * (spec §13.2), so that a runtime that keeps its trimmed history applies the cut, never the projection.
     *
     * @generated from field: repeated uint32 dropped_input_rows = 12;
     */
    droppedInputRows: number[];
    /**
     * What clearing the running turn's oldest tool results did (spec §13.4); absent when nothing was cleared.
     *
     * @generated from field: turnkeeper.v1.ToolResultClearing clearing = 13;
     */
    clearing?: ToolResultClearing | undefined;
};
/**
 * Describes the message turnkeeper.v1.PrepareModelCallResponse.
 * Use `create(PrepareModelCallResponseSchema)` to create a new message.
 */
export declare const PrepareModelCallResponseSchema: GenMessage<PrepareModelCallResponse>;
/**
 * PlanCompactionRequest asks for a compaction plan. It carries what PrepareModelCallRequest carries, under the same
 * field names and numbers, plus the summarizer's route and the summary's budget.
 *
 * @generated from message turnkeeper.v1.PlanCompactionRequest
 */
export type PlanCompactionRequest = Message<"turnkeeper.v1.PlanCompactionRequest"> & {
    /**
     * The history as the runtime holds it.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
    /**
     * The profiles and route selection of the call the runtime is preparing.
     *
     * @generated from field: turnkeeper.v1.Profiles profiles = 2;
     */
    profiles?: Profiles | undefined;
    /**
     * Who asked; copied into the published compaction update.
     *
     * @generated from field: turnkeeper.v1.CallerContext caller = 3;
     */
    caller?: CallerContext | undefined;
    /**
     * Texts that hooks inject into the request, each priced like a row, as in the pre-flight.
     *
     * @generated from field: repeated string hook_texts = 5;
     */
    hookTexts: string[];
    /**
     * The tool schemas sent with the request, as JSON text, each priced like a row, as in the pre-flight.
     *
     * @generated from field: repeated string tool_schemas = 6;
     */
    toolSchemas: string[];
    /**
     * Output tokens the preparation reserves within the capacity (spec §12).
     *
     * @generated from field: uint64 reserved_output_tokens = 7;
     */
    reservedOutputTokens: bigint;
    /**
     * The previous request's provider-reported usage, as in PrepareModelCallRequest (spec §10.3).
     *
     * @generated from field: turnkeeper.v1.ReportedUsage reported_usage = 8;
     */
    reportedUsage?: ReportedUsage | undefined;
    /**
     * The route of the summary request; unset means the call's own route.
     *
     * @generated from field: turnkeeper.v1.RouteSelection summarizer_selection = 20;
     */
    summarizerSelection?: RouteSelection | undefined;
    /**
     * The output tokens to reserve for the summary. Unset means 2,000.
     *
     * @generated from field: optional uint64 summary_output_tokens = 21;
     */
    summaryOutputTokens?: bigint | undefined;
    /**
     * The instruction that ends the summary request; empty means `RuntimeProfile.summary_instruction`, or else the
     * spec's default text.
     *
     * @generated from field: string instruction = 22;
     */
    instruction: string;
    /**
     * The smallest saving a plan must bring, in tokens; a smaller one is refused with NO_SAVING. Unset means 0.
     *
     * @generated from field: uint64 min_saved_tokens = 23;
     */
    minSavedTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.PlanCompactionRequest.
 * Use `create(PlanCompactionRequestSchema)` to create a new message.
 */
export declare const PlanCompactionRequestSchema: GenMessage<PlanCompactionRequest>;
/**
 * CompactionRefusal is why there is no plan, with the sizes that decided it.
 *
 * @generated from message turnkeeper.v1.CompactionRefusal
 */
export type CompactionRefusal = Message<"turnkeeper.v1.CompactionRefusal"> & {
    /**
     * Why there is no plan.
     *
     * @generated from field: turnkeeper.v1.CompactionRefusalReason reason = 1;
     */
    reason: CompactionRefusalReason;
    /**
     * For TOO_LARGE: the smallest summary request's estimate, hook texts, tool schemas and reserved output included.
     *
     * @generated from field: uint64 request_tokens = 2;
     */
    requestTokens: bigint;
    /**
     * For TOO_LARGE: the summarizer route's capacity it was compared with (the known window or the safety window).
     *
     * @generated from field: uint64 capacity_tokens = 3;
     */
    capacityTokens: bigint;
    /**
     * For NO_SAVING: what the plan would have saved, in tokens (0 when it would save nothing).
     *
     * @generated from field: uint64 saved_tokens = 4;
     */
    savedTokens: bigint;
    /**
     * For NO_SAVING: the minimum the request asked for.
     *
     * @generated from field: uint64 min_saved_tokens = 5;
     */
    minSavedTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.CompactionRefusal.
 * Use `create(CompactionRefusalSchema)` to create a new message.
 */
export declare const CompactionRefusalSchema: GenMessage<CompactionRefusal>;
/**
 * CompactionPlan is what to condense and the request that condenses it (spec §15.3).
 *
 * @generated from message turnkeeper.v1.CompactionPlan
 */
export type CompactionPlan = Message<"turnkeeper.v1.CompactionPlan"> & {
    /**
     * The input rows condensed, as ascending half-open ranges of the request's own history: the old summary row and
     * every unpinned turn condensed, with the rows between them; pinned turns split the ranges.
     *
     * @generated from field: repeated turnkeeper.v1.IndexRange condensed_rows = 1;
     */
    condensedRows: IndexRange[];
    /**
     * The pinned turns that stand before the end of the condensed rows, as input row ranges in order: the applied
     * history keeps them, right after the new summary row.
     *
     * @generated from field: repeated turnkeeper.v1.IndexRange pinned_turns = 2;
     */
    pinnedTurns: IndexRange[];
    /**
     * The summary request: the fixed prefix, any breadcrumb as it stands, the turns as the preparation would project
     * them, through the last turn to condense, then one user row holding the instruction.
     *
     * @generated from field: turnkeeper.v1.History summary_request = 3;
     */
    summaryRequest?: History | undefined;
    /**
     * The output tokens reserved for the summary.
     *
     * @generated from field: uint64 summary_output_tokens = 4;
     */
    summaryOutputTokens: bigint;
    /**
     * The estimate of `summary_request` plus the hook texts and tool schemas, as the pre-flight prices them.
     *
     * @generated from field: uint64 summary_request_tokens = 5;
     */
    summaryRequestTokens: bigint;
    /**
     * The summarizer route's resolution: its route, capacity and budget.
     *
     * @generated from field: turnkeeper.v1.Resolution summarizer_resolution = 6;
     */
    summarizerResolution?: Resolution | undefined;
    /**
     * The estimate of the condensed rows as projected (the old summary included) minus `summary_output_tokens`; 0
     * when that is negative.
     *
     * @generated from field: uint64 saved_tokens = 7;
     */
    savedTokens: bigint;
    /**
     * The turns condensed (the old summary row is not a turn).
     *
     * @generated from field: uint32 condensed_turns = 8;
     */
    condensedTurns: number;
};
/**
 * Describes the message turnkeeper.v1.CompactionPlan.
 * Use `create(CompactionPlanSchema)` to create a new message.
 */
export declare const CompactionPlanSchema: GenMessage<CompactionPlan>;
/**
 * PlanCompactionResponse is a compaction plan, or why there is none.
 *
 * @generated from message turnkeeper.v1.PlanCompactionResponse
 */
export type PlanCompactionResponse = Message<"turnkeeper.v1.PlanCompactionResponse"> & {
    /**
     * The plan or the refusal. Exactly one is set.
     *
     * @generated from oneof turnkeeper.v1.PlanCompactionResponse.result
     */
    result: {
        /**
         * What to condense and the summary request.
         *
         * @generated from field: turnkeeper.v1.CompactionPlan plan = 1;
         */
        value: CompactionPlan;
        case: "plan";
    } | {
        /**
         * Why there is no plan.
         *
         * @generated from field: turnkeeper.v1.CompactionRefusal refusal = 2;
         */
        value: CompactionRefusal;
        case: "refusal";
    } | {
        case: undefined;
        value?: undefined;
    };
    /**
     * The resolution of the call's own route, which decided what the preparation would drop.
     *
     * @generated from field: turnkeeper.v1.Resolution resolution = 3;
     */
    resolution?: Resolution | undefined;
};
/**
 * Describes the message turnkeeper.v1.PlanCompactionResponse.
 * Use `create(PlanCompactionResponseSchema)` to create a new message.
 */
export declare const PlanCompactionResponseSchema: GenMessage<PlanCompactionResponse>;
/**
 * CheckCapacityRequest asks whether a prepared request fits the model's capacity.
 *
 * @generated from message turnkeeper.v1.CheckCapacityRequest
 */
export type CheckCapacityRequest = Message<"turnkeeper.v1.CheckCapacityRequest"> & {
    /**
     * The prepared history.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
    /**
     * The profiles and route selection that decide the capacity.
     *
     * @generated from field: turnkeeper.v1.Profiles profiles = 2;
     */
    profiles?: Profiles | undefined;
    /**
     * Texts that hooks inject into the request, each priced like a row.
     *
     * @generated from field: repeated string hook_texts = 3;
     */
    hookTexts: string[];
    /**
     * The tool schemas sent with the request, as JSON text, each priced like a row.
     *
     * @generated from field: repeated string tool_schemas = 4;
     */
    toolSchemas: string[];
    /**
     * Output tokens to reserve within the capacity.
     *
     * @generated from field: uint64 reserved_output_tokens = 5;
     */
    reservedOutputTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.CheckCapacityRequest.
 * Use `create(CheckCapacityRequestSchema)` to create a new message.
 */
export declare const CheckCapacityRequestSchema: GenMessage<CheckCapacityRequest>;
/**
 * CheckCapacityResponse is the breakdown of a request that fits.
 *
 * @generated from message turnkeeper.v1.CheckCapacityResponse
 */
export type CheckCapacityResponse = Message<"turnkeeper.v1.CheckCapacityResponse"> & {
    /**
     * The breakdown.
     *
     * @generated from field: turnkeeper.v1.CapacityReport report = 1;
     */
    report?: CapacityReport | undefined;
    /**
     * The resolution used.
     *
     * @generated from field: turnkeeper.v1.Resolution resolution = 2;
     */
    resolution?: Resolution | undefined;
};
/**
 * Describes the message turnkeeper.v1.CheckCapacityResponse.
 * Use `create(CheckCapacityResponseSchema)` to create a new message.
 */
export declare const CheckCapacityResponseSchema: GenMessage<CheckCapacityResponse>;
/**
 * SweepOrphansRequest asks for the orphan sweep of a history.
 *
 * @generated from message turnkeeper.v1.SweepOrphansRequest
 */
export type SweepOrphansRequest = Message<"turnkeeper.v1.SweepOrphansRequest"> & {
    /**
     * The history to sweep.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
};
/**
 * Describes the message turnkeeper.v1.SweepOrphansRequest.
 * Use `create(SweepOrphansRequestSchema)` to create a new message.
 */
export declare const SweepOrphansRequestSchema: GenMessage<SweepOrphansRequest>;
/**
 * SweepOrphansResponse is the swept history and what was removed.
 *
 * @generated from message turnkeeper.v1.SweepOrphansResponse
 */
export type SweepOrphansResponse = Message<"turnkeeper.v1.SweepOrphansResponse"> & {
    /**
     * The swept history, in the shape of the input. Identical to the input when nothing was removed.
     *
     * @generated from field: turnkeeper.v1.History history = 1;
     */
    history?: History | undefined;
    /**
     * What was removed, in input indices.
     *
     * @generated from field: repeated turnkeeper.v1.OrphanRemoval removals = 2;
     */
    removals: OrphanRemoval[];
};
/**
 * Describes the message turnkeeper.v1.SweepOrphansResponse.
 * Use `create(SweepOrphansResponseSchema)` to create a new message.
 */
export declare const SweepOrphansResponseSchema: GenMessage<SweepOrphansResponse>;
/**
 * CapToolResultsRequest asks for the tool-result cap on results being recorded.
 *
 * @generated from message turnkeeper.v1.CapToolResultsRequest
 */
export type CapToolResultsRequest = Message<"turnkeeper.v1.CapToolResultsRequest"> & {
    /**
     * The tool result texts.
     *
     * @generated from field: repeated string contents = 1;
     */
    contents: string[];
    /**
     * The cap in characters (code points); 0 disables it. Must be 0 when `profiles` is set.
     *
     * @generated from field: uint64 max_tool_result_chars = 2;
     */
    maxToolResultChars: bigint;
    /**
     * Profiles to resolve the cap from (`runtime.max_tool_result_chars`: unset means 50,000, 0 disables; spec §10.6).
     * Unset means the explicit `max_tool_result_chars` is the cap.
     *
     * @generated from field: turnkeeper.v1.Profiles profiles = 3;
     */
    profiles?: Profiles | undefined;
};
/**
 * Describes the message turnkeeper.v1.CapToolResultsRequest.
 * Use `create(CapToolResultsRequestSchema)` to create a new message.
 */
export declare const CapToolResultsRequestSchema: GenMessage<CapToolResultsRequest>;
/**
 * CapToolResultsResponse is the capped results, in request order.
 *
 * @generated from message turnkeeper.v1.CapToolResultsResponse
 */
export type CapToolResultsResponse = Message<"turnkeeper.v1.CapToolResultsResponse"> & {
    /**
     * One result per request content, in order.
     *
     * @generated from field: repeated turnkeeper.v1.CappedToolResult results = 1;
     */
    results: CappedToolResult[];
    /**
     * The cap applied, in characters; 0 when the cap is disabled.
     *
     * @generated from field: uint64 max_tool_result_chars = 2;
     */
    maxToolResultChars: bigint;
};
/**
 * Describes the message turnkeeper.v1.CapToolResultsResponse.
 * Use `create(CapToolResultsResponseSchema)` to create a new message.
 */
export declare const CapToolResultsResponseSchema: GenMessage<CapToolResultsResponse>;
/**
 * ClassifyProviderErrorRequest describes one error a provider returned.
 *
 * @generated from message turnkeeper.v1.ClassifyProviderErrorRequest
 */
export type ClassifyProviderErrorRequest = Message<"turnkeeper.v1.ClassifyProviderErrorRequest"> & {
    /**
     * The provider's error message (or response body) as received.
     *
     * @generated from field: string message = 1;
     */
    message: string;
    /**
     * The HTTP status of the failed response: in 100-599, or 0 when it is unknown (an error that came with no response,
     * as some SDKs report it). The decision of spec §10.4 rests on the message alone, so the status does not change it;
     * it is logged with the decision for operators.
     *
     * @generated from field: optional uint32 http_status = 2;
     */
    httpStatus?: number | undefined;
    /**
     * The provider alias the request went to, when known. Operator phrases scoped to this alias are tried too.
     *
     * @generated from field: string provider = 3;
     */
    provider: string;
};
/**
 * Describes the message turnkeeper.v1.ClassifyProviderErrorRequest.
 * Use `create(ClassifyProviderErrorRequestSchema)` to create a new message.
 */
export declare const ClassifyProviderErrorRequestSchema: GenMessage<ClassifyProviderErrorRequest>;
/**
 * ClassifyProviderErrorResponse is the overflow decision for one provider error.
 *
 * @generated from message turnkeeper.v1.ClassifyProviderErrorResponse
 */
export type ClassifyProviderErrorResponse = Message<"turnkeeper.v1.ClassifyProviderErrorResponse"> & {
    /**
     * True when the error is a context-window overflow: the message, lower-cased, contains a phrase.
     *
     * @generated from field: bool overflow = 1;
     */
    overflow: boolean;
    /**
     * The phrase that matched, lower-cased, as configured; empty when nothing matched. Built-in phrases are tried first,
     * in the order of spec §10.4, then operator phrases in configuration order.
     *
     * @generated from field: string matched_phrase = 2;
     */
    matchedPhrase: string;
    /**
     * Where the matched phrase comes from.
     *
     * @generated from field: turnkeeper.v1.PhraseSource phrase_source = 3;
     */
    phraseSource: PhraseSource;
};
/**
 * Describes the message turnkeeper.v1.ClassifyProviderErrorResponse.
 * Use `create(ClassifyProviderErrorResponseSchema)` to create a new message.
 */
export declare const ClassifyProviderErrorResponseSchema: GenMessage<ClassifyProviderErrorResponse>;
/**
 * TrimEventsRequest subscribes to the trim feed.
 *
 * @generated from message turnkeeper.v1.TrimEventsRequest
 */
export type TrimEventsRequest = Message<"turnkeeper.v1.TrimEventsRequest"> & {
    /**
     * Only events with one of these session ids; empty means every session. Each is at most 256 bytes
     * of UTF-8, as in CallerContext.
     *
     * @generated from field: repeated string session_ids = 1;
     */
    sessionIds: string[];
    /**
     * Only events with one of these runtime ids; empty means every runtime. Each is at most 256 bytes
     * of UTF-8, as in CallerContext.
     *
     * @generated from field: repeated string runtime_ids = 2;
     */
    runtimeIds: string[];
    /**
     * Only events with one of these reasons; empty means every reason.
     *
     * @generated from field: repeated turnkeeper.v1.TrimReason reasons = 3;
     */
    reasons: TrimReason[];
    /**
     * Resume after this cursor; empty means a live tail from now.
     *
     * @generated from field: string after_cursor = 4;
     */
    afterCursor: string;
    /**
     * How often to send a heartbeat while idle; unset means 15 seconds. Clamped to [1 s, 300 s].
     *
     * @generated from field: google.protobuf.Duration heartbeat_interval = 5;
     */
    heartbeatInterval?: Duration | undefined;
    /**
     * True to also receive a MeterUpdate for every successful PrepareModelCall (spec §10.5). The session and
     * runtime filters apply to meter updates; the reason filter does not (they have none).
     *
     * @generated from field: bool include_meter_updates = 6;
     */
    includeMeterUpdates: boolean;
    /**
     * The most events, gaps and meter updates one stream message may carry. Unset, 0 or 1 sends each item as its own
     * TrimEventsResponse, as subscribers that do not set it have always received. Above 1, whatever is ready for this
     * subscriber at once travels in one `batch` (up to this many items; it stops growing once it holds a mebibyte);
     * a single ready item still travels on its own. Values above 1000 mean 1000.
     *
     * @generated from field: uint32 max_batch_events = 7;
     */
    maxBatchEvents: number;
};
/**
 * Describes the message turnkeeper.v1.TrimEventsRequest.
 * Use `create(TrimEventsRequestSchema)` to create a new message.
 */
export declare const TrimEventsRequestSchema: GenMessage<TrimEventsRequest>;
/**
 * TrimEventsBatch is several consecutive items of the trim feed in one stream message.
 *
 * @generated from message turnkeeper.v1.TrimEventsBatch
 */
export type TrimEventsBatch = Message<"turnkeeper.v1.TrimEventsBatch"> & {
    /**
     * The items in stream order, exactly as they would have travelled one by one: each holds an event, a gap or a meter
     * update, never a heartbeat (heartbeats always travel alone) and never a batch. A gap's `before_cursor` names the
     * event that follows it, in this batch or in a later message.
     *
     * @generated from field: repeated turnkeeper.v1.TrimEventsResponse items = 1;
     */
    items: TrimEventsResponse[];
};
/**
 * Describes the message turnkeeper.v1.TrimEventsBatch.
 * Use `create(TrimEventsBatchSchema)` to create a new message.
 */
export declare const TrimEventsBatchSchema: GenMessage<TrimEventsBatch>;
/**
 * TrimEventsResponse is one item of the trim feed.
 *
 * @generated from message turnkeeper.v1.TrimEventsResponse
 */
export type TrimEventsResponse = Message<"turnkeeper.v1.TrimEventsResponse"> & {
    /**
     * The item. Exactly one is set.
     *
     * @generated from oneof turnkeeper.v1.TrimEventsResponse.item
     */
    item: {
        /**
         * A published trim.
         *
         * @generated from field: turnkeeper.v1.TrimEvent event = 1;
         */
        value: TrimEvent;
        case: "event";
    } | {
        /**
         * A heartbeat sent while idle.
         *
         * @generated from field: turnkeeper.v1.Heartbeat heartbeat = 2;
         */
        value: Heartbeat;
        case: "heartbeat";
    } | {
        /**
         * A notice that some events could not be delivered.
         *
         * @generated from field: turnkeeper.v1.Gap gap = 3;
         */
        value: Gap;
        case: "gap";
    } | {
        /**
         * The context meter of one prepared model call; only sent when `include_meter_updates` was set.
         *
         * @generated from field: turnkeeper.v1.MeterUpdate meter_update = 4;
         */
        value: MeterUpdate;
        case: "meterUpdate";
    } | {
        /**
         * Several items at once; only sent when `max_batch_events` was above 1.
         *
         * @generated from field: turnkeeper.v1.TrimEventsBatch batch = 5;
         */
        value: TrimEventsBatch;
        case: "batch";
    } | {
        case: undefined;
        value?: undefined;
    };
};
/**
 * Describes the message turnkeeper.v1.TrimEventsResponse.
 * Use `create(TrimEventsResponseSchema)` to create a new message.
 */
export declare const TrimEventsResponseSchema: GenMessage<TrimEventsResponse>;
/**
 * CompactionRefusalReason says why PlanCompaction returned no plan.
 *
 * @generated from enum turnkeeper.v1.CompactionRefusalReason
 */
export declare enum CompactionRefusalReason {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: COMPACTION_REFUSAL_REASON_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * No trim of the preparation drops a turn now, so there is nothing to condense.
     *
     * @generated from enum value: COMPACTION_REFUSAL_REASON_NOTHING_TO_CONDENSE = 1;
     */
    NOTHING_TO_CONDENSE = 1,
    /**
     * Not even the oldest turn to condense makes a summary request that fits the summarizer's route.
     *
     * @generated from enum value: COMPACTION_REFUSAL_REASON_TOO_LARGE = 2;
     */
    TOO_LARGE = 2,
    /**
     * The plan would save less than `min_saved_tokens`.
     *
     * @generated from enum value: COMPACTION_REFUSAL_REASON_NO_SAVING = 3;
     */
    NO_SAVING = 3
}
/**
 * Describes the enum turnkeeper.v1.CompactionRefusalReason.
 */
export declare const CompactionRefusalReasonSchema: GenEnum<CompactionRefusalReason>;
/**
 * PhraseSource says where a matched overflow phrase comes from.
 *
 * @generated from enum turnkeeper.v1.PhraseSource
 */
export declare enum PhraseSource {
    /**
     * Not set: nothing matched.
     *
     * @generated from enum value: PHRASE_SOURCE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * One of the phrases spec §10.4 lists.
     *
     * @generated from enum value: PHRASE_SOURCE_BUILT_IN = 1;
     */
    BUILT_IN = 1,
    /**
     * A phrase the operator configured on the server, for every provider or for the request's provider.
     *
     * @generated from enum value: PHRASE_SOURCE_OPERATOR = 2;
     */
    OPERATOR = 2
}
/**
 * Describes the enum turnkeeper.v1.PhraseSource.
 */
export declare const PhraseSourceSchema: GenEnum<PhraseSource>;
/**
 * HistoryService makes every history decision an agent runtime needs before it calls a model.
 * It is stateless: each call carries the history and the profiles it is about.
 * Errors carry a `google.rpc.ErrorInfo` (domain `turnkeeper.v1`, reason from ErrorReason) and,
 * for bad input, a `google.rpc.BadRequest` with one field violation per problem.
 *
 * @generated from service turnkeeper.v1.HistoryService
 */
export declare const HistoryService: GenService<{
    /**
     * EstimateTokens prices a history with the pinned heuristic: ceil(bytes / 4) + 4 per row, plus 1,600 per image sent.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.EstimateTokens
     */
    estimateTokens: {
        methodKind: "unary";
        input: typeof EstimateTokensRequestSchema;
        output: typeof EstimateTokensResponseSchema;
    };
    /**
     * ResolveBudget resolves the effective route, its capacity, the proactive token budget and the turn limit.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.ResolveBudget
     */
    resolveBudget: {
        methodKind: "unary";
        input: typeof ResolveBudgetRequestSchema;
        output: typeof ResolveBudgetResponseSchema;
    };
    /**
     * TrimHistory applies one trimming operation (token budget, turn count, overflow recovery, row cap or
     * reported-usage calibration) to a history.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.TrimHistory
     */
    trimHistory: {
        methodKind: "unary";
        input: typeof TrimHistoryRequestSchema;
        output: typeof TrimHistoryResponseSchema;
    };
    /**
     * PrepareModelCall does in one round trip what a runtime needs at every provider-call boundary:
     * resolve, orphan sweep, turn limit, token-budget trim (calibrated by reported usage when given), overflow recovery
     * when asked, breadcrumb, capacity pre-flight, context meter, input cost, events.
     * A request that does not fit the model's capacity fails with FAILED_PRECONDITION and a CapacityReport detail.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.PrepareModelCall
     */
    prepareModelCall: {
        methodKind: "unary";
        input: typeof PrepareModelCallRequestSchema;
        output: typeof PrepareModelCallResponseSchema;
    };
    /**
     * CheckCapacity runs the capacity pre-flight alone. A request that does not fit fails with FAILED_PRECONDITION
     * and a CapacityReport detail; this holds when proactive trimming is disabled and for final summary requests too.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.CheckCapacity
     */
    checkCapacity: {
        methodKind: "unary";
        input: typeof CheckCapacityRequestSchema;
        output: typeof CheckCapacityResponseSchema;
    };
    /**
     * SweepOrphans removes, by adjacency (spec §10.2), tool results that do not follow their call and tool calls
     * whose results do not follow them.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.SweepOrphans
     */
    sweepOrphans: {
        methodKind: "unary";
        input: typeof SweepOrphansRequestSchema;
        output: typeof SweepOrphansResponseSchema;
    };
    /**
     * CapToolResults applies the `max_tool_result_chars` cap, explicit or resolved from profiles, to tool results
     * as they are recorded.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.CapToolResults
     */
    capToolResults: {
        methodKind: "unary";
        input: typeof CapToolResultsRequestSchema;
        output: typeof CapToolResultsResponseSchema;
    };
    /**
     * ClassifyProviderError says whether a provider error is a context-window overflow (spec §10.4), the decision
     * that starts reactive recovery.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.ClassifyProviderError
     */
    classifyProviderError: {
        methodKind: "unary";
        input: typeof ClassifyProviderErrorRequestSchema;
        output: typeof ClassifyProviderErrorResponseSchema;
    };
    /**
     * PlanCompaction says what to condense instead of dropping it (spec §15.3): the turns the preparation's trims would
     * drop now, with the existing summary row, and a summary request that fits the summarizer's route. It never calls
     * a model: the runtime sends the request and applies the plan with the summarizer's answer. When there is no plan
     * the response says why (nothing to condense, too large, no saving); that is not an error.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.PlanCompaction
     */
    planCompaction: {
        methodKind: "unary";
        input: typeof PlanCompactionRequestSchema;
        output: typeof PlanCompactionResponseSchema;
    };
    /**
     * TrimEvents streams every HistoryTrimmed published by trims on event-emitting paths, with heartbeats and gap notices,
     * and, for subscribers that opt in, a context meter update per prepared model call.
     *
     * @generated from rpc turnkeeper.v1.HistoryService.TrimEvents
     */
    trimEvents: {
        methodKind: "server_streaming";
        input: typeof TrimEventsRequestSchema;
        output: typeof TrimEventsResponseSchema;
    };
}>;
