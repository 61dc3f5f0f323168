//! Redlock on five real servers, two of them gone: one killed, one frozen (SIGSTOP: it
//! holds its connections open and answers nothing). Still exact, and no slower for it:
//! the contenders of one process take turns instead of splitting the votes, a round stops
//! listening once its answer is decided, and a silent server is left alone for a while.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use seckill_lock::{Lock, LockError, Redlock};
use seckill_testkit::RedisServer;

const KEY: &str = "test:redlock";

/// Two "instances" (a Redlock each, over the same five servers), 25 contenders in each,
/// every one taking the lock once, doing a little work under it, giving it back: never two
/// holders at once, nothing left behind, and at most three rounds of asking per grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_of_five_servers_gone_fifty_contenders_take_turns_without_overlap() {
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let instances: Vec<Redlock<ConnectionManager>> = (0..2)
        .map(|_| Redlock::connect(&urls, Duration::from_millis(100)).expect("redlock"))
        .collect();
    servers[3].kill();
    servers[4].signal("STOP");

    let (inside, overlaps) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let contenders: Vec<_> = (0..50)
        .map(|n| {
            let mut lock = instances[n % 2].lock(KEY, Duration::from_secs(10));
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            tokio::spawn(async move {
                let held = lock
                    .take(Duration::from_secs(10))
                    .await
                    .expect("a quorum answers");
                assert!(held, "holder-{n} never got the lock");
                if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(
                    lock.give_back().await.expect("released"),
                    "a quorum still had it"
                );
            })
        })
        .collect();
    for contender in contenders {
        contender.await.expect("a contender panicked");
    }
    servers[4].signal("CONT");
    let rounds = set_calls(&servers[0]).await;
    eprintln!("{rounds} SETs on one of the live servers for 50 grants");
    // Each SET is a round of asking. Fifty contenders all asking at once split the votes
    // and ask again and again (about 15 rounds a grant); taking turns, a grant takes one
    // round, or a few when the two instances' heads collide.
    assert!(
        rounds <= 3 * 50,
        "{rounds} rounds for 50 grants: the votes were split"
    );

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    for server in &servers[..3] {
        let left: bool = server.conn().await.exists(KEY).await.unwrap();
        assert!(!left, "the lock was left on :{}", server.port);
    }
}

/// How many `SET`s `server` has run.
async fn set_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
        .and_then(|l| l.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// With too few servers left for a quorum, an acquire that may wait as long as it takes
/// says so at once ([`LockError::NoQuorum`]) instead of asking for ever: the lock cannot be
/// had, whoever holds it. (It used to say so only when its wait ran out, which
/// `Duration::MAX` never does.) The guard's minute is how long a hang is let run before
/// the test calls it one, not a speed.
#[tokio::test]
async fn with_no_quorum_an_acquire_without_a_deadline_fails_at_once() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock: Redlock<ConnectionManager> =
        Redlock::connect(&urls, Duration::from_millis(100)).expect("redlock");
    servers[1].kill();
    servers[2].kill();
    let mut lock = redlock.lock(KEY, Duration::from_secs(10));
    let taken = tokio::time::timeout(Duration::from_secs(60), lock.take(Duration::MAX))
        .await
        .expect("an acquire with no deadline asked for ever while no quorum answered");
    assert!(
        matches!(
            taken,
            Err(LockError::NoQuorum {
                answered: 1,
                servers: 3
            })
        ),
        "{taken:?}"
    );
    let left: bool = servers[0].conn().await.exists(KEY).await.unwrap();
    assert!(!left, "the one server's grant was given back");
}
