//! The directory a tool server reads design files from (`--workspace DIR`, the servers-file
//! entry's `workspace`, which its sandbox binds read-only). A file is named relative to it and
//! never leads outside it; every refusal names the argument that named the file.

use std::path::{Path, PathBuf};

use crate::answer::Refusal;

/// A tool server's workspace.
#[derive(Debug, Clone)]
pub struct DesignWorkspace {
    root: PathBuf,
}

/// One file read from the workspace.
#[derive(Debug, Clone)]
pub struct DesignFile {
    /// Where it is (canonical).
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

impl DesignWorkspace {
    /// The workspace at `root`.
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// The text of `relative` (named by argument `field`), refused when it is outside the
    /// workspace, missing, larger than `max_bytes` or not text.
    pub(crate) fn read(&self, field: &str, relative: &str, max_bytes: u64) -> Result<DesignFile, Refusal> {
        let root = self.root.canonicalize().map_err(|e| {
            Refusal::argument(
                field,
                format!("the workspace {} cannot be read: {e}", self.root.display()),
            )
        })?;
        let path = root
            .join(relative)
            .canonicalize()
            .map_err(|e| Refusal::argument(field, format!("{relative}: {e}")))?;
        if !path.starts_with(&root) {
            return Err(Refusal::argument(
                field,
                format!("{relative} leads outside the workspace"),
            ));
        }
        let size = std::fs::metadata(&path)
            .map_err(|e| Refusal::argument(field, format!("{relative}: {e}")))?
            .len();
        if size > max_bytes {
            return Err(Refusal::argument(
                field,
                format!("{relative} is {size} bytes; the largest file read is {max_bytes}"),
            ));
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Refusal::argument(field, format!("{relative} is not a text file: {e}")))?;
        Ok(DesignFile { path, text })
    }

    /// The text of the file beside `file` with extension `extension` (a board's project file),
    /// when there is one inside the workspace.
    pub(crate) fn sibling(&self, file: &Path, extension: &str, max_bytes: u64) -> Option<DesignFile> {
        let path = file.with_extension(extension);
        let root = self.root.canonicalize().ok()?;
        let path = path.canonicalize().ok()?;
        if !path.starts_with(&root) || std::fs::metadata(&path).ok()?.len() > max_bytes {
            return None;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        Some(DesignFile { path, text })
    }
}

/// The refusal of a file-reading tool on a server started without a workspace.
pub(crate) fn no_workspace(field: &str, server: &str) -> Refusal {
    Refusal::argument(
        field,
        format!(
            "this {server} server has no workspace: give its servers-file entry a \"workspace\" and the args [\"tool-server\", \"{server}\", \"--workspace\", DIR]"
        ),
    )
}
