//! `remat_torch._remat`: remat's partitioner for Python. One call: a `remat.joint` (or
//! `remat.graph`) document and a strategy in, remat's JSON report out — in process, no
//! subprocess and no file. The Python side (`remat_torch`) writes the document from
//! PyTorch's joint graph and builds the forward and backward graphs from the report.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use remat_core::{CostModel, Problem, Strategy};

/// Partitions `document` (JSON text) with `strategy` (`"respect"`, `"mincut"`, `"budget=0.5"`,
/// `"budget=64MiB"`, `"peak=64MiB"`, ...) and returns remat's report as JSON text (`saved`,
/// `held`, `offloaded`, `recomputed`, a decision with its reason per value, totals, and the
/// plan's peaks where there is a plan), or as the text table with `text`: what `remat partition`
/// prints for the same document and strategy.
pub fn partition_report(document: &str, strategy: &str, text: bool) -> Result<String, String> {
    let strategy: Strategy = strategy.parse().map_err(|e: remat_core::Error| format!("strategy {strategy:?}: {e}"))?;
    let problem = Problem::read(document).map_err(|e| e.to_string())?;
    let solved = problem.partition(strategy, &CostModel::default()).map_err(|e| e.to_string())?;
    let report = solved.report();
    Ok(if text { report.text() } else { report.json() })
}

/// `partition(document, strategy, text=False) -> str`: see [`partition_report`]; with
/// `text`, the report as `remat partition` prints it (a table with a reason per value). A
/// document or strategy remat refuses raises `ValueError` with remat's message (which names the
/// node).
#[pyfunction]
#[pyo3(name = "partition", signature = (document, strategy, text = false))]
fn py_partition(py: Python<'_>, document: &str, strategy: &str, text: bool) -> PyResult<String> {
    // The partition holds no Python object: other Python threads may run meanwhile.
    py.detach(|| partition_report(document, strategy, text)).map_err(PyValueError::new_err)
}

/// The extension module.
#[pymodule]
fn _remat(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_partition, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
