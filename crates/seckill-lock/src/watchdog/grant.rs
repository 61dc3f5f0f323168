//! What a grant needs before an acquire returns it: a fenced lock's token, and the
//! replicas' confirmation when asked for.

use redis::{AsyncCommands, Value};

use super::WatchdogLock;
use crate::{Connection, LockError, millis};

impl<C: Connection> WatchdogLock<C> {
    /// A fenced lock's token, for a take that answered `taken` (a take issues it; a
    /// hand-off from a holder of this instance does not, and one is issued now).
    pub(super) async fn fenced_token(&mut self, taken: Value) -> Result<(), LockError> {
        if self.fenced {
            self.token = Some(match taken {
                Value::Int(token) => token,
                // Handed over by a holder of this instance, whose release issued no token:
                // one now, the lock held.
                _ => {
                    let mut conn = self.shared.conn.clone();
                    let issued: Result<i64, _> = conn.incr(&self.keys.token, 1).await;
                    match issued {
                        Ok(token) => token,
                        Err(err) => {
                            // A fenced hold with no token to present is no use to the
                            // caller: given back at once, not left held for a lease with
                            // nobody in it (its watchdog stops either way).
                            if let Err(release) = self.release_plainly().await {
                                tracing::warn!(error = %release, key = %self.keys.lock, "a hand-off without a token not given back: it expires one lease from now");
                            }
                            return Err(err.into());
                        }
                    }
                }
            });
        }
        Ok(())
    }

    /// With [`confirmed_by_replicas`](WatchdogLock::confirmed_by_replicas): the grant
    /// confirmed by as many replicas as asked, or the lock given back and the acquire
    /// failed.
    pub(super) async fn confirm_grant(&mut self) -> Result<(), LockError> {
        let Some((replicas, timeout)) = self.confirm else {
            return Ok(());
        };
        let mut conn = self.shared.conn.clone();
        let confirmed: Result<i64, _> = redis::cmd("WAIT")
            .arg(replicas)
            .arg(millis(timeout).max(1))
            .query_async(&mut conn)
            .await;
        let error = match confirmed {
            Ok(n) if n >= i64::from(replicas) => return Ok(()),
            Ok(n) => LockError::NotConfirmed {
                wanted: replicas,
                confirmed: u32::try_from(n.max(0)).unwrap_or(0),
            },
            Err(err) => err.into(),
        };
        if let Err(release) = self.release_plainly().await {
            tracing::warn!(error = %release, key = %self.keys.lock, "a lock the replicas did not confirm was not given back: it expires one lease from now");
        }
        Err(error)
    }
}
