//! The database as a lock store and a stock store: seed 003's first row (a unique key as
//! the lock, [`locks::UniqueLock`]; and PostgreSQL's own advisory locks,
//! [`locks::AdvisoryLock`]), and the stock where every flash-sale tutorial starts, in a
//! row ([`stock`]).
//!
//! It is the orders' database (`--orders-db`), reached through a pool of its own,
//! `--pg-connections` per instance, so that a sale waiting on a row lock never holds up the
//! orders' consumer. Every call is bounded by `--redis-timeout-ms` × 5 (the wait for a
//! lock besides): PostgreSQL refusing, away or paused is a 503 `database_unavailable`,
//! never a hang. A transaction ([`Tx`]) that does not end by its `COMMIT` or `ROLLBACK` —
//! its future dropped, its answer lost — takes its connection with it: the connection is
//! closed rather than given back to the pool, PostgreSQL is asked to cancel what it still
//! runs (a wait for a row lock would not notice the socket closed), and it rolls the
//! transaction back and frees its locks when it sees the client gone.

pub mod locks;
pub mod stock;

use std::time::Duration;

use anyhow::Context as _;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::error::AppError;

/// The most connections `--pg-connections` may ask for.
pub const MAX_CONNECTIONS: u32 = 256;

/// The lock and stock variants' database: a bounded pool on `--orders-db`.
pub struct Database {
    pool: Pool,
    /// How long one call may take, the wait for a lock aside.
    timeout: Duration,
}

impl Database {
    /// A pool of at most `connections` on `url`; connections are made when needed, so an
    /// instance starts while the database is away.
    pub fn new(url: &str, connections: u32, timeout: Duration) -> anyhow::Result<Self> {
        let mut config: tokio_postgres::Config = url.parse().context("--orders-db")?;
        config.connect_timeout(timeout);
        config.application_name("seckill");
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(usize::try_from(connections).unwrap_or(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .context("the database's connection pool")?;
        Ok(Self { pool, timeout })
    }

    /// One call's bound.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A connection, or 503 when none can be had in time (the database away, every
    /// connection in use for the whole timeout).
    pub async fn conn(&self) -> Result<Object, AppError> {
        self.pool.get().await.map_err(|err| unavailable(&err))
    }

    /// `call` on a connection of the pool, bounded by the timeout: for a statement that
    /// runs alone (autocommit), so that a dropped call leaves nothing open.
    pub async fn with<T, F>(&self, call: F) -> Result<T, Failure>
    where
        F: AsyncFnOnce(&Object) -> Result<T, tokio_postgres::Error>,
    {
        let conn = self.conn().await.map_err(Failure::NotSent)?;
        match tokio::time::timeout(self.timeout, call(&conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(Failure::of(err)),
            Err(_) => {
                // Whatever was sent may still run; the connection goes with it.
                close(conn, self.timeout);
                Err(Failure::Lost(format!(
                    "no answer within {:?}",
                    self.timeout
                )))
            }
        }
    }

    /// `sql` (prepared once per connection, and cached) with `params`, alone: its row, if
    /// it returned one.
    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, Failure> {
        self.with(async |c| {
            let statement = c.prepare_cached(sql).await?;
            c.query_opt(&statement, params).await
        })
        .await
    }

    /// A transaction begun on a connection of the pool, with `lock_timeout` (ms; none:
    /// PostgreSQL's, no limit) set for it, in the same round trip as its `BEGIN`.
    pub async fn begin(&self, lock_timeout: Option<u64>) -> Result<Tx, Failure> {
        let conn = self.conn().await.map_err(Failure::NotSent)?;
        let tx = Tx {
            conn: Some(conn),
            timeout: self.timeout,
        };
        let begin = match lock_timeout {
            Some(ms) => format!("BEGIN; SET LOCAL lock_timeout = {ms}"),
            None => "BEGIN".to_owned(),
        };
        tx.run(tx.client().batch_execute(&begin)).await?;
        Ok(tx)
    }
}

/// An open transaction. Ended by [`Tx::commit`] or [`Tx::rollback`], it gives its
/// connection back to the pool; dropped open (its request cut short, a call timed out), it
/// closes the connection, and PostgreSQL rolls back what it did and frees its locks.
pub struct Tx {
    conn: Option<Object>,
    timeout: Duration,
}

impl Tx {
    /// The transaction's connection, to make a call with ([`Tx::run`]).
    pub fn client(&self) -> &Object {
        self.conn
            .as_ref()
            .expect("an open transaction has its connection")
    }

    /// One call inside the transaction, bounded by the timeout plus `longer` (a lock's
    /// wait). A call that fails leaves the transaction to be dropped.
    pub async fn run_for<T>(
        &self,
        longer: Duration,
        call: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, Failure> {
        let bound = self.timeout.saturating_add(longer);
        match tokio::time::timeout(bound, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(Failure::of(err)),
            Err(_) => Err(Failure::Lost(format!("no answer within {bound:?}"))),
        }
    }

    /// `sql` (prepared once per connection, and cached) with `params` inside the
    /// transaction, bounded as [`Tx::run_for`]: its row, if it returned one.
    pub async fn query_opt(
        &self,
        longer: Duration,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, Failure> {
        let client = self.client();
        let call = async {
            let statement = client.prepare_cached(sql).await?;
            client.query_opt(&statement, params).await
        };
        self.run_for(longer, call).await
    }

    /// [`Tx::run_for`] with no lock's wait.
    pub async fn run<T>(
        &self,
        call: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, Failure> {
        self.run_for(Duration::ZERO, call).await
    }

    /// `COMMIT`. An error here is an unknown outcome unless PostgreSQL answered it: the
    /// transaction may have committed.
    pub async fn commit(mut self) -> Result<(), Failure> {
        self.end("COMMIT").await
    }

    /// `ROLLBACK`: nothing the transaction did stays, and its locks are free.
    pub async fn rollback(mut self) -> Result<(), Failure> {
        self.end("ROLLBACK").await
    }

    async fn end(&mut self, how: &'static str) -> Result<(), Failure> {
        self.run(self.client().batch_execute(how)).await?;
        // Ended: the connection may serve another.
        drop(self.conn.take());
        Ok(())
    }

    /// Closes the connection with the transaction open, as a process that died does:
    /// PostgreSQL rolls it back and frees its locks once it sees the client gone.
    pub fn abandon(mut self) {
        if let Some(conn) = self.conn.take() {
            close(conn, self.timeout);
        }
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Open: never give it back to the pool mid-transaction.
            close(conn, self.timeout);
        }
    }
}

/// Closes `conn`, which may have a statement still running, and asks PostgreSQL (within
/// `timeout`, on a task) to cancel that statement. A closed socket alone is seen only when
/// the server next writes to it: a statement waiting on a row lock would hold its backend,
/// one past `--pg-connections`, until the lock came, and then commit for nobody.
pub(crate) fn close(conn: Object, timeout: Duration) {
    let cancel = conn.cancel_token();
    drop(Object::take(conn));
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = tokio::time::timeout(timeout, cancel.cancel_query(NoTls)).await;
        });
    }
}

/// How a call to the database failed.
#[derive(Debug)]
pub enum Failure {
    /// Nothing was sent: no connection could be had.
    NotSent(AppError),
    /// Sent, and its answer lost (a timeout, the connection dropped): it may have run.
    Lost(String),
    /// PostgreSQL answered with an error: what it says happened.
    Answered(tokio_postgres::Error),
}

impl Failure {
    pub(crate) fn of(err: tokio_postgres::Error) -> Self {
        if err.as_db_error().is_some() {
            Self::Answered(err)
        } else {
            Self::Lost(err.to_string())
        }
    }

    /// Whether PostgreSQL answered with `code`.
    pub fn is(&self, code: &SqlState) -> bool {
        matches!(self, Self::Answered(err) if err.code() == Some(code))
    }
}

impl From<Failure> for AppError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::NotSent(err) => err,
            Failure::Lost(why) => AppError::DatabaseUnavailable(why),
            Failure::Answered(err) => match err.code() {
                // The migrations have not run yet (the consumer applies them at start).
                Some(&SqlState::UNDEFINED_TABLE) => AppError::DatabaseUnavailable(
                    "the database's tables are not there yet: migrations pending".into(),
                ),
                Some(code)
                    if code == &SqlState::ADMIN_SHUTDOWN
                        || code == &SqlState::CANNOT_CONNECT_NOW
                        || code == &SqlState::TOO_MANY_CONNECTIONS =>
                {
                    AppError::DatabaseUnavailable(err.to_string())
                }
                _ => AppError::Internal(err.into()),
            },
        }
    }
}

impl From<Failure> for seckill_lock::LockError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::NotSent(err) => Self::Unavailable {
                may_have_run: false,
                source: err.to_string().into(),
            },
            Failure::Lost(why) => Self::Unavailable {
                may_have_run: true,
                source: why.into(),
            },
            Failure::Answered(err) => Self::Store {
                source: Box::new(err),
            },
        }
    }
}

fn unavailable(err: &impl std::fmt::Display) -> AppError {
    AppError::DatabaseUnavailable(err.to_string())
}
