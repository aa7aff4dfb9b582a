//! Skills as their sources offer them (Agent Skills directories), and the port a catalogue reads
//! the machine's skill directories through: the catalogue's rules (layering, validation) are the
//! services', reading directories off a disk is an adapter's.

use std::collections::BTreeMap;

use crate::PortError;

/// Where a skill came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum SkillOrigin {
    /// Shipped inside the binary.
    Bundled,
    /// A directory on this machine (the home's or one of `METAFORGE_SKILLS_DIRS`).
    Directory(String),
    /// An MCP tool server that serves it over the Skills extension (its configured name).
    Server(String),
}

impl SkillOrigin {
    /// How a person reads it.
    pub fn label(&self) -> String {
        match self {
            Self::Bundled => "bundled".to_owned(),
            Self::Directory(path) => path.clone(),
            Self::Server(name) => format!("mcp server {name}"),
        }
    }
}

/// One skill directory as a source offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFiles {
    /// Its source.
    pub origin: SkillOrigin,
    /// The directory's name (the skill's name must match it).
    pub directory: String,
    /// The text of its `SKILL.md`.
    pub skill_md: String,
    /// Its other files, relative to the directory (`references/…`, `scripts/…`, `assets/…`).
    pub files: Vec<String>,
    /// Those files' bytes, by relative path, as the source read them (a file the source could
    /// not read whole is listed in `files` and absent here).
    pub contents: BTreeMap<String, Vec<u8>>,
}

/// What a set of skill directories held at one moment (every file's path, size and
/// modification time): two that differ mean a file was added, removed or changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SkillsFingerprint(pub Vec<(String, u64, Option<std::time::SystemTime>)>);

/// The skill directories of this machine, in the order a later one replaces an earlier one.
pub trait SkillDirectories: Send + Sync {
    /// Every skill the directories hold now (a missing directory holds none).
    ///
    /// # Errors
    /// A directory or file that exists but cannot be read (`Invalid`, naming the path).
    fn read(&self) -> Result<Vec<SkillFiles>, PortError>;

    /// What they hold now. Taken before a [`read`](Self::read) it guards, a change made in
    /// between shows as a change (one extra reload), never a missed one.
    fn fingerprint(&self) -> SkillsFingerprint;
}
