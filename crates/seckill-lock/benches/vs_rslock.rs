//! The same job under seckill-lock's watchdog lock and under rslock (the Redlock crate a
//! Rust user would pick), on one real `redis-server`: 200 waiters on one key, each taking
//! the lock, working (no work, or 2 ms), giving it back, again and again for a few seconds.
//! Reported per row, in one run: units (critical sections) per second, the p99 of a unit
//! (from asking for the lock to having given it back), the calls the lock sent Redis per
//! unit (tries, releases, renewals) and the commands Redis ran per unit (those inside the
//! lock's scripts too), from `INFO commandstats`.
//!
//! ```text
//! cargo bench -p seckill-lock --bench vs_rslock            # 5 s a row
//! BENCH_SECONDS=10 cargo bench -p seckill-lock --bench vs_rslock
//! ```
//!
//! rslock runs twice: with its defaults (3 tries, 0–200 ms apart, then the caller's loop
//! asks again), and with tries 0–10 ms apart — about as often as this crate's spinning
//! locks try.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use redis::aio::MultiplexedConnection;
use seckill_lock::{Lock, Namespace, WatchdogLocks};
use seckill_testkit::RedisServer;
use tokio::sync::Mutex;

const WAITERS: usize = 200;

/// Which lock a row runs.
#[derive(Clone, Copy)]
enum Kind {
    Watchdog,
    Rslock { retry_delay: Option<Duration> },
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Watchdog => "seckill-lock watchdog",
            Self::Rslock { retry_delay: None } => "rslock (defaults)",
            Self::Rslock {
                retry_delay: Some(_),
            } => "rslock (tries 0-10 ms apart)",
        }
    }
}

struct Row {
    units: u64,
    seconds: f64,
    p99_ms: f64,
    commands_per_unit: f64,
    sent_per_unit: f64,
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs it too, without: a
    // short pass then, which shows the bench still runs.
    let benching = std::env::args().any(|arg| arg == "--bench");
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if benching { 5.0 } else { 0.2 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let redis = RedisServer::start();
        let kinds = [
            Kind::Watchdog,
            Kind::Rslock { retry_delay: None },
            Kind::Rslock {
                retry_delay: Some(Duration::from_millis(10)),
            },
        ];
        println!(
            "{WAITERS} waiters on one key, {seconds} s a row, one redis-server ({})\n",
            redis.url()
        );
        println!(
            "| lock | work | units/s | p99 (ms) | calls sent / unit | commands Redis ran / unit |"
        );
        println!("|---|---|---:|---:|---:|---:|");
        for work in [Duration::ZERO, Duration::from_millis(2)] {
            for kind in kinds {
                let row = run(&redis, kind, work, Duration::from_secs_f64(seconds)).await;
                println!(
                    "| {} | {} ms | {:.0} | {:.1} | {:.1} | {:.1} |",
                    kind.name(),
                    work.as_millis(),
                    row.units as f64 / row.seconds,
                    row.p99_ms,
                    row.sent_per_unit,
                    row.commands_per_unit
                );
            }
        }
    });
}

/// What Redis ran since the last `CONFIG RESETSTAT`: every command (those inside scripts
/// included), and the calls clients sent (`EVALSHA`, `EVAL`, `SET`: the watchdog lock sends
/// only scripts; rslock takes with `SET` and releases with a script).
async fn commands(conn: &mut MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let (mut all, mut sent) = (0, 0);
    for line in info.lines() {
        let Some((name, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls: u64 = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if matches!(name, "info" | "config|resetstat" | "flushall") {
            continue;
        }
        all += calls;
        if matches!(name, "evalsha" | "eval" | "set") {
            sent += calls;
        }
    }
    (all, sent)
}

async fn run(redis: &RedisServer, kind: Kind, work: Duration, time: Duration) -> Row {
    let mut conn = redis.conn().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let locks = WatchdogLocks::builder(
        client.clone(),
        client.get_multiplexed_async_connection().await.unwrap(),
    )
    .lease(Duration::from_secs(30))
    .namespace(Namespace::new("bench"))
    .start();
    let mut manager = rslock::LockManager::new(vec![redis.url()]);
    if let Kind::Rslock {
        retry_delay: Some(delay),
    } = kind
    {
        manager.set_retry(3, delay);
    }
    let latencies = Arc::new(Mutex::new(Histogram::<u64>::new(3).unwrap()));
    let units = Arc::new(AtomicU64::new(0));
    // Let the subscription start before the first release.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    let started = Instant::now();
    let deadline = started + time;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (locks, manager) = (locks.clone(), manager.clone());
            let (latencies, units) = (latencies.clone(), units.clone());
            tokio::spawn(async move {
                let mut mine = Histogram::<u64>::new(3).unwrap();
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    match kind {
                        Kind::Watchdog => {
                            let lock = locks.lock("{key}");
                            let guard = lock
                                .try_acquire_for(Duration::from_secs(60))
                                .await
                                .unwrap()
                                .expect("within a minute");
                            if !work.is_zero() {
                                tokio::time::sleep(work).await;
                            }
                            guard.release().await.unwrap();
                        }
                        Kind::Rslock { .. } => {
                            let lock = manager
                                .acquire_no_guard("bench:{key}", Duration::from_secs(10))
                                .await
                                .unwrap();
                            if !work.is_zero() {
                                tokio::time::sleep(work).await;
                            }
                            manager.unlock(&lock).await;
                        }
                    }
                    units.fetch_add(1, Ordering::Relaxed);
                    mine.record(asked.elapsed().as_micros() as u64).unwrap();
                }
                latencies.lock().await.add(&mine).unwrap();
            })
        })
        .collect();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    let (all, sent) = commands(&mut conn).await;
    let units = units.load(Ordering::Relaxed);
    let p99_ms = latencies.lock().await.value_at_quantile(0.99) as f64 / 1000.0;
    Row {
        units,
        seconds,
        p99_ms,
        commands_per_unit: all as f64 / units.max(1) as f64,
        sent_per_unit: sent as f64 / units.max(1) as f64,
    }
}
