//! Skills read off this machine's disk ([`DiskSkills`], the `SkillDirectories` port): each root
//! directory's subdirectories that hold `SKILL.md`, roots in order (a later one replaces an
//! earlier skill of the same name, as the catalogue layers them). A skill's other files are
//! listed and read up to a size, so they can be served on demand.

use std::path::{Path, PathBuf};

use metaforge_ports::{
    PortError, PortErrorKind, SKILL_MANIFEST, SkillDirectories, SkillFiles, SkillOrigin, SkillsFingerprint,
};

/// Most files listed per skill (a skill is a playbook, not a repository).
pub const MAX_FILES: usize = 1_000;
/// The largest file read into the catalogue (a larger one is listed, not served).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most bytes read per skill.
pub const MAX_SKILL_BYTES: u64 = 16 * 1024 * 1024;

/// Why a skill directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SkillReadError {
    /// A file or directory that exists could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The directory holds more files than a skill may.
    #[error("{}: holds more than {MAX_FILES} files; a skill is a playbook", path.display())]
    TooManyFiles {
        /// The skill directory.
        path: PathBuf,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SkillReadError + '_ {
    move |source| SkillReadError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The files of `dir` other than `SKILL.md`, relative to it, sorted.
fn files_of(dir: &Path) -> Result<Vec<String>, SkillReadError> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).map_err(io(&current))? {
            let entry = entry.map_err(io(&current))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io(&path))?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                let relative = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                if relative != SKILL_MANIFEST {
                    found.push(relative);
                }
            }
            if found.len() > MAX_FILES {
                return Err(SkillReadError::TooManyFiles { path: dir.to_owned() });
            }
        }
    }
    found.sort();
    Ok(found)
}

/// One skill directory (holding `SKILL.md`).
///
/// # Errors
/// A file that exists but cannot be read; more files than [`MAX_FILES`].
pub fn read_skill(dir: &Path) -> Result<SkillFiles, SkillReadError> {
    let manifest = dir.join(SKILL_MANIFEST);
    let text = std::fs::read_to_string(&manifest).map_err(io(&manifest))?;
    let directory = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let files = files_of(dir)?;
    let mut contents = std::collections::BTreeMap::new();
    let mut total = 0_u64;
    for relative in &files {
        let path = dir.join(relative);
        let size = std::fs::metadata(&path).map_err(io(&path))?.len();
        if size > MAX_FILE_BYTES || total + size > MAX_SKILL_BYTES {
            tracing::warn!(event = "skill_file_not_served", file = %path.display(), bytes = size, "a skill file over the size limit is listed but not served");
            continue;
        }
        total += size;
        contents.insert(relative.clone(), std::fs::read(&path).map_err(io(&path))?);
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
fn read_root(root: &Path) -> Result<Vec<SkillFiles>, SkillReadError> {
    if !root.exists() {
        return Ok(Vec::new());
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(io(root))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(SKILL_MANIFEST).is_file())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| read_skill(d)).collect()
}

/// The skill directories under these roots, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSkills {
    roots: Vec<PathBuf>,
}

impl DiskSkills {
    /// The skills under `roots`, later replacing earlier.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        Self { roots }
    }

    /// The roots of a process over `home`: `home/skills`, then each directory of `extra`
    /// (`METAFORGE_SKILLS_DIRS`, separated by `:`), in that order.
    pub fn of_home(home: &Path, extra: Option<&str>) -> Self {
        let mut roots = vec![home.join("skills")];
        roots.extend(
            extra
                .unwrap_or_default()
                .split(':')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from),
        );
        Self { roots }
    }

    /// The roots, in order.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }
}

impl SkillDirectories for DiskSkills {
    fn read(&self) -> Result<Vec<SkillFiles>, PortError> {
        let mut all = Vec::new();
        for root in &self.roots {
            all.extend(
                read_root(root)
                    .map_err(|e| PortError::with_source(PortErrorKind::Invalid, e.to_string(), e))?,
            );
        }
        Ok(all)
    }

    fn fingerprint(&self) -> SkillsFingerprint {
        let mut seen = Vec::new();
        let mut pending: Vec<PathBuf> = self.roots.clone();
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                let path = entry.path();
                match entry.metadata() {
                    Ok(meta) if meta.is_dir() => pending.push(path),
                    Ok(meta) => seen.push((path.display().to_string(), meta.len(), meta.modified().ok())),
                    Err(_) => {}
                }
            }
        }
        seen.sort();
        SkillsFingerprint(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_root_comes_first_then_each_extra_directory_in_order() {
        let skills = DiskSkills::of_home(Path::new("/h"), Some("/a: /b ::"));
        assert_eq!(
            skills.roots(),
            [
                PathBuf::from("/h/skills"),
                PathBuf::from("/a"),
                PathBuf::from("/b")
            ]
        );
    }

    #[test]
    fn a_missing_root_holds_no_skill_and_a_new_file_changes_the_fingerprint() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let skills = DiskSkills::new(vec![root.path().join("absent"), root.path().to_owned()]);
        assert_eq!(skills.read().map(|s| s.len()).ok(), Some(0));
        let before = skills.fingerprint();
        let dir = root.path().join("demo");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.join(SKILL_MANIFEST),
            "---\nname: demo\ndescription: d\n---\nSteps.\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(skills.fingerprint(), before);
        let read = skills.read().unwrap_or_default();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].directory, "demo");
    }
}
