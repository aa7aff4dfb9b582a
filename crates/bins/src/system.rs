//! The real clock and id generator, and process-level set-up (logging, metrics recorder).
//! Only the binary reads the system clock and the environment.

use metaforge_ports::{Clock, IdGen, Timestamp};

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    #[expect(clippy::disallowed_methods, reason = "the one system clock every port reads")]
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

/// The filter used when neither `METAFORGE_LOG` nor `RUST_LOG` is set: our own events at info,
/// library internals (MCP sessions, SQL statements, HTTP connections) only when they warn.
pub(crate) const DEFAULT_LOG_FILTER: &str =
    "info,rmcp=warn,sqlx=warn,hyper=warn,hyper_util=warn,h2=warn,reqwest=warn,tower=warn,tower_http=warn";

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// One short line per event for people; coloured only when stderr is a terminal.
    Text,
    /// One JSON object per event for collectors (`METAFORGE_LOG_FORMAT=json`).
    Json,
}

impl LogFormat {
    /// Parses `METAFORGE_LOG_FORMAT` (`text` or `json`; unset means text).
    pub(crate) fn parse(value: Option<&str>) -> anyhow::Result<Self> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("text") => Ok(Self::Text),
            Some("json") => Ok(Self::Json),
            Some(other) => Err(anyhow::anyhow!(
                "METAFORGE_LOG_FORMAT: '{other}' is not a log format; use 'text' (the default) or 'json'"
            )),
        }
    }
}

/// Logs on stderr for every command: filtered by `METAFORGE_LOG` (or `RUST_LOG`; default
/// [`DEFAULT_LOG_FILTER`]), human lines by default, JSON with `METAFORGE_LOG_FORMAT=json`; and,
/// with `OTEL_EXPORTER_OTLP_ENDPOINT`, the spans exported over OTLP as `metaforge-<role>` at
/// [`DEFAULT_LOG_FILTER`]'s levels whatever the log filter
/// (keep the returned [`Traces`](crate::telemetry::Traces) until the process ends: dropping it
/// sends the last spans). A bad filter or endpoint is reported on stderr and the defaults are
/// used (a bad format never gets here: `Settings` refuses it).
pub(crate) fn init_logging(log: &crate::settings::LogSettings, role: &str) -> crate::telemetry::Traces {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _};
    let filter = log.filter.as_deref().map_or_else(
            || EnvFilter::new(DEFAULT_LOG_FILTER),
            |directives| {
                EnvFilter::try_new(directives).unwrap_or_else(|err| {
                    eprintln!("metaforge: METAFORGE_LOG: '{directives}' is not a log filter ({err}); using '{DEFAULT_LOG_FILTER}'");
                    EnvFilter::new(DEFAULT_LOG_FILTER)
                })
            },
        );
    let format = log.format;
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Json => lines
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => lines
            .compact()
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
    };
    let (traces, spans) = match log.otlp_endpoint.as_deref() {
        None => (crate::telemetry::Traces::default(), None),
        Some(endpoint) => match crate::telemetry::exporter(endpoint, role) {
            // Spans keep their own level, whatever stderr shows: our own at info, library
            // internals only when they warn.
            Ok((traces, tracer)) => (
                traces,
                Some(
                    tracing_opentelemetry::layer()
                        .with_tracer(tracer)
                        .with_filter(EnvFilter::new(DEFAULT_LOG_FILTER)),
                ),
            ),
            Err(err) => {
                eprintln!("metaforge: {err}; no traces are exported");
                (crate::telemetry::Traces::default(), None)
            }
        },
    };
    // A second initialisation (tests running commands in-process) is harmless; ignore it.
    let _ = tracing_subscriber::registry().with(lines).with(spans).try_init();
    traces
}

/// The process environment, read once: the binary's one door to it (clippy refuses
/// `std::env::var` everywhere else, `clippy.toml`). A variable whose name or value is not UTF-8 is
/// left out, as if unset.
#[expect(
    clippy::disallowed_methods,
    reason = "the binary's one reader of the environment"
)]
pub(crate) fn environment() -> crate::settings::Environment {
    crate::settings::Environment::from_pairs(
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    )
}

/// A bind failure in words a person can act on: an address already in use names the flag and
/// the variable that choose another one.
pub(crate) fn bind_failure(
    addr: impl std::fmt::Display,
    flag: &str,
    variable: Option<&str>,
    err: &dyn std::fmt::Display,
) -> String {
    let text = err.to_string();
    if text.contains("Address already in use") || text.contains("address in use") {
        let choose = variable.map_or_else(
            || format!("pass {flag} 127.0.0.1:PORT"),
            |var| format!("pass {flag} 127.0.0.1:PORT (or set {var})"),
        );
        return format!(
            "cannot listen on {addr}: the address is already in use (is another metaforge running?); {choose}"
        );
    }
    format!("cannot listen on {addr}: {text}")
}
