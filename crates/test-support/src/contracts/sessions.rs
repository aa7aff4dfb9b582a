//! The session-store contract: threads, messages, word search and lineage.

use metaforge_ports::{ChatMessage, ChatSession, MessageRole, PortErrorKind, SessionStore, TurnLimits};

use super::{kind_of, t};

fn session(id: &str, parent: Option<&str>, at: i64) -> ChatSession {
    ChatSession {
        id: id.to_owned(),
        parent_session_id: parent.map(str::to_owned),
        project_id: Some("proj-1".into()),
        title: Some(format!("thread {id}")),
        created_at: t(at),
        limits: TurnLimits::default(),
    }
}

fn message(id: &str, session: &str, role: MessageRole, content: &str, at: i64) -> ChatMessage {
    ChatMessage {
        id: id.to_owned(),
        session_id: session.to_owned(),
        role,
        content: content.to_owned(),
        created_at: t(at),
    }
}

/// Runs every session-store rule against `store`.
pub async fn session_store_contract(store: &dyn SessionStore) {
    let root = store
        .create_session(session("s-1", None, 0))
        .await
        .expect("create s-1");
    assert_eq!(store.get_session("s-1").await.expect("get"), root);
    assert_eq!(
        kind_of(&store.create_session(session("s-1", None, 0)).await),
        Some(PortErrorKind::Conflict)
    );
    assert_eq!(
        kind_of(&store.create_session(session("s-x", Some("ghost"), 0)).await),
        Some(PortErrorKind::NotFound),
        "a parent must exist"
    );
    assert_eq!(
        kind_of(&store.get_session("s-x").await),
        Some(PortErrorKind::NotFound)
    );
    let limited = ChatSession {
        limits: TurnLimits {
            max_iterations: Some(3),
            token_budget: Some(50_000),
        },
        ..session("s-limits", None, 0)
    };
    store
        .create_session(limited.clone())
        .await
        .expect("create s-limits");
    assert_eq!(
        store.get_session("s-limits").await.expect("get s-limits").limits,
        limited.limits,
        "a thread's own limits are kept"
    );
    store
        .create_session(session("s-2", Some("s-1"), 1))
        .await
        .expect("create s-2");
    store
        .create_session(session("s-3", Some("s-2"), 2))
        .await
        .expect("create s-3");

    let lineage: Vec<String> = store
        .lineage("s-3")
        .await
        .expect("lineage")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(
        lineage,
        vec!["s-3", "s-2", "s-1"],
        "the thread first, the root last"
    );
    assert_eq!(store.lineage("s-1").await.expect("root").len(), 1);

    store
        .append_message(message(
            "m-1",
            "s-1",
            MessageRole::User,
            "Size the bracket for 40 kN",
            3,
        ))
        .await
        .expect("m-1");
    store
        .append_message(message(
            "m-2",
            "s-1",
            MessageRole::Assistant,
            "The bracket needs 6 mm steel.",
            4,
        ))
        .await
        .expect("m-2");
    store
        .append_message(message(
            "m-3",
            "s-2",
            MessageRole::Tool,
            "{\"stress\": \"OK\"} bracket-check passed",
            5,
        ))
        .await
        .expect("m-3");
    assert_eq!(
        kind_of(
            &store
                .append_message(message("m-4", "ghost", MessageRole::User, "x", 6))
                .await
        ),
        Some(PortErrorKind::NotFound)
    );
    assert_eq!(
        kind_of(
            &store
                .append_message(message("m-1", "s-1", MessageRole::User, "dup", 6))
                .await
        ),
        Some(PortErrorKind::Conflict)
    );

    let msgs = store.messages("s-1").await.expect("messages");
    assert_eq!(
        msgs.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        vec!["m-1", "m-2"],
        "in order appended"
    );
    assert_eq!(msgs[1].role, MessageRole::Assistant);
    assert_eq!(msgs[1].content, "The bracket needs 6 mm steel.");

    let mut hits: Vec<String> = store
        .search("BRACKET", 10)
        .await
        .expect("search")
        .into_iter()
        .map(|h| h.message_id)
        .collect();
    hits.sort();
    assert_eq!(hits, vec!["m-1", "m-2", "m-3"], "whole words, case-insensitive");
    let hits = store.search("bracket steel", 10).await.expect("search");
    assert_eq!(hits.len(), 1, "every word must match");
    assert_eq!(hits[0].message_id, "m-2");
    assert_eq!(hits[0].session_id, "s-1");
    assert!(
        store.search("brack", 10).await.expect("search").is_empty(),
        "no prefix matching"
    );
    let hits = store
        .search("\"stress\" AND (OR", 10)
        .await
        .expect("syntax is text");
    assert_eq!(
        hits.iter().map(|h| h.message_id.as_str()).collect::<Vec<_>>(),
        Vec::<&str>::new(),
        "operators are words, and 'and'/'or' do not appear in m-3"
    );
    let hits = store
        .search("stress: ok", 10)
        .await
        .expect("punctuation is ignored");
    assert_eq!(
        hits.iter().map(|h| h.message_id.as_str()).collect::<Vec<_>>(),
        vec!["m-3"]
    );
    assert_eq!(store.search("bracket", 1).await.expect("limit").len(), 1);
    assert_eq!(
        kind_of(&store.search("  ?! ", 10).await),
        Some(PortErrorKind::Invalid),
        "a query with no words is refused"
    );

    let listed: Vec<String> = store
        .list_sessions(2)
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec!["s-3", "s-2"], "newest first, limited");
}
