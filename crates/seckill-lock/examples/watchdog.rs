//! The watchdog lock: 20 tasks each add 1 to a counter in Redis with a `GET` then a `SET`
//! — the read-modify-write that loses updates without a lock — under one lock, so that the
//! counter ends at exactly 20. One task works past the lease and the watchdog keeps the
//! lock for it; one drops its guard without releasing, and the lock is given back all
//! the same.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p seckill-lock --example watchdog
//! ```

use std::time::Duration;

use redis::AsyncCommands;
use seckill_lock::{Lock, Namespace, WatchdogLocks};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    // A short lease, so that the slow task below outlives it: its watchdog renews it
    // every third of a lease (a renewal may come 400 ms late on a busy machine).
    let lease = Duration::from_millis(600);
    let locks = WatchdogLocks::builder(client, conn.clone())
        .lease(lease)
        .namespace(Namespace::new("example"))
        .start();
    let counter = "example:{counter}:value";
    let _: () = conn.clone().set(counter, 0).await?;

    let tasks: Vec<_> = (0..20)
        .map(|n| {
            let lock = locks.lock("{counter}");
            let mut conn = conn.clone();
            tokio::spawn(async move {
                let guard = lock
                    .try_acquire_for(Duration::from_secs(30))
                    .await?
                    .expect("the lock within 30 s");
                let value: i64 = conn.get(counter).await?;
                // Task 0 works for three leases: the watchdog renews the lock meanwhile.
                let work = if n == 0 {
                    lease * 3
                } else {
                    Duration::from_millis(2)
                };
                tokio::time::sleep(work).await;
                assert!(!guard.is_lost(), "the watchdog kept the lock");
                let _: () = conn.set(counter, value + 1).await?;
                if n == 1 {
                    // Dropped, not released: given back in the background.
                    drop(guard);
                } else {
                    assert!(guard.release().await?, "still held at release");
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .collect();
    for task in tasks {
        task.await?.map_err(|err| err.to_string())?;
    }
    let value: i64 = conn.clone().get(counter).await?;
    println!(
        "counter = {value} (20 increments under one lock; renewals: {})",
        locks.counters().renewals()
    );
    assert_eq!(value, 20, "an increment was lost");
    assert!(
        locks.counters().renewals() > 0,
        "the slow task's lease was renewed"
    );
    let _: () = conn.clone().del(counter).await?;
    Ok(())
}
