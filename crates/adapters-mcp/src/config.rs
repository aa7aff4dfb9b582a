//! The MCP servers file: which tool servers MetaForge connects to, and how.
//!
//! One JSON document, `{"servers": [ … ]}`. Each entry names a server and either a `command`
//! (stdio child process) or a `url` (streamable HTTP), never both. A bad file is refused as a
//! whole with the path and the field (or `line:col` for a syntax error), so nothing connects to a
//! half-understood configuration.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// Which MCP protocol era to speak to a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ProtocolChoice {
    /// `initialize` handshake, protocol 2025-11-25.
    #[serde(rename = "2025-11-25")]
    Initialize,
    /// `server/discover`, protocol 2026-07-28 (stateless per-request metadata).
    #[serde(rename = "2026-07-28")]
    Discover,
    /// Probe with `server/discover`, fall back to `initialize` for a legacy server.
    #[default]
    #[serde(rename = "auto")]
    Auto,
}

/// How to reach one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerTransport {
    /// Spawn a child process and speak MCP over its stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment for the child (added to the inherited one).
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP at `url`, with `headers` on every request.
    Http {
        /// The MCP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Extra request headers (e.g. an API key).
        headers: BTreeMap<String, String>,
    },
}

/// One configured tool server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The server's name; registry ids are `<name>.<tool>`. `[A-Za-z0-9_-]`, at most 32 chars.
    pub name: String,
    /// How to reach it.
    pub transport: ServerTransport,
    /// Tool-name globs to keep; empty keeps all.
    pub include: Vec<String>,
    /// Tool-name globs to drop; wins over `include`.
    pub exclude: Vec<String>,
    /// How long connecting plus the handshake may take.
    pub connect_timeout: Duration,
    /// How long a call may go without a response or a progress notification.
    pub call_timeout: Duration,
    /// The protocol era.
    pub protocol: ProtocolChoice,
}

impl ServerConfig {
    /// A config with the default timeouts, filters and protocol, for code that builds one directly.
    pub fn new(name: impl Into<String>, transport: ServerTransport) -> Self {
        Self {
            name: name.into(),
            transport,
            include: Vec::new(),
            exclude: Vec::new(),
            connect_timeout: Duration::from_secs(DEFAULT_CONNECT_TIMEOUT_SECS),
            call_timeout: Duration::from_secs(DEFAULT_CALL_TIMEOUT_SECS),
            protocol: ProtocolChoice::Auto,
        }
    }
}

const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 30;
const DEFAULT_CALL_TIMEOUT_SECS: u64 = 120;
const MAX_SERVER_NAME_LEN: usize = 32;

/// Why a servers file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The JSON is malformed or has an unknown/mistyped field.
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde's account of the problem.
        message: String,
    },
    /// A field has a value the rules refuse.
    #[error("{path}: {field}: {message}")]
    Field {
        /// The file.
        path: String,
        /// The field, e.g. `servers[1].url`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    servers: Vec<ServerDoc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerDoc {
    name: String,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    connect_timeout_secs: Option<f64>,
    #[serde(default)]
    call_timeout_secs: Option<f64>,
    #[serde(default)]
    protocol: ProtocolChoice,
}

/// Reads and validates a servers file.
pub fn load_servers_file(path: &Path) -> Result<Vec<ServerConfig>, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    parse_servers(&shown, &text)
}

/// Parses and validates a servers document; `path` only labels errors.
pub fn parse_servers(path: &str, text: &str) -> Result<Vec<ServerConfig>, ConfigError> {
    let doc: FileDoc = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let field_error = |field: String, message: &str| ConfigError::Field {
        path: path.to_owned(),
        field,
        message: message.to_owned(),
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(doc.servers.len());
    for (i, s) in doc.servers.into_iter().enumerate() {
        let at = |f: &str| format!("servers[{i}].{f}");
        if s.name.is_empty()
            || s.name.len() > MAX_SERVER_NAME_LEN
            || !s
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(field_error(
                at("name"),
                "must be 1-32 characters of [A-Za-z0-9_-] (it becomes part of provider tool names)",
            ));
        }
        if !seen.insert(s.name.clone()) {
            return Err(field_error(at("name"), "duplicate server name"));
        }
        let transport = match (s.command, s.url) {
            (Some(_), Some(_)) => {
                return Err(field_error(
                    at("url"),
                    "give either command (stdio) or url (HTTP), not both",
                ));
            }
            (None, None) => {
                return Err(field_error(
                    at("command"),
                    "missing: give command (stdio) or url (HTTP)",
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(field_error(at("command"), "must not be empty"));
                }
                if !s.headers.is_empty() {
                    return Err(field_error(at("headers"), "only valid with url"));
                }
                ServerTransport::Stdio {
                    command,
                    args: s.args,
                    env: s.env,
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(field_error(at("url"), "must start with http:// or https://"));
                }
                if !s.args.is_empty() || !s.env.is_empty() {
                    return Err(field_error(at("args"), "args/env are only valid with command"));
                }
                for (name, value) in &s.headers {
                    if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                        || http::HeaderValue::from_str(value).is_err()
                    {
                        return Err(field_error(
                            format!("servers[{i}].headers.{name}"),
                            "not a valid HTTP header",
                        ));
                    }
                }
                ServerTransport::Http {
                    url,
                    headers: s.headers,
                }
            }
        };
        let connect_timeout = timeout_field(s.connect_timeout_secs, DEFAULT_CONNECT_TIMEOUT_SECS)
            .map_err(|m| field_error(at("connect_timeout_secs"), m))?;
        let call_timeout = timeout_field(s.call_timeout_secs, DEFAULT_CALL_TIMEOUT_SECS)
            .map_err(|m| field_error(at("call_timeout_secs"), m))?;
        for (field, globs) in [("include", &s.include), ("exclude", &s.exclude)] {
            if globs.iter().any(String::is_empty) {
                return Err(field_error(at(field), "empty glob"));
            }
        }
        out.push(ServerConfig {
            name: s.name,
            transport,
            include: s.include,
            exclude: s.exclude,
            connect_timeout,
            call_timeout,
            protocol: s.protocol,
        });
    }
    Ok(out)
}

fn timeout_field(value: Option<f64>, default_secs: u64) -> Result<Duration, &'static str> {
    match value {
        None => Ok(Duration::from_secs(default_secs)),
        Some(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(Duration::from_secs_f64(v)),
        Some(_) => Err("must be a number of seconds in (0, 86400]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses_into_stdio_and_http_servers() {
        let text = r#"{"servers": [
          {"name": "everything", "command": "node", "args": ["x.js", "stdio"], "env": {"A": "1"},
           "include": ["get-*", "echo"], "exclude": ["get-env"], "call_timeout_secs": 5,
           "protocol": "2025-11-25"},
          {"name": "remote", "url": "http://127.0.0.1:3001/mcp", "headers": {"X-Key": "k"},
           "connect_timeout_secs": 2.5, "protocol": "2026-07-28"},
          {"name": "plain", "url": "https://example.invalid/mcp"}
        ]}"#;
        let servers = parse_servers("mcp.json", text).unwrap();
        assert_eq!(servers.len(), 3);
        assert_eq!(servers[0].protocol, ProtocolChoice::Initialize);
        assert_eq!(servers[0].call_timeout, Duration::from_secs(5));
        assert!(matches!(&servers[0].transport, ServerTransport::Stdio { args, .. } if args.len() == 2));
        assert_eq!(servers[1].connect_timeout, Duration::from_millis(2500));
        assert_eq!(servers[1].protocol, ProtocolChoice::Discover);
        assert_eq!(servers[2].protocol, ProtocolChoice::Auto);
        assert_eq!(
            servers[2].call_timeout,
            Duration::from_secs(DEFAULT_CALL_TIMEOUT_SECS)
        );
    }

    #[test]
    fn each_bad_entry_is_refused_naming_its_field() {
        let table = [
            (r#"{"servers":[{"name":"a b","command":"x"}]}"#, "servers[0].name"),
            (
                r#"{"servers":[{"name":"a","command":"x"},{"name":"a","command":"y"}]}"#,
                "servers[1].name",
            ),
            (r#"{"servers":[{"name":"a"}]}"#, "servers[0].command"),
            (
                r#"{"servers":[{"name":"a","command":"x","url":"http://h/mcp"}]}"#,
                "servers[0].url",
            ),
            (r#"{"servers":[{"name":"a","url":"ftp://h"}]}"#, "servers[0].url"),
            (
                r#"{"servers":[{"name":"a","url":"http://h","args":["x"]}]}"#,
                "servers[0].args",
            ),
            (
                r#"{"servers":[{"name":"a","command":"x","headers":{"k":"v"}}]}"#,
                "servers[0].headers",
            ),
            (
                r#"{"servers":[{"name":"a","url":"http://h","headers":{"bad header":"v"}}]}"#,
                "servers[0].headers.bad header",
            ),
            (
                r#"{"servers":[{"name":"a","command":"x","call_timeout_secs":0}]}"#,
                "servers[0].call_timeout_secs",
            ),
            (
                r#"{"servers":[{"name":"a","command":"x","connect_timeout_secs":-1}]}"#,
                "servers[0].connect_timeout_secs",
            ),
            (
                r#"{"servers":[{"name":"a","command":"x","include":[""]}]}"#,
                "servers[0].include",
            ),
            (
                r#"{"servers":[{"name":"a","command":" "}]}"#,
                "servers[0].command",
            ),
        ];
        for (text, field) in table {
            match parse_servers("f.json", text) {
                Err(ConfigError::Field { field: got, .. }) => assert_eq!(got, field, "{text}"),
                other => panic!("{text}: expected field error on {field}, got {other:?}"),
            }
        }
    }

    #[test]
    fn syntax_errors_and_unknown_fields_carry_line_and_column() {
        let table = [
            ("{\"servers\": [\n  {\"name\": \"a\", \"comand\": \"x\"}\n]}", 2),
            ("{\"servers\": [\n\n  {\"name\": }]}", 3),
            (
                "{\"servers\":[{\"name\":\"a\",\"command\":\"x\",\"protocol\":\"2024\"}]}",
                1,
            ),
        ];
        for (text, line) in table {
            match parse_servers("f.json", text) {
                Err(e @ ConfigError::Syntax { .. }) => {
                    let ConfigError::Syntax { line: got, .. } = &e else {
                        unreachable!()
                    };
                    assert_eq!(*got, line, "{e}");
                    assert!(e.to_string().starts_with(&format!("f.json:{line}:")), "{e}");
                }
                other => panic!("expected syntax error, got {other:?}"),
            }
        }
    }
}
