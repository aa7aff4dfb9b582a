//! `metaforge skills` through the real binary (issue 19): the catalogue from the bundled skills
//! and the skill directories, `show`, `new`, and `validate` agreeing with the Agent Skills
//! reference validator (npm `skills-ref`) on every case of `fixtures/skills/cases`.

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a binary that cannot run fails the test"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use metaforge_test_support::peers::{self, Peer};

fn metaforge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_metaforge"))
}

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/skills/cases")
}

/// `metaforge skills ARGS` over `home`, with `extra` as METAFORGE_SKILLS_DIRS.
fn skills(home: &Path, extra: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut command = metaforge();
    command
        .arg("skills")
        .args(args)
        .env("METAFORGE_HOME", home)
        .env_remove("METAFORGE_SKILLS_DIRS");
    if let Some(extra) = extra {
        command.env("METAFORGE_SKILLS_DIRS", extra);
    }
    let out = command.output().expect("run metaforge skills");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn skills_validate_agrees_with_the_reference_validator_on_every_case() {
    let Some(reference) = peers::require(Peer::SkillsRef) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 15, "{dirs:?}");
    let mut disagreements = Vec::new();
    let (mut valid, mut invalid) = (0, 0);
    for dir in &dirs {
        let ours = skills(home.path(), None, &["validate", dir.to_str().unwrap()]);
        let theirs = Command::new("node")
            .arg(&reference)
            .arg("validate")
            .arg(dir)
            .output()
            .expect("run skills-ref");
        let theirs_ok = theirs.status.success();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        println!(
            "{name:>28}  metaforge: {:7}  skills-ref: {}",
            if ours.0 == 0 { "valid" } else { "invalid" },
            if theirs_ok { "valid" } else { "invalid" }
        );
        assert!(ours.0 == 0 || ours.0 == 1, "{name}: exit {} {}", ours.0, ours.2);
        if (ours.0 == 0) != theirs_ok {
            disagreements.push(format!(
                "{name}: metaforge {} / skills-ref {}\n{}\n{}",
                ours.0,
                theirs.status,
                ours.2,
                String::from_utf8_lossy(&theirs.stderr)
            ));
        }
        if ours.0 == 0 {
            valid += 1
        } else {
            invalid += 1
        }
        if ours.0 == 1 {
            assert!(ours.2.contains("SKILL.md"), "{name}: names the file: {}", ours.2);
        }
    }
    println!(
        "{} cases: {valid} valid, {invalid} invalid, {} disagreements",
        dirs.len(),
        disagreements.len()
    );
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n---\n"));
}

#[test]
fn an_invalid_skill_is_refused_with_file_and_line_and_a_path_without_one_is_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let dir = cases_dir().join("unexpected-field");
    let (code, _, err) = skills(
        home.path(),
        None,
        &["validate", dir.join("SKILL.md").to_str().unwrap()],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("unexpected-field/SKILL.md:4: unexpected field 'version'"),
        "{err}"
    );
    let (code, _, err) = skills(home.path(), None, &["validate", home.path().to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no SKILL.md there"), "{err}");
}

#[test]
fn the_catalogue_lists_bundled_skills_then_local_ones_replacing_them_and_names_refused_ones() {
    let home = tempfile::tempdir().unwrap();
    let (code, out, err) = skills(home.path(), None, &["list"]);
    assert_eq!(code, 0, "{err}");
    for name in [
        "flow-proposal-review",
        "gate-review-prep",
        "design-decision-record",
    ] {
        assert!(out.contains(name), "{out}");
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("design-decision-record") && l.contains("yes")),
        "commits: {out}"
    );
    // A local skill of the same name replaces the bundled one; an invalid one is listed as refused.
    let extra = tempfile::tempdir().unwrap();
    metaforge_test_support::skills::write_skill(
        extra.path(),
        "gate-review-prep",
        "Our own gate review.",
        "Ours.",
        &[("references/checklist.md", "- a\n")],
    );
    let broken = extra.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("SKILL.md"), "---\nname: broken\n---\n").unwrap();
    let (code, out, err) = skills(home.path(), Some(extra.path()), &["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# gate-review-prep from") && out.contains("replaces the one from bundled"),
        "{out}"
    );
    assert!(out.contains("# refused broken"), "{out}");
    assert!(out.contains("missing required field 'description'"), "{out}");
    let (code, out, _) = skills(home.path(), Some(extra.path()), &["show", "gate-review-prep"]);
    assert_eq!(code, 0);
    assert!(out.contains("description: Our own gate review."), "{out}");
    assert!(out.contains("file: references/checklist.md"), "{out}");
    let (code, _, err) = skills(home.path(), None, &["show", "no-such-skill"]);
    assert_eq!(code, 2);
    assert!(err.contains("known: design-decision-record"), "{err}");
}

#[test]
fn skills_new_writes_a_valid_skill_and_refuses_a_bad_name_or_an_existing_one() {
    let home = tempfile::tempdir().unwrap();
    let (code, out, err) = skills(home.path(), None, &["new", "bracket-check"]);
    assert_eq!(code, 0, "{err}");
    let created = home.path().join("skills/bracket-check");
    assert!(out.contains("bracket-check/SKILL.md"), "{out}");
    let (code, out, err) = skills(home.path(), None, &["validate", created.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = skills(home.path(), None, &["list"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = skills(home.path(), None, &["new", "bracket-check"]);
    assert_eq!(code, 2);
    assert!(err.contains("exists already"), "{err}");
    let (code, _, err) = skills(home.path(), None, &["new", "Bad_Name"]);
    assert_eq!(code, 2);
    assert!(err.contains("lowercase"), "{err}");
    assert!(!home.path().join("skills/Bad_Name").exists());
}
