//! The processes sharing one set of ledgers, and which of them are alive (issue 20). Every
//! process is named once per start (`host/pid/unique`); it names itself on the holds it parks and
//! renews a presence lease ([`presence_duty`]) while it runs. A hold's waiter lives in the process
//! that parked it, so a gateway starting beside live ones orphans only the holds of processes
//! that are gone — seen dead on this host, or whose presence lease lapsed — and every live
//! process sweeps for gone ones while it runs, so a host that dies for good does not leave its
//! holds waiting on their deadlines.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use metaforge_ports::{Clock, GoneParkers, LeaseStore, PortError, presence_duty};
use tokio::task::JoinHandle;

use crate::approvals::ApprovalService;

/// A process identity: `host/pid/unique`, unique per start.
#[must_use]
pub fn process_name(host: &str, pid: u32, unique: &str) -> String {
    format!("{host}/{pid}/{unique}")
}

/// The host and pid a name gives, when it is of [`process_name`]'s form.
fn host_and_pid(name: &str) -> Option<(&str, u32)> {
    let mut parts = name.splitn(3, '/');
    let host = parts.next()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next()?;
    Some((host, pid))
}

/// What this process knows of the host it runs on, to tell a dead local process from a live one.
pub trait LocalProcesses: Send + Sync {
    /// This host's name, or `None` when it cannot be read (then no process counts as local).
    fn host(&self) -> Option<String>;
    /// Whether a process with `pid` runs on this host.
    fn is_alive(&self, pid: u32) -> bool;
}

/// Whether the process `name` is known dead on this host: it names this host and its pid does
/// not run. A name of another host, or of no known form, is never dead by this test.
pub fn is_dead_here(local: &dyn LocalProcesses, name: &str) -> bool {
    match (host_and_pid(name), local.host()) {
        (Some((host, pid)), Some(here)) => host == here && !local.is_alive(pid),
        _ => false,
    }
}

/// How long a lease lasts unless renewed, and how often its holder renews it (and a standby
/// asks again, and a process sweeps for gone ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// The lease's length: how long a dead holder on another host can delay a takeover.
    pub ttl: Duration,
    /// How often the holder renews; well under `ttl`.
    pub renew_every: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        }
    }
}

/// This process's presence among the others on its ledgers.
pub struct Presence {
    leases: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    local: Arc<dyn LocalProcesses>,
    name: String,
    timings: LeaseTimings,
}

impl std::fmt::Debug for Presence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presence")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Presence {
    /// The presence of the process `name`, kept in `leases`.
    pub fn new(
        leases: Arc<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        local: Arc<dyn LocalProcesses>,
        name: String,
        timings: LeaseTimings,
    ) -> Self {
        Self {
            leases,
            clock,
            local,
            name,
            timings,
        }
    }

    /// This process's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes (or renews) this process's presence lease. Call before anything is parked.
    ///
    /// # Errors
    /// When the lease store cannot be written.
    pub async fn announce(&self) -> Result<(), PortError> {
        let duty = presence_duty(&self.name);
        self.leases
            .acquire(&duty, &self.name, self.clock.now(), self.timings.ttl)
            .await
            .map(|_| ())
    }

    /// Whether the process `name` is gone: dead on this host, or its presence lease lapsed or
    /// was given up. A process that never announced itself (a local `metaforge mcp serve`) is
    /// gone only by the first test; when the lease store cannot be read, no one is gone.
    pub async fn is_gone(&self, name: &str) -> bool {
        if name == self.name {
            return false;
        }
        if is_dead_here(self.local.as_ref(), name) {
            return true;
        }
        match self.leases.lease(&presence_duty(name)).await {
            Ok(Some(lease)) => !lease.is_held_by(name, self.clock.now()),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(event = "process_presence_unreadable", process = %name, error = %e, "cannot read whether a process is alive; its holds are kept");
                false
            }
        }
    }

    /// Which of `parkers` are gone.
    pub async fn gone_among(&self, parkers: BTreeSet<String>) -> GoneParkers {
        let mut gone = Vec::new();
        for parker in parkers {
            if self.is_gone(&parker).await {
                gone.push(parker);
            }
        }
        GoneParkers::of(gone)
    }

    /// Renews the presence lease and sweeps the holds of gone processes every `renew_every`,
    /// until [`PresenceTask::stop`].
    pub fn keep(self: Arc<Self>, approvals: Arc<ApprovalService>) -> PresenceTask {
        let presence = Arc::clone(&self);
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(presence.timings.renew_every).await;
                if let Err(e) = presence.announce().await {
                    tracing::warn!(event = "process_presence_renewal_failed", error = %e, "this process's presence could not be renewed; trying again");
                }
                match approvals.orphan_gone(&presence).await {
                    Ok(0) => {}
                    Ok(orphaned) => {
                        tracing::info!(
                            event = "gone_process_holds_orphaned",
                            orphaned,
                            "holds parked by processes that are gone were orphaned"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(event = "gone_process_sweep_failed", error = %e, "the holds of gone processes could not be swept; trying again");
                    }
                }
            }
        });
        PresenceTask { presence: self, task }
    }
}

/// The task renewing a process's presence; stopped on a graceful stop.
#[derive(Debug)]
pub struct PresenceTask {
    presence: Arc<Presence>,
    task: JoinHandle<()>,
}

impl PresenceTask {
    /// Ends the renewals and gives the presence lease up, so the other processes orphan this
    /// one's open holds (whose waiters stop with it) at their next sweep.
    pub async fn stop(&self) {
        self.task.abort();
        let presence = &self.presence;
        if let Err(e) = presence
            .leases
            .release(
                &presence_duty(&presence.name),
                &presence.name,
                presence.clock.now(),
            )
            .await
        {
            tracing::warn!(event = "process_presence_release_failed", error = %e, "this process's presence could not be given up; it lapses on its own");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_gives_its_host_and_pid() {
        let name = process_name("box-1", 4242, "0190-abc");
        assert_eq!(name, "box-1/4242/0190-abc");
        assert_eq!(host_and_pid(&name), Some(("box-1", 4242)));
        assert_eq!(host_and_pid("someone"), None);
        assert_eq!(host_and_pid("box/notapid/x"), None);
    }
}
