//! Validating a caller's flow without stalling the server (issue 12): the size limits first
//! (cheap, on the caller's task), then the invariants on tokio's blocking pool under a deadline,
//! so a large validation never occupies an async worker that `/health` and every other request
//! need. The gateway's `POST /v1/design-flows/validate` and the sidecar's `flow.validate` both
//! come through here.

use std::time::Duration;

use metaforge_domain::flow::{
    Flow, FlowContext, SizeLimitError, ValidationReport, check_flow_size, validation_report,
};

/// How long one validation may take before the caller is told so. A flow at the size limits
/// validates in milliseconds; this only bounds a machine that is badly overloaded.
pub const VALIDATION_DEADLINE: Duration = Duration::from_secs(10);

/// Why a flow could not be validated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The flow is over a size limit (422 / an MCP error naming the limit); nothing was run.
    #[error(transparent)]
    TooLarge(#[from] SizeLimitError),
    /// The validation did not finish within the deadline (503).
    #[error("validation did not finish within {} s; try again later", .0.as_secs())]
    DeadlineExceeded(Duration),
    /// The blocking task failed (a bug; 500).
    #[error("validation failed: {0}")]
    Failed(String),
}

/// Runs CPU-bound `work` on the blocking pool and waits at most `deadline` for it. On timeout
/// the caller gets its answer at once; the work (bounded by the size limits) finishes on its own.
pub async fn run_blocking<T, F>(deadline: Duration, work: F) -> Result<T, ValidationError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::time::timeout(deadline, tokio::task::spawn_blocking(work)).await {
        Err(_) => Err(ValidationError::DeadlineExceeded(deadline)),
        Ok(Err(join)) => Err(ValidationError::Failed(join.to_string())),
        Ok(Ok(value)) => Ok(value),
    }
}

/// The size limits, then every invariant of `flow` under `context`, off the async workers.
pub async fn validate_flow(
    flow: Flow,
    context: Option<FlowContext>,
) -> Result<ValidationReport, ValidationError> {
    check_flow_size(&flow)?;
    run_blocking(VALIDATION_DEADLINE, move || {
        validation_report(&flow, context.as_ref())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use metaforge_domain::flow::{MAX_PHASES, template};

    #[tokio::test]
    async fn a_template_validates_and_an_oversized_flow_is_refused_naming_the_limit() {
        let mech = template("mech_v1").unwrap();
        assert!(validate_flow(mech.clone(), None).await.unwrap().valid);
        let mut big = mech.clone();
        big.phases = (0..=MAX_PHASES)
            .map(|i| {
                let mut p = mech.phases[0].clone();
                p.id = format!("p{i}");
                p
            })
            .collect();
        let err = validate_flow(big, None).await.unwrap_err();
        assert!(err.to_string().contains("MAX_PHASES"), "{err}");
    }

    #[tokio::test]
    async fn work_past_the_deadline_answers_at_the_deadline() {
        let started = std::time::Instant::now();
        let err = run_blocking(Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_millis(500))
        })
        .await
        .unwrap_err();
        assert_eq!(err, ValidationError::DeadlineExceeded(Duration::from_millis(50)));
        assert!(started.elapsed() < Duration::from_millis(450));
    }
}
