//! `seckill-check` against a stock service written without the project's code —
//! `check/example/stock_service.py`, Python's standard library — described by
//! `check/example/stock.toml`: it catches the service's read-then-write race and passes its
//! fix, and the history it writes is judged the same by `scripts/check-history.py` (the
//! counter checker's rule, written apart from the checker). Bad target files get an error
//! naming the field.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use seckill_testkit::{root, scratch_dir};

const CHECK: &str = env!("CARGO_BIN_EXE_seckill-check");

/// The Python service, racy or fixed, on a free loopback port; killed when dropped.
struct Foreign {
    child: Child,
    port: u16,
}

impl Foreign {
    fn start(mode: &str) -> Self {
        Self::start_with(&[mode])
    }

    fn start_with(args: &[&str]) -> Self {
        let mut child = Command::new("python3")
            .arg(root().join("check/example/stock_service.py"))
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the example service");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("its stdout");
        BufReader::new(stdout).read_line(&mut line).unwrap();
        // "listening on 127.0.0.1:<port> (<mode>)"
        let port = line
            .split(':')
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("a port in {line:?}"));
        Self { child, port }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory, removed when the test is done with it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Self {
        Self(scratch_dir(what))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `check/example/stock.toml` with its base at `port`, written into `dir`.
fn target_file(dir: &Path, port: u16) -> PathBuf {
    let text = std::fs::read_to_string(root().join("check/example/stock.toml")).unwrap();
    let text = text.replace("127.0.0.1:9090", &format!("127.0.0.1:{port}"));
    let path = dir.join("stock.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check(args: &[&Path]) -> Output {
    Command::new(CHECK).args(args).output().unwrap()
}

fn history_check(dir: &Path) -> Output {
    let histories: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(histories.len(), 1, "one row, one history: {histories:?}");
    Command::new("python3")
        .arg(root().join("scripts/check-history.py"))
        .args(&histories)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn catches_the_race_in_a_foreign_service_and_passes_its_fix() {
    for (mode, passes) in [("--racy", false), ("--fixed", true)] {
        let service = Foreign::start(mode);
        let scratch = Scratch::new("check");
        let dir = &scratch.0;
        let file = target_file(dir, service.port);
        let histories = dir.join("history");
        let output = check(&[&file, Path::new("--history"), &histories]);
        let said = text(&output);
        if passes {
            assert_eq!(output.status.code(), Some(0), "{mode}: {said}");
            assert!(said.contains("stock_service.py: pass"), "{said}");
        } else {
            assert_eq!(output.status.code(), Some(1), "{mode}: {said}");
            for rule in [
                "oversold:",
                "lost updates:",
                "two orders for a key:",
                "past the limit:",
            ] {
                assert!(
                    said.contains(rule),
                    "{mode}: the race shows as {rule} {said}"
                );
            }
        }
        let history = history_check(&histories);
        assert_eq!(
            history.status.code(),
            Some(if passes { 0 } else { 1 }),
            "{mode}: the history's own check: {}",
            text(&history)
        );
    }
}

/// Each broken file is refused before a request is sent, with exit status 2 and the
/// field's name.
#[test]
fn a_bad_target_file_is_refused_naming_the_field() {
    let good = std::fs::read_to_string(root().join("check/example/stock.toml")).unwrap();
    let scratch = Scratch::new("check-bad");
    let dir = &scratch.0;
    let cases = [
        (
            "base = \"http://127.0.0.1:9090\"",
            "base = \"http://192.0.2.7:9090\"",
            "base: 192.0.2.7 is not a loopback address",
        ),
        (
            "base = \"http://127.0.0.1:9090\"",
            "base = \"https://127.0.0.1:9090\"",
            "is not an http:// URL",
        ),
        ("stock = 100", "stock = -1", "stock: -1 is not within"),
        (
            "sold = [200]",
            "sold = [200]\nsold_again = [201]",
            "unknown field `sold_again`",
        ),
        (
            "refused = [403]",
            "refused = [200]",
            "buy.refused: 200 is also in buy.sold",
        ),
        (
            "pointer = \"/remaining\"",
            "pointer = \"remaining\"",
            "stock_left.pointer",
        ),
        (
            "/buy?product={product}&user={user}",
            "/buy?product={product}&user={buyer}",
            "buy.path: {buyer} is not a placeholder",
        ),
        (
            "repeats = 2",
            "repeats = 2\nfaults = [{ part = \"db\", run = \"kill\" }]",
            "phases[0].faults[0].part: no [parts.db]",
        ),
    ];
    for (from, to, error) in cases {
        assert!(good.contains(from), "the example holds {from}");
        let path = dir.join("bad.toml");
        std::fs::write(&path, good.replacen(from, to, 1)).unwrap();
        let output = check(&[&path]);
        let said = text(&output);
        assert_eq!(output.status.code(), Some(2), "{to}: {said}");
        assert!(said.contains(error), "{to}: expected {error:?} in {said}");
    }
}

/// A fault from the file, aimed by how many requests were answered: the fixed service
/// paused (SIGSTOP) once 100 were, resumed once 40 more were — more than the 20 requests
/// in flight when the pause took hold, so some timed out. Their purchases are unknown
/// until the checker resends each one's key, as an app would: the service answers what the
/// first send did, and the fix passes. Without `--faults` the file's commands do not run.
#[test]
fn a_paused_service_is_settled_by_resending_the_keys_and_passes() {
    let service = Foreign::start("--fixed");
    let scratch = Scratch::new("check-pause");
    let pid = service.child.id();
    let file = with_fault(
        &scratch.0,
        service.port,
        &format!("pause = \"kill -STOP {pid}\"\nresume = \"kill -CONT {pid}\""),
        "faults = [{ part = \"service\", run = \"pause\", at = 100, then = \"resume\", then_after = 40 }]",
    );

    let refused = check(&[&file]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("pass --faults"),
        "{}",
        text(&refused)
    );

    let output = check(&[&file, Path::new("--faults")]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(
        said.contains("pause of service once 100 answered")
            && said.contains("resume of service once 40 more answered"),
        "each fault ran when its count of answers came: {said}"
    );
    assert!(
        said.contains("requests resent with their keys"),
        "the pause left purchases unknown, settled by their keys: {said}"
    );
}

#[test]
fn a_sale_answered_with_a_long_document_still_names_its_order() {
    // Each sale's answer is 8 KiB, its order id after the receipt: past what a history
    // keeps of a body, so the id is read from the whole answer, not from its cut.
    let service = Foreign::start_with(&["--fixed", "--receipt", "8192"]);
    let scratch = Scratch::new("check-long");
    let file = target_file(&scratch.0, service.port);
    let output = check(&[&file]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(!said.contains("names no order"), "{said}");
}

/// `[parts.service]` commands and a phase's fault added to the example file at `port`.
fn with_fault(dir: &Path, port: u16, part: &str, fault: &str) -> PathBuf {
    let file = target_file(dir, port);
    let faulted = std::fs::read_to_string(&file)
        .unwrap()
        .replacen("timeout_ms = 5000", "timeout_ms = 300", 1)
        .replacen("repeats = 2", &format!("repeats = 2\n{fault}"), 1)
        + &format!("\n[parts.service]\n{part}\n");
    std::fs::write(&file, faulted).unwrap();
    file
}

#[test]
fn a_fault_command_that_fails_ends_the_check_naming_it() {
    let service = Foreign::start("--fixed");
    let scratch = Scratch::new("check-failed-fault");
    let file = with_fault(
        &scratch.0,
        service.port,
        "pause = \"exit 3\"",
        "faults = [{ part = \"service\", run = \"pause\", at = 100 }]",
    );
    let output = check(&[&file, Path::new("--faults")]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains("a fault's command failed") && said.contains("pause of service"),
        "{said}"
    );
}

/// The one-letter state of process `pid` (`T`: stopped), from /proc.
fn state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // "<pid> (<name>) <state> ...": the name may hold spaces, the state follows its ')'.
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

#[test]
fn ctrl_c_while_a_part_is_paused_resumes_it_before_the_check_ends() {
    let service = Foreign::start("--fixed");
    let pid = service.child.id();
    let scratch = Scratch::new("check-interrupt");
    // Paused at the 100th answer, resumed only once 500 more came (the phase's 600 in all,
    // most of them timeouts): long before, only the check's own ending can resume it.
    let file = with_fault(
        &scratch.0,
        service.port,
        &format!("pause = \"kill -STOP {pid}\"\nresume = \"kill -CONT {pid}\""),
        "faults = [{ part = \"service\", run = \"pause\", at = 100, then = \"resume\", then_after = 500 }]",
    );
    let mut checking = Command::new(CHECK)
        .args([&file, Path::new("--faults")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Aimed by the event: the service stopped (a guard of a minute, not a window).
    let guard = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while state(pid) != 'T' {
        assert!(std::time::Instant::now() < guard, "the pause never came");
        if checking.try_wait().unwrap().is_some() {
            let said = text(&checking.wait_with_output().unwrap());
            panic!("the check ended before the pause: {said}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let interrupted = Command::new("kill")
        .args(["-INT", &checking.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let output = checking.wait_with_output().unwrap();
    let said = text(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains("interrupted") && said.contains("resume of service"),
        "{said}"
    );
    assert_ne!(
        state(pid),
        'T',
        "the check ended with the service still paused: {said}"
    );
}

#[test]
fn a_row_that_goes_wrong_leaves_the_other_rows_to_run() {
    // Two files: the first's reset goes to a path the service does not have (404), the
    // second is the example. The first is named on stderr, the second gets its row.
    let service = Foreign::start("--fixed");
    let scratch = Scratch::new("check-two-rows");
    let good = target_file(&scratch.0, service.port);
    let text_of = std::fs::read_to_string(&good).unwrap();
    assert!(text_of.contains("path = \"/reset\""));
    let broken = scratch.0.join("broken.toml");
    let broken_text = text_of
        .replacen("path = \"/reset\"", "path = \"/no-reset\"", 1)
        .replacen("name = \"stock_service.py\"", "name = \"broken\"", 1);
    std::fs::write(&broken, broken_text).unwrap();
    let output = check(&[&broken, &good]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("broken: reset answered 404"), "{said}");
    assert!(said.contains("stock_service.py: pass"), "{said}");
}
