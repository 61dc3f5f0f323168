//! `seckill-check TARGET.toml…`: a row per target file (per variant when the file lists
//! them), the table, each row's findings, and an exit status a CI can use: 0 every row
//! passed, 1 a rule was broken, 3 no rule was broken for certain but unknown answers could
//! hide one (inconclusive), 2 a file or a run went wrong (the error says which field, or
//! which request, or which fault's command).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use seckill_check::verdict::{self, Conclusion};
use seckill_check::{history, report, run, target::Target};

/// Checks a stock service described in a TOML file: load, faults, then the verdict.
#[derive(Debug, Parser)]
#[command(name = "seckill-check", version)]
struct Args {
    /// Target files (see docs/src/check-your-service.md); each gives a row, or a row per
    /// variant it lists.
    #[arg(required = true)]
    targets: Vec<PathBuf>,
    /// Only these variants of a file that lists them (repeat, or comma-separated).
    #[arg(long, value_delimiter = ',')]
    variant: Vec<String>,
    /// Write each row's history here, as <row>.json (Jepsen's counter model: a JSON array,
    /// one operation a line).
    #[arg(long)]
    history: Option<PathBuf>,
    /// Run the target files' fault commands ([parts], phases' faults): shell commands on
    /// this machine, so never without asking.
    #[arg(long)]
    faults: bool,
    /// Draw each row's sales over time against its stock into this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match check(&args).await {
        Ok(Conclusion::Pass) => ExitCode::SUCCESS,
        Ok(Conclusion::Fail) => ExitCode::from(1),
        Ok(Conclusion::Inconclusive) => ExitCode::from(3),
        Err(err) => {
            for line in err.lines() {
                eprintln!("seckill-check: {line}");
            }
            ExitCode::from(2)
        }
    }
}

async fn check(args: &Args) -> Result<Conclusion, String> {
    let targets = read_targets(args)?;
    let interrupted = on_ctrl_c();
    let (mut rows, mut errors) = (Vec::new(), Vec::new());
    let mut judging = Duration::ZERO;
    'targets: for target in &targets {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(target.timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            // The base is the address load goes to: no proxy from the environment.
            .no_proxy()
            .build()
            .map_err(|e| e.to_string())?;
        let variants: Vec<Option<(&str, &str)>> = if target.variants.is_empty() {
            vec![None]
        } else {
            let wanted =
                |v: &&(String, String)| args.variant.is_empty() || args.variant.contains(&v.0);
            let named = target.variants.iter().filter(wanted);
            named
                .map(|(name, value)| Some((name.as_str(), value.as_str())))
                .collect()
        };
        for variant in variants {
            let row = match run::row(target, variant, &http, &interrupted).await {
                Ok(row) => row,
                Err(err) => {
                    let name = variant.map(|(v, _)| format!(" {v}")).unwrap_or_default();
                    errors.push(format!("{}{name}: {}", target.name, err.why));
                    if err.ends_the_check {
                        break 'targets;
                    }
                    continue;
                }
            };
            let started = Instant::now();
            let judged = verdict::judge(&row);
            judging += started.elapsed();
            if let Some(dir) = &args.history {
                write_history(dir, &row)?;
            }
            rows.push((row, judged));
        }
    }
    if !rows.is_empty() {
        print!("{}", report::render(&rows));
        let requests: usize = rows.iter().map(|(row, _)| row.ops.len()).sum();
        println!(
            "\n{requests} requests judged in {:.1} ms",
            judging.as_secs_f64() * 1e3
        );
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, report::svg(&rows)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    // A row that went wrong leaves the check without its verdict: the rows that ran are
    // above, and the status says the run was not the one asked for.
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    let conclusions: Vec<Conclusion> = rows.iter().map(|(_, v)| v.conclusion()).collect();
    Ok(if conclusions.contains(&Conclusion::Fail) {
        Conclusion::Fail
    } else if conclusions.contains(&Conclusion::Inconclusive) {
        Conclusion::Inconclusive
    } else {
        Conclusion::Pass
    })
}

/// Flips to `true` at the first Ctrl-C, which ends the check once the phase under way has
/// stopped and its faults' remaining commands ran; a second Ctrl-C quits at once.
fn on_ctrl_c() -> run::Interrupted {
    let (interrupt, interrupted) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "seckill-check: interrupted: stopping the load and running the faults' remaining commands (Ctrl-C again quits at once)"
            );
            let _ = interrupt.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    interrupted
}

/// The target files, read and checked: a file with faults only with `--faults`, and each
/// `--variant` one a file lists.
fn read_targets(args: &Args) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for path in &args.targets {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let target = Target::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let faulted = target.phases.iter().any(|p| !p.faults.is_empty());
        if faulted && !args.faults {
            return Err(format!(
                "{}: its phases run shell commands ([parts]); pass --faults to let them",
                path.display()
            ));
        }
        targets.push(target);
    }
    let listed = |name: &String| {
        targets
            .iter()
            .any(|t| t.variants.iter().any(|v| &v.0 == name))
    };
    if let Some(unknown) = args.variant.iter().find(|name| !listed(name)) {
        return Err(format!("--variant {unknown}: no target file lists it"));
    }
    Ok(targets)
}

fn write_history(dir: &std::path::Path, row: &run::Row) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let name: String = row
        .label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{name}.json"));
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    history::write(row, &mut out).map_err(|e| format!("{}: {e}", path.display()))
}
