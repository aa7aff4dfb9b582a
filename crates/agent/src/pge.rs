//! Planner → Generator → Evaluator (Phase 3): the planner writes a plan, the generator carries it
//! out in a tool-calling turn, the evaluator judges the result — on a provider other than the
//! generator's when one is configured (bias independence) — and its findings go back to the
//! generator until it passes or the iteration cap is reached.

use metaforge_domain::usage::UsageTotals;
use metaforge_ports::{LlmMessage, LlmRequest, SystemPrompt, ToolChoice, UsageEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::events::{EventSink, TurnEvent};
use crate::model::{ModelCall, ModelError};
use crate::turn::{Agent, TurnConfig, TurnError, TurnInput};

/// The planner's routing role.
pub const ROLE_PLANNER: &str = "planner";
/// The generator's routing role.
pub const ROLE_GENERATOR: &str = "generator";
/// The evaluator's routing role.
pub const ROLE_EVALUATOR: &str = "evaluator";

/// Default most generator/evaluator rounds.
pub const DEFAULT_PGE_ITERATIONS: usize = 3;

const PLANNER_SYSTEM: &str = "You are the planner. Write a short numbered plan for the task: the steps, the tools each \
step needs and how the result will be checked. Do not carry the plan out.";

const EVALUATOR_SYSTEM: &str = "You are the evaluator. Judge whether the answer fully and correctly completes the task, \
using only the evidence given. Reply with exactly one JSON object: {\"passed\": true|false, \"findings\": [\"...\"]} \
where findings name every problem (empty when it passed).";

/// How a P→G→E run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The evaluator passed the generator's result.
    Passed,
    /// The iteration cap was reached without a pass.
    Exhausted,
    /// A model call or a turn failed.
    Errored,
}

impl Verdict {
    /// The snake_case name recorded with the run.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Exhausted => "exhausted",
            Self::Errored => "errored",
        }
    }
}

/// What a P→G→E run came to.
#[derive(Debug, Clone, PartialEq)]
pub struct PgeOutcome {
    /// passed, exhausted or errored.
    pub verdict: Verdict,
    /// The evaluator's last findings (the error, for an errored run).
    pub findings: Vec<String>,
    /// Generator/evaluator rounds run.
    pub iterations: usize,
    /// The planner's plan.
    pub plan: Option<String>,
    /// The generator's last reply.
    pub answer: Option<String>,
    /// The provider that served the generator's last model call.
    pub generator_provider: Option<String>,
    /// The provider that served the evaluator's last call.
    pub evaluator_provider: Option<String>,
    /// Every model call's usage (planner, generator turns, evaluator).
    pub usage_events: Vec<UsageEvent>,
}

impl PgeOutcome {
    /// The run's usage totals (by role: planner, generator, evaluator).
    pub fn usage(&self) -> UsageTotals {
        UsageTotals::from_events(&self.usage_events)
    }
}

/// How a P→G→E run goes.
#[derive(Debug, Clone)]
pub struct PgeConfig {
    /// The generator's turn settings (its role is set to `generator`, unless it is a
    /// `phase_brain` role: a phase's generator runs on the phase's worker model).
    pub turn: TurnConfig,
    /// Most generator/evaluator rounds.
    pub max_iterations: usize,
}

/// The evaluator's verdict on one answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evaluation {
    /// It passed.
    pub passed: bool,
    /// Every problem named.
    pub findings: Vec<String>,
}

/// Reads the evaluator's reply leniently: the first JSON object with `passed`; anything else is
/// a failed evaluation whose finding quotes the reply (never a pass by default).
pub fn parse_evaluation(text: &str) -> Evaluation {
    for (start, _) in text.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(map))) = stream.next()
            && let Some(passed) = map.get("passed").and_then(Value::as_bool)
        {
            let findings = map
                .get("findings")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|f| f.as_str().map_or_else(|| f.to_string(), str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            return Evaluation { passed, findings };
        }
    }
    Evaluation {
        passed: false,
        findings: vec![format!(
            "the evaluator's reply was not a verdict: {}",
            metaforge_domain::compaction::truncate_observation(text.trim(), 200)
        )],
    }
}

impl Agent {
    /// Runs Planner → Generator → Evaluator on `task`, reporting through `events` and ending
    /// with one `agent.done` (after `notify_error` when it errored).
    pub async fn run_pge(
        &self,
        config: &PgeConfig,
        system: &str,
        task: &str,
        events: &EventSink,
        cancel: &CancellationToken,
    ) -> PgeOutcome {
        let mut outcome = PgeOutcome {
            verdict: Verdict::Errored,
            findings: Vec::new(),
            iterations: 0,
            plan: None,
            answer: None,
            generator_provider: None,
            evaluator_provider: None,
            usage_events: Vec::new(),
        };
        let result = self
            .pge_rounds(config, system, task, events, cancel, &mut outcome)
            .await;
        if let Err(error) = result {
            outcome.verdict = Verdict::Errored;
            outcome.findings = vec![error.to_string()];
            events.emit(TurnEvent::NotifyError {
                code: error.code().to_owned(),
                message: error.to_string(),
            });
        }
        tracing::info!(
            event = "pge_verdict",
            verdict = outcome.verdict.as_str(),
            iterations = outcome.iterations,
            generator_provider = outcome.generator_provider.as_deref().unwrap_or(""),
            evaluator_provider = outcome.evaluator_provider.as_deref().unwrap_or(""),
            "planner → generator → evaluator finished"
        );
        events.emit(TurnEvent::Done {
            usage: outcome.usage(),
        });
        outcome
    }

    async fn pge_rounds(
        &self,
        config: &PgeConfig,
        system: &str,
        task: &str,
        events: &EventSink,
        cancel: &CancellationToken,
        outcome: &mut PgeOutcome,
    ) -> Result<(), TurnError> {
        let base = &config.turn;
        let plan = self
            .side_call(
                base,
                ROLE_PLANNER,
                None,
                PLANNER_SYSTEM,
                task.to_owned(),
                cancel,
                outcome,
            )
            .await?
            .1;
        outcome.plan = Some(plan.clone());
        let mut generator = base.clone();
        // Inside a design-flow phase the generator is the phase's worker: it keeps the
        // `phase_brain` role, which the phase's own model serves (FORGE-475); planner and
        // evaluator stay on their own roles.
        if !metaforge_domain::routing::is_phase_brain_role(&generator.role) {
            generator.role = ROLE_GENERATOR.to_owned();
        }
        let mut findings: Vec<String> = Vec::new();
        while outcome.iterations < config.max_iterations {
            outcome.iterations += 1;
            let mut user = format!("Task:\n{task}\n\nPlan:\n{plan}");
            if !findings.is_empty() {
                user.push_str(
                    "\n\nThe evaluator found these problems with your previous answer; fix them:\n",
                );
                user.push_str(
                    &findings
                        .iter()
                        .map(|f| format!("- {f}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
            }
            let input = TurnInput {
                system: system.to_owned(),
                history: Vec::new(),
                user,
            };
            let turn = match self.run_turn_quiet(&generator, &input, events, cancel).await {
                Ok(turn) => turn,
                Err(failure) => {
                    outcome.usage_events.extend(failure.usage_events);
                    return Err(failure.error);
                }
            };
            outcome.usage_events.extend(turn.usage_events.iter().cloned());
            outcome.generator_provider.clone_from(&turn.provider);
            outcome.answer = Some(turn.reply.clone());
            let evaluator_provider = self.evaluator_provider(turn.provider.as_deref()).await;
            let evidence: Vec<String> = turn
                .calls
                .iter()
                .map(|c| format!("- {}({}) → {}", c.tool, c.arguments, c.content))
                .collect();
            let question = format!(
                "Task:\n{task}\n\nAnswer:\n{}\n\nTool calls made:\n{}",
                turn.reply,
                if evidence.is_empty() {
                    "(none)".to_owned()
                } else {
                    evidence.join("\n")
                }
            );
            let (served, verdict_text) = self
                .side_call(
                    base,
                    ROLE_EVALUATOR,
                    evaluator_provider,
                    EVALUATOR_SYSTEM,
                    question,
                    cancel,
                    outcome,
                )
                .await?;
            outcome.evaluator_provider = Some(served);
            let evaluation = parse_evaluation(&verdict_text);
            outcome.findings.clone_from(&evaluation.findings);
            if evaluation.passed {
                outcome.verdict = Verdict::Passed;
                return Ok(());
            }
            findings = evaluation.findings;
        }
        outcome.verdict = Verdict::Exhausted;
        Ok(())
    }

    /// A provider for the evaluator other than the generator's; `None` (the role's primary) with
    /// a warning when no other is configured.
    async fn evaluator_provider(&self, generator: Option<&str>) -> Option<String> {
        let candidates = self.model().providers(ROLE_EVALUATOR).await;
        let independent = candidates.iter().find(|p| Some(p.as_str()) != generator).cloned();
        if independent.is_none() {
            tracing::warn!(
                event = "evaluator_provider_not_independent",
                generator_provider = generator.unwrap_or(""),
                evaluator_candidates = %candidates.join(","),
                "no provider other than the generator's is configured for the evaluator; it runs on the same provider"
            );
        }
        independent
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one private helper for the planner and evaluator calls"
    )]
    async fn side_call(
        &self,
        base: &TurnConfig,
        role: &str,
        provider: Option<String>,
        system: &str,
        user: String,
        cancel: &CancellationToken,
        outcome: &mut PgeOutcome,
    ) -> Result<(String, String), TurnError> {
        let call = ModelCall {
            role: role.to_owned(),
            provider,
            scope: crate::model::UsageScope {
                run_id: base.run_id.clone(),
                phase: base.phase.clone(),
                role: Some(role.to_owned()),
                caller: Some(base.caller.class.as_str().to_owned()),
            },
            session_id: base.session_id.clone(),
        };
        let request = LlmRequest {
            system: SystemPrompt {
                stable: system.to_owned(),
                volatile_suffix: None,
            },
            messages: vec![LlmMessage::user_text(user)],
            tool_choice: ToolChoice::None,
            ..LlmRequest::default()
        };
        let answer = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(TurnError::Canceled),
            answer = self.model().complete(&call, request) => answer.map_err(|e: ModelError| TurnError::Model(e))?,
        };
        outcome.usage_events.push(answer.usage);
        Ok((answer.provider, answer.response.text))
    }
}
