//! A phase's faults: the target file's shell commands (kill, pause, resume, restart a
//! part of the deployment), each run once a number of the phase's requests were answered
//! (its `then` once a number more were, after it ran) — aimed by an event, not a clock. A fault whose `then` had not run when the phase ended
//! runs it then, so that nothing is left paused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use seckill_load::Control;

use crate::target::{Fault, Part};

/// How long a fault's watcher waits between looks at the answered count.
const POLL: Duration = Duration::from_millis(2);

/// How long a fault's command may take before it is killed and reported.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// What one fault command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// `<phase>: <command> of <part> once <n> answered (<m> in all by then)`.
    pub what: String,
    /// `None` when it exited 0; else what went wrong.
    pub failed: Option<String>,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.failed {
            None => write!(f, "{}: exit 0", self.what),
            Some(why) => write!(f, "{}: FAILED, {why}", self.what),
        }
    }
}

/// The faults of a phase under way.
pub(crate) struct Faulting {
    over: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Ran>>>,
}

/// Starts watching `control`'s answered count for each of `faults`.
pub(crate) fn watch(
    faults: &[Fault],
    parts: &BTreeMap<String, Part>,
    control: &Control,
    phase: &str,
) -> Faulting {
    let over = Arc::new(AtomicBool::new(false));
    let tasks = faults
        .iter()
        .map(|fault| {
            let (fault, control, over) = (fault.clone(), control.clone(), over.clone());
            let part = parts.get(&fault.part).cloned().unwrap_or_default();
            let phase = phase.to_owned();
            tokio::spawn(async move { steps(&fault, &part, &control, &over, &phase).await })
        })
        .collect();
    Faulting { over, tasks }
}

/// A fault's `run`, then its `then`, each once its count of answers came (or the phase
/// ended).
async fn steps(
    fault: &Fault,
    part: &Part,
    control: &Control,
    over: &AtomicBool,
    phase: &str,
) -> Vec<Ran> {
    let mut said = Vec::new();
    let then = fault.then_after.zip(fault.then.as_ref());
    let steps = std::iter::once((fault.at, &fault.run, "answered"))
        .chain(then.map(|(n, then)| (n, then, "more answered")));
    let mut base = 0;
    for (count, name, what) in steps {
        while (control.answered() as usize) < base + count && !over.load(Ordering::Acquire) {
            tokio::time::sleep(POLL).await;
        }
        let command = part.get(name).map(String::as_str).unwrap_or_default();
        let failed = run(command).await;
        base = control.answered() as usize;
        said.push(Ran {
            what: format!(
                "{phase}: {name} of {} once {count} {what} ({base} in all by then)",
                fault.part
            ),
            failed,
        });
    }
    said
}

impl Faulting {
    /// Once the phase's load is over: every fault's remaining steps run, and what each
    /// command did.
    pub(crate) async fn finish(self) -> Vec<Ran> {
        self.over.store(true, Ordering::Release);
        let mut said = Vec::new();
        for task in self.tasks {
            said.extend(task.await.unwrap_or_else(|e| {
                vec![Ran {
                    what: "a fault's task".into(),
                    failed: Some(e.to_string()),
                }]
            }));
        }
        said
    }
}

/// Runs `command` under `sh -c` in a process group of its own, its output discarded (a
/// command that starts a server in the background keeps no pipe of ours open): `None`
/// when it exits 0. Past [`COMMAND_TIMEOUT`] the whole group is killed.
async fn run(command: &str) -> Option<String> {
    let child = tokio::process::Command::new("sh")
        .args(["-c", command])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(err) => return Some(format!("could not run sh: {err}")),
    };
    match tokio::time::timeout(COMMAND_TIMEOUT, child.wait()).await {
        Ok(Ok(status)) if status.success() => None,
        Ok(Ok(status)) => Some(status.to_string()),
        Ok(Err(err)) => Some(err.to_string()),
        Err(_) => {
            if let Some(pid) = child.id() {
                // The group's id is the shell's pid: every command it started goes too.
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &format!("-{pid}")])
                    .status();
            }
            Some(format!("killed after {COMMAND_TIMEOUT:?}"))
        }
    }
}
