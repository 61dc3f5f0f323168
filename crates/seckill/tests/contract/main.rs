//! Tests that start no server: the HTTP contract's refusals, driven in-process through
//! `startup::app` with `tower::ServiceExt::oneshot` against an instance whose Redis is not
//! there (so any request that reached Redis would answer 503, and a 400 shows it was refused
//! before), and the deployment files (compose, Nginx configs, Dockerfile) against the
//! service's flags.

mod deploy;
mod in_process;
mod k8s;

/// The service's binary, as cargo built it for these tests.
const SECKILL: &str = env!("CARGO_BIN_EXE_seckill");
