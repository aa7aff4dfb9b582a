//! Skill directories for tests: a `SKILL.md` with the frontmatter filled in, and any files
//! beside it.
#![expect(
    clippy::expect_used,
    reason = "test helper: a fixture that cannot be written fails the test"
)]

use std::path::{Path, PathBuf};

/// Writes `root/<name>/SKILL.md` (name, `description`, then `body`) and each `(path, text)` of
/// `files` under it; answers the skill's directory.
pub fn write_skill(
    root: &Path,
    name: &str,
    description: &str,
    body: &str,
    files: &[(&str, &str)],
) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("create the skill directory");
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"),
    )
    .expect("write SKILL.md");
    for (path, text) in files {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).expect("create the file's directory");
        }
        std::fs::write(file, text).expect("write a skill file");
    }
    dir
}
