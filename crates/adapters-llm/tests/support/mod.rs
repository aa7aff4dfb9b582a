//! Test helpers shared by the adapter test binaries.

use std::path::PathBuf;

/// `<ancestor>/shared`, found by walking up from the crate until `shared/seeds` exists.
pub(crate) fn shared_dir() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let candidate = dir.join("shared");
        if candidate.join("seeds").is_dir() {
            return candidate;
        }
        assert!(
            dir.pop(),
            "no shared/seeds directory above {}",
            env!("CARGO_MANIFEST_DIR")
        );
    }
}
