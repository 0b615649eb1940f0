//! Whole-turn retention plans (spec §2, §5, §6, §9), as `turnkeeper/core/trimming.py` pins
//! them: judged from running sums over the priced rows, one O(n) pass each.

use crate::rows::{Row, RowKind};

/// What a trim does, in input indices (`TrimPlan` in trimming.py); `drop` empty: unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

impl Plan {
    pub fn trimmed(&self) -> bool {
        self.drop_stop > self.drop_start
    }
}

/// P and the turn boundaries of B.
struct Layout {
    system_rows: usize,
    prefix: usize,
    boundaries: Vec<usize>,
}

impl Layout {
    fn of(rows: &[Row]) -> Layout {
        let system_rows = rows
            .iter()
            .take_while(|r| r.kind == RowKind::System)
            .count();
        let mut prefix = system_rows;
        if rows.get(prefix).map(|r| r.kind) == Some(RowKind::Breadcrumb) {
            prefix += 1;
        }
        let boundaries = (prefix..rows.len())
            .filter(|&i| rows[i].is_turn_boundary())
            .collect();
        Layout {
            system_rows,
            prefix,
            boundaries,
        }
    }

    fn has_breadcrumb(&self) -> bool {
        self.prefix > self.system_rows
    }

    fn turns(&self) -> u64 {
        self.boundaries.len() as u64
    }

    fn unchanged(&self, total: u64, target: u64) -> Plan {
        Plan {
            drop_start: self.prefix,
            drop_stop: self.prefix,
            breadcrumb_at: None,
            dropped_turns: 0,
            kept_turns: self.turns(),
            tokens_before: total,
            tokens_after: total,
            target_tokens: target,
            cut_step: 0,
            cut_drop_target: 0,
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

    fn drop_turns(
        &self,
        costs: &[u64],
        total: u64,
        j: usize,
        breadcrumb_cost: Option<u64>,
        target: u64,
    ) -> Plan {
        let end = self.boundaries[j];
        let dropped: u64 = costs[self.prefix..end].iter().sum();
        let crumb = self.new_breadcrumb_cost(breadcrumb_cost);
        Plan {
            drop_start: self.prefix,
            drop_stop: end,
            breadcrumb_at: crumb.map(|_| self.system_rows),
            dropped_turns: j as u64,
            kept_turns: self.turns() - j as u64,
            tokens_before: total,
            tokens_after: total - dropped + crumb.unwrap_or(0),
            target_tokens: target,
            cut_step: 0,
            cut_drop_target: 0,
        }
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
        return lay.unchanged(total, budget);
    }
    let insert_cost = lay.new_breadcrumb_cost(crumb).unwrap_or(0);
    // D(j) = cost(B[:bj]), a running sum over the boundaries; the grid continues the same walk.
    let mut dropped = 0u64;
    let mut pos = lay.prefix;
    let mut chosen = k - 1;
    for j in 1..k {
        let end = lay.boundaries[j];
        dropped += costs[pos..end].iter().sum::<u64>();
        pos = end;
        if total - dropped + insert_cost <= budget {
            chosen = j;
            break;
        }
    }
    let step = grid_step(step_budget, low_water);
    let plan = if step == 0 {
        lay.drop_turns(costs, total, chosen, crumb, budget)
    } else {
        // The smallest j >= j0 whose D(j) reaches ceil(D(j0) / S) x S, else k-1.
        let drop_target = round_up(dropped, step);
        while chosen < k - 1 && u128::from(dropped) < drop_target {
            chosen += 1;
            let end = lay.boundaries[chosen];
            dropped += costs[pos..end].iter().sum::<u64>();
            pos = end;
        }
        Plan {
            cut_step: step,
            cut_drop_target: saturate(drop_target),
            ..lay.drop_turns(costs, total, chosen, crumb, budget)
        }
    };
    if plan.tokens_after > total && !allow_growth {
        return lay.unchanged(total, budget);
    }
    plan
}

/// The §9 turn-count trim with the §11.1 turn grid.
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
        return lay.unchanged(total, 0);
    }
    let keep = limit.max(1);
    let j0 = k - keep;
    let step = grid_step(keep, low_water);
    if step == 0 {
        return lay.drop_turns(costs, total, j0 as usize, crumb, 0);
    }
    // j0 < k and step <= keep < k, so the rounded drop stays below 2k: no overflow.
    let drop_target = saturate(round_up(j0, step));
    Plan {
        cut_step: step,
        cut_drop_target: drop_target,
        ..lay.drop_turns(costs, total, drop_target.min(k - 1) as usize, crumb, 0)
    }
}

/// `keep`: the limit in effect (`trimming.rows_to_keep` resolves 0 to the default).
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
