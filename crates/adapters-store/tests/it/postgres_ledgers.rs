//! The PostgreSQL flow-version, usage and session stores pass their SQLite twins' contracts
//! against a real PostgreSQL server each test starts on a temporary directory; plus what only the
//! server engine can get wrong: search text read as `tsquery` syntax, words the two engines split
//! differently, text PostgreSQL cannot hold, batches past the bound-parameter limit, and two
//! gateways deciding one flow version.

use std::sync::Arc;

use futures::FutureExt;
use metaforge_adapters_store::postgres::{PgFlowVersionStore, PgSessionStore, PgUsageStore};
use metaforge_adapters_store::{SqliteSessionStore, SqliteUsageStore};
use metaforge_ports::{
    Billing, ChatMessage, ChatSession, FlowVersionDecision, FlowVersionStatus, FlowVersionStore, MessageRole,
    PortErrorKind, SessionStore, TurnLimits, UsageEvent, UsageStore, sha256_hex,
};
use metaforge_test_support::contracts::{self, frozen_version, kind_of, t};
use metaforge_test_support::postgres::start_postgres;

#[tokio::test]
async fn postgres_flow_version_store_honours_the_contract() {
    let Some(server) = start_postgres() else { return };
    let store = PgFlowVersionStore::open(&server.url).await.expect("open");
    let url = server.url.clone();
    let tamper = move |id: String, frozen: String| {
        let url = url.clone();
        async move {
            // A connection of its own, outside the store's pool, naming the table by its schema.
            let pool = sqlx::PgPool::connect(&url).await.expect("raw connection");
            let changed =
                sqlx::query("UPDATE metaforge_flow_versions.flow_versions SET frozen = $1 WHERE id = $2")
                    .bind(frozen)
                    .bind(id)
                    .execute(&pool)
                    .await
                    .expect("tamper")
                    .rows_affected();
            assert_eq!(changed, 1, "the tampered row exists");
        }
        .boxed()
    };
    contracts::flow_version_store_contract(&store, &tamper).await;
}

#[tokio::test]
async fn postgres_usage_store_honours_the_contract() {
    let Some(server) = start_postgres() else { return };
    let store = PgUsageStore::open(&server.url).await.expect("open");
    contracts::usage_store_contract(&store).await;
}

#[tokio::test]
async fn postgres_session_store_honours_the_contract() {
    let Some(server) = start_postgres() else { return };
    let store = PgSessionStore::open(&server.url).await.expect("open");
    contracts::session_store_contract(&store).await;
}

fn session(id: &str) -> ChatSession {
    ChatSession {
        id: id.to_owned(),
        parent_session_id: None,
        project_id: None,
        title: None,
        created_at: t(0),
        limits: TurnLimits::default(),
    }
}

fn message(id: &str, content: &str, at: i64) -> ChatMessage {
    ChatMessage {
        id: id.to_owned(),
        session_id: "s-1".to_owned(),
        role: MessageRole::User,
        content: content.to_owned(),
        created_at: t(at),
    }
}

#[tokio::test]
async fn a_search_full_of_tsquery_syntax_answers_without_an_error() {
    let Some(server) = start_postgres() else { return };
    let store = PgSessionStore::open(&server.url).await.expect("open");
    store.create_session(session("s-1")).await.expect("session");
    store
        .append_message(message("m-1", "a b c: the (draft) is ready!", 0))
        .await
        .expect("message");
    let long_word = "w".repeat(5000);
    let many_words = (0..20_000).map(|n| format!("w{n}")).collect::<Vec<_>>().join(" ");
    let hostile = [
        "'a & | ! (( :* \"",
        "a:*",
        "a <-> b",
        "a <2> b",
        "!a | b & (c",
        "\\ ' '' \"\" a",
        "a\0b",
        "-a OR \"b\" or c",
        "a:AB*",
        long_word.as_str(),
        many_words.as_str(),
        "日本語 & ünïcödé",
    ];
    for query in hostile {
        let answer = store.search(query, 10).await;
        assert!(
            answer.is_ok() || kind_of(&answer) == Some(PortErrorKind::Invalid),
            "search {:?} answered {answer:?}",
            query.chars().take(40).collect::<String>()
        );
    }
    let hits = store
        .search("'a & | ! (( :* \"", 10)
        .await
        .expect("syntax is text");
    assert_eq!(
        hits.iter().map(|h| h.message_id.as_str()).collect::<Vec<_>>(),
        vec!["m-1"],
        "the one word, 'a', is looked for as a word"
    );
    let hits = store.search("(DRAFT) & ready:*", 10).await.expect("search");
    assert_eq!(hits.len(), 1, "operators are ignored, words matched: {hits:?}");
    assert_eq!(
        kind_of(&store.search(":* & | ! ((", 10).await),
        Some(PortErrorKind::Invalid),
        "a query of nothing but syntax has no word"
    );
    assert!(
        store.search(&long_word, 10).await.expect("long word").is_empty(),
        "a word too long to index matches nothing"
    );
}

/// The messages both engines index, and queries whose hits they must agree on.
const CORPUS: [&str; 10] = [
    "Size the bracket for 40 kN",
    "see https://example.com/docs/v1.2.3?q=bolt_size for the spec",
    "mail ana@example.org, cost 0.0042 USD",
    "{\"stress\": \"OK\"} bracket-check passed",
    "snake_case and kebab-case and CamelCase",
    "path /var/lib/metaforge/ledger.db and C:\\temp\\x.txt",
    "ÉCOLE Straße naïve 日本語 テスト",
    "tabs\tand\nnewlines\r\nand   spaces",
    "x×y a—b c…d «quoted» 5°C 10% $20 #tag @user",
    "The bracket needs 6 mm steel. Bracket bracket!",
];

const QUERIES: [&str; 28] = [
    "bracket",
    "BRACKET steel",
    "example",
    "example.com",
    "com docs",
    "v1",
    "2",
    "bolt",
    "bolt_size",
    "ana",
    "org",
    "0042",
    "0.0042",
    "check",
    "bracket-check",
    "snake",
    "case",
    "camelcase",
    "ledger db",
    "temp",
    "école",
    "straße",
    "日本語",
    "newlines",
    "quoted",
    "tag user",
    "20",
    "kebab case snake",
];

#[tokio::test]
async fn search_finds_the_same_messages_as_the_sqlite_ledger() {
    let Some(server) = start_postgres() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let pg = PgSessionStore::open(&server.url).await.expect("open");
    let sqlite = SqliteSessionStore::open(&dir.path().join("sessions.db"))
        .await
        .expect("open sqlite");
    for store in [&pg as &dyn SessionStore, &sqlite] {
        store.create_session(session("s-1")).await.expect("session");
        for (n, content) in CORPUS.iter().enumerate() {
            let at = i64::try_from(n).expect("small");
            store
                .append_message(message(&format!("m-{n}"), content, at))
                .await
                .expect("message");
        }
    }
    for query in QUERIES {
        let mut on_pg: Vec<String> = pg
            .search(query, 100)
            .await
            .expect("pg search")
            .into_iter()
            .map(|h| h.message_id)
            .collect();
        let mut on_sqlite: Vec<String> = sqlite
            .search(query, 100)
            .await
            .expect("sqlite search")
            .into_iter()
            .map(|h| h.message_id)
            .collect();
        on_pg.sort();
        on_sqlite.sort();
        assert_eq!(
            on_pg, on_sqlite,
            "both engines find the same messages for {query:?}"
        );
        assert!(!on_pg.is_empty(), "{query:?} finds something");
    }
    let ranked: Vec<String> = pg
        .search("bracket", 100)
        .await
        .expect("search")
        .into_iter()
        .map(|h| h.message_id)
        .collect();
    assert_eq!(
        ranked.first().map(String::as_str),
        Some("m-9"),
        "the message saying it three times ranks first: {ranked:?}"
    );
}

#[tokio::test]
async fn equal_matches_rank_oldest_first_and_the_limit_keeps_the_best() {
    let Some(server) = start_postgres() else { return };
    let store = PgSessionStore::open(&server.url).await.expect("open");
    store.create_session(session("s-1")).await.expect("session");
    for n in 0..5 {
        store
            .append_message(message(&format!("m-{n}"), "the same bolt", n))
            .await
            .expect("message");
    }
    let hits: Vec<String> = store
        .search("bolt", 3)
        .await
        .expect("search")
        .into_iter()
        .map(|h| h.message_id)
        .collect();
    assert_eq!(hits, vec!["m-0", "m-1", "m-2"], "ties keep the order appended");
}

#[tokio::test]
async fn a_huge_message_is_stored_and_its_start_is_searchable() {
    let Some(server) = start_postgres() else { return };
    let store = PgSessionStore::open(&server.url).await.expect("open");
    store.create_session(session("s-1")).await.expect("session");
    // About 4 MB of distinct words: far more than a tsvector can hold (1 MiB).
    let content = std::iter::once("needle".to_owned())
        .chain((0..60_000).map(|n| sha256_hex(&n.to_string())))
        .collect::<Vec<_>>()
        .join(" ");
    store
        .append_message(message("m-big", &content, 0))
        .await
        .expect("a huge message is stored");
    let hits = store.search("needle", 10).await.expect("search");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].content, content, "the message reads back whole");
    let back = store.messages("s-1").await.expect("messages");
    assert_eq!(back[0].content, content);
}

#[tokio::test]
async fn text_postgres_cannot_hold_is_refused_or_absent_never_internal() {
    let Some(server) = start_postgres() else { return };
    let sessions = PgSessionStore::open(&server.url).await.expect("open");
    sessions.create_session(session("s-1")).await.expect("session");
    assert_eq!(
        kind_of(&sessions.append_message(message("m-1", "a\0b", 0)).await),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        kind_of(&sessions.create_session(session("s\0x")).await),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        kind_of(&sessions.get_session("s\0x").await),
        Some(PortErrorKind::NotFound)
    );
    assert_eq!(
        kind_of(&sessions.messages("s\0x").await),
        Some(PortErrorKind::NotFound)
    );

    let versions = PgFlowVersionStore::open(&server.url).await.expect("open");
    assert_eq!(
        kind_of(&versions.save(frozen_version("v-1", "tpl", "a\0b", 0)).await),
        Some(PortErrorKind::Invalid)
    );
    assert_eq!(
        kind_of(&versions.get("v\0x").await),
        Some(PortErrorKind::NotFound)
    );
    assert!(versions.list(Some("t\0x")).await.expect("list").is_empty());

    let usage = PgUsageStore::open(&server.url).await.expect("open");
    let mut event = usage_event("run-1", 0);
    event.model = "m\0".into();
    assert_eq!(kind_of(&usage.record(event).await), Some(PortErrorKind::Invalid));
    assert!(usage.events_for_run("run\0").await.expect("read").is_empty());
}

#[tokio::test]
async fn frozen_flow_text_reads_back_byte_for_byte() {
    let Some(server) = start_postgres() else { return };
    let store = PgFlowVersionStore::open(&server.url).await.expect("open");
    let frozen = "{ \"phases\" : [\"désign\\u00e9\", \"日本\"],\r\n\t\"trailing\":  \"  \" }  \n\n";
    let mut record = frozen_version("v-1", "tpl", "x", 0);
    record.frozen = frozen.to_owned();
    record.content_hash = sha256_hex(frozen);
    store.save(record.clone()).await.expect("save");
    let back = store.get("v-1").await.expect("get");
    assert_eq!(back.frozen.as_bytes(), frozen.as_bytes());
    assert_eq!(back, record);
}

#[tokio::test]
async fn two_gateways_deciding_one_flow_version_produce_one_winner_and_conflicts() {
    let Some(server) = start_postgres() else { return };
    let first = Arc::new(PgFlowVersionStore::open(&server.url).await.expect("open"));
    let second = Arc::new(PgFlowVersionStore::open(&server.url).await.expect("reopen"));
    for n in 0..5 {
        let id = format!("v-{n}");
        first
            .save(frozen_version(&id, "tpl", "design", n))
            .await
            .expect("save");
        let deciders = (0..12).map(|k| {
            let store: Arc<dyn FlowVersionStore> = if k % 2 == 0 { first.clone() } else { second.clone() };
            let id = id.clone();
            tokio::spawn(async move {
                let decision = FlowVersionDecision {
                    status: if k % 3 == 0 {
                        FlowVersionStatus::Rejected
                    } else {
                        FlowVersionStatus::Approved
                    },
                    approver: format!("approver-{k}"),
                    approval_id: None,
                    at: t(100 + k),
                };
                store.decide(&id, decision).await
            })
        });
        let mut winners = Vec::new();
        for answer in futures::future::join_all(deciders).await {
            match answer.expect("decider task") {
                Ok(record) => winners.push(record),
                Err(e) => assert_eq!(
                    e.kind,
                    PortErrorKind::Conflict,
                    "a losing decision is a conflict: {e}"
                ),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one of 12 racing decisions wins {id}");
        assert_eq!(second.get(&id).await.expect("get"), winners[0]);
    }
}

fn usage_event(run: &str, at_secs: i64) -> UsageEvent {
    UsageEvent {
        run_id: Some(run.to_owned()),
        phase: Some("design".into()),
        role: Some("phase_brain".into()),
        caller: None,
        provider: "anthropic".into(),
        model: "claude-haiku-4-5-20251001".into(),
        prompt_tokens: Some(u64::try_from(at_secs).unwrap_or(0)),
        completion_tokens: None,
        cached_input_tokens: Some(0),
        cache_write_tokens: None,
        reasoning_tokens: Some(i64::MAX.unsigned_abs()),
        cost_usd: Some(0.1 + 0.2),
        billing: Billing::Metered,
        at: Some(t(at_secs)),
    }
}

#[tokio::test]
async fn a_batch_past_the_bound_parameter_limit_lands_whole_in_order() {
    let Some(server) = start_postgres() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PgUsageStore::open(&server.url).await.expect("open");
    // 14 columns x 5,000 rows is past PostgreSQL's 65,535 bound parameters a statement.
    let batch: Vec<UsageEvent> = (0..5_000).map(|n| usage_event("run-big", n)).collect();
    store.record_batch(&batch).await.expect("a big batch");
    store.record_batch(&[]).await.expect("an empty batch");
    assert_eq!(store.events_for_run("run-big").await.expect("read"), batch);
    assert_eq!(store.events_since(t(4_990)).await.expect("window").len(), 10);

    // Both engines read the same events back from the same batch.
    let sqlite = SqliteUsageStore::open(&dir.path().join("llm_usage.db"))
        .await
        .expect("open sqlite");
    sqlite.record_batch(&batch).await.expect("sqlite batch");
    assert_eq!(
        sqlite.events_for_run("run-big").await.expect("sqlite read"),
        store.events_for_run("run-big").await.expect("read")
    );
}

#[tokio::test]
async fn concurrent_batches_from_two_writers_keep_each_batch_in_order() {
    let Some(server) = start_postgres() else { return };
    let first = Arc::new(PgUsageStore::open(&server.url).await.expect("open"));
    let second = Arc::new(PgUsageStore::open(&server.url).await.expect("reopen"));
    let writers = (0..8).map(|w| {
        let store: Arc<dyn UsageStore> = if w % 2 == 0 { first.clone() } else { second.clone() };
        tokio::spawn(async move {
            let batch: Vec<UsageEvent> = (0..200).map(|n| usage_event(&format!("run-{w}"), n)).collect();
            store.record_batch(&batch).await.map(|()| batch)
        })
    });
    for (w, written) in futures::future::join_all(writers).await.into_iter().enumerate() {
        let batch = written.expect("writer task").expect("batch");
        assert_eq!(
            first.events_for_run(&format!("run-{w}")).await.expect("read"),
            batch,
            "writer {w}'s batch lands whole, in order"
        );
    }
}
