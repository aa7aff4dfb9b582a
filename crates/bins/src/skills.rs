//! The skills of a process over its home: the machine's skill directories — `$METAFORGE_HOME/skills/`
//! (default `~/.metaforge/skills/`), then each directory of `METAFORGE_SKILLS_DIRS` (separated by
//! `:`), later replacing earlier (`metaforge_adapters_store::skill_dirs::DiskSkills`) — after the
//! bundled ones, on the catalogue's shelf (`metaforge_app::skills`), read again when they change.

use std::path::Path;
use std::sync::Arc;

use metaforge_adapters_store::skill_dirs::DiskSkills;
use metaforge_app::skills::SkillShelf;
use metaforge_ports::PortError;

/// The catalogue of a process over `home` on a shelf, and the task that re-reads it when a
/// skill directory changes (aborted with its handle).
pub(crate) fn shelf(
    home: &Path,
    extra_dirs: Option<&str>,
) -> Result<(Arc<SkillShelf>, tokio::task::JoinHandle<()>), PortError> {
    metaforge_app::skills::shelf(Arc::new(DiskSkills::of_home(home, extra_dirs)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use metaforge_app::skills::{catalog, watch};
    use metaforge_ports::SkillDirectories;

    fn write_skill(root: &Path, name: &str, description: &str) {
        metaforge_test_support::skills::write_skill(root, name, description, "Steps.", &[]);
    }

    #[tokio::test]
    async fn a_skill_written_while_the_process_runs_is_offered_without_a_restart() {
        let root = tempfile::tempdir().unwrap();
        let directories: Arc<dyn SkillDirectories> = Arc::new(DiskSkills::new(vec![root.path().to_owned()]));
        let seen = directories.fingerprint();
        let shelf = Arc::new(SkillShelf::new(catalog(directories.as_ref()).unwrap()));
        assert!(shelf.current().get("late-skill").is_none());
        let watcher = watch(Arc::clone(&shelf), directories, seen);
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
}
