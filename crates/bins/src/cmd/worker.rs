//! `metaforge worker`: the Temporal design-flow worker (issue 17, FORGE-475). It composes what the
//! gateway composes for runs (the agent loop, the tools, the twin, client tasks) and, instead of
//! serving HTTP, polls `metaforge-design-flows` with the phase brains the embedded engine would
//! use. Built only with the `temporal` feature; without it the command says so and exits 2.

use std::process::ExitCode;

use crate::compose::GatewayArgs;

/// Runs `metaforge worker`.
#[cfg(feature = "temporal")]
pub(crate) fn run(args: &GatewayArgs, settings: &crate::settings::Settings) -> ExitCode {
    let _traces = crate::system::init_logging(&settings.log, "worker");
    crate::compose::run_serving("worker", work(args, settings))
}

#[cfg(feature = "temporal")]
async fn work(
    args: &GatewayArgs,
    settings: &crate::settings::Settings,
) -> Result<(), crate::compose::StartError> {
    use crate::compose::StartError;
    let composition =
        crate::compose::compose_as(args, settings, Some(metaforge_ports::FlowEngineKind::Temporal)).await?;
    let host = crate::runs_temporal::temporal_host(&settings.runs);
    let activities = crate::runs_temporal::activities(
        &composition.runs.brains,
        std::sync::Arc::clone(&composition.runs.twin),
    );
    crate::banner::announce(&format!(
        "metaforge worker polling {} on {host}",
        metaforge_adapters_temporal::TASK_QUEUE
    ));
    let worked = tokio::select! {
        worked = metaforge_adapters_temporal::run_worker(&host, activities) => {
            worked.map_err(StartError::runtime)
        }
        () = super::serve::shutdown_signal() => {
            tracing::info!(event = "design_flow_worker_stopped", "the worker stopped; Temporal hands its tasks to another worker");
            Ok(())
        }
    };
    composition.presence.stop().await;
    worked
}

/// Without the `temporal` feature: the command exists (so `--help` lists it) and says how to
/// get it.
#[cfg(not(feature = "temporal"))]
pub(crate) fn run(_args: &GatewayArgs, _settings: &crate::settings::Settings) -> ExitCode {
    eprintln!("{}", super::without_temporal("metaforge worker"));
    ExitCode::from(2)
}
