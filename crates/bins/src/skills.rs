//! Reading skills off disk (issue 19): the sources of `app::skills::SkillCatalog` after the
//! bundled ones — `$METAFORGE_HOME/skills/` (default `~/.metaforge/skills/`), then each directory
//! of `METAFORGE_SKILLS_DIRS` (separated by `:`), in that order, later replacing earlier. A skill
//! directory is any subdirectory holding `SKILL.md`; its other files are listed (never read
//! here) so they can be opened on demand.

use std::path::{Path, PathBuf};

use metaforge_app::skills::{SkillCatalog, SkillFiles, SkillOrigin, bundled};
use metaforge_domain::skill::SKILL_FILE;

/// The extra skill directories, `:`-separated, read after the home's.
pub(crate) const SKILLS_DIRS_ENV: &str = "METAFORGE_SKILLS_DIRS";

/// Most files listed per skill (a skill is a playbook, not a repository).
const MAX_FILES: usize = 1_000;

/// Why a skill directory could not be read: the path and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub(crate) struct ReadError {
    /// Where.
    pub(crate) path: PathBuf,
    /// Why.
    pub(crate) reason: String,
}

fn read_error(path: &Path, e: &std::io::Error) -> ReadError {
    ReadError {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// The files of `dir` other than `SKILL.md`, relative to it, sorted.
fn files_of(dir: &Path) -> Result<Vec<String>, ReadError> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).map_err(|e| read_error(&current, &e))? {
            let entry = entry.map_err(|e| read_error(&current, &e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| read_error(&path, &e))?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                let relative = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                if relative != SKILL_FILE {
                    found.push(relative);
                }
            }
            if found.len() > MAX_FILES {
                return Err(ReadError {
                    path: dir.to_owned(),
                    reason: format!("holds more than {MAX_FILES} files; a skill is a playbook"),
                });
            }
        }
    }
    found.sort();
    Ok(found)
}

/// One skill directory (holding `SKILL.md`).
pub(crate) fn read_skill(dir: &Path) -> Result<SkillFiles, ReadError> {
    let skill_md = dir.join(SKILL_FILE);
    let text = std::fs::read_to_string(&skill_md).map_err(|e| read_error(&skill_md, &e))?;
    let directory = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(SkillFiles {
        origin: SkillOrigin::Directory(dir.display().to_string()),
        directory,
        skill_md: text,
        files: files_of(dir)?,
    })
}

/// Every skill directory under `root` (a missing root holds none).
fn read_root(root: &Path) -> Result<Vec<SkillFiles>, ReadError> {
    if !root.exists() {
        return Ok(Vec::new());
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| read_error(root, &e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(SKILL_FILE).is_file())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| read_skill(d)).collect()
}

/// The skill roots after the bundled skills, in order.
pub(crate) fn roots(home: &Path, extra: Option<&str>) -> Vec<PathBuf> {
    let mut roots = vec![home.join("skills")];
    roots.extend(
        extra
            .unwrap_or_default()
            .split(':')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from),
    );
    roots
}

/// The catalogue: the bundled skills, then every root's, each replacement logged.
pub(crate) fn catalog(roots: &[PathBuf]) -> Result<SkillCatalog, ReadError> {
    let mut sources = bundled();
    for root in roots {
        sources.extend(read_root(root)?);
    }
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

/// How often the skill directories are checked for changes.
const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// What the skill directories hold now: every file's path, size and modification time.
fn fingerprint(roots: &[PathBuf]) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut seen = Vec::new();
    let mut pending: Vec<PathBuf> = roots.to_vec();
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(path),
                Ok(meta) => seen.push((path, meta.len(), meta.modified().ok())),
                Err(_) => {}
            }
        }
    }
    seen.sort();
    seen
}

/// Re-reads the catalogue whenever a skill directory changes and puts it on `shelf` (the next
/// turn sees it; no restart). A catalogue that cannot be read keeps the one on the shelf.
pub(crate) fn watch(
    shelf: std::sync::Arc<metaforge_app::skills::SkillShelf>,
    roots: Vec<PathBuf>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = fingerprint(&roots);
        let mut every = tokio::time::interval(RELOAD_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let now = fingerprint(&roots);
            if now == last {
                continue;
            }
            last = now;
            match catalog(&roots) {
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
                    tracing::warn!(event = "skills_reload_failed", error = %e, "a skill directory changed but could not be read; the catalogue stays as it was")
                }
            }
        }
    })
}
