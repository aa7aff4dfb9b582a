//! `metaforge check <rule> [--input FILE|-]`: run one deterministic harness rule on JSON input.
//!
//! JSON in, JSON out on stdout. Exit codes: 0 verdict printed; 1 the rule refused the input
//! (a routing configuration error, printed as `{error, message}`); 2 the input itself is bad
//! (unreadable, not JSON, wrong shape, unknown provider), with a message naming file and line:col.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use metaforge_domain::compaction::{
    ChatTurn, DEFAULT_HISTORY_TOKENS, ValueLimits, budget_history, fold_native_exchanges,
    truncate_observation, truncate_value,
};
use metaforge_domain::grounding::{GroundingInput, check_grounding};
use metaforge_domain::providers::{
    max_tools_for, model_family_mismatch, model_vendor_name, resolve_provider,
};
use metaforge_domain::routing::{RouteCall, RoutingInputs, RoutingTable, resolve_route};
use metaforge_domain::tool_cap::{OfferedTool, select_tools};
use metaforge_domain::tool_gating::{Caller, CallerClass, ToolSpec, decide};
use metaforge_domain::usage::{PriceTable, UsageTotals, normalize_usage, price_event};
use metaforge_ports::UsageEvent;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The rules `check` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Rule {
    /// Post-turn grounding guard: does a reply claim work its tool calls did not do?
    Grounding,
    /// Can this provider serve this model at all (e.g. Anthropic's API never serves gpt-4o)?
    ModelFamily,
    /// Which provider:model a role's call resolves to under a routing table.
    Route,
    /// Usage totals and cost over recorded events or a provider's own usage objects.
    Usage,
    /// Which tools fit a provider's tool-array cap.
    SelectTools,
    /// Run, hold for a person, or refuse a tool call for a caller class.
    Gate,
    /// Context compaction: truncate text, values, history or native exchanges.
    Truncate,
}

/// One working input per rule, shown by `metaforge check --help` (each is run by the CLI tests).
pub(crate) const EXAMPLES: &str = r#"Examples (JSON on stdin, or --input FILE; more cases in fixtures/rules/):
  echo '{"reply": "Saved to the twin. Node id: assembly_4.", "steps": []}' | metaforge check grounding
  echo '{"provider": "anthropic", "model": "gpt-4o"}' | metaforge check model-family
  echo '{"table": {"roles": {"gate_check": "anthropic:claude-haiku-4-5-20251001"}}, "call": {"role": "gate_check"}}' | metaforge check route
  echo '{"events": [{"provider": "openai", "model": "gpt-4o-mini", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}]}' | metaforge check usage
  echo '{"events": [{"provider": "anthropic", "model": "claude-haiku-4-5-20251001", "role": "chat", "prompt_tokens": 1000, "completion_tokens": 100}]}' | metaforge check usage
  echo '{"provider": "openai", "max_tools": 2, "tools": [{"name": "search_tools", "origin": "native"}, {"name": "twin.query", "origin": "mcp:twin"}, {"name": "twin.commit", "origin": "mcp:twin"}]}' | metaforge check select-tools
  echo '{"tool": {"name": "twin.commit_geometry", "origin": "mcp:twin", "annotation": "ADDITIVE"}, "caller": "remote", "arguments": {}}' | metaforge check gate
  echo '{"op": "text", "text": "abcdefghij", "max_chars": 4}' | metaforge check truncate

Exit codes: 0 verdict printed; 1 the rule refused the input (printed as {error, message});
2 the input is bad (unreadable, not JSON, wrong shape), with file and line:col."#;

/// Arguments of `metaforge check`.
#[derive(Debug, Args)]
#[command(after_long_help = EXAMPLES)]
pub(crate) struct CheckArgs {
    /// The rule to run.
    #[arg(value_enum)]
    pub(crate) rule: Rule,
    /// JSON input file, or `-` for stdin.
    #[arg(long, default_value = "-")]
    pub(crate) input: String,
}

/// Why `check` could not produce a verdict.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    /// The input could not be read.
    #[error("{source_name}: cannot read input: {message}")]
    Unreadable {
        /// File name or `<stdin>`.
        source_name: String,
        /// The IO error.
        message: String,
    },
    /// The input is not JSON of the rule's shape.
    #[error("{source_name}:{line}:{column}: {message}")]
    BadJson {
        /// File name or `<stdin>`.
        source_name: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was wrong.
        message: String,
    },
    /// The input is JSON but names something that does not exist or cannot work.
    #[error("{source_name}: {message}")]
    BadInput {
        /// File name or `<stdin>`.
        source_name: String,
        /// What was wrong.
        message: String,
    },
}

/// A rule's verdict: what to print and the exit code.
struct Verdict {
    output: Value,
    refused: bool,
}

fn ok(output: Value) -> Verdict {
    Verdict {
        output,
        refused: false,
    }
}

/// Reads, runs and prints; returns the exit code.
pub(crate) fn run(args: &CheckArgs) -> ExitCode {
    match read_input(&args.input).and_then(|(name, text)| check(args.rule, &name, &text)) {
        Ok(verdict) => {
            let text = serde_json::to_string_pretty(&verdict.output)
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
            println!("{text}");
            if verdict.refused {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("metaforge check: {e}");
            ExitCode::from(2)
        }
    }
}

fn read_input(input: &str) -> Result<(String, String), CheckError> {
    if input == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CheckError::Unreadable {
                source_name: "<stdin>".to_owned(),
                message: e.to_string(),
            })?;
        return Ok(("<stdin>".to_owned(), text));
    }
    std::fs::read_to_string(input)
        .map(|text| (input.to_owned(), text))
        .map_err(|e| CheckError::Unreadable {
            source_name: input.to_owned(),
            message: e.to_string(),
        })
}

fn parse<T: DeserializeOwned>(name: &str, text: &str) -> Result<T, CheckError> {
    serde_json::from_str(text).map_err(|e| {
        let full = e.to_string();
        let message = full
            .rfind(" at line ")
            .map_or(full.as_str(), |i| &full[..i])
            .to_owned();
        CheckError::BadJson {
            source_name: name.to_owned(),
            line: e.line(),
            column: e.column(),
            message,
        }
    })
}

fn bad(name: &str, message: impl Into<String>) -> CheckError {
    CheckError::BadInput {
        source_name: name.to_owned(),
        message: message.into(),
    }
}

fn to_json<T: serde::Serialize>(name: &str, value: &T) -> Result<Value, CheckError> {
    serde_json::to_value(value).map_err(|e| bad(name, format!("cannot render the verdict: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFamilyInput {
    provider: String,
    model: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteInput {
    #[serde(default)]
    table: RoutingTable,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    credentials: Option<BTreeSet<String>>,
    #[serde(default)]
    selection: Option<String>,
    #[serde(default)]
    default: Option<String>,
    call: RouteCall,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageInput {
    /// Each a recorded [`UsageEvent`], or a provider's raw usage (`{provider, model, usage}`).
    events: Vec<Value>,
    #[serde(default)]
    prices: Option<Value>,
}

/// One call as the provider reported it: its own usage object, normalised by the provider's API
/// family with the domain's rule (`normalize_usage`), exactly as the pipeline records a call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUsageInput {
    provider: String,
    model: String,
    /// The provider's usage object as it sent it (`null` = not reported).
    usage: Value,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    caller: Option<String>,
}

/// `events[i]` as a usage event: a raw one (it has `usage`) normalised by its provider's family,
/// else a recorded one; a bad event names its index and field.
fn usage_event(name: &str, i: usize, value: Value) -> Result<UsageEvent, CheckError> {
    let at = |e: serde_json::Error| bad(name, format!("events[{i}]: {e}"));
    if value.get("usage").is_none() {
        return serde_json::from_value(value).map_err(at);
    }
    let raw: RawUsageInput = serde_json::from_value(value).map_err(at)?;
    let provider =
        resolve_provider(&raw.provider).map_err(|e| bad(name, format!("events[{i}].provider: {e}")))?;
    let mut event = UsageEvent {
        run_id: raw.run_id,
        phase: raw.phase,
        role: raw.role,
        caller: raw.caller,
        provider: provider.id.to_owned(),
        model: raw.model,
        ..UsageEvent::default()
    };
    normalize_usage(provider.family, &raw.usage).apply_to(&mut event);
    Ok(event)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectToolsInput {
    provider: String,
    #[serde(default)]
    max_tools: Option<usize>,
    tools: Vec<OfferedTool>,
    #[serde(default)]
    pinned: BTreeSet<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CallerInput {
    Class(CallerClass),
    Full(Caller),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GateInput {
    tool: ToolSpec,
    caller: CallerInput,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum TruncateInput {
    Text {
        text: String,
        max_chars: usize,
    },
    Value {
        value: Value,
        max_items: usize,
        max_string_chars: usize,
    },
    History {
        turns: Vec<ChatTurn>,
        #[serde(default)]
        budget_tokens: Option<usize>,
    },
    Native {
        messages: Vec<Value>,
        budget_tokens: usize,
    },
}

/// Runs one rule on input text.
fn check(rule: Rule, name: &str, text: &str) -> Result<Verdict, CheckError> {
    match rule {
        Rule::Grounding => {
            let input: GroundingInput = parse(name, text)?;
            Ok(ok(to_json(name, &check_grounding(&input))?))
        }
        Rule::ModelFamily => {
            let input: ModelFamilyInput = parse(name, text)?;
            let provider = resolve_provider(&input.provider).map_err(|e| bad(name, e.to_string()))?;
            let reason = model_family_mismatch(provider, &input.model);
            let vendor = model_vendor_name(&input.model);
            Ok(ok(
                json!({"mismatch": reason.is_some(), "reason": reason, "vendor": vendor}),
            ))
        }
        Rule::Route => {
            let input: RouteInput = parse(name, text)?;
            let inputs = RoutingInputs {
                table: &input.table,
                env: &input.env,
                credentialed: input.credentials.as_ref(),
                selection: input.selection.as_deref(),
                default: input.default.as_deref(),
            };
            match resolve_route(&inputs, &input.call) {
                Ok(route) => Ok(ok(to_json(name, &route)?)),
                Err(e) => Ok(Verdict {
                    output: json!({"error": e.code(), "message": e.to_string(), "location": e.location()}),
                    refused: true,
                }),
            }
        }
        Rule::Usage => {
            let input: UsageInput = parse(name, text)?;
            let prices = match &input.prices {
                Some(value) => {
                    PriceTable::from_value(value).map_err(|e| bad(name, format!("prices: {e}")))?
                }
                None => PriceTable::shipped().map_err(|e| bad(name, format!("shipped price table: {e}")))?,
            };
            let events = input
                .events
                .into_iter()
                .enumerate()
                .map(|(i, value)| usage_event(name, i, value))
                .collect::<Result<Vec<_>, _>>()?;
            let priced: Vec<UsageEvent> = events.iter().map(|e| price_event(e, &prices)).collect();
            Ok(ok(to_json(name, &UsageTotals::from_events(&priced))?))
        }
        Rule::SelectTools => {
            let input: SelectToolsInput = parse(name, text)?;
            let provider = resolve_provider(&input.provider).map_err(|e| bad(name, e.to_string()))?;
            let cap = input.max_tools.or_else(|| max_tools_for(provider));
            Ok(ok(to_json(
                name,
                &select_tools(&input.tools, cap, &input.pinned),
            )?))
        }
        Rule::Gate => {
            let input: GateInput = parse(name, text)?;
            let caller = match input.caller {
                CallerInput::Class(class) => Caller::from(class),
                CallerInput::Full(caller) => caller,
            };
            Ok(ok(to_json(
                name,
                &decide(&input.tool, &caller, &input.arguments),
            )?))
        }
        Rule::Truncate => {
            let input: TruncateInput = parse(name, text)?;
            let output = match input {
                TruncateInput::Text { text, max_chars } => {
                    json!({"text": truncate_observation(&text, max_chars)})
                }
                TruncateInput::Value {
                    value,
                    max_items,
                    max_string_chars,
                } => json!({"value": truncate_value(&value, ValueLimits { max_items, max_string_chars })}),
                TruncateInput::History { turns, budget_tokens } => to_json(
                    name,
                    &budget_history(&turns, budget_tokens.unwrap_or(DEFAULT_HISTORY_TOKENS)),
                )?,
                TruncateInput::Native {
                    messages,
                    budget_tokens,
                } => json!({"messages": fold_native_exchanges(&messages, budget_tokens)}),
            };
            Ok(ok(output))
        }
    }
}
