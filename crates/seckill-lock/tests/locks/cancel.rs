//! Cancellation, against a real Redis (three for Redlock) and a real ZooKeeper: every
//! `acquire` and `release` cut short at many points (a `timeout` around it, swept over
//! sub-millisecond steps), and after each cut nothing outlives it — no key, no queue entry, no ZooKeeper node, no
//! waiter asleep past its wait — the lock is free, and two holders were never inside at
//! once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use seckill_lock::{
    Guard, HolderIds, Lock, Namespace, Redlock, RwKeys, RwLock, SetnxLock, Side, TokenLock,
    WatchdogLocks, ZooKeeper,
};
use seckill_testkit::{RedisServer, ZooKeeperEnsemble};
use tokio::sync::oneshot;

/// The cut points: every 37 µs from 0 to about 3 ms — inside the connection's write, the
/// server's answer, the reply's read, the sleep between tries.
fn cuts() -> impl Iterator<Item = Duration> {
    (0..80).map(|n| Duration::from_micros(n * 37))
}

/// How long a background clean-up may take to land, at most.
const SETTLE: Duration = Duration::from_secs(3);

async fn key_count(conn: &mut ConnectionManager) -> u64 {
    redis::cmd("DBSIZE").query_async(conn).await.unwrap()
}

/// Waits until Redis holds no key at all (what a cut left is cleaned up in the
/// background), and fails with `what` if it still does after [`SETTLE`].
async fn settles_empty(conn: &mut ConnectionManager, what: &str) {
    let until = tokio::time::Instant::now() + SETTLE;
    loop {
        let keys = key_count(conn).await;
        if keys == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{what}: {keys} key(s) left behind"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One lock kind, as the sweep makes fresh handles of it.
type Make = Box<dyn Fn(&str) -> Box<dyn Handle>>;

/// A handle of any lock kind, boxed so that one sweep serves them all.
trait Handle: Send {
    /// Acquires as `plan` says, cut at `plan.cut`; once held, does what the plan says
    /// inside, then releases, cut at `plan.release_cut` (zero: the guard is dropped).
    fn round(self: Box<Self>, plan: Plan) -> BoxFuture<'static, Taken>;
}

/// One round of a handle.
struct Plan {
    wait: Duration,
    cut: Duration,
    release_cut: Duration,
    /// Counts who is inside, and overlaps.
    section: Option<Arc<Section>>,
    /// Says when it holds the lock, and holds it until told.
    hold: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
}

impl Plan {
    fn new(wait: Duration, cut: Duration, release_cut: Duration) -> Self {
        Self {
            wait,
            cut,
            release_cut,
            section: None,
            hold: None,
        }
    }
}

#[derive(Default)]
struct Section {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    entered: AtomicUsize,
}

/// What a cut acquire came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// Cut before it answered.
    Cut,
    /// The wait ran out.
    Busy,
    /// Held, then released (or the release cut, or the guard dropped).
    Held,
}

impl<L: Lock> Handle for L {
    fn round(self: Box<Self>, plan: Plan) -> BoxFuture<'static, Taken> {
        Box::pin(async move {
            let acquire = tokio::time::timeout(plan.cut, (*self).acquire(plan.wait));
            let guard: Guard<L> = match acquire.await {
                Err(_) => return Taken::Cut,
                Ok(Ok(None)) => return Taken::Busy,
                Ok(Ok(Some(guard))) => guard,
                Ok(Err(err)) => panic!("the store is up: {err}"),
            };
            if let Some(section) = &plan.section {
                if section.inside.fetch_add(1, Ordering::SeqCst) > 0 {
                    section.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                section.entered.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(200)).await;
                section.inside.fetch_sub(1, Ordering::SeqCst);
            }
            if let Some((held, release)) = plan.hold {
                let _ = held.send(());
                let _ = release.await;
            }
            // Released with its own cut: a cut release finishes in the background; a zero
            // cut drops the guard, which releases in the background too.
            if plan.release_cut.is_zero() {
                drop(guard);
            } else {
                let _ = tokio::time::timeout(plan.release_cut, guard.release()).await;
            }
            Taken::Held
        })
    }
}

/// The lock kinds on one Redis, each at key `name`.
fn redis_kinds(
    conn: &ConnectionManager,
    locks: &WatchdogLocks<ConnectionManager>,
) -> Vec<(&'static str, Make)> {
    let holders = Arc::new(HolderIds::new());
    let mut kinds: Vec<(&'static str, Make)> = Vec::new();
    let (c, h) = (conn.clone(), holders.clone());
    kinds.push((
        "setnx",
        Box::new(move |name: &str| Box::new(SetnxLock::new(c.clone(), name, &h.next()))),
    ));
    let (c, h) = (conn.clone(), holders.clone());
    kinds.push((
        "token",
        Box::new(move |name: &str| {
            Box::new(TokenLock::new(
                c.clone(),
                name,
                Duration::from_secs(30),
                &h.next(),
            ))
        }),
    ));
    for fair in [false, true] {
        let (l, h) = (locks.clone(), holders.clone());
        kinds.push((
            if fair { "watchdog fair" } else { "watchdog" },
            Box::new(move |name: &str| {
                Box::new(l.lock(&format!("{{{name}}}"), &h.next()).fair(fair))
            }),
        ));
    }
    for side in [Side::Read, Side::Write] {
        let (c, h) = (conn.clone(), holders.clone());
        kinds.push((
            if side == Side::Read {
                "rw read"
            } else {
                "rw write"
            },
            Box::new(move |name: &str| {
                let keys = RwKeys::under(&format!("{{{name}}}"));
                Box::new(RwLock::new(
                    c.clone(),
                    keys,
                    &h.next(),
                    side,
                    Duration::from_secs(30),
                ))
            }),
        ));
    }
    kinds
}

async fn redis_with_locks() -> (
    RedisServer,
    ConnectionManager,
    WatchdogLocks<ConnectionManager>,
) {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let locks = WatchdogLocks::start(
        client,
        conn.clone(),
        Duration::from_secs(30),
        Namespace::new("test"),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    (redis, conn, locks)
}

/// A free lock, its acquire cut at each point (and, once held, its release at the same
/// point): after each cut the lock settles free — no key left, not even a fair queue —
/// and the next holder takes it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_acquire_or_release_of_a_free_lock_leaves_nothing_behind() {
    let (_redis, mut conn, locks) = redis_with_locks().await;
    for (kind, make) in redis_kinds(&conn, &locks) {
        let mut seen = [0; 3];
        for (n, cut) in cuts().enumerate() {
            let taken = make("free")
                .round(Plan::new(Duration::from_secs(1), cut, cut))
                .await;
            seen[taken as usize] += 1;
            let what = format!("{kind}, cut at {cut:?}, {taken:?}");
            settles_empty(&mut conn, &what).await;
            let next = make("free").round(Plan::new(Duration::ZERO, Duration::MAX, Duration::MAX));
            assert_eq!(
                next.await,
                Taken::Held,
                "{what}: the next holder did not get in ({n})"
            );
            settles_empty(&mut conn, &what).await;
        }
        // The sweep reached both sides of the answer: some acquires cut, some held.
        assert!(
            seen[Taken::Cut as usize] > 0,
            "{kind}: no cut landed before the answer"
        );
        assert!(
            seen[Taken::Held as usize] > 0,
            "{kind}: no acquire answered within 3 ms"
        );
    }
}

/// A held lock and a waiter whose acquire is cut while it waits (queued, asleep, or
/// trying): once the holder releases, nothing of the waiter is left — no fair queue entry
/// that would make the next waiter wait its turn — and a waiter with a wait of its own
/// meanwhile gets the lock as soon as it is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_while_it_waits_leaves_no_trace_in_the_queue() {
    let (_redis, mut conn, locks) = redis_with_locks().await;
    for (kind, make) in redis_kinds(&conn, &locks) {
        if kind == "rw read" {
            // Readers do not wait for readers.
            continue;
        }
        for cut in cuts().step_by(4) {
            let what = format!("{kind}, waiter cut at {cut:?}");
            let (held, holds) = oneshot::channel();
            let (release, released) = oneshot::channel();
            let mut plan = Plan::new(Duration::ZERO, Duration::MAX, Duration::ZERO);
            plan.hold = Some((held, released));
            let holder = tokio::spawn(make("busy").round(plan));
            holds
                .await
                .unwrap_or_else(|_| panic!("{what}: the holder did not get the free lock"));
            let cut_waiter =
                make("busy").round(Plan::new(Duration::from_secs(5), cut, Duration::MAX));
            assert_eq!(
                cut_waiter.await,
                Taken::Cut,
                "{what}: the waiter got a held lock"
            );
            // A second waiter, with a real wait, comes in behind it.
            let next = make("busy").round(Plan::new(
                Duration::from_secs(5),
                Duration::MAX,
                Duration::MAX,
            ));
            let next = tokio::spawn(next);
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _ = release.send(());
            assert_eq!(holder.await.unwrap(), Taken::Held);
            // The next waiter gets in within its wait (the cut one's queue entry gone),
            // not after a fair queue's patience (5 s) for a waiter that is no more.
            let got = tokio::time::timeout(Duration::from_secs(4), next)
                .await
                .unwrap_or_else(|_| panic!("{what}: the next waiter waited on the cut one"))
                .unwrap();
            assert_eq!(got, Taken::Held, "{what}");
            settles_empty(&mut conn, &what).await;
        }
    }
}

/// Eight contenders on one lock, each acquire (but one in eight) and every release cut at a
/// random point, for a few hundred rounds: never two inside at once, and at the end nothing
/// left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_acquires_and_releases_never_let_two_holders_in() {
    let (_redis, mut conn, locks) = redis_with_locks().await;
    for (kind, make) in redis_kinds(&conn, &locks) {
        if kind == "rw read" {
            continue;
        }
        let section = Arc::new(Section::default());
        let mut contenders = Vec::new();
        for _ in 0..8 {
            // The handles are made here: `make` is not Send.
            let handles: Vec<_> = (0..40).map(|_| make("shared")).collect();
            let section = section.clone();
            contenders.push(tokio::spawn(async move {
                for (round, handle) in handles.into_iter().enumerate() {
                    // One acquire in eight is not cut, so that holders are inside while the
                    // others' cuts land even on a machine too busy to take the lock in 3 ms.
                    let cut = if round % 8 == 7 {
                        Duration::MAX
                    } else {
                        Duration::from_micros(fastrand::u64(0..3_000))
                    };
                    let release_cut = Duration::from_micros(fastrand::u64(0..1_000));
                    let mut plan = Plan::new(Duration::from_millis(50), cut, release_cut);
                    plan.section = Some(section.clone());
                    handle.round(plan).await;
                }
            }));
        }
        for contender in contenders {
            contender.await.unwrap();
        }
        let overlaps = section.overlaps.load(Ordering::SeqCst);
        assert_eq!(overlaps, 0, "{kind}: two holders inside at once");
        assert!(
            section.entered.load(Ordering::SeqCst) > 0,
            "{kind}: nobody ever got in"
        );
        settles_empty(&mut conn, kind).await;
    }
}

/// The ZooKeeper lock on a real ensemble: an acquire cut at each point, on a free lock and
/// behind a holder, leaves no node of its own behind (a node left would block everyone
/// queued after it for as long as the process's session lives), and the next holder gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_zookeeper_acquire_deletes_its_node() {
    let ensemble = ZooKeeperEnsemble::start(1);
    let zk = Arc::new(ZooKeeper::new(
        &ensemble.hosts(),
        Duration::from_secs(10),
        Duration::from_secs(2),
    ));
    let holders = HolderIds::new();
    let dir = "/seckill-lock-test/cancel";
    let children = || async {
        let client = zookeeper_client::Client::connect(&ensemble.hosts())
            .await
            .unwrap();
        match client.list_children(dir).await {
            Ok(children) => children.len(),
            Err(zookeeper_client::Error::NoNode) => 0,
            Err(err) => panic!("listing {dir}: {err}"),
        }
    };
    let settles_empty = |what: String| async move {
        let until = tokio::time::Instant::now() + SETTLE;
        loop {
            let left = children().await;
            if left == 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "{what}: {left} node(s) left behind"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    // Warm the session, so the cuts land in the create and the list, not the connect.
    let warm = zk.lock(dir, &holders.next());
    Box::new(warm)
        .round(Plan::new(Duration::ZERO, Duration::MAX, Duration::MAX))
        .await;
    let mut seen = [0; 3];
    for cut in (0..60).map(|n| Duration::from_micros(n * 100)) {
        let what = format!("free, cut at {cut:?}");
        let taken = Box::new(zk.lock(dir, &holders.next()))
            .round(Plan::new(Duration::from_secs(1), cut, cut))
            .await;
        seen[taken as usize] += 1;
        settles_empty(what.clone()).await;
        let next = Box::new(zk.lock(dir, &holders.next())).round(Plan::new(
            Duration::ZERO,
            Duration::MAX,
            Duration::MAX,
        ));
        assert_eq!(
            next.await,
            Taken::Held,
            "{what}: the next holder did not get in"
        );
        settles_empty(what).await;
    }
    assert!(
        seen[Taken::Cut as usize] > 0,
        "no cut landed before the answer"
    );
    assert!(
        seen[Taken::Held as usize] > 0,
        "no acquire answered within 6 ms"
    );

    // Behind a holder: the cut waiter's node goes, so the next one is first once the
    // holder leaves.
    for cut in (0..20).map(|n| Duration::from_micros(n * 300)) {
        let what = format!("waiting, cut at {cut:?}");
        let (held, holds) = oneshot::channel();
        let (release, released) = oneshot::channel();
        let mut plan = Plan::new(Duration::ZERO, Duration::MAX, Duration::MAX);
        plan.hold = Some((held, released));
        let holder = tokio::spawn(Box::new(zk.lock(dir, &holders.next())).round(plan));
        holds.await.unwrap();
        let cut_waiter = Box::new(zk.lock(dir, &holders.next())).round(Plan::new(
            Duration::from_secs(5),
            cut,
            Duration::MAX,
        ));
        assert_eq!(cut_waiter.await, Taken::Cut, "{what}");
        let _ = release.send(());
        assert_eq!(holder.await.unwrap(), Taken::Held);
        settles_empty(what).await;
    }
}

/// Redlock over three real servers: an acquire cut at each point — while it asks the
/// servers, while it gives back a split vote, between rounds — leaves no key on any of
/// them, and the next holder gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_redlock_acquire_leaves_nothing_on_any_server() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = Redlock::connect(&urls, Duration::from_millis(200)).unwrap();
    let mut conns = Vec::new();
    for server in &servers {
        let client = redis::Client::open(server.url()).unwrap();
        conns.push(ConnectionManager::new(client).await.unwrap());
    }
    let holders = HolderIds::new();
    let ttl = Duration::from_secs(30);
    let mut seen = [0; 3];
    for cut in cuts() {
        let what = format!("redlock, cut at {cut:?}");
        let taken = Box::new(redlock.lock("{redlock}", ttl, true, &holders.next()))
            .round(Plan::new(Duration::from_secs(1), cut, cut))
            .await;
        seen[taken as usize] += 1;
        for conn in &mut conns {
            settles_empty(conn, &what).await;
        }
        let next = Box::new(redlock.lock("{redlock}", ttl, true, &holders.next()))
            .round(Plan::new(Duration::ZERO, Duration::MAX, Duration::MAX));
        assert_eq!(
            next.await,
            Taken::Held,
            "{what}: the next holder did not get in"
        );
        for conn in &mut conns {
            settles_empty(conn, &what).await;
        }
    }
    assert!(
        seen[Taken::Cut as usize] > 0,
        "no cut landed before the answer"
    );
    assert!(
        seen[Taken::Held as usize] > 0,
        "no acquire answered within 3 ms"
    );
}

/// A blind-releasing setnx lock (the seed's `finally { DEL }`) whose acquire is cut short
/// while another holds the lock cleans up only its own value: the holder's lock stays, and
/// nobody else gets in until the holder gives it back.
#[tokio::test]
async fn a_cut_blind_setnx_acquire_leaves_the_holders_lock_alone() {
    let redis = RedisServer::start();
    let conn = redis.conn().await;
    let lock =
        |holder: &str| SetnxLock::new(conn.clone(), "{cut}:lock", holder).releasing_blindly();
    let held = lock("holder")
        .acquire(Duration::ZERO)
        .await
        .unwrap()
        .expect("the lock is free");
    for cut in cuts() {
        let _ = tokio::time::timeout(cut, lock("cut").acquire(Duration::from_millis(50))).await;
    }
    // Every cut acquire's clean-up has landed by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = lock("third").acquire(Duration::ZERO).await.unwrap();
    assert!(
        third.is_none(),
        "a cut acquire's clean-up deleted the holder's lock"
    );
    assert!(held.release().await.unwrap(), "the holder still held it");
}
