//! A partial failure seen from outside: the same loads side by side, once with every part
//! healthy and once with one part failed, compared. What failed may slow the sales it owes
//! a confirmation to, and those must fail fast; nothing else may wait for it.
//!
//! Without a clock: [`Phase::assert_isolated`] says what each load of a failed phase was
//! answered, and [`while_a_sale_waits`] who waited for whom — requests answered while a
//! sale is seen blocked in `WAIT` did not wait for it. How fast each was answered is the
//! bench's (`seckill-bench --suite partial`, with its targets).

use std::collections::BTreeSet;
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
    ///
    /// Its verdict is a ratio of rates and a time, which a slower machine fails: the suite's
    /// tests use [`Phase::assert_isolated`] and [`while_a_sale_waits`] instead, and the
    /// rates are `seckill-bench --suite partial`'s, with their targets.
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

    /// What was answered in this phase, with one part failed, whatever the machine's
    /// speed: `/readyz` and `/stats` answered, every time with 200; the other product
    /// answered, with 200 or 503 (the caller says which it expects); the confirmed sales
    /// answered, every one with 200 or 503 (unconfirmed), some with 503; no request left
    /// without an answer. Who waited for whom is [`while_a_sale_waits`]'s.
    pub fn assert_isolated(&self) {
        eprintln!("failed: {}", self.describe());
        for (what, report) in [
            ("/readyz", &self.readyz),
            ("/stats", &self.stats),
            ("the other product", &self.other),
        ] {
            assert!(report.answered() > 0, "{what} was answered: {report:?}");
            assert_eq!(
                neither_sold_nor_unconfirmed(report),
                0,
                "{what}: {:?}",
                report.statuses
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
        assert!(
            confirmed.count(503) > 0,
            "the failed part was seen: {:?}",
            confirmed.statuses
        );
        assert_eq!(
            neither_sold_nor_unconfirmed(confirmed),
            0,
            "confirmed sales: only 200 and 503, every one answered: {confirmed:?}"
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

/// The clients of the Redis at `url` blocked in `WAIT` now, by id (`CLIENT LIST`: a
/// client whose last command is `wait` and whose flags say blocked).
pub async fn blocked_in_wait(url: &str) -> BTreeSet<u64> {
    let mut conn = redis::Client::open(url)
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the Redis holding the WAIT");
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .expect("CLIENT LIST");
    clients
        .lines()
        .filter_map(|client| {
            let field = |name: &str| {
                client
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix(name))
                    .unwrap_or_default()
            };
            let blocked = field("cmd=") == "wait" && field("flags=").contains('b');
            blocked.then(|| field("id=").parse().ok()).flatten()
        })
        .collect()
}

/// An instance's flags for [`while_a_sale_waits`]: one replica confirms each sale, its
/// `WAIT` longer than a test (20 s; the Redis timeout above it, the request timeout above
/// six of those), so that a sale waiting for a stopped replica is answered only once the
/// replica is let go; one confirmation connection per master.
pub const PATIENT_WAIT: [&str; 10] = [
    "--redis-wait-replicas",
    "1",
    "--redis-wait-timeout-ms",
    "20000",
    "--redis-timeout-ms",
    "22000",
    "--request-timeout-ms",
    "160000",
    "--confirm-connections",
    "1",
];

/// What answered while a sale waited for its confirmation.
pub struct WhileWaiting {
    /// The sale that waits; answered once the caller lets its replica confirm it.
    pub sale: tokio::task::JoinHandle<(u16, serde_json::Value)>,
    /// `/readyz`, `/stats?product=<product>` and the other product's sale, answered while
    /// the sale still waited.
    pub readyz: (u16, serde_json::Value),
    pub stats: (u16, serde_json::Value),
    pub other: (u16, serde_json::Value),
}

/// Who waits for whom, without a clock: one lua sale of `product` sent to `patient` (an
/// instance whose `--redis-wait-timeout-ms` is far longer than the test), seen blocked in
/// `WAIT` on the Redis at `master_url` — which cannot confirm it until the caller lets its
/// replica (or a new one) answer — and meanwhile `/readyz`, `/stats` and a lua sale of
/// `other` sent and answered. The sale must still be waiting once they are: they did not
/// queue behind its `WAIT`. (Had they, they would have been answered only after it — after
/// the caller lets the replica go — and the bounds here, which only say a hang, would fail.)
pub async fn while_a_sale_waits(
    patient: &Api,
    master_url: &str,
    product: &str,
    other: &str,
) -> WhileWaiting {
    // WAITs already blocked (another instance's) are not this sale's.
    let before = blocked_in_wait(master_url).await;
    let sale = {
        let api = patient.clone();
        let product = product.to_owned();
        tokio::spawn(async move { api.deduct(&product, "lua?batch=off").await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let waits = loop {
        let new: BTreeSet<u64> = blocked_in_wait(master_url)
            .await
            .difference(&before)
            .copied()
            .collect();
        if !new.is_empty() {
            break new;
        }
        assert!(
            !sale.is_finished(),
            "the sale was answered without waiting for a confirmation: {:?}",
            sale.await
        );
        assert!(
            Instant::now() < deadline,
            "the sale of {product} never blocked in WAIT"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let readyz = patient.get("/readyz").await;
    let stats = patient.get(&format!("/stats?product={product}")).await;
    let other = patient.deduct(other, "lua?batch=off").await;
    assert!(
        !sale.is_finished(),
        "the sale was answered before the requests sent while it waited: they waited for it"
    );
    assert!(
        blocked_in_wait(master_url).await.is_superset(&waits),
        "the sale's WAIT still blocks"
    );
    WhileWaiting {
        sale,
        readyz,
        stats,
        other,
    }
}
