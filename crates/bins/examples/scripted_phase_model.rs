//! TEST-ONLY: a scripted OpenAI-compatible model that does every server-intelligence phase of a
//! design-flow run (`metaforge_test_support::phase_model`): the planner writes a plan, the phase
//! worker records every deliverable its brief names with `twin.commit_work_product`, the
//! evaluator passes it. It checks no key and calls no network, so a walk-through (or a person
//! trying runs) can watch a real run go phase by phase and gate by gate without a provider.
//!
//! The product never offers it; a real deployment routes the roles to a real model.
//!
//! Usage: `cargo run -q -p metaforge-bins --example scripted_phase_model -- --port 4011`. It
//! serves on `127.0.0.1:<port>` until it is killed, printing one line once it accepts
//! connections (and one line on stderr for each request it did not recognise and answered
//! 500); the environment that points `metaforge up` (or `metaforge gateway`) at it:
//!
//! ```sh
//! OPENAI_API_KEY=anything HARNESS_OPENAI_BASE_URL=http://127.0.0.1:4011/v1 \
//! METAFORGE_LLM_PROVIDER=openai METAFORGE_LLM_MODEL=gpt-4o-mini \
//! METAFORGE_ROUTE_PHASE_BRAIN=openai:gpt-4o-mini METAFORGE_ROUTE_PLANNER=openai:gpt-4o-mini \
//! METAFORGE_ROUTE_EVALUATOR=openai:gpt-4o-mini METAFORGE_AGENT_LOOP=native metaforge up
//! ```

use std::process::ExitCode;

use metaforge_test_support::phase_model::{RolePrompts, ScriptedPhaseModel};

/// The port when `--port` is not given.
const DEFAULT_PORT: u16 = 4011;

/// `--port N` (or `--port=N`); absent → [`DEFAULT_PORT`].
fn port(args: &[String]) -> Result<u16, String> {
    let mut value = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--port" {
            value = Some(rest.next().ok_or("--port needs a number")?.clone());
        } else if let Some(v) = arg.strip_prefix("--port=") {
            value = Some(v.to_owned());
        } else {
            return Err(format!(
                "unknown argument {arg:?} (usage: scripted_phase_model [--port N])"
            ));
        }
    }
    value.map_or(Ok(DEFAULT_PORT), |v| {
        v.parse()
            .map_err(|_| format!("--port must be a port number, not {v:?}"))
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port = match port(&args) {
        Ok(port) => port,
        Err(message) => {
            eprintln!("scripted_phase_model: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("scripted_phase_model: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("scripted_phase_model: cannot listen on 127.0.0.1:{port}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let prompts = RolePrompts::with_worker(metaforge_app::runs::PHASE_SYSTEM_PROMPT);
        let model = ScriptedPhaseModel::serve(listener, prompts);
        println!(
            "scripted phase model listening on {} (planner, phase worker, evaluator; any key)",
            model.base_url()
        );
        // A request the script does not recognise (a reworded prompt, a streamed call) is
        // answered 500; say so on stderr, where the person running it looks.
        let mut reported = 0;
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let unexpected = model.calls().unexpected;
            for what in &unexpected[reported.min(unexpected.len())..] {
                eprintln!("scripted_phase_model: answered 500 to {what}");
            }
            reported = unexpected.len();
        }
    })
}
