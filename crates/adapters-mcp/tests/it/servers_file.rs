//! The servers file against its case table, `fixtures/rules/mcp_servers_file.json`: the
//! `mcpServers` shape Claude Desktop and Claude Code use, MetaForge's extras, the older
//! `servers` list, and every refusal naming its field (or line for JSON syntax).

#![expect(
    clippy::panic,
    reason = "table helpers outside #[test] fns: a case that does not hold fails the test, naming it"
)]

use metaforge_adapters_mcp::{ConfigError, ServerConfig, ServerTransport, parse_servers};
use metaforge_test_support::cases;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    doc: Option<Value>,
    #[serde(default)]
    text: Option<String>,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Expect {
    Servers {
        servers: Vec<Value>,
    },
    Error {
        error: String,
        #[serde(default)]
        field: Option<String>,
        #[serde(default)]
        line: Option<usize>,
        #[serde(default)]
        message_contains: Option<String>,
    },
}

/// A server as the table spells it: every field, transport flattened.
fn summary(server: &ServerConfig) -> Value {
    let mut out = json!({
        "name": server.name,
        "include": server.include,
        "exclude": server.exclude,
        "connect_timeout_secs": server.connect_timeout.as_secs_f64(),
        "call_timeout_secs": server.call_timeout.as_secs_f64(),
        "protocol": server.protocol.as_str(),
        "disabled": server.disabled,
        "domains": server.domains,
        "core": server.core,
    });
    if !server.requires_approval.is_empty() {
        out["requires_approval"] = json!(server.requires_approval);
    }
    let transport = match &server.transport {
        ServerTransport::Stdio { command, args, env } => {
            json!({"transport": "stdio", "command": command, "args": args, "env": env})
        }
        ServerTransport::Http { url, headers } => {
            json!({"transport": "http", "url": url, "headers": headers})
        }
    };
    if let (Some(out), Value::Object(transport)) = (out.as_object_mut(), transport) {
        out.extend(transport);
    }
    out
}

/// Every key the case names has the value it names (numbers compared as numbers).
fn assert_subset(case: &str, expected: &Value, got: &Value) {
    let (Some(expected), Some(got)) = (expected.as_object(), got.as_object()) else {
        panic!("{case}: expected objects, got {expected} and {got}");
    };
    for (key, want) in expected {
        let have = &got[key];
        let same = match (want.as_f64(), have.as_f64()) {
            (Some(a), Some(b)) => (a - b).abs() < 1e-9,
            _ => want == have,
        };
        assert!(same, "{case}: {key} is {have}, the table says {want}");
    }
}

#[test]
fn every_servers_file_case_parses_or_is_refused_as_the_table_says() {
    let table: Vec<Case> = cases::cases("mcp_servers_file");
    assert!(table.len() >= 40, "the table lost cases: {}", table.len());
    for case in table {
        let text = match (&case.text, &case.doc) {
            (Some(text), _) => text.clone(),
            (None, Some(doc)) => doc.to_string(),
            (None, None) => panic!("{}: a case needs doc or text", case.name),
        };
        let parsed = parse_servers("mcp_servers.json", &text);
        match (&case.expect, parsed) {
            (Expect::Servers { servers }, Ok(got)) => {
                assert_eq!(got.len(), servers.len(), "{}: {got:?}", case.name);
                for (want, server) in servers.iter().zip(&got) {
                    assert_subset(&case.name, want, &summary(server));
                }
            }
            (Expect::Servers { .. }, Err(e)) => panic!("{}: refused: {e}", case.name),
            (Expect::Error { error, .. }, Ok(got)) => {
                panic!("{}: expected a {error} error, parsed {got:?}", case.name)
            }
            (
                Expect::Error {
                    error,
                    field,
                    line,
                    message_contains,
                },
                Err(e),
            ) => {
                let shown = e.to_string();
                match (error.as_str(), &e) {
                    ("field", ConfigError::Field { field: got, .. }) => {
                        assert_eq!(Some(got), field.as_ref(), "{}: {shown}", case.name);
                        assert!(
                            shown.starts_with(&format!("mcp_servers.json: {got}: ")),
                            "{}: the message names the file and the field: {shown}",
                            case.name
                        );
                    }
                    ("syntax", ConfigError::Syntax { line: got, .. }) => {
                        assert_eq!(Some(*got), *line, "{}: {shown}", case.name);
                        assert!(
                            shown.starts_with(&format!("mcp_servers.json:{got}:")),
                            "{}: {shown}",
                            case.name
                        );
                    }
                    (kind, other) => panic!("{}: expected a {kind} error, got {other:?}", case.name),
                }
                if let Some(needle) = message_contains {
                    assert!(shown.contains(needle.as_str()), "{}: {shown}", case.name);
                }
            }
        }
    }
}
