//! The `chart` subcommand: ask-latency percentiles per group count from open-loop (or
//! postgres) rows, one panel per delay setting, as an SVG (plotters).

use std::path::Path;

use plotters::prelude::*;

use crate::report::{Row, Summary};

/// One panel: a title and its rows (one per group count, ascending).
struct Panel {
    title: String,
    rows: Vec<Row>,
}

/// The rows to plot: median rows where a configuration ran several times, else its single
/// run, of `scenario`, grouped into panels by store, delay and fault.
fn panels(rows: &[Row], scenario: &str) -> Vec<Panel> {
    let chosen: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == scenario && r.ask.is_some())
        .filter(|r| {
            r.aggregate == "median"
                || !rows.iter().any(|m| {
                    m.aggregate == "median"
                        && m.scenario == r.scenario
                        && m.store == r.store
                        && m.groups == r.groups
                        && m.delay_pct == r.delay_pct
                        && m.fault == r.fault
                })
        })
        .collect();
    let mut panels: Vec<Panel> = Vec::new();
    for row in chosen {
        let title = match &row.fault {
            Some(fault) => format!("{}, {}", row.store, fault),
            None if row.scenario == "postgres" => format!("{}, no fault", row.store),
            None => format!("{}% of writes delayed 100-500 ms", row.delay_pct),
        };
        match panels.iter_mut().find(|p| p.title == title) {
            Some(panel) => {
                if !panel.rows.iter().any(|r| r.groups == row.groups) {
                    panel.rows.push(row.clone());
                }
            }
            None => panels.push(Panel {
                title,
                rows: vec![row.clone()],
            }),
        }
    }
    for panel in &mut panels {
        panel.rows.sort_by_key(|r| r.groups);
    }
    panels
}

/// Draws the chart of `scenario` rows from `json` into `out` (SVG).
///
/// # Errors
/// When the JSON cannot be read, holds no rows of the scenario, or the SVG cannot be written.
pub fn draw(json: &Path, out: &Path, scenario: &str) -> Result<(), Box<dyn std::error::Error>> {
    let rows = crate::report::read_json(json)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let panels = panels(&rows, scenario);
    if panels.is_empty() {
        return Err(format!("{} holds no {scenario} rows with latencies", json.display()).into());
    }
    let max_groups = panels
        .iter()
        .flat_map(|p| p.rows.iter().map(|r| r.groups))
        .max()
        .unwrap_or(1)
        .max(2) as f64;
    let width = 460 * panels.len() as u32;
    let root = SVGBackend::new(out, (width.max(600), 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title_area, body) = root.split_vertically(40);
    title_area.titled(
        &format!("{scenario}: ask latency per write-reply-ordering-groups (median of runs)"),
        ("sans-serif", 20),
    )?;
    let areas = body.split_evenly((1, panels.len()));
    type Pick = fn(&Summary) -> f64;
    let series: [(&str, Pick, RGBColor); 4] = [
        ("ask p50", |s| s.p50_ms, RGBColor(31, 119, 180)),
        ("ask p90", |s| s.p90_ms, RGBColor(44, 160, 44)),
        ("ask p99", |s| s.p99_ms, RGBColor(255, 127, 14)),
        ("ask p99.9", |s| s.p999_ms, RGBColor(214, 39, 40)),
    ];
    for (area, panel) in areas.iter().zip(&panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(
                (1f64..max_groups).log_scale(),
                (0.01f64..2000f64).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("write-reply-ordering-groups")
            .y_desc("latency (ms)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| {
                if *y < 1.0 {
                    format!("{y}")
                } else {
                    format!("{y:.0}")
                }
            })
            .draw()?;
        let clamp = |v: f64| v.clamp(0.011, 1999.0);
        for (label, pick, color) in series {
            let points: Vec<(f64, f64)> = panel
                .rows
                .iter()
                .filter_map(|r| Some((f64::from(r.groups), clamp(pick(&r.ask?)))))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        let persist: Vec<(f64, f64)> = panel
            .rows
            .iter()
            .filter_map(|r| Some((f64::from(r.groups), clamp(r.persist?.p99_ms))))
            .collect();
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new(persist, grey.stroke_width(1)))?
            .label("persist p99")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
