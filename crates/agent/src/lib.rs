//! The agent loop (issue 15): one turn of a chat or a phase brain calling tools, over ports only.
//!
//! A turn runs the native tool-calling loop or the JSON-ReAct loop (chosen from the serving
//! model's capability, or forced), with the rules of the domain live on every step: schema
//! pre-validation and gating by caller class before any hold (`tool_gating`), holds parked in the
//! one approval ledger, the same-turn duplicate guard, structured error envelopes, loud
//! truncation, the history budget and within-turn folding (`compaction`), the provider's tool cap
//! (`tool_cap`) and the grounding guard on the final reply (`grounding`). Planner → Generator →
//! Evaluator runs turns with the `planner`, `generator` and `evaluator` role slots.
//!
//! No HTTP here: the model is the [`TurnModel`] port, tools are [`ToolBox`] over the tool ports,
//! and a turn reports through typed [`TurnEvent`]s that a chat thread forwards as SSE.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/agent` — `metaforge-agent` (issue 15)
//!
//! The agent loop. Ports it owns or reads: `TurnModel` (one call with its role, an optional explicit
//! provider and the usage scope run/phase/role/caller; `profile(role)` says whether the serving model
//! parses native tool calls, its context window and tool cap — `ModelProfile::for_model`, the domain's
//! `model_capability`; `providers(role)` lists the chain; both async, because a route resolves when
//! asked) — the provider pipeline implements it through `app::turn_model::PipelineTurnModel`;
//! `ProviderModels` implements it over `LlmProvider` adapters without retries (tests, direct
//! wiring); `ToolBox` (tools offered now, pinned ids, calls) and `ToolBoxes` (a turn's `ToolBox` for
//! a caller and domain scope) — implemented by the central registry `app::tools::ToolRegistry`;
//! `AgentTool::new` declares a tool to the gating rule (ask tier and static gates from a
//! `ToolPolicy`, annotation from the hints); the `ApprovalLedger`, `Clock`, `IdGen`. The agent's own
//! tests run over a plain `ToolBox` double (`crates/agent/tests/it/common.rs`).
//! - `turn` — `Agent::run_turn(config, input, events, cancel)`: native loop, or JSON-ReAct (`react`)
//!   when `profile.native_tools` is false or `LoopMode::React` forces it (per turn in
//!   `TurnConfig::mode`; per deployment `METAFORGE_AGENT_LOOP`, parsed by `LoopMode::parse_setting`
//!   and given to `PipelineTurnModel::with_loop_mode`). Per round: the tool cap
//!   (`tool_cap::select_tools`, drops logged `tool_schemas_truncated`, `chat_tools_dropped` once per
//!   distinct drop set, and a per-round `volatile_suffix` note — the cached prefix never changes), within-turn folding past 60 %
//!   of the context (`compaction::fold_native_exchanges` on an OpenAI-shaped view, mapped back by
//!   position; the ReAct transcript folds the same way before it is rendered), history under
//!   `history_tokens` (`budget_history`, summary pair first; the newest prior turn is never folded —
//!   alone over the budget it is cut with the loud marker and logged `history_turn_truncated`; the
//!   summary is capped at `SUMMARY_MAX_CHARS`, first and last lines kept, the omitted ones counted;
//!   the synopsis counts the folded messages and failed tool results). Limits: `max_iterations` model calls
//!   (`TurnError::IterationCap`), `token_budget` checked before each call (`TokenBudget`), a
//!   `CancellationToken` racing every model and tool call (`Canceled`; the turn's open holds are then
//!   resolved `canceled`). Final text → `grounding::check_grounding` (banners prepended,
//!   `chat_ungrounded_claim` warn + `metaforge_chat_ungrounded_claim_total{kind}`).
//! - `exec` — one executor per turn: lookup by provider name or id, then `tool_gating::decide`
//!   (validation first, so an invalid call is refused with `invalid_arguments_envelope` before any
//!   hold), then the turn cache (`canonical_call_key`; successes only; a hit returns
//!   `{"cached": true, …}`), then run / hold / refuse. Hold mode parks a `tool_call` hold
//!   (`hold_deadline`), emits `tool.approval_requested`, polls until decided, and closes it
//!   `timed_out` after `approval_timeout` or `canceled` on cancel (a last-moment decision read back
//!   and honoured). Forward mode (unattended) sends a held MCP call to its own server and refuses a
//!   native approval tool (`approval_tool_refused_unattended`, log and error code). A batch runs in
//!   parallel (identical calls once), serially when it holds a `requires_approval` tool; results in
//!   call order. Failures are envelopes: `tool_gating::tool_error_envelope` (server payload under
//!   `details`) and `call_failed_envelope`; observations are cut by `truncate_observation`.
//! - `pge` — `Agent::run_pge`: planner call (role `planner`), generator turn (role `generator`;
//!   a turn configured on a `phase_brain` role keeps it: a phase's worker model, FORGE-475),
//!   evaluator call (role `evaluator`) on the first evaluator provider that is not the generator's
//!   (else `evaluator_provider_not_independent` warn), findings fed back until `passed` or
//!   `max_iterations` → `Verdict::{Passed, Exhausted, Errored}` with the findings; one `agent.done`.
//! - Session write-lock: turns of one `session_id` run one at a time on an `Agent` (a waiting turn
//!   logs `session_turn_waiting` and can be cancelled); turns of other sessions run side by side.
//! - `events` — `TurnEvent` (`message.delta`, `tool.call`, `tool.result`, `tool.approval_requested`,
//!   `notify_error`, `agent.done` with `UsageTotals`) through an `EventSink` (unbounded channel).
//!
//! **Invariants:** no HTTP types; every rule is the domain's (no copy); a schema-invalid call never
//! reaches the ledger; a failure is never cached; `notify_error` (on failure) then `agent.done` are
//! the last events of a turn. Tests: `crates/agent/tests/it/` over `test-support`'s `ScriptedLlm`,
//! `FakeToolSource` and `MemoryApprovalLedger` (proptest: batch results in call order).

pub mod events;
pub mod exec;
pub mod model;
pub mod pge;
pub mod react;
pub mod tools;
pub mod turn;

pub use events::{EventSink, TurnEvent};
pub use exec::{APPROVAL_TOOL_REFUSED_UNATTENDED, ApprovalMode, CallRecord};
pub use model::{
    ModelAnswer, ModelCall, ModelError, ModelProfile, ModelTarget, ProviderModels, TurnModel, UsageScope,
};
pub use pge::{Evaluation, PgeConfig, PgeOutcome, Verdict, parse_evaluation};
pub use tokio_util::sync::CancellationToken;
pub use tools::{AgentTool, ToolBox, ToolBoxes, ToolPolicy};
pub use turn::{
    AGENT_LOOP_ENV, Agent, AgentPorts, LoopMode, LoopModeError, TurnConfig, TurnError, TurnFailure,
    TurnInput, TurnOutcome,
};
