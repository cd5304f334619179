//! The memory/compute frontier as an SVG chart: saved bytes against recompute FLOPs, a line
//! through a sweep and labelled marks (strategies, policies). Used by `remat pareto` and the gpt
//! example; plotters' SVG backend needs no system fonts.

use plotters::prelude::*;
use std::path::Path;

/// A point of the chart: bytes (saved, or a peak) and recompute FLOPs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Saved activation bytes, or a planned peak.
    pub bytes: u64,
    /// FLOPs spent recomputing.
    pub flops: u64,
}

/// Draws `line` (sorted by bytes) with a dot at each point, and each `(label, point)` of
/// `marks` as a labelled red marker, to `out`.
pub fn frontier(
    out: &Path,
    title: &str,
    line: &[Point],
    marks: &[(String, Point)],
) -> Result<(), Box<dyn std::error::Error>> {
    frontier_with(out, title, "saved bytes", line, marks)
}

/// [`frontier`] with `x_desc` naming the byte axis (`planned peak` for `remat pareto --peak`).
pub fn frontier_with(
    out: &Path,
    title: &str,
    x_desc: &str,
    line: &[Point],
    marks: &[(String, Point)],
) -> Result<(), Box<dyn std::error::Error>> {
    let xy = |p: &Point| (p.bytes as f64, p.flops as f64);
    let all = line.iter().chain(marks.iter().map(|(_, p)| p));
    let xmax = all.clone().map(|p| p.bytes as f64).fold(1.0, f64::max) * 1.1;
    let ymax = all.map(|p| p.flops as f64).fold(1.0, f64::max) * 1.1;
    let root = SVGBackend::new(out, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(90)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("recompute FLOPs")
        .x_label_formatter(&|v| human(*v, &["B", "KiB", "MiB", "GiB", "TiB"], 1024.0))
        .y_label_formatter(&|v| human(*v, &["", "K", "M", "G", "T"], 1000.0))
        .draw()?;
    let mut sorted: Vec<(f64, f64)> = line.iter().map(xy).collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    chart.draw_series(LineSeries::new(sorted.iter().copied(), BLUE.stroke_width(2)))?;
    chart.draw_series(sorted.iter().map(|&p| Circle::new(p, 3, BLUE.filled())))?;
    chart.draw_series(marks.iter().map(|(label, p)| {
        EmptyElement::at(xy(p))
            + TriangleMarker::new((0, 0), 7, RED.filled())
            + Text::new(label.clone(), (8, -14), ("sans-serif", 14))
    }))?;
    root.present()?;
    Ok(())
}

/// `1536` with units `[B, KiB, ..]` and step 1024 → `1.5KiB`.
fn human(value: f64, units: &[&str], step: f64) -> String {
    let mut v = value;
    let mut unit = 0;
    while v.abs() >= step && unit + 1 < units.len() {
        v /= step;
        unit += 1;
    }
    let digits = if v.fract().abs() < 1e-9 { 0 } else { 1 };
    format!("{v:.digits$}{}", units[unit])
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_units() {
        assert_eq!(super::human(1536.0, &["B", "KiB", "MiB"], 1024.0), "1.5KiB");
        assert_eq!(super::human(80_000_000.0, &["", "K", "M"], 1000.0), "80M");
        assert_eq!(super::human(0.0, &["B"], 1024.0), "0B");
    }
}
