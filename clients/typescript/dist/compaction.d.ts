import { type History } from "./gen/turnkeeper/v1/history_pb.js";
import type { CompactionPlan } from "./gen/turnkeeper/v1/history_service_pb.js";
/**
 * The history after the summarizer answered `summaryText` to `plan.summaryRequest`.
 *
 * `history` is the history the plan was made for (the request's own, in either shape). The result
 * is its leading system rows, one summary row (a user row marked `summary` holding the answer),
 * every pinned turn that stood before the end of the condensed rows (in order), then every row
 * after them; the old summary and any breadcrumb before that end are left out, since the new
 * summary says what they said. A plan whose ranges do not fit the history (out of bounds,
 * unordered, overlapping, or inside the leading system rows) throws {@link ConversionError}.
 */
export declare function applyCompaction(history: History, plan: CompactionPlan, summaryText: string): History;
