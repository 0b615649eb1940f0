//! The spec §15 marks beside the provider JSON (docs/converters.md): the summary row and the
//! pinned turns, which no provider format can carry.

use super::common::{FlatRow, Res, Row, err, flat_rows, is_carrier, role};
use crate::pb::{ChatMessage, History, Role};

/// The spec §15 marks of a history, which no provider format can carry: a provider refuses a key
/// it does not know, so the summary row and a pinned turn's user row export as plain user
/// messages, and the runtime keeps these marks beside the provider JSON. [`turn_marks`] reads them
/// from a history; every import takes them as [`ConvertOptions::marks`](super::ConvertOptions)
/// and sets them on the rows it makes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnMarks {
    /// The first row after the leading system rows is the summary row (§15.2).
    pub summary: bool,
    /// The pinned turns (§15.1) by their 0-based position among the history's turns, ascending.
    /// A turn starts at a real user row: not the summary row, the breadcrumb or a
    /// `[Tool results]` carrier.
    pub pinned_turns: Vec<usize>,
}

/// A real user row (spec §0): a turn boundary, the only row a pin may mark (§15.1).
fn starts_turn(m: &ChatMessage) -> bool {
    role(m) == Role::User && !m.breadcrumb && !m.summary && !is_carrier(&m.content)
}

/// The summary and pinned-turn marks of `history`, to keep beside its provider JSON and pass back
/// as [`ConvertOptions::marks`](super::ConvertOptions) when importing it again. A mark no provider
/// position can name (a pin on a row that starts no turn, a summary row anywhere but right after
/// the leading system rows) is a [`ConversionError`](crate::ConversionError): the server refuses
/// such a history too.
pub fn turn_marks(history: &History) -> Res<TurnMarks> {
    let rows: Vec<FlatRow> = flat_rows(history, "")?;
    let first = rows
        .iter()
        .position(|row| role(&row.message) != Role::System);
    let mut marks = TurnMarks::default();
    let mut turn = 0;
    for (i, row) in rows.iter().enumerate() {
        let m = &row.message;
        if m.summary && Some(i) != first {
            return Err(err(
                format!("rows[{i}]"),
                "a summary row stands nowhere but right after the system rows",
            ));
        }
        if starts_turn(m) {
            if m.pinned {
                marks.pinned_turns.push(turn);
            }
            turn += 1;
        } else if m.pinned {
            return Err(err(
                format!("rows[{i}]"),
                "pinned, but only a real user row starts a turn",
            ));
        }
    }
    marks.summary = first.is_some_and(|i| rows[i].message.summary);
    Ok(marks)
}

/// Sets the caller's marks and finds the breadcrumb. Provider formats have no breadcrumb flag: a
/// user row with a known breadcrumb text is the breadcrumb the server inserted when it stands
/// where one may (spec §7, §15.1): right after the leading system rows, the summary row and the
/// pinned turns before it. Turns are counted without it, so the pins are set on the same walk.
pub(crate) fn apply_marks(
    rows: &mut [Row],
    marks: &TurnMarks,
    breadcrumb_texts: &[String],
) -> Res<()> {
    let leading = rows
        .iter()
        .take_while(|row| role(&row.message) == Role::System)
        .count();
    let after_system = &mut rows[leading..];
    if marks.summary {
        match after_system.first_mut().map(|row| &mut row.message) {
            Some(first)
                if role(first) == Role::User
                    && first.attachments.is_empty()
                    && !is_carrier(&first.content) =>
            {
                first.summary = true;
            }
            _ => {
                return Err(err(
                    "marks.summary",
                    "the first message after the system messages is no plain user message",
                ));
            }
        }
    }
    let mut turn = 0;
    let mut crumb_may_follow = true;
    for row in after_system {
        let m = &mut row.message;
        if m.summary {
            continue;
        }
        let is_crumb_text = role(m) == Role::User
            && breadcrumb_texts.contains(&m.content)
            && m.attachments.is_empty();
        if crumb_may_follow && is_crumb_text {
            m.breadcrumb = true;
            crumb_may_follow = false;
        } else if starts_turn(m) {
            m.pinned = marks.pinned_turns.contains(&turn);
            crumb_may_follow = crumb_may_follow && m.pinned;
            turn += 1;
        } else if turn == 0 {
            // Rows before the first real user row belong to the first turn (spec §0).
            crumb_may_follow = false;
        }
    }
    if let Some(missing) = marks.pinned_turns.iter().find(|&&n| n >= turn) {
        return Err(err(
            "marks.pinned_turns",
            format!("turn {missing} does not exist (the history has {turn})"),
        ));
    }
    Ok(())
}
