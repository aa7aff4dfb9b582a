//! The prompt `metaforge:flow` (the seed's `/metaforge:flow`): tells a harness how to run a
//! design flow with the sidecar's tools — from a proposal a person approves, through client-mode
//! phases, to gates the person answers in the chat — and what it must never do (decide for the
//! person).

use metaforge_ports::{PortError, PortErrorKind, PromptArgumentDescriptor, PromptDescriptor, PromptText};
use serde_json::{Map, Value};

use crate::host::SidecarPrompt;

/// The prompt's name.
pub const PROMPT: &str = "metaforge:flow";

/// `metaforge:flow`.
pub struct FlowPrompt;

/// The optional arguments, in order: what they say.
const ARGUMENTS: &[(&str, &str)] = &[
    ("intent", "what the person wants made (starts a new flow)"),
    ("template_id", "a shipped template to start from, e.g. mech_v1"),
    ("run_id", "a run already started, to pick up"),
];

fn argument<'a>(arguments: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, PortError> {
    match arguments.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.trim()).filter(|t| !t.is_empty())),
        Some(_) => Err(PortError::new(
            PortErrorKind::Invalid,
            format!("{name}: a prompt argument is text"),
        )),
    }
}

/// The prompt's text for the given starting point.
pub fn flow_prompt_text(intent: Option<&str>, template_id: Option<&str>, run_id: Option<&str>) -> String {
    let start = match (run_id, intent, template_id) {
        (Some(run), _, _) => format!(
            "Pick up run {run}: read metaforge://flow/run/{run} (or flow.status {{run_id: \"{run}\"}}) and carry on from where it is."
        ),
        (None, Some(intent), template) => format!(
            "The person wants: {intent}\nStart by proposing a tailored flow with flow.propose ({}intent and context). \
             If it answers needs_input, ask the person those questions and call again with their answers. \
             The proposal is held for a person: tell them its approval id and wait until they approved it \
             (flow.version shows its status); then start it with flow.start_run {{flow_version_id, intelligence: \"client\"}}.",
            template.map(|t| format!("template_id: \"{t}\", ")).unwrap_or_default()
        ),
        (None, None, Some(template)) => format!(
            "Start a run of the shipped template {template} as it is: flow.start_run {{template_id: \"{template}\", intelligence: \"client\"}}."
        ),
        (None, None, None) => "List the flows with flow.list and the runs with run.list; ask the person what to make or which run to pick up.".to_owned(),
    };
    format!(
        "You are running a MetaForge design flow. A flow is phases in order; some phases end at a gate a person answers.\n\n\
         {start}\n\n\
         In a client-intelligence run you do each phase's work:\n\
         1. phase.list_tasks {{run_id, status: \"open\"}} lists the phase waiting for you, with its brief (goal, required deliverables, context, feedback from an earlier gate).\n\
         2. phase.claim {{task_id}} takes it. The claim is held for the person: they approve letting you take the phase.\n\
         3. Do the work and record every required deliverable in the twin with twin.commit_work_product {{artifact: <deliverable name>, title, content}}; \
            writes land on the run's branch. A deliverable you only describe does not count: the gate checks the twin.\n\
         4. phase.submit {{task_id, summary}} hands the phase back (say what you did and what is open).\n\
         5. Follow the run with flow.status. When it reaches a gate, call flow.await_gate {{run_id}}: it asks the person, with only the decisions the gate allows. \
            Do not answer for them, do not pick a decision, and do not try to approve anything yourself — no tool lets you. \
            If they dismiss the question the gate stays open; ask whether to try again later.\n\
         6. Repeat until the run is completed (its deliverables are then merged into the twin's main branch) or it ends.\n\n\
         metaforge://flow/run/{{id}} shows the run as markdown (phases, statuses, the open gate; 'unknown' when the engine cannot be asked)."
    )
}

#[async_trait::async_trait]
impl SidecarPrompt for FlowPrompt {
    fn descriptor(&self) -> PromptDescriptor {
        PromptDescriptor {
            name: PROMPT.to_owned(),
            title: Some("/metaforge:flow".to_owned()),
            description: "How to run a MetaForge design flow with these tools: propose, start, do \
                          each client phase, and bring every gate to the person."
                .to_owned(),
            arguments: ARGUMENTS
                .iter()
                .map(|(name, description)| PromptArgumentDescriptor {
                    name: (*name).to_owned(),
                    description: (*description).to_owned(),
                    required: false,
                })
                .collect(),
        }
    }

    async fn render(&self, arguments: &Map<String, Value>) -> Result<PromptText, PortError> {
        let text = flow_prompt_text(
            argument(arguments, "intent")?,
            argument(arguments, "template_id")?,
            argument(arguments, "run_id")?,
        );
        Ok(PromptText {
            description: "Run a MetaForge design flow".to_owned(),
            text,
        })
    }
}
