//! The orphan sweep on adjacency (spec §8, §10.2), as `turnkeeper/core/sweep.py` decides it:
//! one forward pass; a row whose calls wait on a later `[Tool results]` carrier is settled
//! when its turn ends.

use std::collections::{HashMap, HashSet};

use crate::rows::{History, RowKind};

/// What a removal took out (`OrphanKind` of trim.proto).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "python",
    pyo3::pyclass(
        eq,
        frozen,
        hash,
        module = "turnkeeper._native",
        rename_all = "SCREAMING_SNAKE_CASE"
    )
)]
pub enum OrphanKind {
    ToolResultWithoutCall,
    ToolCallWithoutResult,
}

/// What the sweep found: per row, the result positions and the call positions to remove,
/// ascending (`Working::without` walks them in step with the entries).
#[derive(Debug, Default)]
pub struct Orphans {
    pub results: HashMap<usize, Vec<usize>>,
    pub calls: HashMap<usize, Vec<usize>>,
}

impl Orphans {
    pub fn is_empty(&self) -> bool {
        self.results.is_empty() && self.calls.is_empty()
    }
}

struct Caller<'a> {
    index: usize,
    calls: Vec<&'a [u8]>,
    call_set: HashSet<&'a [u8]>,
    answered: HashSet<&'a [u8]>,
}

impl Caller<'_> {
    fn unanswered(&self) -> Vec<usize> {
        (0..self.calls.len())
            .filter(|&j| !self.answered.contains(self.calls[j]))
            .collect()
    }
}

pub fn find(buf: &[u8], history: &History) -> Orphans {
    let id = |range: (usize, usize)| &buf[range.0..range.1];
    let mut orphans = Orphans::default();
    let mut caller: Option<Caller> = None;
    let mut waiting: Vec<Caller> = Vec::new();

    fn close_run<'a>(caller: &mut Option<Caller<'a>>, waiting: &mut Vec<Caller<'a>>) {
        if let Some(c) = caller.take() {
            if !c.unanswered().is_empty() {
                waiting.push(c);
            }
        }
    }
    fn settle(waiting: &mut Vec<Caller>, orphans: &mut Orphans, answered_by_carrier: bool) {
        if !answered_by_carrier {
            for pending in waiting.iter() {
                orphans.calls.insert(pending.index, pending.unanswered());
            }
        }
        waiting.clear();
    }

    for (i, row) in history.rows.iter().enumerate() {
        let results = &history.ids[row.results.0..row.results.1];
        if !results.is_empty() {
            for (j, &result) in results.iter().enumerate() {
                match caller.as_mut() {
                    Some(c) if c.call_set.contains(id(result)) => {
                        c.answered.insert(id(result));
                    }
                    _ => orphans.results.entry(i).or_default().push(j),
                }
            }
            continue;
        }
        close_run(&mut caller, &mut waiting);
        match row.kind {
            RowKind::Assistant => {
                let calls: Vec<&[u8]> = history.ids[row.calls.0..row.calls.1]
                    .iter()
                    .map(|&r| id(r))
                    .collect();
                if !calls.is_empty() {
                    caller = Some(Caller {
                        index: i,
                        call_set: calls.iter().copied().collect(),
                        calls,
                        answered: HashSet::new(),
                    });
                }
            }
            RowKind::Carrier => settle(&mut waiting, &mut orphans, true),
            RowKind::User => settle(&mut waiting, &mut orphans, false),
            _ => {}
        }
    }
    close_run(&mut caller, &mut waiting);
    settle(&mut waiting, &mut orphans, false);
    orphans.calls.retain(|_, calls| !calls.is_empty());
    orphans
}
