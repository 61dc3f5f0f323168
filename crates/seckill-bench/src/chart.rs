//! An SVG chart of the comparison: goodput per row, and what each row sold that it should
//! not have (oversold units, lost updates, lock overlaps).
//!
//! Written by hand: two panels of horizontal bars need no plotting library, and a plotting
//! crate would bring a font stack for its text.

use std::fmt::Write;

use crate::row::Row;

const ROW_HEIGHT: f64 = 28.0;
const LABEL_WIDTH: f64 = 210.0;
const PANEL_WIDTH: f64 = 330.0;
/// Room after each panel's longest bar for its figures.
const GAP: f64 = 150.0;
const TOP: f64 = 84.0;

pub fn svg(rows: &[Row]) -> String {
    let height = TOP + ROW_HEIGHT * rows.len() as f64 + 40.0;
    let width = LABEL_WIDTH + 2.0 * (PANEL_WIDTH + GAP);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="24" font-size="16" font-weight="bold">seckill: the progression under the same load</text>"#
    );

    let left = LABEL_WIDTH;
    let right = LABEL_WIDTH + PANEL_WIDTH + GAP;
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="52" font-weight="bold">goodput (units really sold per second)</text>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{right}" y="52" font-weight="bold">what went wrong (each bar scaled to its own largest)</text>"#
    );
    let _ = writeln!(
        out,
        r##"<text x="{right}" y="70"><tspan fill="#c0392b">oversold units</tspan> / <tspan fill="#e67e22">lost updates</tspan> / <tspan fill="#8e44ad">lock overlaps</tspan></text>"##
    );

    let max_goodput = rows.iter().map(|r| r.goodput).fold(1.0, f64::max);
    let largest =
        |metric: fn(&Row) -> i64| rows.iter().map(metric).max().unwrap_or(0).max(1) as f64;
    let max_wrong = [
        largest(|r| r.oversold),
        largest(|r| r.lost_updates),
        largest(|r| r.lock_overlaps),
    ];

    for (i, row) in rows.iter().enumerate() {
        let y = TOP + ROW_HEIGHT * i as f64;
        let _ = writeln!(
            out,
            r#"<text x="{x}" y="{ty}" text-anchor="end">{label}</text>"#,
            x = LABEL_WIDTH - 10.0,
            ty = y + 17.0,
            label = escape(&row.scenario.label)
        );
        let w = PANEL_WIDTH * row.goodput / max_goodput;
        // Each variant in its colour from the registry, as on the page.
        let fill = row.scenario.variant.map_or("#7f8c8d", |v| v.spec().color);
        let _ = writeln!(
            out,
            r#"<rect x="{left}" y="{y}" width="{w:.1}" height="20" fill="{fill}"/><text x="{tx:.1}" y="{ty}">{v:.0}</text>"#,
            tx = left + w + 5.0,
            ty = y + 15.0,
            v = row.goodput
        );
        let wrong = [
            (row.oversold, "#c0392b"),
            (row.lost_updates, "#e67e22"),
            (row.lock_overlaps, "#8e44ad"),
        ];
        if wrong.iter().all(|(n, _)| *n == 0) {
            let _ = writeln!(
                out,
                r##"<text x="{right}" y="{ty}" fill="#27ae60">none</text>"##,
                ty = y + 15.0
            );
            continue;
        }
        for (k, (n, colour)) in wrong.iter().enumerate() {
            let by = y + 1.0 + 6.5 * k as f64;
            // A bar for every non-zero figure, however small beside the largest.
            let w = if *n > 0 {
                (PANEL_WIDTH * *n as f64 / max_wrong[k]).max(2.0)
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                r#"<rect x="{right}" y="{by:.1}" width="{w:.1}" height="6" fill="{colour}"/>"#
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{tx:.1}" y="{ty}">{} / {} / {}</text>"#,
            row.oversold,
            row.lost_updates,
            row.lock_overlaps,
            tx = right + PANEL_WIDTH + 8.0,
            ty = y + 15.0
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
