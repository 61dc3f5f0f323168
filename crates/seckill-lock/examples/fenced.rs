//! A fenced watchdog lock: every take issues a token from the lock's own counter, so a
//! resource that keeps the highest token it has seen can refuse a holder that lost the
//! lock without knowing (here: one whose lease ran out while it stalled).
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p seckill-lock --example fenced
//! ```

use std::time::Duration;

use seckill_lock::{Lease, Lock, Namespace, WatchdogLocks};

/// The resource: it keeps the highest token it has seen and refuses anything older.
#[derive(Default)]
struct Fenced {
    seen: i64,
    value: &'static str,
}

impl Fenced {
    fn write(&mut self, token: i64, value: &'static str) -> bool {
        if token < self.seen {
            return false;
        }
        self.seen = token;
        self.value = value;
        true
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    let locks = WatchdogLocks::builder(client, conn)
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("example"))
        .start();
    let mut resource = Fenced::default();

    // A holder with a short fixed lease (no watchdog) that stalls past it.
    let stalled = locks
        .lock("{fenced}")
        .fenced(true)
        .with_lease(Lease::Fixed(Duration::from_millis(100)))
        .try_acquire_for(Duration::from_secs(5))
        .await?
        .expect("free");
    let old = stalled.fencing_token().expect("a fenced lock's token");
    tokio::time::sleep(Duration::from_millis(150)).await;

    // The next holder gets the lock, with a greater token, and writes.
    let next = locks
        .lock("{fenced}")
        .fenced(true)
        .try_acquire_for(Duration::from_secs(5))
        .await?
        .expect("the stalled holder's lease ran out");
    let new = next.fencing_token().expect("a token");
    assert!(new > old);
    assert!(resource.write(new, "the next holder's"));
    next.release().await?;

    // The stalled holder wakes and writes: refused by its token.
    assert!(stalled.is_lost(), "it can know, if it looks");
    assert!(
        !resource.write(old, "the stalled holder's"),
        "an older token is refused"
    );
    println!(
        "token {old} refused after token {new}; the resource holds {}",
        resource.value
    );
    Ok(())
}
