//! Reading skills off disk (issue 19): the sources of `app::skills::SkillCatalog` after the
//! bundled ones — `$METAFORGE_HOME/skills/` (default `~/.metaforge/skills/`), then each directory
//! of `METAFORGE_SKILLS_DIRS` (separated by `:`), in that order, later replacing earlier. A skill
//! directory is any subdirectory holding `SKILL.md`; its other files are listed (never read
//! here) so they can be opened on demand.

use std::path::{Path, PathBuf};

use metaforge_app::skills::{SkillCatalog, SkillFiles, SkillOrigin, bundled};
use metaforge_domain::skill::SKILL_FILE;

/// Most files listed per skill (a skill is a playbook, not a repository).
const MAX_FILES: usize = 1_000;
/// The largest file read into the catalogue (a larger one is listed, not served).
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most bytes read per skill.
const MAX_SKILL_BYTES: u64 = 16 * 1024 * 1024;

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
    let files = files_of(dir)?;
    let mut contents = std::collections::BTreeMap::new();
    let mut total = 0_u64;
    for relative in &files {
        let path = dir.join(relative);
        let size = std::fs::metadata(&path).map_err(|e| read_error(&path, &e))?.len();
        if size > MAX_FILE_BYTES || total + size > MAX_SKILL_BYTES {
            tracing::warn!(event = "skill_file_not_served", file = %path.display(), bytes = size, "a skill file over the size limit is listed but not served");
            continue;
        }
        total += size;
        contents.insert(
            relative.clone(),
            std::fs::read(&path).map_err(|e| read_error(&path, &e))?,
        );
    }
    Ok(SkillFiles {
        origin: SkillOrigin::Directory(dir.display().to_string()),
        directory,
        skill_md: text,
        files,
        contents,
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

/// The catalogue of a process over `home` (bundled, `home/skills`, `METAFORGE_SKILLS_DIRS`) on
/// a shelf, and the task that re-reads it when a directory changes (aborted with its handle).
pub(crate) fn shelf(
    home: &Path,
    extra_dirs: Option<&str>,
) -> Result<
    (
        std::sync::Arc<metaforge_app::skills::SkillShelf>,
        tokio::task::JoinHandle<()>,
    ),
    ReadError,
> {
    let roots = roots(home, extra_dirs);
    let seen = snapshot(&roots);
    let shelf = std::sync::Arc::new(metaforge_app::skills::SkillShelf::new(catalog(&roots)?));
    let reload = watch(std::sync::Arc::clone(&shelf), roots, seen);
    Ok((shelf, reload))
}

/// How often the skill directories are checked for changes.
const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// What the skill directories held at one moment: every file's path, size and modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot(Vec<(PathBuf, u64, Option<std::time::SystemTime>)>);

/// What the skill directories hold now. Take it BEFORE reading the catalogue it is to guard, so
/// a change made in between is seen as a change (one extra reload), never missed.
pub(crate) fn snapshot(roots: &[PathBuf]) -> Snapshot {
    Snapshot(fingerprint(roots))
}

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

/// Re-reads the catalogue whenever a skill directory changes from `seen` (the [`snapshot`] taken
/// before the shelf's catalogue was read) and puts it on `shelf`: the next turn sees it, no
/// restart. A catalogue that cannot be read keeps the one on the shelf.
pub(crate) fn watch(
    shelf: std::sync::Arc<metaforge_app::skills::SkillShelf>,
    roots: Vec<PathBuf>,
    seen: Snapshot,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = seen.0;
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn write_skill(root: &Path, name: &str, description: &str) {
        metaforge_test_support::skills::write_skill(root, name, description, "Steps.", &[]);
    }

    #[tokio::test]
    async fn a_skill_written_while_the_process_runs_is_offered_without_a_restart() {
        let root = tempfile::tempdir().unwrap();
        let roots = vec![root.path().to_owned()];
        let seen = snapshot(&roots);
        let shelf = Arc::new(metaforge_app::skills::SkillShelf::new(catalog(&roots).unwrap()));
        assert!(shelf.current().get("late-skill").is_none());
        let watcher = watch(Arc::clone(&shelf), roots, seen);
        write_skill(root.path(), "late-skill", "Written after start.");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while shelf.current().get("late-skill").is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the new skill was never offered"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A change to it replaces it whole.
        write_skill(root.path(), "late-skill", "Edited.");
        while shelf
            .current()
            .get("late-skill")
            .is_some_and(|s| s.skill.description != "Edited.")
        {
            assert!(
                tokio::time::Instant::now() < deadline + Duration::from_secs(5),
                "the edit was never read"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        watcher.abort();
    }

    #[test]
    fn the_home_root_comes_first_then_each_extra_directory_in_order() {
        let roots = roots(Path::new("/h"), Some("/a: /b ::"));
        assert_eq!(
            roots,
            [
                PathBuf::from("/h/skills"),
                PathBuf::from("/a"),
                PathBuf::from("/b")
            ]
        );
    }
}
