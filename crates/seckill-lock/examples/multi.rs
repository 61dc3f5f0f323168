//! A MultiLock: a cart of three products, all their locks or none, taken in key order so
//! that two carts over the same products in opposite orders never deadlock.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p seckill-lock --example multi
//! ```

use std::time::Duration;

use seckill_lock::{HolderId, Lock, MultiLock, Namespace, WatchdogLocks};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    let locks = WatchdogLocks::builder(client, conn)
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("example"))
        .start();

    let carts = [
        ["{sku:1}", "{sku:2}", "{sku:3}"],
        ["{sku:3}", "{sku:2}", "{sku:1}"],
    ];
    let tasks: Vec<_> = (0..10)
        .map(|n| {
            let holder = HolderId::new();
            let cart = MultiLock::new(carts[n % 2].map(|sku| locks.lock_as(sku, &holder)));
            tokio::spawn(async move {
                let guard = cart.try_acquire_for(Duration::from_secs(5)).await?;
                let guard = guard.expect("sorted carts never deadlock: every one gets in");
                tokio::time::sleep(Duration::from_millis(10)).await;
                guard.release().await
            })
        })
        .collect();
    for task in tasks {
        assert!(
            task.await??,
            "every lock of the cart was still held at release"
        );
    }

    // One product held elsewhere: the cart takes none of the others.
    let other = locks.lock("{sku:2}").try_acquire().await?.expect("free");
    let holder = HolderId::new();
    let cart = MultiLock::new(carts[0].map(|sku| locks.lock_as(sku, &holder)));
    assert!(
        cart.try_acquire_for(Duration::from_millis(100))
            .await?
            .is_none(),
        "all or none"
    );
    other.release().await?;
    println!("10 carts in opposite orders each got all their locks; a cart short of one took none");
    Ok(())
}
