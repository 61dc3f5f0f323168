//! A claim taken over from a request that may still sell: every place it may have sold
//! under the key besides the claim's own slot fenced, and what it sold found.

use redis::AsyncCommands;

use super::{Claim, Elsewhere, Fields, Keys, Recorded, Replay, TakenFrom, finish_script};
use crate::error::AppError;
use crate::keys::ProductKeys;
use crate::outcome::sale::Taken;
use crate::scripts;

/// `holder` just took `claim` over `from` another request. Before it sells, every place
/// the other may have sold under the key besides the claim's own slot (`elsewhere`) is
/// fenced (`lua/idem_fence.lua`), which finds the other's sale there if it ran and keeps it
/// from running after. On a split product a sale found is the key's answer, given again;
/// none found, the other's reservation was never used, and goes back to the buyer. A cart's
/// lines found are kept: the repeat completes the cart around them.
pub(super) async fn take_over(
    keys: &Keys,
    product: &ProductKeys,
    claim: &Claim,
    holder: &str,
    from: &TakenFrom,
    elsewhere: &Elsewhere,
) -> Result<Option<Replay>, AppError> {
    let (shards, answers) = match elsewhere {
        Elsewhere::Nowhere => return Ok(None),
        Elsewhere::Shards(shards) => (shards, true),
        Elsewhere::Cart(shards) => (shards, false),
    };
    let ttl = keys.ttl;
    let mut found = None;
    for shard in shards {
        let order: Option<String> = scripts::idem_fence(shard, claim.key.as_str(), holder, ttl)
            .invoke_async(&mut keys.store.conn())
            .await?;
        if let Some(order) = order {
            found.get_or_insert((order, shard.index));
        }
    }
    tracing::info!(
        key = claim.key.as_str(),
        from = from.holder,
        sold = found.is_some(),
        "a key taken over, its other sales fenced"
    );
    let Some((order, shard)) = found.filter(|_| answers) else {
        if !from.reserved.is_empty() {
            let _: i64 = scripts::give_back(product, &from.reserved)
                .invoke_async(&mut keys.store.conn())
                .await?;
        }
        return Ok(None);
    };
    // The other request sold, and its answer was lost: that sale is the key's answer,
    // asked of the replicas before it is given (a replay).
    let taken = Taken {
        order,
        shard,
        remaining: None,
    };
    let reservation = product.reservation(&from.holder);
    let _: i64 = finish_script(claim, holder, &reservation, &Fields::sale(&taken))
        .invoke_async(&mut keys.store.conn())
        .await?;
    let _: i64 = keys
        .store
        .conn()
        .hincr(&product.audit, "replayed", 1)
        .await?;
    Ok(Some(Replay {
        answer: Recorded::Sale(taken),
        instance: None,
    }))
}
