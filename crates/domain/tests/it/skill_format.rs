//! The Agent Skills frontmatter rules, case by case (`fixtures/rules/skill_format.json` over the
//! skill directories in `fixtures/skills/cases`, which the reference validator also reads).

use metaforge_domain::skill::{SKILL_FILE, parse_skill};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Case {
    directory: String,
    valid: bool,
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    contains: Option<String>,
}

#[expect(clippy::panic, reason = "a missing fixture fails the test, naming it")]
fn text_of(directory: &str) -> String {
    let path = metaforge_test_support::peers::manifest_dir()
        .join("../../fixtures/skills/cases")
        .join(directory)
        .join(SKILL_FILE);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_case_of_the_frontmatter_table_is_judged_as_it_says_with_its_field_and_line() {
    let cases: Vec<Case> = metaforge_test_support::cases("skill_format");
    assert!(cases.len() >= 15, "{}", cases.len());
    for case in cases {
        let verdict = parse_skill(&case.directory, &text_of(&case.directory));
        match (case.valid, verdict) {
            (true, Ok(skill)) => assert_eq!(skill.name, case.directory),
            (true, Err(problems)) => panic!("{}: refused: {problems:?}", case.directory),
            (false, Ok(skill)) => panic!("{}: accepted: {skill:?}", case.directory),
            (false, Err(problems)) => {
                let first = &problems[0];
                assert_eq!(first.field, case.field, "{}: {problems:?}", case.directory);
                if let Some(line) = case.line {
                    assert_eq!(first.line, Some(line), "{}: {problems:?}", case.directory);
                }
                if let Some(words) = &case.contains {
                    assert!(first.message.contains(words), "{}: {problems:?}", case.directory);
                }
            }
        }
    }
}

#[test]
fn every_problem_is_reported_at_once_so_a_skill_is_never_half_loaded() {
    let text = "---\nname: Bad_Name\ndescription: \"\"\nversion: 2\ncompatibility: [a]\n---\nbody\n";
    let problems = parse_skill("bad-name", text).unwrap_err();
    let fields: Vec<Option<&str>> = problems.iter().map(|p| p.field.as_deref()).collect();
    assert_eq!(
        fields,
        [
            Some("version"),
            Some("name"),
            Some("description"),
            Some("compatibility")
        ],
        "{problems:?}"
    );
    assert_eq!(
        problems[0].to_string(),
        format!("line 4: {}", problems[0].message)
    );
}

#[test]
fn the_body_allowed_tools_and_metaforge_metadata_are_read() {
    let skill = parse_skill("valid-full", &text_of("valid-full")).unwrap();
    assert_eq!(skill.allowed_tools, ["twin.record_decision", "twin.query"]);
    assert!(skill.commits());
    assert_eq!(skill.disciplines(), ["mechanical", "electrical"]);
    assert_eq!(skill.license.as_deref(), Some("Apache-2.0"));
    assert_eq!(skill.body, "Record the decision.");
    let plain = parse_skill("valid-basic", &text_of("valid-basic")).unwrap();
    assert!(!plain.commits());
    assert!(plain.body.starts_with("# Review"));
}
