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

/// The faults of a phase under way.
pub(crate) struct Faulting {
    over: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<String>>>,
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
            tokio::spawn(async move {
                let mut said = Vec::new();
                let steps = std::iter::once((fault.at, &fault.run, "answered"))
                    .chain(fault.then_after.zip(fault.then.as_ref()).map(|(n, then)| (n, then, "more answered")));
                let mut base = 0;
                for (count, name, what) in steps {
                    while (control.answered() as usize) < base + count && !over.load(Ordering::Acquire) {
                        tokio::time::sleep(POLL).await;
                    }
                    let command = part.get(name).map(String::as_str).unwrap_or_default();
                    let outcome = run(command).await;
                    base = control.answered() as usize;
                    said.push(format!(
                        "{phase}: {name} of {} once {count} {what} ({base} in all by then): {outcome}",
                        fault.part
                    ));
                }
                said
            })
        })
        .collect();
    Faulting { over, tasks }
}

impl Faulting {
    /// Once the phase's load is over: every fault's remaining steps run, and what each
    /// command did.
    pub(crate) async fn finish(self) -> Vec<String> {
        self.over.store(true, Ordering::Release);
        let mut said = Vec::new();
        for task in self.tasks {
            said.extend(
                task.await
                    .unwrap_or_else(|e| vec![format!("a fault's task failed: {e}")]),
            );
        }
        said
    }
}

/// Runs `command` under `sh -c`: `exit 0`, or what went wrong.
async fn run(command: &str) -> String {
    let child = tokio::process::Command::new("sh")
        .args(["-c", command])
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(COMMAND_TIMEOUT, child).await {
        Ok(Ok(output)) if output.status.success() => "exit 0".into(),
        Ok(Ok(output)) => format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Ok(Err(err)) => format!("could not run sh: {err}"),
        Err(_) => format!("killed after {COMMAND_TIMEOUT:?}"),
    }
}
