//! Pipeline overhead benchmark (run through `cargo xtask bench pipeline`, which starts aimock).
//!
//! In one run, against the same aimock: (1) a bare reqwest POST of the same chat-completions
//! body, (2) the OpenAI-compatible adapter alone, (3) the full `ProviderPipeline` (caching
//! layout, credential pinning from a 0600 file store, retry bookkeeping, usage recording).
//! Reports per-call latency p50/p99 in µs, the pipeline's added latency over the bare call, and
//! sequential and concurrent throughput. Request loops are bounded in count.
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark configured through its environment"
)]
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metaforge_adapters_llm::{FileCredentialStore, HttpSettings, OpenAiCompatibleProvider};
use metaforge_app::pipeline::{
    CallSpec, CallUsage, Candidate, CredentialRotor, FallbackAlarm, ProviderEntry, ProviderPipeline,
    RetryPolicy, RoleModelSlots, UsageSink,
};
use metaforge_ports::{
    Billing, Credential, CredentialSecret, CredentialStore, LlmMessage, LlmProvider, LlmRequest,
};

struct CountUsage(std::sync::atomic::AtomicU64);

impl UsageSink for CountUsage {
    fn record(&self, _usage: CallUsage) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn percentile(sorted: &[Duration], p: f64) -> u128 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)].as_micros()
}

struct Stats {
    p50: u128,
    p99: u128,
    per_sec: f64,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    let total: Duration = samples.iter().sum();
    let n = samples.len();
    samples.sort();
    Stats {
        p50: percentile(&samples, 0.50),
        p99: percentile(&samples, 0.99),
        per_sec: n as f64 / total.as_secs_f64(),
    }
}

async fn timed<Fut: std::future::Future<Output = ()>>(call: Fut) -> Duration {
    let t = Instant::now();
    call.await;
    t.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Ok(base) = std::env::var("METAFORGE_BENCH_AIMOCK_URL") else {
        println!("pipeline bench: set METAFORGE_BENCH_AIMOCK_URL (run `cargo xtask bench pipeline`)");
        return;
    };
    let calls: usize = std::env::var("METAFORGE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let v1 = format!("{base}/v1");
    let request = LlmRequest {
        model: "gpt-4o".into(),
        messages: vec![LlmMessage::user_text("hi")],
        ..LlmRequest::default()
    };

    metaforge_adapters_llm::http::ensure_crypto_provider();
    let raw = reqwest::Client::new();
    let body = serde_json::to_value(metaforge_adapters_llm::openai::request_body(
        &request, false, false,
    ))
    .unwrap();
    let url = format!("{v1}/chat/completions");

    let adapter: Arc<dyn LlmProvider> =
        Arc::new(OpenAiCompatibleProvider::new(v1.clone(), HttpSettings::default(), true).unwrap());
    let key = Credential {
        id: "bench".into(),
        secret: CredentialSecret::ApiKey {
            api_key: "sk-bench".into(),
        },
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileCredentialStore::new(dir.path().join("credentials.json")));
    store.add("openai", key.clone()).await.unwrap();
    let usage = Arc::new(CountUsage(Default::default()));
    let chain = vec![Candidate {
        provider: "openai".into(),
        model: "gpt-4o".into(),
    }];
    let pipeline = Arc::new(
        ProviderPipeline::new(
            vec![ProviderEntry {
                id: "openai".into(),
                adapter: Arc::clone(&adapter),
                billing: Billing::Metered,
            }],
            RoleModelSlots::new(BTreeMap::from([("chat".to_owned(), chain)])).unwrap(),
            RetryPolicy::default(),
            CredentialRotor::new(Some(store as Arc<dyn CredentialStore>)),
            Arc::new(FallbackAlarm::new()),
            Arc::clone(&usage) as Arc<dyn UsageSink>,
        )
        .unwrap(),
    );
    let spec = CallSpec {
        role: "chat".into(),
        explicit: None,
        session_id: "bench".into(),
    };
    let direct_call = || {
        let (raw, url, body) = (raw.clone(), url.clone(), body.clone());
        async move {
            let r = raw
                .post(url)
                .bearer_auth("sk-bench")
                .json(&body)
                .send()
                .await
                .unwrap();
            let v: serde_json::Value = r.json().await.unwrap();
            assert!(v["choices"][0]["message"]["content"].is_string());
        }
    };
    let adapter_call = || {
        let (adapter, request, key) = (Arc::clone(&adapter), request.clone(), key.clone());
        async move {
            adapter.complete(&request, Some(&key)).await.unwrap();
        }
    };
    let pipeline_call = || {
        let (pipeline, spec, request) = (Arc::clone(&pipeline), spec.clone(), request.clone());
        async move {
            pipeline.complete(&spec, request).await.unwrap();
        }
    };
    // Warm-up (connections, aimock's JIT), then the three paths interleaved call by call so each
    // sees the same upstream state; the order rotates every round.
    for _ in 0..calls / 10 {
        direct_call().await;
        adapter_call().await;
        pipeline_call().await;
    }
    let (mut d, mut a, mut p) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..calls {
        match i % 3 {
            0 => {
                d.push(timed(direct_call()).await);
                a.push(timed(adapter_call()).await);
                p.push(timed(pipeline_call()).await);
            }
            1 => {
                a.push(timed(adapter_call()).await);
                p.push(timed(pipeline_call()).await);
                d.push(timed(direct_call()).await);
            }
            _ => {
                p.push(timed(pipeline_call()).await);
                d.push(timed(direct_call()).await);
                a.push(timed(adapter_call()).await);
            }
        }
    }
    let (direct, adapter_only, piped) = (stats(d), stats(a), stats(p));

    // Concurrent throughput: 8 callers, bounded total.
    let concurrent = |through_pipeline: bool| {
        let (pipeline, spec, request, raw, url, body) = (
            Arc::clone(&pipeline),
            spec.clone(),
            request.clone(),
            raw.clone(),
            url.clone(),
            body.clone(),
        );
        async move {
            let started = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..8 {
                let (pipeline, spec, request, raw, url, body) = (
                    Arc::clone(&pipeline),
                    spec.clone(),
                    request.clone(),
                    raw.clone(),
                    url.clone(),
                    body.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    for _ in 0..calls / 8 {
                        if through_pipeline {
                            pipeline.complete(&spec, request.clone()).await.unwrap();
                        } else {
                            raw.post(url.clone())
                                .json(&body)
                                .send()
                                .await
                                .unwrap()
                                .bytes()
                                .await
                                .unwrap();
                        }
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            (calls / 8 * 8) as f64 / started.elapsed().as_secs_f64()
        }
    };
    let direct_conc = concurrent(false).await;
    let piped_conc = concurrent(true).await;

    println!("pipeline bench against aimock at {base}: {calls} sequential calls per path, interleaved");
    println!("{:<34} {:>9} {:>9} {:>12}", "path", "p50 µs", "p99 µs", "calls/s");
    for (name, s) in [
        ("direct reqwest → aimock", &direct),
        ("adapter only", &adapter_only),
        ("ProviderPipeline", &piped),
    ] {
        println!("{name:<34} {:>9} {:>9} {:>12.0}", s.p50, s.p99, s.per_sec);
    }
    println!(
        "pipeline added latency vs direct: p50 {:+} µs, p99 {:+} µs; vs adapter only: p50 {:+} µs",
        piped.p50 as i128 - direct.p50 as i128,
        piped.p99 as i128 - direct.p99 as i128,
        piped.p50 as i128 - adapter_only.p50 as i128,
    );
    println!(
        "concurrent (8 callers) throughput: direct {direct_conc:.0} calls/s, pipeline {piped_conc:.0} calls/s"
    );
    println!(
        "usage events recorded by the pipeline: {}",
        usage.0.load(std::sync::atomic::Ordering::Relaxed)
    );
}
