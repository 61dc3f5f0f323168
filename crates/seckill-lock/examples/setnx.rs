//! The seed's first lock, for a class (feature `teaching`): `SETNX` with no TTL. A holder
//! that dies — here, abandons its guard — leaves it held until someone deletes it.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p seckill-lock --features teaching --example setnx
//! ```

use std::time::Duration;

use redis::AsyncCommands;
use seckill_lock::teaching::SetnxLock;
use seckill_lock::{HolderId, Lock, inspect};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let key = "example:{setnx}:lock";

    let dead = SetnxLock::new(conn.clone(), key, &HolderId::new())
        .try_acquire()
        .await?
        .expect("free");
    dead.abandon(); // the holder's process dies: nothing gives the lock back
    let state = inspect::inspect(&mut conn, key).await?;
    assert!(state.held && state.never_expires, "held forever");
    let next = SetnxLock::new(conn.clone(), key, &HolderId::new());
    assert!(
        next.try_acquire_for(Duration::from_millis(200))
            .await?
            .is_none(),
        "nobody gets in"
    );
    let _: u64 = conn.del(key).await?; // what an operator has to do by hand
    println!("an abandoned SETNX lock stayed held, with no TTL, until deleted by hand");
    Ok(())
}
