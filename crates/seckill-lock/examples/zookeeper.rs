//! The lock on a ZooKeeper ensemble, as Curator's `InterProcessMutex` takes it: the session
//! is the lease, and the node's zxid a fencing token.
//!
//! ```text
//! ZOOKEEPER_HOSTS=127.0.0.1:2181 cargo run -p seckill-lock --features zookeeper --example zookeeper
//! ```

use std::sync::Arc;
use std::time::Duration;

use seckill_lock::{Lock, ZooKeeper};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = std::env::var("ZOOKEEPER_HOSTS").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let zk = Arc::new(ZooKeeper::new(
        &hosts,
        Duration::from_secs(10),
        Duration::from_secs(2),
    ));

    let first = zk
        .lock("/example/lock")
        .try_acquire_for(Duration::from_secs(5))
        .await?;
    let first = first.expect("free");
    let waiter = zk.lock("/example/lock");
    let waiting = tokio::spawn(waiter.try_acquire_for(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let token = first.fencing_token().expect("the node's zxid");
    assert!(first.release().await?);
    let second = waiting.await??.expect("the next in line");
    assert!(
        second.fencing_token().expect("a zxid") > token,
        "tokens grow"
    );
    second.release().await?;
    println!(
        "the waiter got the lock once the first holder deleted its node; zxid {token} < its own"
    );
    Ok(())
}
