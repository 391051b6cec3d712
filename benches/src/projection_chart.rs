//! The chart of the `projection` scenario (plotters, SVG): events/s by `max_concurrency` (1 ms
//! handler, at-least-once) and by group size (exactly-once read model), one line per store,
//! as seed 003's graph of throughput by parallelism.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Row;

/// Draws the chart from the rows in `json` into `out`.
///
/// # Errors
/// When the JSON cannot be read, holds no projection rows, or the SVG cannot be written.
pub fn draw(json: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let rows = crate::report::read_json(json)?;
    draw_rows(&rows, out)
}

/// The median row (or the single run) of each store and N, sorted by N.
fn series(rows: &[Row], store: &str) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.scenario == "projection" && r.store == store)
        .filter(|r| {
            r.aggregate == "median"
                || !rows
                    .iter()
                    .any(|m| m.aggregate == "median" && m.store == r.store && m.groups == r.groups)
        })
        .map(|r| (f64::from(r.groups.max(1)), r.throughput_per_s))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// Draws the chart of `rows` into `out`.
///
/// # Errors
/// When `rows` hold no projection rows, or the SVG cannot be written.
pub fn draw_rows(rows: &[Row], out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let panels = [
        (
            "max-concurrency",
            "at-least-once, handler awaits 1 ms: events/s by max_concurrency",
        ),
        (
            "grouped-exactly-once",
            "exactly-once read model: events/s by group size",
        ),
    ];
    let colors = [RGBColor(31, 119, 180), RGBColor(214, 39, 40)];
    let root = SVGBackend::new(out, (1000, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(36);
    title.titled(
        "persistence-bench projection: 100,000 stored events, 1,000 ids (median of 3 runs)",
        ("sans-serif", 18),
    )?;
    let areas = body.split_evenly((1, panels.len()));
    let mut drew = false;
    for (area, (form, caption)) in areas.iter().zip(panels) {
        let lines: Vec<(&str, Vec<(f64, f64)>)> = ["sqlite", "postgres"]
            .into_iter()
            .map(|db| (db, series(rows, &format!("{db}-{form}"))))
            .filter(|(_, points)| !points.is_empty())
            .collect();
        if lines.is_empty() {
            continue;
        }
        drew = true;
        let max_x = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
            .fold(2.0, f64::max);
        let max_y = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 14))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((1.0..max_x * 1.2).log_scale(), 0.0..max_y * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("N")
            .y_desc("events/s")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()?;
        for ((db, points), color) in lines.into_iter().zip(colors) {
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(db)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    if !drew {
        return Err("no projection rows to draw".into());
    }
    root.present()?;
    Ok(())
}
