//! Applying a compaction plan (spec §15.3, step 4): the runtime's half of `PlanCompaction`.

use crate::error::ConversionError;
use crate::pb::{
    ChatMessage, CompactionPlan, ConversationMessage, History, IndexRange, Role,
    conversation_message, history,
};

impl ChatMessage {
    /// The row that holds a summarizer's answer (spec §15.2): a user row marked `summary`.
    pub fn summary_row(summary_text: impl Into<String>) -> Self {
        ChatMessage {
            summary: true,
            ..Self::user(summary_text)
        }
    }
}

/// A row of either history shape, as applying a plan reads it.
trait Row: Clone {
    /// Whether the row is a system chat row (a structured step never is).
    fn is_system(&self) -> bool;
}

impl Row for ChatMessage {
    fn is_system(&self) -> bool {
        self.role() == Role::System
    }
}

impl Row for ConversationMessage {
    fn is_system(&self) -> bool {
        matches!(&self.message, Some(conversation_message::Message::Chat(chat)) if chat.is_system())
    }
}

/// The history to keep once the summarizer answered `summary_text` to the plan's
/// `summary_request` (spec §15.3, step 4): the leading system rows, one summary row holding the
/// answer, every pinned turn that stood before the end of the condensed rows (in order), then
/// every row after them. The old summary and any breadcrumb before that end are left out: the
/// new summary says what they said.
///
/// `history` is the history the plan was made for, in either shape; the result has the same
/// shape. A plan whose ranges do not fit the history (out of bounds, unordered, overlapping, or
/// inside the leading system rows) is a [`ConversionError`].
pub fn apply_compaction(
    history: &History,
    plan: &CompactionPlan,
    summary_text: &str,
) -> Result<History, ConversionError> {
    let summary = ChatMessage::summary_row(summary_text);
    match &history.shape {
        Some(history::Shape::Chat(chat)) => apply(&chat.messages, plan, summary).map(History::chat),
        Some(history::Shape::Conversation(conversation)) => {
            apply(&conversation.messages, plan, summary.into()).map(History::conversation)
        }
        None => Err(ConversionError::new(
            "history",
            "neither chat nor conversation is set",
        )),
    }
}

fn apply<R: Row>(rows: &[R], plan: &CompactionPlan, summary: R) -> Result<Vec<R>, ConversionError> {
    let leading = rows.iter().take_while(|row| row.is_system()).count();
    let condensed = &plan.condensed_rows;
    if condensed.is_empty() {
        return Err(ConversionError::new(
            "plan.condensed_rows",
            "empty; a plan condenses at least one row",
        ));
    }
    check_ranges("plan.condensed_rows", condensed, leading, rows.len())?;
    let end = condensed[condensed.len() - 1].end as usize;
    let pinned = &plan.pinned_turns;
    check_ranges("plan.pinned_turns", pinned, leading, end)?;
    for (i, turn) in pinned.iter().enumerate() {
        if let Some(rows) = condensed
            .iter()
            .find(|rows| turn.start < rows.end && rows.start < turn.end)
        {
            return Err(ConversionError::new(
                format!("plan.pinned_turns[{i}]"),
                format!("overlaps the condensed rows [{}, {})", rows.start, rows.end),
            ));
        }
    }
    let mut out = rows[..leading].to_vec();
    out.push(summary);
    for turn in pinned {
        out.extend_from_slice(&rows[turn.start as usize..turn.end as usize]);
    }
    out.extend_from_slice(&rows[end..]);
    Ok(out)
}

/// Checks that `ranges` are non-empty, ascending, disjoint and within `[first, limit)`.
fn check_ranges(
    field: &str,
    ranges: &[IndexRange],
    first: usize,
    limit: usize,
) -> Result<(), ConversionError> {
    let mut previous_end = first;
    for (i, range) in ranges.iter().enumerate() {
        let (start, end) = (range.start as usize, range.end as usize);
        if start >= end {
            return Err(ConversionError::new(
                format!("{field}[{i}]"),
                format!("empty range [{start}, {end})"),
            ));
        }
        if start < previous_end || end > limit {
            return Err(ConversionError::new(
                format!("{field}[{i}]"),
                format!(
                    "[{start}, {end}) is not within [{previous_end}, {limit}): the ranges must \
                     ascend, disjoint, after the leading system rows and before the end of the \
                     history (pinned turns: before the end of the condensed rows)"
                ),
            ));
        }
        previous_end = end;
    }
    Ok(())
}
