//! `metaforge worker`: the Temporal design-flow worker (issue 17, FORGE-475). It composes what the
//! gateway composes for runs (the agent loop, the tools, the twin, client tasks) and, instead of
//! serving HTTP, polls `metaforge-design-flows` with the phase brains the embedded engine would
//! use. Built only with the `temporal` feature; without it the command says so and exits 2.

use std::process::ExitCode;

use super::serve::GatewayArgs;

/// Runs `metaforge worker`.
#[cfg(feature = "temporal")]
pub(crate) fn run(args: &GatewayArgs, settings: &crate::settings::Settings) -> ExitCode {
    use super::serve::StartError;
    let _traces = crate::system::init_logging(&settings.log, "worker");
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("metaforge worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work(args, settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(StartError::Config(message)) => {
            eprintln!("metaforge worker: {message}");
            ExitCode::from(2)
        }
        Err(StartError::Runtime(message)) => {
            eprintln!("metaforge worker: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "temporal")]
async fn work(
    args: &GatewayArgs,
    settings: &crate::settings::Settings,
) -> Result<(), super::serve::StartError> {
    use super::serve::StartError;
    let composition =
        super::serve::compose_as(args, settings, Some(metaforge_ports::FlowEngineKind::Temporal)).await?;
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
            worked.map_err(|e| StartError::Runtime(e.to_string()))
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
    eprintln!(
        "metaforge worker: this metaforge was built without the Temporal engine; build it with \
         `cargo build --release -p metaforge-bins --features temporal`"
    );
    ExitCode::from(2)
}
