import type { GenEnum, GenFile, GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file turnkeeper/v1/resolution.proto.
 */
export declare const file_turnkeeper_v1_resolution: GenFile;
/**
 * Route is the effective provider/model route of a call.
 *
 * @generated from message turnkeeper.v1.Route
 */
export type Route = Message<"turnkeeper.v1.Route"> & {
    /**
     * The provider alias; empty when no provider was selected.
     *
     * @generated from field: string provider = 1;
     */
    provider: string;
    /**
     * The model; empty when neither the route nor the provider profile names one.
     *
     * @generated from field: string model = 2;
     */
    model: string;
    /**
     * Which input selected this route.
     *
     * @generated from field: turnkeeper.v1.RouteSource source = 3;
     */
    source: RouteSource;
};
/**
 * Describes the message turnkeeper.v1.Route.
 * Use `create(RouteSchema)` to create a new message.
 */
export declare const RouteSchema: GenMessage<Route>;
/**
 * BudgetStep is one step of budget resolution that set or changed the budget.
 *
 * @generated from message turnkeeper.v1.BudgetStep
 */
export type BudgetStep = Message<"turnkeeper.v1.BudgetStep"> & {
    /**
     * The rule applied at this step.
     *
     * @generated from field: turnkeeper.v1.BudgetRule rule = 1;
     */
    rule: BudgetRule;
    /**
     * The budget after this step, in tokens.
     *
     * @generated from field: uint64 budget_tokens = 2;
     */
    budgetTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.BudgetStep.
 * Use `create(BudgetStepSchema)` to create a new message.
 */
export declare const BudgetStepSchema: GenMessage<BudgetStep>;
/**
 * Capacity is the selected model's context capacity.
 *
 * @generated from message turnkeeper.v1.Capacity
 */
export type Capacity = Message<"turnkeeper.v1.Capacity"> & {
    /**
     * Whether the selected model's context window is configured for this route.
     *
     * @generated from field: bool known = 1;
     */
    known: boolean;
    /**
     * The capacity used for safety arithmetic: the configured window when known, otherwise a positive
     * `max_context_tokens`, otherwise 32,000. When `known` is false this is not the model's capacity and must
     * not be shown as one (spec §3 Route, §10.5).
     *
     * @generated from field: uint64 safety_tokens = 2;
     */
    safetyTokens: bigint;
    /**
     * The window reported to wire clients. Absent when the capacity is unknown.
     *
     * @generated from field: optional uint64 model_context_window = 3;
     */
    modelContextWindow?: bigint | undefined;
};
/**
 * Describes the message turnkeeper.v1.Capacity.
 * Use `create(CapacitySchema)` to create a new message.
 */
export declare const CapacitySchema: GenMessage<Capacity>;
/**
 * Resolution is the (route, capacity, budget, turn limit) tuple that every decision of one call uses.
 *
 * @generated from message turnkeeper.v1.Resolution
 */
export type Resolution = Message<"turnkeeper.v1.Resolution"> & {
    /**
     * The effective provider/model route.
     *
     * @generated from field: turnkeeper.v1.Route route = 1;
     */
    route?: Route | undefined;
    /**
     * The capacity of the route's model.
     *
     * @generated from field: turnkeeper.v1.Capacity capacity = 2;
     */
    capacity?: Capacity | undefined;
    /**
     * The effective proactive trimming budget in tokens; 0 means proactive trimming is disabled.
     *
     * @generated from field: uint64 budget_tokens = 3;
     */
    budgetTokens: bigint;
    /**
     * The rule that decided the final budget.
     *
     * @generated from field: turnkeeper.v1.BudgetRule budget_rule = 4;
     */
    budgetRule: BudgetRule;
    /**
     * Every step that set or changed the budget, in order, so an operator can see why.
     *
     * @generated from field: repeated turnkeeper.v1.BudgetStep budget_steps = 5;
     */
    budgetSteps: BudgetStep[];
    /**
     * The resolved turn limit in complete user turns.
     *
     * @generated from field: uint32 max_history_turns = 6;
     */
    maxHistoryTurns: number;
    /**
     * True when `context_compact_ratio` was set to a value outside (0.0, 1.0], NaN and infinities included,
     * and was therefore treated as unset (spec §3.3, §10.7).
     *
     * @generated from field: bool ratio_ignored = 7;
     */
    ratioIgnored: boolean;
    /**
     * The low-water fraction in effect for this route's trims (spec §11): 1.0 (the minimal cut) when unset or ignored.
     *
     * @generated from field: double history_trim_low_water = 8;
     */
    historyTrimLowWater: number;
    /**
     * True when `history_trim_low_water` was set to a value outside (0.0, 1.0], NaN and infinities included,
     * and was therefore treated as unset (spec §11.1).
     *
     * @generated from field: bool low_water_ignored = 9;
     */
    lowWaterIgnored: boolean;
    /**
     * The K in effect for this route's prepared requests (spec §13.1): `keep_tool_context_turns`, 2 when unset.
     *
     * @generated from field: uint32 keep_tool_context_turns = 10;
     */
    keepToolContextTurns: number;
    /**
     * The R in effect (spec §13.4); absent when the running turn is kept whole.
     *
     * @generated from field: optional uint32 keep_running_turn_tool_results = 11;
     */
    keepRunningTurnToolResults?: number | undefined;
    /**
     * The route model's minimum cacheable prefix in tokens (spec §14); absent when its provider profile declares none.
     *
     * @generated from field: optional uint64 min_cacheable_tokens = 12;
     */
    minCacheableTokens?: bigint | undefined;
};
/**
 * Describes the message turnkeeper.v1.Resolution.
 * Use `create(ResolutionSchema)` to create a new message.
 */
export declare const ResolutionSchema: GenMessage<Resolution>;
/**
 * RouteSource says which input selected the effective route.
 *
 * @generated from enum turnkeeper.v1.RouteSource
 */
export declare enum RouteSource {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: ROUTE_SOURCE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * The runtime profile's default route.
     *
     * @generated from enum value: ROUTE_SOURCE_DEFAULT = 1;
     */
    DEFAULT = 1,
    /**
     * A classifier hint that matched a classifier route.
     *
     * @generated from enum value: ROUTE_SOURCE_CLASSIFIER_HINT = 2;
     */
    CLASSIFIER_HINT = 2,
    /**
     * An explicit session switch.
     *
     * @generated from enum value: ROUTE_SOURCE_SESSION_SWITCH = 3;
     */
    SESSION_SWITCH = 3
}
/**
 * Describes the enum turnkeeper.v1.RouteSource.
 */
export declare const RouteSourceSchema: GenEnum<RouteSource>;
/**
 * BudgetRule names one step of budget resolution.
 *
 * @generated from enum turnkeeper.v1.BudgetRule
 */
export declare enum BudgetRule {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: BUDGET_RULE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * `max_context_tokens` is explicitly 0: proactive trimming is disabled.
     *
     * @generated from enum value: BUDGET_RULE_DISABLED = 1;
     */
    DISABLED = 1,
    /**
     * Neither `max_context_tokens` nor a valid ratio is set: the historical 32,000 budget.
     *
     * @generated from enum value: BUDGET_RULE_LEGACY_DEFAULT = 2;
     */
    LEGACY_DEFAULT = 2,
    /**
     * `max_context_tokens` set the budget, or capped the ratio-derived budget.
     *
     * @generated from enum value: BUDGET_RULE_MAX_CONTEXT_TOKENS = 3;
     */
    MAX_CONTEXT_TOKENS = 3,
    /**
     * The model window times `context_compact_ratio`, floored, at least 1.
     *
     * @generated from enum value: BUDGET_RULE_CONTEXT_COMPACT_RATIO = 4;
     */
    CONTEXT_COMPACT_RATIO = 4,
    /**
     * `history_pruning.max_tokens` lowered the budget.
     *
     * @generated from enum value: BUDGET_RULE_HISTORY_PRUNING = 5;
     */
    HISTORY_PRUNING = 5,
    /**
     * The selected model's configured context window capped the budget.
     *
     * @generated from enum value: BUDGET_RULE_MODEL_CAPACITY = 6;
     */
    MODEL_CAPACITY = 6
}
/**
 * Describes the enum turnkeeper.v1.BudgetRule.
 */
export declare const BudgetRuleSchema: GenEnum<BudgetRule>;
