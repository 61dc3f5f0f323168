//! A partial failure seen from outside: the same loads side by side, once with every part
//! healthy and once with one part failed, compared. What failed may slow the sales it owes
//! a confirmation to, and those must fail fast; nothing else may wait for it.

use std::time::{Duration, Instant};

use seckill_load::{Load, Report};

use crate::Api;

/// What the clients of one phase saw, side by side.
pub struct Phase {
    /// Sales that must be confirmed by the part that fails.
    pub confirmed: Report,
    /// Sales of another product, from one client.
    pub other: Report,
    /// `/readyz`, from one client.
    pub readyz: Report,
    /// `/stats`, from one client.
    pub stats: Report,
}

impl Phase {
    /// `confirmed`, sales of product `other` (lua), `/readyz` and `/stats` of product
    /// `stats`, side by side for `time`.
    pub async fn run(api: &Api, confirmed: Load, other: &str, stats: &str, time: Duration) -> Self {
        let loads = vec![
            confirmed,
            api.load(other, "lua"),
            Load::get(api.url("/readyz")),
            Load::get(api.url(&format!("/stats?product={stats}"))),
        ];
        let [confirmed, other, readyz, stats] = api
            .side_by_side(loads, time)
            .await
            .try_into()
            .unwrap_or_else(|_| unreachable!("four loads, four reports"));
        Self {
            confirmed,
            other,
            readyz,
            stats,
        }
    }

    /// What held in this phase, `failed`, against `healthy`: `/readyz`, `/stats` and the
    /// other product are answered as before (at least a quarter as many answers: queued
    /// behind `WAIT`s they get about one in a hundred), `/readyz` and `/stats` with 200; the
    /// confirmed sales are answered 200 or 503, each within one `wait_timeout` (a second of
    /// slack for a busy machine), at least half as many per second.
    pub fn assert_partial(&self, healthy: &Phase, wait_timeout: Duration) {
        for (name, phase) in [("healthy", healthy), ("failed", self)] {
            eprintln!("{name}: {}", phase.describe());
        }
        for (what, up, failed) in [
            ("/readyz", &healthy.readyz, &self.readyz),
            ("/stats", &healthy.stats, &self.stats),
            ("the other product", &healthy.other, &self.other),
        ] {
            assert!(
                failed.answered() * 4 >= up.answered(),
                "{what} is answered, not queued behind WAIT: {} answers with the part failed, {} with it healthy",
                failed.answered(),
                up.answered()
            );
            assert_eq!(
                neither_sold_nor_unconfirmed(failed),
                0,
                "{what}: {:?}",
                failed.statuses
            );
        }
        for (what, report) in [("/readyz", &self.readyz), ("/stats", &self.stats)] {
            assert_eq!(
                report.count(200),
                report.answered(),
                "{what}: {:?}",
                report.statuses
            );
        }
        let confirmed = &self.confirmed;
        assert!(confirmed.count(503) > 0, "{:?}", confirmed.statuses);
        assert_eq!(
            neither_sold_nor_unconfirmed(confirmed),
            0,
            "{:?}",
            confirmed.statuses
        );
        assert!(
            confirmed.throughput() * 2.0 >= healthy.confirmed.throughput(),
            "confirmed sales answered at least half as fast: {:.0}/s with the part failed, {:.0}/s healthy",
            confirmed.throughput(),
            healthy.confirmed.throughput()
        );
        assert!(
            confirmed.slowest() <= wait_timeout + Duration::from_secs(1),
            "each sale answered within one WAIT timeout ({wait_timeout:?}): the slowest took {:?}",
            confirmed.slowest()
        );
    }

    fn describe(&self) -> String {
        let one = |r: &Report| {
            format!(
                "{:?} p99 {:.1} ms slowest {:.1} ms",
                r.statuses,
                r.percentile_ms(0.99),
                r.slowest().as_secs_f64() * 1e3
            )
        };
        format!(
            "confirmed {}; other {}; readyz {}; stats {}",
            one(&self.confirmed),
            one(&self.other),
            one(&self.readyz),
            one(&self.stats)
        )
    }
}

/// Answers other than 200 and 503 (a 503 here is a sale not confirmed), and requests
/// that got no answer.
pub fn neither_sold_nor_unconfirmed(report: &Report) -> usize {
    report.answered() - report.count(200) - report.count(503) + report.transport_errors
}

/// How long until a lua sale of `product` is answered 200, tried every 20 ms; panics
/// after `within`.
pub async fn until_confirmed(api: &Api, product: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if api.deduct(product, "lua").await.0 == 200 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "no confirmed sale of {product} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
