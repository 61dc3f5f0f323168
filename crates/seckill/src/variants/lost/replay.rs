//! A key's recorded sale, given again: asked of the replicas first, since a failover after
//! the first answer may have taken it back. A `200` again only once they have it; a sale the
//! master serving its shard now lacks is voided there, the buyer's unit given back, the
//! claim given up — and the request is served anew, so that the buyer can buy.

use axum::http::StatusCode;

use crate::admission::wall_clock_ms;
use crate::error::AppError;
use crate::idempotency::{self, Elsewhere, Recorded};
use crate::keys::{IdempotencyKey, ShardKeys, key_record};
use crate::outcome::sale::{self, Again, Confirmed, Taken};
use crate::scripts;
use crate::variants::Deduction;

/// What a repeat of a key is answered, its recorded answer resolved.
#[derive(Debug)]
pub enum Replayed {
    /// Its sale, on as many replicas as asked for (or none asked): `200`.
    Sold(Confirmed),
    /// Its sale, on its master and not yet on enough replicas: `503 unconfirmed` again.
    Unconfirmed(Taken),
    /// An answer that sold nothing and stands, as it was.
    Refusal {
        status: StatusCode,
        outcome: &'static str,
        remaining: Option<i64>,
    },
    /// Its sale did not survive a failover: voided where it was, the buyer's unit given
    /// back, the claim given up. The request is to be served anew.
    Lost,
}

/// `recorded`, the answer `key`'s claim holds for `d`'s request, resolved.
pub(crate) async fn replay(
    d: &Deduction,
    key: &IdempotencyKey,
    recorded: Recorded,
) -> Result<Replayed, AppError> {
    let taken = match recorded {
        Recorded::Refusal {
            status,
            outcome,
            remaining,
        } => {
            return Ok(Replayed::Refusal {
                status,
                outcome,
                remaining,
            });
        }
        Recorded::Sale(taken) => taken,
    };
    let confirmations = d.app.sale_confirmations.as_ref();
    let taken = match sale::unasked(confirmations, taken) {
        Ok(confirmed) => return Ok(Replayed::Sold(confirmed)),
        Err(taken) => taken,
    };
    // A cart's answer names its first line; every line was sold under the key, each on its
    // own slot (and master): each is asked.
    let lines: Vec<(ShardKeys, Option<Taken>)> = match d.elsewhere().await? {
        Elsewhere::Cart(lines) => lines.into_iter().map(|line| (line, None)).collect(),
        Elsewhere::Shards(shards) => {
            let shard = shards.into_iter().find(|s| s.index == taken.shard);
            vec![(shard.ok_or_else(|| gone_shard(&taken))?, None)]
        }
        Elsewhere::Nowhere => vec![(ShardKeys::clone(&d.whole_stock()), None)],
    };
    let mut first = None;
    for (n, (shard, _)) in lines.iter().enumerate() {
        let line = if n == 0 {
            taken.clone()
        } else {
            let record: Option<String> = redis::cmd("HGET")
                .arg(&shard.keys)
                .arg(key.as_str())
                .query_async(&mut d.redis())
                .await?;
            let sold = record.and_then(|r| key_record(&r, wall_clock_ms()).map(str::to_owned));
            let Some(order) = sold else {
                // The line's record went with a failover (its sale with it): the cart is
                // not whole; a repeat completes it.
                return forget(d, key, &taken).await;
            };
            Taken {
                order,
                shard: shard.index,
                remaining: None,
            }
        };
        match sale::confirm_again(confirmations, shard, line).await {
            Again::Confirmed(confirmed) => {
                first.get_or_insert(confirmed);
            }
            Again::Unconfirmed(_) => return Ok(Replayed::Unconfirmed(taken)),
            Again::Missing(line) => {
                if !void(d, shard, &line).await? {
                    // It is there after all (found on another look): not yet confirmed.
                    return Ok(Replayed::Unconfirmed(taken));
                }
                give_back(d, &line).await?;
                return forget(d, key, &taken).await;
            }
        }
    }
    Ok(Replayed::Sold(first.expect("a sale has at least one line")))
}

/// A shard the layout no longer has: the product was reset into fewer shards since.
fn gone_shard(taken: &Taken) -> AppError {
    AppError::Internal(anyhow::anyhow!(
        "a key's recorded sale {} names shard {}, which the product no longer has",
        taken.order,
        taken.shard
    ))
}

/// `line`'s id voided on `shard`, where its master lacks it (`lua/resolve.lua`): true once
/// it is known never to run; false when the look finds it sold after all.
async fn void(d: &Deduction, shard: &ShardKeys, line: &Taken) -> Result<bool, AppError> {
    let (sold, _): (i64, Option<String>) = scripts::resolve(shard, "", &line.order)
        .invoke_async(&mut d.redis())
        .await?;
    if sold == 0 {
        tracing::warn!(
            order = %line.order,
            key = %shard.stock,
            "a sale answered before did not survive a failover of its master: voided"
        );
    }
    Ok(sold == 0)
}

/// A split product's buyer counted the lost sale's unit on the product's slot (which the
/// failover of the shard's master did not touch): it goes back to them, once per order.
async fn give_back(d: &Deduction, line: &Taken) -> Result<(), AppError> {
    let user = d.user();
    if !d.variant.spec().splits_stock || user.is_empty() {
        return Ok(());
    }
    let _: i64 = scripts::return_expired(&d.product, &line.order, user)
        .invoke_async(&mut d.redis())
        .await?;
    Ok(())
}

/// The claim of `key`, whose answer is `taken`, given up.
async fn forget(d: &Deduction, key: &IdempotencyKey, taken: &Taken) -> Result<Replayed, AppError> {
    idempotency::forget(&d.app.idempotency, &d.product, key, &taken.order).await?;
    Ok(Replayed::Lost)
}
