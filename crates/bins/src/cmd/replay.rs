//! `metaforge replay`: checks recorded Temporal histories of design-flow runs against this
//! build's workflow with Temporal's own replayer (issue 17), so a worker build that would decide
//! differently from the runs in flight is caught before it is deployed. Histories come from
//! files (the SDK's JSON) or straight from the server (`--run`, on `TEMPORAL_HOST`); `--save`
//! keeps the fetched ones as files. Exit 0: every history replays; 1: at least one does not (each
//! named with the replayer's reason); 2: bad input (no history named, an unreadable file, a file
//! that is not a history, a run the server does not know). Feature `temporal`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// `metaforge replay` arguments.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// A recorded history (JSON of temporal.api.history.v1.History, as `--save` writes it).
    #[arg(value_name = "HISTORY.json")]
    files: Vec<PathBuf>,
    /// A run whose history to fetch from the Temporal server at `TEMPORAL_HOST` (repeatable).
    #[arg(long = "run", value_name = "RUN_ID")]
    runs: Vec<String>,
    /// Write each fetched history to DIR/<run id>.json before replaying it.
    #[arg(long, value_name = "DIR", requires = "runs")]
    save: Option<PathBuf>,
}

/// Runs `metaforge replay`.
#[cfg(feature = "temporal")]
pub(crate) fn run(args: &ReplayArgs, settings: &crate::settings::Settings) -> ExitCode {
    if args.files.is_empty() && args.runs.is_empty() {
        eprintln!("metaforge replay: name at least one HISTORY.json or --run RUN_ID");
        return ExitCode::from(2);
    }
    // The SDK's replay worker is not Send: one current-thread runtime, blocked on.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("metaforge replay: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(replay(args, &crate::runs_temporal::temporal_host(&settings.runs)))
}

#[cfg(feature = "temporal")]
async fn replay(args: &ReplayArgs, host: &str) -> ExitCode {
    use metaforge_adapters_temporal::replay::{fetch_history, history_from_json, replay};
    let mut histories = Vec::new();
    for file in &args.files {
        let name = file.display().to_string();
        let bytes = match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(e) => {
                eprintln!("metaforge replay: {name}: {e}");
                return ExitCode::from(2);
            }
        };
        match history_from_json(&name, &bytes) {
            Ok(history) => histories.push((name, history)),
            Err(e) => {
                eprintln!("metaforge replay: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if !args.runs.is_empty() {
        let client = match metaforge_adapters_temporal::connect(host).await {
            Ok(client) => client,
            Err(e) => {
                eprintln!("metaforge replay: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(dir) = &args.save
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            eprintln!("metaforge replay: --save {}: {e}", dir.display());
            return ExitCode::from(2);
        }
        for run in &args.runs {
            let bytes = match fetch_history(&client, run).await {
                Ok(bytes) => bytes,
                Err(e) => {
                    eprintln!("metaforge replay: --run {run}: {e}");
                    return ExitCode::from(2);
                }
            };
            if let Some(dir) = &args.save {
                let path = dir.join(format!("{run}.json"));
                if let Err(e) = std::fs::write(&path, &bytes) {
                    eprintln!("metaforge replay: --save {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            let name = format!("run {run}");
            match history_from_json(&name, &bytes) {
                Ok(history) => histories.push((name, history)),
                Err(e) => {
                    eprintln!("metaforge replay: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let verdicts = match replay(histories).await {
        Ok(verdicts) => verdicts,
        Err(e) => {
            eprintln!("metaforge replay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut diverged = 0_usize;
    for verdict in &verdicts {
        match &verdict.failure {
            None => println!("replays: {} ({} events)", verdict.source_name, verdict.events),
            Some(reason) => {
                diverged += 1;
                println!(
                    "DOES NOT REPLAY: {} ({} events): {reason}",
                    verdict.source_name, verdict.events
                );
            }
        }
    }
    println!(
        "{} of {} histories replay deterministically on this build",
        verdicts.len() - diverged,
        verdicts.len()
    );
    if diverged == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Without the `temporal` feature: the command exists and says how to get it.
#[cfg(not(feature = "temporal"))]
pub(crate) fn run(_args: &ReplayArgs, _settings: &crate::settings::Settings) -> ExitCode {
    eprintln!("{}", super::without_temporal("metaforge replay"));
    ExitCode::from(2)
}
