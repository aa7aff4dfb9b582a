//! The Prometheus exposition every MetaForge server serves on `/metrics`.
//!
//! Never empty, even before the first call: `metaforge_build_info{version} 1` says which build is
//! running, and the process series (`process_resident_memory_bytes`, `process_cpu_seconds_total`,
//! `process_open_fds`, `process_max_fds`, `process_start_time_seconds`, `process_threads`, …,
//! from the `metrics-process` collector, refreshed on every scrape) say how it is doing. The
//! `metrics` recorder's series follow, then the fractional counters the recorder cannot hold
//! ([`crate::usage_metrics::FloatCounterFamily`]: `metaforge_llm_cost_usd_total`).

use std::sync::Arc;

use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};

use crate::usage_metrics::{FloatCounterFamily, llm_cost_family};

/// Which build is running: always 1, labelled with the version.
pub const BUILD_INFO: &str = "metaforge_build_info";

/// The recorder's handle plus the series rendered beside it.
pub struct Exposition {
    handle: PrometheusHandle,
    process: metrics_process::Collector,
    floats: Vec<Arc<FloatCounterFamily>>,
}

impl std::fmt::Debug for Exposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exposition").finish_non_exhaustive()
    }
}

impl Exposition {
    /// Installs the process-wide Prometheus recorder (once per process) and records the build
    /// info and the first process sample.
    pub fn install() -> Result<Self, BuildError> {
        let handle = PrometheusBuilder::new().install_recorder()?;
        Ok(Self::over(handle, vec![llm_cost_family()]))
    }

    /// An exposition over an installed recorder's `handle`, appending `floats`. Records the build
    /// info and describes the process series into whatever recorder is installed.
    pub fn over(handle: PrometheusHandle, floats: Vec<Arc<FloatCounterFamily>>) -> Self {
        metrics::describe_gauge!(
            BUILD_INFO,
            "The running MetaForge build: always 1, labelled with its version."
        );
        metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        let process = metrics_process::Collector::default();
        process.describe();
        process.collect();
        Self {
            handle,
            process,
            floats,
        }
    }

    /// The text exposition, with the process series refreshed now.
    pub fn render(&self) -> String {
        self.process.collect();
        let mut text = self.handle.render();
        for family in &self.floats {
            family.render_into(&mut text);
        }
        text
    }
}
