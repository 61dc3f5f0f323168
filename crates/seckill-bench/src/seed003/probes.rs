//! The seed's conditions, probed on the running service and its stores: a holder's
//! instance SIGKILLed (no deadlock), a stranger's release through the lock's own API (only
//! the holder unlocks), the store paused under load (fault tolerance). Every probe stops
//! by itself: the killed instance is started again with `--restart-command`, a paused
//! store is let go.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use futures_util::future::join_all;
use seckill::database::Database;
use seckill::database::locks::{AdvisoryLock, UniqueLock};
use seckill::variants::Variant;
use seckill_load::{Control, Load, Method};
use seckill_lock::teaching::SetnxLock;
use seckill_lock::{HolderId, Lock, Namespace, Redlock, TokenLock, WatchdogLocks, ZooKeeper};

use super::{Conditions, STOCK, schemes};
use crate::admin::{Service, Terms};
use crate::scenario::variant;

/// How long the no-deadlock probe waits for another holder to get in after the kill:
/// longer than the default lease (30 s), so that "never" means never.
pub const PATIENCE: Duration = Duration::from_secs(45);

/// How long the fault-tolerance probe keeps the store stopped.
const PAUSE: Duration = Duration::from_secs(2);

/// Every probe, for every scheme the run measures.
pub async fn probe(service: &Service<'_>) -> anyhow::Result<Vec<Conditions>> {
    let args = service.args;
    let locks: Vec<&str> = schemes(args).iter().map(|s| s.variant).collect();
    let mut all: Vec<&str> = locks.clone();
    all.extend(STOCK.iter().map(|s| s.variant));
    let mut found: Vec<Conditions> = all
        .iter()
        .map(|v| Conditions {
            variant: (*v).to_owned(),
            ..Conditions::default()
        })
        .collect();
    fn cell<'a>(found: &'a mut [Conditions], name: &str) -> &'a mut Conditions {
        found
            .iter_mut()
            .find(|c| c.variant == name)
            .expect("a probed variant")
    }

    // Only the holder unlocks: through each lock's own API.
    for name in &locks {
        match stranger_release(args, name).await {
            Ok(Some(freed)) => cell(&mut found, name).stranger_released = Some(freed),
            Ok(None) => {}
            Err(err) => eprintln!("seed003: {name}: the stranger's release not probed: {err:#}"),
        }
    }

    // No deadlock: every holder inside on the first instance, which is killed.
    let mut holders: Vec<&str> = locks.clone();
    holders.push("pg_for_update");
    match dead_holders(service, &holders).await {
        Ok(times) => {
            for (name, time) in holders.iter().zip(times) {
                cell(&mut found, name).dead_holder_s = Some(time.map(|t| t.as_secs_f64()));
            }
        }
        Err(err) => eprintln!("seed003: the dead-holder probe did not run: {err:#}"),
    }

    // Fault tolerance: each one's store paused under load.
    for name in &all {
        match store_paused(service, name).await {
            Ok(Some(seen)) => cell(&mut found, name).store_paused = Some(seen),
            Ok(None) => {}
            Err(err) => eprintln!("seed003: {name}: the store-paused probe failed: {err:#}"),
        }
    }
    Ok(found)
}

/// A key of this run, so that nothing a probe left (a dead holder's row) gets in the way
/// of the next run.
fn fresh(what: &str) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("s3{what}{ms}")
}

/// A holder takes the lock; a stranger (another holder id, the same lock) releases it as
/// the variant releases; then whether a third gets it at once: `Some(true)` when the
/// stranger's release freed a lock it did not hold. `None` when the run has no way to the
/// store (a flag not given).
async fn stranger_release(
    args: &crate::args::BenchArgs,
    name: &str,
) -> anyhow::Result<Option<bool>> {
    let key = fresh(&format!("lock{name}"));
    let redis = || async {
        let client = redis::Client::open(args.redis.redis_url.split(',').next().unwrap_or(""))?;
        anyhow::Ok(client.get_multiplexed_async_connection().await?)
    };
    let freed = match name {
        "setnx" => {
            let conn = redis().await?;
            // The seed's `finally { DEL }`: the variant releases blindly.
            trial(|h| SetnxLock::new(conn.clone(), &key, h).releasing_blindly()).await?
        }
        "token" => {
            let conn = redis().await?;
            trial(|h| TokenLock::new(conn.clone(), &key, Duration::from_secs(30), h)).await?
        }
        "watchdog" => {
            let url = args.redis.redis_url.split(',').next().unwrap_or("");
            let client = redis::Client::open(url)?;
            let conn = client.get_multiplexed_async_connection().await?;
            let locks = WatchdogLocks::builder(client, conn)
                .namespace(Namespace::new("seed003"))
                .start();
            trial(|h| locks.lock_as(&key, h)).await?
        }
        "redlock" => {
            if args.redlock_urls.is_empty() {
                return Ok(None);
            }
            let mut servers = Vec::new();
            for url in &args.redlock_urls {
                let client = redis::Client::open(url.as_str())?;
                servers.push(redis::aio::ConnectionManager::new(client).await?);
            }
            let redlock = Redlock::new(servers);
            trial(|h| redlock.lock_as(&key, Duration::from_secs(30), h)).await?
        }
        "zookeeper" => {
            let Some(hosts) = &args.zookeeper_urls else {
                return Ok(None);
            };
            let zk = Arc::new(ZooKeeper::new(
                hosts,
                Duration::from_secs(4),
                Duration::from_secs(2),
            ));
            let dir = format!("/seckill/seed003/{key}");
            trial(|h| zk.lock_as(&dir, h)).await?
        }
        "pg_unique" | "pg_advisory" => {
            let Some(url) = &args.pg_url else {
                return Ok(None);
            };
            let db = Arc::new(Database::new(url, 4, Duration::from_secs(5))?);
            if name == "pg_unique" {
                trial(|h| UniqueLock::new(db.clone(), &key, h, None)).await?
            } else {
                trial(|h| AdvisoryLock::new(db.clone(), &key, h)).await?
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(freed))
}

/// The trial itself, on locks `make` builds for a holder id.
async fn trial<L: Lock>(make: impl Fn(&HolderId) -> L) -> anyhow::Result<bool> {
    let mut holder = make(&HolderId::new());
    ensure!(holder.take(Duration::ZERO).await?, "the lock was not free");
    let mut stranger = make(&HolderId::new());
    let stranger_said = stranger.give_back().await?;
    let mut third = make(&HolderId::new());
    let freed = third.take(Duration::ZERO).await?;
    if freed {
        third.give_back().await?;
    } else {
        holder.give_back().await?;
    }
    if stranger_said && !freed {
        bail!("the stranger's release said yes, yet the lock stayed held");
    }
    Ok(freed)
}

/// One holder per variant inside on the first instance (`work_ms=5000`, each on a product
/// of its own), then that instance SIGKILLed: for each, how long until the second instance
/// sells (`None`: not within [`PATIENCE`]). The instance is started again after.
async fn dead_holders(
    service: &Service<'_>,
    names: &[&str],
) -> anyhow::Result<Vec<Option<Duration>>> {
    let args = service.args;
    let (Some(restart), [first, second, ..], [pid_file, ..]) = (
        &args.restart_command,
        args.instance_urls.as_slice(),
        args.instance_pid_files.as_slice(),
    ) else {
        bail!("it needs --restart-command, two --instance-urls and --instance-pid-files");
    };
    let (first, second) = (first.trim_end_matches('/'), second.trim_end_matches('/'));
    let products = holders_inside(service, first, names).await?;
    let killed = kill(pid_file)?;
    let times = until_sold(service, second, names, &products, killed).await;
    start_again(service, restart, first).await?;
    for product in &products {
        service.unlock(product).await?;
    }
    Ok(times)
}

/// Sends a holder of each of `names` into the instance at `first`, each on a fresh product,
/// and checks a second later that every one is still inside (its answer not come): the
/// products.
async fn holders_inside(
    service: &Service<'_>,
    first: &str,
    names: &[&str],
) -> anyhow::Result<Vec<String>> {
    let mut products = Vec::new();
    let mut holders = Vec::new();
    for name in names {
        let product = fresh(&format!("dead{}", name.replace('_', "")));
        reset(service, &product, variant(name)).await?;
        // As long as the instances let a request work (--max-work-ms, 5 s by default).
        let url = format!("{first}/deduct_stock/{name}?product={product}&work_ms=5000");
        let http = service.http.clone();
        // The holder: its answer never comes (its instance dies).
        holders.push(tokio::spawn(async move {
            let answer = http.post(url).send().await?;
            anyhow::Ok(format!("{} {}", answer.status(), answer.text().await?))
        }));
        products.push(product);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (name, holder) in names.iter().zip(holders) {
        if holder.is_finished() {
            bail!(
                "{name}'s holder was not inside when the kill came: {:?}",
                holder.await?
            );
        }
    }
    Ok(products)
}

/// SIGKILLs the instance whose pid `pid_file` holds: when.
fn kill(pid_file: &Path) -> anyhow::Result<Instant> {
    let pid = std::fs::read_to_string(pid_file)
        .with_context(|| format!("reading {}", pid_file.display()))?;
    let status = Command::new("kill").args(["-KILL", pid.trim()]).status()?;
    ensure!(status.success(), "kill -KILL {} failed", pid.trim());
    Ok(Instant::now())
}

/// For each of `names`, how long after `killed` the instance at `second` sells its
/// product, the variants asked at once (`None`: not within [`PATIENCE`]).
async fn until_sold(
    service: &Service<'_>,
    second: &str,
    names: &[&str],
    products: &[String],
    killed: Instant,
) -> Vec<Option<Duration>> {
    join_all(names.iter().zip(products).map(|(name, product)| {
        let v = variant(name);
        let mut url = format!("{second}/deduct_stock/{name}?product={product}");
        if v.takes("wait_ms") {
            url.push_str("&wait_ms=1000");
        }
        let http = service.http.clone();
        async move {
            loop {
                let sold = http.post(&url).send().await;
                if sold.is_ok_and(|r| r.status() == 200) {
                    return Some(killed.elapsed());
                }
                if killed.elapsed() > PATIENCE {
                    return None;
                }
                if !v.takes("wait_ms") {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }))
    .await
}

/// Runs `restart` and waits (a minute at most) until the instance at `first` is healthy.
async fn start_again(service: &Service<'_>, restart: &str, first: &str) -> anyhow::Result<()> {
    let status = Command::new("sh").args(["-c", restart]).status()?;
    ensure!(status.success(), "the restart command failed: {restart}");
    let back = Instant::now();
    loop {
        let up = service.http.get(format!("{first}/healthz")).send().await;
        if up.is_ok_and(|r| r.status() == 200) {
            return Ok(());
        }
        ensure!(
            back.elapsed() < Duration::from_secs(60),
            "{first} did not come back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn reset(service: &Service<'_>, product: &str, variant: Variant) -> anyhow::Result<()> {
    let terms = Terms {
        stock: 100_000,
        shards: 1,
        per_user: 0,
        orders: false,
        in_database: variant.spec().stock_in_database,
    };
    service.reset_with(product, terms).await
}

/// The processes of the store `name` keeps its lock (or stock) in, to pause: Redis (the
/// one server, named by its INFO), every PostgreSQL process (the postmaster first, so
/// that it forks nothing new, then its children), one
/// ZooKeeper server and one Redlock server of their ensembles — a minority, which they are
/// built to survive.
async fn store_pids(args: &crate::args::BenchArgs, name: &str) -> anyhow::Result<Option<Vec<i32>>> {
    let pids = match name {
        "zookeeper" => args.zookeeper_pids.first().map(|p| vec![*p as i32]),
        "redlock" => args.redlock_pids.first().map(|p| vec![*p as i32]),
        n if n.starts_with("pg_") => args.postgres_pid.map(|postmaster| {
            std::iter::once(postmaster)
                .chain(crate::lock_store::children(postmaster))
                .map(|p| p as i32)
                .collect()
        }),
        _ => {
            let url = args.redis.redis_url.split(',').next().unwrap_or("");
            let mut conn = redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut conn)
                .await?;
            let pid = info
                .lines()
                .find_map(|l| l.strip_prefix("process_id:"))
                .and_then(|p| p.trim().parse().ok())
                .context("INFO server has no process_id")?;
            Some(vec![pid])
        }
    };
    Ok(pids)
}

/// Sends `signal` to every one of `pids`, all of them even when one fails.
fn signal(pids: &[i32], signal: &str) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for pid in pids {
        let sent = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status();
        if !sent.is_ok_and(|s| s.success()) {
            failed.push(*pid);
        }
    }
    ensure!(failed.is_empty(), "kill -{signal} failed for {failed:?}");
    Ok(())
}

/// 20 clients selling (with 20 ms of work where the variant takes it) for five seconds;
/// the store stopped from the first second to the third. What they were answered, and
/// what the audit says after.
async fn store_paused(service: &Service<'_>, name: &str) -> anyhow::Result<Option<String>> {
    let args = service.args;
    let Some(pids) = store_pids(args, name).await? else {
        return Ok(None);
    };
    let v = variant(name);
    let product = fresh(&format!("pause{}", name.replace('_', "")));
    reset(service, &product, v).await?;
    let mut url = format!(
        "{}/deduct_stock/{name}?product={product}",
        args.url.trim_end_matches('/')
    );
    if v.takes("work_ms") {
        url.push_str("&work_ms=20");
    }
    if v.takes("wait_ms") {
        url.push_str("&wait_ms=3000");
    }
    let control = Control::default();
    let load = Load::to(vec![url], Method::Post)
        .requests(1_000_000)
        .concurrency(20);
    let http = service.http.clone();
    let running = {
        let control = control.clone();
        tokio::spawn(async move { load.run(&http, &control).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopped = signal(&pids, "STOP");
    if stopped.is_ok() {
        tokio::time::sleep(PAUSE).await;
    }
    // Every process let go, whatever the stop came to (a backend may have exited between
    // the listing and its signal): a probe never leaves a store stopped.
    let resumed = signal(&pids, "CONT");
    if let Err(err) = stopped {
        control.stop();
        let _ = running.await;
        return Err(err);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    control.stop();
    resumed?;
    let report = running.await?;
    // The answers still in flight when the load stopped settle first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = service.stats_of(&product).await?;
    let field = |f: &str| stats[f].as_i64().unwrap_or_default();
    let mut answers: Vec<String> = report
        .statuses
        .iter()
        .map(|(status, count)| format!("{status}x{count}"))
        .collect();
    if report.transport_errors > 0 {
        answers.push(format!("errors x{}", report.transport_errors));
    }
    Ok(Some(format!(
        "{}; after: {} overlaps, {} oversold, {} lost, slowest {:.1} s",
        answers.join(" "),
        field("lock_overlaps"),
        field("oversold"),
        field("lost_updates"),
        report.slowest().as_secs_f64()
    )))
}
