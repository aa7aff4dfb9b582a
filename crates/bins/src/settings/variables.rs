//! Every environment variable MetaForge reads, with its flag, default and effect: the one list
//! the binary's `Settings` is read against, that `metaforge config variables` prints, and that
//! README's Configuration table is generated from (`cargo xtask doc-check` fails when the two
//! differ; `cargo xtask doc-check --write` regenerates the table).
//!
//! Plain data and no dependencies, so xtask compiles this same file (`#[path]`) instead of
//! keeping a second copy.

/// One row of the table: the variables that share one meaning (a pair such as provider and
/// model, or a variable and its fallback).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Variable {
    /// The variable names; `<ROLE>`-style parts stand for a family of names.
    pub(crate) names: &'static [&'static str],
    /// The command-line flag that wins over the variable, when there is one.
    pub(crate) flag: Option<&'static str>,
    /// The value used when the variable is unset (markdown).
    pub(crate) default: &'static str,
    /// What the variable does, and what a bad value does (markdown).
    pub(crate) effect: &'static str,
}

/// The first line of the generated table (README looks for it).
pub(crate) const TABLE_HEADER: &str = "| Variable | Default | What it does |";

/// Every variable, in the order the README lists them.
pub(crate) const VARIABLES: &[Variable] = &[
    Variable {
        names: &["METAFORGE_HOME"],
        flag: None,
        default: "`~/.metaforge`",
        effect: "Where the ledgers live; created 0700, every file 0600.",
    },
    Variable {
        names: &["METAFORGE_DATABASE_URL"],
        flag: None,
        default: "unset (SQLite files)",
        effect: "Every ledger (approvals, flow versions, runs, client tasks, usage, sessions) on one PostgreSQL server, `postgres://user[:password]@host:port/database`, one schema per ledger, so several gateways and workers share them (their `*_PATH` variables are then unused). Another scheme is an error naming the variable; an unreachable server fails start-up (no fallback to the files).",
    },
    Variable {
        names: &["METAFORGE_TWIN_URL"],
        flag: None,
        default: "unset (`$METAFORGE_HOME/twin.db`)",
        effect: "The digital twin on a FalkorDB server, `falkordb://[:password@]host:port` (`falkor://`, `redis://` read the same; no TLS), graph `metaforge_twin`, so every gateway, worker and `mcp serve` on that URL reads and writes one twin (no `twin.db` is written). Another scheme is an error naming the variable; an unreachable server fails start-up (no fallback to the file). A binary built without the `falkordb` feature (on by default) refuses it.",
    },
    Variable {
        names: &["METAFORGE_TOOL_APPROVALS_LEDGER_PATH"],
        flag: None,
        default: "`$METAFORGE_HOME/tool_approvals_ledger.db`",
        effect: "The one approval ledger.",
    },
    Variable {
        names: &["METAFORGE_FLOW_VERSIONS_PATH"],
        flag: None,
        default: "`$METAFORGE_HOME/flow_versions.db`",
        effect: "Flow versions (frozen, hashed).",
    },
    Variable {
        names: &["METAFORGE_CLIENT_TASKS_PATH"],
        flag: None,
        default: "`$METAFORGE_HOME/client_tasks.db`",
        effect: "Client tasks.",
    },
    Variable {
        names: &["METAFORGE_LLM_USAGE_DB_PATH"],
        flag: None,
        default: "`$METAFORGE_HOME/llm_usage.db`",
        effect: "Usage events (calls, tokens, cost).",
    },
    Variable {
        names: &["METAFORGE_RUNS_LEDGER_DISABLE"],
        flag: None,
        default: "unset",
        effect: "Keep ledgers in a temporary directory (lost at exit; logged loudly).",
    },
    Variable {
        names: &["METAFORGE_CREDENTIALS_PATH"],
        flag: None,
        default: "`~/.metaforge/credentials.json`",
        effect: "Provider credentials file (must be 0600); read when it changes.",
    },
    Variable {
        names: &["METAFORGE_GATEWAY_BIND"],
        flag: Some("--bind"),
        default: "`127.0.0.1:8787`",
        effect: "Gateway address; anything but loopback needs keys.",
    },
    Variable {
        names: &["METAFORGE_MCP_BIND"],
        flag: Some("--mcp-bind"),
        default: "`127.0.0.1:8765`",
        effect: "The MCP sidecar of `metaforge up` (loopback only).",
    },
    Variable {
        names: &["METAFORGE_GATEWAY_API_KEY"],
        flag: None,
        default: "unset (loopback: identity `local`)",
        effect: "People's keys, `alice:sk-…,bob:sk-…`; the key's identity is the approver of record. With keys set the sidecar requires one too.",
    },
    Variable {
        names: &["METAFORGE_GATEWAY_RATE_LIMIT_PER_MINUTE"],
        flag: Some("--rate-limit-per-minute"),
        default: "`600`",
        effect: "Requests per minute per key (0: off).",
    },
    Variable {
        names: &["METAFORGE_GATEWAY_AUTH_FAILURES_PER_MINUTE"],
        flag: Some("--auth-failures-per-minute"),
        default: "`20`",
        effect: "Wrong keys per client address per minute before 429 (0: off).",
    },
    Variable {
        names: &["METAFORGE_GATEWAY_BODY_LIMIT_BYTES"],
        flag: Some("--body-limit-bytes"),
        default: "`2097152`",
        effect: "Largest request body.",
    },
    Variable {
        names: &["METAFORGE_HTTP_HEADER_TIMEOUT_SECS"],
        flag: None,
        default: "`10`",
        effect: "A client must send its request headers within this (gateway and sidecar).",
    },
    Variable {
        names: &["METAFORGE_HTTP_BODY_TIMEOUT_SECS"],
        flag: None,
        default: "`30`",
        effect: "Longest pause inside a request body before 408.",
    },
    Variable {
        names: &["METAFORGE_HTTP_REQUEST_TIMEOUT_SECS"],
        flag: None,
        default: "`60`",
        effect: "The whole body must arrive within this after the headers (408).",
    },
    Variable {
        names: &["METAFORGE_HTTP_MAX_CONNECTIONS"],
        flag: None,
        default: "`1024`",
        effect: "Open connections per listener; more wait in the accept queue.",
    },
    Variable {
        names: &["METAFORGE_APPROVALS_SEPARATE_APPROVER"],
        flag: None,
        default: "`off`",
        effect: "`on`: the identity that proposed an item may not decide it (403); needs keys.",
    },
    Variable {
        names: &["METAFORGE_MCP_SERVICE_KEY"],
        flag: None,
        default: "unset",
        effect: "The worker's service key on the sidecar (caller class `service`).",
    },
    Variable {
        names: &["METAFORGE_GATEWAY_URL"],
        flag: None,
        default: "unset",
        effect: "`mcp serve`: park holds and proposals in this gateway's ledger (remote mode).",
    },
    Variable {
        names: &["METAFORGE_CLIENT_TASK_WRITES"],
        flag: None,
        default: "`off`",
        effect: "`up` / `mcp serve` with `METAFORGE_GATEWAY_URL`: `on` lets an HTTP session that claimed a client task (with a stable `X-MetaForge-Session`) run as `client_task`, its twin writes unheld and on the run's branch, confirmed with the run service before every call; `on` without a gateway URL, or a value other than `on`/`off`, refuses start.",
    },
    Variable {
        names: &["METAFORGE_ENGINEERING_TOOL_SERVERS"],
        flag: None,
        default: "`on`",
        effect: "`on`: the gateway (`up`, `gateway`, `worker`) offers MetaForge's own engineering tool servers whose programs are installed, each in its sandbox and without a servers file: `spice` (ngspice, disciplines `electronics` and `simulation`) and `fea` (gmsh and CalculiX, `mechanical` and `simulation`); a servers-file entry of the same name replaces it (`\"disabled\": true` switches it off). Needs `bwrap`. `off`: only the servers file's. Another value refuses start.",
    },
    Variable {
        names: &["METAFORGE_MCP_SERVERS_PATH"],
        flag: None,
        default: "`$METAFORGE_HOME/mcp_servers.json`",
        effect: "The MCP tool servers the agent loop calls, in the `mcpServers` shape of Claude Desktop and Claude Code (`command`/`args`/`env` or `url`/`headers`; extras `include`/`exclude` globs, `connect_timeout_secs`, `call_timeout_secs`, `protocol`, `disabled`, `domains`, `core`, `sandbox`, `workspace`, `workspace_access`). Absent at the default place: no servers; absent at a set path, or a bad file: start refused naming the field. A stdio server starts in a bubblewrap sandbox (default on; `apt-get install bubblewrap`): no network but a private loopback, the filesystem read-only with MetaForge's home, `/run` and the users' key stores hidden, its own directory writable, a `workspace` read-only unless `workspace_access` is `rw`, a cleared environment (`PATH`, the locale, `HOME`, `TMPDIR` and working directory `$METAFORGE_HOME/tool-servers/<name>`, its own `env` and the names in `sandbox.env`), and limits (`sandbox`: `cpu_seconds`, `memory_mb`, `file_size_mb`, `open_files`, `processes`). `\"sandbox\": \"off\"` runs it unsandboxed, logged at WARN and shown in `/health`; without `bwrap` a sandboxed server is unavailable, never run unsandboxed.",
    },
    Variable {
        names: &[
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "<PROVIDER>_API_KEY",
        ],
        flag: None,
        default: "unset",
        effect: "A provider's key when the credentials file has none (`metaforge providers list` names each).",
    },
    Variable {
        names: &[
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_BEARER_TOKEN_BEDROCK",
        ],
        flag: None,
        default: "unset",
        effect: "Bedrock credentials (`AWS_DEFAULT_REGION` when `AWS_REGION` is unset).",
    },
    Variable {
        names: &["CODEX_HOME"],
        flag: None,
        default: "`~/.codex`",
        effect: "Where `codex login` keeps `auth.json` (openai-codex).",
    },
    Variable {
        names: &["HARNESS_<PROVIDER>_BASE_URL"],
        flag: None,
        default: "the provider's own",
        effect: "Base URL override (required for local runtimes: vLLM, llama.cpp, Ollama, …).",
    },
    Variable {
        names: &["METAFORGE_ROUTE_<ROLE>"],
        flag: None,
        default: "unset",
        effect: "`provider:model` for one role (`METAFORGE_ROUTE_CHAT=openai:gpt-4o-mini`); a role that does not exist refuses start.",
    },
    Variable {
        names: &["METAFORGE_MODEL_ROUTES_PATH"],
        flag: None,
        default: "unset",
        effect: "A routes file (see `fixtures/model_routes.example.json`).",
    },
    Variable {
        names: &["METAFORGE_LLM_PROVIDER", "METAFORGE_LLM_MODEL"],
        flag: None,
        default: "unset",
        effect: "The deployment's default route for roles with none.",
    },
    Variable {
        names: &["METAFORGE_FALLBACK_PROVIDERS"],
        flag: None,
        default: "unset",
        effect: "`provider:model,…` tried after a role's own route fails.",
    },
    Variable {
        names: &["METAFORGE_AGENT_LOOP"],
        flag: None,
        default: "`auto`",
        effect: "The agent loop's protocol for every turn: `auto` (native tool calls when the model takes them, JSON-ReAct otherwise), `native` or `react`; any other value is an error naming the accepted ones.",
    },
    Variable {
        names: &["METAFORGE_CHAT_MAX_ITERATIONS"],
        flag: None,
        default: "`12`",
        effect: "Most model calls in one chat turn (a thread may set its own `max_iterations`).",
    },
    Variable {
        names: &["METAFORGE_CHAT_TOKEN_BUDGET"],
        flag: None,
        default: "unset (no budget)",
        effect: "Most prompt + completion tokens one chat turn may use (a thread may set its own `token_budget`).",
    },
    Variable {
        names: &["METAFORGE_CHAT_APPROVAL_TIMEOUT_SECONDS"],
        flag: None,
        default: "`1800`",
        effect: "How long a held chat call waits for a person before it closes as timed out.",
    },
    Variable {
        names: &["METAFORGE_HISTORY_TOKENS"],
        flag: None,
        default: "`12000`",
        effect: "The history budget of a chat turn; older messages fold into a summary.",
    },
    Variable {
        names: &["METAFORGE_CHAT_TWIN_WRITES", "METAFORGE_CHAT_PROJECT_WRITES"],
        flag: None,
        default: "`1`",
        effect: "`0`: chat turns may not write the twin / projects (the `twin_write` / `project_write` gate is off).",
    },
    Variable {
        names: &["METAFORGE_CHAT_SYSTEM_PROMPT_PATH"],
        flag: None,
        default: "unset (MetaForge's own)",
        effect: "A file holding the chat turns' system prompt.",
    },
    Variable {
        names: &["METAFORGE_SKILLS_DIRS"],
        flag: None,
        default: "unset",
        effect: "More skill directories (`:`-separated), read after the bundled skills and `$METAFORGE_HOME/skills/`; a later skill replaces an earlier one of the same name (logged `skill_overridden`), an invalid one is refused with its problems (`skill_refused`); every directory is re-read when it changes, without a restart.",
    },
    Variable {
        names: &["METAFORGE_FLOW_ENGINE"],
        flag: None,
        default: "`embedded`",
        effect: "Which engine runs design flows: `embedded` (in this process, every transition persisted in the run ledger before it acts) or `temporal` (a Temporal workflow per run, in a binary built with `--features temporal`, with `metaforge worker` polling the queue `metaforge-design-flows`; with no worker polling, or in a binary without the feature, every run start answers 503 saying why, never a fall-through to `embedded`); any other value is an error naming the accepted ones.",
    },
    Variable {
        names: &["TEMPORAL_HOST"],
        flag: None,
        default: "`127.0.0.1:7233`",
        effect: "The Temporal server the gateway and `metaforge worker` use when `METAFORGE_FLOW_ENGINE=temporal`.",
    },
    Variable {
        names: &["METAFORGE_INTELLIGENCE"],
        flag: None,
        default: "`server`",
        effect: "Who does a run's phase work when the run request names no `intelligence`: `server` (the agent loop, P→G→E) or `client` (a client task the MCP client claims and submits); any other value is an error naming the accepted ones.",
    },
    Variable {
        names: &["METAFORGE_GATE_TIMEOUT_SECONDS"],
        flag: None,
        default: "unset",
        effect: "How long a human gate of a new run stays open before it expires as a rejection (the run fails with the reason \"Gate '<name>' expired at <time> without a decision: treated as a rejection\"); the deadline is stored with the gate and fires after a restart. Unset: gates wait for a person. A whole number of seconds, 1 or more; anything else is an error naming the variable.",
    },
    Variable {
        names: &["KAFKA_BOOTSTRAP_SERVERS"],
        flag: None,
        default: "unset (in-process bus)",
        effect: "Persist every run event to Kafka topics `metaforge.<kind>` (a binary built with `--features kafka`; an unreachable broker falls back loudly to the in-process bus).",
    },
    Variable {
        names: &["METAFORGE_RUN_SPEND_ALERT_USD"],
        flag: None,
        default: "`5`",
        effect: "Spend per run that fires `metaforge_llm_run_spend_exceeded_total` once.",
    },
    Variable {
        names: &["METAFORGE_LOG", "RUST_LOG"],
        flag: None,
        default: "`info` (libraries at `warn`)",
        effect: "What is logged, as a tracing filter (`RUST_LOG` when `METAFORGE_LOG` is unset).",
    },
    Variable {
        names: &["METAFORGE_LOG_FORMAT"],
        flag: None,
        default: "`text`",
        effect: "`json` for one JSON object per line.",
    },
    Variable {
        names: &["OTEL_EXPORTER_OTLP_ENDPOINT"],
        flag: None,
        default: "unset: no traces",
        effect: "An OTLP/HTTP collector (`http://host:4318`): every process exports its spans to `<url>/v1/traces` as `metaforge-<role>` and carries the W3C trace context on HTTP, MCP, Kafka and Temporal hops.",
    },
];

/// The variables only tests and tools read (never the binary), for the note under the table.
pub(crate) const TOOLS_ONLY: &str =
    "For tests and tools only: `METAFORGE_TOOLS_DIR` (where `cargo xtask setup` installs peers),
`METAFORGE_NODE_DIR` and `METAFORGE_PYTHON` (where tests find the npm and pip peers),
`METAFORGE_ENGINEERING_VENV` (the community engineering MCP servers' virtualenv),
`METAFORGE_REQUIRE_PEERS=1` (a missing peer fails instead of skipping), `METAFORGE_BENCH_*`,
`METAFORGE_E2E_*`, `METAFORGE_RECORD_HISTORIES` (re-records the Temporal replay histories),
`METAFORGE_GATE_PID` (set by `cargo xtask ci` on what it starts: the listener check's mark).";

/// The names only tests and tools read, as patterns (`*` ends a prefix).
pub(crate) const TOOLS_ONLY_NAMES: &[&str] = &[
    "METAFORGE_TOOLS_DIR",
    "METAFORGE_NODE_DIR",
    "METAFORGE_PYTHON",
    "METAFORGE_ENGINEERING_VENV",
    "METAFORGE_REQUIRE_PEERS",
    "METAFORGE_RECORD_HISTORIES",
    "METAFORGE_GATE_PID",
    "METAFORGE_BENCH_*",
    "METAFORGE_E2E_*",
];

/// The table as markdown, header included, one line per row, then the tools-only note.
pub(crate) fn markdown_table() -> String {
    let mut out = format!("{TABLE_HEADER}\n|---|---|---|\n");
    for variable in VARIABLES {
        let names: Vec<String> = variable.names.iter().map(|n| format!("`{n}`")).collect();
        let flag = variable.flag.map(|f| format!(" (`{f}`)")).unwrap_or_default();
        out.push_str(&format!(
            "| {}{flag} | {} | {} |\n",
            names.join(", "),
            variable.default,
            variable.effect
        ));
    }
    out.push('\n');
    out.push_str(TOOLS_ONLY);
    out.push('\n');
    out
}

/// Whether `name` is a variable of the table, literally or through a `<PART>` family
/// (`METAFORGE_ROUTE_CHAT` matches `METAFORGE_ROUTE_<ROLE>`).
pub(crate) fn is_listed(name: &str) -> bool {
    VARIABLES
        .iter()
        .flat_map(|v| v.names.iter())
        .any(|listed| match listed.split_once('<') {
            None => *listed == name,
            Some((head, rest)) => {
                let tail = rest.split_once('>').map_or("", |(_, tail)| tail);
                name.len() > head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
            }
        })
}

/// A `METAFORGE_*` name that is neither in the table nor a tools-only variable: most likely a
/// typo (`METAFORGE_FLOW_ENGIN`), which would otherwise be ignored in silence.
pub(crate) fn is_unknown(name: &str) -> bool {
    name.starts_with("METAFORGE_")
        && !is_listed(name)
        && !TOOLS_ONLY_NAMES
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => *pattern == name,
            })
}
