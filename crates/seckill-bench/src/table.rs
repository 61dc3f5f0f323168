//! The comparison table, as plain text.

use crate::row::Row;

const HEADER: [&str; 21] = [
    "variant",
    "requests",
    "req/s",
    "200",
    "403",
    "409",
    "429",
    "5xx",
    "sold",
    "oversold",
    "lost",
    "overlaps",
    "over limit",
    "goodput/s",
    "sell-out s",
    "p50 ms",
    "p99 ms",
    "work ms",
    "cmds/unit",
    "cpu us/unit",
    "remaining",
];

pub fn render(rows: &[Row]) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(cells).collect();
    seckill_load::table(&HEADER, &cells, &[])
}

fn cells(row: &Row) -> Vec<String> {
    let optional =
        |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    let answered: usize = row.statuses.values().sum();
    vec![
        row.scenario.label.clone(),
        (answered + row.transport_errors).to_string(),
        format!("{:.0}", row.throughput),
        row.count(200).to_string(),
        row.count(403).to_string(),
        row.count(409).to_string(),
        row.count(429).to_string(),
        row.server_errors().to_string(),
        row.sold.to_string(),
        row.oversold.to_string(),
        row.lost_updates.to_string(),
        row.lock_overlaps.to_string(),
        // Units sold past the per-user limit, from the orders.
        row.stats["over_limit"]["units"]
            .as_i64()
            .unwrap_or_default()
            .to_string(),
        format!("{:.0}", row.goodput),
        optional(row.sell_out_s, 2),
        format!("{:.2}", row.p50_ms),
        format!("{:.2}", row.p99_ms),
        match (row.work_mean_ms, row.work_p99_ms) {
            (Some(mean), Some(p99)) => format!("{mean:.2}/{p99:.2}"),
            _ => "-".into(),
        },
        optional(row.redis_commands_per_unit, 1),
        cpu_per_unit(row),
        row.remaining.to_string(),
    ]
}

/// Redis CPU per unit sold; on a Cluster, the total and each master's share after it:
/// `9.3 (3.1/3.0/3.2)`.
fn cpu_per_unit(row: &Row) -> String {
    let Some(total) = row.redis_cpu_us_per_unit else {
        return "-".into();
    };
    if row.redis_cpu_us_per_unit_by_master.is_empty() {
        return format!("{total:.1}");
    }
    let each: Vec<String> = row
        .redis_cpu_us_per_unit_by_master
        .iter()
        .map(|(_, cpu)| format!("{cpu:.1}"))
        .collect();
    format!("{total:.1} ({})", each.join("/"))
}
