//! The instance's one subscription to every watchdog lock's release channel: where it
//! listens ([`Subscriber`]) and the task that turns each message into a wake-up.

use std::sync::Weak;
use std::time::Duration;

use futures_util::StreamExt;

use super::waiters::{RELEASED, Shared};

/// Where an instance's one subscription listens for every lock's release messages: the
/// one server, any node of a Cluster (a plain `PUBLISH` reaches them all), or the master
/// the sentinels name (`sentinel::SentinelConnection`, feature
/// `sentinel`).
pub trait Subscriber: Send + Sync + 'static {
    /// A client for the `attempt`-th (re)connection (0 first); `None` when there is no
    /// node to try now.
    fn client(&self, attempt: usize) -> impl Future<Output = Option<redis::Client>> + Send;
}

/// One server.
impl Subscriber for redis::Client {
    async fn client(&self, _attempt: usize) -> Option<redis::Client> {
        Some(self.clone())
    }
}

/// Several nodes, tried in turn: a Redis Cluster's (any node hears every `PUBLISH`), so
/// that when the node it listens on goes away the subscription moves to the next.
impl Subscriber for Vec<redis::Client> {
    async fn client(&self, attempt: usize) -> Option<redis::Client> {
        (!self.is_empty()).then(|| self[attempt % self.len()].clone())
    }
}

/// How often the subscription's connection is pinged, and how long a ping may take: a
/// server that stops answering (a half-open link, a frozen process) is noticed within two
/// of these, and the subscription starts again — rather than every waiter falling back to
/// its lease-long nap without a word.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long connecting and subscribing may take before the next node is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The instance's one subscription: a release message wakes one local waiter, or the one
/// it names. Runs until the instance's [`WatchdogLocks`](super::WatchdogLocks) are all
/// dropped (the caller stops it then).
pub(super) async fn subscribe<C>(
    subscriber: impl Subscriber,
    pattern: String,
    shared: Weak<Shared<C>>,
) {
    let mut backoff = Duration::from_millis(50);
    for attempt in 0.. {
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let Some(client) = subscriber.client(attempt).await else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "no node to subscribe on",
                )));
            };
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.psubscribe(&pattern).await?;
            Ok(pubsub)
        })
        .await;
        if let Ok(Ok(pubsub)) = connected {
            backoff = Duration::from_millis(50);
            let Some(alive) = shared.upgrade() else {
                return;
            };
            alive.wake_every_lock();
            drop(alive);
            if !listen(pubsub, &shared).await {
                return;
            }
            tracing::warn!("lock release subscription lost; reconnecting");
            // Redis may be gone: let every waiter try now, and fail fast if it is, rather
            // than sleep out its wait.
            if let Some(alive) = shared.upgrade() {
                alive.counters.subscription_lost();
                alive.wake_everyone();
            }
        }
        if shared.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Turns each message into a wake-up, pinging the server every [`HEARTBEAT`]; returns
/// when the connection is lost or stops answering (true: subscribe again), or when the
/// instance is gone (false).
async fn listen<C>(pubsub: redis::aio::PubSub, shared: &Weak<Shared<C>>) -> bool {
    let (mut sink, mut messages) = pubsub.split();
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    heartbeat.tick().await;
    let wake = |message: redis::Msg| {
        let Some(alive) = shared.upgrade() else {
            return false;
        };
        let channel = message.get_channel_name();
        match message.get_payload_bytes() {
            payload if payload == RELEASED.as_bytes() => alive.wake_one(channel),
            holder => alive.wake_holder(channel, &String::from_utf8_lossy(holder)),
        }
        true
    };
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => {
                    if !wake(message) {
                        return false;
                    }
                    continue;
                }
                None => return true,
            },
            _ = heartbeat.tick() => {}
        }
        // A ping, while messages go on being served.
        let ping = tokio::time::timeout(HEARTBEAT, sink.ping::<redis::Value>());
        let mut ping = std::pin::pin!(ping);
        loop {
            tokio::select! {
                answered = &mut ping => match answered {
                    Ok(Ok(_)) => break,
                    Ok(Err(err)) => {
                        tracing::warn!(%err, "lock release subscription's ping failed");
                        return true;
                    }
                    Err(_) => {
                        tracing::warn!("lock release subscription's server stopped answering");
                        return true;
                    }
                },
                message = messages.next() => match message {
                    Some(message) => {
                        if !wake(message) {
                            return false;
                        }
                    }
                    None => return true,
                },
            }
        }
    }
}
