//! SVG charts of the result files (plotters' SVG backend: text is left to
//! the viewer, so no font files are needed).

use std::path::Path;

use plotters::prelude::*;

use super::results::{CompareReport, RateReport};
use super::si;
use crate::systems::System;

/// One colour per system, the same in every chart.
fn colour(system: System) -> RGBColor {
    match system {
        System::Tram => RGBColor(0x1f, 0x77, 0xb4),
        System::Tonic => RGBColor(0xd6, 0x27, 0x28),
        System::Protosocket => RGBColor(0x2c, 0xa0, 0x2c),
        System::Floor | System::FloorPush => RGBColor(0x7f, 0x7f, 0x7f),
        System::FloorTasks => RGBColor(0xb0, 0xb0, 0xb0),
        _ => RGBColor(0x94, 0x67, 0xbd),
    }
}

fn draw_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart: {e:?}")
}

/// Calls per second of every system at every setting, grouped by setting,
/// on a log scale (the systems are orders of magnitude apart).
pub(crate) fn compare(path: &Path, report: &CompareReport) -> anyhow::Result<()> {
    let settings = &report.settings;
    let systems: Vec<System> = settings
        .first()
        .map(|s| s.systems.iter().map(|r| r.system).collect())
        .unwrap_or_default();
    let top = settings
        .iter()
        .flat_map(|s| &s.systems)
        .map(|r| r.rate.max)
        .filter(|r| r.is_finite())
        .fold(1e3, f64::max);
    let width = 160 + 140 * settings.len().max(1) as u32;
    let root = SVGBackend::new(path, (width.max(640), 480)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "tram-bench compare: unary echo, calls/s (median of rounds; whiskers: range)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            0f64..settings.len().max(1) as f64,
            (1e3..top * 2.0).log_scale(),
        )
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("calls/s")
        .y_label_formatter(&|v| si(*v))
        .draw()
        .map_err(draw_err)?;
    let n = systems.len().max(1) as f64;
    let bar = 0.8 / n;
    for (si, system) in systems.iter().enumerate() {
        let c = colour(*system);
        let bars = settings.iter().enumerate().filter_map(|(g, s)| {
            let r = s.systems.get(si)?;
            let x0 = g as f64 + 0.1 + si as f64 * bar;
            Some(Rectangle::new(
                [(x0, 1e3), (x0 + bar * 0.9, r.rate.median.max(1e3))],
                c.filled(),
            ))
        });
        chart
            .draw_series(bars)
            .map_err(draw_err)?
            .label(system.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        let whiskers = settings.iter().enumerate().filter_map(|(g, s)| {
            let r = s.systems.get(si)?;
            let x = g as f64 + 0.1 + si as f64 * bar + bar * 0.45;
            Some(PathElement::new(
                vec![(x, r.rate.min.max(1e3)), (x, r.rate.max.max(1e3))],
                BLACK.stroke_width(1),
            ))
        });
        chart.draw_series(whiskers).map_err(draw_err)?;
    }
    // The settings under their groups.
    for (g, s) in settings.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(g as f64 + 0.5, 1e3));
        root.draw(&Text::new(
            format!("{} B, C={}", s.payload, s.concurrency),
            (x - 40, y + 10),
            ("sans-serif", 13),
        ))
        .map_err(draw_err)?;
    }
    finish(&mut chart, &root)
}

/// Latency percentiles against offered load for every system, one line per
/// system and percentile (p99.9 solid, p50 thin), log scales; the 1 ms and
/// 5 ms lines marked. A system's last point is where it fell behind its
/// schedule (the sweep stops there), which is why its line shoots up.
pub(crate) fn rate(path: &Path, report: &RateReport) -> anyhow::Result<()> {
    let points = report.systems.iter().flat_map(|s| &s.steps);
    let (mut xmin, mut xmax, mut ymax) = (f64::MAX, 1e3f64, 10f64);
    for p in points {
        xmin = xmin.min(p.rate as f64);
        xmax = xmax.max(p.rate as f64);
        ymax = ymax.max(p.latency.p999_us);
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "tram-bench rate: open-loop latency (from intended send time) vs offered load",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (xmin.min(xmax) / 1.3..xmax * 1.3).log_scale(),
            (10f64..(ymax * 2.0).max(20_000.0)).log_scale(),
        )
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("offered calls/s")
        .y_desc("latency")
        .x_label_formatter(&|v| si(*v))
        .y_label_formatter(&|v| micros(*v))
        .draw()
        .map_err(draw_err)?;
    for (limit, label) in [(1_000.0, "1 ms"), (5_000.0, "5 ms")] {
        chart
            .draw_series(LineSeries::new(
                vec![(xmin.min(xmax) / 1.3, limit), (xmax * 1.3, limit)],
                BLACK.mix(0.4).stroke_width(1),
            ))
            .map_err(draw_err)?;
        let (x, y) = chart.backend_coord(&(xmin.min(xmax) / 1.25, limit));
        root.draw(&Text::new(label, (x, y - 14), ("sans-serif", 12)))
            .map_err(draw_err)?;
    }
    for s in &report.systems {
        let c = colour(s.system);
        let p999: Vec<(f64, f64)> = s
            .steps
            .iter()
            .map(|p| (p.rate as f64, p.latency.p999_us.max(10.0)))
            .collect();
        let p50: Vec<(f64, f64)> = s
            .steps
            .iter()
            .map(|p| (p.rate as f64, p.latency.p50_us.max(10.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(p999.clone(), c.stroke_width(2)))
            .map_err(draw_err)?
            .label(format!("{} p99.9", s.system))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(p999.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(draw_err)?;
        chart
            .draw_series(LineSeries::new(p50, c.mix(0.5).stroke_width(1)))
            .map_err(draw_err)?
            .label(format!("{} p50", s.system))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], c.mix(0.5).stroke_width(1))
            });
    }
    finish(&mut chart, &root)
}

/// The p99 of each 100 ms of each system's `fleet` run, on a log scale,
/// with the phases' boundaries and names.
pub(crate) fn fleet(
    path: &Path,
    phase_secs: f64,
    phases: &[&str],
    runs: &[(System, Vec<f64>)],
) -> anyhow::Result<()> {
    let secs = phase_secs * phases.len() as f64;
    let ymax = runs
        .iter()
        .flat_map(|(_, t)| t.iter().copied())
        .fold(1_000f64, f64::max);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "tram-bench fleet: p99 per 100 ms (from intended send time) as the fleet changes",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..secs, (10f64..ymax * 2.0).log_scale())
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("p99")
        .y_label_formatter(&|v| micros(*v))
        .draw()
        .map_err(draw_err)?;
    for (i, name) in phases.iter().enumerate() {
        let x = phase_secs * i as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(x, 10.0), (x, ymax * 2.0)],
                BLACK.mix(0.3).stroke_width(1),
            ))
            .map_err(draw_err)?;
        let (px, py) = chart.backend_coord(&(x, ymax * 1.6));
        root.draw(&Text::new(*name, (px + 4, py), ("sans-serif", 12)))
            .map_err(draw_err)?;
    }
    for (system, timeline) in runs {
        let c = colour(*system);
        let points: Vec<(f64, f64)> = timeline
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64 * 0.1, v.max(10.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))
            .map_err(draw_err)?
            .label(format!("{system} p99"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    finish(&mut chart, &root)
}

/// 250 µs, 1 ms, 2.5 s.
/// Draws the legend and writes the file.
fn finish<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)?;
    root.present().map_err(draw_err)?;
    Ok(())
}

fn micros(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{} ms", us / 1e3)
    } else {
        format!("{us} µs")
    }
}
