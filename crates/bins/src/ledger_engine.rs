//! Where the ledgers live, chosen once from `METAFORGE_DATABASE_URL`: SQLite files under
//! `METAFORGE_HOME` (the default: one person, one machine) or one PostgreSQL server shared by
//! every gateway, sidecar and worker of a cluster. Every process opens its ledgers here, so a
//! gateway and a worker started with the same variable always share the same ledgers.

use std::path::Path;
use std::sync::Arc;

use metaforge_adapters_store::{
    SqliteApprovalLedger, SqliteClientTaskStore, SqliteFlowVersionStore, SqliteRunLedger, SqliteSessionStore,
    SqliteUsageStore,
};
use metaforge_ports::{
    ApprovalLedger, ClientTaskStore, Clock, FlowVersionStore, LeaseStore, PortError, RunLedger, SessionStore,
    UsageStore,
};

/// The run ledger seen through both of its ports.
pub(crate) struct RunLedgerPorts {
    /// Runs and their transitions.
    pub(crate) runs: Arc<dyn RunLedger>,
    /// The leases on the ledger's duties.
    pub(crate) leases: Arc<dyn LeaseStore>,
}

/// The variable that moves every ledger onto a PostgreSQL server.
pub(crate) const DATABASE_URL_ENV: &str = "METAFORGE_DATABASE_URL";

/// The engine every ledger of this process is opened on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LedgerEngine {
    /// One SQLite file per ledger, at the paths `StorePaths` resolves.
    Files,
    /// One schema per ledger on the PostgreSQL server at this URL.
    Postgres(String),
}

impl LedgerEngine {
    /// Reads `METAFORGE_DATABASE_URL`: unset or empty is [`LedgerEngine::Files`]; a
    /// `postgres://` or `postgresql://` URL is [`LedgerEngine::Postgres`]; anything else is an
    /// error naming the variable and what it accepts.
    pub(crate) fn from_setting(value: Option<&str>) -> anyhow::Result<Self> {
        match value.map(str::trim) {
            None | Some("") => Ok(Self::Files),
            Some(url) if is_postgres_url(url) => Ok(Self::Postgres(url.to_owned())),
            Some(other) => Err(anyhow::anyhow!(
                "{DATABASE_URL_ENV}: expected a postgres://user@host:port/database URL (or unset for \
                 the SQLite files under METAFORGE_HOME), got {:?}",
                other.split("://").next().unwrap_or(other)
            )),
        }
    }

    /// Where the ledger stored at `path` (under `Files`) lives, for logs: the file, or the
    /// server's URL with any password hidden.
    pub(crate) fn describe(&self, path: &Path) -> String {
        match self {
            Self::Files => path.display().to_string(),
            Self::Postgres(url) => redacted(url),
        }
    }

    /// The approval ledger (FORGE-89): the one every hold and decision goes through.
    pub(crate) async fn approvals(
        &self,
        path: &Path,
        clock: &Arc<dyn Clock>,
        parker: &str,
    ) -> anyhow::Result<Arc<dyn ApprovalLedger>> {
        match self {
            Self::Files => SqliteApprovalLedger::open(path, Arc::clone(clock))
                .await
                .map(|ledger| Arc::new(ledger.with_parker(parker)) as Arc<dyn ApprovalLedger>)
                .map_err(file_error("approval ledger", path)),
            Self::Postgres(url) => postgres::approvals(url, clock, parker).await,
        }
    }

    /// The flow-version store (frozen, hashed versions).
    pub(crate) async fn flow_versions(&self, path: &Path) -> anyhow::Result<Arc<dyn FlowVersionStore>> {
        match self {
            Self::Files => SqliteFlowVersionStore::open(path)
                .await
                .map(|store| Arc::new(store) as Arc<dyn FlowVersionStore>)
                .map_err(file_error("flow-version store", path)),
            Self::Postgres(url) => postgres::flow_versions(url).await,
        }
    }

    /// The run ledger (every run and its transitions), and the leases on its duties kept with
    /// it (which process drives its embedded runs).
    pub(crate) async fn runs(&self, path: &Path) -> anyhow::Result<RunLedgerPorts> {
        match self {
            Self::Files => SqliteRunLedger::open(path)
                .await
                .map(|ledger| {
                    let ledger = Arc::new(ledger);
                    RunLedgerPorts {
                        runs: Arc::clone(&ledger) as Arc<dyn RunLedger>,
                        leases: ledger as Arc<dyn LeaseStore>,
                    }
                })
                .map_err(file_error("run ledger", path)),
            Self::Postgres(url) => postgres::runs(url).await,
        }
    }

    /// The client-task store, which checks each task's run in `runs`.
    pub(crate) async fn client_tasks(
        &self,
        path: &Path,
        runs: &Arc<dyn RunLedger>,
    ) -> anyhow::Result<Arc<dyn ClientTaskStore>> {
        match self {
            Self::Files => SqliteClientTaskStore::open(path, Arc::clone(runs))
                .await
                .map(|store| Arc::new(store) as Arc<dyn ClientTaskStore>)
                .map_err(file_error("client tasks", path)),
            Self::Postgres(url) => postgres::client_tasks(url, runs).await,
        }
    }

    /// The usage ledger (every model call's tokens and cost).
    pub(crate) async fn usage(&self, path: &Path) -> anyhow::Result<Arc<dyn UsageStore>> {
        match self {
            Self::Files => SqliteUsageStore::open(path)
                .await
                .map(|store| Arc::new(store) as Arc<dyn UsageStore>)
                .map_err(file_error("usage ledger", path)),
            Self::Postgres(url) => postgres::usage(url).await,
        }
    }

    /// The session ledger (chat threads, messages, full-text search).
    pub(crate) async fn sessions(&self, path: &Path) -> anyhow::Result<Arc<dyn SessionStore>> {
        match self {
            Self::Files => SqliteSessionStore::open(path)
                .await
                .map(|store| Arc::new(store) as Arc<dyn SessionStore>)
                .map_err(file_error("session ledger", path)),
            Self::Postgres(url) => postgres::sessions(url).await,
        }
    }
}

/// Why a ledger file did not open, naming it.
fn file_error(what: &str, path: &Path) -> impl FnOnce(PortError) -> anyhow::Error {
    move |e| anyhow::anyhow!("{what} {}: {e}", path.display())
}

#[cfg(feature = "postgres")]
fn is_postgres_url(url: &str) -> bool {
    metaforge_adapters_store::postgres::is_postgres_url(url)
}

#[cfg(not(feature = "postgres"))]
fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

#[cfg(feature = "postgres")]
fn redacted(url: &str) -> String {
    metaforge_adapters_store::postgres::redacted(url)
}

#[cfg(not(feature = "postgres"))]
fn redacted(_url: &str) -> String {
    "a PostgreSQL server".to_owned()
}

/// The PostgreSQL ledgers (the binary's `postgres` feature, on by default).
#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::Arc;

    use metaforge_adapters_store::postgres::{
        PgApprovalLedger, PgClientTaskStore, PgFlowVersionStore, PgRunLedger, PgSessionStore, PgUsageStore,
        redacted,
    };
    use metaforge_ports::{
        ApprovalLedger, ClientTaskStore, Clock, FlowVersionStore, PortError, RunLedger, SessionStore,
        UsageStore,
    };

    /// Why a ledger did not open on the server, naming it (never its password).
    fn server_error(what: &str, url: &str) -> impl FnOnce(PortError) -> anyhow::Error {
        move |e| anyhow::anyhow!("{what} on {}: {e}", redacted(url))
    }

    pub(super) async fn approvals(
        url: &str,
        clock: &Arc<dyn Clock>,
        parker: &str,
    ) -> anyhow::Result<Arc<dyn ApprovalLedger>> {
        PgApprovalLedger::open(url, Arc::clone(clock))
            .await
            .map(|ledger| Arc::new(ledger.with_parker(parker)) as Arc<dyn ApprovalLedger>)
            .map_err(server_error("approval ledger", url))
    }

    pub(super) async fn flow_versions(url: &str) -> anyhow::Result<Arc<dyn FlowVersionStore>> {
        PgFlowVersionStore::open(url)
            .await
            .map(|store| Arc::new(store) as Arc<dyn FlowVersionStore>)
            .map_err(server_error("flow-version store", url))
    }

    pub(super) async fn runs(url: &str) -> anyhow::Result<super::RunLedgerPorts> {
        PgRunLedger::open(url)
            .await
            .map(|ledger| {
                let ledger = Arc::new(ledger);
                super::RunLedgerPorts {
                    runs: Arc::clone(&ledger) as Arc<dyn RunLedger>,
                    leases: ledger as Arc<dyn metaforge_ports::LeaseStore>,
                }
            })
            .map_err(server_error("run ledger", url))
    }

    pub(super) async fn client_tasks(
        url: &str,
        runs: &Arc<dyn RunLedger>,
    ) -> anyhow::Result<Arc<dyn ClientTaskStore>> {
        PgClientTaskStore::open(url, Arc::clone(runs))
            .await
            .map(|store| Arc::new(store) as Arc<dyn ClientTaskStore>)
            .map_err(server_error("client tasks", url))
    }

    pub(super) async fn usage(url: &str) -> anyhow::Result<Arc<dyn UsageStore>> {
        PgUsageStore::open(url)
            .await
            .map(|store| Arc::new(store) as Arc<dyn UsageStore>)
            .map_err(server_error("usage ledger", url))
    }

    pub(super) async fn sessions(url: &str) -> anyhow::Result<Arc<dyn SessionStore>> {
        PgSessionStore::open(url)
            .await
            .map(|store| Arc::new(store) as Arc<dyn SessionStore>)
            .map_err(server_error("session ledger", url))
    }
}

/// Without the `postgres` feature every PostgreSQL ledger is refused with how to get one.
#[cfg(not(feature = "postgres"))]
mod postgres {
    use std::sync::Arc;

    use metaforge_ports::{
        ApprovalLedger, ClientTaskStore, Clock, FlowVersionStore, RunLedger, SessionStore, UsageStore,
    };

    fn unsupported<T>() -> anyhow::Result<T> {
        Err(anyhow::anyhow!(
            "{}=postgres://…: this metaforge was built without PostgreSQL; build it with \
             `cargo build -p metaforge-bins --features postgres` (on by default)",
            super::DATABASE_URL_ENV
        ))
    }

    pub(super) async fn approvals(
        _: &str,
        _: &Arc<dyn Clock>,
        _: &str,
    ) -> anyhow::Result<Arc<dyn ApprovalLedger>> {
        unsupported()
    }

    pub(super) async fn flow_versions(_: &str) -> anyhow::Result<Arc<dyn FlowVersionStore>> {
        unsupported()
    }

    pub(super) async fn runs(_: &str) -> anyhow::Result<super::RunLedgerPorts> {
        unsupported()
    }

    pub(super) async fn client_tasks(
        _: &str,
        _: &Arc<dyn RunLedger>,
    ) -> anyhow::Result<Arc<dyn ClientTaskStore>> {
        unsupported()
    }

    pub(super) async fn usage(_: &str) -> anyhow::Result<Arc<dyn UsageStore>> {
        unsupported()
    }

    pub(super) async fn sessions(_: &str) -> anyhow::Result<Arc<dyn SessionStore>> {
        unsupported()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_keeps_the_sqlite_files() {
        assert_eq!(LedgerEngine::from_setting(None).ok(), Some(LedgerEngine::Files));
        assert_eq!(
            LedgerEngine::from_setting(Some("  ")).ok(),
            Some(LedgerEngine::Files)
        );
    }

    #[test]
    fn a_postgres_url_selects_the_server() {
        for url in ["postgres://mf@127.0.0.1:5432/mf", "postgresql://mf@db/mf"] {
            assert_eq!(
                LedgerEngine::from_setting(Some(url)).ok(),
                Some(LedgerEngine::Postgres(url.to_owned()))
            );
        }
    }

    #[test]
    fn another_scheme_is_an_error_naming_the_variable() {
        let Err(message) = LedgerEngine::from_setting(Some("mysql://db/mf")).map_err(|e| e.to_string())
        else {
            unreachable!("mysql is not a ledger engine")
        };
        assert!(
            message.contains(DATABASE_URL_ENV) && message.contains("mysql"),
            "{message}"
        );
    }
}
