//! The file-backed credential store (`~/.metaforge/credentials.json` or
//! `METAFORGE_CREDENTIALS_PATH`, the path passed in by the binary).
//!
//! The file is written 0600 through a temp file and an atomic rename, so a crash never leaves a
//! half-written store; a group- or world-readable file is refused on every read with an error
//! that says how to fix it. Writes are serialised in-process by a mutex.
//!
//! Reads are served from memory: every read stats the file (so a permission change is refused at
//! once) and parses it again only when its modification time, size or inode changed, so an
//! operator's edit (or `metaforge llm` in another process) is picked up on the next call while the
//! chat path pays one `stat` instead of a read and a parse per call.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use metaforge_ports::{Credential, CredentialStore, PortError, PortErrorKind, StoredCredential};
use serde::{Deserialize, Serialize};

/// On-disk shape: credentials per provider id, in rotation order.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CredentialFile {
    #[serde(default)]
    providers: BTreeMap<String, Vec<StoredCredential>>,
}

/// What identifies one version of the file on disk: a change of any part means "read it again".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode: meta.ino(),
        }
    }
}

/// Credentials kept in one JSON file.
#[derive(Debug)]
pub struct FileCredentialStore {
    path: PathBuf,
    lock: tokio::sync::Mutex<()>,
    /// The last parse and the version of the file it came from.
    cache: Mutex<Option<(Stamp, Arc<CredentialFile>)>>,
}

impl FileCredentialStore {
    /// A store at `path`; the file is created on first write.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            lock: tokio::sync::Mutex::new(()),
            cache: Mutex::new(None),
        }
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's metadata (`None` when there is no file), refusing a group- or world-readable one.
    fn checked_metadata(&self) -> Result<Option<std::fs::Metadata>, PortError> {
        let shown = self.path.display();
        let meta = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(PortError::with_source(
                    PortErrorKind::Unavailable,
                    format!("cannot read credentials file {shown}"),
                    e,
                ));
            }
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                format!(
                    "credentials file {shown} is readable by group or others (mode {mode:o}); \
                     refusing to use it: run `chmod 600 {shown}`"
                ),
            ));
        }
        Ok(Some(meta))
    }

    /// The file as it is on disk now: from memory when it has not changed since the last parse.
    fn current(&self) -> Result<Arc<CredentialFile>, PortError> {
        let Some(meta) = self.checked_metadata()? else {
            *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = None;
            return Ok(Arc::new(CredentialFile::default()));
        };
        let stamp = Stamp::of(&meta);
        if let Some((cached, file)) = &*self.cache.lock().unwrap_or_else(PoisonError::into_inner)
            && *cached == stamp
        {
            return Ok(Arc::clone(file));
        }
        // A change between the stat and the read only costs one more parse on the next call.
        let file = Arc::new(self.load()?);
        *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = Some((stamp, Arc::clone(&file)));
        Ok(file)
    }

    /// Reads and parses the file from disk (a missing file is an empty store).
    fn load(&self) -> Result<CredentialFile, PortError> {
        let shown = self.path.display();
        if self.checked_metadata()?.is_none() {
            return Ok(CredentialFile::default());
        }
        let text = std::fs::read_to_string(&self.path).map_err(|e| {
            PortError::with_source(
                PortErrorKind::Unavailable,
                format!("cannot read credentials file {shown}"),
                e,
            )
        })?;
        serde_json::from_str(&text).map_err(|e| {
            PortError::new(
                PortErrorKind::Corrupt,
                format!("{shown}:{}:{}: {e}", e.line(), e.column()),
            )
        })
    }

    fn save(&self, file: &CredentialFile) -> Result<(), PortError> {
        let shown = self.path.display().to_string();
        let io_err = |what: &str, e: std::io::Error| {
            PortError::with_source(
                PortErrorKind::Unavailable,
                format!("cannot {what} credentials file {shown}"),
                e,
            )
        };
        if let Some(dir) = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
        {
            // Owner-only (0700) like METAFORGE_HOME, whatever the umask.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| io_err("create the directory of", e))?;
        }
        let text = serde_json::to_string_pretty(file).map_err(|e| {
            PortError::new(PortErrorKind::Internal, format!("cannot encode credentials: {e}"))
        })?;
        let tmp = self.path.with_extension("json.tmp");
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_err("write", e))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err("set permissions on", e))?;
        out.write_all(text.as_bytes()).map_err(|e| io_err("write", e))?;
        out.sync_all().map_err(|e| io_err("sync", e))?;
        // The next read parses what was just written, whatever the clock's granularity.
        *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = None;
        std::fs::rename(&tmp, &self.path).map_err(|e| io_err("replace", e))
    }

    async fn update(
        &self,
        provider: &str,
        id: &str,
        change: impl FnOnce(&mut StoredCredential),
    ) -> Result<(), PortError> {
        let _guard = self.lock.lock().await;
        let mut file = self.load()?;
        let entry = file
            .providers
            .get_mut(provider)
            .and_then(|list| list.iter_mut().find(|c| c.credential.id == id))
            .ok_or_else(|| {
                PortError::new(
                    PortErrorKind::NotFound,
                    format!("no credential '{id}' for provider '{provider}'"),
                )
            })?;
        change(entry);
        self.save(&file)
    }
}

#[async_trait]
impl CredentialStore for FileCredentialStore {
    async fn list(&self, provider: &str) -> Result<Vec<StoredCredential>, PortError> {
        Ok(self
            .current()?
            .providers
            .get(provider)
            .cloned()
            .unwrap_or_default())
    }

    async fn add(&self, provider: &str, credential: Credential) -> Result<(), PortError> {
        if credential.id.trim().is_empty() {
            return Err(PortError::new(
                PortErrorKind::Invalid,
                "credential id must not be empty",
            ));
        }
        let _guard = self.lock.lock().await;
        let mut file = self.load()?;
        let list = file.providers.entry(provider.to_owned()).or_default();
        if list.iter().any(|c| c.credential.id == credential.id) {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "provider '{provider}' already has a credential '{}'",
                    credential.id
                ),
            ));
        }
        list.push(StoredCredential {
            credential,
            dead: false,
            dead_reason: None,
        });
        self.save(&file)
    }

    async fn mark_dead(&self, provider: &str, id: &str, reason: &str) -> Result<(), PortError> {
        self.update(provider, id, |c| {
            c.dead = true;
            c.dead_reason = Some(reason.to_owned());
        })
        .await
    }

    async fn mark_healthy(&self, provider: &str, id: &str) -> Result<(), PortError> {
        self.update(provider, id, |c| {
            c.dead = false;
            c.dead_reason = None;
        })
        .await
    }
}
