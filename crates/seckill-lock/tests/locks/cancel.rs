//! Cancellation, against a real Redis (three for Redlock) and a real ZooKeeper: every
//! `acquire` and `release` cut short at each of its await points, and after each cut
//! nothing outlives it — no key, no queue entry, no ZooKeeper node, no waiter asleep past
//! its wait — the lock is free, and two holders were never inside at once.
//!
//! The cut points are counted in the future's own polls ([`Cut`]), not in time: the sweep
//! reaches every point of an acquire — before its command is sent, with it on its way,
//! with its answer arrived and not read — on a machine of any speed, and stops once the
//! acquire finishes uncut. (A `timeout` cannot aim below tokio's millisecond, and how many
//! of its cut points land before the answer depends on how fast the machine answers.) The
//! only clocks here bound a hang, and put a waiter's cut while it sleeps.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use seckill_lock::teaching::SetnxLock;
use seckill_lock::{
    Guard, HolderId, Lock, Namespace, Redlock, RwKeys, RwLock, Side, TokenLock, WatchdogLocks,
    ZooKeeper,
};
use seckill_testkit::{RedisServer, ZooKeeperEnsemble};
use tokio::sync::oneshot;

/// Where a future is cut short (dropped), counted in its own polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Never: it runs to its end.
    Never,
    /// `At(2j)`: dropped when it is about to be polled for the (j + 1)-th time — woken,
    /// what it waited for arrived, not yet read (`At(0)`: never polled at all).
    /// `At(2j + 1)`: dropped as soon as its (j + 1)-th poll returns pending — its command
    /// on its way, or it asleep.
    At(u32),
    /// A release only: the guard dropped, not released (it releases in the background).
    Dropped,
}

/// The most cut points a sweep tries before it calls the acquire hung: an acquire of a
/// free lock is answered within a few polls.
const MOST_POINTS: u32 = 400;

/// `future`, cut at `cut`: `None` when it was cut before it finished.
pub(crate) async fn cut<F: Future>(cut: Cut, future: F) -> Option<F::Output> {
    let Cut::At(point) = cut else {
        return Some(future.await);
    };
    let mut future = pin!(future);
    let mut polls = 0;
    std::future::poll_fn(|cx| {
        if point == 2 * polls {
            return Poll::Ready(None);
        }
        polls += 1;
        match future.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending if point == 2 * polls - 1 => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// How long a background clean-up may take to land, at most.
const SETTLE: Duration = Duration::from_secs(3);

/// How long a cut waiter is given to reach its next cut point before it counts as asleep
/// (waiting for the holder) and is cut there. Not a verdict: a cut that lands early lands
/// at an earlier point, and must leave nothing behind all the same.
const ASLEEP: Duration = Duration::from_millis(200);

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
    cut: Cut,
    release_cut: Cut,
    /// Counts who is inside, and overlaps.
    section: Option<Arc<Section>>,
    /// Says when it holds the lock, and holds it until told.
    hold: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
}

impl Plan {
    fn new(wait: Duration, cut: Cut, release_cut: Cut) -> Self {
        Self {
            wait,
            cut,
            release_cut,
            section: None,
            hold: None,
        }
    }

    /// Acquired and released, neither cut.
    fn uncut(wait: Duration) -> Self {
        Self::new(wait, Cut::Never, Cut::Never)
    }
}

#[derive(Default)]
struct Section {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    entered: AtomicUsize,
}

/// What a round came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// The acquire cut before it answered.
    Cut,
    /// The wait ran out.
    Busy,
    /// Held, then released (or the guard dropped).
    Held,
    /// Held, and the release cut before it finished.
    ReleaseCut,
}

impl<L: Lock> Handle for L {
    fn round(self: Box<Self>, plan: Plan) -> BoxFuture<'static, Taken> {
        Box::pin(async move {
            let guard: Guard<L> = match cut(plan.cut, (*self).try_acquire_for(plan.wait)).await {
                None => return Taken::Cut,
                Some(Ok(None)) => return Taken::Busy,
                Some(Ok(Some(guard))) => guard,
                Some(Err(err)) => panic!("the store is up: {err}"),
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
            // Released with its own cut: a cut release finishes in the background; a
            // dropped guard releases in the background too.
            if plan.release_cut == Cut::Dropped {
                drop(guard);
                return Taken::Held;
            }
            match cut(plan.release_cut, guard.release()).await {
                Some(_) => Taken::Held,
                None => Taken::ReleaseCut,
            }
        })
    }
}

/// Sweeps the cut points of a free lock's acquire, then of its release (the acquire
/// uncut), then the guard dropped: `round` runs one round cut as told, and checks what it
/// leaves. Each sweep goes on until a round finishes uncut; one that never does within
/// [`MOST_POINTS`] is a hang. Returns how many acquires were cut.
async fn sweep_free(what: &str, mut round: impl AsyncFnMut(Cut, Cut) -> Taken) -> u32 {
    let (mut cut_acquires, mut cut_releases) = (0, 0);
    for point in 0.. {
        assert!(
            point < MOST_POINTS,
            "{what}: an acquire of a free lock still not answered after {point} cut points"
        );
        match round(Cut::At(point), Cut::Never).await {
            Taken::Cut => cut_acquires += 1,
            Taken::Held => break,
            other => panic!("{what}, acquire cut at {point}, release uncut: {other:?}"),
        }
    }
    for point in 0.. {
        assert!(
            point < MOST_POINTS,
            "{what}: a release still not finished after {point} cut points"
        );
        match round(Cut::Never, Cut::At(point)).await {
            Taken::ReleaseCut => cut_releases += 1,
            Taken::Held => break,
            other => panic!("{what}, release cut at {point}: {other:?}"),
        }
    }
    assert_eq!(
        round(Cut::Never, Cut::Dropped).await,
        Taken::Held,
        "{what}, guard dropped"
    );
    eprintln!("{what}: {cut_acquires} acquires and {cut_releases} releases cut");
    cut_acquires
}

/// The lock kinds on one Redis, each at key `name`.
fn redis_kinds(
    conn: &ConnectionManager,
    locks: &WatchdogLocks<ConnectionManager>,
) -> Vec<(&'static str, Make)> {
    let mut kinds: Vec<(&'static str, Make)> = Vec::new();
    let c = conn.clone();
    kinds.push((
        "setnx",
        Box::new(move |name: &str| Box::new(SetnxLock::new(c.clone(), name, &HolderId::new()))),
    ));
    let c = conn.clone();
    kinds.push((
        "token",
        Box::new(move |name: &str| {
            Box::new(TokenLock::new(
                c.clone(),
                name,
                Duration::from_secs(30),
                &HolderId::new(),
            ))
        }),
    ));
    for fair in [false, true] {
        let l = locks.clone();
        kinds.push((
            if fair { "watchdog fair" } else { "watchdog" },
            Box::new(move |name: &str| Box::new(l.lock(&format!("{{{name}}}")).fair(fair))),
        ));
    }
    for side in [Side::Read, Side::Write] {
        let c = conn.clone();
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
                    &HolderId::new(),
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
    let mut conn = ConnectionManager::new(client.clone()).await.unwrap();
    let locks = WatchdogLocks::builder(client, conn.clone())
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("test"))
        .start();
    // The subscription started (Redis names a client with a pattern), so that no release
    // message is missed: a waiter that missed one would wait out the 30 s lease.
    subscribed(&mut conn).await;
    (redis, conn, locks)
}

/// Waits until Redis has a client subscribed to a pattern (bounded: a hang).
async fn subscribed(conn: &mut ConnectionManager) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(conn)
            .await
            .unwrap();
        if clients
            .split_whitespace()
            .any(|field| field.starts_with("psub=") && field != "psub=0")
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the watchdog locks never subscribed: {clients}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A free lock, its acquire cut at each of its points, then its release at each of its
/// (and the guard dropped): after each cut the lock settles free — no key left, not even
/// a fair queue — and the next holder takes it at once. The sweep reaches both sides of
/// the answer: acquires cut before it, and one that finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_acquire_or_release_of_a_free_lock_leaves_nothing_behind() {
    let (_redis, conn, locks) = redis_with_locks().await;
    for (kind, make) in redis_kinds(&conn, &locks) {
        let mut conn = conn.clone();
        let mut round = async |cut, release_cut| {
            let taken = make("free")
                .round(Plan::new(Duration::from_secs(1), cut, release_cut))
                .await;
            let what =
                format!("{kind}, acquire cut {cut:?}, release cut {release_cut:?}, {taken:?}");
            settles_empty(&mut conn, &what).await;
            let next = make("free").round(Plan::uncut(Duration::ZERO));
            assert_eq!(
                next.await,
                Taken::Held,
                "{what}: the next holder did not get in"
            );
            settles_empty(&mut conn, &what).await;
            taken
        };
        // Five sweeps: a cut just after a poll races the connection's driver, which may or
        // may not have sent the command yet.
        for _ in 0..5 {
            let cut_acquires = sweep_free(kind, &mut round).await;
            assert!(
                cut_acquires > 1,
                "{kind}: the sweep cut no acquire once polled ({cut_acquires} cut)"
            );
        }
    }
}

/// A waiter's acquire on a held lock, `make`d anew each time, cut at each of its points
/// until one finds it asleep (waiting for the holder): `round` gets the cut point, and
/// returns whether the waiter was cut there rather than found asleep. The sweep's points.
async fn sweep_waiting(what: &str, mut round: impl AsyncFnMut(Cut) -> bool) -> u32 {
    for point in 0.. {
        assert!(
            point < MOST_POINTS,
            "{what}: a waiter never fell asleep in {point} cut points"
        );
        if !round(Cut::At(point)).await {
            eprintln!("{what}: cut at {point} points, then asleep");
            return point + 1;
        }
    }
    unreachable!("the loop returns or fails")
}

/// A cut waiter's round: cut at `cut`, or, if it has not got there within [`ASLEEP`],
/// where it sleeps. True when it was cut at `cut`. It must not get the held lock.
async fn cut_waiter(what: &str, waiter: BoxFuture<'static, Taken>) -> bool {
    match tokio::time::timeout(ASLEEP, waiter).await {
        Ok(taken) => {
            assert_eq!(taken, Taken::Cut, "{what}: the waiter got a held lock");
            true
        }
        Err(_) => false,
    }
}

/// A held lock and a waiter whose acquire is cut while it waits (queued, asleep, or
/// trying): once the holder releases, nothing of the waiter is left — no fair queue entry
/// that would make the next waiter wait its turn — and a waiter with a wait of its own
/// meanwhile gets the lock as soon as it is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_while_it_waits_leaves_no_trace_in_the_queue() {
    let (_redis, conn, locks) = redis_with_locks().await;
    for (kind, make) in redis_kinds(&conn, &locks) {
        if kind == "rw read" {
            // Readers do not wait for readers.
            continue;
        }
        let mut conn = conn.clone();
        let points = sweep_waiting(kind, async |cut| {
            let what = format!("{kind}, waiter cut {cut:?}");
            let (held, holds) = oneshot::channel();
            let (release, released) = oneshot::channel();
            let mut plan = Plan::new(Duration::ZERO, Cut::Never, Cut::Dropped);
            plan.hold = Some((held, released));
            let holder = tokio::spawn(make("busy").round(plan));
            holds
                .await
                .unwrap_or_else(|_| panic!("{what}: the holder did not get the free lock"));
            let waiter = make("busy").round(Plan::new(Duration::from_secs(5), cut, Cut::Never));
            let at_its_point = cut_waiter(&what, waiter).await;
            // A second waiter comes in behind it, with a wait shorter than a fair queue's
            // patience (5 s) for a waiter that is no more: were the cut one's entry left,
            // this one would wait behind it until its own wait ran out, and give up.
            let next = tokio::spawn(make("busy").round(Plan::uncut(Duration::from_secs(4))));
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _ = release.send(());
            assert_eq!(holder.await.unwrap(), Taken::Held);
            // It gets the lock within its wait: held, not busy. (The bound says a hang.)
            let got = tokio::time::timeout(Duration::from_secs(30), next)
                .await
                .unwrap_or_else(|_| panic!("{what}: the next waiter hung"))
                .unwrap();
            assert_eq!(
                got,
                Taken::Held,
                "{what}: the next waiter waited on the cut one"
            );
            settles_empty(&mut conn, &what).await;
            at_its_point
        })
        .await;
        assert!(
            points > 2,
            "{kind}: the waiter slept before its first try: {points}"
        );
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
                    // others' cuts land.
                    let cut = if round % 8 == 7 {
                        Cut::Never
                    } else {
                        Cut::At(fastrand::u32(0..16))
                    };
                    let release_cut = match fastrand::u32(0..9) {
                        8 => Cut::Dropped,
                        point => Cut::At(point),
                    };
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
    let warm = zk.lock(dir);
    Box::new(warm).round(Plan::uncut(Duration::ZERO)).await;
    let cut_acquires = sweep_free("zookeeper", async |cut, release_cut| {
        let what = format!("free, acquire cut {cut:?}, release cut {release_cut:?}");
        let taken = Box::new(zk.lock(dir))
            .round(Plan::new(Duration::from_secs(1), cut, release_cut))
            .await;
        settles_empty(what.clone()).await;
        let next = Box::new(zk.lock(dir)).round(Plan::uncut(Duration::ZERO));
        assert_eq!(
            next.await,
            Taken::Held,
            "{what}: the next holder did not get in"
        );
        settles_empty(what).await;
        taken
    })
    .await;
    assert!(
        cut_acquires > 1,
        "the sweep cut no acquire once polled ({cut_acquires} cut)"
    );

    // Behind a holder: the cut waiter's node goes, so the next one is first once the
    // holder leaves.
    let points = sweep_waiting("zookeeper", async |cut| {
        let what = format!("waiting, cut {cut:?}");
        let (held, holds) = oneshot::channel();
        let (release, released) = oneshot::channel();
        let mut plan = Plan::uncut(Duration::ZERO);
        plan.hold = Some((held, released));
        let holder = tokio::spawn(Box::new(zk.lock(dir)).round(plan));
        holds.await.unwrap();
        let waiter =
            Box::new(zk.lock(dir)).round(Plan::new(Duration::from_secs(5), cut, Cut::Never));
        let at_its_point = cut_waiter(&what, waiter).await;
        let _ = release.send(());
        assert_eq!(holder.await.unwrap(), Taken::Held);
        settles_empty(what).await;
        at_its_point
    })
    .await;
    assert!(
        points > 2,
        "the waiter slept before its first try: {points}"
    );
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
    let ttl = Duration::from_secs(30);
    let cut_acquires = sweep_free("redlock", async |cut, release_cut| {
        let what = format!("redlock, acquire cut {cut:?}, release cut {release_cut:?}");
        let taken = Box::new(redlock.lock("{redlock}", ttl).extending(true))
            .round(Plan::new(Duration::from_secs(1), cut, release_cut))
            .await;
        for conn in &mut conns {
            settles_empty(conn, &what).await;
        }
        let next = Box::new(redlock.lock("{redlock}", ttl).extending(true))
            .round(Plan::uncut(Duration::ZERO));
        assert_eq!(
            next.await,
            Taken::Held,
            "{what}: the next holder did not get in"
        );
        for conn in &mut conns {
            settles_empty(conn, &what).await;
        }
        taken
    })
    .await;
    assert!(
        cut_acquires > 1,
        "the sweep cut no acquire once polled ({cut_acquires} cut)"
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
        |holder: &HolderId| SetnxLock::new(conn.clone(), "{cut}:lock", holder).releasing_blindly();
    let held = lock(&HolderId::new())
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is free");
    // Cut at each point of a waiter's spin (its tries and its sleeps between them).
    for point in 0..40 {
        let _ = cut(
            Cut::At(point),
            lock(&HolderId::new()).try_acquire_for(Duration::from_millis(50)),
        )
        .await;
    }
    // Every cut acquire's clean-up has landed by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = lock(&HolderId::new()).try_acquire().await.unwrap();
    assert!(
        third.is_none(),
        "a cut acquire's clean-up deleted the holder's lock"
    );
    assert!(held.release().await.unwrap(), "the holder still held it");
}
