import type { GenEnum, GenFile, GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file turnkeeper/v1/profile.proto.
 */
export declare const file_turnkeeper_v1_profile: GenFile;
/**
 * HistoryPruning lets an operator trim earlier than the context budget alone would.
 *
 * @generated from message turnkeeper.v1.HistoryPruning
 */
export type HistoryPruning = Message<"turnkeeper.v1.HistoryPruning"> & {
    /**
     * Whether `max_tokens` takes part in budget resolution.
     *
     * @generated from field: bool enabled = 1;
     */
    enabled: boolean;
    /**
     * When enabled and positive, the budget is lowered to this value; it never raises the budget.
     *
     * @generated from field: uint64 max_tokens = 2;
     */
    maxTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.HistoryPruning.
 * Use `create(HistoryPruningSchema)` to create a new message.
 */
export declare const HistoryPruningSchema: GenMessage<HistoryPruning>;
/**
 * ClassifierRoute maps a classifier hint to the provider/model route that serves it.
 *
 * @generated from message turnkeeper.v1.ClassifierRoute
 */
export type ClassifierRoute = Message<"turnkeeper.v1.ClassifierRoute"> & {
    /**
     * The hint the runtime's classifier produces, matched exactly.
     *
     * @generated from field: string hint = 1;
     */
    hint: string;
    /**
     * The alias of the provider profile that serves the hint.
     *
     * @generated from field: string provider = 2;
     */
    provider: string;
    /**
     * The model to use on that provider; empty means the provider profile's configured model.
     *
     * @generated from field: string model = 3;
     */
    model: string;
};
/**
 * Describes the message turnkeeper.v1.ClassifierRoute.
 * Use `create(ClassifierRouteSchema)` to create a new message.
 */
export declare const ClassifierRouteSchema: GenMessage<ClassifierRoute>;
/**
 * RuntimeProfile is the agent runtime's history configuration.
 *
 * @generated from message turnkeeper.v1.RuntimeProfile
 */
export type RuntimeProfile = Message<"turnkeeper.v1.RuntimeProfile"> & {
    /**
     * The absolute token budget. Unset keeps the historical 32,000 default; an explicit 0 disables proactive trimming.
     *
     * @generated from field: optional uint64 max_context_tokens = 1;
     */
    maxContextTokens?: bigint | undefined;
    /**
     * A model-relative budget: the selected model's context window times this ratio.
     * Only values in (0.0, 1.0] take effect; any other value, NaN and infinities included, is treated as unset and
     * reported as `Resolution.ratio_ignored` (spec §3.3, §10.7).
     *
     * @generated from field: optional double context_compact_ratio = 2;
     */
    contextCompactRatio?: number | undefined;
    /**
     * An operator cap that lowers the budget.
     *
     * @generated from field: turnkeeper.v1.HistoryPruning history_pruning = 3;
     */
    historyPruning?: HistoryPruning | undefined;
    /**
     * The turn limit, in complete user turns (the legacy field name is kept). Unset means 50; an explicit 0 keeps only the newest turn.
     *
     * @generated from field: optional uint32 max_history_messages = 4;
     */
    maxHistoryMessages?: number | undefined;
    /**
     * The cap on one tool result, in characters (code points), applied when the result is recorded (spec §10.6).
     * Unset means the default of 50,000 characters; an explicit 0 disables the cap.
     *
     * @generated from field: optional uint64 max_tool_result_chars = 5;
     */
    maxToolResultChars?: bigint | undefined;
    /**
     * The alias of the provider profile that serves the default route.
     *
     * @generated from field: string default_provider = 6;
     */
    defaultProvider: string;
    /**
     * The model of the default route; empty means the default provider's configured model.
     *
     * @generated from field: string default_model = 7;
     */
    defaultModel: string;
    /**
     * Routes selected by classifier hints.
     *
     * @generated from field: repeated turnkeeper.v1.ClassifierRoute classifier_routes = 8;
     */
    classifierRoutes: ClassifierRoute[];
    /**
     * The text of the breadcrumb row inserted when trimming drops turns; empty means the default text.
     *
     * @generated from field: string breadcrumb_text = 9;
     */
    breadcrumbText: string;
    /**
     * The low-water fraction of the cache-stable cut (spec §11): with a value in (0.0, 1.0) every token-budget and
     * turn-count trim drops whole steps of `budget - floor(budget x L)` tokens (or `N - floor(N x L)` turns) counted
     * from the start of the history, so a session at its ceiling keeps its prompt-cache prefix for a step's growth.
     * Unset means 1.0, the minimal cut of spec §9; any value outside (0.0, 1.0], NaN and infinities included, is
     * treated as unset and reported as `Resolution.low_water_ignored`.
     *
     * @generated from field: optional double history_trim_low_water = 10;
     */
    historyTrimLowWater?: number | undefined;
    /**
     * K, the number of completed turns before the running one whose tool rows a prepared request still sends
     * (spec §13.1): the tool calls and results of every older turn are collapsed into one tool-exchange summary row,
     * keeping the turn's prompt and closing reply. Unset means 2; 0 keeps tool context for the running turn only; a
     * value larger than the number of turns collapses nothing. PrepareModelCall only: TrimHistory never collapses.
     *
     * @generated from field: optional uint32 keep_tool_context_turns = 11;
     */
    keepToolContextTurns?: number | undefined;
    /**
     * R, when the running turn alone exceeds the budget: the oldest tool results of the running turn are cleared, one
     * at a time, never the newest R, until the request fits (spec §13.4). Unset keeps the running turn whole.
     * PrepareModelCall only: TrimHistory never clears.
     *
     * @generated from field: optional uint32 keep_running_turn_tool_results = 12;
     */
    keepRunningTurnToolResults?: number | undefined;
    /**
     * The instruction PlanCompaction ends a summary request with (spec §15.3); empty means the spec's default text.
     *
     * @generated from field: string summary_instruction = 13;
     */
    summaryInstruction: string;
};
/**
 * Describes the message turnkeeper.v1.RuntimeProfile.
 * Use `create(RuntimeProfileSchema)` to create a new message.
 */
export declare const RuntimeProfileSchema: GenMessage<RuntimeProfile>;
/**
 * ProviderProfile describes one configured provider alias and the model it is configured for.
 *
 * @generated from message turnkeeper.v1.ProviderProfile
 */
export type ProviderProfile = Message<"turnkeeper.v1.ProviderProfile"> & {
    /**
     * The alias routes refer to. Aliases are unique within a request.
     *
     * @generated from field: string alias = 1;
     */
    alias: string;
    /**
     * The model this profile's metadata describes; empty means the metadata applies to any model on this alias.
     *
     * @generated from field: string model = 2;
     */
    model: string;
    /**
     * The context window of `model` in tokens. Unset means the capacity is unknown. When set it must be positive.
     *
     * @generated from field: optional uint64 context_window = 3;
     */
    contextWindow?: bigint | undefined;
    /**
     * What `model` costs per input token. Unset means no prices are declared and no cost is estimated (spec §10.5).
     * Like the context window, the prices apply only when `model` is empty or is the route's model.
     *
     * @generated from field: turnkeeper.v1.ModelPrices prices = 4;
     */
    prices?: ModelPrices | undefined;
    /**
     * The shortest prefix the provider caches for `model`, in tokens: a cache breakpoint whose prefix estimates
     * below it is left out (spec §14). Unset means no minimum. Applies under the rule of the context window.
     *
     * @generated from field: optional uint64 min_cacheable_tokens = 5;
     */
    minCacheableTokens?: bigint | undefined;
    /**
     * How long the provider keeps a prefix written to its cache, which client converters render on the breakpoint
     * rows they mark (spec §14). Unspecified means the provider's default and renders no lifetime.
     *
     * @generated from field: turnkeeper.v1.CacheLifetime cache_lifetime = 6;
     */
    cacheLifetime: CacheLifetime;
};
/**
 * Describes the message turnkeeper.v1.ProviderProfile.
 * Use `create(ProviderProfileSchema)` to create a new message.
 */
export declare const ProviderProfileSchema: GenMessage<ProviderProfile>;
/**
 * ModelPrices is what a provider charges for the input of one model.
 *
 * @generated from message turnkeeper.v1.ModelPrices
 */
export type ModelPrices = Message<"turnkeeper.v1.ModelPrices"> & {
    /**
     * The price of one million input tokens, in `currency`. Must be finite and not negative.
     *
     * @generated from field: double input_per_million_tokens = 1;
     */
    inputPerMillionTokens: number;
    /**
     * The price of one million input tokens served from the provider's prompt cache, in `currency`.
     * Unset means cached input costs the same as other input. When set it must be finite and not negative.
     *
     * @generated from field: optional double cached_input_per_million_tokens = 2;
     */
    cachedInputPerMillionTokens?: number | undefined;
    /**
     * The currency of the prices, such as `USD`; copied into the cost estimate. May be empty.
     *
     * @generated from field: string currency = 3;
     */
    currency: string;
    /**
     * The price of one million input tokens written to the provider's prompt cache, in `currency` (spec §14;
     * Anthropic bills 1.25x the input price for five minutes, 2x for an hour). Unset means writes cost the input
     * price. When set it must be finite and not negative.
     *
     * @generated from field: optional double cache_write_per_million_tokens = 4;
     */
    cacheWritePerMillionTokens?: number | undefined;
};
/**
 * Describes the message turnkeeper.v1.ModelPrices.
 * Use `create(ModelPricesSchema)` to create a new message.
 */
export declare const ModelPricesSchema: GenMessage<ModelPrices>;
/**
 * SessionSwitch is an explicit provider/model choice made for a session.
 *
 * @generated from message turnkeeper.v1.SessionSwitch
 */
export type SessionSwitch = Message<"turnkeeper.v1.SessionSwitch"> & {
    /**
     * The alias of the provider profile to use.
     *
     * @generated from field: string provider = 1;
     */
    provider: string;
    /**
     * The model to use; empty means the provider profile's configured model.
     *
     * @generated from field: string model = 2;
     */
    model: string;
};
/**
 * Describes the message turnkeeper.v1.SessionSwitch.
 * Use `create(SessionSwitchSchema)` to create a new message.
 */
export declare const SessionSwitchSchema: GenMessage<SessionSwitch>;
/**
 * RouteSelection carries the per-call inputs that choose the provider/model route.
 * An explicit session switch wins over a classifier hint, which wins over the profile's default route.
 *
 * @generated from message turnkeeper.v1.RouteSelection
 */
export type RouteSelection = Message<"turnkeeper.v1.RouteSelection"> & {
    /**
     * The classifier hint for this call; empty means none. A hint with no classifier route falls back to the default route.
     *
     * @generated from field: string classifier_hint = 1;
     */
    classifierHint: string;
    /**
     * An explicit session switch; unset means none.
     *
     * @generated from field: turnkeeper.v1.SessionSwitch session_switch = 2;
     */
    sessionSwitch?: SessionSwitch | undefined;
};
/**
 * Describes the message turnkeeper.v1.RouteSelection.
 * Use `create(RouteSelectionSchema)` to create a new message.
 */
export declare const RouteSelectionSchema: GenMessage<RouteSelection>;
/**
 * Profiles is everything turnkeeper needs to resolve a route, its capacity and its budget.
 *
 * @generated from message turnkeeper.v1.Profiles
 */
export type Profiles = Message<"turnkeeper.v1.Profiles"> & {
    /**
     * The runtime profile. Unset means every setting takes its default.
     *
     * @generated from field: turnkeeper.v1.RuntimeProfile runtime = 1;
     */
    runtime?: RuntimeProfile | undefined;
    /**
     * The configured provider profiles.
     *
     * @generated from field: repeated turnkeeper.v1.ProviderProfile providers = 2;
     */
    providers: ProviderProfile[];
    /**
     * The per-call route selection.
     *
     * @generated from field: turnkeeper.v1.RouteSelection selection = 3;
     */
    selection?: RouteSelection | undefined;
};
/**
 * Describes the message turnkeeper.v1.Profiles.
 * Use `create(ProfilesSchema)` to create a new message.
 */
export declare const ProfilesSchema: GenMessage<Profiles>;
/**
 * CacheLifetime is how long a provider keeps a prompt-cache write (Anthropic's `ttl`).
 *
 * @generated from enum turnkeeper.v1.CacheLifetime
 */
export declare enum CacheLifetime {
    /**
     * Not declared: the provider's default lifetime.
     *
     * @generated from enum value: CACHE_LIFETIME_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * Five minutes (`5m`).
     *
     * @generated from enum value: CACHE_LIFETIME_FIVE_MINUTES = 1;
     */
    FIVE_MINUTES = 1,
    /**
     * One hour (`1h`).
     *
     * @generated from enum value: CACHE_LIFETIME_ONE_HOUR = 2;
     */
    ONE_HOUR = 2
}
/**
 * Describes the enum turnkeeper.v1.CacheLifetime.
 */
export declare const CacheLifetimeSchema: GenEnum<CacheLifetime>;
