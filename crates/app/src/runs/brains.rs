//! The two phase brains (FORGE-475/487/581): the server's agent loop and the connected MCP client.
//! Both get the same brief (`metaforge_domain::run::phase_brief`) and both report as deliverables
//! what the twin RECORDS on the run's branch `run/<id>` — work-product nodes naming the phase —
//! never what a summary claims, so a deliverable described but not recorded fails the gate.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use metaforge_agent::pge::{DEFAULT_PGE_ITERATIONS, ROLE_EVALUATOR, ROLE_PLANNER};
use metaforge_agent::{
    Agent, ApprovalMode, CancellationToken, EventSink, LoopMode, ModelError, PgeConfig, ToolBoxes,
    TurnConfig, Verdict,
};
use metaforge_domain::tool_gating::Caller;
use metaforge_ports::{
    CallerClass, CallerContext, ClientTask, ClientTaskStatus, ClientTaskStore, Clock, FeedbackSource,
    InputChannel, PhaseBrain, PhaseBrief, PhaseFailure, PhaseFailureKind, PhaseOutcome, PortErrorKind,
    TwinNodeType, TwinStore, WORK_PRODUCT_ARTIFACT, WORK_PRODUCT_PHASE, WORK_PRODUCT_RUN, run_branch,
};
use serde_json::Value;

/// The routing role a phase's worker runs on: the phase's own model serves it (FORGE-475).
pub const PHASE_BRAIN_ROLE: &str = "phase_brain";

/// The stable system prompt of a server phase turn (the brief is the turn's input).
pub const PHASE_SYSTEM_PROMPT: &str = "You are the MetaForge design-flow worker. You carry out one phase of an \
approved design flow through the tools you are given, unattended: nobody answers questions during the phase. \
Record every work product in the digital twin with the twin tools; a deliverable is counted only when it is \
recorded on the run's twin branch, never because your reply describes it. End with a short summary of what \
you recorded and what is still open.";

fn retryable(reason: impl Into<String>) -> PhaseFailure {
    PhaseFailure {
        kind: PhaseFailureKind::Retryable,
        reason: reason.into(),
    }
}

fn configuration(reason: impl Into<String>) -> PhaseFailure {
    PhaseFailure {
        kind: PhaseFailureKind::Configuration,
        reason: reason.into(),
    }
}

/// The deliverables recorded for a phase on the run's twin branch: the twin's own rule
/// ([`crate::twin::recorded_deliverables`]), which the gate's check reads too.
pub use crate::twin::recorded_deliverables;

/// The brief as a server phase turn reads it: retry or rework feedback first, then the goal, the
/// deliverables and slots, where to record them, the flow context and the earlier summaries.
pub fn render_brief(brief: &PhaseBrief) -> String {
    let mut out = String::new();
    if let Some(feedback) = &brief.feedback {
        let why = match feedback.source {
            FeedbackSource::Retry => "A retry",
            FeedbackSource::Rework => "A rework",
        };
        out.push_str(&format!(
            "{why} was asked at gate '{}' (phase '{}') by {}. Address this first: {}\n",
            feedback.gate, feedback.gate_phase, feedback.approver, feedback.reason
        ));
        if !feedback.findings.is_empty() {
            out.push_str("The gate found:\n");
            for finding in &feedback.findings {
                out.push_str(&format!("- {finding}\n"));
            }
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "Phase: {} ('{}'), attempt {} (task {}).\nGoal: {}\n",
        brief.title, brief.phase, brief.attempt, brief.key, brief.goal
    ));
    let list = |items: &[String]| {
        if items.is_empty() {
            "(none)".to_owned()
        } else {
            items.join(", ")
        }
    };
    out.push_str(&format!(
        "Required deliverables (the gate checks these are recorded): {}\n",
        list(&brief.required_deliverables)
    ));
    out.push_str(&format!(
        "Expected artifacts: {}\n",
        list(&brief.expected_artifacts)
    ));
    if !brief.items.is_empty() {
        out.push_str(&format!("Deliverable slots: {}\n", brief.items.join(", ")));
    }
    out.push_str(&format!("Disciplines: {}\n", list(&brief.disciplines)));
    out.push_str(&format!(
        "Record each work product on twin branch '{}' as a {} node with properties {WORK_PRODUCT_ARTIFACT} \
         (the deliverable's name), {WORK_PRODUCT_PHASE} = '{}' and {WORK_PRODUCT_RUN} = '{}'.\n",
        run_branch(&brief.run_id),
        TwinNodeType::WorkProduct.as_str(),
        brief.phase,
        brief.run_id
    ));
    out.push_str(&format!(
        "Flow: {} (version {}).\n",
        brief.flow_context, brief.flow_version_id
    ));
    if let Some(project) = &brief.project_id {
        out.push_str(&format!("Project: {project}.\n"));
    }
    if !brief.earlier.is_empty() {
        out.push_str("\nEarlier phases:\n");
        for earlier in &brief.earlier {
            out.push_str(&format!("- {}: {}\n", earlier.phase, earlier.summary));
        }
    }
    out
}

/// How a server phase runs: P→G→E rounds and the generator turn's bounds.
#[derive(Debug, Clone)]
pub struct ServerBrainSettings {
    /// Most generator/evaluator rounds.
    pub pge_rounds: usize,
    /// Most model calls in one generator turn.
    pub max_iterations: usize,
    /// Most tokens one generator turn may use; `None` = no budget.
    pub token_budget: Option<u64>,
    /// Native, ReAct, or chosen from the model (`METAFORGE_AGENT_LOOP`).
    pub loop_mode: LoopMode,
}

impl Default for ServerBrainSettings {
    fn default() -> Self {
        Self {
            pge_rounds: DEFAULT_PGE_ITERATIONS,
            max_iterations: metaforge_agent::turn::DEFAULT_MAX_ITERATIONS,
            token_budget: None,
            loop_mode: LoopMode::Auto,
        }
    }
}

/// Server intelligence: the agent loop's Planner → Generator → Evaluator with the phase brief as
/// the task. The generator runs on `phase_brain` (the phase's pinned model when it has one) as
/// the design-flow worker (caller class `service`, FORGE-487; forward approval mode, so held MCP
/// calls go to their server's policy), with the tools [`ToolBoxes::for_turn`] gives the phase's
/// disciplines (none at all fails the phase, retryably: it never runs toolless); planner and
/// evaluator keep their roles. Usage is attributed to the run and phase.
pub struct ServerPhaseBrain {
    agent: Agent,
    tools: Arc<dyn ToolBoxes>,
    twin: Arc<dyn TwinStore>,
    settings: ServerBrainSettings,
}

impl std::fmt::Debug for ServerPhaseBrain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPhaseBrain")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ServerPhaseBrain {
    /// A brain running phases with `agent` over the tools `tools` gives each phase, reading
    /// deliverables from `twin`.
    pub fn new(agent: Agent, tools: Arc<dyn ToolBoxes>, twin: Arc<dyn TwinStore>) -> Self {
        Self {
            agent,
            tools,
            twin,
            settings: ServerBrainSettings::default(),
        }
    }

    /// Replaces the P→G→E and turn bounds.
    #[must_use]
    pub fn with_settings(mut self, settings: ServerBrainSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Every role the phase calls must be served, or no retry can help: a missing key, no route
    /// or an unusable pinned model is a configuration failure naming the role and what to set.
    async fn check_models(&self, brief: &PhaseBrief) -> Result<(), PhaseFailure> {
        let model = self.agent.model();
        for (role, provider) in [
            (PHASE_BRAIN_ROLE, brief.model.as_deref()),
            (ROLE_PLANNER, None),
            (ROLE_EVALUATOR, None),
        ] {
            match model.profile(role, provider).await {
                Ok(_) => {}
                Err(e @ ModelError::NotConfigured { .. }) => return Err(configuration(e.to_string())),
                Err(e @ ModelError::Failed { .. }) => return Err(retryable(e.to_string())),
            }
        }
        Ok(())
    }

    fn turn_config(&self, brief: &PhaseBrief) -> TurnConfig {
        let mut turn = TurnConfig::chat(brief.run_id.clone());
        turn.role = PHASE_BRAIN_ROLE.to_owned();
        turn.provider.clone_from(&brief.model);
        turn.mode = self.settings.loop_mode;
        turn.caller = Caller {
            project_id: brief.project_id.clone(),
            unattended: true,
            ..Caller::from(CallerClass::Service)
        };
        turn.approval_mode = ApprovalMode::Forward;
        turn.run_id = Some(brief.run_id.clone());
        turn.phase = Some(brief.phase.clone());
        turn.max_iterations = self.settings.max_iterations;
        turn.token_budget = self.settings.token_budget;
        turn.requested_by = None;
        turn
    }
}

#[async_trait]
impl PhaseBrain for ServerPhaseBrain {
    async fn run_phase(&self, brief: PhaseBrief) -> Result<PhaseOutcome, PhaseFailure> {
        self.check_models(&brief).await?;
        let caller = CallerContext {
            class: CallerClass::Service,
            session: Some(brief.run_id.clone()),
            input_channel: InputChannel::None,
            identity: None,
        };
        let tools = self.tools.for_turn(&caller, Some(&brief.disciplines));
        // A phase never runs toolless (FORGE-475): its work is recorded through tools.
        if tools.tools().is_empty() {
            return Err(retryable(format!(
                "no tools are available to phase '{}' (disciplines: {}): the MCP servers are unreachable or list none",
                brief.phase,
                brief.disciplines.join(", ")
            )));
        }
        let agent = self.agent.with_tools(tools);
        let config = PgeConfig {
            turn: self.turn_config(&brief),
            max_iterations: self.settings.pge_rounds,
        };
        let outcome = agent
            .run_pge(
                &config,
                PHASE_SYSTEM_PROMPT,
                &render_brief(&brief),
                &EventSink::none(),
                &CancellationToken::new(),
            )
            .await;
        let mut summary = match outcome.verdict {
            Verdict::Errored => return Err(retryable(outcome.findings.join("; "))),
            Verdict::Passed | Verdict::Exhausted => outcome.answer.clone().unwrap_or_default(),
        };
        if outcome.verdict == Verdict::Exhausted {
            summary.push_str(&format!(
                "\n\nThe evaluator did not pass this work after {} round(s): {}",
                outcome.iterations,
                outcome.findings.join("; ")
            ));
        }
        let deliverables = recorded_deliverables(self.twin.as_ref(), &brief.run_id, &brief.phase)
            .await
            .map_err(|e| retryable(format!("reading the run's twin branch failed: {e}")))?;
        Ok(PhaseOutcome {
            summary,
            deliverables,
            usage: outcome.usage_events,
        })
    }
}

/// Client intelligence (FORGE-581/582): the phase is a client task `run:phase:attempt` with the
/// brief as its body, posted to the one client-task store; the connected MCP client lists it,
/// claims it, does the work through MCP tools and submits. The brain polls until the submission
/// arrives (the engine cancels it by dropping the call). Called again with the same key — a
/// retry, or after a restart — it finds the task and any submission instead of posting twice; a
/// task withdrawn meanwhile is reopened.
pub struct ClientPhaseBrain {
    tasks: Arc<dyn ClientTaskStore>,
    twin: Arc<dyn TwinStore>,
    clock: Arc<dyn Clock>,
    poll: Duration,
}

impl std::fmt::Debug for ClientPhaseBrain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPhaseBrain")
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// How often a client brain re-reads its task by default.
pub const DEFAULT_CLIENT_TASK_POLL: Duration = Duration::from_secs(1);

impl ClientPhaseBrain {
    /// A brain posting tasks to `tasks`, reading deliverables from `twin`.
    pub fn new(tasks: Arc<dyn ClientTaskStore>, twin: Arc<dyn TwinStore>, clock: Arc<dyn Clock>) -> Self {
        Self {
            tasks,
            twin,
            clock,
            poll: DEFAULT_CLIENT_TASK_POLL,
        }
    }

    /// Re-reads the task every `poll` instead.
    #[must_use]
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    async fn post(&self, brief: &PhaseBrief, body: &Value) -> Result<ClientTask, PhaseFailure> {
        let at = self.clock.now();
        match self
            .tasks
            .post(&brief.run_id, &brief.phase, brief.attempt, body.clone(), at)
            .await
        {
            Ok(task) => {
                if task.created_at == at && task.status == ClientTaskStatus::Open {
                    metrics::counter!("metaforge_client_tasks_posted_total").increment(1);
                }
                tracing::info!(event = "client_task_posted", task_id = %task.id, status = task.status.as_str(), "phase posted for the MCP client");
                Ok(task)
            }
            // The run is unknown or not in client mode: no retry can help.
            Err(e)
                if matches!(
                    e.kind,
                    PortErrorKind::NotFound | PortErrorKind::Conflict | PortErrorKind::Invalid
                ) =>
            {
                Err(configuration(format!("the client task could not be posted: {e}")))
            }
            Err(e) => Err(retryable(format!("the client task could not be posted: {e}"))),
        }
    }
}

/// The summary of a client's submission: its `summary` text, the submission itself when it is
/// text, else its JSON.
fn submission_summary(submission: Option<&Value>) -> String {
    match submission {
        Some(Value::String(text)) => text.clone(),
        Some(value) => value
            .get("summary")
            .and_then(Value::as_str)
            .map_or_else(|| value.to_string(), str::to_owned),
        None => String::new(),
    }
}

#[async_trait]
impl PhaseBrain for ClientPhaseBrain {
    async fn run_phase(&self, brief: PhaseBrief) -> Result<PhaseOutcome, PhaseFailure> {
        let body = serde_json::to_value(&brief)
            .map_err(|e| retryable(format!("the brief cannot be encoded: {e}")))?;
        let mut task = self.post(&brief, &body).await?;
        loop {
            match task.status {
                ClientTaskStatus::Submitted => break,
                ClientTaskStatus::Withdrawn => {
                    tracing::warn!(event = "client_task_reopened", task_id = %task.id, "the phase's client task was withdrawn while the phase waits; reopening it");
                    task = self.post(&brief, &body).await?;
                    continue;
                }
                ClientTaskStatus::Open | ClientTaskStatus::Claimed => {}
            }
            tokio::time::sleep(self.poll).await;
            match self.tasks.get(&task.id).await {
                Ok(next) => task = next,
                Err(e) => {
                    tracing::warn!(event = "client_task_poll_failed", task_id = %task.id, error = %e, "re-reading the client task failed; polling again");
                }
            }
        }
        metrics::counter!("metaforge_client_tasks_answered_total").increment(1);
        let deliverables = recorded_deliverables(self.twin.as_ref(), &brief.run_id, &brief.phase)
            .await
            .map_err(|e| retryable(format!("reading the run's twin branch failed: {e}")))?;
        Ok(PhaseOutcome {
            summary: submission_summary(task.submission.as_ref()),
            deliverables,
            usage: Vec::new(),
        })
    }
}
