//! `remat_torch._remat`: remat's partitioner for Python. One call: a `remat.joint` (or
//! `remat.graph`) document and a strategy in, remat's JSON report out — in process, no
//! subprocess and no file. The Python side (`remat_torch`) writes the document from
//! PyTorch's joint graph and builds the forward and backward graphs from the report.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use remat_core::Document;
use remat_core::Report;
use remat_core::{partition, PGraph};
use remat_core::{JointGraph, Strategy};

/// Partitions `document` (JSON text) with `strategy` (`"respect"`, `"mincut"`, `"budget=0.5"`,
/// `"budget=64MiB"`, ...) and returns remat's report as JSON text (`saved`, `held`,
/// `offloaded`, `recomputed`, a decision with its reason per value, totals), or as the text
/// table with `text`.
pub fn partition_report(document: &str, strategy: &str, text: bool) -> Result<String, String> {
    let strategy: Strategy = strategy.parse().map_err(|e: String| format!("strategy {strategy:?}: {e}"))?;
    let pg = match remat_core::read_document(document).map_err(|e| e.to_string())? {
        Document::Joint(pg) => pg,
        Document::Graph(graph, ids) => {
            let joint = JointGraph::new(&graph).map_err(|e| e.to_string())?;
            PGraph::from_joint_with_ids(&joint, &ids)
        }
    };
    let p = partition(&pg, strategy).map_err(|e| e.to_string())?;
    let report = Report::new(&pg, &p);
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
