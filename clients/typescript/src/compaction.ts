// Applying a compaction plan (spec §15.3 step 4): the runtime's half of PlanCompaction.
//
// The sidecar never calls a model. The runtime sends `plan.summaryRequest` to its summarizer and
// hands the answer to `applyCompaction`, which builds the history to keep from then on. Every
// client ships this function and holds it to tests/conformance/compaction.
import { create } from "@bufbuild/protobuf";
import { ConversionError } from "./errors.js";
import {
  ChatMessageSchema,
  ConversationMessageSchema,
  HistorySchema,
  Role,
  type ChatMessage,
  type History,
} from "./gen/turnkeeper/v1/history_pb.js";
import type { CompactionPlan } from "./gen/turnkeeper/v1/history_service_pb.js";
import type { IndexRange } from "./gen/turnkeeper/v1/trim_pb.js";

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
export function applyCompaction(history: History, plan: CompactionPlan, summaryText: string): History {
  const summary = create(ChatMessageSchema, { role: Role.USER, content: summaryText, summary: true });
  const shape = history.shape;
  if (shape.case === "chat") {
    const rows = shape.value.messages;
    const kept = keptIndices(leadingSystemRows(rows), rows.length, plan);
    return create(HistorySchema, { shape: { case: "chat", value: { messages: assemble(rows, kept, summary) } } });
  }
  if (shape.case === "conversation") {
    const rows = shape.value.messages;
    const leading = leadingSystemRows(rows.map((row) => (row.message.case === "chat" ? row.message.value : undefined)));
    const kept = keptIndices(leading, rows.length, plan);
    const step = create(ConversationMessageSchema, { message: { case: "chat", value: summary } });
    return create(HistorySchema, { shape: { case: "conversation", value: { messages: assemble(rows, kept, step) } } });
  }
  throw new ConversionError("history: neither chat nor conversation is set");
}

interface Kept {
  /** The leading system rows, kept first. */
  readonly leading: number;
  /** The pinned rows kept after the summary row, as input indices in order. */
  readonly pinned: number[];
  /** The end of the condensed rows: every row from here on is kept. */
  readonly end: number;
}

function leadingSystemRows(rows: readonly (ChatMessage | undefined)[]): number {
  let count = 0;
  while (count < rows.length && rows[count]?.role === Role.SYSTEM) count++;
  return count;
}

function assemble<R>(rows: readonly R[], kept: Kept, summary: R): R[] {
  return [...rows.slice(0, kept.leading), summary, ...kept.pinned.map((i) => rows[i] as R), ...rows.slice(kept.end)];
}

/** The rows to keep, after checking that the plan's ranges fit the history. */
function keptIndices(leading: number, total: number, plan: CompactionPlan): Kept {
  const condensed = plan.condensedRows;
  const last = condensed[condensed.length - 1];
  if (last === undefined) throw new ConversionError("plan.condensedRows: empty; a plan condenses at least one row");
  checkRanges(condensed, "plan.condensedRows", leading, total);
  const end = last.end;
  checkRanges(plan.pinnedTurns, "plan.pinnedTurns", leading, end);
  const pinned: number[] = [];
  plan.pinnedTurns.forEach((turn, i) => {
    for (const rows of condensed) {
      if (turn.start < rows.end && rows.start < turn.end) {
        throw new ConversionError(`plan.pinnedTurns[${i}]: overlaps the condensed rows [${rows.start}, ${rows.end})`);
      }
    }
    for (let row = turn.start; row < turn.end; row++) pinned.push(row);
  });
  return { leading, pinned, end };
}

/** Ranges that are non-empty, ascending, disjoint and within `[first, limit)`. */
function checkRanges(ranges: readonly IndexRange[], where: string, first: number, limit: number): void {
  let previousEnd = first;
  ranges.forEach((range, i) => {
    if (range.start >= range.end) throw new ConversionError(`${where}[${i}]: empty range [${range.start}, ${range.end})`);
    if (range.start < previousEnd || range.end > limit) {
      throw new ConversionError(
        `${where}[${i}]: [${range.start}, ${range.end}) is not within [${previousEnd}, ${limit}): the ranges must ` +
          "ascend, disjoint, after the leading system rows and before the end of the history (pinned turns: before " +
          "the end of the condensed rows)",
      );
    }
    previousEnd = range.end;
  });
}
