//! A lock with a TTL and a token.

use std::time::{Duration, Instant};

use redis::{AsyncCommands, SetExpiry, SetOptions};

use crate::{Connection, HolderId, Lock, LockError, Spin, millis, scripts};

/// `SET lock <token> NX PX ttl`, released by an atomic compare-and-delete script.
///
/// Correct while the work fits in the TTL. When it does not, the lock expires under its
/// holder and a second holder gets in; the first one's release then finds a token that is
/// not its own and leaves it alone (that much the token buys).
pub struct TokenLock<C> {
    conn: C,
    key: String,
    token: String,
    ttl: Duration,
    /// Until when the lock is known to be this holder's: one TTL from when the `SET` that
    /// took it was sent (Redis counts it from later, so this never outlasts Redis's).
    valid_until: Option<Instant>,
    /// The seed's release: `GET`, compare, pause this long, `DEL`.
    check_then_delete: Option<Duration>,
    /// The seed's holder, which never asks whether its TTL ran out.
    blind: bool,
}

impl<C: Connection> TokenLock<C> {
    /// The lock at `key` with a `ttl`, for `holder`, whose id is the token the lock holds
    /// ([`HolderId::new`] makes one).
    pub fn new(conn: C, key: &str, ttl: Duration, holder: &HolderId) -> Self {
        Self {
            conn,
            key: key.to_owned(),
            token: holder.to_string(),
            ttl,
            valid_until: None,
            check_then_delete: None,
            blind: false,
        }
    }

    /// Releases as the seed does: `GET`, compare in the application, `pause`, then `DEL`.
    /// If the lock expires during the pause and another holder takes it, the `DEL` removes
    /// the other holder's lock — why a release must be one atomic step.
    #[cfg(feature = "teaching")]
    pub fn checking_then_deleting(mut self, pause: Duration) -> Self {
        self.check_then_delete = Some(pause);
        self
    }

    /// The seed's holder: [`is_lost`](Lock::is_lost) never says its TTL ran out, so a
    /// holder that checks before it commits commits all the same — the overlap the token
    /// lesson shows, when the work outlasts the TTL.
    #[cfg(feature = "teaching")]
    pub fn blind_to_its_ttl(mut self) -> Self {
        self.blind = true;
        self
    }

    /// The seed's release. False when the lock was not this holder's at the `GET`.
    async fn release_check_then_delete(&mut self, pause: Duration) -> Result<bool, LockError> {
        let current: Option<String> = match self.conn.get(&self.key).await {
            Ok(current) => current,
            // A watchdog holder's hash: somebody else's lock.
            Err(err) if err.code() == Some("WRONGTYPE") => return Ok(false),
            Err(err) => return Err(err.into()),
        };
        if current.as_deref() != Some(self.token.as_str()) {
            return Ok(false);
        }
        tokio::time::sleep(pause).await;
        let _: u64 = self.conn.del(&self.key).await?;
        Ok(true)
    }
}

impl<C: Connection> Lock for TokenLock<C> {
    /// Tries again every few milliseconds while `wait` lasts.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let options = SetOptions::default()
            .conditional_set(redis::ExistenceCheck::NX)
            .with_expiration(SetExpiry::PX(millis(self.ttl).max(1)));
        let spin = Spin::for_up_to(wait);
        loop {
            // The TTL may start as soon as the SET leaves: counted from then, this holder
            // never believes in its lock longer than Redis keeps it.
            let sent = Instant::now();
            let set: Option<String> = self
                .conn
                .set_options(&self.key, &self.token, options.clone())
                .await?;
            if set.is_some() {
                self.valid_until = sent.checked_add(self.ttl);
                return Ok(true);
            }
            if !spin.pause().await {
                return Ok(false);
            }
        }
    }

    /// Compare-and-delete in one step, unless the seed's release was asked for.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        self.valid_until = None;
        if let Some(pause) = self.check_then_delete {
            return self.release_check_then_delete(pause).await;
        }
        let released: i64 = scripts::TOKEN_RELEASE
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(released == 1)
    }

    /// The TTL made `lease` from now, if the lock still holds this holder's token
    /// (compare-and-`PEXPIRE` in one script); false when it expired or was taken, and the
    /// lock is lost from then on.
    async fn extend(&mut self, lease: Duration) -> Result<bool, LockError> {
        if self.valid_until.is_none() {
            return Ok(false);
        }
        let sent = Instant::now();
        let extended: i64 = scripts::TOKEN_EXTEND
            .key(&self.key)
            .arg(&self.token)
            .arg(millis(lease).max(1))
            .invoke_async(&mut self.conn)
            .await?;
        // Lost (an instant already past) when the token was gone.
        self.valid_until = Some(if extended == 1 {
            sent.checked_add(lease).unwrap_or(sent)
        } else {
            sent
        });
        Ok(extended == 1)
    }

    /// True once its TTL has run out since the `SET` that took it was sent: nothing renews
    /// a token lock, so it is lost then whether or not another holder took it since.
    fn is_lost(&self) -> bool {
        !self.blind
            && self
                .valid_until
                .is_some_and(|until| Instant::now() >= until)
    }

    fn key(&self) -> &str {
        &self.key
    }

    fn holder(&self) -> &str {
        &self.token
    }

    fn lease(&self) -> Option<Duration> {
        Some(self.ttl)
    }
}
