//! `cargo xtask doc-check`: `docs/ARCHITECTURE.md` may only name paths and identifiers that exist.
//!
//! Every code span (text in backticks) is read as one of:
//! - a path (it starts with a top-level directory of the repository, such as `crates/` or
//!   `fixtures/`): it must exist; `{a,b}` alternatives are expanded and a trailing `:LINE` or
//!   `:LINE-LINE` is ignored;
//! - a Rust identifier (a `CamelCase` type, a `snake_case()` function, or a `a::b::c` path): its
//!   last segment must occur as a whole word in the workspace's Rust sources;
//! - anything else (commands, env variables, metric names, JSON): not checked.
//!
//! A document that names something that was renamed or deleted fails CI, so the map cannot drift
//! from the code silently. The same check holds the README's `## Configuration` table to the code:
//! every `METAFORGE_*`/`HARNESS_*` variable a source file names in a string literal must be listed
//! there (literally or by a `<PLACEHOLDER>`/`*` pattern), and the table itself must be exactly
//! the one generated from `crates/bins/src/settings/variables.rs` (the list the binary's
//! `Settings` is read against); `cargo xtask doc-check --write` regenerates it in place.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The binary's list of variables, compiled here from the same file (no second copy).
#[path = "../../crates/bins/src/settings/variables.rs"]
mod variables;

/// The lines that fence the generated table in README.md.
const TABLE_BEGIN: &str = "<!-- generated from crates/bins/src/settings/variables.rs by `cargo xtask doc-check --write`; edit that file -->";
const TABLE_END: &str = "<!-- end of the generated table -->";

/// The top-level directories a path in the document may start with.
const ROOTS: &[&str] = &["crates/", "fixtures/", "deploy/", "docs/", "xtask/", ".ci/"];

/// Checks `docs/ARCHITECTURE.md` against the tree rooted at the current directory.
pub(crate) fn run(write: bool) -> Result<()> {
    let root = PathBuf::from(".");
    if write {
        let readme = std::fs::read_to_string(root.join("README.md")).context("cannot read README.md")?;
        let updated = with_generated_table(&readme).context("README.md")?;
        if updated != readme {
            std::fs::write(root.join("README.md"), updated).context("cannot write README.md")?;
            eprintln!("xtask: doc-check: README.md's Configuration table regenerated");
        }
    }
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md"))
        .context("cannot read docs/ARCHITECTURE.md")?;
    let words = source_words(&root)?;
    let mut problems = check(&doc, &root, &words);
    let readme = std::fs::read_to_string(root.join("README.md")).context("cannot read README.md")?;
    problems.extend(
        undocumented_variables(&root, configuration_section(&readme))?
            .into_iter()
            .map(|name| {
                format!("README.md: the code reads `{name}`, the Configuration table does not list it")
            }),
    );
    match with_generated_table(&readme) {
        Ok(expected) if expected == readme => {}
        Ok(_) => problems.push(
            "README.md: the Configuration table differs from crates/bins/src/settings/variables.rs; run `cargo xtask doc-check --write`"
                .to_owned(),
        ),
        Err(e) => problems.push(format!("README.md: {e}")),
    }
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("doc-check: {problem}");
        }
        bail!(
            "{} problem(s): ARCHITECTURE.md names what does not exist, or README.md's Configuration misses a variable",
            problems.len()
        );
    }
    eprintln!("xtask: doc-check ok");
    Ok(())
}

/// Every problem in `doc`, as `line N: … ` messages.
fn check(doc: &str, root: &Path, words: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut in_fence = false;
    for (number, line) in doc.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for span in code_spans(line) {
            if let Some(problem) = check_span(span, root, words) {
                problems.push(format!("line {}: `{span}`: {problem}", number + 1));
            }
        }
    }
    problems
}

/// The text between each pair of single backticks on one line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

fn check_span(span: &str, root: &Path, words: &BTreeSet<String>) -> Option<String> {
    let span = span.trim();
    if ROOTS.iter().any(|r| span.starts_with(r)) && !span.contains(' ') {
        let missing: Vec<String> = expand(strip_line_ref(span))
            .into_iter()
            .filter(|p| !exists(root, p))
            .collect();
        return (!missing.is_empty()).then(|| format!("no such path: {}", missing.join(", ")));
    }
    let name = identifier(span)?;
    (!words.contains(name)).then(|| format!("no Rust item or word `{name}` in the sources"))
}

/// True when `path` exists; a `*` in its last component matches any run of characters, and the
/// pattern exists when at least one entry matches.
fn exists(root: &Path, path: &str) -> bool {
    let full = root.join(path);
    let Some(pattern) = full
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.contains('*'))
    else {
        return full.exists();
    };
    let Some((prefix, suffix)) = pattern.split_once('*') else {
        return full.exists();
    };
    let Some(parent) = full.parent() else {
        return false;
    };
    std::fs::read_dir(parent).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix)
            })
        })
    })
}

/// Drops a `:12` or `:12-40` line reference.
fn strip_line_ref(span: &str) -> &str {
    match span.rsplit_once(':') {
        Some((path, lines)) if !lines.is_empty() && lines.chars().all(|c| c.is_ascii_digit() || c == '-') => {
            path
        }
        _ => span,
    }
}

/// Expands one `{a,b,c}` group (the only form the document uses).
fn expand(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
        return vec![path.to_owned()];
    };
    if close < open {
        return vec![path.to_owned()];
    }
    let (head, tail) = (&path[..open], &path[close + 1..]);
    path[open + 1..close]
        .split(',')
        .flat_map(|alt| expand(&format!("{head}{}{tail}", alt.trim())))
        .collect()
}

/// The name a code span refers to, when it looks like a Rust identifier or path.
fn identifier(span: &str) -> Option<&str> {
    let (span, call) = match span.strip_suffix("()") {
        Some(name) => (name, true),
        None => (span, false),
    };
    let last = span.rsplit("::").next()?;
    let is_word = !last.is_empty() && last.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !is_word || last.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    let camel = last.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && last.chars().any(|c| c.is_ascii_lowercase())
        && !last.contains('_');
    (span.contains("::") || camel || call).then_some(last)
}

/// `readme` with the text between the table's fences replaced by the generated table.
fn with_generated_table(readme: &str) -> Result<String> {
    let begin = readme
        .find(TABLE_BEGIN)
        .with_context(|| format!("no line `{TABLE_BEGIN}`"))?;
    let after_begin = begin + TABLE_BEGIN.len();
    let end = readme[after_begin..]
        .find(TABLE_END)
        .map(|i| after_begin + i)
        .with_context(|| format!("no line `{TABLE_END}` after the table's first fence"))?;
    Ok(format!(
        "{}\n{}{}",
        &readme[..after_begin],
        variables::markdown_table(),
        &readme[end..]
    ))
}

/// The README's `## Configuration` section (empty when there is none, so every variable fails).
fn configuration_section(readme: &str) -> &str {
    let Some(start) = readme.find("\n## Configuration") else {
        return "";
    };
    let rest = &readme[start + 1..];
    rest.find("\n## ").map_or(rest, |end| &rest[..end])
}

/// Every `METAFORGE_*`/`HARNESS_*` variable named in the crates' and xtask's sources that the
/// README does not list, literally or through a pattern (`METAFORGE_ROUTE_<ROLE>`,
/// `METAFORGE_BENCH_*`).
fn undocumented_variables(root: &Path, readme: &str) -> Result<Vec<String>> {
    let mut sources = BTreeSet::new();
    for dir in ["crates", "xtask"] {
        collect_in(&root.join(dir), &mut sources, &|path| {
            path.extension().is_some_and(|e| e == "rs") && path.components().any(|c| c.as_os_str() == "src")
        })?;
    }
    let named: BTreeSet<String> = sources
        .iter()
        .flat_map(|text| string_literal_variables(text))
        .collect();
    let patterns: Vec<(String, String)> = readme
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '<' | '>' | '*')))
        .filter_map(|token| {
            if let Some((head, rest)) = token.split_once('<') {
                let tail = rest.split_once('>').map_or("", |(_, tail)| tail);
                Some((head.to_owned(), tail.to_owned()))
            } else {
                token
                    .strip_suffix('*')
                    .map(|head| (head.to_owned(), String::new()))
            }
        })
        .filter(|(head, _)| head.starts_with("METAFORGE_") || head.starts_with("HARNESS_"))
        .collect();
    let listed = |name: &str| {
        (name.starts_with("METAFORGE_") && !variables::is_unknown(name))
            || variables::is_listed(name)
            || readme
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|w| w == name)
            || patterns
                .iter()
                .any(|(head, tail)| name.starts_with(head.as_str()) && name.ends_with(tail.as_str()))
    };
    Ok(named.into_iter().filter(|name| !listed(name)).collect())
}

/// Every word (identifier-shaped token) in the workspace's Rust sources and manifests.
fn source_words(root: &Path) -> Result<BTreeSet<String>> {
    let mut words = BTreeSet::new();
    for dir in ["crates", "xtask"] {
        collect(&root.join(dir), &mut words)?;
    }
    // Lint names and settings live in the workspace manifest and clippy.toml.
    for file in ["Cargo.toml", "clippy.toml"] {
        if let Ok(text) = std::fs::read_to_string(root.join(file)) {
            add_words(&text, &mut words);
        }
    }
    Ok(words)
}

fn add_words(text: &str, words: &mut BTreeSet<String>) {
    words.extend(
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .map(str::to_owned),
    );
}

fn collect(dir: &Path, words: &mut BTreeSet<String>) -> Result<()> {
    let mut texts = BTreeSet::new();
    collect_in(dir, &mut texts, &|path| {
        path.extension().is_some_and(|e| e == "rs" || e == "toml")
    })?;
    for text in &texts {
        add_words(text, words);
    }
    Ok(())
}

/// The `METAFORGE_*`/`HARNESS_*` names that open a string literal in `text` (a variable the code
/// reads, or a prefix it builds names from), ignoring those only mentioned in comments.
fn string_literal_variables(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .filter(|piece| piece.starts_with("METAFORGE_") || piece.starts_with("HARNESS_"))
        .map(|piece| {
            piece
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| name.len() > 10)
        .collect()
}

/// Every wanted file's text under `dir` (build output skipped).
fn collect_in(dir: &Path, texts: &mut BTreeSet<String>, wanted: &dyn Fn(&Path) -> bool) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            collect_in(&path, texts, wanted)?;
        } else if wanted(&path) {
            texts.insert(
                std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?,
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn a_missing_path_and_a_missing_identifier_are_reported_and_real_ones_pass() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let doc = "see `xtask/src/doc_check.rs:10-20` and `crates/{ports,domain}/Cargo.toml` `xtask/src/*.rs`\n\
                   `crates/nope.rs` · `ApprovalRecord` · `Gone` · `ports::canonical::sha256_hex` · `run()`\n\
                   ```\n`crates/inside/a/fence.rs`\n```\n`METAFORGE_HOME` `cargo xtask ci`";
        let problems = check(doc, &root, &words(&["ApprovalRecord", "sha256_hex", "run"]));
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].contains("crates/nope.rs"), "{problems:#?}");
        assert!(problems[1].contains("`Gone`"), "{problems:#?}");
    }
}
