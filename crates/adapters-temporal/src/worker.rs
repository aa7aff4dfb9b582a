//! The worker `metaforge worker` runs: it polls `metaforge-design-flows` for the design-flow
//! workflow and its activities until the process stops.

use temporalio_client::{Client, ClientOptions, Connection, ConnectionOptions, Url};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};

use crate::activity::PhaseActivities;
use crate::workflow::DesignFlowWorkflow;
use crate::{NAMESPACE, TASK_QUEUE};

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// `TEMPORAL_HOST` is not `host:port`.
    #[error("TEMPORAL_HOST={host} is not host:port: {reason}")]
    Host {
        /// The value.
        host: String,
        /// Why.
        reason: String,
    },
    /// The server could not be reached.
    #[error("the Temporal server at {host} cannot be reached: {reason}")]
    Connect {
        /// The value.
        host: String,
        /// Why.
        reason: String,
    },
    /// The SDK refused to build or run the worker.
    #[error("the design-flow worker failed: {0}")]
    Worker(String),
}

/// A namespace-bound client of the server at `host` (`host:port`, no scheme).
pub async fn connect(host: &str) -> Result<Client, WorkerError> {
    let url = Url::parse(&format!("http://{host}")).map_err(|e| WorkerError::Host {
        host: host.to_owned(),
        reason: e.to_string(),
    })?;
    let connection = Connection::connect(
        ConnectionOptions::new(url)
            .identity("metaforge".to_owned())
            .build(),
    )
    .await
    .map_err(|e| WorkerError::Connect {
        host: host.to_owned(),
        reason: e.to_string(),
    })?;
    Client::new(connection, ClientOptions::new(NAMESPACE).build()).map_err(|e| WorkerError::Connect {
        host: host.to_owned(),
        reason: e.to_string(),
    })
}

/// Polls the design-flow queue on `host` with `activities` until the worker stops (it returns
/// when the process is asked to stop, or with the SDK's error).
pub async fn run_worker(host: &str, activities: PhaseActivities) -> Result<(), WorkerError> {
    let client = connect(host).await?;
    let runtime =
        Runtime::from_current_tokio(Default::default()).map_err(|e| WorkerError::Worker(e.to_string()))?;
    let options = WorkerOptions::new(TASK_QUEUE)
        .register_workflow::<DesignFlowWorkflow>()
        .map_err(|e| WorkerError::Worker(e.to_string()))?
        .register_activities(activities)
        .workflow_interceptor(crate::trace_context::hand_on_trace_context())
        .build();
    let mut worker =
        Worker::new(&runtime, client, options).map_err(|e| WorkerError::Worker(e.to_string()))?;
    tracing::info!(
        event = "design_flow_worker_started",
        task_queue = TASK_QUEUE,
        host,
        "polling for design-flow workflows and phase activities"
    );
    worker.run().await.map_err(|e| WorkerError::Worker(e.to_string()))
}
