//! `metaforge chat` and `metaforge sessions`: a terminal client of a gateway's chat threads.
//!
//! The reply streams to stdout; what the turn does (tool calls and results, held calls, usage)
//! goes to stderr, so `metaforge chat -m "…" > reply.txt` keeps only the answer. A held call is
//! answered inline (y/n, through the gateway's one approval ledger, the approver being this
//! client's key) when the terminal can ask; otherwise the client says how to answer it from
//! elsewhere and waits. Ctrl-C during a turn cancels it (its open holds close as canceled); Ctrl-C
//! at the prompt leaves.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use futures::StreamExt;
use metaforge_adapters_gateway::{ChatClient, ChatEvent, GatewayClient};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::settings::Settings;

/// The gateway a client talks to when none is named.
const DEFAULT_GATEWAY_URL: &str = "http://127.0.0.1:8787";

/// Longest tool result shown on the terminal, in characters (the model reads it all).
const SHOWN_RESULT_CHARS: usize = 300;

/// Where the gateway is and who this client is.
#[derive(Debug, Args)]
pub(crate) struct GatewayTarget {
    /// The gateway's base URL.
    #[arg(long = "gateway", env = "METAFORGE_GATEWAY_URL", default_value = DEFAULT_GATEWAY_URL)]
    gateway: String,
}

/// `metaforge chat`.
#[derive(Debug, Args)]
#[command(after_help = "\
The key is the first entry of METAFORGE_GATEWAY_API_KEY (\"alice:sk-…\"); without one the gateway must be on open \
loopback, where you are `local`.

Examples:
  metaforge chat                                  # a new thread, interactive
  metaforge chat --thread 0193…                   # resume a thread
  metaforge chat -m \"list the design flows\"       # one turn, then exit")]
pub(crate) struct ChatArgs {
    #[command(flatten)]
    target: GatewayTarget,
    /// Resume this thread instead of starting a new one.
    #[arg(long)]
    thread: Option<String>,
    /// A title for a new thread.
    #[arg(long)]
    title: Option<String>,
    /// Send this message (repeatable) and exit after the last turn, instead of reading the
    /// terminal.
    #[arg(short = 'm', long = "message")]
    messages: Vec<String>,
}

/// `metaforge sessions …`.
#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
    /// Messages of every chat thread containing every word of TEXT (whole words, any case).
    Search(SearchArgs),
}

/// `metaforge sessions search`.
#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    #[command(flatten)]
    target: GatewayTarget,
    /// The words to look for (query syntax is treated as text).
    #[arg(required = true)]
    text: Vec<String>,
    /// At most this many hits.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Print the hits as JSON.
    #[arg(long)]
    json: bool,
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("metaforge: cannot start runtime: {e}");
            ExitCode::FAILURE
        })
}

fn client(target: &GatewayTarget, settings: &Settings) -> Result<ChatClient, ExitCode> {
    let key = super::mcp::first_api_key(&settings.api_keys);
    GatewayClient::new(&target.gateway, key)
        .map(ChatClient::new)
        .map_err(|e| {
            eprintln!("metaforge: --gateway {}: {e}", target.gateway);
            ExitCode::from(2)
        })
}

/// Runs `metaforge chat`.
pub(crate) fn run(args: &ChatArgs, settings: &Settings) -> ExitCode {
    let (runtime, chat) = match runtime().and_then(|r| Ok((r, client(&args.target, settings)?))) {
        Ok(pair) => pair,
        Err(code) => return code,
    };
    runtime.block_on(session(&chat, args))
}

/// Runs `metaforge sessions …`.
pub(crate) fn run_sessions(command: &SessionsCommand, settings: &Settings) -> ExitCode {
    let SessionsCommand::Search(args) = command;
    let (runtime, chat) = match runtime().and_then(|r| Ok((r, client(&args.target, settings)?))) {
        Ok(pair) => pair,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let query = args.text.join(" ");
        match chat.search(&query, args.limit).await {
            Ok(found) if args.json => {
                println!("{}", serde_json::to_string_pretty(&found).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Ok(found) => {
                let hits = found["hits"].as_array().cloned().unwrap_or_default();
                if hits.is_empty() {
                    eprintln!("no message contains every word of {query:?}");
                }
                for hit in hits {
                    let text = one_line(hit["content"].as_str().unwrap_or_default(), 160);
                    println!("{}  {}", hit["session_id"].as_str().unwrap_or("?"), text);
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("metaforge: {e}");
                if e.kind == metaforge_ports::PortErrorKind::Invalid {
                    ExitCode::from(2)
                } else {
                    ExitCode::FAILURE
                }
            }
        }
    })
}

/// Lines typed at the terminal, read on a thread of their own so Ctrl-C is heard meanwhile.
fn terminal_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(line.trim_end_matches(['\n', '\r']).to_owned()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

async fn session(chat: &ChatClient, args: &ChatArgs) -> ExitCode {
    let thread = match &args.thread {
        Some(id) => match chat.thread(id).await {
            Ok(found) => {
                let count = found["messages"].as_array().map_or(0, Vec::len);
                eprintln!("resuming thread {id} ({count} messages)");
                id.clone()
            }
            Err(e) => {
                eprintln!("metaforge: --thread {id}: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => match chat.create_thread(args.title.as_deref()).await {
            Ok(created) => {
                let id = created["id"].as_str().unwrap_or_default().to_owned();
                eprintln!("thread {id}  (resume with: metaforge chat --thread {id})");
                id
            }
            Err(e) => {
                eprintln!("metaforge: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let interactive = args.messages.is_empty();
    let ask = interactive && std::io::IsTerminal::is_terminal(&std::io::stdin());
    let mut lines = terminal_lines();
    let mut outcome = ExitCode::SUCCESS;
    let mut scripted = args.messages.iter();
    loop {
        let message = if interactive {
            eprint!("you> ");
            let _ = std::io::stderr().flush();
            tokio::select! {
                line = lines.recv() => match line {
                    Some(line) if line.trim().is_empty() => continue,
                    Some(line) => line,
                    None => break,
                },
                _ = tokio::signal::ctrl_c() => {
                    eprintln!();
                    break;
                }
            }
        } else {
            match scripted.next() {
                Some(m) => m.clone(),
                None => break,
            }
        };
        match turn(chat, &thread, &message, &mut lines, ask || interactive).await {
            Ok(true) => {}
            Ok(false) => outcome = ExitCode::FAILURE,
            Err(e) => {
                eprintln!("metaforge: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    outcome
}

/// One turn: posts, prints the events as they come, answers held calls; `Ok(false)` when the
/// turn ended with an error.
async fn turn(
    chat: &ChatClient,
    thread: &str,
    message: &str,
    lines: &mut mpsc::UnboundedReceiver<String>,
    can_ask: bool,
) -> Result<bool, metaforge_ports::PortError> {
    let events = chat.post(thread, message).await?;
    tokio::pin!(events);
    let mut failed = false;
    let mut canceled = false;
    let mut ask_lines = can_ask;
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            _ = tokio::signal::ctrl_c(), if !canceled => {
                canceled = true;
                eprintln!("\n(cancelling the turn…)");
                if let Err(e) = chat.cancel(thread).await {
                    eprintln!("metaforge: cancel: {e}");
                }
                continue;
            }
        };
        let Some(event) = next else { break };
        let event = event?;
        match event.name.as_str() {
            "tool.approval_requested" => {
                show(&event);
                let id = event.data["approval_id"].as_str().unwrap_or_default().to_owned();
                if ask_lines {
                    match answer(chat, &id, lines).await {
                        Answer::Decided => {}
                        Answer::NoTerminal => ask_lines = false,
                    }
                }
                if !ask_lines {
                    eprintln!(
                        "  waiting for a person: POST /v1/approvals/{id}/decision {{\"decision\": \"approve\"|\"reject\"}}"
                    );
                }
            }
            "notify_error" => {
                failed = true;
                show(&event);
            }
            "agent.done" => {
                show(&event);
                break;
            }
            _ => show(&event),
        }
    }
    Ok(!failed)
}

enum Answer {
    Decided,
    NoTerminal,
}

async fn answer(chat: &ChatClient, id: &str, lines: &mut mpsc::UnboundedReceiver<String>) -> Answer {
    loop {
        eprint!("  approve this call? [y/n] ");
        let _ = std::io::stderr().flush();
        let Some(line) = lines.recv().await else {
            eprintln!();
            return Answer::NoTerminal;
        };
        let approve = match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => true,
            "n" | "no" => false,
            _ => continue,
        };
        match chat.decide(id, approve, None).await {
            Ok(decided) => eprintln!(
                "  {} by {}",
                decided["status"].as_str().unwrap_or("decided"),
                decided["approver"].as_str().unwrap_or("?")
            ),
            Err(e) => eprintln!("  not recorded: {e}"),
        }
        return Answer::Decided;
    }
}

fn show(event: &ChatEvent) {
    let d = &event.data;
    let text = |key: &str| d[key].as_str().unwrap_or_default().to_owned();
    match event.name.as_str() {
        "message.delta" => {
            println!("{}", text("text"));
            let _ = std::io::stdout().flush();
        }
        "tool.call" => eprintln!(
            "  → {} {}",
            text("tool"),
            one_line(&d["arguments"].to_string(), 200)
        ),
        "tool.result" => {
            let mark = if d["is_error"].as_bool() == Some(true) {
                "✗"
            } else {
                "←"
            };
            let cached = if d["cached"].as_bool() == Some(true) {
                " (cached)"
            } else {
                ""
            };
            eprintln!(
                "  {mark} {}{cached}: {}",
                text("tool"),
                one_line(&text("content"), SHOWN_RESULT_CHARS)
            );
        }
        "tool.approval_requested" => eprintln!(
            "  ⏸ held for a person: {} {}  (approval {})",
            text("tool"),
            one_line(&d["arguments"].to_string(), 200),
            text("approval_id")
        ),
        "notify_error" => eprintln!("error ({}): {}", text("code"), text("message")),
        "agent.done" => eprintln!("  [{}]", usage_line(&d["usage"])),
        "stream.lagged" => eprintln!("  (missed {} events)", d["missed"]),
        other => eprintln!("  {other}: {}", one_line(&d.to_string(), 200)),
    }
}

fn usage_line(usage: &Value) -> String {
    let count = |key: &str| match usage[key].as_u64() {
        Some(n) => n.to_string(),
        None => "unknown".to_owned(),
    };
    let cost = match usage["cost_usd"].as_f64() {
        Some(c) => format!("${c:.6}"),
        None => "cost unknown".to_owned(),
    };
    format!(
        "{} model call(s), {} prompt + {} completion tokens, {cost}",
        count("calls"),
        count("prompt_tokens"),
        count("completion_tokens")
    )
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    format!("{cut}…")
}
