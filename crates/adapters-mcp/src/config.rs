//! The MCP servers file: which tool servers MetaForge connects to, and how.
//!
//! The shape Claude Desktop and Claude Code use, so one file serves all three:
//!
//! ```json
//! {"mcpServers": {
//!   "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"],
//!                  "env": {"DEBUG": "1"}},
//!   "remote":     {"type": "http", "url": "http://127.0.0.1:3001/mcp",
//!                  "headers": {"Authorization": "Bearer …"}}
//! }}
//! ```
//!
//! An entry is a stdio child (`command`, `args`, `env`) or streamable HTTP (`url`, `headers`);
//! `type` (`stdio` | `http` | `streamable-http`) is optional and must agree with the fields.
//! MetaForge's own optional extras per server: `include`/`exclude` (tool-name globs),
//! `requires_approval` (tool-name globs held for a person on every call),
//! `connect_timeout_secs`, `call_timeout_secs`, `protocol` (`2025-11-25` | `2026-07-28` | `auto`),
//! `disabled`, and for domain scoping `domains` (the disciplines the server serves) and `core`
//! (always visible, whatever the turn's disciplines). A stdio server runs in a sandbox
//! ([`crate::sandbox`]): `sandbox` is `"off"` or `{env, hide, cpu_seconds, memory_mb,
//! file_size_mb, open_files, processes}`, `workspace` the directory it works on and
//! `workspace_access` `ro` (default) or `rw`. The older MetaForge shape
//! `{"servers": [{"name": …, …}]}` is still read.
//!
//! A bad file is refused as a whole — nothing connects to a half-understood configuration. Every
//! error names the file and the field (`mcpServers.<name>.<field>`, `servers[i].<field>` in the
//! older shape) or, for JSON syntax and a name defined twice, `file:line:col`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_json::Value;

use metaforge_sandbox::{ResourceLimits, Sandbox, SandboxOptions, Workspace};

/// Which MCP protocol era to speak to a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProtocolChoice {
    /// `initialize` handshake, protocol 2025-11-25.
    Initialize,
    /// `server/discover`, protocol 2026-07-28 (stateless per-request metadata).
    Discover,
    /// Probe with `server/discover`, fall back to `initialize` for a legacy server.
    #[default]
    Auto,
}

impl ProtocolChoice {
    /// The spelling in the servers file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initialize => "2025-11-25",
            Self::Discover => "2026-07-28",
            Self::Auto => "auto",
        }
    }
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
        /// The child's own environment, on top of the few variables every server gets
        /// ([`crate::StdioLaunch`]): a secret the server needs is named here.
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
    /// Configured but switched off: validated, never started.
    pub disabled: bool,
    /// The disciplines (phase `disciplines`, e.g. `mechanical`) whose turns see this server when
    /// a turn is scoped; empty = reachable in a scoped turn only through `search_tools`.
    pub domains: Vec<String>,
    /// `Some(true)`: always visible, like the seed's core servers; `Some(false)`: never core even
    /// when its name is a core name; `None`: core exactly when its name is a core name.
    pub core: Option<bool>,
    /// Tool-name globs of this server whose every call is held for a person (the "ask" tier:
    /// a server cannot declare it itself).
    pub requires_approval: Vec<String>,
    /// How a stdio server is isolated (`sandbox`, `workspace`, `workspace_access`; on by
    /// default, [`crate::sandbox`]).
    pub sandbox: Sandbox,
    /// Tool-name globs of this server with the class the operator gives them (`classify`), the
    /// strictest class first so a tool two classes name takes the stricter; the gate never takes
    /// a class laxer than the server's own hints.
    pub classify: Vec<(DeclaredToolClass, String)>,
}

/// A class the servers file may give a server's tools (`classify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredToolClass {
    /// `read_only`: reads only.
    ReadOnly,
    /// `producing`: writes only the server's own scratch workspace (CAD authoring).
    Producing,
    /// `destructive`: changes or deletes what exists.
    Destructive,
}

impl DeclaredToolClass {
    /// Every class with its key in `classify`, the strictest first.
    pub const KEYS: [(&'static str, Self); 3] = [
        ("destructive", Self::Destructive),
        ("producing", Self::Producing),
        ("read_only", Self::ReadOnly),
    ];
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
            disabled: false,
            domains: Vec::new(),
            core: None,
            requires_approval: Vec::new(),
            sandbox: Sandbox::default(),
            classify: Vec::new(),
        }
    }
}

/// Default of `connect_timeout_secs`.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 30;
/// Default of `call_timeout_secs`.
pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 120;
const MAX_SERVER_NAME_LEN: usize = 32;
const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// The fields an entry may carry, listed in the error for an unknown one.
const ENTRY_FIELDS: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "include",
    "exclude",
    "connect_timeout_secs",
    "call_timeout_secs",
    "protocol",
    "disabled",
    "domains",
    "core",
    "requires_approval",
    "classify",
    "sandbox",
    "workspace",
    "workspace_access",
];

/// Why a servers file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (`source.kind()` is `NotFound` for a missing file).
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The JSON is malformed, or a server (or top-level key) is defined twice.
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
    /// A field is missing, unknown, mistyped or has a value the rules refuse.
    #[error("{path}: {field}: {message}")]
    Field {
        /// The file.
        path: String,
        /// The field, e.g. `mcpServers.everything.url` or `servers[1].url`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ConfigError {
    /// True when the file itself does not exist (so a default location can mean "no servers").
    pub fn is_missing_file(&self) -> bool {
        matches!(self, Self::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
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

/// What a JSON object in the file is, as a refusal of something else names it.
trait Expecting {
    const WHAT: &'static str;
}

/// `mcpServers`: servers by name.
struct ServersByName;
impl Expecting for ServersByName {
    const WHAT: &'static str =
        r#"mcpServers as an object of servers by name, e.g. {"everything": {"command": "npx"}}"#;
}

/// One server entry.
struct Entry;
impl Expecting for Entry {
    const WHAT: &'static str = "a server entry as an object with command (stdio) or url (HTTP)";
}

/// A JSON object read in document order, refusing a key given twice (serde_json's `Value` would
/// keep the last one silently, dropping a server the operator configured).
struct Pairs<V, E>(Vec<(String, V)>, std::marker::PhantomData<E>);

impl<'de, V: Deserialize<'de>, E: Expecting> Deserialize<'de> for Pairs<V, E> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor<V, E>(std::marker::PhantomData<(V, E)>);
        impl<'de, V: Deserialize<'de>, E: Expecting> Visitor<'de> for PairsVisitor<V, E> {
            type Value = Pairs<V, E>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(E::WHAT)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = BTreeSet::new();
                let mut pairs = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format!("{key:?} is defined twice")));
                    }
                    pairs.push((key, map.next_value::<V>()?));
                }
                Ok(Pairs(pairs, std::marker::PhantomData))
            }
        }
        deserializer.deserialize_map(PairsVisitor(std::marker::PhantomData))
    }
}

type EntryFields = Pairs<Value, Entry>;

/// The top level: `mcpServers` (entries by name) or the older `servers` (a list).
enum TopValue {
    McpServers(Pairs<EntryFields, ServersByName>),
    Legacy(Vec<EntryFields>),
    Other,
}

struct Doc(Vec<(String, TopValue)>);

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DocVisitor;
        impl<'de> Visitor<'de> for DocVisitor {
            type Value = Doc;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a JSON object like {"mcpServers": {"<name>": {"command": "…"}}}"#)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = BTreeSet::new();
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format!("{key:?} is defined twice")));
                    }
                    let value = match key.as_str() {
                        "mcpServers" => TopValue::McpServers(map.next_value()?),
                        "servers" => TopValue::Legacy(map.next_value()?),
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                            TopValue::Other
                        }
                    };
                    out.push((key, value));
                }
                Ok(Doc(out))
            }
        }
        deserializer.deserialize_map(DocVisitor)
    }
}

/// Parses and validates a servers document; `path` only labels errors.
pub fn parse_servers(path: &str, text: &str) -> Result<Vec<ServerConfig>, ConfigError> {
    let doc: Doc = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let field_error = |field: String, message: String| ConfigError::Field {
        path: path.to_owned(),
        field,
        message,
    };
    let mut entries: Option<Vec<(String, String, EntryFields)>> = None;
    for (key, value) in doc.0 {
        let listed = match value {
            TopValue::McpServers(servers) => servers
                .0
                .into_iter()
                .map(|(name, entry)| (format!("mcpServers.{name}"), name, entry))
                .collect(),
            TopValue::Legacy(servers) => legacy_entries(servers).map_err(|(f, m)| field_error(f, m))?,
            TopValue::Other => {
                return Err(field_error(
                    key,
                    "unknown field; a servers file holds \"mcpServers\" (or the older \"servers\" list)"
                        .to_owned(),
                ));
            }
        };
        if entries.is_some() {
            return Err(field_error(
                key,
                "give \"mcpServers\" or the older \"servers\" list, not both".to_owned(),
            ));
        }
        entries = Some(listed);
    }
    let Some(entries) = entries else {
        return Err(field_error(
            "mcpServers".to_owned(),
            r#"missing: the file must hold {"mcpServers": {"<name>": {…}}}"#.to_owned(),
        ));
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for (at, name, entry) in entries {
        if !seen.insert(name.clone()) {
            return Err(field_error(
                format!("{at}.name"),
                "duplicate server name".to_owned(),
            ));
        }
        out.push(server(&at, name, entry).map_err(|(f, m)| field_error(f, m))?);
    }
    Ok(out)
}

type FieldProblem = (String, String);

/// `servers[i]` entries of the older shape: each names itself with `name`.
fn legacy_entries(servers: Vec<EntryFields>) -> Result<Vec<(String, String, EntryFields)>, FieldProblem> {
    servers
        .into_iter()
        .enumerate()
        .map(|(i, mut entry)| {
            let at = format!("servers[{i}]");
            let position = entry.0.iter().position(|(k, _)| k == "name");
            let Some(position) = position else {
                return Err((
                    format!("{at}.name"),
                    "missing: every server needs a name".to_owned(),
                ));
            };
            let (_, name) = entry.0.remove(position);
            let Value::String(name) = name else {
                return Err((format!("{at}.name"), "must be a string".to_owned()));
            };
            Ok((at, name, entry))
        })
        .collect()
}

/// The fields of one entry, taken one by one so a leftover is an unknown field.
struct Fields {
    at: String,
    fields: BTreeMap<String, Value>,
}

impl Fields {
    fn field(&self, name: &str) -> String {
        format!("{}.{name}", self.at)
    }

    fn problem(&self, name: &str, message: impl Into<String>) -> FieldProblem {
        (self.field(name), message.into())
    }

    fn string(&mut self, name: &str) -> Result<Option<String>, FieldProblem> {
        match self.fields.remove(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.problem(name, "must be a string")),
        }
    }

    fn strings(&mut self, name: &str) -> Result<Option<Vec<String>>, FieldProblem> {
        match self.fields.remove(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    as_string(item).ok_or_else(|| {
                        (
                            format!("{}[{i}]", self.field(name)),
                            "must be a string".to_owned(),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.problem(name, "must be a list of strings")),
        }
    }

    fn string_map(&mut self, name: &str) -> Result<Option<BTreeMap<String, String>>, FieldProblem> {
        match self.fields.remove(name) {
            None => Ok(None),
            Some(Value::Object(map)) => map
                .into_iter()
                .map(|(k, v)| match as_string(v) {
                    Some(s) => Ok((k, s)),
                    None => Err((format!("{}.{k}", self.field(name)), "must be a string".to_owned())),
                })
                .collect::<Result<BTreeMap<_, _>, _>>()
                .map(Some),
            Some(_) => Err(self.problem(name, "must be an object of strings")),
        }
    }

    fn bool(&mut self, name: &str) -> Result<Option<bool>, FieldProblem> {
        match self.fields.remove(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(self.problem(name, "must be true or false")),
        }
    }

    fn timeout(&mut self, name: &str, default_secs: u64) -> Result<Duration, FieldProblem> {
        match self.fields.remove(name) {
            None => Ok(Duration::from_secs(default_secs)),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(v) if v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_SECS => {
                    Ok(Duration::from_secs_f64(v))
                }
                _ => Err(self.problem(name, "must be a number of seconds in (0, 86400]")),
            },
            Some(_) => Err(self.problem(name, "must be a number of seconds in (0, 86400]")),
        }
    }

    /// `sandbox` (`"off"`, or `{env, hide, cpu_seconds, memory_mb, file_size_mb, open_files,
    /// processes}`), `workspace` (an absolute directory) and `workspace_access` (`ro` | `rw`);
    /// only a stdio server has a sandbox.
    fn sandbox(&mut self, stdio: bool) -> Result<Sandbox, FieldProblem> {
        let setting = self.fields.remove("sandbox");
        let workspace = self.string("workspace")?;
        let access = self.string("workspace_access")?;
        if !stdio {
            for (name, given) in [
                ("sandbox", setting.is_some()),
                ("workspace", workspace.is_some()),
                ("workspace_access", access.is_some()),
            ] {
                if given {
                    return Err(self.problem(
                        name,
                        "only valid with command (a stdio server runs in the sandbox)",
                    ));
                }
            }
            return Ok(Sandbox::default());
        }
        let mut options = match setting {
            None => SandboxOptions::default(),
            Some(Value::String(off)) if off == "off" => {
                if workspace.is_some() || access.is_some() {
                    return Err(self.problem(
                        "workspace",
                        "a workspace is bound into the sandbox; with \"sandbox\": \"off\" the server sees the whole filesystem",
                    ));
                }
                return Ok(Sandbox::Off);
            }
            Some(Value::Object(map)) => self.sandbox_options(map)?,
            Some(_) => {
                return Err(self.problem(
                    "sandbox",
                    "must be \"off\" or an object {env, hide, cpu_seconds, memory_mb, file_size_mb, open_files, processes}",
                ));
            }
        };
        let writable = match access.as_deref() {
            None | Some("ro") => false,
            Some("rw") => true,
            Some(other) => {
                return Err(self.problem(
                    "workspace_access",
                    format!("{other:?} is not an access; use \"ro\" (the default) or \"rw\""),
                ));
            }
        };
        match workspace {
            Some(path) => {
                let path = std::path::PathBuf::from(path);
                if !path.is_absolute() {
                    return Err(self.problem("workspace", "must be an absolute path"));
                }
                options.workspace = Some(Workspace { path, writable });
            }
            None if access.is_some() => {
                return Err(self.problem("workspace_access", "only valid with workspace"));
            }
            None => {}
        }
        Ok(Sandbox::On(options))
    }

    fn sandbox_options(&self, map: serde_json::Map<String, Value>) -> Result<SandboxOptions, FieldProblem> {
        let mut inner = Fields {
            at: self.field("sandbox"),
            fields: map.into_iter().collect(),
        };
        let env = inner.strings("env")?.unwrap_or_default();
        if let Some(i) = env
            .iter()
            .position(|n| n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            return Err((
                format!("{}[{i}]", inner.field("env")),
                "not a variable name".to_owned(),
            ));
        }
        let hide = inner.strings("hide")?.unwrap_or_default();
        if let Some(i) = hide.iter().position(|p| !Path::new(p).is_absolute()) {
            return Err((
                format!("{}[{i}]", inner.field("hide")),
                "must be an absolute path".to_owned(),
            ));
        }
        let defaults = ResourceLimits::default();
        let limits = ResourceLimits {
            cpu_seconds: inner.limit("cpu_seconds", defaults.cpu_seconds, 7 * 86_400)?,
            memory_mb: inner.limit("memory_mb", defaults.memory_mb, 1 << 20)?,
            file_size_mb: inner.limit("file_size_mb", defaults.file_size_mb, 1 << 20)?,
            open_files: inner.limit("open_files", defaults.open_files, 1 << 20)?,
            processes: inner.limit("processes", defaults.processes, 1 << 16)?,
        };
        if let Some(unknown) = inner.fields.keys().next() {
            return Err(inner.problem(
                unknown,
                "unknown field; expected one of env, hide, cpu_seconds, memory_mb, file_size_mb, open_files, processes",
            ));
        }
        Ok(SandboxOptions {
            env,
            hide: hide.into_iter().map(std::path::PathBuf::from).collect(),
            workspace: None,
            limits,
        })
    }

    fn limit(&mut self, name: &str, default: u64, max: u64) -> Result<u64, FieldProblem> {
        match self.fields.remove(name) {
            None => Ok(default),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if (1..=max).contains(&v) => Ok(v),
                _ => Err(self.problem(name, format!("must be a whole number from 1 to {max}"))),
            },
            Some(_) => Err(self.problem(name, format!("must be a whole number from 1 to {max}"))),
        }
    }

    /// `classify`: `{"read_only": [globs], "producing": [globs], "destructive": [globs]}`.
    fn classify(&mut self) -> Result<Vec<(DeclaredToolClass, String)>, FieldProblem> {
        let name = "classify";
        let Some(value) = self.fields.remove(name) else {
            return Ok(Vec::new());
        };
        let Value::Object(map) = value else {
            return Err(self.problem(
                name,
                "must be an object: {\"read_only\": [globs], \"producing\": [globs], \"destructive\": [globs]}",
            ));
        };
        let mut classes = Fields {
            at: self.field(name),
            fields: map.into_iter().collect(),
        };
        let mut classified = Vec::new();
        for (key, class) in DeclaredToolClass::KEYS {
            classified.extend(classes.globs(key)?.into_iter().map(|glob| (class, glob)));
        }
        if let Some(unknown) = classes.fields.keys().next() {
            return Err(classes.problem(
                unknown,
                "unknown class; expected read_only, producing or destructive",
            ));
        }
        Ok(classified)
    }

    fn globs(&mut self, name: &str) -> Result<Vec<String>, FieldProblem> {
        let globs = self.strings(name)?.unwrap_or_default();
        if let Some(i) = globs.iter().position(|g| g.is_empty()) {
            return Err((format!("{}[{i}]", self.field(name)), "empty glob".to_owned()));
        }
        Ok(globs)
    }
}

/// The string a JSON value holds, if it is one.
fn as_string(value: Value) -> Option<String> {
    if let Value::String(s) = value {
        Some(s)
    } else {
        None
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SERVER_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Which transport `type` asks for, when given.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Declared {
    Stdio,
    Http,
}

fn server(at: &str, name: String, entry: EntryFields) -> Result<ServerConfig, FieldProblem> {
    if !valid_name(&name) {
        return Err((
            at.to_owned(),
            format!(
                "server name {name:?} must be 1-{MAX_SERVER_NAME_LEN} characters of [A-Za-z0-9_-] (it becomes part of tool ids and provider tool names)"
            ),
        ));
    }
    let mut f = Fields {
        at: at.to_owned(),
        fields: entry.0.into_iter().collect(),
    };
    let declared = match f.string("type")?.as_deref() {
        None => None,
        Some("stdio") => Some(Declared::Stdio),
        Some("http" | "streamable-http") => Some(Declared::Http),
        Some("sse") => {
            return Err(f.problem(
                "type",
                "the legacy SSE transport is not supported; use streamable HTTP (\"type\": \"http\")",
            ));
        }
        Some(other) => {
            return Err(f.problem(
                "type",
                format!("{other:?} is not a transport; use \"stdio\", \"http\" or \"streamable-http\""),
            ));
        }
    };
    let command = f.string("command")?;
    let args = f.strings("args")?;
    let env = f.string_map("env")?;
    let url = f.string("url")?;
    let headers = f.string_map("headers")?;
    let transport = match (command, url) {
        (Some(_), Some(_)) => {
            return Err(f.problem("url", "give either command (stdio) or url (HTTP), not both"));
        }
        (None, None) => {
            return Err(f.problem(
                "command",
                "missing: give command (stdio) or url (streamable HTTP)",
            ));
        }
        (Some(command), None) => {
            if declared == Some(Declared::Http) {
                return Err(f.problem("type", "an HTTP server needs url, not command"));
            }
            if command.trim().is_empty() {
                return Err(f.problem("command", "must not be empty"));
            }
            if headers.is_some() {
                return Err(f.problem("headers", "only valid with url"));
            }
            ServerTransport::Stdio {
                command,
                args: args.unwrap_or_default(),
                env: env.unwrap_or_default(),
            }
        }
        (None, Some(url)) => {
            if declared == Some(Declared::Stdio) {
                return Err(f.problem("type", "a stdio server needs command, not url"));
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(f.problem("url", "must start with http:// or https://"));
            }
            if args.is_some() {
                return Err(f.problem("args", "only valid with command"));
            }
            if env.is_some() {
                return Err(f.problem("env", "only valid with command"));
            }
            let headers = headers.unwrap_or_default();
            for (header, value) in &headers {
                if http::HeaderName::from_bytes(header.as_bytes()).is_err()
                    || http::HeaderValue::from_str(value).is_err()
                {
                    return Err((
                        format!("{}.{header}", f.field("headers")),
                        "not a valid HTTP header".to_owned(),
                    ));
                }
            }
            ServerTransport::Http { url, headers }
        }
    };
    let include = f.globs("include")?;
    let exclude = f.globs("exclude")?;
    let connect_timeout = f.timeout("connect_timeout_secs", DEFAULT_CONNECT_TIMEOUT_SECS)?;
    let call_timeout = f.timeout("call_timeout_secs", DEFAULT_CALL_TIMEOUT_SECS)?;
    let protocol = match f.string("protocol")?.as_deref() {
        None | Some("auto") => ProtocolChoice::Auto,
        Some("2025-11-25") => ProtocolChoice::Initialize,
        Some("2026-07-28") => ProtocolChoice::Discover,
        Some(other) => {
            return Err(f.problem(
                "protocol",
                format!("{other:?} is not a protocol era; use \"2025-11-25\", \"2026-07-28\" or \"auto\""),
            ));
        }
    };
    let disabled = f.bool("disabled")?.unwrap_or(false);
    let domains = f.strings("domains")?.unwrap_or_default();
    if let Some(i) = domains.iter().position(|d| d.trim().is_empty()) {
        return Err((
            format!("{}[{i}]", f.field("domains")),
            "empty discipline".to_owned(),
        ));
    }
    let core = f.bool("core")?;
    let requires_approval = f.globs("requires_approval")?;
    let classify = f.classify()?;
    let sandbox = f.sandbox(matches!(transport, ServerTransport::Stdio { .. }))?;
    if let Some(unknown) = f.fields.keys().next() {
        return Err(f.problem(
            unknown,
            format!("unknown field; expected one of {}", ENTRY_FIELDS.join(", ")),
        ));
    }
    Ok(ServerConfig {
        name,
        transport,
        include,
        exclude,
        connect_timeout,
        call_timeout,
        protocol,
        disabled,
        domains,
        core,
        requires_approval,
        sandbox,
        classify,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_defined_twice_is_refused_at_its_line_and_column() {
        let text = "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\"},\n  \"a\": {\"command\": \"y\"}\n}}";
        let err = parse_servers("f.json", text).unwrap_err();
        let ConfigError::Syntax { line, .. } = &err else {
            panic!("expected a positioned error, got {err:?}");
        };
        assert_eq!(*line, 3, "{err}");
        assert!(err.to_string().contains("\"a\" is defined twice"), "{err}");
    }

    #[test]
    fn a_missing_file_is_told_apart_from_an_unreadable_one() {
        let dir = std::env::temp_dir().join(format!("mf-servers-{}", std::process::id()));
        let err = load_servers_file(&dir.join("absent.json")).unwrap_err();
        assert!(err.is_missing_file(), "{err}");
        let syntax = parse_servers("f.json", "{").unwrap_err();
        assert!(!syntax.is_missing_file());
    }

    #[test]
    fn a_stdio_server_is_sandboxed_by_default_and_off_only_when_written() {
        let servers = parse_servers(
            "f.json",
            r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y", "sandbox": "off"}}}"#,
        )
        .unwrap();
        assert_eq!(servers[0].sandbox, Sandbox::On(SandboxOptions::default()));
        assert_eq!(servers[1].sandbox, Sandbox::Off);
    }

    #[test]
    fn sandbox_settings_limits_and_the_workspace_are_read() {
        let servers = parse_servers(
            "f.json",
            r#"{"mcpServers": {"spice": {"command": "x", "workspace": "/srv/project", "workspace_access": "rw",
                "sandbox": {"env": ["LANG_EXTRA"], "hide": ["/srv/secrets"], "cpu_seconds": 60, "memory_mb": 1024,
                            "file_size_mb": 64, "open_files": 128, "processes": 32}}}}"#,
        )
        .unwrap();
        let Sandbox::On(options) = &servers[0].sandbox else {
            panic!("expected a sandbox");
        };
        assert_eq!(options.env, ["LANG_EXTRA"]);
        assert_eq!(options.hide, [std::path::PathBuf::from("/srv/secrets")]);
        assert_eq!(
            options.workspace,
            Some(Workspace {
                path: "/srv/project".into(),
                writable: true
            })
        );
        assert_eq!(
            options.limits,
            ResourceLimits {
                cpu_seconds: 60,
                memory_mb: 1024,
                file_size_mb: 64,
                open_files: 128,
                processes: 32
            }
        );
    }

    #[test]
    fn classify_globs_are_read_strictest_class_first() {
        let text = r#"{"mcpServers": {"a": {"command": "x",
            "classify": {"destructive": ["delete_*"], "read_only": ["get_*", "list_*"], "producing": ["create_*"]}}}}"#;
        let servers = parse_servers("f.json", text).unwrap();
        assert_eq!(
            servers[0].classify,
            vec![
                (DeclaredToolClass::Destructive, "delete_*".to_owned()),
                (DeclaredToolClass::Producing, "create_*".to_owned()),
                (DeclaredToolClass::ReadOnly, "get_*".to_owned()),
                (DeclaredToolClass::ReadOnly, "list_*".to_owned()),
            ]
        );
    }

    #[test]
    fn bad_sandbox_settings_are_refused_naming_the_field() {
        let cases = [
            (
                r#"{"url": "http://x/mcp", "sandbox": "off"}"#,
                "mcpServers.a.sandbox",
                "only valid with command",
            ),
            (
                r#"{"command": "x", "sandbox": "none"}"#,
                "mcpServers.a.sandbox",
                "must be \"off\" or an object",
            ),
            (
                r#"{"command": "x", "workspace": "project"}"#,
                "mcpServers.a.workspace",
                "absolute",
            ),
            (
                r#"{"command": "x", "workspace": "/p", "workspace_access": "write"}"#,
                "mcpServers.a.workspace_access",
                "\"rw\"",
            ),
            (
                r#"{"command": "x", "workspace_access": "rw"}"#,
                "mcpServers.a.workspace_access",
                "only valid with workspace",
            ),
            (
                r#"{"command": "x", "sandbox": {"cpu_seconds": 0}}"#,
                "mcpServers.a.sandbox.cpu_seconds",
                "whole number",
            ),
            (
                r#"{"command": "x", "sandbox": {"env": ["A-B"]}}"#,
                "mcpServers.a.sandbox.env[0]",
                "variable name",
            ),
            (
                r#"{"command": "x", "sandbox": {"hide": ["rel"]}}"#,
                "mcpServers.a.sandbox.hide[0]",
                "absolute",
            ),
            (
                r#"{"command": "x", "sandbox": {"network": true}}"#,
                "mcpServers.a.sandbox.network",
                "unknown field",
            ),
            (
                r#"{"command": "x", "sandbox": "off", "workspace": "/p"}"#,
                "mcpServers.a.workspace",
                "sandbox",
            ),
            (
                r#"{"command": "x", "classify": ["get_*"]}"#,
                "mcpServers.a.classify",
                "must be an object",
            ),
            (
                r#"{"command": "x", "classify": {"writes": ["set_*"]}}"#,
                "mcpServers.a.classify.writes",
                "unknown class",
            ),
            (
                r#"{"command": "x", "classify": {"read_only": [""]}}"#,
                "mcpServers.a.classify.read_only[0]",
                "empty glob",
            ),
        ];
        for (entry, field, words) in cases {
            let text = format!(r#"{{"mcpServers": {{"a": {entry}}}}}"#);
            let err = parse_servers("f.json", &text).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains(words), "{entry}: {err}");
        }
    }
}
