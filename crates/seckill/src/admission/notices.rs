//! What keeps every instance's copy of the front door true: the notices on [`CHANNEL`]
//! (sent by a reset, a reopen, an expiry that gave a unit back), the subscription that
//! hears them, and the flush of what was counted in memory into the audits.

use std::sync::Weak;
use std::time::Duration;

use futures_util::StreamExt;
use seckill_lock::watchdog::Subscriber;

use super::{CHANNEL, COUNT, FLUSH_EVERY, Shared, lock};
use crate::error::AppError;
use crate::keys::{ProductId, ProductKeys};
use crate::store::{Nodes, Store};

/// Announces to every instance that `product`'s sale changed (a reset, a reopen, a unit
/// given back). Best effort: an instance that misses it reads the terms again within
/// [`TERMS_MAX_AGE`].
pub async fn notify(store: &Store, product: &ProductId) {
    let sent: Result<i64, _> = redis::cmd("PUBLISH")
        .arg(CHANNEL)
        .arg(product.as_str())
        .query_async(&mut store.conn())
        .await;
    if let Err(err) = sent {
        tracing::warn!(%product, error = %err, "the front door's notice was not sent");
    }
}

/// The subscription to [`CHANNEL`], for as long as the instance's front door lives.
pub(super) async fn listen(subscriber: Nodes, shared: Weak<Shared>) {
    let mut backoff = Duration::from_millis(50);
    for attempt in 0.. {
        let connected = match subscriber.client(attempt).await {
            Some(client) => tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub())
                .await
                .ok()
                .and_then(Result::ok),
            None => None,
        };
        if let Some(mut pubsub) = connected
            && pubsub.subscribe(CHANNEL).await.is_ok()
        {
            backoff = Duration::from_millis(50);
            // What was missed while it was away.
            match shared.upgrade() {
                Some(alive) => alive.forget(None),
                None => return,
            }
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                let Some(alive) = shared.upgrade() else {
                    return;
                };
                let named = std::str::from_utf8(message.get_payload_bytes())
                    .ok()
                    .and_then(|p| ProductId::parse(p).ok());
                alive.forget(named.as_ref());
            }
            tracing::warn!("front door's notice subscription lost; reconnecting");
        }
        match shared.upgrade() {
            Some(alive) => alive.forget(None),
            None => return,
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Adds the counts kept in memory to the audits, every [`FLUSH_EVERY`].
pub(super) async fn flush(shared: Weak<Shared>) {
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(alive) = shared.upgrade() else {
            return;
        };
        if let Err(err) = flush_once(&alive).await {
            tracing::debug!(error = %err, "front door's counts not flushed yet");
        }
    }
}

pub(super) async fn flush_once(shared: &Shared) -> Result<(), AppError> {
    let taken: Vec<_> = lock(&shared.pending).drain().collect();
    let mut failed = None;
    for ((product, epoch), counts) in taken {
        let keys = ProductKeys::new(&product);
        let mut call = COUNT.key(&keys.audit);
        call.arg(epoch);
        for (field, count) in &counts {
            call.arg(*field).arg(*count);
        }
        let added: Result<i64, _> = call.invoke_async(&mut shared.store.conn()).await;
        let Err(err) = added else { continue };
        let err = AppError::from(err);
        if err.answer_may_be_lost() {
            // It may have run: adding the counts again could count them twice. They are
            // dropped, and the audit counts fewer than were answered.
            tracing::warn!(%product, error = %err, "front door's counts may not have reached the audit");
        } else {
            // Not run: kept for the next flush.
            let mut kept = lock(&shared.pending);
            let entry = kept.entry((product, epoch)).or_default();
            for (field, count) in counts {
                *entry.entry(field).or_default() += count;
            }
        }
        failed = Some(err);
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(()),
    }
}
