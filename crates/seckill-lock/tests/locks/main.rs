//! The locks as a library against real `redis-server`s: the watchdog lock on one Redis,
//! Redlock on five.

mod cancel;
mod examples;
mod fenced_multi;
mod redlock;
mod watchdog;
