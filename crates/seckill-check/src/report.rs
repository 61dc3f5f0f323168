//! What a check prints: a table with a row per target (or variant), as `seckill-bench`
//! prints its own; each row's findings with the requests that show them; and an SVG of
//! each row's sales over time against its stock.

use std::fmt::Write;

use crate::purchase::{purchases, sales};
use crate::run::Row;
use crate::verdict::Verdict;

const HEADER: [&str; 15] = [
    "target",
    "requests",
    "req/s",
    "sold",
    "sold out",
    "refused",
    "busy",
    "unknown",
    "left",
    "oversold",
    "lost",
    "unaccounted",
    "undersold",
    "p99 ms",
    "verdict",
];

fn cells(row: &Row, verdict: &Verdict) -> Vec<String> {
    let mut latencies: Vec<u128> = row
        .ops
        .iter()
        .map(|op| (op.done - op.sent).as_micros())
        .collect();
    latencies.sort_unstable();
    let p99 = latencies
        .get((latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1)))
        .map_or(0.0, |us| *us as f64 / 1000.0);
    let rate = row.ops.len() as f64 / row.elapsed.as_secs_f64().max(1e-9);
    vec![
        row.label.clone(),
        row.ops.len().to_string(),
        format!("{rate:.0}"),
        verdict.sold.to_string(),
        verdict.sold_out.to_string(),
        verdict.refused.to_string(),
        verdict.busy.to_string(),
        verdict.unknown.to_string(),
        row.left.to_string(),
        verdict.oversold.to_string(),
        verdict.lost_updates.to_string(),
        verdict.unaccounted.to_string(),
        verdict.undersold.to_string(),
        format!("{p99:.1}"),
        verdict.conclusion().word().to_owned(),
    ]
}

/// The table, then each row's findings.
pub fn render(rows: &[(Row, Verdict)]) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(|(row, v)| cells(row, v)).collect();
    let mut out = seckill_load::table(&HEADER, &cells, &[]);
    for (row, verdict) in rows {
        findings(&mut out, row, verdict);
    }
    out
}

fn findings(out: &mut String, row: &Row, verdict: &Verdict) {
    let _ = writeln!(out, "\n{}: {}", row.label, verdict.conclusion().word());
    if verdict.unknown > 0 {
        let _ = writeln!(
            out,
            "  {} purchases unknown (no answer, or a status the file does not name, and no later answer to their key): each may have sold; figures with two ends are least..most",
            verdict.unknown
        );
    }
    for line in &row.faults {
        let _ = writeln!(out, "  fault {line}");
    }
    if row.resent > 0 {
        let _ = writeln!(
            out,
            "  {} requests resent with their keys, to settle purchases no answer had settled",
            row.resent
        );
    }
    for finding in &verdict.findings {
        let _ = writeln!(out, "  {}: {}", finding.rule, finding.what);
        for &i in &finding.requests {
            let op = &row.ops[i];
            let status = op.status.map_or("no answer".to_owned(), |s| s.to_string());
            let _ = writeln!(
                out,
                "    request {} of phase {}: u{}{} sent at {:.1} ms, {status} at {:.1} ms{}",
                op.n,
                op.phase,
                op.buyer,
                op.key
                    .as_ref()
                    .map_or(String::new(), |k| format!(" key {k}")),
                op.sent.as_secs_f64() * 1e3,
                op.done.as_secs_f64() * 1e3,
                op.order
                    .as_ref()
                    .map_or(String::new(), |o| format!(" order {o}")),
            );
        }
    }
}

/// Each row's acknowledged sales over time (a step line), its stock (dashed) and its
/// unknown answers (red ticks), one panel a row.
pub fn svg(rows: &[(Row, Verdict)]) -> String {
    let (w, h, pad) = (640.0, 140.0, 30.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" font-family="sans-serif" font-size="11">"#,
        h * rows.len().max(1) as f64
    );
    for (k, (row, verdict)) in rows.iter().enumerate() {
        let top = h * k as f64;
        let span = row.elapsed.as_secs_f64().max(1e-6);
        let most = (verdict.sold.max(row.initial) as f64 * 1.1).max(1.0);
        let x = |s: f64| pad + (w - 2.0 * pad) * s / span;
        let y = |units: f64| top + h - pad - (h - 2.0 * pad) * units / most;
        let mut done: Vec<f64> = sales(&purchases(&row.ops))
            .iter()
            .map(|&i| row.ops[i].done.as_secs_f64())
            .collect();
        done.sort_by(f64::total_cmp);
        let mut path = format!("M{:.1},{:.1}", x(0.0), y(0.0));
        for (n, at) in done.iter().enumerate() {
            let _ = write!(path, " H{:.1} V{:.1}", x(*at), y((n + 1) as f64));
        }
        let _ = write!(path, " H{:.1}", x(span));
        let colour = match verdict.conclusion() {
            crate::verdict::Conclusion::Pass => "#2a7",
            crate::verdict::Conclusion::Fail => "#c33",
            crate::verdict::Conclusion::Inconclusive => "#d90",
        };
        let _ = writeln!(
            out,
            r##"<text x="{pad}" y="{:.1}">{} — {} sold of {}, {} left: {}</text>"##,
            top + 16.0,
            escape(&row.label),
            verdict.sold,
            row.initial,
            row.left,
            verdict.conclusion().word()
        );
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="4 3"/>"##,
            x(0.0),
            x(span),
            y(row.initial as f64),
            y(row.initial as f64)
        );
        let _ = writeln!(
            out,
            r#"<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#
        );
        for op in row
            .ops
            .iter()
            .filter(|op| op.meaning == crate::target::Meaning::Unknown)
        {
            let at = x(op.done.as_secs_f64());
            let _ = writeln!(
                out,
                r##"<line x1="{at:.1}" x2="{at:.1}" y1="{:.1}" y2="{:.1}" stroke="#c33"/>"##,
                y(0.0),
                y(0.0) + 6.0
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
