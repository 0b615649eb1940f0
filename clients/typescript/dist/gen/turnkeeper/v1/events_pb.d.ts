import type { GenEnum, GenFile, GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Route } from "./resolution_pb.js";
import type { CallerContext, ContextMeter, HistoryTrimmed, ToolContextCollapse } from "./trim_pb.js";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file turnkeeper/v1/events.proto.
 */
export declare const file_turnkeeper_v1_events: GenFile;
/**
 * TrimEvent is one published HistoryTrimmed with its position in the feed.
 *
 * @generated from message turnkeeper.v1.TrimEvent
 */
export type TrimEvent = Message<"turnkeeper.v1.TrimEvent"> & {
    /**
     * The opaque cursor of this event; pass it as `after_cursor` to resume after it.
     *
     * @generated from field: string cursor = 1;
     */
    cursor: string;
    /**
     * When the server published the event.
     *
     * @generated from field: google.protobuf.Timestamp time = 2;
     */
    time?: Timestamp | undefined;
    /**
     * The trim, exactly as returned to the caller that caused it.
     *
     * @generated from field: turnkeeper.v1.HistoryTrimmed trimmed = 3;
     */
    trimmed?: HistoryTrimmed | undefined;
};
/**
 * Describes the message turnkeeper.v1.TrimEvent.
 * Use `create(TrimEventSchema)` to create a new message.
 */
export declare const TrimEventSchema: GenMessage<TrimEvent>;
/**
 * MeterUpdate is the context meter of one successful PrepareModelCall, or the plan of one PlanCompaction, for
 * subscribers that opted in (spec §10.5, §15.3).
 * It is not a trim: it never counts as a trim event in heartbeats or gaps.
 *
 * @generated from message turnkeeper.v1.MeterUpdate
 */
export type MeterUpdate = Message<"turnkeeper.v1.MeterUpdate"> & {
    /**
     * The opaque cursor of this update; pass it as `after_cursor` to resume after it.
     *
     * @generated from field: string cursor = 1;
     */
    cursor: string;
    /**
     * When the server published the update.
     *
     * @generated from field: google.protobuf.Timestamp time = 2;
     */
    time?: Timestamp | undefined;
    /**
     * The caller identifiers supplied with the PrepareModelCall request.
     *
     * @generated from field: turnkeeper.v1.CallerContext caller = 3;
     */
    caller?: CallerContext | undefined;
    /**
     * The resolved route of the call.
     *
     * @generated from field: turnkeeper.v1.Route route = 4;
     */
    route?: Route | undefined;
    /**
     * The meter of the prepared request.
     *
     * @generated from field: turnkeeper.v1.ContextMeter meter = 5;
     */
    meter?: ContextMeter | undefined;
    /**
     * What the call's projection collapsed (spec §13.3); absent when nothing was collapsed.
     *
     * @generated from field: turnkeeper.v1.ToolContextCollapse collapse = 6;
     */
    collapse?: ToolContextCollapse | undefined;
    /**
     * The estimate of the pinned turns in the prepared request (spec §15.1); 0 when nothing is pinned.
     *
     * @generated from field: uint64 pinned_tokens = 7;
     */
    pinnedTokens: bigint;
    /**
     * Set instead of `meter` when the update reports a PlanCompaction that returned a plan: what the plan would save.
     *
     * @generated from field: turnkeeper.v1.CompactionPlanned compaction = 8;
     */
    compaction?: CompactionPlanned | undefined;
};
/**
 * Describes the message turnkeeper.v1.MeterUpdate.
 * Use `create(MeterUpdateSchema)` to create a new message.
 */
export declare const MeterUpdateSchema: GenMessage<MeterUpdate>;
/**
 * CompactionPlanned is a compaction plan PlanCompaction returned (spec §15.3), as subscribers see it. Whether the
 * runtime applies it is the runtime's: the sidecar is stateless.
 *
 * @generated from message turnkeeper.v1.CompactionPlanned
 */
export type CompactionPlanned = Message<"turnkeeper.v1.CompactionPlanned"> & {
    /**
     * The turns the plan condenses.
     *
     * @generated from field: uint32 condensed_turns = 1;
     */
    condensedTurns: number;
    /**
     * What the plan saves, as `CompactionPlan.saved_tokens`.
     *
     * @generated from field: uint64 saved_tokens = 2;
     */
    savedTokens: bigint;
    /**
     * The estimate of the summary request, as `CompactionPlan.summary_request_tokens`.
     *
     * @generated from field: uint64 summary_request_tokens = 3;
     */
    summaryRequestTokens: bigint;
};
/**
 * Describes the message turnkeeper.v1.CompactionPlanned.
 * Use `create(CompactionPlannedSchema)` to create a new message.
 */
export declare const CompactionPlannedSchema: GenMessage<CompactionPlanned>;
/**
 * Heartbeat tells an idle subscriber that the stream is alive.
 *
 * @generated from message turnkeeper.v1.Heartbeat
 */
export type Heartbeat = Message<"turnkeeper.v1.Heartbeat"> & {
    /**
     * The stream's resume position: the cursor of the last event sent on this stream or, before any,
     * the feed position the stream started from (empty while the feed holds no event at all).
     * The first heartbeat is sent as soon as the subscription is registered.
     *
     * @generated from field: string cursor = 1;
     */
    cursor: string;
    /**
     * The server time.
     *
     * @generated from field: google.protobuf.Timestamp time = 2;
     */
    time?: Timestamp | undefined;
    /**
     * The events dropped for this subscriber so far.
     *
     * @generated from field: uint64 dropped_events = 3;
     */
    droppedEvents: bigint;
};
/**
 * Describes the message turnkeeper.v1.Heartbeat.
 * Use `create(HeartbeatSchema)` to create a new message.
 */
export declare const HeartbeatSchema: GenMessage<Heartbeat>;
/**
 * Gap says that events between two cursors could not be delivered.
 *
 * @generated from message turnkeeper.v1.Gap
 */
export type Gap = Message<"turnkeeper.v1.Gap"> & {
    /**
     * Why the events are missing.
     *
     * @generated from field: turnkeeper.v1.GapCause cause = 1;
     */
    cause: GapCause;
    /**
     * The cursor of the last event delivered before the gap; empty when unknown.
     *
     * @generated from field: string after_cursor = 2;
     */
    afterCursor: string;
    /**
     * The cursor of the first event delivered after the gap: the next event on this stream (filters applied) is exactly
     * this one. Empty when the server did not know that event yet as it sent the gap.
     *
     * @generated from field: string before_cursor = 3;
     */
    beforeCursor: string;
    /**
     * The number of events missed, when known; 0 when unknown.
     *
     * @generated from field: uint64 missed_events = 4;
     */
    missedEvents: bigint;
};
/**
 * Describes the message turnkeeper.v1.Gap.
 * Use `create(GapSchema)` to create a new message.
 */
export declare const GapSchema: GenMessage<Gap>;
/**
 * GapCause says why some events could not be delivered.
 *
 * @generated from enum turnkeeper.v1.GapCause
 */
export declare enum GapCause {
    /**
     * Not set; never returned by the server.
     *
     * @generated from enum value: GAP_CAUSE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * The events were evicted from the retained buffer before they could be delivered or resumed.
     *
     * @generated from enum value: GAP_CAUSE_BUFFER_OVERFLOW = 1;
     */
    BUFFER_OVERFLOW = 1,
    /**
     * This subscriber's queue was full and the events were dropped for it alone.
     *
     * @generated from enum value: GAP_CAUSE_SLOW_CONSUMER = 2;
     */
    SLOW_CONSUMER = 2,
    /**
     * The resume cursor belongs to an earlier run of the feed; events in between are unknown.
     *
     * @generated from enum value: GAP_CAUSE_RESTART = 3;
     */
    RESTART = 3,
    /**
     * The events could not be published to the shared backend.
     *
     * @generated from enum value: GAP_CAUSE_PUBLISH_FAILED = 4;
     */
    PUBLISH_FAILED = 4
}
/**
 * Describes the enum turnkeeper.v1.GapCause.
 */
export declare const GapCauseSchema: GenEnum<GapCause>;
