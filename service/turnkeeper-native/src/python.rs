//! The `turnkeeper._native` Python module: thin bindings over the engine. Its types are
//! declared for Python in `turnkeeper/_native.pyi` (checked against this module by stubtest).
//!
//! Every heavy call releases the GIL (`Python::detach`), so the worker pool runs requests on
//! every core. A panic never crosses into Python: it is caught and raised as RuntimeError,
//! which the server answers with INTERNAL.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::conventions::{self, Prices, Roles};
use crate::items::{self, FieldRule};
use crate::plan::{self, Layout, Plan};
use crate::rules::{self, Rule};
use crate::scan::{scan_counted, ItemLimit, Refusal};
use crate::sweep::OrphanKind;
use crate::working::Working;

fn guarded<T>(work: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(work))
        .map_err(|_| PyRuntimeError::new_err("the native engine panicked (a bug)"))
}

/// The values the Python side defines and the engine must agree on, handed over once.
#[pyclass(frozen, module = "turnkeeper._native")]
struct Conventions(conventions::Conventions);

#[pymethods]
impl Conventions {
    #[new]
    #[pyo3(signature = (
        *,
        role_system,
        role_user,
        role_assistant,
        role_tool,
        tool_results_prefix,
        parse_error_prefix,
        tool_exchange_summary,
        cleared_tool_result,
        max_named_violations,
        framing_tokens,
        tokens_per_image,
    ))]
    #[allow(clippy::too_many_arguments)] // keyword-only: each one is named at the call
    fn new(
        role_system: i32,
        role_user: i32,
        role_assistant: i32,
        role_tool: i32,
        tool_results_prefix: String,
        parse_error_prefix: String,
        tool_exchange_summary: (String, String),
        cleared_tool_result: (String, String),
        max_named_violations: usize,
        framing_tokens: u64,
        tokens_per_image: u64,
    ) -> Self {
        Conventions(conventions::Conventions {
            roles: Roles {
                system: role_system,
                user: role_user,
                assistant: role_assistant,
                tool: role_tool,
            },
            tool_results_prefix,
            parse_error_prefix,
            exchange_summary: tool_exchange_summary,
            cleared_result: cleared_tool_result,
            max_named_violations,
            prices: Prices {
                framing_tokens,
                tokens_per_image,
            },
        })
    }
}

/// A violation of a history rule (`HISTORY_RULES` names them); `count` is the row count of
/// `too_many_rows`.
#[pyclass(frozen, get_all, module = "turnkeeper._native")]
struct Violation {
    rule: &'static str,
    path: String,
    count: u64,
}

/// One removal of the sweep, in the terms of trim.proto's `OrphanRemoval`.
#[pyclass(frozen, get_all, module = "turnkeeper._native")]
struct Removal {
    kind: OrphanKind,
    message_index: usize,
    tool_call_id: String,
    row_removed: bool,
}

/// A scanned request: the non-history fields' bytes, the history's violations and view.
#[pyclass(frozen, module = "turnkeeper._native")]
struct Scan {
    raw: Py<PyBytes>,
    rest: Vec<(usize, usize)>,
    /// Every violation found; at most `max_named_violations` of them are named.
    #[pyo3(get)]
    violation_total: u64,
    violations: Vec<rules::Violation>,
    /// Handed to the one view made of this scan (moved, not copied: it is the size of the rows).
    working: Mutex<Option<Working>>,
    conventions: Py<Conventions>,
}

#[pymethods]
impl Scan {
    /// The request without its history: every other top-level occurrence, in order.
    fn rest<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let buf = self.raw.as_bytes(py);
        let mut out = Vec::new();
        for &(s, e) in &self.rest {
            out.extend_from_slice(&buf[s..e]);
        }
        PyBytes::new(py, &out)
    }

    /// The first violations in request order (`violation_total` counts them all).
    fn violations(&self) -> Vec<Violation> {
        self.violations
            .iter()
            .map(|v| Violation {
                rule: v.rule.name(),
                path: v.path.clone(),
                count: v.count,
            })
            .collect()
    }

    /// The history's view; once per scan.
    fn view(&self, py: Python<'_>) -> PyResult<NativeHistory> {
        let taken = self.working.lock().ok().and_then(|mut w| w.take());
        let working =
            taken.ok_or_else(|| PyRuntimeError::new_err("the view of this scan was taken"))?;
        Ok(NativeHistory {
            raw: self.raw.clone_ref(py),
            working: Arc::new(working),
            conventions: self.conventions.clone_ref(py),
        })
    }
}

/// A valid history with its row view and prices (the `HistoryView` of the native engine).
#[pyclass(frozen, module = "turnkeeper._native")]
struct NativeHistory {
    raw: Py<PyBytes>,
    /// Shared by the views that hold the same history: a sweep that removes nothing gives a
    /// view of this one without copying its rows.
    working: Arc<Working>,
    conventions: Py<Conventions>,
}

impl NativeHistory {
    fn with(&self, py: Python<'_>, working: Working) -> NativeHistory {
        self.sharing(py, Arc::new(working))
    }

    fn sharing(&self, py: Python<'_>, working: Arc<Working>) -> NativeHistory {
        NativeHistory {
            raw: self.raw.clone_ref(py),
            working,
            conventions: self.conventions.clone_ref(py),
        }
    }
}

/// One collapsed turn as Python receives it: (input start, input stop, output start, output
/// stop), `protocol.CollapsedTurn`'s fields in order.
type CollapsedTuple = (usize, usize, usize, usize);

/// The turns a projection collapsed, oldest first, read one at a time: a long history collapses
/// a turn every few rows, and a call reads its newest one and, only when a trim dropped turns,
/// the ones before the cut.
#[pyclass(frozen, sequence, module = "turnkeeper._native")]
struct CollapsedTurns {
    turns: Vec<crate::projection::CollapsedTurn>,
}

#[pymethods]
impl CollapsedTurns {
    fn __len__(&self) -> usize {
        self.turns.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<CollapsedTuple> {
        let len = self.turns.len() as isize;
        let at = if index < 0 { index + len } else { index };
        if at < 0 || at >= len {
            return Err(pyo3::exceptions::PyIndexError::new_err(
                "collapsed turn index out of range",
            ));
        }
        let c = &self.turns[at as usize];
        Ok((c.input_start, c.input_stop, c.output_start, c.output_stop))
    }
}

#[pymethods]
impl NativeHistory {
    #[getter]
    fn total_tokens(&self) -> u64 {
        self.working.total_tokens()
    }

    #[getter]
    fn image_tokens(&self) -> u64 {
        self.working.image_tokens()
    }

    #[getter]
    fn turns(&self) -> u64 {
        self.working.turns()
    }

    #[getter]
    fn system_floor_tokens(&self) -> u64 {
        self.working.system_floor_tokens()
    }

    #[getter]
    fn pinned_tokens(&self) -> u64 {
        self.working.pinned_tokens()
    }

    #[getter]
    fn fixed_floor_tokens(&self) -> u64 {
        self.working.fixed_floor_tokens()
    }

    /// The index of the §15.2 summary row, if any.
    #[getter]
    fn summary_row(&self) -> Option<usize> {
        Layout::of(&self.working.history.rows).summary
    }

    /// Every turn (§15.1), oldest first, as (start, stop, pinned).
    fn turn_spans(&self) -> Vec<(usize, usize, bool)> {
        let rows = &self.working.history.rows;
        Layout::of(rows).turn_spans(rows)
    }

    #[getter]
    fn pinned_prefix_breadcrumb(&self) -> Option<usize> {
        self.working.pinned_prefix_breadcrumb()
    }

    #[getter]
    fn rows(&self) -> usize {
        self.working.history.rows.len()
    }

    #[getter]
    fn system_rows(&self) -> usize {
        self.working.system_rows()
    }

    fn tokens_through(&self, index: usize) -> u64 {
        self.working.tokens_through(index)
    }

    /// The §13.1 projection with K = `keep_turns`: the projected history, its collapsed turns
    /// and the rows left out; None when no turn collapses.
    fn project(
        &self,
        py: Python<'_>,
        keep_turns: u64,
    ) -> PyResult<Option<(NativeHistory, CollapsedTurns, usize)>> {
        let w = &self.working;
        let conventions = &self.conventions.get().0;
        let projected = py.detach(|| guarded(|| w.project(keep_turns, conventions)))?;
        Ok(projected.map(|p| {
            let turns = CollapsedTurns { turns: p.collapsed };
            (self.with(py, p.working), turns, p.rows_left_out)
        }))
    }

    /// §13.4: the history with the running turn's oldest tool results cleared and how many
    /// were; None when none is.
    fn clear_tool_results(
        &self,
        py: Python<'_>,
        keep_newest: u64,
        stop_tokens: u64,
    ) -> PyResult<Option<(NativeHistory, u64)>> {
        let buf = self.raw.as_bytes(py);
        let w = &self.working;
        let conventions = &self.conventions.get().0;
        let cleared = py.detach(|| {
            guarded(|| w.clear_tool_results(buf, keep_newest, stop_tokens, conventions))
        })?;
        let cleared = cleared
            .map_err(|_| PyRuntimeError::new_err("a scanned row no longer decodes (a bug)"))?;
        Ok(cleared.map(|(working, n)| (self.with(py, working), n)))
    }

    #[pyo3(signature = (budget, breadcrumb_cost, low_water=1.0, step_budget=None, allow_growth=false))]
    fn plan_token_budget(
        &self,
        budget: u64,
        breadcrumb_cost: Option<u64>,
        low_water: f64,
        step_budget: Option<u64>,
        allow_growth: bool,
    ) -> PyResult<Plan> {
        let w = &self.working;
        let step_budget = step_budget.unwrap_or(budget);
        guarded(|| {
            plan::token_budget(
                &w.history.rows,
                &w.tokens,
                budget,
                breadcrumb_cost,
                low_water,
                step_budget,
                allow_growth,
            )
        })
    }

    #[pyo3(signature = (limit, breadcrumb_cost, low_water=1.0))]
    fn plan_turn_count(
        &self,
        limit: u64,
        breadcrumb_cost: Option<u64>,
        low_water: f64,
    ) -> PyResult<Plan> {
        let w = &self.working;
        guarded(|| {
            plan::turn_count(
                &w.history.rows,
                &w.tokens,
                limit,
                breadcrumb_cost,
                low_water,
            )
        })
    }

    /// `keep`: the limit in effect, never 0 (Python resolves the default).
    fn plan_row_count(&self, keep: u64) -> PyResult<Plan> {
        let w = &self.working;
        guarded(|| plan::row_count(&w.history.rows, &w.tokens, keep))
    }

    /// The history after a plan (§15.1 order): the rows of `drop` (start, stop) out but the
    /// pinned turns `kept_in_drop`, then a breadcrumb if asked, the input's at `breadcrumb_from`
    /// or new.
    fn apply(
        &self,
        py: Python<'_>,
        drop: (usize, usize),
        kept_in_drop: Vec<(usize, usize)>,
        breadcrumb: bool,
        breadcrumb_from: Option<usize>,
        breadcrumb_text: &str,
    ) -> PyResult<NativeHistory> {
        let (drop_start, drop_stop) = drop;
        let w = &self.working;
        let rows = w.history.rows.len();
        let mut at = drop_start;
        let inside = kept_in_drop.iter().all(|&(s, e)| {
            let ordered = at <= s && s <= e;
            at = e;
            ordered
        });
        let crumb_inside = breadcrumb_from.is_none_or(|c| breadcrumb && c < rows);
        if !inside || at > drop_stop || drop_stop > rows || !crumb_inside {
            return Err(PyRuntimeError::new_err("a plan outside the history"));
        }
        let plan = Plan {
            drop_start,
            drop_stop,
            // Only whether there is one matters to `apply`.
            breadcrumb_at: breadcrumb.then_some(drop_start),
            dropped_turns: 0,
            kept_turns: 0,
            tokens_before: 0,
            tokens_after: 0,
            target_tokens: 0,
            cut_step: 0,
            cut_drop_target: 0,
            kept_in_drop,
            breadcrumb_from,
            pinned_turns: 0,
            pinned_tokens: 0,
        };
        let text = breadcrumb_text.to_owned();
        let applied = py.detach(|| guarded(|| w.apply(&plan, &text)))?;
        Ok(self.with(py, applied))
    }

    /// §15.3's summary request: rows `0..stop`, then one user row holding `instruction`.
    fn summary_request(
        &self,
        py: Python<'_>,
        stop: usize,
        instruction: &str,
    ) -> PyResult<NativeHistory> {
        let w = &self.working;
        let conventions = &self.conventions.get().0;
        let request =
            py.detach(|| guarded(|| w.summary_request(stop, instruction, conventions)))?;
        Ok(self.with(py, request))
    }

    /// The swept history and its removals, in input order.
    fn sweep(&self, py: Python<'_>) -> PyResult<(NativeHistory, Vec<Removal>)> {
        let buf = self.raw.as_bytes(py);
        let w = &self.working;
        let swept = py.detach(|| guarded(|| w.sweep_changes(buf)))?;
        let swept = swept
            .map_err(|_| PyRuntimeError::new_err("a scanned row no longer decodes (a bug)"))?;
        let Some((working, removals)) = swept else {
            return Ok((self.sharing(py, Arc::clone(&self.working)), Vec::new()));
        };
        let removals = removals
            .into_iter()
            .map(|r| Removal {
                kind: r.kind,
                message_index: r.index,
                tool_call_id: String::from_utf8_lossy(&buf[r.id.0..r.id.1]).into_owned(),
                row_removed: r.row_removed,
            })
            .collect();
        Ok((self.with(py, working), removals))
    }

    /// Field 1 of a response followed by `tail` (the rest of it), written once, straight into
    /// the bytes object returned, with the GIL released.
    fn history_field<'py>(&self, py: Python<'py>, tail: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let buf = self.raw.as_bytes(py);
        let w = &self.working;
        let len = w.history_field_len();
        PyBytes::new_with(py, len + tail.len(), |out| {
            let (field, rest) = out.split_at_mut(len);
            py.detach(|| {
                guarded(|| {
                    w.write_history_field(buf, field);
                    rest.copy_from_slice(tail);
                })
            })
        })
    }

    fn estimates_field<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let w = &self.working;
        let out = py.detach(|| guarded(|| w.estimates_field()))?;
        Ok(PyBytes::new(py, &out))
    }
}

/// A request refused by the request-item limit: the number of the top-level field in which its
/// items passed the allowance.
#[pyclass(frozen, get_all, module = "turnkeeper._native")]
struct TooManyItems {
    field: u32,
}

/// The request-item limit as Python hands it to `scan`: the schema, the request type's index in
/// it, this request's allowance.
type ItemLimitTuple<'py> = (Bound<'py, ItemSchema>, usize, u64);

/// Scans a request's bytes with the GIL released; None when they do not decode. With `items`,
/// the request's items are counted in the same pass and a request over its allowance gives
/// `TooManyItems` instead.
#[pyfunction]
#[pyo3(signature = (raw, max_rows, conventions, items=None))]
fn scan<'py>(
    py: Python<'py>,
    raw: &Bound<'py, PyBytes>,
    max_rows: u64,
    conventions: &Bound<'py, Conventions>,
    items: Option<ItemLimitTuple<'py>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let buf = raw.as_bytes();
    let handed = conventions.clone().unbind();
    let conventions = &conventions.get().0;
    let limit = items.as_ref().map(|(schema, root, allowed)| ItemLimit {
        schema: &schema.get().0,
        root: *root,
        allowed: *allowed,
    });
    let scanned = py.detach(|| {
        guarded(|| match &limit {
            Some(limit) => scan_counted(buf, max_rows, conventions, limit),
            None => crate::scan::scan(buf, max_rows, conventions).map_err(|_| Refusal::Malformed),
        })
    })?;
    let scanned = match scanned {
        Ok(scanned) => scanned,
        Err(Refusal::Malformed) => return Ok(None),
        Err(Refusal::TooManyItems(field)) => {
            return Ok(Some(Bound::new(py, TooManyItems { field })?.into_any()));
        }
    };
    let scan = Scan {
        raw: raw.clone().unbind(),
        rest: scanned.rest,
        violation_total: scanned.violations.total,
        violations: scanned.violations.named,
        working: Mutex::new(Some(Working::of(scanned.history, conventions.prices))),
        conventions: handed,
    };
    Ok(Some(Bound::new(py, scan)?.into_any()))
}

/// One counted field as Python hands it over: (number, wire type, repeated, packed width, child
/// type index or -1).
type FieldTuple = (u32, u8, bool, u8, i64);

/// The counted fields of every request message type (`limits.item_schema()`), handed over once.
#[pyclass(frozen, module = "turnkeeper._native")]
struct ItemSchema(items::ItemSchema);

#[pymethods]
impl ItemSchema {
    /// `types[i]`: type i's fields as (number, wire type, repeated, packed width, child index,
    /// -1 for none).
    #[new]
    fn new(types: Vec<Vec<FieldTuple>>) -> Self {
        let types = types
            .into_iter()
            .map(|fields| {
                fields
                    .into_iter()
                    .map(|(number, wire_type, repeated, packed, child)| FieldRule {
                        number,
                        wire_type,
                        repeated,
                        packed,
                        child: usize::try_from(child).ok(),
                    })
                    .collect()
            })
            .collect();
        ItemSchema(items::ItemSchema { types })
    }
}

/// The top-level field whose items take the request past `limit` items (None: within it, or
/// the framing breaks first), counted with the GIL released.
#[pyfunction]
fn item_limit_crossing(
    py: Python<'_>,
    raw: &Bound<'_, PyBytes>,
    schema: &ItemSchema,
    root: usize,
    limit: u64,
) -> PyResult<Option<u32>> {
    let buf = raw.as_bytes();
    let schema = &schema.0;
    py.detach(|| guarded(|| items::crossing_field(buf, schema, root, limit)))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add_function(wrap_pyfunction!(item_limit_crossing, m)?)?;
    m.add_class::<ItemSchema>()?;
    m.add_class::<TooManyItems>()?;
    let rules = Rule::ALL.map(Rule::name);
    m.add("HISTORY_RULES", PyTuple::new(m.py(), rules)?)?;
    m.add_class::<Conventions>()?;
    m.add_class::<Scan>()?;
    m.add_class::<Violation>()?;
    m.add_class::<NativeHistory>()?;
    m.add_class::<CollapsedTurns>()?;
    m.add_class::<Plan>()?;
    m.add_class::<Removal>()?;
    m.add_class::<OrphanKind>()?;
    Ok(())
}
