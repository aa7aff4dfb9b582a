//! Design-flow runs as services (issue 16): the embedded engine and the phase brains.
//!
//! - [`EmbeddedEngine`]: `metaforge_ports::FlowEngine` (kind `embedded`) over the run ledger,
//!   the approval ledger, the client-task store, the twin and the event bus. It drives the pure
//!   reducer of `metaforge_domain::run` — never re-deciding what it decides — persisting every
//!   transition before acting on it; [`EmbeddedEngine::resume_all`] picks runs up after a restart;
//!   [`EmbeddedEngine::subscribe`] streams a run's [`RunNotice`]s (SSE).
//! - [`lead`]: which process drives the embedded runs of a shared run ledger (the holder of its
//!   engine lease); the others stand by and take over when it lapses.
//! - [`ServerPhaseBrain`] (the agent loop's P→G→E) and [`ClientPhaseBrain`] (a client task the
//!   MCP client claims and submits): `metaforge_ports::PhaseBrain`, picked by the run's
//!   intelligence; both report the deliverables the twin records on `run/<id>`.
//! - [`UnavailableEngine`]: an engine that is configured but not here (Temporal, issue 17): 503.
//! - [`FollowedEngine`]: an engine whose runs an outside workflow service drives (Temporal, the
//!   `DrivenRuns` port), followed here: its transitions' gate holds (`GateHolds`), notices on
//!   the bus and run records, and each run's notice stream.
//! - [`settings`]: `METAFORGE_FLOW_ENGINE` and `METAFORGE_INTELLIGENCE`, parsed strictly.
//! - [`RunService`]: the use cases both doors call (start, list, get, flow state, answer a gate,
//!   cancel, events, client tasks) over a [`RunEngine`] (the `FlowEngine` port plus the engine's
//!   notice stream and worker state) and the ledgers; its views are in [`views`].
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## `crates/app/src/runs` — the embedded engine and the phase brains (issue 16 items 2–4, 8)
//!
//! `EmbeddedEngine` implements `FlowEngine` (kind `embedded`) over `EnginePorts` (run ledger, flow
//! versions, the one approval ledger, client tasks, twin, event bus, clock, ids) with `PhaseBrains`
//! (server, client — picked by the run's intelligence, fixed at start) and `EngineOptions`.
//! `engine` (public API, start-up, state) · `driver` (one task per active run: the only writer of
//! that run in the process) · `holds` (`GateHolds`: a run's gate holds in the approval ledger — the
//! one rule both engines use: the driver as it acts, the Temporal follower per transition) ·
//! `notices` (`RunNotice`, `notices_of`, `RunEvents`) · `brains`
//! (`ServerPhaseBrain`, `ClientPhaseBrain`, `render_brief`, `recorded_deliverables`) · `unavailable`
//! (`UnavailableEngine`) · `settings` (`parse_flow_engine`, `parse_intelligence`,
//! `resolve_intelligence`, `parse_gate_timeout` — `METAFORGE_GATE_TIMEOUT_SECONDS`, which the binary
//! puts in every new run's `RunSettings::gate_timeout_seconds`; unset, human gates have no
//! deadline).
//! - **Life:** `new` drives nothing; `resume_all()` (once, at start-up) picks up every
//!   `RunLedger::unsettled` run of this engine and makes it drive runs; `shutdown()` stops every run
//!   task writing nothing. Before `resume_all` and after `shutdown` writes are `Unavailable` and
//!   `state()` reads the last persisted state with `live: false` and the reason; so does a run this
//!   process does not drive (another engine kind, a failed resume), and `UnavailableEngine` for
//!   every run (`METAFORGE_FLOW_ENGINE=temporal`: 503 at run start, chosen over a start-up refusal
//!   so the gateway keeps serving everything else).
//! - **One driver per run ledger (issue 20):** `leadership::lead` runs the engine only in the
//!   process holding the run ledger's `embedded-flow-engine` lease (`ports::lease`: `Lease::next`
//!   is the one rule of who may take it; `LeaseStore` is implemented by both run ledgers, the lease
//!   row kept beside the runs it guards). The holder (`host/pid/uuid`) resumes the runs and renews
//!   every 5 s (lease 15 s); any other process on the ledger stands by — run starts and gate answers
//!   there are `Unavailable` (503) naming the holder, `/health` says why — and asks again every 5 s,
//!   taking over (`flow_engine_took_over`, then `resume_all`) once the lease lapsed or was released
//!   (graceful stop), or at once when the holder is a dead process on the same host
//!   (`bins/src/local_processes.rs` reads `/proc`). A holder that cannot show it still holds the
//!   lease before it could lapse stops its engine (`flow_engine_lease_lost`), so two engines never
//!   drive one ledger. This is a lease, not idempotence: the phase effects (model calls) are not
//!   idempotent across processes. Host clocks are assumed synchronised to well under the 15 s.
//! - **A hold is orphaned only when its parker is gone (issue 20):** each start names the process
//!   once (`app::processes::process_name`, `host/pid/uuid`, also the engine lease holder); its
//!   approval ledger writes that name on every hold it parks (`parked_by`, migrations
//!   `approvals/0003`, `postgres/approvals/0002`), and it keeps a presence lease
//!   (`ports::presence_duty`, `process-presence/<name>`, 15 s, renewed every 5 s by
//!   `processes::PresenceTask`, released on a graceful stop). A start announces itself, then
//!   `ApprovalService::restore` orphans only the holds whose parker `Presence::is_gone` — a dead pid
//!   on this host, or a presence lease lapsed or released — plus holds with no parker (parked before
//!   parkers were named); every live process sweeps the same way every 5 s
//!   (`ApprovalService::orphan_gone`, which spares unnamed holds, `gone_process_holds_orphaned`).
//!   Never gone: the process itself, a parker with no presence lease whose pid lives (a local
//!   `metaforge mcp serve` names its holds but keeps no lease), or anyone while the lease store
//!   cannot be read (fail closed: a hold waits to its deadline rather than being failed wrongly).
//!   The rule of "covered" is `ports::GoneParkers`; each ledger only applies it.
//! - **Persist, then act:** every event (a person's decision or cancel, a brain's result, a deadline)
//!   goes through `metaforge_domain::run::apply`; the transition (event, state, commands, the
//!   record's reason) is appended with compare-and-set before any effect, and a caller's answer is
//!   returned only after that (and after the effects). Effects are idempotent by key: the gate hold
//!   `gate:run:phase:attempt` (parked with `caller: service`, no approval deadline — the gate's
//!   deadline is in the run state; a decision decides it with the person as approver, an expiry
//!   times it out, a cancel or close cancels it; an auto-approved checkpoint is parked and decided by
//!   `auto`), the client task `run:phase:attempt` (withdrawn on cancel), the twin branch `run/<id>`
//!   (created before each phase, fast-forwarded into `main` on completion; a refused merge is logged
//!   `run_twin_merge_refused`). A transition whose effects failed is kept and its effects retried
//!   after `effect_retry`, oldest first; a terminal run's last transition is marked settled only
//!   when every effect is done.
//! - **Resume:** the last transition's event effects and commands again (phase start and gate park
//!   as `resume` says: a phase in flight re-runs with its key, a gate not yet parked is parked, a
//!   parked gate stays parked and answerable), its notices again; deadlines are read from the state,
//!   so one that passed while the engine was down fires on the first tick; gate holds no loaded run
//!   waits at are closed — except the hold of the gate its state is open at (parked just before a
//!   kill, its `gate_opened` not yet persisted) and the hold its last event decides (`event_hold`;
//!   the resumed driver re-acts that decision), which the crash loop found canceled by the sweep
//!   racing the driver.
//! - **Notices** (`RunNoticeKind`, the bus kinds): `run.started`, `run.phase_started`,
//!   `run.phase_finished`, `run.phase_failed`, `run.phase_canceled`, `run.gate_opened` (the gate
//!   announcement; `metaforge_design_flow_gate_announce_total{outcome=announced|failed}`),
//!   `run.gate_decided` (a person or `auto`), `run.gate_expired`, `run.gate_closed`,
//!   `run.flow_changed`, `run.completed`, `run.failed`, `run.canceled`. Derived purely from the
//!   persisted transition (event first, then commands), each with `run_id`, `seq`, `index`: a
//!   consumer drops duplicates by `(run_id, seq, index)`. Published after the effects, best effort
//!   (`run_event_publish_failed` at error; the ledger is the record), trace id = run id.
//!   `subscribe(run, after)` replays the notices after the key `after` (`(seq, index)`, an SSE
//!   event id) from the ledger, then streams live notices, each once, and ends with the run.
//! - **Brains:** both report as deliverables the `artifact` of `WorkProduct` nodes with `phase` =
//!   the phase on twin branch `run/<id>` (`WORK_PRODUCT_ARTIFACT`, `WORK_PRODUCT_PHASE`,
//!   `WORK_PRODUCT_RUN`, `run_branch`), never the summary's claims. `ServerPhaseBrain`: P→G→E with
//!   the rendered brief (feedback first), the generator on `phase_brain` (the phase's pinned model
//!   when it has one) as the worker (`service`, unattended, `ApprovalMode::Forward`, session = run,
//!   tools `ToolBoxes::for_turn(service, disciplines)`; none at all fails the phase retryably, it
//!   never runs toolless), usage scoped run/phase; no model for
//!   `phase_brain`/`planner`/`evaluator` (`ModelError::NotConfigured`) is a configuration failure
//!   before any call, anything else retryable; an evaluator that never passes still finishes, with
//!   its findings in the summary. `ClientPhaseBrain`: posts the brief as task `run:phase:attempt`
//!   (a re-call finds it and any submission; a withdrawn one is reopened), polls until submitted;
//!   a run that cannot have tasks is a configuration failure; counted in
//!   `metaforge_client_tasks_posted_total` and `metaforge_client_tasks_answered_total` (for the
//!   ClientTasksUnanswered alert). The engine does not withdraw a task when it stops (a claim
//!   survives a restart); only a cancel withdraws it.
//!
//! **Invariants** (tests `crates/app/tests/it/runs_engine.rs`, `crates/app/tests/it/runs_brains.rs`): an
//! unapproved, corrupt or unreproducible version records nothing; no transition acknowledged is lost
//! or doubled across restarts; a run completes exactly once; a phase attempt's completion is
//! recorded once; a human gate passes only through `decide_gate` with the decisions it allows.
//!
//! **The run use cases** (`service`, `views`; issue 16 item 6): `RunService` over a `RunEngine`
//! (the `FlowEngine` port plus `notices(run, after)` — the engine's notice stream — and `worker()`
//! — `WorkerHealth` `ok|absent|unknown`; implemented by `EmbeddedEngine` and `UnavailableEngine`,
//! so the service never names a concrete engine) and `RunServicePorts` (run ledger, versions,
//! client tasks, usage, clock, ids), with `RunServiceSettings` (the deployment's intelligence, the
//! runs' `RunSettings`). Door-neutral: the gateway's routes and the MCP sidecar's run tools (`InProcessRunBindings`) call it.
//! - `start(StartRunBody)`: `intelligence` first (`resolve_intelligence`; a bad value is
//!   `invalid_field` naming it), then the engine's `worker()` (not ok: 503 before anything is
//!   written), then the version: `flow_version_id` is read from the store (unknown → 422, failing
//!   its hash → 409 `corrupt`) and handed whole to the engine, which refuses an unapproved or
//!   unreproducible one (409) before recording anything. **A shipped template runs as a stored
//!   version:** `template_id` (default `design_v1`) is frozen by `metaforge_domain::flow::
//!   template_version` into an approved version with origin `template` (`FlowVersionOrigin::Template`),
//!   approver `template` (`TEMPLATE_APPROVER`: shipping is its approval — the templates pass every
//!   invariant and their hashes are pinned) and the deterministic id `template_version_id`
//!   (`template-<id>-<version>-<16 hex of its hash>`), saved by the first run that needs it and read
//!   back (re-verified) by every later one. So every run, tailored or not, pins a stored,
//!   hash-verified version, `GET /v1/design-flows/versions/{id}` serves it, and a template edited
//!   (new version, new hash) gets a new record; a template breaking an invariant is 409
//!   `unstartable`. The template's record may outlive a start the engine then refuses (it is the
//!   same record every run of that template shares); no run and no hold is ever left.
//! - `list(RunFilter)`, `get` (`RunDetail`: the record's engine, template, version id, version,
//!   content hash, status, `approval_reason`, history, and `UsageTotals::from_events` over
//!   `UsageStore::events_for_run` — absent with `usage_unavailable` when the store cannot be read).
//! - `flow_state` (`FlowStateView`): the FROZEN version's phases in execution order (never the
//!   template's) with each one's status from the engine's live state, the open gate (`GateView`:
//!   ready, findings, `allowed`, approval reason, hold id) and `live`; when the engine cannot be
//!   asked every status, the run's included, reads `unknown` (`UNKNOWN_STATUS`), never `pending`,
//!   and the gate is not shown; a version that cannot be read or verified lists no phases and says
//!   why (`phases_unavailable`).
//! - `answer_gate(run, GateDecisionBody, approver)` (approver = the authenticated identity;
//!   `gate_phase` defaults to the gate open now; only a rework takes `phase`) and `cancel(run, by,
//!   reason)` go through the engine; the reducer alone decides, and a refusal comes back as
//!   `RunServiceError::Refused` with the gate open now; the answer is the flow state right after.
//! - `events(run, after)`: the engine's notices from the start (or after `seq.index`,
//!   `parse_event_id`/`event_id`), replayed then live, ending with the run.
//! - Client tasks: `client_tasks(run, status)`, `client_task`, `claim_client_task(id, claimant)`,
//!   `submit_client_task(id, claimant, ClientTaskSubmission {summary, details})` (the submission
//!   stored is `{summary, details?}`, which `ClientPhaseBrain` reads; an empty summary is
//!   `invalid_field`).

mod brains;
mod driver;
mod engine;
mod followed;
mod holds;
mod leadership;
mod notices;
mod service;
pub mod settings;
mod unavailable;
pub mod views;

pub use brains::{
    ClientPhaseBrain, DEFAULT_CLIENT_TASK_POLL, PHASE_BRAIN_ROLE, PHASE_SYSTEM_PROMPT, ServerBrainSettings,
    ServerPhaseBrain, recorded_deliverables, render_brief,
};
pub use engine::{EmbeddedEngine, EngineOptions, EnginePorts, PhaseBrains, ResumeReport};
pub use followed::{FOLLOW_EVERY, FollowedEngine, Publish};
pub use holds::GateHolds;
pub use leadership::{EngineLeadership, LeadStart, lead};
pub use notices::{RunEvents, RunNotice, RunNoticeKind, bus_event_of, notices_of};
pub use service::{
    ClientTaskSubmission, RunEngine, RunFilter, RunNoticeStream, RunService, RunServiceError,
    RunServicePorts, RunServiceSettings, WorkerHealth, event_id, parse_event_id,
};
pub use settings::{
    RunSettingError, parse_flow_engine, parse_gate_timeout, parse_intelligence, resolve_intelligence,
};
pub use unavailable::UnavailableEngine;
