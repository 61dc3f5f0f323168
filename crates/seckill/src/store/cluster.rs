//! A Redis Cluster connection that sends a command again only when it cannot have run.
//!
//! redis-rs's cluster client retries by itself: after a dropped connection it reconnects
//! and sends the command again, and when that try meets a refused connection, `LOADING`,
//! `CLUSTERDOWN` or `TRYAGAIN`, it returns *that* error. The caller then sees "refused"
//! for a command whose first send may have run — a sale whose answer was lost, told as
//! "nothing happened" — and a script that did run may run twice. So the client here is
//! built with no retries of its own ([`Store::connect`](super::Store::connect)), and this
//! wrapper sends again only after an answer that says the command never ran (a redirect,
//! a node loading or refusing writes, no connection to be had). Any other error ends the
//! command there, as it came: a timeout or a dropped connection stays an unknown outcome
//! for the caller to look up (`AppError::answer_may_be_lost`).
//!
//! It also loads a script where it is missing, and there only. Redis does not replicate
//! its script cache, so a master promoted by a failover knows none of the scripts; an
//! `EVALSHA` there is answered `NOSCRIPT`, and redis-rs's `Script` then sends `SCRIPT
//! LOAD` on the same handle — which redis-rs's cluster client sends to every master at
//! once, and which fails (or waits out its timeout) while any one of them is dead or
//! frozen: the sale, on a master that answers, would fail for another master's sake. So
//! the `SCRIPT LOAD` that follows a `NOSCRIPT` goes to the master of that `EVALSHA`'s slot
//! alone; and since the client's map of slots may be stale then (it may name a node that
//! is a replica now, which takes the load and leaves the master without it), every script
//! loaded is kept here by its SHA1, and an `EVALSHA` answered `NOSCRIPT` is sent again as
//! `EVAL` of the script itself — which cannot have run, goes wherever the key's slot is
//! served, and leaves the script cached there.
//!
//! A command answered `ASK` (its slot is migrating, and its keys have moved) is sent again
//! to the node the answer names, after `ASKING` on the same connection: without it, that
//! node would send it back with `MOVED`, and the command would fail while the slot moves.
//!
//! And it makes the client anew after a timeout. redis-rs keeps a node's connection through
//! a response timeout (it neither reconnects it nor looks at the slots again), so a master
//! frozen for good — a hung host — keeps every command for its slots timing out even once
//! its replica has been promoted, for as long as it stays frozen. A command that times out
//! makes a new client (once for however many met the timeout on the same one, and at most
//! once per timeout), which connects and asks the nodes for the slots afresh on a task of
//! its own, and replaces the old one only then; commands meanwhile, and in flight, go on
//! the old one.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterConfig};
use tokio::time::Instant;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{
    Arg, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use super::key_slot;

/// Sends in all: enough to follow a `MOVED` after a failover (the first send may reach the
/// dead master, the next a node that redirects), few enough that a request fails fast
/// while no master serves its slot.
const SENDS: u32 = 4;

/// The pause before the second send; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

/// A cluster connection; clones share the client's connections to the nodes.
#[derive(Clone)]
pub struct ClusterConn {
    shared: Arc<Shared>,
    /// The slot of the `EVALSHA` this handle sent last, when Redis answered it `NOSCRIPT`:
    /// the `SCRIPT LOAD` redis-rs sends next on this handle goes to that slot's master.
    load_on: Option<u16>,
}

/// What every clone shares: the client, and its connection now.
struct Shared {
    client: ClusterClient,
    config: ClusterConfig,
    /// The connection now, how many times it was made anew, and when it last was. Held for
    /// a clone or a swap, never across an await.
    current: RwLock<Current>,
    /// The bound on every command: a connection is made anew at most once per this.
    timeout: Duration,
}

struct Current {
    conn: ClusterConnection,
    made: u64,
    at: Instant,
}

impl ClusterConn {
    /// A connection (made lazily) of `client`, built with `retries(0)` (this does the
    /// retrying), each command bounded by `timeout` in `config`.
    pub fn new(client: ClusterClient, config: ClusterConfig, timeout: Duration) -> Self {
        let conn = client.get_pending_async_connection_with_config(config.clone());
        let current = Current {
            conn,
            made: 0,
            at: Instant::now(),
        };
        Self {
            shared: Arc::new(Shared {
                client,
                config,
                current: RwLock::new(current),
                timeout,
            }),
            load_on: None,
        }
    }

    /// `cmd` sent to the node at `host:port` after `ASKING`, on one connection, once: the
    /// node imports the slot, and takes the command for it.
    async fn asking(&self, host: String, port: u16, cmd: &Cmd) -> RedisResult<Value> {
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(cmd.clone());
        let route = SingleNodeRoutingInfo::ByAddress { host, port };
        let (mut conn, made) = self.conn();
        let result = conn.route_pipeline(pipe, 1, 1, route).await;
        self.after(made, &result);
        let mut replies = result?;
        replies.pop().ok_or_else(|| {
            RedisError::from((ErrorKind::UnexpectedReturnType, "no reply after ASKING"))
        })
    }

    /// The commands of `pipeline` (not a transaction), each sent to `host:port` after
    /// `ASKING`, one after another: the replies from `offset`, `count` of them.
    async fn asking_each(
        &self,
        host: String,
        port: u16,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut replies = Vec::with_capacity(pipeline.len());
        for cmd in pipeline.cmd_iter() {
            replies.push(self.asking(host.clone(), port, cmd).await?);
        }
        Ok(replies.into_iter().skip(offset).take(count).collect())
    }

    /// The connection now, and which one it is.
    fn conn(&self) -> (ClusterConnection, u64) {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        (current.conn.clone(), current.made)
    }

    /// After `result` on connection `made`: a timeout makes the connection anew — on a task
    /// of its own, connected and with the slots read before it replaces the one in use,
    /// which serves meanwhile — unless another timeout on the same one did already, or one
    /// was started less than a timeout ago.
    fn after<T>(&self, made: u64, result: &RedisResult<T>) {
        if !result.as_ref().is_err_and(RedisError::is_timeout) {
            return;
        }
        let shared = &self.shared;
        {
            let mut current = shared
                .current
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if current.made != made || current.at.elapsed() < shared.timeout {
                return;
            }
            // Marks the attempt: the next timeout on this connection waits its turn.
            current.at = Instant::now();
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = self.shared.clone();
        runtime.spawn(async move {
            // Each node's connection is bounded by the timeout; a few nodes may be tried.
            let connecting = shared
                .client
                .get_async_connection_with_config(shared.config.clone());
            let conn = match tokio::time::timeout(shared.timeout * 8, connecting).await {
                Ok(Ok(conn)) => conn,
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "a new cluster client could not connect yet");
                    return;
                }
                Err(_) => {
                    tracing::warn!("a new cluster client could not connect in time yet");
                    return;
                }
            };
            let mut current = shared
                .current
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if current.made == made {
                tracing::warn!(
                    "a cluster command timed out: the client was made anew, with the slots' masters found again"
                );
                current.conn = conn;
                current.made += 1;
            }
        });
    }

    /// `cmd` sent to every node the client knows, all at once: the first answer, whichever
    /// node gives it (one that is gone does not hold the others up).
    pub async fn ask_any_node(&mut self, cmd: Cmd) -> RedisResult<Value> {
        let routing = RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllNodes,
            Some(ResponsePolicy::OneSucceeded),
        ));
        let (mut conn, made) = self.conn();
        let result = conn.route_command(cmd, routing).await;
        self.after(made, &result);
        result
    }

    /// `cmd` sent to the node at `addr` (`host:port`, as `CLUSTER SLOTS` names it, which is
    /// how the client names its connections) alone, once.
    pub async fn ask_node(&mut self, addr: &str, cmd: Cmd) -> RedisResult<Value> {
        let parsed = addr.rsplit_once(':').and_then(|(host, port)| {
            let port = port.parse::<u16>().ok()?;
            Some((host.to_owned(), port))
        });
        let Some((host, port)) = parsed else {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "a node's address is not host:port",
                addr.to_owned(),
            )));
        };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
        let (mut conn, made) = self.conn();
        let result = conn.route_command(cmd, routing).await;
        self.after(made, &result);
        result
    }
}

/// Whether a command that ended in `err` cannot have run: the connection was refused or
/// there was none, or a node answered that it did not take the command (it is not the
/// slot's master, or is loading, or the cluster is down). Any other error — a timeout, a
/// connection dropped once the command may have been written — leaves the outcome unknown.
pub fn never_ran(err: &RedisError) -> bool {
    err.is_connection_refusal()
        || matches!(
            err.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::BusyLoading
                        | ServerErrorKind::ReadOnly
                )
        )
}

/// Argument `i` of `cmd`.
fn arg(cmd: &Cmd, i: usize) -> Option<&[u8]> {
    match cmd.args_iter().nth(i)? {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    }
}

/// Every script this process has loaded, by its SHA1: what an `EVALSHA` answered
/// `NOSCRIPT` is sent again with ([`as_eval`]). A few dozen scripts, each kept once.
static SCRIPTS: LazyLock<Mutex<HashMap<String, Vec<u8>>>> = LazyLock::new(Default::default);

/// When `cmd` is `SCRIPT LOAD <body>`: the body kept by its SHA1.
fn remember_script(cmd: &Cmd) {
    if !is_script_load(cmd) {
        return;
    }
    let Some(body) = arg(cmd, 2) else { return };
    let sha = redis::Script::new(&String::from_utf8_lossy(body))
        .get_hash()
        .to_owned();
    let mut scripts = SCRIPTS.lock().unwrap_or_else(PoisonError::into_inner);
    scripts.entry(sha).or_insert_with(|| body.to_vec());
}

/// `EVALSHA sha n keys… args…` as `EVAL <script> n keys… args…`, when the script is known.
fn as_eval(cmd: &Cmd) -> Option<Cmd> {
    if !arg(cmd, 0)?.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let sha = std::str::from_utf8(arg(cmd, 1)?).ok()?.to_ascii_lowercase();
    let scripts = SCRIPTS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut eval = redis::cmd("EVAL");
    eval.arg(scripts.get(&sha)?.as_slice());
    for i in 2.. {
        let Some(next) = arg(cmd, i) else { break };
        eval.arg(next);
    }
    Some(eval)
}

/// Whether Redis answered `NOSCRIPT` (as a value: redis-rs leaves a server's error in the
/// reply for the caller to extract, but for the cluster's own redirects).
fn is_noscript(result: &RedisResult<Value>) -> bool {
    let noscript = Some(ServerErrorKind::NoScript);
    match result {
        Ok(Value::ServerError(err)) => err.kind() == noscript,
        Ok(_) => false,
        Err(err) => err.kind() == ErrorKind::Server(ServerErrorKind::NoScript),
    }
}

/// The node an `ASK` answer names, `(host, port)`, when `result` is one.
fn asked_of<T>(result: &RedisResult<T>) -> Option<(String, u16)> {
    let err = result.as_ref().err()?;
    if err.kind() != ErrorKind::Server(ServerErrorKind::Ask) {
        return None;
    }
    let (node, _slot) = err.redirect_node()?;
    let (host, port) = node.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// Whether `cmd` is `SCRIPT LOAD`.
fn is_script_load(cmd: &Cmd) -> bool {
    let word =
        |i: usize, is: &str| arg(cmd, i).is_some_and(|a| a.eq_ignore_ascii_case(is.as_bytes()));
    word(0, "SCRIPT") && word(1, "LOAD")
}

/// The slot of `cmd`'s first key when it is an `EVALSHA` with keys.
fn evalsha_slot(cmd: &Cmd) -> Option<u16> {
    if !arg(cmd, 0)?.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let keys: usize = std::str::from_utf8(arg(cmd, 2)?).ok()?.parse().ok()?;
    (keys > 0).then(|| arg(cmd, 3).map(key_slot)).flatten()
}

/// How many times a command was sent, and the pause before the next send.
struct Sends {
    sent: u32,
    pause: Duration,
}

impl Sends {
    fn first() -> Self {
        Self {
            sent: 1,
            pause: FIRST_PAUSE,
        }
    }

    /// Whether a command that ended in `result` is sent again: only after an error after
    /// which it cannot have run, and at most [`SENDS`] times in all. Pauses before it is.
    ///
    /// # Cancel safety
    ///
    /// Dropped during the pause, nothing more is sent.
    async fn again<T>(&mut self, result: &RedisResult<T>) -> bool {
        let Err(err) = result else { return false };
        if self.sent >= SENDS || !never_ran(err) {
            return false;
        }
        tracing::debug!(error = %err, sent = self.sent, "a cluster command that did not run, sent again");
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        self.sent += 1;
        true
    }
}

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            remember_script(cmd);
            let load_on = self.load_on.take().filter(|_| is_script_load(cmd));
            // The EVAL this EVALSHA is sent again as, once it was answered NOSCRIPT.
            let mut eval: Option<Cmd> = None;
            let mut sends = Sends::first();
            loop {
                let (mut conn, made) = self.conn();
                let result = match (load_on, &eval) {
                    (Some(slot), _) => {
                        let master = Route::new(slot, SlotAddr::Master);
                        let routing =
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(master));
                        conn.route_command(cmd.clone(), routing).await
                    }
                    (None, Some(eval)) => conn.req_packed_command(eval).await,
                    (None, None) => conn.req_packed_command(cmd).await,
                };
                self.after(made, &result);
                let result = match asked_of(&result) {
                    Some((host, port)) => {
                        let sent = eval.as_ref().unwrap_or(cmd);
                        self.asking(host, port, sent).await
                    }
                    None => result,
                };
                if eval.is_none() && is_noscript(&result) {
                    // It did not run: sent again as EVAL, once, when the script is known;
                    // else redis-rs's Script loads it, on this slot's master.
                    eval = as_eval(cmd);
                    if eval.is_some() {
                        continue;
                    }
                    self.load_on = evalsha_slot(cmd);
                }
                if !sends.again(&result).await {
                    return result;
                }
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut sends = Sends::first();
            loop {
                let (mut conn, made) = self.conn();
                let result = conn.req_packed_commands(pipeline, offset, count).await;
                self.after(made, &result);
                let result = match asked_of(&result) {
                    // A transaction takes its keys as one: it waits for the slot to move.
                    Some((host, port)) if !pipeline.is_transaction() => {
                        self.asking_each(host, port, pipeline, offset, count).await
                    }
                    _ => result,
                };
                if !sends.again(&result).await {
                    return result;
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.conn().0.get_db()
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use redis::{ErrorKind, RedisError};

    use super::never_ran;

    fn io(kind: io::ErrorKind) -> RedisError {
        RedisError::from(io::Error::new(kind, "test"))
    }

    /// The `SCRIPT LOAD` after a `NOSCRIPT` is told apart, and the slot of the `EVALSHA`
    /// that was refused is its first key's.
    #[test]
    fn a_script_is_loaded_on_the_slot_of_the_call_that_missed_it() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg("0123")
            .arg(2)
            .arg("seckill:{101}:stock")
            .arg("x");
        assert_eq!(super::evalsha_slot(&evalsha), Some(4466));
        let mut no_keys = redis::cmd("EVALSHA");
        no_keys.arg("0123").arg(0);
        assert_eq!(super::evalsha_slot(&no_keys), None);
        assert_eq!(
            super::evalsha_slot(&redis::cmd("GET").arg("k").to_owned()),
            None
        );
        assert!(super::is_script_load(
            redis::cmd("SCRIPT").arg("LOAD").arg("return 1")
        ));
        assert!(!super::is_script_load(redis::cmd("SCRIPT").arg("FLUSH")));
    }

    /// An `ASK` answer names the node the command goes to next; nothing else does.
    #[test]
    fn an_ask_names_the_node_to_ask() {
        let ask = redis::parse_redis_value(b"-ASK 3999 127.0.0.1:6381\r\n")
            .and_then(|v| v.extract_error())
            .map(|_| ());
        assert_eq!(super::asked_of(&ask), Some(("127.0.0.1".to_owned(), 6381)));
        let moved = redis::parse_redis_value(b"-MOVED 3999 127.0.0.1:6381\r\n")
            .and_then(|v| v.extract_error())
            .map(|_| ());
        assert_eq!(super::asked_of(&moved), None);
        assert_eq!(super::asked_of(&Ok(())), None);
    }

    /// A script once loaded is sent as `EVAL` of itself, with the same keys and arguments,
    /// when an `EVALSHA` of it is answered `NOSCRIPT`; one never loaded is not.
    #[test]
    fn an_evalsha_the_node_lacks_is_sent_as_the_script_it_names() {
        let body = "return {KEYS[1], ARGV[1]}";
        super::remember_script(redis::cmd("SCRIPT").arg("LOAD").arg(body));
        let sha = redis::Script::new(body).get_hash().to_owned();
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(&sha).arg(1).arg("seckill:{101}:stock").arg("x");
        let mut eval = redis::cmd("EVAL");
        eval.arg(body).arg(1).arg("seckill:{101}:stock").arg("x");
        let sent = super::as_eval(&evalsha).expect("a known script");
        assert_eq!(sent.get_packed_command(), eval.get_packed_command());
        let mut unknown = redis::cmd("EVALSHA");
        unknown.arg("0".repeat(40)).arg(0);
        assert!(super::as_eval(&unknown).is_none());
    }

    /// What is sent again: a refused connection, none to be had, a node's "not here, not
    /// now" — never a timeout or a connection dropped once the command may have been
    /// written, whose command may have run.
    #[test]
    fn only_what_cannot_have_run_is_sent_again() {
        assert!(never_ran(&io(io::ErrorKind::ConnectionRefused)));
        assert!(never_ran(&RedisError::from((
            ErrorKind::ClusterConnectionNotFound,
            "no connection"
        ))));
        for reply in [
            "-MOVED 3999 127.0.0.1:6381\r\n",
            "-ASK 3999 127.0.0.1:6381\r\n",
            "-TRYAGAIN later\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
            "-LOADING Redis is loading\r\n",
            "-READONLY You can't write against a read only replica.\r\n",
            "-MASTERDOWN Link with MASTER is down\r\n",
        ] {
            let err = redis::parse_redis_value(reply.as_bytes())
                .and_then(|v| v.extract_error())
                .expect_err("an error reply");
            assert!(never_ran(&err), "{reply:?} is sent again");
        }

        for kind in [
            io::ErrorKind::TimedOut,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::UnexpectedEof,
        ] {
            assert!(!never_ran(&io(kind)), "{kind:?} may have run");
        }
        assert!(!never_ran(&RedisError::from((
            ErrorKind::Io,
            "connection dropped"
        ))));
        let script_error = redis::parse_redis_value(b"-ERR user_script:1: boom\r\n")
            .and_then(|v| v.extract_error())
            .expect_err("an error reply");
        assert!(!never_ran(&script_error), "a script's own error ends it");
    }
}
