//! The `turnkeeper._native` Python module: thin bindings over the engine.
//!
//! Every heavy call releases the GIL (`Python::detach`), so the worker pool runs requests on
//! every core. A panic never crosses into Python: it is caught and raised as RuntimeError,
//! which the server answers with INTERNAL.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::history::{self, Violation};
use crate::plan::{self, Plan};
use crate::working::Working;

fn guarded<T>(work: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(work))
        .map_err(|_| PyRuntimeError::new_err("the native engine panicked (a bug)"))
}

type PlanTuple = (
    usize,
    usize,
    Option<usize>,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
);

fn plan_tuple(p: Plan) -> PlanTuple {
    (
        p.drop_start,
        p.drop_stop,
        p.breadcrumb_at,
        p.dropped_turns,
        p.kept_turns,
        p.tokens_before,
        p.tokens_after,
        p.target_tokens,
        p.cut_step,
        p.cut_drop_target,
    )
}

/// A scanned request: the non-history fields' bytes, the history's violations and view.
#[pyclass(frozen, module = "turnkeeper._native")]
struct Scan {
    raw: Py<PyBytes>,
    rest: Vec<(usize, usize)>,
    total_violations: u64,
    violations: Vec<Violation>,
    working: Working,
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

    /// (total, [(rule, path, count)]): at most 100 are named, all are counted.
    fn violations(&self) -> (u64, Vec<(&'static str, String, u64)>) {
        let named = self
            .violations
            .iter()
            .map(|v| (v.rule, v.path.clone(), v.count))
            .collect();
        (self.total_violations, named)
    }

    fn view(&self, py: Python<'_>) -> PyResult<NativeHistory> {
        let working = &self.working;
        let copy = py.detach(|| guarded(|| working.clone()))?;
        Ok(NativeHistory {
            raw: self.raw.clone_ref(py),
            working: copy,
        })
    }
}

/// A valid history with its row view and prices (the `HistoryView` of the native engine).
#[pyclass(frozen, module = "turnkeeper._native")]
struct NativeHistory {
    raw: Py<PyBytes>,
    working: Working,
}

impl NativeHistory {
    fn with(&self, py: Python<'_>, working: Working) -> NativeHistory {
        NativeHistory {
            raw: self.raw.clone_ref(py),
            working,
        }
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

    #[pyo3(signature = (budget, breadcrumb_cost, low_water=1.0, step_budget=None))]
    fn plan_token_budget(
        &self,
        budget: u64,
        breadcrumb_cost: Option<u64>,
        low_water: f64,
        step_budget: Option<u64>,
    ) -> PyResult<PlanTuple> {
        let w = &self.working;
        guarded(|| {
            plan_tuple(plan::token_budget(
                &w.history.rows,
                &w.tokens,
                budget,
                breadcrumb_cost,
                low_water,
                step_budget.unwrap_or(budget),
            ))
        })
    }

    #[pyo3(signature = (limit, breadcrumb_cost, low_water=1.0))]
    fn plan_turn_count(
        &self,
        limit: u64,
        breadcrumb_cost: Option<u64>,
        low_water: f64,
    ) -> PyResult<PlanTuple> {
        let w = &self.working;
        guarded(|| {
            plan_tuple(plan::turn_count(
                &w.history.rows,
                &w.tokens,
                limit,
                breadcrumb_cost,
                low_water,
            ))
        })
    }

    fn plan_row_count(&self, limit: u64) -> PyResult<PlanTuple> {
        let w = &self.working;
        guarded(|| plan_tuple(plan::row_count(&w.history.rows, &w.tokens, limit)))
    }

    /// The history after a plan: rows `drop_start..drop_stop` out, a breadcrumb if asked.
    fn apply(
        &self,
        py: Python<'_>,
        drop_start: usize,
        drop_stop: usize,
        breadcrumb: bool,
        breadcrumb_text: &str,
    ) -> PyResult<NativeHistory> {
        let w = &self.working;
        let plan = Plan {
            drop_start,
            drop_stop,
            breadcrumb_at: breadcrumb.then_some(drop_start),
            dropped_turns: 0,
            kept_turns: 0,
            tokens_before: 0,
            tokens_after: 0,
            target_tokens: 0,
            cut_step: 0,
            cut_drop_target: 0,
        };
        if drop_start > drop_stop || drop_stop > w.history.rows.len() {
            return Err(PyRuntimeError::new_err("a plan outside the history"));
        }
        let text = breadcrumb_text.to_owned();
        let applied = py.detach(|| guarded(|| w.apply(&plan, &text)))?;
        Ok(self.with(py, applied))
    }

    /// (swept history, [(is_result, row index, tool_call_id, row_removed)]).
    #[allow(clippy::type_complexity)]
    fn sweep(&self, py: Python<'_>) -> PyResult<(NativeHistory, Vec<(bool, usize, String, bool)>)> {
        let buf = self.raw.as_bytes(py);
        let w = &self.working;
        let swept = py.detach(|| guarded(|| w.sweep(buf)))?;
        let (working, removals) = swept
            .map_err(|_| PyRuntimeError::new_err("a scanned row no longer decodes (a bug)"))?;
        let removals = removals
            .into_iter()
            .map(|r| {
                let id = String::from_utf8_lossy(&buf[r.id.0..r.id.1]).into_owned();
                (r.result, r.index, id, r.row_removed)
            })
            .collect();
        Ok((self.with(py, working), removals))
    }

    fn history_field<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let buf = self.raw.as_bytes(py);
        let w = &self.working;
        let out = py.detach(|| guarded(|| w.history_field(buf)))?;
        Ok(PyBytes::new(py, &out))
    }

    fn estimates_field<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let w = &self.working;
        let out = py.detach(|| guarded(|| w.estimates_field()))?;
        Ok(PyBytes::new(py, &out))
    }
}

/// Scans a request's bytes with the GIL released; None when they do not decode.
#[pyfunction]
fn scan(py: Python<'_>, raw: &Bound<'_, PyBytes>, max_rows: u64) -> PyResult<Option<Scan>> {
    let buf = raw.as_bytes();
    let scanned = py.detach(|| guarded(|| history::scan(buf, max_rows)))?;
    let Ok(scanned) = scanned else {
        return Ok(None);
    };
    Ok(Some(Scan {
        raw: raw.clone().unbind(),
        rest: scanned.rest,
        total_violations: scanned.violations.total,
        violations: scanned.violations.named,
        working: Working::of(scanned.history),
    }))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add_class::<Scan>()?;
    m.add_class::<NativeHistory>()?;
    Ok(())
}
