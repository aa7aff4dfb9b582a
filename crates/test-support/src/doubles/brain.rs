//! A scripted phase brain: answers each phase from a per-phase queue, records every brief it was
//! given, and can hang (a phase in flight when the engine stops).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use metaforge_ports::{PhaseBrain, PhaseBrief, PhaseFailure, PhaseFailureKind, PhaseOutcome};

use super::lock;

/// One scripted answer for a phase attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum BrainStep {
    /// Finish with this summary and these recorded deliverables.
    Finish {
        /// The summary.
        summary: String,
        /// The deliverables recorded.
        deliverables: Vec<String>,
    },
    /// Fail this way.
    Fail {
        /// Configuration or retryable.
        kind: PhaseFailureKind,
        /// Why.
        reason: String,
    },
    /// Never answer (the engine stops or cancels it).
    Hang,
}

impl BrainStep {
    /// Finish recording exactly `deliverables`.
    pub fn recording(deliverables: &[&str]) -> Self {
        Self::Finish {
            summary: format!("recorded {}", deliverables.join(", ")),
            deliverables: deliverables.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    /// Fail for a retryable reason.
    pub fn retryable(reason: &str) -> Self {
        Self::Fail {
            kind: PhaseFailureKind::Retryable,
            reason: reason.to_owned(),
        }
    }

    /// Fail for configuration (no retry helps).
    pub fn configuration(reason: &str) -> Self {
        Self::Fail {
            kind: PhaseFailureKind::Configuration,
            reason: reason.to_owned(),
        }
    }
}

/// A phase brain answering from a script (unit tests only). A phase with no scripted step left
/// finishes recording everything its brief expects and requires, so a test scripts only the
/// phases it cares about.
#[derive(Debug, Default)]
pub struct ScriptedPhaseBrain {
    script: Mutex<BTreeMap<String, VecDeque<BrainStep>>>,
    briefs: Mutex<Vec<PhaseBrief>>,
}

impl ScriptedPhaseBrain {
    /// A brain finishing every phase with what its brief asks for.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `steps` for `phase`, answered one per attempt in order.
    #[must_use]
    pub fn with(self, phase: &str, steps: Vec<BrainStep>) -> Self {
        lock(&self.script)
            .entry(phase.to_owned())
            .or_default()
            .extend(steps);
        self
    }

    /// Every brief received, in order.
    pub fn briefs(&self) -> Vec<PhaseBrief> {
        lock(&self.briefs).clone()
    }

    /// The `run:phase:attempt` keys received, in order.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.briefs).iter().map(|b| b.key.clone()).collect()
    }

    /// Waits (up to `timeout`) until `count` briefs arrived; false if they did not.
    pub async fn wait_for_calls(&self, count: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if lock(&self.briefs).len() >= count {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[async_trait]
impl PhaseBrain for ScriptedPhaseBrain {
    async fn run_phase(&self, brief: PhaseBrief) -> Result<PhaseOutcome, PhaseFailure> {
        let step = lock(&self.script)
            .get_mut(&brief.phase)
            .and_then(VecDeque::pop_front);
        lock(&self.briefs).push(brief.clone());
        match step {
            None => {
                let mut deliverables = brief.required_deliverables.clone();
                for artifact in &brief.expected_artifacts {
                    if !deliverables.contains(artifact) {
                        deliverables.push(artifact.clone());
                    }
                }
                Ok(PhaseOutcome {
                    summary: format!("{} done", brief.phase),
                    deliverables,
                    usage: Vec::new(),
                })
            }
            Some(BrainStep::Finish {
                summary,
                deliverables,
            }) => Ok(PhaseOutcome {
                summary,
                deliverables,
                usage: Vec::new(),
            }),
            Some(BrainStep::Fail { kind, reason }) => Err(PhaseFailure { kind, reason }),
            Some(BrainStep::Hang) => std::future::pending().await,
        }
    }
}
