//! Fault injection: the real adapters against a local upstream whose every answer the test
//! scripts (429 + Retry-After, 500/503/529, a response slower than the timeout, an SSE stream cut
//! mid-way, a 401 on one credential). The pipeline must retry, rotate, fall back, keep the
//! session's pinned credential and list every attempt when all fail.

#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns may panic")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use metaforge_adapters_llm::{
    AnthropicProvider, CodexProvider, FileCredentialStore, HttpSettings, OpenAiCompatibleProvider,
};
use metaforge_app::pipeline::{
    CallSpec, CallUsage, Candidate, CredentialRotor, FallbackAlarm, FallbackReason, PipelineError,
    ProviderEntry, ProviderPipeline, RetryPolicy, RoleModelSlots, UsageScope, UsageSink, with_usage_scope,
};
use metaforge_domain::usage::PriceTable;
use metaforge_ports::{
    Billing, Credential, CredentialSecret, CredentialStore, LlmMessage, LlmProvider, LlmRequest, ModelTool,
    ProviderErrorKind, StreamEvent,
};
use metaforge_test_support::upstream::{Reply, Scripted};

/// The shared scripted upstream answering `replies` in order, and its base URL.
async fn upstream(replies: Vec<Reply>) -> (Scripted, String) {
    let up = Scripted::queue(replies).await;
    let url = up.url().to_owned();
    (up, url)
}

fn ok_body(text: &str) -> String {
    serde_json::json!({"id": "c1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                  "prompt_tokens_details": {"cached_tokens": 8}}})
    .to_string()
}

fn ok(text: &str) -> Reply {
    Reply::Json(200, vec![], ok_body(text))
}

fn err(status: u16) -> Reply {
    Reply::Json(
        status,
        vec![],
        format!(r#"{{"error":{{"message":"injected {status}"}}}}"#),
    )
}

fn sse_chunk(text: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    )
}

fn settings(timeout_ms: u64) -> HttpSettings {
    HttpSettings {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_millis(timeout_ms),
        stream_idle_timeout: Duration::from_millis(timeout_ms),
    }
}

fn openai(id: &str, url: &str) -> ProviderEntry {
    ProviderEntry {
        id: id.into(),
        adapter: Arc::new(OpenAiCompatibleProvider::new(format!("{url}/v1"), settings(400), false).unwrap()),
        billing: Billing::Metered,
    }
}

#[derive(Default)]
struct Collect(Mutex<Vec<CallUsage>>);

impl UsageSink for Collect {
    fn record(&self, usage: CallUsage) {
        self.0.lock().unwrap().push(usage);
    }
}

fn c(provider: &str, model: &str) -> Candidate {
    Candidate {
        provider: provider.into(),
        model: model.into(),
    }
}

fn policy(retries: u32) -> RetryPolicy {
    RetryPolicy {
        api_max_retries: retries,
        base_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        retry_after_cap: Duration::from_millis(250),
    }
}

struct Rig {
    pipeline: ProviderPipeline,
    usage: Arc<Collect>,
    alarm: Arc<FallbackAlarm>,
}

fn rig(
    entries: Vec<ProviderEntry>,
    chain: Vec<Candidate>,
    retries: u32,
    store: Option<Arc<dyn CredentialStore>>,
) -> Rig {
    let usage = Arc::new(Collect::default());
    let alarm = Arc::new(FallbackAlarm::new());
    let slots = RoleModelSlots::new(BTreeMap::from([("chat".to_owned(), chain)])).unwrap();
    let pipeline = ProviderPipeline::new(
        entries,
        slots,
        policy(retries),
        CredentialRotor::new(store),
        Arc::clone(&alarm),
        Arc::clone(&usage) as Arc<dyn UsageSink>,
    )
    .unwrap();
    Rig {
        pipeline,
        usage,
        alarm,
    }
}

fn spec(session: &str) -> CallSpec {
    CallSpec {
        role: "chat".into(),
        explicit: None,
        session_id: session.into(),
    }
}

fn hello() -> LlmRequest {
    LlmRequest {
        messages: vec![LlmMessage::user_text("hi")],
        ..LlmRequest::default()
    }
}

async fn store_with(keys: &[&str]) -> (tempfile::TempDir, Arc<FileCredentialStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileCredentialStore::new(dir.path().join("credentials.json")));
    for key in keys {
        store
            .add(
                "openai",
                Credential {
                    id: (*key).into(),
                    secret: CredentialSecret::ApiKey {
                        api_key: format!("sk-{key}"),
                    },
                },
            )
            .await
            .unwrap();
    }
    (dir, store)
}

#[tokio::test]
async fn rate_limit_with_retry_after_waits_the_advised_time_up_to_the_cap_then_succeeds() {
    let (_up, url) = upstream(vec![
        Reply::Json(
            429,
            vec![("retry-after".into(), "1".into())],
            r#"{"error":{"message":"slow down"}}"#.into(),
        ),
        ok("after the wait"),
    ])
    .await;
    let rig = rig(vec![openai("openai", &url)], vec![c("openai", "gpt-4o")], 2, None);
    let started = Instant::now();
    let served = rig.pipeline.complete(&spec("s"), hello()).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(served.value.text, "after the wait");
    assert!(
        waited >= Duration::from_millis(250),
        "Retry-After capped at 250ms, waited {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(900),
        "Retry-After 1s must be capped, waited {waited:?}"
    );
    assert_eq!(served.failed_attempts.len(), 1);
    assert_eq!(served.failed_attempts[0].error.kind, ProviderErrorKind::RateLimit);
    assert_eq!(
        served.failed_attempts[0].error.retry_after,
        Some(Duration::from_secs(1))
    );
    assert!(served.fallback.is_none());
}

#[tokio::test]
async fn server_errors_500_and_503_are_retried_on_the_same_provider() {
    let (_up, url) = upstream(vec![err(500), err(503), ok("third time")]).await;
    let rig = rig(vec![openai("openai", &url)], vec![c("openai", "gpt-4o")], 2, None);
    let served = rig.pipeline.complete(&spec("s"), hello()).await.unwrap();
    assert_eq!(served.value.text, "third time");
    let statuses: Vec<_> = served.failed_attempts.iter().map(|a| a.error.status).collect();
    assert_eq!(statuses, vec![Some(500), Some(503)]);
    assert_eq!(rig.alarm.fallback_count(), 0);
}

#[tokio::test]
async fn anthropic_529_overloaded_is_retried() {
    let message = serde_json::json!({"id": "m", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "ok now"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}});
    let (_up, url) = upstream(vec![
        Reply::Json(
            529,
            vec![],
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        ),
        Reply::Json(200, vec![], message.to_string()),
    ])
    .await;
    let entry = ProviderEntry {
        id: "anthropic".into(),
        adapter: Arc::new(AnthropicProvider::new(url, settings(400)).unwrap()),
        billing: Billing::Metered,
    };
    let mut rig = rig(vec![entry], vec![c("anthropic", "claude-haiku-4-5")], 1, None);
    rig.pipeline = rig.pipeline.with_price_table(PriceTable::shipped().unwrap());
    let served = with_usage_scope(
        UsageScope {
            run_id: Some("run-7".into()),
            phase: Some("concept".into()),
            role: Some("phase_brain".into()),
            caller: Some("worker".into()),
        },
        rig.pipeline.complete(&spec("s"), hello()),
    )
    .await
    .unwrap();
    assert_eq!(served.value.text, "ok now");
    assert_eq!(
        served.failed_attempts[0].error.kind,
        ProviderErrorKind::Overloaded
    );
    let usage = rig.usage.0.lock().unwrap();
    assert_eq!(usage.len(), 1, "one usage event per call, not per attempt");
    let event = &usage[0].event;
    assert_eq!(
        (
            event.run_id.as_deref(),
            event.phase.as_deref(),
            event.role.as_deref(),
            event.caller.as_deref()
        ),
        (
            Some("run-7"),
            Some("concept"),
            Some("phase_brain"),
            Some("worker")
        )
    );
    assert_eq!(
        event.prompt_tokens,
        Some(110),
        "input 3 + cache reads 100 + cache writes 7"
    );
    assert_eq!(event.cached_input_tokens, Some(100));
    assert_eq!(event.cache_write_tokens, Some(7));
    assert_eq!(event.completion_tokens, Some(2));
    let cost = event.cost_usd.unwrap();
    assert!(
        (cost - 31.75e-6).abs() < 1e-12,
        "priced from the shipped table: {cost}"
    );
}

#[tokio::test]
async fn a_response_slower_than_the_timeout_falls_back_and_raises_the_alarm() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let (_slow, slow_url) = upstream(vec![Reply::Delayed(
        Duration::from_secs(3),
        Box::new(ok("too late")),
    )])
    .await;
    let (_fast, fast_url) = upstream(vec![ok("from the fallback")]).await;
    let rig = rig(
        vec![openai("openai", &slow_url), openai("openrouter", &fast_url)],
        vec![c("openai", "gpt-4o"), c("openrouter", "openai/gpt-4o-mini")],
        0,
        None,
    );
    let served = rig.pipeline.complete(&spec("s"), hello()).await.unwrap();
    assert_eq!(served.value.text, "from the fallback");
    assert_eq!(served.provider, "openrouter");
    assert_eq!(served.failed_attempts[0].error.kind, ProviderErrorKind::Timeout);
    let record = served.fallback.unwrap();
    assert_eq!(record.reason, FallbackReason::CallFailed);
    assert_eq!(
        (record.primary.as_str(), record.fallback.as_str()),
        ("openai", "openrouter")
    );
    assert!(
        record.primary_error.starts_with("timeout"),
        "{}",
        record.primary_error
    );
    assert_eq!(rig.alarm.fallback_count(), 1);
    assert_eq!(
        rig.alarm.last_fallback().unwrap().fallback_model,
        "openai/gpt-4o-mini"
    );
    let counters: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "metaforge_harness_provider_fallback_total")
        .map(|(key, _, _, value)| {
            let labels: BTreeMap<String, String> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (labels, format!("{value:?}"))
        })
        .collect();
    assert_eq!(counters.len(), 1, "{counters:?}");
    assert_eq!(counters[0].0["reason"], "call_failed");
    assert_eq!(counters[0].0["role"], "chat");
    assert_eq!(counters[0].1, "Counter(1)");
}

#[tokio::test]
async fn a_stream_cut_before_its_first_event_falls_back_but_a_cut_after_it_is_a_typed_error() {
    let (_cut, cut_url) = upstream(vec![Reply::SseCut(String::new())]).await;
    let (_good, good_url) = upstream(vec![Reply::Sse(format!(
        "{}{}data: [DONE]\n\n",
        sse_chunk("whole answer"),
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
    ))])
    .await;
    let rig = rig(
        vec![openai("openai", &cut_url), openai("openrouter", &good_url)],
        vec![c("openai", "gpt-4o"), c("openrouter", "openai/gpt-4o")],
        0,
        None,
    );
    let served = rig.pipeline.stream(&spec("s"), hello()).await.unwrap();
    assert_eq!(served.provider, "openrouter");
    assert_eq!(served.failed_attempts[0].error.kind, ProviderErrorKind::Transport);
    let events: Vec<_> = served.value.collect().await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");

    // A stream cut after the caller saw text: no retry, no fallback, a typed error.
    let (_cut2, cut2_url) = upstream(vec![Reply::SseCut(sse_chunk("half an ans"))]).await;
    let single = rig_single(&cut2_url);
    let served = single.pipeline.stream(&spec("s"), hello()).await.unwrap();
    let events: Vec<_> = served.value.collect().await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(matches!(&events[0], Ok(StreamEvent::TextDelta { text }) if text == "half an ans"));
    let error = events[1].as_ref().unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Transport);
    assert!(error.provider_message.contains("cut mid-way"), "{error}");
    assert_eq!(
        single.usage.0.lock().unwrap().len(),
        1,
        "the cut call still records one usage event"
    );
    let cut_usage = &single.usage.0.lock().unwrap()[0];
    assert!(cut_usage.raw.is_none());
    assert_eq!(cut_usage.event.prompt_tokens, None, "usage unknown, never 0");
    assert_eq!(cut_usage.event.completion_tokens, None, "usage unknown, never 0");
}

fn rig_single(url: &str) -> Rig {
    rig(vec![openai("openai", url)], vec![c("openai", "gpt-4o")], 2, None)
}

#[tokio::test]
async fn a_401_marks_the_credential_dead_rotates_and_the_session_keeps_the_new_pin() {
    let (up, url) = upstream(vec![err(401), ok("with key b"), ok("still key b")]).await;
    let (_dir, store) = store_with(&["a", "b"]).await;
    let rig = rig(
        vec![openai("openai", &url)],
        vec![c("openai", "gpt-4o")],
        0,
        Some(Arc::clone(&store) as Arc<dyn CredentialStore>),
    );
    let served = rig.pipeline.complete(&spec("session-1"), hello()).await.unwrap();
    assert_eq!(served.credential.as_deref(), Some("b"));
    assert_eq!(served.failed_attempts[0].credential.as_deref(), Some("a"));
    let again = rig.pipeline.complete(&spec("session-1"), hello()).await.unwrap();
    assert_eq!(again.credential.as_deref(), Some("b"));
    assert_eq!(up.auths(), vec!["bearer sk-a", "bearer sk-b", "bearer sk-b"]);
    let stored = store.list("openai").await.unwrap();
    assert!(stored[0].dead, "401 blacklists credential a");
    assert!(!stored[1].dead);
}

#[tokio::test]
async fn a_429_rotates_without_blacklisting_and_each_session_keeps_its_own_pin() {
    let (up, url) = upstream(vec![
        err(429),
        ok("b answers"),
        ok("session 2 on a"),
        ok("session 1 on b"),
    ])
    .await;
    let (_dir, store) = store_with(&["a", "b"]).await;
    let rig = rig(
        vec![openai("openai", &url)],
        vec![c("openai", "gpt-4o")],
        0,
        Some(Arc::clone(&store) as Arc<dyn CredentialStore>),
    );
    let first = rig.pipeline.complete(&spec("s1"), hello()).await.unwrap();
    assert_eq!(first.credential.as_deref(), Some("b"));
    let other = rig.pipeline.complete(&spec("s2"), hello()).await.unwrap();
    assert_eq!(other.credential.as_deref(), Some("a"), "429 did not blacklist a");
    let pinned = rig.pipeline.complete(&spec("s1"), hello()).await.unwrap();
    assert_eq!(
        pinned.credential.as_deref(),
        Some("b"),
        "s1 stays on b (cache warmth)"
    );
    assert_eq!(
        up.auths(),
        vec!["bearer sk-a", "bearer sk-b", "bearer sk-a", "bearer sk-b"]
    );
    assert!(store.list("openai").await.unwrap().iter().all(|c| !c.dead));
}

#[tokio::test]
async fn when_every_provider_fails_all_providers_failed_lists_each_attempt() {
    let (_a, a_url) = upstream(vec![err(500), err(502)]).await;
    let (_b, b_url) = upstream(vec![err(503), err(400)]).await;
    let rig = rig(
        vec![openai("openai", &a_url), openai("openrouter", &b_url)],
        vec![c("openai", "gpt-4o"), c("openrouter", "x/y")],
        1,
        None,
    );
    let error = rig.pipeline.complete(&spec("s"), hello()).await.unwrap_err();
    let PipelineError::AllProvidersFailed { role, attempts, .. } = &error else {
        panic!("expected AllProvidersFailed, got {error}");
    };
    assert_eq!(role, "chat");
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| format!("{}:{}#{} {:?}", a.provider, a.model, a.attempt, a.error.status))
        .collect();
    assert_eq!(
        summary,
        vec![
            "openai:gpt-4o#1 Some(500)",
            "openai:gpt-4o#2 Some(502)",
            "openrouter:x/y#1 Some(503)",
            "openrouter:x/y#2 Some(400)",
        ]
    );
    let text = error.to_string();
    assert!(
        text.contains("openai:gpt-4o #2") && text.contains("openrouter:x/y #2"),
        "{text}"
    );
    assert!(rig.usage.0.lock().unwrap().is_empty(), "no call was served");
}

#[tokio::test]
async fn a_primary_dropped_for_model_mismatch_counts_as_a_fallback() {
    let (_up, url) = upstream(vec![ok("served by openai")]).await;
    let rig = rig(
        vec![openai("openai", &url)],
        vec![c("anthropic", "gpt-4o"), c("openai", "gpt-4o")],
        0,
        None,
    );
    let served = rig.pipeline.complete(&spec("s"), hello()).await.unwrap();
    let record = served.fallback.unwrap();
    assert_eq!(record.reason, FallbackReason::ModelMismatch);
    assert!(record.primary_error.contains("gpt-4o"));
}

#[tokio::test]
async fn codex_declines_streamed_tools_by_capability_and_the_fallback_is_info_level() {
    let (codex_up, codex_url) = upstream(vec![]).await;
    let (_oa, oa_url) = upstream(vec![Reply::Sse(format!(
        "{}data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n",
        sse_chunk("openai streamed it")
    ))])
    .await;
    let codex: Arc<dyn LlmProvider> =
        Arc::new(CodexProvider::new(format!("{codex_url}/v1"), settings(400)).unwrap());
    let rig = rig(
        vec![
            ProviderEntry {
                id: "openai-codex".into(),
                adapter: codex,
                billing: Billing::Subscription,
            },
            openai("openai", &oa_url),
        ],
        vec![c("openai-codex", "gpt-5-codex"), c("openai", "gpt-4o")],
        2,
        None,
    );
    let mut request = hello();
    request.tools = vec![ModelTool {
        name: "get_weather".into(),
        description: "weather".into(),
        parameters: serde_json::json!({"type": "object"}),
    }];
    let served = rig.pipeline.stream(&spec("s"), request).await.unwrap();
    assert_eq!(served.provider, "openai");
    assert_eq!(
        served.failed_attempts.len(),
        1,
        "capability declines are not retried"
    );
    assert_eq!(
        served.fallback.unwrap().reason,
        FallbackReason::CapabilityUnsupported
    );
    assert!(codex_up.auths().is_empty(), "codex was never called on the wire");
}
