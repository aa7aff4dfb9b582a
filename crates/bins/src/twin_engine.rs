//! Where the digital twin lives, chosen once from `METAFORGE_TWIN_URL`: the embedded SQLite twin
//! at `$METAFORGE_HOME/twin.db` (the default: one person, one machine) or one FalkorDB graph,
//! [`TWIN_GRAPH`], shared by every gateway, sidecar and worker started with the same URL. Both
//! processes that compose a twin (`metaforge gateway`/`up`/`worker` and the standalone
//! `metaforge mcp serve`) open it here, so they can never disagree on where it is, and an
//! unreachable server fails start-up instead of falling back to a file no other process reads.

use std::path::Path;
use std::sync::Arc;

use metaforge_ports::TwinStore;

/// The variable that moves the twin onto a FalkorDB server.
pub(crate) const TWIN_URL_ENV: &str = "METAFORGE_TWIN_URL";

/// The FalkorDB graph the product's twin lives in. Fixed, not configurable: every process on one
/// URL must read and write the same graph, and a second name would be a second, silent twin.
pub(crate) const TWIN_GRAPH: &str = "metaforge_twin";

/// The schemes `METAFORGE_TWIN_URL` accepts, all read as a plain (non-TLS) RESP connection:
/// `falkordb://` (the documented one), and `falkor://` / `redis://`, which the FalkorDB client
/// itself takes.
const SCHEMES: &[&str] = &["falkordb", "falkor", "redis"];

/// The engine the twin of this process is opened on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TwinEngine {
    /// The embedded SQLite twin, at the path `StorePaths` resolves (`twin.db` under the home).
    Embedded,
    /// The [`TWIN_GRAPH`] graph on the FalkorDB server at this URL (as set).
    Falkor(String),
}

impl TwinEngine {
    /// Reads `METAFORGE_TWIN_URL`: unset or empty is [`TwinEngine::Embedded`]; a
    /// `falkordb://host:port` URL (or `falkor://`, `redis://`) is [`TwinEngine::Falkor`]; anything
    /// else, and a FalkorDB URL in a binary built without the `falkordb` feature, is an error
    /// naming the variable (the URL itself is never repeated: it may carry a password).
    pub(crate) fn from_setting(value: Option<&str>) -> anyhow::Result<Self> {
        let url = match value.map(str::trim) {
            None | Some("") => return Ok(Self::Embedded),
            Some(url) => url,
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(expected(&"a value that is not a URL"));
        };
        if !SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
            return Err(expected(&format!("scheme {scheme:?}")));
        }
        check_authority(rest).map_err(|what| expected(&what))?;
        let engine = Self::Falkor(url.to_owned());
        falkor::check_built()?;
        Ok(engine)
    }

    /// Where the twin is, for logs: the SQLite file, or the server's URL with any password
    /// hidden and the graph's name.
    pub(crate) fn describe(&self, path: &Path) -> String {
        match self {
            Self::Embedded => path.display().to_string(),
            Self::Falkor(url) => format!("{} graph {TWIN_GRAPH}", redacted(url)),
        }
    }

    /// Opens the twin (`path` is the embedded twin's file, unused for FalkorDB) and logs which
    /// one this process uses (`twin_engine`). FalkorDB is connected to once here: an unreachable
    /// or refusing server is an error naming the variable, never a fallback to the file.
    pub(crate) async fn open(&self, path: &Path) -> anyhow::Result<Arc<dyn TwinStore>> {
        let (engine, store) = match self {
            Self::Embedded => (
                "sqlite",
                metaforge_adapters_store::SqliteTwinStore::open(path)
                    .await
                    .map(|store| Arc::new(store) as Arc<dyn TwinStore>)
                    .map_err(|e| anyhow::anyhow!("twin {}: {e}", path.display()))?,
            ),
            Self::Falkor(url) => ("falkordb", falkor::open(url).await?),
        };
        tracing::info!(
            event = "twin_engine",
            engine,
            twin = %self.describe(path),
            "twin open"
        );
        Ok(store)
    }
}

/// The refusal of a `METAFORGE_TWIN_URL` that is not one, saying what was `got`.
fn expected(got: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "{TWIN_URL_ENV}: expected a falkordb://host:port URL (falkor:// and redis:// are read the \
         same; unset for the embedded SQLite twin under METAFORGE_HOME), got {got}"
    )
}

/// The part after `scheme://` names a host, and a port only as a number.
fn check_authority(rest: &str) -> anyhow::Result<()> {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    // `[::1]:6379`: the port is after the bracket; `host:6379` after the last colon.
    let (host, port) = match host_port.rsplit_once(']') {
        Some((v6, tail)) => (v6.trim_start_matches('['), tail.strip_prefix(':')),
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        anyhow::bail!("a URL with no host");
    }
    match port {
        Some(port) if port.parse::<u16>().is_err() => Err(anyhow::anyhow!("port {port:?}")),
        _ => Ok(()),
    }
}

/// `url` with the password of its user part, if any, replaced by `***` (logs and errors name
/// the server, never its secret).
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split_once(':').map_or(user_info, |(user, _)| user);
            let hidden = if user_info.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// The FalkorDB twin (the binary's `falkordb` feature, on by default).
#[cfg(feature = "falkordb")]
mod falkor {
    use std::sync::Arc;
    use std::time::Duration;

    use metaforge_adapters_store::FalkorTwinStore;
    use metaforge_ports::TwinStore;

    use super::{TWIN_GRAPH, TWIN_URL_ENV, redacted};

    /// How long a FalkorDB server may take to accept the connection and create the graph's
    /// indexes at start; a server that does not answer (a dropped packet, not a refusal) fails
    /// start-up after this instead of hanging it.
    const CONNECT_WITHIN: Duration = Duration::from_secs(30);

    /// This build has FalkorDB (a build without the feature refuses here).
    pub(super) fn check_built() -> anyhow::Result<()> {
        Ok(())
    }

    /// Connects to the server at `url` and opens [`TWIN_GRAPH`] (its indexes and `main` created
    /// when missing).
    pub(super) async fn open(url: &str) -> anyhow::Result<Arc<dyn TwinStore>> {
        let shown = redacted(url);
        // The client reads `falkor://` and `redis://` (lower case); `falkordb://` is the same
        // connection as `falkor://`.
        let client_url = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("redis") => format!("redis://{rest}"),
            Some((_, rest)) => format!("falkor://{rest}"),
            None => url.to_owned(),
        };
        let connected =
            tokio::time::timeout(CONNECT_WITHIN, FalkorTwinStore::connect(&client_url, TWIN_GRAPH))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "{TWIN_URL_ENV}: FalkorDB at {shown} did not answer within {}s (no fallback to \
                     the embedded twin)",
                        CONNECT_WITHIN.as_secs()
                    )
                })?;
        let store = connected.map_err(|e| {
            let cause = e.source.as_ref().map(|s| format!(": {s}")).unwrap_or_default();
            // The adapter's message names the URL it was given, password included: never shown.
            let said = format!("{}{cause}", e.message)
                .replace(&client_url, &shown)
                .replace(url, &shown);
            anyhow::anyhow!(
                "{TWIN_URL_ENV}: the twin on FalkorDB at {shown} (graph {TWIN_GRAPH}) did not open \
                 ({:?}): {said} (no fallback to the embedded twin)",
                e.kind
            )
        })?;
        Ok(Arc::new(store))
    }
}

/// Without the `falkordb` feature a FalkorDB twin is refused with how to get one.
#[cfg(not(feature = "falkordb"))]
mod falkor {
    use std::sync::Arc;

    use metaforge_ports::TwinStore;

    /// This build has no FalkorDB: the refusal, saying how to build one that has it.
    pub(super) fn check_built() -> anyhow::Result<()> {
        Err(refusal())
    }

    /// Never reached ([`check_built`] refuses the URL when it is read); refuses the same way.
    pub(super) async fn open(_: &str) -> anyhow::Result<Arc<dyn TwinStore>> {
        Err(refusal())
    }

    fn refusal() -> anyhow::Error {
        anyhow::anyhow!(
            "{}=falkordb://…: this metaforge was built without FalkorDB; build it with \
             `cargo build -p metaforge-bins --features falkordb` (on by default)",
            super::TWIN_URL_ENV
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_keeps_the_embedded_twin() {
        assert_eq!(TwinEngine::from_setting(None).ok(), Some(TwinEngine::Embedded));
        assert_eq!(
            TwinEngine::from_setting(Some("  ")).ok(),
            Some(TwinEngine::Embedded)
        );
    }

    #[cfg(feature = "falkordb")]
    #[test]
    fn a_falkordb_url_selects_the_server() {
        for url in [
            "falkordb://127.0.0.1:6379",
            "falkor://twin.internal:6379",
            "redis://:secret@10.0.0.5:6379/0",
            "FalkorDB://[::1]:6379",
            "falkordb://twin",
        ] {
            assert_eq!(
                TwinEngine::from_setting(Some(url)).ok(),
                Some(TwinEngine::Falkor(url.to_owned())),
                "{url}"
            );
        }
    }

    #[cfg(not(feature = "falkordb"))]
    #[test]
    fn a_build_without_falkordb_refuses_the_url_saying_how_to_get_it() {
        let Err(message) = TwinEngine::from_setting(Some("falkordb://127.0.0.1:6379")) else {
            unreachable!("this build has no FalkorDB")
        };
        assert!(message.contains("--features falkordb"), "{message}");
    }

    #[test]
    fn another_scheme_or_no_host_is_an_error_naming_the_variable_not_the_secret() {
        for (value, named) in [
            ("neo4j://user:hunter2@db:7687", "neo4j"),
            ("rediss://:hunter2@db:6380", "rediss"),
            ("db:6379", "not a URL"),
            ("falkordb://:6379", "no host"),
            ("falkordb://:hunter2@:6379", "no host"),
            ("falkordb://db:port", "port"),
        ] {
            let Err(message) = TwinEngine::from_setting(Some(value)).map_err(|e| e.to_string()) else {
                unreachable!("{value} is not a twin URL")
            };
            assert!(
                message.starts_with(TWIN_URL_ENV) && message.contains(named),
                "{value}: {message}"
            );
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    #[test]
    fn a_password_is_hidden_wherever_the_url_is_shown() {
        assert_eq!(
            redacted("falkordb://:hunter2@127.0.0.1:6379"),
            "falkordb://:***@127.0.0.1:6379"
        );
        assert_eq!(
            redacted("redis://twin:hunter2@db:6379/0"),
            "redis://twin:***@db:6379/0"
        );
        assert_eq!(redacted("falkordb://db:6379"), "falkordb://db:6379");
        assert_eq!(redacted("falkordb://twin@db:6379"), "falkordb://twin@db:6379");
        let engine = TwinEngine::Falkor("falkordb://:hunter2@db:6379".to_owned());
        assert_eq!(
            engine.describe(Path::new("/h/twin.db")),
            "falkordb://:***@db:6379 graph metaforge_twin"
        );
        assert_eq!(
            TwinEngine::Embedded.describe(Path::new("/h/twin.db")),
            "/h/twin.db"
        );
    }
}
