//! Whole-turn retention plans (spec §2, §5, §6, §9), as `turnkeeper/core/trimming.py` pins
//! them: judged from running sums over the priced rows, one O(n) pass each.

use crate::rows::{Row, RowKind};

/// What a trim does, in input indices (`TrimPlan` in trimming.py); nothing dropped: unchanged.
///
/// The output is the rows before `drop`, then the pinned turns inside it (`kept_in_drop`,
/// §15.1: they move ahead of the breadcrumb), then the breadcrumb when `breadcrumb_at` is set
/// (the input breadcrumb at `breadcrumb_from`, moved, or else a new one), then the rows after it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "python",
    pyo3::pyclass(frozen, get_all, module = "turnkeeper._native")
)]
pub struct Plan {
    pub drop_start: usize,
    pub drop_stop: usize,
    pub breadcrumb_at: Option<usize>,
    pub dropped_turns: u64,
    pub kept_turns: u64,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub target_tokens: u64,
    /// The low-water grid step (§11.1), tokens or turns; 0 for the minimal cut of §9.
    pub cut_step: u64,
    /// The drop the grid rounded the minimal cut up to; 0 with the minimal cut.
    pub cut_drop_target: u64,
    /// The pinned turns inside the drop that are kept, ascending input row ranges (§15.1).
    pub kept_in_drop: Vec<(usize, usize)>,
    /// The input index of the breadcrumb written at `breadcrumb_at` when it is moved, not new.
    pub breadcrumb_from: Option<usize>,
    /// The pinned turns in the output, and their estimate (§15.1).
    pub pinned_turns: u64,
    pub pinned_tokens: u64,
}

impl Plan {
    /// The rows the output leaves out: the drop but its kept turns and its moved breadcrumb.
    pub fn dropped_messages(&self) -> usize {
        let kept: usize = self.kept_in_drop.iter().map(|(s, e)| e - s).sum();
        self.drop_stop - self.drop_start - kept - usize::from(self.breadcrumb_from.is_some())
    }

    pub fn trimmed(&self) -> bool {
        self.dropped_messages() > 0
    }
}

/// The fixed prefix P and the turns of B (§9, §15.1).
pub(crate) struct Layout {
    pub(crate) system_rows: usize,
    /// The summary row (§15.2), right after the leading system rows.
    pub(crate) summary: Option<usize>,
    /// The breadcrumb, the fixed prefix's last row when there is one.
    pub(crate) breadcrumb: Option<usize>,
    /// len(P).
    pub(crate) prefix: usize,
    /// The pinned turns of P, before its breadcrumb, as row ranges.
    pub(crate) prefix_turns: Vec<(usize, usize)>,
    /// Absolute indices of the turn boundaries in B, ascending.
    pub(crate) boundaries: Vec<usize>,
    /// Whether any turn of B is pinned: without pins every planner works as before.
    pub(crate) pins: bool,
    rows: usize,
}

/// Finds the breadcrumb of the fixed prefix (§15.1) one row at a time, from the row after the
/// leading system rows and the summary row (`fixed_prefix_breadcrumb` in trimming.py): the
/// first breadcrumb when the rows before it hold only whole pinned turns, that is when nothing
/// stands before it, or a turn boundary does and every turn boundary before it is pinned (rows
/// before the first of them belong to its turn). Decided by the first breadcrumb or the first
/// unpinned boundary, whichever comes first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PrefixWalk {
    first: bool,
    seen_boundary: bool,
    decided: bool,
}

impl PrefixWalk {
    pub(crate) const START: PrefixWalk = PrefixWalk {
        first: true,
        seen_boundary: false,
        decided: false,
    };

    /// Whether the next row, of `kind` and `pinned`, is that breadcrumb.
    pub(crate) fn is_breadcrumb(&mut self, kind: RowKind, pinned: bool) -> bool {
        let first = std::mem::replace(&mut self.first, false);
        if self.decided {
            return false;
        }
        match kind {
            RowKind::Breadcrumb => {
                self.decided = true;
                first || self.seen_boundary
            }
            RowKind::User if !pinned => {
                self.decided = true;
                false
            }
            RowKind::User => {
                self.seen_boundary = true;
                false
            }
            _ => false,
        }
    }

    pub(crate) fn decided(&self) -> bool {
        self.decided
    }
}

impl Layout {
    pub(crate) fn of(rows: &[Row]) -> Layout {
        let system_rows = rows
            .iter()
            .take_while(|r| r.kind == RowKind::System)
            .count();
        let summary = (rows.get(system_rows).map(|r| r.kind) == Some(RowKind::Summary))
            .then_some(system_rows);
        let head = system_rows + usize::from(summary.is_some());
        let mut walk = PrefixWalk::START;
        let mut breadcrumb = None;
        for (i, row) in rows.iter().enumerate().skip(head) {
            if walk.is_breadcrumb(row.kind, row.marks.pinned) {
                breadcrumb = Some(i);
            }
            if walk.decided() {
                break;
            }
        }
        let prefix = breadcrumb.map_or(head, |c| c + 1);
        // The pinned turns of P: its rows between the head and the breadcrumb, split at their
        // boundaries; rows before the first boundary belong to the first turn.
        let mut prefix_turns: Vec<(usize, usize)> = Vec::new();
        if let Some(c) = breadcrumb {
            for i in (head..c).filter(|&i| rows[i].is_turn_boundary()) {
                match prefix_turns.last_mut() {
                    Some(last) => {
                        last.1 = i;
                        prefix_turns.push((i, c));
                    }
                    None => prefix_turns.push((head, c)),
                }
            }
        }
        let mut pins = false;
        let mut boundaries = Vec::new();
        for (i, row) in rows.iter().enumerate().skip(prefix) {
            if row.is_turn_boundary() {
                boundaries.push(i);
                pins |= row.marks.pinned;
            }
        }
        Layout {
            system_rows,
            summary,
            breadcrumb,
            prefix,
            prefix_turns,
            boundaries,
            pins,
            rows: rows.len(),
        }
    }

    fn has_breadcrumb(&self) -> bool {
        self.breadcrumb.is_some()
    }

    /// The turns of B.
    fn turns(&self) -> u64 {
        self.boundaries.len() as u64
    }

    /// Every turn of the history: the fixed prefix's pinned turns and B's.
    fn all_turns(&self) -> u64 {
        (self.prefix_turns.len() + self.boundaries.len()) as u64
    }

    /// Turn `t` of B as a row range: rows of B before b0 belong to its first turn.
    pub(crate) fn turn(&self, t: usize) -> (usize, usize) {
        let start = if t == 0 {
            self.prefix
        } else {
            self.boundaries[t]
        };
        let end = self.boundaries.get(t + 1).copied().unwrap_or(self.rows);
        (start, end)
    }

    fn pinned(&self, rows: &[Row], t: usize) -> bool {
        self.pins && rows[self.boundaries[t]].marks.pinned
    }

    /// Every pinned turn of the history as a row range, in order.
    pub(crate) fn pinned_turns(&self, rows: &[Row]) -> Vec<(usize, usize)> {
        let mut out = self.prefix_turns.clone();
        if self.pins {
            let b = 0..self.boundaries.len();
            out.extend(b.filter(|&t| self.pinned(rows, t)).map(|t| self.turn(t)));
        }
        out
    }

    /// Every turn of the history (§15.1), oldest first, as a row range and its pin: the pinned
    /// turns of P, then B's (`turn_spans` of PlanCompaction, §15.3).
    pub(crate) fn turn_spans(&self, rows: &[Row]) -> Vec<(usize, usize, bool)> {
        let prefix = self.prefix_turns.iter().map(|&(s, e)| (s, e, true));
        let body = (0..self.boundaries.len()).map(|t| {
            let (s, e) = self.turn(t);
            (s, e, self.pinned(rows, t))
        });
        prefix.chain(body).collect()
    }

    /// The pinned turns (all of them: no trim drops one) and their estimate.
    fn pinned_counts(&self, rows: &[Row], costs: &[u64]) -> (u64, u64) {
        if self.prefix_turns.is_empty() && !self.pins {
            return (0, 0);
        }
        let turns = self.pinned_turns(rows);
        let tokens = turns
            .iter()
            .map(|&(s, e)| costs[s..e].iter().sum::<u64>())
            .sum();
        (turns.len() as u64, tokens)
    }

    fn unchanged(&self, rows: &[Row], costs: &[u64], total: u64, target: u64) -> Plan {
        let (pinned_turns, pinned_tokens) = self.pinned_counts(rows, costs);
        Plan {
            drop_start: self.prefix,
            drop_stop: self.prefix,
            breadcrumb_at: None,
            dropped_turns: 0,
            kept_turns: self.all_turns(),
            tokens_before: total,
            tokens_after: total,
            target_tokens: target,
            cut_step: 0,
            cut_drop_target: 0,
            kept_in_drop: Vec::new(),
            breadcrumb_from: None,
            pinned_turns,
            pinned_tokens,
        }
    }

    /// The cost of the breadcrumb a trim would insert: none on paths without one, none to stack.
    fn new_breadcrumb_cost(&self, breadcrumb_cost: Option<u64>) -> Option<u64> {
        if self.has_breadcrumb() {
            None
        } else {
            breadcrumb_cost
        }
    }

    /// The cost of turn `t` of B when a cut before it drops it: 0 for a pinned turn (§15.1).
    fn drop_cost(&self, rows: &[Row], costs: &[u64], t: usize) -> u64 {
        if self.pinned(rows, t) {
            return 0;
        }
        let (start, end) = self.turn(t);
        costs[start..end].iter().sum()
    }

    /// The output of a cut at turn `j` (§15.1): the fixed prefix's rows before its breadcrumb,
    /// the pinned turns of B before the cut, the breadcrumb (kept or new), then `B[bj:]`.
    /// Unchanged when every turn before the cut is pinned.
    ///
    /// As a plan (`_Body.cut` in trimming.py): the drop runs to `bj` from the first row of the
    /// first unpinned turn, or from the fixed prefix's breadcrumb when a pinned turn of B before
    /// the cut must move ahead of it; `kept_in_drop` is every pinned turn inside the drop; a
    /// breadcrumb is written right after them (moved, or new when the path inserts one and P has
    /// none), else P's breadcrumb stays where it is.
    fn drop_turns(
        &self,
        rows: &[Row],
        costs: &[u64],
        total: u64,
        j: usize,
        breadcrumb_cost: Option<u64>,
        target: u64,
    ) -> Plan {
        let first_dropped = (0..j).find(|&t| !self.pinned(rows, t));
        let Some(first_dropped) = first_dropped else {
            return self.unchanged(rows, costs, total, target);
        };
        let moved = self.breadcrumb.filter(|_| self.pins_before(rows, j));
        let drop_start = moved.unwrap_or(self.turn(first_dropped).0);
        let mut kept_in_drop = Vec::new();
        let mut dropped_turns = 0u64;
        let mut dropped_cost = 0u64;
        for t in 0..j {
            let (start, end) = self.turn(t);
            if self.pinned(rows, t) {
                if start >= drop_start {
                    kept_in_drop.push((start, end));
                }
            } else {
                dropped_turns += 1;
                dropped_cost += costs[start..end].iter().sum::<u64>();
            }
        }
        let crumb = self.new_breadcrumb_cost(breadcrumb_cost);
        let kept_rows: usize = kept_in_drop.iter().map(|(s, e)| e - s).sum();
        let breadcrumb_at = (moved.is_some() || crumb.is_some()).then_some(drop_start + kept_rows);
        let (pinned_turns, pinned_tokens) = self.pinned_counts(rows, costs);
        Plan {
            drop_start,
            drop_stop: self.boundaries[j],
            breadcrumb_at,
            dropped_turns,
            kept_turns: self.all_turns() - dropped_turns,
            tokens_before: total,
            tokens_after: total - dropped_cost + crumb.unwrap_or(0),
            target_tokens: target,
            cut_step: 0,
            cut_drop_target: 0,
            kept_in_drop,
            breadcrumb_from: moved,
            pinned_turns,
            pinned_tokens,
        }
    }

    /// Whether a turn of B before turn `j` is pinned.
    fn pins_before(&self, rows: &[Row], j: usize) -> bool {
        self.pins && (0..j).any(|t| self.pinned(rows, t))
    }
}

/// Whether the fraction in effect asks for the minimal cut of §9: 1.0, or anything outside
/// (0.0, 1.0) (`minimal_cut` in trimming.py; NaN compares false both ways).
fn minimal_cut(low_water: f64) -> bool {
    !(low_water > 0.0 && low_water < 1.0)
}

/// The §11.1 step `max(1, amount - min(amount, floor(amount x L)))`, 0 for the minimal cut
/// (`grid_step` in trimming.py). `amount as f64` rounds to nearest, ties to even, as Python's
/// int-to-float does; a floor at or above 2^64 saturates to u64::MAX, which is >= `amount`, so
/// `min` picks `amount` exactly as Python's exact comparison does.
pub fn grid_step(amount: u64, low_water: f64) -> u64 {
    if minimal_cut(low_water) {
        return 0;
    }
    let floored = (amount as f64 * low_water).floor() as u64;
    (amount - amount.min(floored)).max(1)
}

/// `ceil(value / step) x step`, exact: in u128, as `value + step` may pass 2^64.
fn round_up(value: u64, step: u64) -> u128 {
    u128::from(value).div_ceil(u128::from(step)) * u128::from(step)
}

fn saturate(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// The §9 token-budget trim with the §11.1 grid; `step_budget` is the budget the grid step comes
/// from when it is not the target (the reported-usage trim, §10.3 step 4; the room of §12). A
/// cut whose output would estimate more than its input leaves the history unchanged (§16.1),
/// unless `allow_growth`: overflow recovery judges that case itself (§10.1, no saving).
pub fn token_budget(
    rows: &[Row],
    costs: &[u64],
    budget: u64,
    crumb: Option<u64>,
    low_water: f64,
    step_budget: u64,
    allow_growth: bool,
) -> Plan {
    let lay = Layout::of(rows);
    let total: u64 = costs.iter().sum();
    let k = lay.boundaries.len();
    if budget == 0 || total <= budget || k < 2 {
        return lay.unchanged(rows, costs, total, budget);
    }
    let insert_cost = lay.new_breadcrumb_cost(crumb).unwrap_or(0);
    // D(j) = cost of the unpinned rows of B[:bj] (§15.1), a running sum over the turns; the
    // grid continues the same walk.
    let mut dropped = 0u64;
    let mut chosen = k - 1;
    for j in 1..k {
        dropped += lay.drop_cost(rows, costs, j - 1);
        if total - dropped + insert_cost <= budget {
            chosen = j;
            break;
        }
    }
    let step = grid_step(step_budget, low_water);
    let plan = if step == 0 {
        lay.drop_turns(rows, costs, total, chosen, crumb, budget)
    } else {
        // The smallest j >= j0 whose D(j) reaches ceil(D(j0) / S) x S, else k-1.
        let drop_target = round_up(dropped, step);
        while chosen < k - 1 && u128::from(dropped) < drop_target {
            dropped += lay.drop_cost(rows, costs, chosen);
            chosen += 1;
        }
        let plan = lay.drop_turns(rows, costs, total, chosen, crumb, budget);
        if plan.trimmed() {
            Plan {
                cut_step: step,
                cut_drop_target: saturate(drop_target),
                ..plan
            }
        } else {
            plan
        }
    };
    if plan.tokens_after > total && !allow_growth {
        return lay.unchanged(rows, costs, total, budget);
    }
    plan
}

/// The §9 turn-count trim with the §11.1 turn grid; pinned turns before the cut are kept on
/// top of the limit (§15.1).
pub fn turn_count(
    rows: &[Row],
    costs: &[u64],
    limit: u64,
    crumb: Option<u64>,
    low_water: f64,
) -> Plan {
    let lay = Layout::of(rows);
    let total: u64 = costs.iter().sum();
    let k = lay.turns();
    if k <= limit || k <= 1 {
        return lay.unchanged(rows, costs, total, 0);
    }
    let keep = limit.max(1);
    let j0 = k - keep;
    let step = grid_step(keep, low_water);
    if step == 0 {
        return lay.drop_turns(rows, costs, total, j0 as usize, crumb, 0);
    }
    // j0 < k and step <= keep < k, so the rounded drop stays below 2k: no overflow.
    let drop_target = saturate(round_up(j0, step));
    let plan = lay.drop_turns(
        rows,
        costs,
        total,
        drop_target.min(k - 1) as usize,
        crumb,
        0,
    );
    if !plan.trimmed() {
        return plan;
    }
    Plan {
        cut_step: step,
        cut_drop_target: drop_target,
        ..plan
    }
}

/// The channel sender cache (§6): it counts rows, not turns, and ignores pins and the summary
/// row (§15.1). `keep`: the limit in effect (`trimming.rows_to_keep` resolves 0 to the default).
pub fn row_count(rows: &[Row], costs: &[u64], keep: u64) -> Plan {
    let lay = Layout::of(rows);
    let total: u64 = costs.iter().sum();
    let others = (rows.len() - lay.system_rows) as u64;
    if others <= keep {
        return Plan {
            drop_start: lay.system_rows,
            drop_stop: lay.system_rows,
            breadcrumb_at: None,
            dropped_turns: 0,
            kept_turns: lay.turns(),
            tokens_before: total,
            tokens_after: total,
            target_tokens: 0,
            cut_step: 0,
            cut_drop_target: 0,
            kept_in_drop: Vec::new(),
            breadcrumb_from: None,
            pinned_turns: 0,
            pinned_tokens: 0,
        };
    }
    let stop = lay.system_rows + (others - keep) as usize;
    let kept_turns = rows[stop..].iter().filter(|r| r.is_turn_boundary()).count() as u64;
    let dropped: u64 = costs[lay.system_rows..stop].iter().sum();
    Plan {
        drop_start: lay.system_rows,
        drop_stop: stop,
        breadcrumb_at: None,
        dropped_turns: 0,
        kept_turns,
        tokens_before: total,
        tokens_after: total - dropped,
        target_tokens: 0,
        cut_step: 0,
        cut_drop_target: 0,
        kept_in_drop: Vec::new(),
        breadcrumb_from: None,
        pinned_turns: 0,
        pinned_tokens: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_step_is_the_minimal_cut_outside_the_open_unit_interval() {
        for l in [
            1.0,
            0.0,
            -0.5,
            1.5,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(grid_step(2_000, l), 0, "{l}");
        }
        assert_eq!(grid_step(2_000, 0.7), 600); // spec §11.1 example
        assert_eq!(grid_step(1, 0.5), 1); // never below 1
        assert_eq!(grid_step(0, 0.5), 1);
    }

    #[test]
    fn grid_step_near_two_to_the_64() {
        // u64::MAX rounds to 2^64 as a double; 2^64 x (1 - 2^-53) = 2^64 - 2^11 exactly.
        assert_eq!(grid_step(u64::MAX, 0.999_999_999_999_999_9), 2_047);
        // u64::MAX - 1 rounds to 2^64 too: the same floor, one token less of step.
        assert_eq!(grid_step(u64::MAX - 1, 0.999_999_999_999_999_9), 2_046);
        assert_eq!(grid_step(u64::MAX, 5e-324), u64::MAX);
        assert_eq!(grid_step(u64::MAX, 0.5), (1u64 << 63) - 1);
    }

    #[test]
    fn round_up_never_overflows() {
        assert_eq!(round_up(u64::MAX, u64::MAX), u128::from(u64::MAX));
        assert_eq!(
            round_up(u64::MAX, u64::MAX - 1),
            2 * u128::from(u64::MAX - 1)
        );
        assert_eq!(saturate(round_up(u64::MAX, u64::MAX - 1)), u64::MAX);
        assert_eq!(round_up(0, 7), 0);
        assert_eq!(round_up(208, 600), 600);
    }
}
