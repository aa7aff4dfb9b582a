//! The real clock and id generator, and process-level set-up (logging, metrics recorder).
//! Only the binary reads the system clock and the environment.

use metaforge_ports::{Clock, IdGen, Timestamp};

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// uuid v7 ids: unique and sortable by creation time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UuidV7Ids;

impl IdGen for UuidV7Ids {
    fn new_id(&self) -> String {
        uuid::Uuid::now_v7().to_string()
    }
}

/// Structured JSON logs on stderr, filtered by `RUST_LOG` (default `info`).
pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second initialisation (tests running commands in-process) is harmless; ignore it.
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Reads an environment variable, treating an empty value as unset.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
