//! Whole-turn retention plans (spec §2, §5, §6, §9), as `turnkeeper/core/trimming.py` pins
//! them: judged from running sums over the priced rows, one O(n) pass each.

use crate::history::{Row, RowKind};

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
        }
    }
}

pub fn token_budget(rows: &[Row], costs: &[u64], budget: u64, crumb: Option<u64>) -> Plan {
    let lay = Layout::of(rows);
    let total: u64 = costs.iter().sum();
    let k = lay.boundaries.len();
    if budget == 0 || total <= budget || k < 2 {
        return lay.unchanged(total, budget);
    }
    let insert_cost = lay.new_breadcrumb_cost(crumb).unwrap_or(0);
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
    lay.drop_turns(costs, total, chosen, crumb, budget)
}

pub fn turn_count(rows: &[Row], costs: &[u64], limit: u64, crumb: Option<u64>) -> Plan {
    let lay = Layout::of(rows);
    let total: u64 = costs.iter().sum();
    let k = lay.turns();
    if k <= limit || k <= 1 {
        return lay.unchanged(total, 0);
    }
    let j = (k - limit.max(1)) as usize;
    lay.drop_turns(costs, total, j, crumb, 0)
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
    }
}
