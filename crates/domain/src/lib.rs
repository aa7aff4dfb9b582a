//! MetaForge's rules, pure and deterministic.
//!
//! No IO, no clock, no randomness: time and ids come in as values. Integrators embed this crate
//! directly; the gateway, the MCP sidecar and the CLI all call the same functions.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/domain` — `metaforge-domain`
//!
//! The rules. `providers` is the provider registry (ids, families, aliases, base-URL resolution,
//! the family-mismatch rule, tool caps).
//! **Invariant:** pure and deterministic — no tokio, hyper, reqwest, sqlx, rmcp, rdkafka,
//! temporalio or mio in its tree; no clock and no id generation (they come in as values).
//!
//! ## Harness rules in `metaforge-domain` (issue 3)
//!
//! One module per rule family; each is also `metaforge check <rule>` and has a fixture table in
//! `fixtures/rules/*.json` read by `crates/domain/tests/it/rules_*.rs`.
//!
//! | Module | Rule (seed) | Entry points |
//! |---|---|---|
//! | `providers` | provider surface, family mismatch (FORGE-468), tool cap size; what the agent loop chooses from (native tools or JSON-ReAct, context window; table `fixtures/rules/model_capability.json`) | `resolve_provider`, `parse_route`, `model_family_mismatch`, `max_tools_for`, `resolve_base_url`, `native_tools_enabled`, `context_window_tokens`, `model_capability` |
//! | `routing` | per-role routing (FORGE-477), fallback reasons (FORGE-468) | `RoutingTable::from_json`, `resolve_route(&RoutingInputs, &RouteCall)`, `validate_table`, `RoutingConfigError::blocks_start`, `env_var_for_role`, `FallbackReason`; roles include the agent's `planner`, `generator`, `evaluator` |
//! | `usage` | token and cost accounting (FORGE-476/486) | `normalize_usage`, `PriceTable`, `price_event`, `UsageTotals::from_events`, `RunSpendTracker` |
//! | `grounding` | post-turn grounding (FORGE-98/520) | `check_grounding`, banner constants, `MetricKind` |
//! | `tool_cap` | provider tool-array cap (FORGE-94/518) | `select_tools` |
//! | `tool_naming` | registry ids and provider names (`<server>.<tool>`, `mcp_<server>_<tool>`); the app's registry re-exports it, grounding matches a tool under every name | `preferred_provider_name`, `names_for_id`, `same_tool` |
//! | `tool_gating` | gate declarations, schema pre-validation, caller classes, forward mode (MET-569, FORGE-222/487/490/584) | `decide`, `validate_arguments` (and `ArgumentSchema` + `decide_with_schema` for a host that compiles a tool's schema once), `invalid_arguments_envelope`, `canonical_call_key`, `tool_error_envelope`/`server_error_payload`/`call_failed_envelope` (structured errors, server payload under `details`), `Annotation::from_hints`, `HUMAN_AUTHORITY_TOOLS`; `CallerClass` is re-exported from `metaforge_ports::tools` (one type, no mapping) |
//! | `approvals` | who may answer a hold: four eyes, waiter scope — a waiter closes only a `tool_call` hold, never a proposal, edit or gate (FORGE-393/466); the state machine itself is `metaforge_ports::approval_rules` | `ApproverPolicy`, `check_approver`, `check_waiter_may_resolve` |
//! | `compaction` | context compaction (MET-568) | `truncate_observation`, `truncate_value`, `budget_history`, `fold_native_exchanges` |
//!
//! Invariants these modules rely on and keep:
//! - **Family check is conservative.** Only the seed's pairs are rejected; multi-vendor gateways
//!   (every OpenAI-compatible provider, Bedrock) are never judged; a reason always names the model.
//! - **A bad route is an error, never a skip.** Resolution validates the chosen route (role,
//!   provider, family, credentials) and returns `RoutingConfigError` naming role, route, provider
//!   and where the route came from (`RouteLocation`: `env METAFORGE_ROUTE_CHAT`, `table entry
//!   projects['p'].roles['chat']`, …); a family mismatch names the model's vendor. It never falls
//!   through to a lower layer. Env overrides beat the file for one role; an override naming no role
//!   (`METAFORGE_ROUTE_GATE_CHECK_FAST`) is an `unknown_role` error at start and at resolution. A
//!   phase's own model serves `phase_brain` roles only; other roles inside a phase use the table.
//! - **Unknown is null.** `normalize_usage` leaves unreported counts `None`; `price_event` gives
//!   cost `None` for unknown models or tokens and for subscription billing (openai-codex);
//!   `UsageBucket::cost_usd` is `None` when no call was priced. Every call lands in every
//!   breakdown (`unattributed` when phase/role is missing). Shipped prices are embedded with
//!   `include_str!("fixtures/model_prices.json")`.
//! - **Spend crossing fires once per run** on priced spend only.
//! - **Grounding:** a twin write counts under every name the registry gives the tool
//!   (`twin.commit_geometry` = `mcp_twin_commit_geometry`); the no-tool-call banner suppresses the others and is the only one that marks a
//!   phase ungrounded; FreeCAD session ids (`part_N`, `assembly_N`, `body_N` …) are never grounded.
//! - **Model capability is conservative.** Every family's adapter here parses native tool calls, so
//!   only a table of models that take no tools (completion-only, embedding, `o1-mini`, Gemma, Titan
//!   text, Llama 2, DeepSeek R1, …) speaks JSON-ReAct; context windows come from a table by model
//!   prefix (longest wins; `vendor/` slugs and Bedrock region/vendor prefixes ignored) with the
//!   smallest published limit, and `DEFAULT_CONTEXT_WINDOW_TOKENS` (8,192) for an unknown model.
//! - **Tool cap:** natives, pinned, `*_open_session`, the tools whose input schema requires a
//!   `session_id`/`<kind>_session_id` from an opener of their own server, and session-critical verbs
//!   are protected, but
//!   the cap always holds: when they alone exceed it, natives go first in their order, then the
//!   other protected ones, and the rest are dropped and logged (`protected_exceeds_cap`); companion
//!   groups are never split; niche families go last.
//! - **Gating order:** schema validation → disabled gates → caller bounds → ask tier. Unclassified
//!   tools are destructive. service/client_task refuse admin, human-authority, destructive and
//!   other-project calls; local/remote/untrusted hold human-authority tools.
//! - **Approvals** (`metaforge_ports::approval_rules`, used by every ledger engine): only
//!   `awaiting_approval` is open; a final state is never overwritten (second decision → `Conflict`
//!   naming state and reason); deadline = timeout + 30 s (a week at most, refused beyond), expired
//!   only *past* it on read; restart orphaning uses the exact reason `orphaned: gateway restarted
//!   while this approval was pending`.
//! - **`metaforge check`** reads JSON only (no env), prints JSON; exit 1 = the rule refused
//!   (route error), exit 2 = bad input with `file:line:col`, unknown provider, unreadable file.

pub mod approvals;
pub mod compaction;
pub mod flow;
pub mod grounding;
pub mod numeric_grounding;
pub mod providers;
pub mod routing;
pub mod run;
pub mod skill;
pub mod tool_cap;
pub mod tool_gating;
pub mod tool_naming;
pub mod usage;
