//! The file credential store: written 0600, a group/world-readable file refused with a clear
//! error, several credentials per provider, dead/healthy marking that survives a reload.

use std::os::unix::fs::PermissionsExt;

use metaforge_adapters_llm::FileCredentialStore;
use metaforge_ports::{Credential, CredentialSecret, CredentialStore, PortErrorKind};

fn key(id: &str) -> Credential {
    Credential {
        id: id.into(),
        secret: CredentialSecret::ApiKey {
            api_key: format!("sk-{id}"),
        },
    }
}

#[tokio::test]
async fn the_file_is_written_0600_and_holds_several_credentials_per_provider_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/credentials.json");
    let store = FileCredentialStore::new(&path);
    store.add("openai", key("a")).await.unwrap();
    store.add("openai", key("b")).await.unwrap();
    store.add("anthropic", key("c")).await.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let reopened = FileCredentialStore::new(&path);
    let ids: Vec<_> = reopened
        .healthy("openai")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["a", "b"]);
    assert_eq!(reopened.list("gemini").await.unwrap(), vec![]);
}

#[tokio::test]
async fn a_duplicate_id_is_a_conflict_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.json");
    let store = FileCredentialStore::new(&path);
    store.add("openai", key("a")).await.unwrap();
    let before = std::fs::read(&path).unwrap();
    let err = store.add("openai", key("a")).await.unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Conflict);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn mark_dead_removes_a_credential_from_rotation_until_marked_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.json");
    let store = FileCredentialStore::new(&path);
    store.add("openai", key("a")).await.unwrap();
    store.add("openai", key("b")).await.unwrap();
    store
        .mark_dead("openai", "a", "auth (HTTP 401): invalid key")
        .await
        .unwrap();
    let reopened = FileCredentialStore::new(&path);
    let ids: Vec<_> = reopened
        .healthy("openai")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["b"]);
    let listed = reopened.list("openai").await.unwrap();
    assert!(listed[0].dead);
    assert_eq!(
        listed[0].dead_reason.as_deref(),
        Some("auth (HTTP 401): invalid key")
    );
    reopened.mark_healthy("openai", "a").await.unwrap();
    assert_eq!(reopened.healthy("openai").await.unwrap().len(), 2);
    let missing = reopened.mark_dead("openai", "zz", "x").await.unwrap_err();
    assert_eq!(missing.kind, PortErrorKind::NotFound);
}

#[tokio::test]
async fn a_group_or_world_readable_file_is_refused_with_the_fix_in_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.json");
    let store = FileCredentialStore::new(&path);
    store.add("openai", key("a")).await.unwrap();
    for mode in [0o640, 0o604, 0o644] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = store.list("openai").await.unwrap_err();
        assert_eq!(err.kind, PortErrorKind::Invalid);
        assert!(err.message.contains("chmod 600"), "{}", err.message);
        assert!(err.message.contains(&path.display().to_string()));
        let err = store.add("openai", key("b")).await.unwrap_err();
        assert_eq!(
            err.kind,
            PortErrorKind::Invalid,
            "a refused file is never written"
        );
    }
}

#[tokio::test]
async fn a_corrupt_file_names_the_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.json");
    std::fs::write(&path, "{\n  \"providers\": {\n    \"openai\": [ oops ]\n  }\n}\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = FileCredentialStore::new(&path).list("openai").await.unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Corrupt);
    assert!(err.message.contains("credentials.json:3:"), "{}", err.message);
}

#[test]
fn secrets_never_appear_in_debug_output() {
    let text = format!("{:?}", key("a"));
    assert!(!text.contains("sk-a"), "{text}");
}

/// Another process (an operator's `metaforge llm credentials add`, an editor) changes the file: a
/// store that already served a read from memory sees the change on its next read.
#[tokio::test]
async fn a_change_made_by_another_writer_is_picked_up_by_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.json");
    let serving = FileCredentialStore::new(&path);
    let other = FileCredentialStore::new(&path);
    other.add("openai", key("a")).await.unwrap();
    assert_eq!(serving.healthy("openai").await.unwrap().len(), 1);
    assert_eq!(
        serving.healthy("openai").await.unwrap().len(),
        1,
        "served from memory"
    );
    other.add("openai", key("b")).await.unwrap();
    let ids: Vec<_> = serving
        .healthy("openai")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["a", "b"]);
    other.mark_dead("openai", "a", "401").await.unwrap();
    let ids: Vec<_> = serving
        .healthy("openai")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["b"]);
    // An edit in place of the same length (no rename, new mtime) is seen too.
    let text = std::fs::read_to_string(&path).unwrap().replace("sk-b", "sk-z");
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&path, text).unwrap();
    let secrets: Vec<_> = serving
        .healthy("openai")
        .await
        .unwrap()
        .into_iter()
        .map(|c| match c.secret {
            CredentialSecret::ApiKey { api_key } => api_key,
            other => panic!("unexpected secret kind {other:?}"),
        })
        .collect();
    assert_eq!(secrets, vec!["sk-z"]);
}

/// The file made readable by others after a read is refused on the very next read, cache or not.
#[tokio::test]
async fn a_file_opened_to_others_after_a_cached_read_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.json");
    let store = FileCredentialStore::new(&path);
    store.add("openai", key("a")).await.unwrap();
    assert_eq!(store.healthy("openai").await.unwrap().len(), 1);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = store.healthy("openai").await.unwrap_err();
    assert_eq!(err.kind, PortErrorKind::Invalid);
}
