//! Comparing checkpointing policies on one model in one run: each policy's model built, a few
//! steps timed on a fresh backend, and the figures laid out as a table — what every example
//! ends with, so that a user's own comparison reads like theirs.
//!
//! ```no_run
//! # fn main() -> remat_core::Result<()> {
//! # let (params, feeds): (remat_core::Params, remat_core::Feeds) = unimplemented!();
//! # let build = |_: &&str| -> remat_core::Result<remat_core::Model> { unimplemented!() };
//! use remat_core::compare::{compare, Table};
//! let rows = compare(["none", "full"], build, &mut || Ok(remat_core::CpuBackend::new()), &params, &feeds, 5)?;
//! print!("{}", Table::default().render(&rows));
//! # Ok(())
//! # }
//! ```

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::{Feeds, Model, Params};
use std::fmt::Write as _;
use std::time::Instant;

/// One policy's figures: a row of the comparison table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The policy as the table names it.
    pub policy: String,
    /// Bytes of activations the partition saves for the backward.
    pub saved_bytes: u64,
    /// The plan's predicted device peak.
    pub predicted_peak: usize,
    /// The device peak the backend measured on the last timed step.
    pub measured_peak: usize,
    /// Measured peak less inputs, parameters and resident constants: what checkpointing acts on.
    pub activation_peak: usize,
    /// FLOPs the backward runs again.
    pub recompute_flops: u64,
    /// The median of the timed steps, in seconds.
    pub step_seconds: f64,
    /// Host bytes held at once (offloaded values), measured.
    pub host_peak: usize,
}

/// Measures each of `policies`: its model from `build`, then `timed_steps` steps (at least one)
/// at `params` on `feeds`, on a fresh backend from `backend`, step `i` seeded with `i`. The
/// first error — a policy `build` refuses, a backend that cannot start, a step that fails — is
/// returned as it came.
pub fn compare<P: std::fmt::Display, B: Backend>(
    policies: impl IntoIterator<Item = P>,
    build: impl Fn(&P) -> Result<Model>,
    backend: &mut dyn FnMut() -> Result<B>,
    params: &Params,
    feeds: &Feeds,
    timed_steps: u64,
) -> Result<Vec<Row>> {
    if timed_steps == 0 {
        return Err(Error::config("timed_steps", "a comparison times at least one step per policy"));
    }
    policies.into_iter().map(|policy| measure(&policy, &build, backend, params, feeds, timed_steps)).collect()
}

fn measure<P: std::fmt::Display, B: Backend>(
    policy: &P,
    build: &impl Fn(&P) -> Result<Model>,
    backend: &mut dyn FnMut() -> Result<B>,
    params: &Params,
    feeds: &Feeds,
    timed_steps: u64,
) -> Result<Row> {
    let model = build(policy)?;
    let partition = model.partition().ok_or_else(|| {
        Error::config("build", format!("policy {policy}: the model has no partition (built with Model::with_saved)"))
    })?;
    let mut device = backend()?;
    let mut times = Vec::with_capacity(timed_steps as usize);
    let mut out = None;
    for i in 0..timed_steps {
        let start = Instant::now();
        out = Some(model.step_seeded(&mut device, params, feeds, i)?);
        times.push(start.elapsed().as_secs_f64());
    }
    let out = out.expect("timed_steps ≥ 1, checked by compare");
    times.sort_by(f64::total_cmp);
    Ok(Row {
        policy: policy.to_string(),
        saved_bytes: partition.saved_bytes,
        predicted_peak: out.predicted_peak,
        measured_peak: out.measured_peak,
        activation_peak: out.measured_peak.saturating_sub(model.plan().resident_bytes()),
        recompute_flops: partition.recompute_flops,
        step_seconds: times[times.len() / 2],
        host_peak: out.measured_host_peak,
    })
}

/// How the table is laid out.
#[derive(Clone, Debug)]
pub struct Table<'a> {
    /// Width of the policy column.
    pub policy_width: usize,
    /// A `host peak` column (for comparisons with offloading policies).
    pub host_peak: bool,
    /// Lines printed under the table, explaining its columns.
    pub legend: &'a [&'a str],
}

impl Default for Table<'_> {
    fn default() -> Self {
        Table { policy_width: 16, host_peak: false, legend: &[] }
    }
}

impl Table<'_> {
    /// `rows` as text, a line each under a header: sizes in KiB, ratios against the first row
    /// (activation peak and step time; `-` where the first row's is 0), then the legend.
    pub fn render(&self, rows: &[Row]) -> String {
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}x", a / b) } else { "-".to_string() };
        let kib = |b: f64| format!("{:.1}", b / 1024.0);
        let w = self.policy_width;
        let mut text = format!(
            "\n{:<w$} {:>10} {:>11} {:>11} {:>11} {:>7}",
            "policy", "saved KiB", "pred. peak", "meas. peak", "act. peak", "act."
        );
        if self.host_peak {
            let _ = write!(text, " {:>9}", "host peak");
        }
        let _ = writeln!(text, " {:>10} {:>9} {:>7}", "recompute", "step ms", "time");
        let (base_peak, base_time) = rows.first().map_or((0.0, 0.0), |b| (b.activation_peak as f64, b.step_seconds));
        for r in rows {
            let _ = write!(
                text,
                "{:<w$} {:>10} {:>11} {:>11} {:>11} {:>7}",
                r.policy,
                kib(r.saved_bytes as f64),
                kib(r.predicted_peak as f64),
                kib(r.measured_peak as f64),
                kib(r.activation_peak as f64),
                ratio(r.activation_peak as f64, base_peak),
            );
            if self.host_peak {
                let _ = write!(text, " {:>9}", kib(r.host_peak as f64));
            }
            let _ = writeln!(
                text,
                " {:>7.2}MFL {:>9.2} {:>7}",
                r.recompute_flops as f64 / 1e6,
                r.step_seconds * 1e3,
                ratio(r.step_seconds, base_time)
            );
        }
        for note in self.legend {
            let _ = writeln!(text, "{note}");
        }
        text
    }
}
