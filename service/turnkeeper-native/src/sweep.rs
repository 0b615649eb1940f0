//! The orphan sweep on adjacency (spec §8, §10.2), as `turnkeeper/core/sweep.py` decides it:
//! one forward pass; a row whose calls wait on a later `[Tool results]` carrier is settled
//! when its turn ends.

use std::collections::HashMap;

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

/// A row whose calls wait for their results. Its calls are a range of `History::ids`; which
/// of them are answered is a bit per position. A row with many calls also gets a table from
/// each id to its positions, so that looking a result up stays cheap; a row with few (nearly
/// every row) is searched in place, without allocating.
struct Caller<'a> {
    index: usize,
    calls: &'a [(usize, usize)],
    answered: Answered<'a>,
}

/// The calls of one row that a result has answered, by position.
enum Answered<'a> {
    Few(u64),
    Many {
        answered: Vec<bool>,
        positions: HashMap<&'a [u8], Vec<usize>>,
    },
}

impl<'a> Caller<'a> {
    fn new(buf: &'a [u8], index: usize, calls: &'a [(usize, usize)]) -> Caller<'a> {
        let answered = if calls.len() <= 64 {
            Answered::Few(0)
        } else {
            let mut positions: HashMap<&[u8], Vec<usize>> = HashMap::new();
            for (j, &range) in calls.iter().enumerate() {
                positions.entry(id(buf, range)).or_default().push(j);
            }
            Answered::Many {
                answered: vec![false; calls.len()],
                positions,
            }
        };
        Caller {
            index,
            calls,
            answered,
        }
    }

    /// Marks every call with the result's id answered; false when the row makes no such call.
    /// The ids are compared as the sets of ids did: every position with that id is answered.
    fn answer(&mut self, buf: &[u8], result: &[u8]) -> bool {
        match &mut self.answered {
            Answered::Few(bits) => {
                let mut found = false;
                for (j, &range) in self.calls.iter().enumerate() {
                    if id(buf, range) == result {
                        *bits |= 1 << j;
                        found = true;
                    }
                }
                found
            }
            Answered::Many {
                answered,
                positions,
            } => match positions.get(result) {
                Some(at) => {
                    for &j in at {
                        answered[j] = true;
                    }
                    true
                }
                None => false,
            },
        }
    }

    fn is_answered(&self, j: usize) -> bool {
        match &self.answered {
            Answered::Few(bits) => bits & (1 << j) != 0,
            Answered::Many { answered, .. } => answered[j],
        }
    }

    fn unanswered(&self) -> Vec<usize> {
        (0..self.calls.len())
            .filter(|&j| !self.is_answered(j))
            .collect()
    }

    fn all_answered(&self) -> bool {
        (0..self.calls.len()).all(|j| self.is_answered(j))
    }
}

fn id(buf: &[u8], range: (usize, usize)) -> &[u8] {
    &buf[range.0..range.1]
}

pub fn find(buf: &[u8], history: &History) -> Orphans {
    let mut orphans = Orphans::default();
    let mut caller: Option<Caller> = None;
    let mut waiting: Vec<Caller> = Vec::new();

    fn close_run<'a>(caller: &mut Option<Caller<'a>>, waiting: &mut Vec<Caller<'a>>) {
        if let Some(c) = caller.take() {
            if !c.all_answered() {
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
                let answered = caller
                    .as_mut()
                    .is_some_and(|c| c.answer(buf, id(buf, result)));
                if !answered {
                    orphans.results.entry(i).or_default().push(j);
                }
            }
            continue;
        }
        close_run(&mut caller, &mut waiting);
        match row.kind {
            RowKind::Assistant => {
                let calls = &history.ids[row.calls.0..row.calls.1];
                if !calls.is_empty() {
                    caller = Some(Caller::new(buf, i, calls));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::scan;
    use crate::testing::{call, chat, conventions, request, ASSISTANT, TOOL, USER};

    /// Positions to remove, by row, sorted by row.
    type ByRow = Vec<(usize, Vec<usize>)>;

    /// The orphans of a chat history: the results and the calls to remove.
    fn orphans(rows: &[Vec<u8>]) -> (ByRow, ByRow) {
        let buf = request(1, rows, &[]);
        let scanned = scan(&buf, 100, &conventions()).expect("decodes");
        let found = find(&buf, &scanned.history);
        let sorted = |m: HashMap<usize, Vec<usize>>| {
            let mut v: Vec<_> = m.into_iter().collect();
            v.sort();
            v
        };
        (sorted(found.results), sorted(found.calls))
    }

    fn asks(ids: &[&[u8]]) -> Vec<u8> {
        let calls: Vec<_> = ids.iter().map(|id| call(id, b"f")).collect();
        chat(ASSISTANT, b"", b"", &calls)
    }

    fn answer(id: &[u8]) -> Vec<u8> {
        chat(TOOL, b"ok", id, &[])
    }

    #[test]
    fn answered_calls_leave_nothing() {
        let rows = [
            chat(USER, b"go", b"", &[]),
            asks(&[b"a", b"b"]),
            answer(b"b"),
            answer(b"a"),
        ];
        assert_eq!(orphans(&rows), (vec![], vec![]));
        assert!(find(
            &[],
            &scan(&request(1, &rows[..1], &[]), 9, &conventions())
                .unwrap()
                .history
        )
        .is_empty());
    }

    #[test]
    fn a_call_without_its_result_is_removed_when_the_turn_ends() {
        let rows = [
            chat(USER, b"go", b"", &[]),
            asks(&[b"a", b"b", b"c"]),
            answer(b"b"),
            chat(USER, b"next", b"", &[]),
        ];
        assert_eq!(orphans(&rows), (vec![], vec![(1, vec![0, 2])]));
        // At the end of the history too.
        assert_eq!(orphans(&rows[..3]), (vec![], vec![(1, vec![0, 2])]));
    }

    #[test]
    fn a_result_without_an_adjacent_call_is_removed() {
        let rows = [
            chat(USER, b"go", b"", &[]),
            answer(b"x"),
            asks(&[b"a"]),
            answer(b"a"),
            chat(ASSISTANT, b"done", b"", &[]),
            answer(b"a"),
        ];
        assert_eq!(orphans(&rows), (vec![(1, vec![0]), (5, vec![0])], vec![]));
    }

    #[test]
    fn a_tool_results_carrier_settles_the_waiting_calls() {
        let carried = [
            chat(USER, b"go", b"", &[]),
            asks(&[b"a"]),
            chat(USER, b"[Tool results] a: ok", b"", &[]),
        ];
        assert_eq!(orphans(&carried), (vec![], vec![]));
        // A plain user row does not.
        let mut plain = carried.clone();
        plain[2] = chat(USER, b"a: ok", b"", &[]);
        assert_eq!(orphans(&plain), (vec![], vec![(1, vec![0])]));
    }
}
