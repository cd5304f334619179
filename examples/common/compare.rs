//! The policy comparison the gpt and llama examples end with: each policy's model measured in
//! the same run (its partition's figures and a few timed steps on a fresh backend), and the
//! table of them.
//!
//! An example includes it with `#[path = "common/compare.rs"] mod compare;`; `examples/common/`
//! has no `main.rs`, so Cargo does not take it for an example of its own.

use remat::prelude::*;
use std::fmt::Write as _;
use std::time::Instant;

/// One policy's figures: a row of the comparison table.
pub struct Row {
    /// The policy as the table names it.
    pub policy: String,
    /// Bytes of activations the partition saves for the backward.
    pub saved_bytes: u64,
    pub predicted_peak: usize,
    pub measured_peak: usize,
    /// Measured peak less inputs, parameters and resident constants: what checkpointing acts on.
    pub activation_peak: usize,
    pub recompute_flops: u64,
    /// The median of the timed steps.
    pub step_seconds: f64,
    /// Host bytes held at once (offloaded values), measured.
    pub host_peak: usize,
}

/// Measures each of `policies`: its model from `build`, `timed_steps` steps at `params` on
/// `feeds` on a fresh backend from `backend`, step `i` seeded with `i`.
pub fn compare<P: std::fmt::Display, B: Backend>(
    policies: impl IntoIterator<Item = P>,
    build: impl Fn(&P) -> Result<Model, remat::Error>,
    backend: &mut dyn FnMut() -> Result<B, remat::Error>,
    params: &Params,
    feeds: &Feeds,
    timed_steps: u64,
) -> Result<Vec<Row>, remat::Error> {
    let mut rows = Vec::new();
    for policy in policies {
        let model = build(&policy)?;
        let mut device = backend()?;
        let mut times = Vec::new();
        let mut last = None;
        for i in 0..timed_steps {
            let start = Instant::now();
            last = Some(model.step_seeded(&mut device, params, feeds, i)?);
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let out = last.expect("at least one timed step");
        let p = model.partition().expect("with_strategy partitions");
        rows.push(Row {
            policy: policy.to_string(),
            saved_bytes: p.saved_bytes,
            predicted_peak: out.predicted_peak,
            measured_peak: out.measured_peak,
            activation_peak: out.measured_peak - model.plan().resident_bytes(),
            recompute_flops: p.recompute_flops,
            step_seconds: times[times.len() / 2],
            host_peak: out.measured_host_peak,
        });
    }
    Ok(rows)
}

/// How the table is laid out: what differs between the examples.
pub struct Table<'a> {
    /// Width of the policy column.
    pub policy_width: usize,
    /// A `host peak` column (for examples with offloading policies).
    pub host_peak: bool,
    /// Lines printed under the table, explaining its columns.
    pub legend: &'a [&'a str],
}

impl Table<'_> {
    /// Prints `rows`: sizes in KiB, ratios against the first row (activation peak and step time).
    pub fn print(&self, rows: &[Row]) {
        let base = &rows[0];
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}x", a / b) } else { "-".to_string() };
        let kib = |b: f64| format!("{:.1}", b / 1024.0);
        let w = self.policy_width;
        let mut head = format!(
            "\n{:<w$} {:>10} {:>11} {:>11} {:>11} {:>7}",
            "policy", "saved KiB", "pred. peak", "meas. peak", "act. peak", "act."
        );
        if self.host_peak {
            let _ = write!(head, " {:>9}", "host peak");
        }
        let _ = write!(head, " {:>10} {:>9} {:>7}", "recompute", "step ms", "time");
        println!("{head}");
        for r in rows {
            let mut line = format!(
                "{:<w$} {:>10} {:>11} {:>11} {:>11} {:>7}",
                r.policy,
                kib(r.saved_bytes as f64),
                kib(r.predicted_peak as f64),
                kib(r.measured_peak as f64),
                kib(r.activation_peak as f64),
                ratio(r.activation_peak as f64, base.activation_peak as f64),
            );
            if self.host_peak {
                let _ = write!(line, " {:>9}", kib(r.host_peak as f64));
            }
            let _ = write!(
                line,
                " {:>7.2}MFL {:>9.2} {:>7}",
                r.recompute_flops as f64 / 1e6,
                r.step_seconds * 1e3,
                ratio(r.step_seconds, base.step_seconds)
            );
            println!("{line}");
        }
        for note in self.legend {
            println!("{note}");
        }
    }
}
