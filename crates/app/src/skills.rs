//! The skill catalogue (issue 19): the skills every source offers, layered — the bundled ones
//! (embedded in the binary), then `~/.metaforge/skills/`, then each directory of
//! `METAFORGE_SKILLS_DIRS` — a later source's skill replacing an earlier one of the same name
//! (each replacement recorded, for the log). Every skill is checked with the one rule,
//! [`metaforge_domain::skill::parse_skill`]; a refused one is listed with its problems and never
//! offered.
//!
//! Reading directories is the binary's (`bins/src/skills.rs`): this module sees files as text.
//!
//! # Design notes
//!
//! (Moved here from `docs/ARCHITECTURE.md`, which is now a code map.)
//!
//! ## Skills (issue 19) — `domain::skill`, `app::skills`, `app::tools::skill_tools`, `adapters-mcp` skills, `bins/src/skills.rs`, `metaforge skills`
//!
//! - **The rule** `metaforge_domain::skill::parse_skill(directory, text)`: the Agent Skills
//!   frontmatter (`name` matching the directory, lowercase letters/digits/single hyphens, ≤ 64;
//!   `description` ≤ 1024; `compatibility` ≤ 500; `metadata` string → string; `allowed-tools`
//!   space-delimited; no other field) — the skill, or every problem with its line, never a half.
//!   MetaForge's own keys live under `metadata` (`metaforge-commits`, `metaforge-disciplines`).
//!   One case table (`fixtures/rules/skill_format.json` over the directories of
//!   `fixtures/skills/cases`) drives the domain test and the comparison with the reference validator
//!   (`crates/bins/tests/it/skills_cli.rs`, npm `skills-ref`: the same verdict on every case).
//! - **The catalogue** `app::skills::SkillCatalog::layer`: bundled skills (`crates/app/skills/{flow-proposal-review,gate-review-prep,design-decision-record}/SKILL.md`,
//!   embedded by `include_str!`), then `$METAFORGE_HOME/skills/`, then `METAFORGE_SKILLS_DIRS`;
//!   later replaces earlier (recorded, logged `skill_overridden`); refused skills are listed with
//!   their problems (`skill_refused`) and never offered. `SkillShelf` holds the current catalogue;
//!   the binary re-reads the directories when a file in them changes (`bins/src/skills.rs`,
//!   polled every 2 s, `skills_reloaded`) and swaps it whole.
//! - **In the agent loop** (`app::tools::skill_tools`, composed by `ToolRegistryBuilder::skills` in
//!   `bins/src/tool_servers.rs`, so chat threads and phase turns both get it): progressive
//!   disclosure — only names and descriptions, in the descriptions of two native tools (native, so
//!   the tool cap keeps them): `skills.activate` for skills that do not commit, and
//!   `skills.activate_committing`, declared in the ask tier, so every activation of a committing
//!   skill is held for a person (FORGE-97). The activation answers the body and the skill's file
//!   list; `skills.read` (offered when some skill has files) reads one of them on demand (text, cut
//!   at 64 K characters, said so); from the next step the turn's tools are narrowed to the skill's
//!   `allowed-tools` plus the skill tools (a call outside is the loop's `unknown_tool`).
//! - **Over MCP, both ways.** Serving: the port's `ToolHost::skills` (`ServedSkill`: frontmatter and
//!   every file's bytes, `SKILL.md` first) is answered by `SidecarHost::with_skills` from the shelf;
//!   `crates/adapters-mcp/src/skills.rs` declares `io.modelcontextprotocol/skills` when there are
//!   skills, answers `skills/list`, `skills/get` (`skill://<name>/SKILL.md`; `-32602` otherwise) with
//!   a sha256 digest per file, lists each `SKILL.md` in `resources/list`, and serves
//!   `skill://<name>/<path>` through `resources/read` (text files only, so every listed digest can
//!   be checked). `up` and `mcp serve` (in-process mode) serve the process's catalogue.
//!   Consuming: `ToolSource::list_skills` (`McpToolServer`: only when the server declares the
//!   extension; every file read and checked with `SkillResource::verify`, a mismatch refuses the
//!   server's listing) — the registry lists them on every refresh and offers them as
//!   `<server>.<name>` after the same `parse_skill` (`SkillCatalog::from_server`), beside the local
//!   catalogue (`skill_catalog_of`), so a server's skill never replaces a local one.
//! - **Differs from the issue:** the committing activation is `requires_approval` but does not carry
//!   the `twin_write` gate: the grounding rule counts every successful `twin_write`-gated call as a
//!   commit, and an activation commits nothing itself (the writes its steps prescribe are twin tools,
//!   gated and grounded themselves). `gate-review-prep` names the run tools, which the sidecar serves
//!   to MCP clients but chat turns are not offered: in a chat turn only its twin steps run. Not built
//!   yet: binary skill files (listed, never served or
//!   read), skills in the sidecar's remote mode (`METAFORGE_GATEWAY_URL`), and a console page for
//!   skills.

use std::collections::BTreeMap;

use std::sync::Arc;

use metaforge_domain::skill::{Skill, SkillProblem, parse_skill};
use metaforge_ports::PortError;
pub use metaforge_ports::{SkillDirectories, SkillFiles, SkillOrigin, SkillsFingerprint};
use serde::Serialize;

/// A skill on offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedSkill {
    /// The skill.
    #[serde(flatten)]
    pub skill: Skill,
    /// Where it came from.
    pub origin: SkillOrigin,
    /// Its other files, relative to its directory.
    pub files: Vec<String>,
    /// The text of its `SKILL.md`, as read.
    #[serde(skip)]
    pub skill_md: String,
    /// Its other files' bytes, by relative path.
    #[serde(skip)]
    pub contents: BTreeMap<String, Vec<u8>>,
}

impl LoadedSkill {
    /// The skill as a host serves it over MCP: every frontmatter field, `SKILL.md` and the
    /// files the source read, `SKILL.md` first.
    pub fn served(&self) -> metaforge_ports::ServedSkill {
        use serde_json::Value;
        let skill = &self.skill;
        let mut frontmatter = serde_json::Map::new();
        frontmatter.insert("name".into(), Value::String(skill.name.clone()));
        frontmatter.insert("description".into(), Value::String(skill.description.clone()));
        if let Some(license) = &skill.license {
            frontmatter.insert("license".into(), Value::String(license.clone()));
        }
        if let Some(compatibility) = &skill.compatibility {
            frontmatter.insert("compatibility".into(), Value::String(compatibility.clone()));
        }
        if !skill.allowed_tools.is_empty() {
            frontmatter.insert(
                "allowed-tools".into(),
                Value::String(skill.allowed_tools.join(" ")),
            );
        }
        if !skill.metadata.is_empty() {
            let metadata = skill
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            frontmatter.insert("metadata".into(), Value::Object(metadata));
        }
        let mut files = vec![(
            metaforge_domain::skill::SKILL_FILE.to_owned(),
            self.skill_md.clone().into_bytes(),
        )];
        files.extend(
            self.contents
                .iter()
                .map(|(path, bytes)| (path.clone(), bytes.clone())),
        );
        metaforge_ports::ServedSkill {
            name: skill.name.clone(),
            description: skill.description.clone(),
            frontmatter,
            files,
        }
    }
}

/// A skill directory refused, with every problem of its `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedSkill {
    /// Its source.
    pub origin: SkillOrigin,
    /// The directory's name.
    pub directory: String,
    /// Every problem, each with its line.
    pub problems: Vec<SkillProblem>,
}

/// A skill replaced by a later source's skill of the same name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overridden {
    /// The name.
    pub name: String,
    /// The source it came from.
    pub replaced: SkillOrigin,
    /// The source that replaced it.
    pub by: SkillOrigin,
}

/// Every skill on offer, by name, and what was refused or replaced on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SkillCatalog {
    /// The skills on offer, by name.
    pub skills: BTreeMap<String, LoadedSkill>,
    /// The directories refused.
    pub refused: Vec<RefusedSkill>,
    /// The replacements, in the order they happened.
    pub overridden: Vec<Overridden>,
}

impl SkillCatalog {
    /// Layers `sources` in order (later replaces earlier).
    pub fn layer(sources: impl IntoIterator<Item = SkillFiles>) -> Self {
        let mut catalog = Self::default();
        for source in sources {
            match parse_skill(&source.directory, &source.skill_md) {
                Ok(skill) => {
                    let loaded = LoadedSkill {
                        skill,
                        origin: source.origin,
                        files: source.files,
                        skill_md: source.skill_md,
                        contents: source.contents,
                    };
                    if let Some(previous) = catalog.skills.insert(loaded.skill.name.clone(), loaded.clone()) {
                        catalog.overridden.push(Overridden {
                            name: loaded.skill.name.clone(),
                            replaced: previous.origin,
                            by: loaded.origin,
                        });
                    }
                }
                Err(problems) => catalog.refused.push(RefusedSkill {
                    origin: source.origin,
                    directory: source.directory,
                    problems,
                }),
            }
        }
        catalog
    }

    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&LoadedSkill> {
        self.skills.get(name)
    }

    /// The skills MCP server `server` serves, checked with the same rule as every other source
    /// and listed under the server's name (`<server>.<skill>`), so a server's skill never
    /// replaces a local one.
    pub fn from_server(server: &str, served: &[metaforge_ports::ServedSkill]) -> Self {
        let sources = served.iter().map(|skill| {
            let mut files = skill.files.iter();
            let manifest = files
                .next()
                .filter(|(path, _)| path == metaforge_domain::skill::SKILL_FILE)
                .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
                .unwrap_or_default();
            let contents: BTreeMap<String, Vec<u8>> = files.map(|(p, b)| (p.clone(), b.clone())).collect();
            SkillFiles {
                origin: SkillOrigin::Server(server.to_owned()),
                directory: skill.name.clone(),
                skill_md: manifest,
                files: contents.keys().cloned().collect(),
                contents,
            }
        });
        let mut catalog = Self::layer(sources);
        catalog.skills = std::mem::take(&mut catalog.skills)
            .into_iter()
            .map(|(name, skill)| (format!("{server}.{name}"), skill))
            .collect();
        catalog
    }

    /// This catalogue with `other`'s skills added (an entry of `other` replaces one of the same
    /// key) and its refusals appended.
    pub fn merged(&self, other: &Self) -> Self {
        let mut merged = self.clone();
        merged
            .skills
            .extend(other.skills.iter().map(|(k, v)| (k.clone(), v.clone())));
        merged.refused.extend(other.refused.iter().cloned());
        merged
    }
}

/// The catalogue a running process offers, replaced whole when its sources change (a reload
/// never shows a half-read catalogue: a turn reads one snapshot).
#[derive(Debug, Default)]
pub struct SkillShelf {
    current: std::sync::RwLock<std::sync::Arc<SkillCatalog>>,
}

impl SkillShelf {
    /// A shelf holding `catalog`.
    pub fn new(catalog: SkillCatalog) -> Self {
        Self {
            current: std::sync::RwLock::new(std::sync::Arc::new(catalog)),
        }
    }

    /// The catalogue now.
    pub fn current(&self) -> std::sync::Arc<SkillCatalog> {
        std::sync::Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Replaces the catalogue (a reload).
    pub fn replace(&self, catalog: SkillCatalog) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = std::sync::Arc::new(catalog);
    }
}

/// The skills this binary carries: the seed's own work, each usable with the tools MetaForge has.
const BUNDLED: [(&str, &str); 3] = [
    (
        "design-decision-record",
        include_str!("../skills/design-decision-record/SKILL.md"),
    ),
    (
        "flow-proposal-review",
        include_str!("../skills/flow-proposal-review/SKILL.md"),
    ),
    (
        "gate-review-prep",
        include_str!("../skills/gate-review-prep/SKILL.md"),
    ),
];

/// The bundled skills, as the first source of every catalogue.
pub fn bundled() -> Vec<SkillFiles> {
    BUNDLED
        .iter()
        .map(|(directory, text)| SkillFiles {
            origin: SkillOrigin::Bundled,
            directory: (*directory).to_owned(),
            skill_md: (*text).to_owned(),
            files: Vec::new(),
            contents: BTreeMap::new(),
        })
        .collect()
}

/// How often the skill directories are checked for changes.
pub const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The catalogue: the bundled skills, then every skill the machine's directories hold, each
/// replacement and refusal logged.
///
/// # Errors
/// A skill directory that exists but cannot be read.
pub fn catalog(directories: &dyn SkillDirectories) -> Result<SkillCatalog, PortError> {
    let mut sources = bundled();
    sources.extend(directories.read()?);
    let catalog = SkillCatalog::layer(sources);
    for replaced in &catalog.overridden {
        tracing::info!(
            event = "skill_overridden",
            skill = %replaced.name,
            replaced = %replaced.replaced.label(),
            by = %replaced.by.label(),
            "a later skill source replaces an earlier skill of the same name"
        );
    }
    for refused in &catalog.refused {
        tracing::warn!(
            event = "skill_refused",
            skill = %refused.directory,
            origin = %refused.origin.label(),
            problems = refused.problems.len(),
            "a skill was refused and is not offered"
        );
    }
    Ok(catalog)
}

/// The catalogue on a shelf, and the task that reads it again whenever the directories change
/// (aborted with its handle): the next turn sees the change, no restart.
///
/// # Errors
/// A skill directory that exists but cannot be read.
pub fn shelf(
    directories: Arc<dyn SkillDirectories>,
) -> Result<(Arc<SkillShelf>, tokio::task::JoinHandle<()>), PortError> {
    // The fingerprint is taken before the catalogue is read, so a change in between is one
    // extra reload, never a missed one.
    let seen = directories.fingerprint();
    let shelf = Arc::new(SkillShelf::new(catalog(directories.as_ref())?));
    let reload = watch(Arc::clone(&shelf), directories, seen);
    Ok((shelf, reload))
}

/// Re-reads the catalogue whenever the directories' fingerprint differs from `seen` and puts it
/// on `shelf`. A catalogue that cannot be read keeps the one on the shelf.
pub fn watch(
    shelf: Arc<SkillShelf>,
    directories: Arc<dyn SkillDirectories>,
    seen: SkillsFingerprint,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = seen;
        let mut every = tokio::time::interval(RELOAD_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let now = directories.fingerprint();
            if now == last {
                continue;
            }
            last = now;
            match catalog(directories.as_ref()) {
                Ok(fresh) => {
                    tracing::info!(
                        event = "skills_reloaded",
                        skills = fresh.skills.len(),
                        refused = fresh.refused.len(),
                        "a skill directory changed: the catalogue was read again"
                    );
                    shelf.replace(fresh);
                }
                Err(e) => {
                    tracing::warn!(event = "skills_reload_failed", error = %e, "a skill directory changed but could not be read; the catalogue stays as it was");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(origin: SkillOrigin, directory: &str, description: &str) -> SkillFiles {
        SkillFiles {
            origin,
            directory: directory.to_owned(),
            skill_md: format!("---\nname: {directory}\ndescription: {description}\n---\nbody\n"),
            files: Vec::new(),
            contents: BTreeMap::new(),
        }
    }

    #[test]
    fn every_bundled_skill_is_valid() {
        let catalog = SkillCatalog::layer(bundled());
        assert!(catalog.refused.is_empty(), "{:?}", catalog.refused);
        assert_eq!(catalog.skills.len(), BUNDLED.len());
        assert!(
            catalog
                .get("design-decision-record")
                .is_some_and(|s| s.skill.commits())
        );
        assert!(
            catalog
                .get("flow-proposal-review")
                .is_some_and(|s| !s.skill.commits())
        );
    }

    #[test]
    fn a_later_source_replaces_an_earlier_skill_and_the_replacement_is_recorded() {
        let home = SkillOrigin::Directory("/home/a/.metaforge/skills".into());
        let extra = SkillOrigin::Directory("/srv/skills".into());
        let catalog = SkillCatalog::layer([
            files(SkillOrigin::Bundled, "gate-review-prep", "bundled"),
            files(home.clone(), "gate-review-prep", "mine"),
            files(extra.clone(), "other", "another"),
        ]);
        assert_eq!(catalog.get("gate-review-prep").unwrap().skill.description, "mine");
        assert_eq!(
            catalog.overridden,
            [Overridden {
                name: "gate-review-prep".into(),
                replaced: SkillOrigin::Bundled,
                by: home
            }]
        );
        assert_eq!(catalog.skills.len(), 2);
    }

    #[test]
    fn a_refused_skill_is_listed_with_its_problems_and_never_offered() {
        let mut bad = files(SkillOrigin::Bundled, "bad", "x");
        bad.skill_md = "---\nname: Bad\n---\n".into();
        let catalog = SkillCatalog::layer([bad]);
        assert!(catalog.skills.is_empty());
        assert_eq!(catalog.refused.len(), 1);
        assert_eq!(catalog.refused[0].problems.len(), 2, "{:?}", catalog.refused);
    }
}
