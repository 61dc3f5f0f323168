//! The read-write lock: readers share it, a writer has it alone, and a writer in line
//! goes before readers that come after it.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p seckill-lock --features rw --example rw
//! ```

use std::time::Duration;

use redis::AsyncCommands;
use seckill_lock::{HolderId, Lock, RwKeys, RwLock, Side};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let keys = RwKeys::under("example:{rw}");
    let lease = Duration::from_secs(10);
    let side = |side| RwLock::new(conn.clone(), keys.clone(), &HolderId::new(), side, lease);

    let reader = side(Side::Read).try_acquire().await?.expect("free");
    let other_reader = side(Side::Read)
        .try_acquire()
        .await?
        .expect("readers share");
    let writer = side(Side::Write);
    let writing = tokio::spawn(writer.try_acquire_for(Duration::from_secs(5)));
    // Until the writer is in line: its intent is in Redis.
    let mut watch = conn.clone();
    while !watch.exists::<_, bool>(&keys.intent).await? {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A writer waits in line: a new reader waits behind it.
    assert!(
        side(Side::Read)
            .try_acquire_for(Duration::from_millis(50))
            .await?
            .is_none()
    );
    reader.release().await?;
    other_reader.release().await?;
    let writer = writing.await??.expect("the writer, once the readers left");
    writer.release().await?;
    println!("two readers shared the lock; the writer waited for them, and new readers for it");
    Ok(())
}
