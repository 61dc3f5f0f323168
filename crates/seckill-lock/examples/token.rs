//! The token lock (`SET key token NX PX ttl`, released by compare-and-delete), and what it
//! cannot do: a holder whose work outlasts the TTL loses the lock to the next one, and its
//! release, finding another token, leaves that holder's lock alone.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p seckill-lock --example token
//! ```

use std::time::Duration;

use seckill_lock::{HolderId, Lock, TokenLock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let ttl = Duration::from_millis(200);
    let key = "example:{token}:lock";

    let slow = TokenLock::new(conn.clone(), key, ttl, &HolderId::new())
        .try_acquire()
        .await?
        .expect("free");
    // Busy for the whole wait: the slow holder has it.
    let busy = TokenLock::new(conn.clone(), key, ttl, &HolderId::new());
    assert!(
        busy.try_acquire_for(Duration::from_millis(50))
            .await?
            .is_none()
    );

    // The slow holder works past its TTL; the next one gets in.
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let next = TokenLock::new(conn.clone(), key, ttl, &HolderId::new())
        .try_acquire()
        .await?
        .expect("the TTL ran out");
    // The slow holder's release finds another token: it says so, and deletes nothing.
    assert!(!slow.release().await?, "the slow holder's lock had expired");
    assert!(
        next.release().await?,
        "the next holder's lock was left alone"
    );
    println!("a holder past its TTL lost the lock, and its release left the next holder's alone");
    Ok(())
}
