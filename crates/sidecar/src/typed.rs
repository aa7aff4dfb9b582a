//! Sidecar tools declared by their types: one [`TypedTool`] names a tool, its arguments' type
//! (whose generated JSON Schema is the tool's input schema), its hints and its gate, and runs on
//! parsed arguments. The one blanket [`SidecarTool`] impl below does the rest for every tool —
//! the descriptor, the gate spec, parsing, the argument-error envelope — so no tool writes that
//! scaffolding again.

use metaforge_app::limits::{Limits, check_arguments};
use metaforge_domain::tool_gating::{
    Annotation, ArgumentSchema, Caller, Decision, GateVerdict, ToolSpec, decide_with_schema,
};
use metaforge_ports::{
    CallFacts, CallerClass, CallerContext, HostCallOutcome, PortError, ToolDescriptor, ToolHints,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::args::{ArgError, input_schema, parse};
use crate::envelope::{ToolError, at_boundary, invalid_arguments, refused};
use crate::host::SidecarTool;

/// How the domain's gating rules see a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolGate {
    /// As its MCP hints say: read-only → `READ_ONLY`, explicitly non-destructive → `ADDITIVE`,
    /// anything else → `DESTRUCTIVE`; no gate, no hold.
    FromHints,
    /// An additive write the rules may hold for a person (`requires_approval`) or let through.
    Write {
        /// Every call is held for a person unless the caller's class is let through.
        requires_approval: bool,
    },
}

/// A read: never held, changes nothing.
pub const READ_ONLY: ToolHints = ToolHints {
    read_only_hint: Some(true),
    destructive_hint: Some(false),
    idempotent_hint: Some(true),
    open_world_hint: Some(false),
};

/// An additive write: it changes something, never destroys anything.
pub const ADDITIVE_WRITE: ToolHints = ToolHints {
    read_only_hint: Some(false),
    destructive_hint: Some(false),
    idempotent_hint: Some(false),
    open_world_hint: Some(false),
};

/// One sidecar tool, declared by its types.
#[async_trait::async_trait]
pub trait TypedTool: Send + Sync {
    /// The tool's dotted id (`run.get`).
    const NAME: &'static str;
    /// A short human title.
    const TITLE: &'static str;
    /// What the tool does, as the model reads it.
    const DESCRIPTION: &'static str;
    /// Its MCP hints.
    const HINTS: ToolHints;
    /// How the gating rules see it.
    const GATE: ToolGate = ToolGate::FromHints;
    /// True for a tool whose effect is itself a hold for a person: the host does not hold the
    /// call a second time.
    const HOLDS_ITS_OWN_EFFECT: bool = false;

    /// True for a tool that refuses some calls before any gate or hold ([`Self::preflight`]):
    /// only then are the arguments parsed a first time before the gate.
    const PREFLIGHT: bool = false;

    /// Its arguments; their generated schema is the tool's input schema.
    type Args: DeserializeOwned + JsonSchema + Send + Sync;

    /// The size limits on its arguments' fields (`metaforge_app::limits`' groups), checked before
    /// they are parsed: nothing oversized is parsed, stored or echoed back.
    const LIMITS: Limits = &[];

    /// Whether callers of `class` see it at all.
    fn offered_to(&self, class: CallerClass) -> bool {
        let _ = class;
        true
    }

    /// Refuses a call the tool cannot use, before any gate or hold (FORGE-222): `Some(answer)`
    /// ends the call with that answer. Asked only when [`Self::PREFLIGHT`] is true.
    async fn preflight(
        &self,
        caller: &CallerContext,
        args: &Self::Args,
    ) -> Result<Option<HostCallOutcome>, ToolError> {
        let _ = (caller, args);
        Ok(None)
    }

    /// Runs the call on its parsed arguments.
    async fn run(
        &self,
        caller: &CallerContext,
        facts: &CallFacts,
        args: Self::Args,
    ) -> Result<HostCallOutcome, ToolError>;
}

#[async_trait::async_trait]
impl<T: TypedTool> SidecarTool for T {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor {
            name: T::NAME.to_owned(),
            title: Some(T::TITLE.to_owned()),
            description: T::DESCRIPTION.to_owned(),
            input_schema: input_schema::<T::Args>(),
            hints: T::HINTS,
        }
    }

    fn offered_to(&self, class: CallerClass) -> bool {
        TypedTool::offered_to(self, class)
    }

    fn gate_spec(&self) -> ToolSpec {
        let descriptor = SidecarTool::descriptor(self);
        let (requires_approval, annotation) = match T::GATE {
            ToolGate::FromHints => (false, Annotation::from_hints(&descriptor.hints)),
            ToolGate::Write { requires_approval } => (requires_approval, Annotation::Additive),
        };
        ToolSpec {
            name: descriptor.name,
            origin: "native".to_owned(),
            input_schema: Some(descriptor.input_schema),
            required_gates: Vec::new(),
            requires_approval,
            annotation,
        }
    }

    fn holds_its_own_effect(&self) -> bool {
        T::HOLDS_ITS_OWN_EFFECT
    }

    async fn preflight(
        &self,
        caller: &CallerContext,
        arguments: &Map<String, Value>,
    ) -> Result<Option<HostCallOutcome>, PortError> {
        if !T::PREFLIGHT {
            return Ok(None);
        }
        let args: T::Args = match parsed(T::LIMITS, arguments.clone()) {
            Ok(args) => args,
            Err(e) => return Ok(Some(invalid_arguments(T::NAME, &e))),
        };
        match TypedTool::preflight(self, caller, &args).await {
            Ok(answer) => Ok(answer),
            Err(ToolError::Arg(e)) => Ok(Some(invalid_arguments(T::NAME, &e))),
            Err(ToolError::Port(e)) => Err(e),
        }
    }

    async fn call(
        &self,
        caller: &CallerContext,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        SidecarTool::call_with(self, caller, &CallFacts::default(), arguments).await
    }

    async fn call_with(
        &self,
        caller: &CallerContext,
        facts: &CallFacts,
        arguments: Map<String, Value>,
    ) -> Result<HostCallOutcome, PortError> {
        if T::HOLDS_ITS_OWN_EFFECT
            && let Some(refusal) = refused_by_class(self, caller, &arguments)
        {
            return Ok(refusal);
        }
        at_boundary(T::NAME, parse_and_run(self, caller, facts, arguments).await)
    }
}

/// The host does not gate a call whose effect is itself a hold or a person's answer, so the
/// domain's rule for the caller's class (a service or client-task caller's bounds) is asked here:
/// `Some(refusal)` when it refuses. The host checked the arguments against the schema already.
fn refused_by_class<T: TypedTool>(
    tool: &T,
    caller: &CallerContext,
    arguments: &Map<String, Value>,
) -> Option<HostCallOutcome> {
    let verdict = class_verdict(tool, caller, &Value::Object(arguments.clone()));
    (verdict.decision == Decision::Refuse).then(|| refused(T::NAME, &verdict.reason))
}

/// The domain's verdict on `caller` calling `tool` with `arguments` (already checked against
/// its schema).
pub(crate) fn class_verdict<T: TypedTool>(
    tool: &T,
    caller: &CallerContext,
    arguments: &Value,
) -> GateVerdict {
    decide_with_schema(
        &SidecarTool::gate_spec(tool),
        &ArgumentSchema::compile(None),
        &Caller::from(caller.class),
        arguments,
    )
}

/// Sizes first (the one limits table, as at the HTTP route: nothing oversized is parsed, stored
/// or echoed back), then the typed parse, then the tool.
async fn parse_and_run<T: TypedTool>(
    tool: &T,
    caller: &CallerContext,
    facts: &CallFacts,
    arguments: Map<String, Value>,
) -> Result<HostCallOutcome, ToolError> {
    let args = parsed::<T::Args>(T::LIMITS, arguments)?;
    tool.run(caller, facts, args).await
}

/// `arguments` checked against `limits`, then parsed.
fn parsed<A: DeserializeOwned>(limits: Limits, arguments: Map<String, Value>) -> Result<A, ArgError> {
    check_arguments(limits, &arguments)?;
    parse(arguments)
}
