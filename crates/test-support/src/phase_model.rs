//! A scripted OpenAI-compatible model that does a server-intelligence design-flow phase well
//! enough for a run to complete: it plays the three roles a phase's agent loop asks of a model —
//! the planner (a short plan), the phase worker (one `twin.commit_work_product` call per
//! deliverable the brief names, required and expected, then a summary once the tool results are
//! in) and the evaluator (passed) — reading the role from the system prompt and the phase from the
//! brief. It needs no key and no network, so the run process tests and the README walk-through
//! (`cargo run -q -p metaforge-bins --example scripted_phase_model -- --port 4011`) drive real
//! runs through the real gateway on it.
//!
//! It does not know the product's prompts: the caller hands them in ([`RolePrompts`]), so a
//! reworded prompt is one constant changed in the product, and a prompt the script does not
//! recognise is answered 500 and recorded ([`PhaseModelCalls::unexpected`]) instead of guessed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use crate::upstream::{Received, Reply, Scripted};

/// The tool the worker records each deliverable with, as the registry names it for a provider
/// (the native tool `twin.commit_work_product`, `.` → `_`).
pub const COMMIT_TOOL: &str = "twin_commit_work_product";
/// The model every role is routed to: `openai:<MODEL>`.
pub const MODEL: &str = "gpt-4o-mini";
/// How the planner's system prompt begins (`metaforge_agent::pge`).
pub const PLANNER_PROMPT_START: &str = "You are the planner.";
/// How the evaluator's system prompt begins (`metaforge_agent::pge`).
pub const EVALUATOR_PROMPT_START: &str = "You are the evaluator.";
/// The brief's line listing what the gate checks (`metaforge_app::runs::render_brief`).
const REQUIRED_LINE: &str = "Required deliverables (the gate checks these are recorded): ";
/// The brief's line listing the other artifacts the phase is expected to produce.
const EXPECTED_LINE: &str = "Expected artifacts: ";
/// How the brief's feedback line (a retry or rework asked at a gate) ends before its reason.
const FEEDBACK_MARK: &str = "Address this first: ";

/// How each role's system prompt begins: the script tells the roles apart by these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolePrompts {
    /// The phase worker's (`metaforge_app::runs::PHASE_SYSTEM_PROMPT`).
    pub worker: String,
    /// The planner's.
    pub planner: String,
    /// The evaluator's.
    pub evaluator: String,
}

impl RolePrompts {
    /// The worker's prompt as given, the planner and evaluator as `metaforge_agent::pge` starts
    /// them ([`PLANNER_PROMPT_START`], [`EVALUATOR_PROMPT_START`]).
    #[must_use]
    pub fn with_worker(worker: &str) -> Self {
        Self {
            worker: worker.to_owned(),
            planner: PLANNER_PROMPT_START.to_owned(),
            evaluator: EVALUATOR_PROMPT_START.to_owned(),
        }
    }
}

/// What the model was asked, by role.
#[derive(Debug, Default, Clone)]
pub struct PhaseModelCalls {
    /// Planner calls by phase attempt key (`run:phase:attempt`): one per time the phase brain
    /// took that attempt up, so a count above one is a phase re-run (after a kill).
    pub planner_by_key: BTreeMap<String, usize>,
    /// The reason of the retry or rework the brief put first, by phase attempt key (only the
    /// attempts whose brief carried one).
    pub feedback_by_key: BTreeMap<String, String>,
    /// Worker calls (each phase makes two: the tool calls, then the summary).
    pub worker: usize,
    /// Evaluator calls.
    pub evaluator: usize,
    /// Work products the worker asked to commit.
    pub commits: usize,
    /// Structural simulations the worker asked for (`fea.static`).
    pub simulations: usize,
    /// Every engineering tool the worker called, by provider name, in order.
    pub engineering: Vec<String>,
    /// Requests the script did not recognise (answered 500), each described.
    pub unexpected: Vec<String>,
}

impl PhaseModelCalls {
    /// Phase attempts the brain took up more than once, and how many extra times in all.
    #[must_use]
    pub fn reruns(&self) -> (usize, usize) {
        let rerun = self.planner_by_key.values().filter(|n| **n > 1).count();
        let extra = self.planner_by_key.values().map(|n| n.saturating_sub(1)).sum();
        (rerun, extra)
    }

    /// The phase attempt keys of `run` the planner saw, in key order.
    #[must_use]
    pub fn attempts_of(&self, run: &str) -> Vec<String> {
        let prefix = format!("{run}:");
        self.planner_by_key
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect()
    }
}

/// The scripted model, serving on a loopback listener for as long as the runtime it was started
/// on lives.
pub struct ScriptedPhaseModel {
    upstream: Scripted,
    calls: Arc<Mutex<PhaseModelCalls>>,
    script: Arc<Mutex<Script>>,
}

/// Phases whose first planner call per attempt key is answered only after a delay, so a test can
/// kill the process doing the phase while it is in flight.
type Stalls = BTreeMap<String, std::time::Duration>;

/// What a test changed about the script.
#[derive(Debug, Default, Clone)]
struct Script {
    stalls: Stalls,
    /// The summary states the simulation's stress times this factor (a wrong number, for the
    /// numeric grounding check to catch).
    misquote_stress: Option<f64>,
}

impl ScriptedPhaseModel {
    /// Starts it on a free loopback port of the current runtime.
    pub async fn start(prompts: RolePrompts) -> Self {
        Self::serve(crate::net::tokio_listener().await, prompts)
    }

    /// Serves it on `listener` (a port the caller was told to use); needs a tokio runtime.
    pub fn serve(listener: tokio::net::TcpListener, prompts: RolePrompts) -> Self {
        let calls = Arc::new(Mutex::new(PhaseModelCalls::default()));
        let script = Arc::new(Mutex::new(Script::default()));
        let log = Arc::clone(&calls);
        let scripted = Arc::clone(&script);
        let upstream = Scripted::respond_on(listener, move |request| {
            let mut calls = log.lock().unwrap_or_else(PoisonError::into_inner);
            let script = scripted.lock().unwrap_or_else(PoisonError::into_inner);
            answer(&prompts, &script, request, &mut calls)
        });
        Self {
            upstream,
            calls,
            script,
        }
    }

    /// From now on a summary quoting the simulation states its stress times `factor`: a wrong
    /// number, which numeric grounding must flag.
    pub fn misquote_stress(&self, factor: f64) {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .misquote_stress = Some(factor);
    }

    /// From now on, the first planner call of each attempt of `phase` is answered only after
    /// `delay` (a later call with the same attempt key, a re-run, is answered at once): the phase
    /// is in flight for that long, so a test can kill whoever runs it.
    pub fn stall_first_planner_call(&self, phase: &str, delay: std::time::Duration) {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stalls
            .insert(phase.to_owned(), delay);
    }

    /// The OpenAI-compatible base URL, `http://127.0.0.1:<port>/v1` (`HARNESS_OPENAI_BASE_URL`).
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.upstream.url())
    }

    /// What it was asked so far.
    #[must_use]
    pub fn calls(&self) -> PhaseModelCalls {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The environment that routes a `metaforge gateway` (or `metaforge up`) to this model:
    /// [`route_env`] of [`ScriptedPhaseModel::base_url`].
    #[must_use]
    pub fn route_env(&self) -> Vec<(&'static str, String)> {
        route_env(&self.base_url())
    }
}

/// The environment that routes the phase worker, the planner and the evaluator — and every
/// other role, as the default route — of a `metaforge` process to the model at `base_url`, with
/// server intelligence and the native tool loop. The key is any text: the model checks none.
#[must_use]
pub fn route_env(base_url: &str) -> Vec<(&'static str, String)> {
    let route = format!("openai:{MODEL}");
    vec![
        ("HARNESS_OPENAI_BASE_URL", base_url.to_owned()),
        ("OPENAI_API_KEY", "sk-scripted-phase-model".to_owned()),
        ("METAFORGE_LLM_PROVIDER", "openai".to_owned()),
        ("METAFORGE_LLM_MODEL", MODEL.to_owned()),
        ("METAFORGE_ROUTE_PHASE_BRAIN", route.clone()),
        ("METAFORGE_ROUTE_PLANNER", route.clone()),
        ("METAFORGE_ROUTE_EVALUATOR", route),
        ("METAFORGE_INTELLIGENCE", "server".to_owned()),
        ("METAFORGE_AGENT_LOOP", "native".to_owned()),
    ]
}

/// The text of a chat message's `content` (a string or a list of text parts).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => String::new(),
    }
}

/// The comma-separated list after `label` on its own line of `brief` (`(none)` → empty).
fn listed(brief: &str, label: &str) -> Vec<String> {
    brief
        .lines()
        .find_map(|line| line.strip_prefix(label))
        .map(|rest| {
            rest.split(',')
                .map(|s| s.trim().trim_end_matches('.').to_owned())
                .filter(|s| !s.is_empty() && s != "(none)")
                .collect()
        })
        .unwrap_or_default()
}

/// The phase attempt key the brief names: `… (task run:phase:attempt).`
fn task_key(brief: &str) -> Option<String> {
    let start = brief.find("(task ")? + "(task ".len();
    let end = brief[start..].find(')')? + start;
    Some(brief[start..end].to_owned())
}

/// The phase id the brief names: `Phase: Title ('id'), …`.
fn phase_of(brief: &str) -> Option<String> {
    let line = brief.lines().find(|l| l.starts_with("Phase: "))?;
    let start = line.find("('")? + 2;
    let end = line[start..].find("')")? + start;
    Some(line[start..end].to_owned())
}

/// The retry or rework reason the brief puts first, if any.
fn feedback_of(brief: &str) -> Option<String> {
    brief.lines().find_map(|line| {
        line.split_once(FEEDBACK_MARK)
            .map(|(_, reason)| reason.to_owned())
    })
}

/// One chat completion answer in OpenAI's shape.
fn completion(message: Value, finish: &str) -> Reply {
    let body = json!({
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}
    });
    Reply::json(200, body.to_string())
}

fn unexpected(calls: &mut PhaseModelCalls, what: String) -> Reply {
    calls.unexpected.push(what.clone());
    Reply::json(
        500,
        json!({"error": {"message": format!("the scripted phase model did not expect this: {what}")}})
            .to_string(),
    )
}

/// The script (module docs).
fn answer(prompts: &RolePrompts, script: &Script, request: &Received, calls: &mut PhaseModelCalls) -> Reply {
    let body = &request.body;
    if body["stream"] == json!(true) {
        return unexpected(calls, "a streamed completion".to_owned());
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let first_of = |role: &str| {
        messages
            .iter()
            .find(|m| m["role"] == role)
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default()
    };
    let system = first_of("system");
    let user = first_of("user");
    if system.starts_with(&prompts.planner) {
        let key = task_key(&user).unwrap_or_else(|| "(no key)".to_owned());
        if let Some(reason) = feedback_of(&user) {
            calls.feedback_by_key.insert(key.clone(), reason);
        }
        let seen = calls.planner_by_key.entry(key).or_default();
        *seen += 1;
        let plan = completion(
            json!({"role": "assistant", "content": "1. Record every deliverable in the twin. 2. Summarise."}),
            "stop",
        );
        let stall = phase_of(&user).and_then(|phase| script.stalls.get(&phase).copied());
        return match stall {
            Some(delay) if *seen == 1 => Reply::Delayed(delay, Box::new(plan)),
            Some(_) | None => plan,
        };
    }
    if system.starts_with(&prompts.evaluator) {
        calls.evaluator += 1;
        return completion(
            json!({"role": "assistant", "content": "{\"passed\": true, \"findings\": []}"}),
            "stop",
        );
    }
    if !system.starts_with(&prompts.worker) {
        return unexpected(
            calls,
            format!(
                "a system prompt {:?}",
                system.chars().take(60).collect::<String>()
            ),
        );
    }
    calls.worker += 1;
    let mut deliverables = listed(&user, REQUIRED_LINE);
    for artifact in listed(&user, EXPECTED_LINE) {
        if !deliverables.contains(&artifact) {
            deliverables.push(artifact);
        }
    }
    let offered = |wanted: &dyn Fn(&str) -> bool| {
        body["tools"].as_array().and_then(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .find(|name| wanted(name))
                .map(str::to_owned)
        })
    };
    if offered(&|name| name == COMMIT_TOOL).is_none() {
        return unexpected(
            calls,
            format!("a worker turn without {COMMIT_TOOL} among its tools"),
        );
    }
    let phase = phase_of(&user).unwrap_or_default();
    // The engineering tools this phase's deliverables call for, among those offered.
    let planned: Vec<(&EngineeringCall, String)> = ENGINEERING_CALLS
        .iter()
        .filter(|call| deliverables.iter().any(|d| d == call.deliverable))
        .filter_map(|call| offered(&|name| name.ends_with(call.tool_suffix)).map(|name| (call, name)))
        .collect();
    let called = |name: &str| {
        messages.iter().any(|m| {
            m["tool_calls"]
                .as_array()
                .is_some_and(|calls| calls.iter().any(|c| c["function"]["name"] == name))
        })
    };
    let result_of = |id: &str| {
        messages
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .map(|m| serde_json::from_str::<Value>(&text_of(&m["content"])).unwrap_or(Value::Null))
    };
    // Committed: the commit tool was called, or a result came back that no engineering call made.
    let committed = called(COMMIT_TOOL)
        || messages.iter().any(|m| {
            m["role"] == "tool"
                && m["tool_call_id"]
                    .as_str()
                    .is_some_and(|id| ENGINEERING_CALLS.iter().all(|call| call.id != id))
        });
    if !committed {
        // The engineering calls first, one a turn: their results decide what is left to commit.
        if let Some((call, name)) = planned.iter().find(|(call, _)| result_of(call.id).is_none()) {
            if call.deliverable == SIMULATION_RESULT {
                calls.simulations += 1;
            }
            calls.engineering.push(name.clone());
            let tool_call = json!({"id": call.id, "type": "function",
                                   "function": {"name": name, "arguments": (call.arguments)().to_string()}});
            return completion(
                json!({"role": "assistant", "content": null, "tool_calls": [tool_call]}),
                "tool_calls",
            );
        }
        // MetaForge recorded the tools' evidence itself: commit the rest.
        let recorded: Vec<String> = planned
            .iter()
            .filter_map(|(call, _)| result_of(call.id))
            .filter(|result| result["recorded"]["node_id"].is_string())
            .filter_map(|result| result["recorded"]["artifact"].as_str().map(str::to_owned))
            .collect();
        let left: Vec<&String> = deliverables.iter().filter(|d| !recorded.contains(d)).collect();
        return commit(calls, &phase, &left);
    }
    let mut summary = format!("Recorded {} in the twin.", deliverables.join(", "));
    if let Some(result) = simulation_result(&messages) {
        let stress =
            result["max_von_mises_mpa"].as_f64().unwrap_or(f64::NAN) * script.misquote_stress.unwrap_or(1.0);
        summary.push_str(&format!(
            " The linear static analysis gives a maximum von Mises stress of {stress:.1} MPa and a safety factor of {:.2}.",
            result["safety_factor"].as_f64().unwrap_or(f64::NAN)
        ));
    }
    completion(json!({"role": "assistant", "content": summary}), "stop")
}

/// An engineering tool the worker calls when its phase expects a deliverable the tool's
/// evidence is for (or checks).
struct EngineeringCall {
    /// The deliverable that calls for it.
    deliverable: &'static str,
    /// How the tool's provider name ends (`fea_static` of `mcp_fea_fea_static`).
    tool_suffix: &'static str,
    /// The call's id (its result is found by it).
    id: &'static str,
    /// Its arguments.
    arguments: fn() -> Value,
}

/// The board of the demo project, relative to the kicad server's workspace (a copy of
/// kicad-demos' `pic_programmer`).
pub const DEMO_BOARD: &str = "board/pic_programmer.kicad_pcb";
/// The demo project's root schematic, beside its board.
pub const DEMO_SCHEMATIC: &str = "board/pic_programmer.kicad_sch";

/// The engineering calls, in the order a phase makes them.
const ENGINEERING_CALLS: [EngineeringCall; 3] = [
    EngineeringCall {
        deliverable: SIMULATION_RESULT,
        tool_suffix: SIMULATION_TOOL_SUFFIX,
        id: SIMULATION_CALL,
        arguments: || CANTILEVER.clone(),
    },
    EngineeringCall {
        deliverable: "pcb_layout",
        tool_suffix: "kicad_drc",
        id: "call_drc",
        arguments: || json!({"board": DEMO_BOARD}),
    },
    EngineeringCall {
        deliverable: "bom",
        tool_suffix: "kicad_bom",
        id: "call_bom",
        arguments: || json!({"schematic": DEMO_SCHEMATIC}),
    },
];

/// The id of the simulation call.
const SIMULATION_CALL: &str = "call_sim";

/// How the structural simulation tool's provider name ends (`mcp_fea_fea_static`).
const SIMULATION_TOOL_SUFFIX: &str = "fea_static";
/// The deliverable a simulation records.
const SIMULATION_RESULT: &str = "simulation_result";
/// The simulation the worker asks for: a steel cantilever, 100 × 10 × 10 mm, fixed at one end,
/// 100 N down at the other (the physics tests' case).
static CANTILEVER: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({
        "solid": {"kind": "box", "x_mm": 100, "y_mm": 10, "z_mm": 10},
        "element_size_mm": 2.5,
        "material": {"name": "steel_s235"},
        "fixed_faces": ["x_min"],
        "forces": [{"face": "x_max", "force_n": [0, -100, 0]}],
    })
});

/// The simulation's result as the worker was given it (the `call_sim` tool message).
fn simulation_result(messages: &[Value]) -> Option<Value> {
    messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == SIMULATION_CALL)
        .and_then(|m| serde_json::from_str(&text_of(&m["content"])).ok())
}

/// One commit call per deliverable, or the closing line when there is none left.
fn commit(calls: &mut PhaseModelCalls, phase: &str, deliverables: &[&String]) -> Reply {
    let tool_calls: Vec<Value> = deliverables
        .iter()
        .enumerate()
        .map(|(i, artifact)| {
            let arguments = json!({
                "artifact": artifact,
                "title": format!("{artifact} ({phase})"),
                "content": format!("{artifact} recorded by phase {phase}"),
            });
            json!({"id": format!("call_{i}"), "type": "function",
                   "function": {"name": COMMIT_TOOL, "arguments": arguments.to_string()}})
        })
        .collect();
    if tool_calls.is_empty() {
        return completion(
            json!({"role": "assistant", "content": "Nothing to record in this phase."}),
            "stop",
        );
    }
    calls.commits += tool_calls.len();
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
        "tool_calls",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BRIEF: &str = "A retry was asked at gate 'G3' (phase 'feasibility') by ops. Address this first: cite the load case\n\n\
        Phase: Feasibility ('feasibility'), attempt 2 (task r1:feasibility:2).\nGoal: judge it\n\
        Required deliverables (the gate checks these are recorded): feasibility_report, risk_list\n\
        Expected artifacts: feasibility_report, cost_estimate\n";

    fn request(system: &str, tools: bool, tool_result: bool) -> Received {
        let mut messages = vec![
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": BRIEF}),
        ];
        if tool_result {
            messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": "ok"}));
        }
        let tools = if tools {
            json!([{"type": "function", "function": {"name": COMMIT_TOOL}}])
        } else {
            json!([])
        };
        Received {
            path: "/v1/chat/completions".to_owned(),
            auth: String::new(),
            body: json!({"model": MODEL, "messages": messages, "tools": tools}),
        }
    }

    fn body(reply: &Reply) -> (u16, Value) {
        match reply {
            Reply::Json(status, _, body) => (*status, serde_json::from_str(body).unwrap_or(Value::Null)),
            Reply::Delayed(..) | Reply::Sse(_) | Reply::SseCut(_) => (0, Value::Null),
        }
    }

    #[test]
    fn the_worker_commits_every_required_and_expected_deliverable_once_then_summarises() {
        let prompts = RolePrompts::with_worker("You are the worker.");
        let mut calls = PhaseModelCalls::default();
        let (status, first) = body(&answer(
            &prompts,
            &Script::default(),
            &request("You are the worker. Go.", true, false),
            &mut calls,
        ));
        assert_eq!(status, 200);
        let artifacts: Vec<String> = first["choices"][0]["message"]["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c["function"]["arguments"].as_str())
                    .filter_map(|a| serde_json::from_str::<Value>(a).ok())
                    .filter_map(|a| a["artifact"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(artifacts, ["feasibility_report", "risk_list", "cost_estimate"]);
        let (_, second) = body(&answer(
            &prompts,
            &Script::default(),
            &request("You are the worker. Go.", true, true),
            &mut calls,
        ));
        assert_eq!(second["choices"][0]["finish_reason"], "stop");
        assert_eq!((calls.worker, calls.commits), (2, 3));
        assert!(calls.unexpected.is_empty());
    }

    #[test]
    fn the_planner_records_the_attempt_key_and_the_feedback_it_was_given() {
        let prompts = RolePrompts::with_worker("You are the worker.");
        let mut calls = PhaseModelCalls::default();
        let (status, _) = body(&answer(
            &prompts,
            &Script::default(),
            &request("You are the planner. Plan.", false, false),
            &mut calls,
        ));
        assert_eq!(status, 200);
        assert_eq!(calls.planner_by_key.get("r1:feasibility:2"), Some(&1));
        assert_eq!(
            calls.feedback_by_key.get("r1:feasibility:2").map(String::as_str),
            Some("cite the load case")
        );
        assert_eq!(calls.attempts_of("r1"), ["r1:feasibility:2"]);
    }

    #[test]
    fn an_unknown_prompt_or_a_worker_without_the_commit_tool_is_a_500_and_recorded() {
        let prompts = RolePrompts::with_worker("You are the worker.");
        let mut calls = PhaseModelCalls::default();
        let (status, _) = body(&answer(
            &prompts,
            &Script::default(),
            &request("You are a poet.", true, false),
            &mut calls,
        ));
        assert_eq!(status, 500);
        let (status, _) = body(&answer(
            &prompts,
            &Script::default(),
            &request("You are the worker.", false, false),
            &mut calls,
        ));
        assert_eq!(status, 500);
        assert_eq!(calls.unexpected.len(), 2, "{:?}", calls.unexpected);
    }

    #[test]
    fn a_stalled_phase_delays_only_the_first_planner_call_of_each_attempt() {
        let prompts = RolePrompts::with_worker("You are the worker.");
        let stalls = Script {
            stalls: Stalls::from([("feasibility".to_owned(), std::time::Duration::from_secs(7))]),
            misquote_stress: None,
        };
        let mut calls = PhaseModelCalls::default();
        let planner = request("You are the planner. Plan.", false, false);
        let first = answer(&prompts, &stalls, &planner, &mut calls);
        assert!(
            matches!(first, Reply::Delayed(delay, _) if delay == std::time::Duration::from_secs(7)),
            "the first call of r1:feasibility:2 waits"
        );
        let rerun = answer(&prompts, &stalls, &planner, &mut calls);
        assert_eq!(
            body(&rerun).0,
            200,
            "a re-run of the same attempt is answered at once"
        );
        let other = answer(&prompts, &Script::default(), &planner, &mut calls);
        assert_eq!(body(&other).0, 200, "no stall named: no delay");
        assert_eq!(calls.planner_by_key.get("r1:feasibility:2"), Some(&3));
    }
}
