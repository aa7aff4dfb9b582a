//! `metaforge llm complete` and `metaforge providers list`: the provider pipeline from the shell.
//!
//! Argument parsing and output only: the provider composition is `crate::providers_config`, shared
//! with `metaforge gateway`.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use futures::StreamExt;
use metaforge_app::pipeline::{CallProgress, CallSpec, CallUsage, Candidate, PipelineError, UsageSink};
use metaforge_domain::providers::resolve_provider;
use metaforge_domain::routing::{
    MODEL_ROUTES_PATH_ENV, RouteCall, RoutingInputs, RoutingTable, env_var_for_role, resolve_route,
};
use metaforge_ports::{LlmMessage, LlmRequest, StreamEvent};

use crate::providers_config::{BuildError, build_pipeline, provider_rows};
use crate::settings::Settings;

/// `metaforge llm …`
#[derive(Debug, Subcommand)]
pub(crate) enum LlmCommand {
    /// One completion through the pipeline (retries, credential rotation, fallbacks).
    Complete(CompleteArgs),
}

/// Arguments of `metaforge llm complete`.
#[derive(Debug, Args)]
pub(crate) struct CompleteArgs {
    /// Routing role, resolved by the routing rules (`METAFORGE_ROUTE_<ROLE>`, the routes file at
    /// `METAFORGE_MODEL_ROUTES_PATH`); `METAFORGE_FALLBACK_PROVIDERS` follows it.
    #[arg(long, conflicts_with_all = ["provider", "model"])]
    role: Option<String>,
    /// Provider id or alias (with --model).
    #[arg(long, requires = "model")]
    provider: Option<String>,
    /// Model name (with --provider).
    #[arg(long, requires = "provider")]
    model: Option<String>,
    /// Stream the answer as it is generated.
    #[arg(long)]
    stream: bool,
    /// Session id for credential pinning.
    #[arg(long, default_value = "cli")]
    session: String,
    /// Output cap.
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Give up after this many seconds for the whole call (every retry and fallback included);
    /// exit 1 naming the limit.
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout)]
    timeout: Option<std::time::Duration>,
    /// The prompt.
    prompt: String,
}

/// `metaforge providers …`
#[derive(Debug, Subcommand)]
pub(crate) enum ProvidersCommand {
    /// Every provider: family, configured or not, base URL and where it comes from.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Prints each usage record to stderr as one JSON line (raw usage attached).
struct StderrUsage;

impl UsageSink for StderrUsage {
    fn record(&self, usage: CallUsage) {
        let line = serde_json::json!({"usage_event": usage.event, "raw_usage": usage.raw});
        eprintln!("{line}");
    }
}

fn chain_from_args(
    args: &CompleteArgs,
    settings: &Settings,
) -> anyhow::Result<(String, Vec<Candidate>, Option<Candidate>)> {
    let role = args.role.clone().unwrap_or_else(|| "chat".to_owned());
    let fallbacks = settings.routing.fallbacks.clone();
    if let (Some(provider), Some(model)) = (&args.provider, &args.model) {
        let info = resolve_provider(provider)?;
        let explicit = Candidate {
            provider: info.id.to_owned(),
            model: model.clone(),
        };
        return Ok((role, fallbacks, Some(explicit)));
    }
    let table = match &settings.routing.routes_path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{MODEL_ROUTES_PATH_ENV}={path}: {e}"))?;
            RoutingTable::from_json(&text).map_err(|e| anyhow::anyhow!("{path}: {e}"))?
        }
        None => RoutingTable::default(),
    };
    let routes: &BTreeMap<String, String> = &settings.routing.overrides;
    let inputs = RoutingInputs {
        table: &table,
        env: routes,
        credentialed: None,
        selection: None,
        default: None,
    };
    let call = RouteCall {
        role: role.clone(),
        ..RouteCall::default()
    };
    let resolved = resolve_route(&inputs, &call).map_err(|e| {
        anyhow::anyhow!(
            "{e} (set {}=provider:model or point {MODEL_ROUTES_PATH_ENV} at a routes file)",
            env_var_for_role(&role)
        )
    })?;
    tracing::info!(
        role = role.as_str(),
        source = ?resolved.source,
        provider = resolved.provider.as_str(),
        model = resolved.model.as_str(),
        "llm_route_resolved"
    );
    let mut chain = vec![Candidate {
        provider: resolved.provider,
        model: resolved.model,
    }];
    chain.extend(fallbacks);
    Ok((role, chain, None))
}

/// Runs `metaforge llm …`.
pub(crate) fn run_llm(command: LlmCommand, settings: &Settings) -> ExitCode {
    let LlmCommand::Complete(args) = command;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("metaforge: cannot start runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(complete(args, settings))
}

async fn complete(args: CompleteArgs, settings: &Settings) -> ExitCode {
    let _traces = crate::system::init_logging(&settings.log, "llm");
    let (role, chain, explicit) = match chain_from_args(&args, settings) {
        Ok(parts) => parts,
        Err(err) => {
            eprintln!("metaforge: {err}");
            return ExitCode::from(2);
        }
    };
    let mut chains = BTreeMap::new();
    if !chain.is_empty() {
        chains.insert(role.clone(), chain);
    }
    let (progress_tx, progress_rx) = tokio::sync::watch::channel(None);
    let pipeline = match build_pipeline(chains, explicit.as_slice(), &[], Arc::new(StderrUsage), settings) {
        Ok(pipeline) => pipeline.with_progress(progress_tx),
        Err(BuildError::Config(err)) => {
            eprintln!("metaforge: {err}");
            return ExitCode::from(2);
        }
        Err(err) => {
            eprintln!("metaforge: {err}");
            return ExitCode::FAILURE;
        }
    };
    let spec = CallSpec {
        role,
        explicit,
        session_id: args.session.clone(),
    };
    let request = LlmRequest {
        messages: vec![LlmMessage::user_text(args.prompt.clone())],
        max_tokens: args.max_tokens,
        ..LlmRequest::default()
    };
    let ticker = std::io::IsTerminal::is_terminal(&std::io::stderr())
        .then(|| tokio::spawn(show_progress(progress_rx)));
    let call = answer(&pipeline, &spec, request, args.stream, ticker.as_ref());
    let code = match args.timeout {
        Some(limit) => match tokio::time::timeout(limit, call).await {
            Ok(code) => code,
            Err(_) => {
                stop_progress(ticker.as_ref());
                eprintln!(
                    "metaforge: no answer within {} s (--timeout); nothing more was waited for",
                    limit.as_secs_f64()
                );
                ExitCode::FAILURE
            }
        },
        None => call.await,
    };
    stop_progress(ticker.as_ref());
    code
}

/// Parses `--timeout` seconds (a positive number, fractions allowed).
fn parse_timeout(text: &str) -> anyhow::Result<std::time::Duration> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| anyhow::anyhow!("'{text}' is not a number of seconds"))?;
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(anyhow::anyhow!("'{text}' must be a positive number of seconds"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// On a terminal, after the first second, one self-updating line on stderr saying what the call
/// waits on (provider, model, attempt n of m) and for how long.
async fn show_progress(progress: tokio::sync::watch::Receiver<Option<CallProgress>>) {
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let waiting = progress.borrow().as_ref().map_or_else(
            || "the provider pipeline".to_owned(),
            |p| {
                let chain = if p.candidates > 1 {
                    format!(", provider {} of {}", p.candidate, p.candidates)
                } else {
                    String::new()
                };
                format!(
                    "{}:{} (attempt {} of {}{chain})",
                    p.provider, p.model, p.attempt, p.max_attempts
                )
            },
        );
        eprint!("\r\x1b[2Kwaiting on {waiting}: {} s", started.elapsed().as_secs());
        let _ = std::io::stderr().flush();
    }
}

/// Stops the progress line and clears it, so answers and errors start on a clean line.
fn stop_progress(ticker: Option<&tokio::task::JoinHandle<()>>) {
    if let Some(ticker) = ticker
        && !ticker.is_finished()
    {
        ticker.abort();
        eprint!("\r\x1b[2K");
        let _ = std::io::stderr().flush();
    }
}

/// Calls the pipeline and prints the answer (streamed or whole) on stdout.
async fn answer(
    pipeline: &metaforge_app::pipeline::ProviderPipeline,
    spec: &CallSpec,
    request: LlmRequest,
    stream: bool,
    ticker: Option<&tokio::task::JoinHandle<()>>,
) -> ExitCode {
    let mut out = std::io::stdout();
    if stream {
        let served = match pipeline.stream(spec, request).await {
            Ok(s) => s,
            Err(err) => {
                stop_progress(ticker);
                return pipeline_failure(&err);
            }
        };
        stop_progress(ticker);
        let mut events = served.value;
        let mut failed = false;
        let mut line_open = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(StreamEvent::TextDelta { text }) => {
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                    line_open = true;
                }
                Ok(StreamEvent::Finish { .. }) if line_open => {
                    let _ = writeln!(out);
                    let _ = out.flush();
                    line_open = false;
                }
                Ok(StreamEvent::ToolCallStart { name, .. }) => {
                    let sep = if line_open { "\n" } else { "" };
                    let _ = write!(out, "{sep}[tool call {name} ");
                }
                Ok(StreamEvent::ToolCallArgumentsDelta { delta, .. }) => {
                    let _ = write!(out, "{delta}");
                }
                Ok(StreamEvent::ToolCallEnd { .. }) => {
                    let _ = write!(out, "]");
                    line_open = true;
                }
                Ok(_) => {}
                Err(err) => {
                    eprintln!("\nmetaforge: stream failed: {err}");
                    failed = true;
                }
            }
        }
        if line_open {
            let _ = writeln!(out);
        }
        drop(events);
        eprintln!("served-by: {}:{}", served.provider, served.model);
        if failed {
            return ExitCode::FAILURE;
        }
    } else {
        let served = pipeline.complete(spec, request).await;
        stop_progress(ticker);
        let served = match served {
            Ok(s) => s,
            Err(err) => return pipeline_failure(&err),
        };
        let _ = writeln!(out, "{}", served.value.text);
        for call in &served.value.tool_calls {
            let _ = writeln!(out, "[tool call {} {}]", call.name, call.arguments);
        }
        eprintln!("served-by: {}:{}", served.provider, served.model);
    }
    ExitCode::SUCCESS
}

/// Configuration problems exit 2 (nothing was called); provider failures exit 1.
fn pipeline_failure(err: &PipelineError) -> ExitCode {
    eprintln!("metaforge: {err}");
    match err {
        PipelineError::AllProvidersFailed { .. } => ExitCode::FAILURE,
        PipelineError::Config(_) | PipelineError::ProviderNotWired(_) | PipelineError::Credentials(_) => {
            ExitCode::from(2)
        }
    }
}

/// Runs `metaforge providers …`.
pub(crate) fn run_providers(command: ProvidersCommand, settings: &Settings) -> ExitCode {
    let ProvidersCommand::List { json } = command;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("metaforge: cannot start runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let rows = match runtime.block_on(provider_rows(settings)) {
        Ok(rows) => rows,
        Err(err) => {
            eprintln!("metaforge: {err}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout();
    if json {
        match serde_json::to_string(&rows) {
            Ok(text) => {
                let _ = writeln!(out, "{text}");
            }
            Err(err) => {
                eprintln!("metaforge: {err}");
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    let _ = writeln!(
        out,
        "{:<22} {:<18} {:<11} {:<45} SOURCE",
        "PROVIDER", "FAMILY", "CONFIGURED", "BASE URL"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "{:<22} {:<18} {:<11} {:<45} {}",
            row.id,
            row.family,
            if row.configured { "yes" } else { "no" },
            row.base_url,
            row.base_url_source,
        );
        if let Some(how) = row.configured_reason.strip_prefix("no credential: ") {
            let _ = writeln!(out, "{:<22} to configure: {how}", "");
        }
    }
    ExitCode::SUCCESS
}
