//! Redlock over three independent Redis servers: one lock held by a majority of them.
//!
//! ```text
//! REDLOCK_URLS=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!   cargo run -p seckill-lock --features redlock --example redlock
//! ```

use std::time::Duration;

use seckill_lock::{HolderIds, Lock, Redlock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::var("REDLOCK_URLS")
        .map_err(|_| "REDLOCK_URLS: three or five servers, comma-separated")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let redlock = Redlock::connect(&urls, Duration::from_millis(100))?;
    let holders = HolderIds::new();
    let ttl = Duration::from_secs(10);

    let first = redlock
        .lock("example:{redlock}", ttl, true, &holders.next())
        .acquire(Duration::from_secs(1))
        .await?
        .expect("free on a quorum");
    let second = redlock.lock("example:{redlock}", ttl, true, &holders.next());
    assert!(
        second.acquire(Duration::from_millis(200)).await?.is_none(),
        "held"
    );
    assert!(first.release().await?, "released on a quorum");
    println!(
        "one Redlock over {} servers: held by one holder at a time",
        urls.len()
    );
    Ok(())
}
