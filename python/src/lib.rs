//! `remat_torch._remat`: remat's partitioner for Python. One call: a `remat.joint` (or
//! `remat.graph`) document and a strategy in, remat's JSON report out — in process, no
//! subprocess and no file. The Python side (`remat_torch`) writes the document from
//! PyTorch's joint graph and builds the forward and backward graphs from the report.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use remat_core::{CostModel, OpKind, PGraph, Problem, RegionPolicy, SearchTime, Step, Strategy};

/// Partitions `document` (JSON text) with `strategy` (`"respect"`, `"mincut"`, `"budget=0.5"`,
/// `"budget=64MiB"`, `"peak=64MiB"`, ...) and returns remat's report as JSON text (`saved`,
/// `held`, `offloaded`, `recomputed`, a decision with its reason per value, totals, and the
/// plan's peaks where there is a plan), or as the text table with `text`: what `remat partition`
/// prints for the same document and strategy. `search_seconds`: how long a `peak=` search may
/// look ([`SearchTime`]; 20 s where `None`).
pub fn partition_report(
    document: &str,
    strategy: &str,
    text: bool,
    search_seconds: Option<f64>,
) -> Result<String, String> {
    let (strategy, problem) = problem(document, strategy, search_seconds)?;
    let solved = problem.partition(strategy, &CostModel::default()).map_err(|e| e.to_string())?;
    let report = solved.report();
    Ok(if text { report.text() } else { report.json() })
}

/// The plan remat makes for `document` under `strategy`, as JSON text: `forward` and `backward`,
/// each the program's steps in order as `[kind, id]` pairs (`kind` one of `compute`,
/// `recompute`, `free`, `alias`, `offload`, `fetch`; `id` the node's document id), beside
/// `planned_peak` and `resident_bytes` (the inputs and parameters, counted live from the start;
/// a tangent is a step of the backward), and `report`: the partition's report, as
/// [`partition_report`] gives it (one search for both: `peak=` searches over plans). A caller that
/// runs the graphs itself (`remat_torch` under `aot_eager`) orders them by these programs, so
/// that what it runs is what remat predicted the peak of. `search_seconds` as in
/// [`partition_report`].
pub fn plan_steps(document: &str, strategy: &str, search_seconds: Option<f64>) -> Result<String, String> {
    let (strategy, problem) = problem(document, strategy, search_seconds)?;
    let solved = problem.partition(strategy, &CostModel::default()).map_err(|e| e.to_string())?;
    let plan = solved.plan();
    let program = |steps: &[Step]| -> serde_json::Value {
        steps.iter().map(|&s| serde_json::json!([step_kind(s), doc_id(problem.graph(), s)])).collect()
    };
    let report: serde_json::Value = serde_json::from_str(&solved.report().json()).map_err(|e| e.to_string())?;
    let out = serde_json::json!({
        "report": report,
        "forward": program(plan.forward()),
        "backward": program(plan.backward()),
        "planned_peak": plan.predicted_peak(),
        "resident_bytes": plan.resident_bytes(),
    });
    Ok(out.to_string())
}

/// The strategy `strategy` names and the problem of `document`, its search taking
/// `search_seconds` where given (checked, with the strategy, before the document is read).
fn problem(
    document: &str,
    strategy: &str,
    search_seconds: Option<f64>,
) -> Result<(Strategy, Problem<'static>), String> {
    let strategy: Strategy = strategy.parse().map_err(|e: remat_core::Error| format!("strategy {strategy:?}: {e}"))?;
    let time = search_seconds
        .map(|s| SearchTime::new(s).and_then(|t| t.for_strategy(strategy)))
        .transpose()
        .map_err(|e| format!("search_seconds: {e}"))?;
    let problem = Problem::read(document).map_err(|e| e.to_string())?;
    Ok((
        strategy,
        match time {
            Some(time) => problem.with_search_time(time),
            None => problem,
        },
    ))
}

fn step_kind(step: Step) -> &'static str {
    match step {
        Step::Compute(_) => "compute",
        Step::Recompute(_) => "recompute",
        Step::Free(_) => "free",
        Step::Offload(_) => "offload",
        Step::Fetch(_) => "fetch",
        Step::Alias(_) => "alias",
    }
}

fn doc_id(graph: &PGraph, step: Step) -> serde_json::Value {
    graph.node(step.node()).id.to_json()
}

/// `plan(document, strategy, search_seconds=None) -> str`: see [`plan_steps`]. A document,
/// strategy or time remat refuses raises `ValueError` with remat's message.
#[pyfunction]
#[pyo3(name = "plan", signature = (document, strategy, search_seconds = None))]
fn py_plan(py: Python<'_>, document: &str, strategy: &str, search_seconds: Option<f64>) -> PyResult<String> {
    py.detach(|| plan_steps(document, strategy, search_seconds)).map_err(PyValueError::new_err)
}

/// `partition(document, strategy, text=False, search_seconds=None) -> str`: see
/// [`partition_report`]; with
/// `text`, the report as `remat partition` prints it (a table with a reason per value). A
/// document or strategy remat refuses raises `ValueError` with remat's message (which names the
/// node).
#[pyfunction]
#[pyo3(name = "partition", signature = (document, strategy, text = false, search_seconds = None))]
fn py_partition(
    py: Python<'_>,
    document: &str,
    strategy: &str,
    text: bool,
    search_seconds: Option<f64>,
) -> PyResult<String> {
    // The partition holds no Python object: other Python threads may run meanwhile.
    py.detach(|| partition_report(document, strategy, text, search_seconds)).map_err(PyValueError::new_err)
}

/// What a policy written as in `#[checkpoint(policy = ..)]` (`"save(matmul, sdpa)"`) says, as
/// JSON text: the op kinds under each policy (`"must_save": ["matmul"]`, ...), the value names
/// to save and to offload, `default` (the policy of every other op), `budget`, and `kinds`: every
/// op kind a policy may name. A policy that
/// does not parse or resolve is the message the macro gives at compile time, with each problem
/// underlined (an unknown op kind with "did you mean").
pub fn policy_lists(text: &str) -> Result<String, String> {
    let policy = RegionPolicy::parse(text).map_err(|e| e.to_string())?;
    if policy.is_none() {
        return Err(format!(
            "policy {text:?}: `none` marks no region; to leave PyTorch's checkpointing as it is, give no policy"
        ));
    }
    let t = policy.table();
    let kinds = |list: &[OpKind]| list.iter().map(|k| k.name()).collect::<Vec<_>>();
    Ok(serde_json::json!({
        "must_save": kinds(t.must_save),
        "prefer_save": kinds(t.prefer_save),
        "must_recompute": kinds(t.must_recompute),
        "prefer_recompute": kinds(t.prefer_recompute),
        "must_offload": kinds(t.must_offload),
        "prefer_offload": kinds(t.prefer_offload),
        "save_names": t.save_names,
        "offload_names": t.offload_names,
        "default": t.default.name(),
        "budget": policy.budget(),
        "kinds": OpKind::all().filter(|k| k.info().public).map(OpKind::name).collect::<Vec<_>>(),
    })
    .to_string())
}

/// `policy_lists(text) -> str`: see [`policy_lists`]; a policy remat refuses raises `ValueError`
/// with the macro's message.
#[pyfunction]
#[pyo3(name = "policy_lists")]
fn py_policy_lists(text: &str) -> PyResult<String> {
    policy_lists(text).map_err(PyValueError::new_err)
}

/// The extension module.
#[pymodule]
fn _remat(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_partition, m)?)?;
    m.add_function(wrap_pyfunction!(py_plan, m)?)?;
    m.add_function(wrap_pyfunction!(py_policy_lists, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
