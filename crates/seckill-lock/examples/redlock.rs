//! Redlock over three independent Redis servers: one lock held by a majority of them.
//!
//! ```text
//! REDLOCK_URLS=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!   cargo run -p seckill-lock --features redlock --example redlock
//! ```

use std::time::Duration;

use seckill_lock::{Lock, Redlock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::var("REDLOCK_URLS")
        .map_err(|_| "REDLOCK_URLS: three or five servers, comma-separated")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let redlock = Redlock::connect(&urls, Duration::from_millis(100))?;
    let ttl = Duration::from_secs(10);

    let first = redlock
        .lock("example:{redlock}", ttl)
        .extending(true)
        .try_acquire_for(Duration::from_secs(1))
        .await?
        .expect("free on a quorum");
    let second = redlock.lock("example:{redlock}", ttl).extending(true);
    assert!(
        second
            .try_acquire_for(Duration::from_millis(200))
            .await?
            .is_none(),
        "held"
    );
    assert!(first.release().await?, "released on a quorum");
    println!(
        "one Redlock over {} servers: held by one holder at a time",
        urls.len()
    );
    Ok(())
}
