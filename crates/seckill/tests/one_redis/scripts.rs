//! The scripts the watchdog variant fuses its steps into, run by hand against a real Redis:
//! cases a load cannot aim at.

use std::time::Duration;

use redis::AsyncCommands;
use seckill::scripts;
use seckill_lock::watchdog::{DEFAULT_LEASE, ReleaseArgs, Successor};
use seckill_testkit::RedisServer;

use crate::keys;

/// A hand-off whose answer was lost on its way back (a timeout): Redis already names the
/// successor and has let it into the critical section, and the successor, not knowing,
/// tries on its own. It gets the lock with one hold, and no overlap is counted against
/// itself; its release then frees the lock.
#[tokio::test]
async fn a_handoff_whose_answer_was_lost_is_one_hold_and_no_overlap() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("101").whole();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let (lease, hold) = (DEFAULT_LEASE, Duration::from_secs(5));
    let lock_enter = |holder: &str| scripts::lock_enter(&shard, holder, lease, false, hold, "");
    let commit_release = |holder: &str, successor: Option<&str>| {
        let release = ReleaseArgs {
            holder: holder.to_owned(),
            lease,
            fair: false,
            successor: successor.map(|next| Successor {
                holder: next.to_owned(),
                lease,
                hold,
            }),
        };
        let order = format!("order-of-{holder}");
        let sale = scripts::Sale {
            shard: &shard,
            holder,
            order: &order,
            instance: "test",
            variant: "watchdog",
            user: "",
            keyed: None,
            split: false,
            trace: String::new(),
        };
        scripts::commit_release(&sale, true, &release, "")
    };
    let taken: (i64, i64, i64, i64) = lock_enter("x").invoke_async(&mut conn).await.unwrap();
    assert_eq!(taken, (1, 10, 0, 0));
    // X sells and hands the lock to Y, letting Y in with 9 units: this answer is "lost".
    let handed: (i64, i64, i64, i64, i64) = commit_release("x", Some("y"))
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(handed, (9, 2, 9, 0, 0));
    // Y tries by itself.
    let taken: (i64, i64, i64, i64) = lock_enter("y").invoke_async(&mut conn).await.unwrap();
    assert_eq!(taken, (1, 9, 0, 0), "Y holds it, reads 9, no overlap");
    let holds: Option<i64> = conn.hget(&shard.lock, "y").await.unwrap();
    assert_eq!(holds, Some(1), "one hold, not two");
    let overlaps: Option<i64> = conn.hget(&shard.audit, "lock_overlaps").await.unwrap();
    assert_eq!(overlaps, None);
    let released: (i64, i64) = commit_release("y", None)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(released, (8, 1), "sold, and the lock released");
    let held: bool = conn.exists(&shard.lock).await.unwrap();
    assert!(!held);
}
