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

/// Where the goodput panel starts.
const LEFT: f64 = LABEL_WIDTH;
/// Where the panel of what went wrong starts.
const RIGHT: f64 = LABEL_WIDTH + PANEL_WIDTH + GAP;
/// The colours of oversold units, lost updates and lock overlaps.
const WRONG_COLOURS: [&str; 3] = ["#c0392b", "#e67e22", "#8e44ad"];

/// The chart of `rows`: a line per row, its goodput in the left panel, what it sold that it
/// should not have in the right one.
pub fn svg(rows: &[Row]) -> String {
    let mut out = String::new();
    heading(&mut out, rows.len());
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
        goodput_bar(&mut out, row, y, max_goodput);
        wrong_bars(&mut out, row, y, max_wrong);
    }
    out.push_str("</svg>\n");
    out
}

/// The document's opening for `rows` rows: its size, background, title and the two
/// panels' headings.
fn heading(out: &mut String, rows: usize) {
    let height = TOP + ROW_HEIGHT * rows as f64 + 40.0;
    let width = LABEL_WIDTH + 2.0 * (PANEL_WIDTH + GAP);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="24" font-size="16" font-weight="bold">seckill: the progression under the same load</text>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="52" font-weight="bold">goodput (units really sold per second)</text>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="{RIGHT}" y="52" font-weight="bold">what went wrong (each bar scaled to its own largest)</text>"#
    );
    let _ = writeln!(
        out,
        r##"<text x="{RIGHT}" y="70"><tspan fill="#c0392b">oversold units</tspan> / <tspan fill="#e67e22">lost updates</tspan> / <tspan fill="#8e44ad">lock overlaps</tspan></text>"##
    );
}

/// A row's label and its goodput bar at height `y`, scaled to `max_goodput`.
fn goodput_bar(out: &mut String, row: &Row, y: f64, max_goodput: f64) {
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
        r#"<rect x="{LEFT}" y="{y}" width="{w:.1}" height="20" fill="{fill}"/><text x="{tx:.1}" y="{ty}">{v:.0}</text>"#,
        tx = LEFT + w + 5.0,
        ty = y + 15.0,
        v = row.goodput
    );
}

/// A row's oversold units, lost updates and lock overlaps at height `y`: a bar each,
/// scaled to `max_wrong`'s, and the figures; "none" when all three are 0.
fn wrong_bars(out: &mut String, row: &Row, y: f64, max_wrong: [f64; 3]) {
    let wrong = [row.oversold, row.lost_updates, row.lock_overlaps];
    if wrong.iter().all(|n| *n == 0) {
        let _ = writeln!(
            out,
            r##"<text x="{RIGHT}" y="{ty}" fill="#27ae60">none</text>"##,
            ty = y + 15.0
        );
        return;
    }
    for (k, (n, colour)) in wrong.iter().zip(WRONG_COLOURS).enumerate() {
        let by = y + 1.0 + 6.5 * k as f64;
        // A bar for every non-zero figure, however small beside the largest.
        let w = if *n > 0 {
            (PANEL_WIDTH * *n as f64 / max_wrong[k]).max(2.0)
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            r#"<rect x="{RIGHT}" y="{by:.1}" width="{w:.1}" height="6" fill="{colour}"/>"#
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{tx:.1}" y="{ty}">{} / {} / {}</text>"#,
        row.oversold,
        row.lost_updates,
        row.lock_overlaps,
        tx = RIGHT + PANEL_WIDTH + 8.0,
        ty = y + 15.0
    );
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
