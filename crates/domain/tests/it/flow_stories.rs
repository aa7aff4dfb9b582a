//! The tailoring stories (fixtures/flows/cases/stories.json): the seed's wall shelf and the
//! kitchen cabinet, quadcopter and robot arm, each tailored strictly from its template with its
//! context, must end exactly as the table says — the templates may not make a story impossible.

use std::collections::BTreeSet;
use std::path::PathBuf;

use metaforge_domain::flow::{FlowContext, OperationList, TailorMode, TailorStatus, propose, validate};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
struct Table {
    stories: Vec<Story>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Story {
    name: String,
    template: String,
    /// A path under the repository root, or the document inline.
    ops: Value,
    context: Value,
    status: String,
    violations: Vec<String>,
    #[serde(default)]
    absent_phases: Vec<String>,
    #[serde(default)]
    added_phases: Vec<String>,
}

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

#[expect(clippy::unwrap_used, reason = "a missing or broken fixture is a test failure")]
fn inline_or_file(value: &Value) -> Value {
    match value {
        Value::String(path) => serde_json::from_str(&std::fs::read_to_string(repo(path)).unwrap()).unwrap(),
        other => other.clone(),
    }
}

#[test]
fn every_tailoring_story_ends_as_the_table_says() {
    let text = std::fs::read_to_string(repo("fixtures/flows/cases/stories.json")).unwrap();
    let table: Table = serde_json::from_str(&text).unwrap();
    assert!(table.stories.len() >= 5);
    let mut failures = Vec::new();
    for story in &table.stories {
        let ops: OperationList = serde_json::from_value(inline_or_file(&story.ops)).unwrap();
        let ops = ops.into_operations();
        let context: FlowContext = serde_json::from_value(inline_or_file(&story.context)).unwrap();
        let result = propose(&story.template, &ops, Some(&context), TailorMode::Strict).unwrap();
        let rules: BTreeSet<String> = result.violations.iter().map(|v| v.rule.clone()).collect();
        let want: BTreeSet<String> = story.violations.iter().cloned().collect();
        if result.status.as_str() != story.status || rules != want || !result.refused.is_empty() {
            failures.push(format!(
                "{}: status {} (want {}), violations {:#?}, refused {:#?}",
                story.name,
                result.status.as_str(),
                story.status,
                result.violations,
                result.refused
            ));
            continue;
        }
        let flow = result.flow.as_ref().unwrap();
        for gone in &story.absent_phases {
            if flow.phase(gone).is_some() {
                failures.push(format!("{}: phase '{gone}' is still there", story.name));
            }
        }
        for added in &story.added_phases {
            if flow.phase(added).is_none() {
                failures.push(format!("{}: phase '{added}' was not added", story.name));
            }
        }
        if result.status == TailorStatus::Proposed {
            assert_eq!(validate(flow, Some(&context)), vec![], "{}", story.name);
            assert!(result.content_hash.is_some(), "{}", story.name);
            assert_eq!(
                result.applied.iter().filter(|a| a.index.is_some()).count(),
                ops.len(),
                "{}",
                story.name
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
