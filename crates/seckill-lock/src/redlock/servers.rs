//! Asking Redlock's servers: all at once, listening only until the answer is decided.
//!
//! A grant is decided once a quorum said yes, or once too few are left to say it; the
//! servers not heard from by then do not hold the lock up. A server that did not answer
//! (refused, errored, timed out) is taken as down for [`DOWN_FOR`]: grants and extensions
//! do not ask it, and count it as a no — never as a yes, so the algorithm's safety is
//! untouched. Releases still go to every server and run to the end in the background,
//! so nothing a slow server granted is left behind.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::RedisResult;
use tokio::time::Instant;

use crate::Connection;

/// How long a server that did not answer is left alone.
pub const DOWN_FOR: Duration = Duration::from_secs(1);

/// The servers, and which of them did not answer lately.
pub struct Servers<C> {
    conns: Vec<C>,
    down_until: Mutex<Vec<Option<Instant>>>,
}

/// What a round of asking came to, when it was decided.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Servers that said yes.
    pub yes: usize,
    /// Servers that answered at all, yes or no.
    pub answered: usize,
}

impl Tally {
    /// Whether `pending` more answers can change what this tally says: no once a quorum
    /// said yes; no once a quorum can no longer say yes and whether a quorum answered at
    /// all is known (it tells "held by another" from "too few servers").
    fn decided(&self, pending: usize, quorum: usize) -> bool {
        let granted = self.yes >= quorum;
        let refused = self.yes + pending < quorum
            && (self.answered >= quorum || self.answered + pending < quorum);
        granted || refused
    }
}

/// Who is asked in a round.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// The servers not known to be down (grants, extensions).
    Up,
    /// Every server, each to the end even once the round is decided (releases).
    Everyone,
}

impl<C: Connection> Servers<C> {
    pub fn new(conns: Vec<C>) -> Self {
        let down_until = Mutex::new(vec![None; conns.len()]);
        Self { conns, down_until }
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Servers that must agree: a majority.
    pub fn quorum(&self) -> usize {
        self.conns.len() / 2 + 1
    }

    /// Sends `command` to the servers `who` names, each bounded by `timeout`, and counts
    /// their answers until a quorum said yes or can no longer say it (and enough answered,
    /// or can no longer answer, to tell "no" from "no quorum answered").
    pub async fn ask<F, Fut>(&self, who: Ask, timeout: Duration, command: F) -> Tally
    where
        F: Fn(C) -> Fut,
        Fut: Future<Output = RedisResult<bool>> + Send + 'static,
    {
        let asked = match who {
            Ask::Up => self.up(),
            Ask::Everyone => (0..self.conns.len()).collect(),
        };
        let quorum = self.quorum();
        let mut answers: FuturesUnordered<BoxFuture<'static, (usize, Option<bool>)>> = asked
            .iter()
            .map(|&i| {
                let call = tokio::time::timeout(timeout, command(self.conns[i].clone()));
                let call = async move { call.await.ok().and_then(Result::ok) };
                match who {
                    // A task of its own: it runs to the end however early the round ends.
                    Ask::Everyone => {
                        let call = tokio::spawn(call);
                        async move { (i, call.await.ok().flatten()) }.boxed()
                    }
                    // Dropped with the round: a command not yet sent is never sent.
                    Ask::Up => async move { (i, call.await) }.boxed(),
                }
            })
            .collect();
        let (mut tally, mut pending) = (Tally::default(), asked.len());
        while let Some((i, answer)) = answers.next().await {
            pending -= 1;
            match answer {
                Some(yes) => {
                    tally.answered += 1;
                    tally.yes += usize::from(yes);
                    self.mark(i, None);
                }
                None => self.mark(i, Some(Instant::now() + DOWN_FOR)),
            }
            if tally.decided(pending, quorum) {
                break;
            }
        }
        tally
    }

    /// The servers not known to be down; all of them when fewer than a quorum are up
    /// (asking costs nothing then: without them there is no quorum anyway).
    fn up(&self) -> Vec<usize> {
        let now = Instant::now();
        let down = self.down_until.lock().unwrap_or_else(|e| e.into_inner());
        let up: Vec<usize> = (0..down.len())
            .filter(|&i| down[i].is_none_or(|until| until <= now))
            .collect();
        if up.len() < self.quorum() {
            return (0..down.len()).collect();
        }
        up
    }

    fn mark(&self, i: usize, down_until: Option<Instant>) {
        // Held for a write, never across an await.
        self.down_until.lock().unwrap_or_else(|e| e.into_inner())[i] = down_until;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(yes: usize, answered: usize) -> Tally {
        Tally { yes, answered }
    }

    #[test]
    fn a_round_is_decided_as_soon_as_more_answers_cannot_change_it() {
        // Five servers, a quorum of three.
        assert!(
            tally(3, 3).decided(2, 3),
            "three yes: granted, whatever the others say"
        );
        assert!(
            !tally(2, 3).decided(2, 3),
            "two yes, two to come: either way yet"
        );
        assert!(tally(0, 3).decided(2, 3), "three no: held by another");
        assert!(
            !tally(0, 2).decided(3, 3),
            "two no, three to come: could still be granted"
        );
        assert!(
            tally(1, 3).decided(1, 3),
            "one yes, three no: one more cannot make a quorum"
        );
        // Three silent and one no: refused, and fewer than a quorum can answer at all.
        assert!(tally(0, 1).decided(1, 3));
        // Two silent and one no, two to come: refused unless both grant; not decided.
        assert!(!tally(0, 1).decided(2, 3));
    }
}
