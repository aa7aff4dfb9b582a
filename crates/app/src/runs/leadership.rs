//! Which process drives the embedded engine's runs when several share one run ledger (issue 20):
//! the one holding the ledger's [`EMBEDDED_ENGINE_DUTY`] lease. Two gateways on one PostgreSQL
//! server would otherwise both resume every unfinished run at start-up and both carry out its
//! effects. The holder resumes the runs and renews the lease; every other process stands by
//! (starting or answering a run there is `Unavailable`, naming the holder) and takes over when
//! the lease lapses. A holder that cannot show it still holds the lease stops its engine before
//! the lease can lapse, so two engines never drive one ledger at once.
//!
//! A lease whose holder is a dead process on this host (a `kill -9`, a crash) is released by the
//! next process on the host instead of waited out: the holder names its host and pid.

use std::sync::Arc;

use metaforge_ports::{Clock, EMBEDDED_ENGINE_DUTY, Lease, LeaseStore, PortError};
use tokio::task::JoinHandle;

use super::engine::{EmbeddedEngine, ResumeReport};
use crate::processes::{LeaseTimings, LocalProcesses, is_dead_here};

/// Whether this process leads the engine after [`lead`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeadStart {
    /// It holds the lease and resumed the ledger's runs.
    Leading(ResumeReport),
    /// Another process holds the lease; this one asks again every `renew_every`.
    StandingBy {
        /// The holder.
        holder: String,
    },
}

/// The lease task of one process: renewing, or waiting to take over.
pub struct EngineLeadership {
    leases: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    holder: String,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for EngineLeadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineLeadership")
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

struct Leader {
    engine: EmbeddedEngine,
    leases: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    local: Arc<dyn LocalProcesses>,
    holder: String,
    timings: LeaseTimings,
}

impl Leader {
    /// Asks for the lease once; a lease held by a dead process on this host is released and
    /// asked for again.
    async fn ask(&self) -> Result<Lease, PortError> {
        let now = self.clock.now();
        let lease = self
            .leases
            .acquire(EMBEDDED_ENGINE_DUTY, &self.holder, now, self.timings.ttl)
            .await?;
        if lease.is_held_by(&self.holder, now) || !is_dead_here(self.local.as_ref(), &lease.holder) {
            return Ok(lease);
        }
        tracing::warn!(
            event = "flow_engine_lease_released_for_dead_holder",
            holder = %lease.holder,
            "the engine lease's holder is no longer running on this host; releasing its lease"
        );
        self.leases
            .release(EMBEDDED_ENGINE_DUTY, &lease.holder, now)
            .await?;
        self.leases
            .acquire(EMBEDDED_ENGINE_DUTY, &self.holder, now, self.timings.ttl)
            .await
    }

    /// Resumes the runs and renews the lease until it cannot be shown held; then stops the engine.
    async fn hold(&self, mut expires_at: metaforge_ports::Timestamp) {
        loop {
            tokio::time::sleep(self.timings.renew_every).await;
            match self.ask().await {
                Ok(lease) if lease.is_held_by(&self.holder, self.clock.now()) => {
                    expires_at = lease.expires_at;
                }
                Ok(lease) => {
                    self.stop(&format!(
                        "this process lost the engine lease to {} (it could not renew in time)",
                        lease.holder
                    ))
                    .await;
                    return;
                }
                Err(e) => {
                    let next_try = self.clock.now()
                        + chrono::Duration::from_std(self.timings.renew_every).unwrap_or_default();
                    if next_try >= expires_at {
                        self.stop(&format!(
                            "the engine lease could not be renewed before it lapses ({e})"
                        ))
                        .await;
                        return;
                    }
                    tracing::warn!(event = "flow_engine_lease_renewal_failed", error = %e, "the engine lease could not be renewed; trying again before it lapses");
                }
            }
        }
    }

    async fn stop(&self, why: &str) {
        tracing::error!(
            event = "flow_engine_lease_lost",
            holder = %self.holder,
            reason = %why,
            "the embedded engine stops driving runs here; restart this process to stand by for the lease again"
        );
        self.engine.set_idle_reason(why.to_owned());
        self.engine.shutdown().await;
    }

    /// Stands by until the lease can be taken, then resumes the runs and holds it.
    async fn stand_by(&self) {
        loop {
            tokio::time::sleep(self.timings.renew_every).await;
            let lease = match self.ask().await {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::warn!(event = "flow_engine_lease_unavailable", error = %e, "cannot ask for the engine lease; asking again");
                    continue;
                }
            };
            if !lease.is_held_by(&self.holder, self.clock.now()) {
                self.engine.set_idle_reason(standby_reason(&lease.holder));
                continue;
            }
            match self.engine.resume_all().await {
                Ok(report) => {
                    tracing::info!(
                        event = "flow_engine_took_over",
                        holder = %self.holder,
                        resumed = report.resumed.len(),
                        settled = report.settled.len(),
                        unresumable = report.failed.len(),
                        "this process took the engine lease and resumed the ledger's runs"
                    );
                }
                Err(e) => {
                    tracing::error!(event = "flow_engine_takeover_failed", error = %e, "the engine lease was taken but the runs could not be resumed; releasing it");
                    let _released = self
                        .leases
                        .release(EMBEDDED_ENGINE_DUTY, &self.holder, self.clock.now())
                        .await;
                    continue;
                }
            }
            self.hold(lease.expires_at).await;
            return;
        }
    }
}

fn standby_reason(holder: &str) -> String {
    format!(
        "the embedded flow engine runs in another process ({holder}) on this run ledger; this \
         process takes over if that one stops"
    )
}

/// Takes the engine lease for `holder` and resumes the ledger's runs, or stands by when another
/// process holds it; either way a task keeps the lease (renewing it, or asking for it) from
/// then on.
///
/// # Errors
/// When the lease store cannot be asked at start-up, or the runs cannot be resumed (as
/// [`EmbeddedEngine::resume_all`]); the lease is released then.
pub async fn lead(
    engine: EmbeddedEngine,
    leases: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    local: Arc<dyn LocalProcesses>,
    holder: String,
    timings: LeaseTimings,
) -> Result<(LeadStart, EngineLeadership), PortError> {
    let leader = Leader {
        engine,
        leases: Arc::clone(&leases),
        clock: Arc::clone(&clock),
        local,
        holder: holder.clone(),
        timings,
    };
    let lease = leader.ask().await?;
    let start = if lease.is_held_by(&holder, clock.now()) {
        match leader.engine.resume_all().await {
            Ok(report) => LeadStart::Leading(report),
            Err(e) => {
                let _released = leases.release(EMBEDDED_ENGINE_DUTY, &holder, clock.now()).await;
                return Err(e);
            }
        }
    } else {
        leader.engine.set_idle_reason(standby_reason(&lease.holder));
        LeadStart::StandingBy {
            holder: lease.holder.clone(),
        }
    };
    let task = match &start {
        LeadStart::Leading(_) => {
            let expires_at = lease.expires_at;
            tokio::spawn(async move { leader.hold(expires_at).await })
        }
        LeadStart::StandingBy { .. } => tokio::spawn(async move { leader.stand_by().await }),
    };
    Ok((
        start,
        EngineLeadership {
            leases,
            clock,
            holder,
            task,
        },
    ))
}

impl EngineLeadership {
    /// This process's holder identity.
    #[must_use]
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// On a graceful stop, after the engine stopped: ends the lease task and gives the lease up,
    /// so a standby process takes over at its next ask instead of when the lease lapses.
    pub async fn release(&self) {
        self.task.abort();
        if let Err(e) = self
            .leases
            .release(EMBEDDED_ENGINE_DUTY, &self.holder, self.clock.now())
            .await
        {
            tracing::warn!(event = "flow_engine_lease_release_failed", error = %e, "the engine lease could not be given up; it lapses on its own");
        }
    }
}
