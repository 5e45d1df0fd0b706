//! A self-contained SVG chart of the benchmark: one row of panels per figure
//! (usable capacity, max/mean load, data moved on add and on remove), one column
//! per replica count, bars per method grouped by scenario, for the largest pack
//! count measured. Values beyond a panel's range are drawn to its edge and
//! labelled.

use crate::Row;
use std::fmt::Write as _;

const COLORS: [&str; 10] =
    ["#d62728", "#ff9896", "#1f77b4", "#6baed6", "#9ecae1", "#c6dbef", "#2ca02c", "#9467bd", "#7f7f7f", "#bcbd22"];
const PANEL_W: f64 = 460.0;
const PANEL_H: f64 = 210.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 70.0;
const GAP_X: f64 = 40.0;
const GAP_Y: f64 = 70.0;

struct Metric {
    title: &'static str,
    value: fn(&Row) -> Option<f64>,
    lo: f64,
    hi: f64,
    target: Option<(f64, &'static str)>,
}

pub fn svg(rows: &[Row]) -> String {
    let packs = rows.iter().map(|r| r.packs).max().unwrap_or(0);
    let rows: Vec<&Row> = rows.iter().filter(|r| r.packs == packs).collect();
    let mut methods: Vec<&str> = Vec::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in &rows {
        if !methods.contains(&r.method.as_str()) {
            methods.push(&r.method);
        }
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    let metrics = [
        Metric {
            title: "usable capacity / water-filling optimum",
            value: |r| Some(r.usable),
            lo: 0.5,
            hi: 1.02,
            target: Some((0.99, "target 0.99")),
        },
        Metric {
            title: "max / mean load relative to capacity",
            value: |r| Some(r.max_over_mean),
            lo: 1.0,
            hi: 2.0,
            target: None,
        },
        Metric {
            title: "copies moved on adding a backend / copies it receives",
            value: |r| r.moved_add,
            lo: 0.9,
            hi: 2.0,
            target: Some((1.02, "target 1.02")),
        },
        Metric {
            title: "copies moved on removing a backend / copies it held",
            value: |r| r.moved_remove,
            lo: 0.9,
            hi: 2.0,
            target: Some((1.15, "target 1.15 (R ≤ 2)")),
        },
        Metric {
            title: "pairs moved on removing a backend / least any table moves",
            value: |r| r.least_remove,
            lo: 0.9,
            hi: 2.0,
            target: Some((1.0, "exact 1.00")),
        },
    ];
    let width = LEFT + 3.0 * (PANEL_W + GAP_X);
    let height = TOP + metrics.len() as f64 * (PANEL_H + GAP_Y) + 20.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">coffer placement benchmark: {packs} simulated packs, heterogeneous capacities</text>"#
    );
    // Legend.
    for (i, m) in methods.iter().enumerate() {
        let x = LEFT + i as f64 * 120.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="36" width="12" height="12" fill="{}"/><text x="{}" y="46">{}</text>"#,
            COLORS[i % COLORS.len()],
            x + 16.0,
            esc(m)
        );
    }
    for (mi, metric) in metrics.iter().enumerate() {
        for r in 1..=3u8 {
            let x0 = LEFT + f64::from(r - 1) * (PANEL_W + GAP_X);
            let y0 = TOP + mi as f64 * (PANEL_H + GAP_Y);
            panel(&mut s, x0, y0, metric, r, &rows, &methods, &scenarios);
        }
    }
    s.push_str("</svg>\n");
    s
}

#[allow(clippy::too_many_arguments)]
fn panel(s: &mut String, x0: f64, y0: f64, m: &Metric, r: u8, rows: &[&Row], methods: &[&str], scenarios: &[&str]) {
    let y_of = |v: f64| y0 + PANEL_H - (v.clamp(m.lo, m.hi) - m.lo) / (m.hi - m.lo) * PANEL_H;
    let _ = writeln!(s, r#"<text x="{x0}" y="{}" font-weight="bold">{}, R = {r}</text>"#, y0 - 8.0, esc(m.title));
    let _ =
        writeln!(s, r##"<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#999"/>"##);
    for i in 0..=4 {
        let v = m.lo + (m.hi - m.lo) * f64::from(i) / 4.0;
        let y = y_of(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{v:.2}</text>"##,
            x0 + PANEL_W,
            x0 - 4.0,
            y + 4.0
        );
    }
    let group_w = PANEL_W / scenarios.len() as f64;
    let bar_w = (group_w - 8.0) / methods.len() as f64;
    for (gi, sc) in scenarios.iter().enumerate() {
        let gx = x0 + gi as f64 * group_w + 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
            gx + group_w / 2.0 - 4.0,
            y0 + PANEL_H + 13.0,
            esc(sc)
        );
        for (mi, method) in methods.iter().enumerate() {
            let Some(row) = rows.iter().find(|x| x.scenario == *sc && x.method == *method && x.replicas == r) else {
                continue;
            };
            let Some(v) = (m.value)(row) else { continue };
            let x = gx + mi as f64 * bar_w;
            let (top, base) = (y_of(v), y_of(m.lo));
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {} R={r}: {v:.4}</title></rect>"#,
                (bar_w - 0.5).max(0.5),
                (base - top).max(0.5),
                COLORS[mi % COLORS.len()],
                esc(sc),
                esc(method)
            );
            if v > m.hi {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="7" text-anchor="middle">{v:.1}</text>"#,
                    x + bar_w / 2.0,
                    y0 - 1.0
                );
            }
        }
    }
    if let Some((t, label)) = m.target {
        let y = y_of(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#000" stroke-dasharray="4 3"/><text x="{}" y="{:.1}" text-anchor="end" font-size="9">{}</text>"##,
            x0 + PANEL_W,
            x0 + PANEL_W - 2.0,
            y - 3.0,
            esc(label)
        );
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
