//! The seeds' broken steps, for a class (feature `teaching`): each is what a lock above is
//! built not to do, kept so that a class can watch it fail.
//!
//! | Step | Where | What it shows |
//! |---|---|---|
//! | [`SetnxLock`] | here | `SETNX` with no TTL: a holder that dies leaves the lock held for good |
//! | [`SetnxLock::releasing_blindly`] | here | `finally { DEL }`: a holder whose lock expired deletes the next holder's |
//! | [`TokenLock::checking_then_deleting`](crate::TokenLock::checking_then_deleting) | [`TokenLock`](crate::TokenLock) | `GET`, compare, then `DEL`: two steps a second holder gets between |
//! | [`TokenLock::blind_to_its_ttl`](crate::TokenLock::blind_to_its_ttl) | [`TokenLock`](crate::TokenLock) | a holder that never asks whether its TTL ran out commits after another holder got in |
//! | [`MultiLock::in_order_given`](crate::MultiLock::in_order_given) | [`MultiLock`](crate::MultiLock) | two carts taking their locks in opposite orders deadlock until their waits run out |
//! | [`Lock::renewals`](crate::Lock::renewals) | every lock | when a watchdog renewed its holder's lease, for a timeline |
//!
//! None of it has a place in a program that needs a lock to hold.

pub use crate::setnx::SetnxLock;
