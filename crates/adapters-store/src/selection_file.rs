//! The harness selection as a small JSON file under `METAFORGE_HOME`, replaced atomically
//! (write a temporary file, fsync, rename) so a crash leaves the old or the new value, never half.
//! Every chat completion reads it, so a read is one `stat`: the value is parsed again only when
//! the file's modification time, size or inode changed (another process's `set` included).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use metaforge_ports::{PortError, PortErrorKind, SelectionStore};
use serde::{Deserialize, Serialize};

/// The file name used under `METAFORGE_HOME`.
pub const SELECTION_FILE: &str = "harness_selection.json";

#[derive(Debug, Serialize, Deserialize)]
struct SelectionDocument {
    selection: String,
}

/// What identifies one version of the file: a change of any part means "read it again".
type Stamp = (Option<SystemTime>, u64, u64);

/// A [`SelectionStore`] over one JSON file.
#[derive(Debug, Clone)]
pub struct FileSelectionStore {
    path: PathBuf,
    /// The last value read and the version of the file it came from.
    cache: Arc<Mutex<Option<(Stamp, String)>>>,
}

impl FileSelectionStore {
    /// A store at `path` (the file need not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            cache: Arc::new(Mutex::new(None)),
        }
    }

    /// Where the selection is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and parses the file (a missing file is no selection).
    async fn read(&self) -> Result<Option<String>, PortError> {
        match tokio::fs::read(&self.path).await {
            Ok(bytes) => serde_json::from_slice::<SelectionDocument>(&bytes)
                .map(|d| Some(d.selection))
                .map_err(|e| {
                    PortError::with_source(
                        PortErrorKind::Corrupt,
                        format!("the harness selection file {} is not valid", self.path.display()),
                        e,
                    )
                }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(io_error("read", &self.path, err)),
        }
    }
}

fn io_error(what: &str, path: &Path, err: std::io::Error) -> PortError {
    PortError::with_source(
        PortErrorKind::Unavailable,
        format!("cannot {what} {}", path.display()),
        err,
    )
}

#[async_trait]
impl SelectionStore for FileSelectionStore {
    async fn get(&self) -> Result<Option<String>, PortError> {
        use std::os::unix::fs::MetadataExt;
        let stamp = match std::fs::metadata(&self.path) {
            Ok(meta) => (meta.modified().ok(), meta.len(), meta.ino()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(io_error("read", &self.path, err)),
        };
        if let Some((cached, value)) = &*self.cache.lock().unwrap_or_else(PoisonError::into_inner)
            && *cached == stamp
        {
            return Ok(Some(value.clone()));
        }
        let value = self.read().await?;
        if let Some(value) = &value {
            *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = Some((stamp, value.clone()));
        }
        Ok(value)
    }

    async fn set(&self, route: &str) -> Result<(), PortError> {
        if route.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "the selection must not be empty",
            ));
        }
        let body = serde_json::to_vec_pretty(&SelectionDocument {
            selection: route.to_owned(),
        })
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, "cannot encode the selection", e))?;
        if let Some(parent) = self.path.parent() {
            crate::paths::create_private_dir(parent).map_err(|e| io_error("create", parent, e))?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || -> Result<(), PortError> {
            use std::io::Write;
            // Owner-only like every file under METAFORGE_HOME, whatever the umask.
            let _ = std::fs::remove_file(&tmp);
            crate::paths::ensure_private_file(&tmp).map_err(|e| io_error("write", &tmp, e))?;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&tmp)
                .map_err(|e| io_error("write", &tmp, e))?;
            file.write_all(&body).map_err(|e| io_error("write", &tmp, e))?;
            file.sync_all().map_err(|e| io_error("sync", &tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| io_error("replace", &path, e))
        })
        .await
        .map_err(|e| PortError::with_source(PortErrorKind::Internal, "the selection write task failed", e))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[tokio::test]
    async fn the_selection_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home").join(SELECTION_FILE);
        FileSelectionStore::new(path.clone())
            .set("openai:gpt-4o")
            .await
            .unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let parent = std::fs::metadata(dir.path().join("home")).unwrap();
        assert_eq!(parent.permissions().mode() & 0o777, 0o700);
    }

    #[tokio::test]
    async fn a_selection_set_by_another_process_is_read_although_an_older_one_was_cached() {
        let dir = tempfile::tempdir().unwrap();
        let serving = FileSelectionStore::new(dir.path().join(SELECTION_FILE));
        let other = FileSelectionStore::new(dir.path().join(SELECTION_FILE));
        other.set("openai:gpt-4o-mini").await.unwrap();
        assert_eq!(
            serving.get().await.unwrap().as_deref(),
            Some("openai:gpt-4o-mini")
        );
        assert_eq!(
            serving.get().await.unwrap().as_deref(),
            Some("openai:gpt-4o-mini")
        );
        other.set("anthropic:claude-haiku-4-5").await.unwrap();
        assert_eq!(
            serving.get().await.unwrap().as_deref(),
            Some("anthropic:claude-haiku-4-5")
        );
        std::fs::remove_file(dir.path().join(SELECTION_FILE)).unwrap();
        assert_eq!(
            serving.get().await.unwrap(),
            None,
            "a removed file is no selection"
        );
    }

    #[tokio::test]
    async fn a_selection_survives_a_new_store_on_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileSelectionStore::new(dir.path().join(SELECTION_FILE));
        assert_eq!(store.get().await.unwrap(), None);
        store.set("anthropic:claude-haiku-4-5-20251001").await.unwrap();
        let reopened = FileSelectionStore::new(dir.path().join(SELECTION_FILE));
        assert_eq!(
            reopened.get().await.unwrap().as_deref(),
            Some("anthropic:claude-haiku-4-5-20251001")
        );
        assert!(store.set(" ").await.is_err());
    }

    #[tokio::test]
    async fn a_damaged_file_is_reported_corrupt_not_read_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SELECTION_FILE);
        std::fs::write(&path, b"{not json").unwrap();
        let err = FileSelectionStore::new(path).get().await.unwrap_err();
        assert_eq!(err.kind, PortErrorKind::Corrupt);
    }
}
