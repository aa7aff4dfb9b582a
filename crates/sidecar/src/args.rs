//! The sidecar tools' arguments as types: each tool parses its arguments into one struct, and
//! declares its `input_schema` generated from that same struct, so the schema a client reads and
//! the parser the tool runs cannot drift (issue 11, W5).
//!
//! The wire shape is the one the tools have always taken: snake_case, `template_id` (with the
//! HTTP route's `template` accepted as an alias), unknown top-level fields ignored. Nested domain
//! values (a flow, operations, a context) are parsed by the domain's own serde types, which refuse
//! what they have always refused; their schema stays a plain object, as before, so the host's
//! schema check refuses no call it accepted before. An optional field may be left out, never sent
//! as `null` (the schema says so, as it did when it was written by hand).
//!
//! Every argument problem is one [`ArgError`] naming the field; the tool boundary turns it into the
//! MCP `invalid_arguments` envelope once ([`crate::envelope::invalid_arguments`]).

use metaforge_app::limits::FieldTooLarge;
use metaforge_domain::flow::{
    ContextAnswerError, Flow, FlowContext, MODEL_QUESTION_PREFIX, Operation, QuestionId, SizeLimitError,
};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A JSON object of any shape: the schema of a nested value the domain's serde types parse.
type JsonObject = Map<String, Value>;

/// A tool argument the tool cannot use: which field, and why. Nothing was done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ArgError {
    /// The argument's path (`template_id`, `operations[2].phase`, `answers.target_maturity`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ArgError {
    /// The problem `message` with argument `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<FieldTooLarge> for ArgError {
    fn from(err: FieldTooLarge) -> Self {
        Self::new(err.field.clone(), err.to_string())
    }
}

impl From<SizeLimitError> for ArgError {
    fn from(err: SizeLimitError) -> Self {
        Self::new(err.field, err.to_string())
    }
}

impl From<ContextAnswerError> for ArgError {
    fn from(err: ContextAnswerError) -> Self {
        Self::new(format!("answers.{}", err.question), err.message)
    }
}

/// Parses a tool's arguments into `T`; a problem names the field's path.
pub fn parse<T: DeserializeOwned>(arguments: Map<String, Value>) -> Result<T, ArgError> {
    serde_path_to_error::deserialize(Value::Object(arguments)).map_err(|err| {
        let path = err.path().to_string();
        let field = if path == "." { "arguments".to_owned() } else { path };
        ArgError::new(field, err.into_inner().to_string())
    })
}

/// The `input_schema` a tool declares for arguments of type `T`: the JSON Schema (2020-12)
/// generated from `T`, with subschemas inlined, without the root's title and description (the
/// tool descriptor carries its own), and with optional fields typed as their value (absent, not
/// `null`).
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(root) = schema.as_object_mut() {
        root.remove("title");
        root.remove("description");
        let properties = root
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(properties) = properties.as_object_mut() {
            for property in properties.values_mut() {
                not_null(property);
            }
        }
    }
    schema
}

/// Drops `null` from a property's `type` list (`["string", "null"]` → `"string"`).
fn not_null(property: &mut Value) {
    let Some(Value::Array(types)) = property.get_mut("type") else {
        return;
    };
    types.retain(|t| t != "null");
    if let [only] = types.as_slice() {
        let only = only.clone();
        if let Some(object) = property.as_object_mut() {
            object.insert("type".to_owned(), only);
        }
    }
}

/// `flow.list` takes no arguments (any it is sent are ignored).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct FlowListArgs {}

/// `flow.validate`: exactly one of `flow`, `source`, `template_id`, and optionally a context.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct FlowValidateArgs {
    /// the flow document
    #[schemars(with = "Option<JsonObject>")]
    pub flow: Option<Flow>,
    /// the flow as YAML or JSON text
    pub source: Option<String>,
    /// a built-in template id, e.g. mech_v1
    pub template_id: Option<String>,
    /// tailoring context (manufacturing_context, target_maturity, loads_and_use)
    #[schemars(with = "Option<JsonObject>")]
    pub context: Option<FlowContext>,
}

/// Which flow a `flow.validate` call names.
#[derive(Debug, Clone, PartialEq)]
pub enum FlowToValidate {
    /// A flow document.
    Flow(Box<Flow>),
    /// YAML or JSON text.
    Source(String),
    /// A built-in template id.
    Template(String),
}

impl FlowValidateArgs {
    /// The one flow named; naming none or several is refused.
    pub fn flow_to_validate(self) -> Result<FlowToValidate, ArgError> {
        let given: Vec<&str> = [
            ("flow", self.flow.is_some()),
            ("source", self.source.is_some()),
            ("template_id", self.template_id.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect();
        let refused = || {
            ArgError::new(
                "flow",
                format!("give exactly one of flow, source, template_id (got {given:?})"),
            )
        };
        match (self.flow, self.source, self.template_id) {
            (Some(flow), None, None) => Ok(FlowToValidate::Flow(Box::new(flow))),
            (None, Some(source), None) => Ok(FlowToValidate::Source(source)),
            (None, None, Some(template)) => Ok(FlowToValidate::Template(template)),
            (None, None, None) | (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                Err(refused())
            }
        }
    }
}

/// `flow.propose`: a template and the caller's operations, or only the intent (and context) for
/// MetaForge's own generator; `answers` to questions asked earlier.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct FlowProposeArgs {
    /// e.g. mech_v1 (design_v1 when operations come without one)
    #[serde(alias = "template")]
    pub template_id: Option<String>,
    /// what the person wants made; required when no template_id and operations are sent
    pub intent: Option<String>,
    /// [{op, phase, value, rationale}]
    #[schemars(with = "Option<Vec<JsonObject>>")]
    pub operations: Option<Vec<Operation>>,
    /// manufacturing_context, target_maturity, loads_and_use
    #[schemars(with = "Option<JsonObject>")]
    pub context: Option<FlowContext>,
    /// answers to earlier questions, keyed by question id
    pub answers: Option<JsonObject>,
    /// requirements already known, for MetaForge's generator (free-form)
    pub requirements: Option<Value>,
}

impl FlowProposeArgs {
    /// True when the call asks for the server's generator: neither a template nor operations.
    pub fn wants_generator(&self) -> bool {
        self.template_id.is_none() && self.operations.is_none()
    }

    /// The intent the server's generator tailors to: the caller's intent with the person's
    /// answers to the model's product-specific questions (`model_1` …) appended, one line each.
    /// `None` when no intent was given.
    pub fn generator_intent(&self) -> Option<String> {
        let intent = self.intent.as_deref().map(str::trim).filter(|i| !i.is_empty())?;
        let mut text = intent.to_owned();
        for (id, answer) in self
            .answers
            .iter()
            .flatten()
            .filter(|(id, _)| id.starts_with(MODEL_QUESTION_PREFIX))
        {
            let answer = answer.as_str().map_or_else(|| answer.to_string(), str::to_owned);
            text.push_str(&format!("\nAnswer to {id}: {answer}"));
        }
        Some(text)
    }

    /// The context with the person's answers folded in, each by its question
    /// ([`FlowContext::answer`]); the model's questions refine the intent instead
    /// ([`generator_intent`](Self::generator_intent)). An answer to a question MetaForge does not
    /// ask is refused naming it.
    pub fn context_with_answers(&self) -> Result<Option<FlowContext>, ArgError> {
        let Some(answers) = &self.answers else {
            return Ok(self.context.clone());
        };
        let mut context = self.context.clone().unwrap_or_default();
        for (id, answer) in answers {
            match id.parse::<QuestionId>() {
                Ok(question) => context.answer(question, answer)?,
                Err(_) if id.starts_with(MODEL_QUESTION_PREFIX) => {}
                Err(_) => {
                    return Err(ArgError::new(
                        format!("answers.{id}"),
                        "not a question flow.propose asks",
                    ));
                }
            }
        }
        Ok(Some(context))
    }
}

/// `flow.version`: one stored version by id.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct FlowVersionArgs {
    /// flow version id
    pub id: String,
}

/// `approvals.list`: the pending holds, or the latest of any state.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct ApprovalsListArgs {
    /// list the latest N holds of any state instead of the pending ones
    #[schemars(range(min = 1, max = 200))]
    pub recent: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn property_names(schema: &Value) -> Vec<&str> {
        schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn each_schema_declares_exactly_the_fields_its_parser_reads() {
        assert!(property_names(&input_schema::<FlowListArgs>()).is_empty());
        assert_eq!(
            property_names(&input_schema::<FlowValidateArgs>()),
            ["flow", "source", "template_id", "context"]
        );
        assert_eq!(
            property_names(&input_schema::<FlowProposeArgs>()),
            [
                "template_id",
                "intent",
                "operations",
                "context",
                "answers",
                "requirements"
            ]
        );
        let version = input_schema::<FlowVersionArgs>();
        assert_eq!(property_names(&version), ["id"]);
        assert_eq!(version["required"], json!(["id"]));
        let approvals = input_schema::<ApprovalsListArgs>();
        assert_eq!(approvals["properties"]["recent"]["type"], "integer");
        assert_eq!(approvals["properties"]["recent"]["minimum"], 1);
        assert_eq!(approvals["properties"]["recent"]["maximum"], 200);
    }

    #[test]
    fn schemas_are_plain_objects_with_optional_fields_that_are_never_null() {
        let schema = input_schema::<FlowProposeArgs>();
        assert_eq!(schema["type"], "object");
        assert!(schema.get("$schema").is_none() && schema.get("title").is_none());
        assert!(schema.get("required").is_none_or(|r| r == &json!([])));
        assert_eq!(schema["properties"]["template_id"]["type"], "string");
        assert_eq!(schema["properties"]["context"]["type"], "object");
        assert_eq!(schema["properties"]["operations"]["type"], "array");
        assert_eq!(schema["properties"]["operations"]["items"]["type"], "object");
        assert_eq!(
            schema["properties"]["template_id"]["description"],
            "e.g. mech_v1 (design_v1 when operations come without one)"
        );
        let problems =
            metaforge_domain::tool_gating::validate_arguments(Some(&schema), &json!({"template_id": null}));
        assert!(!problems.is_empty(), "null is not a template id");
    }

    #[test]
    fn the_http_routes_template_spelling_is_accepted_as_template_id() {
        let parsed: FlowProposeArgs = parse(args(json!({"template": "mech_v1"}))).unwrap();
        assert_eq!(parsed.template_id.as_deref(), Some("mech_v1"));
        assert!(!parsed.wants_generator());
    }

    #[test]
    fn a_bad_argument_is_named_by_its_path() {
        let err = parse::<FlowProposeArgs>(args(json!({
            "template_id": "mech_v1",
            "context": {"manufacturing_context": {"route": "by_owl"}}
        })))
        .unwrap_err();
        assert_eq!(err.field, "context.manufacturing_context.route");
        assert!(err.message.contains("by_owl"), "{err}");
        let err = parse::<FlowProposeArgs>(args(json!({"operations": [{"op": 3}]}))).unwrap_err();
        assert_eq!(err.field, "operations[0].op");
        let err = parse::<FlowVersionArgs>(Map::new()).unwrap_err();
        assert_eq!(err.field, "arguments");
        assert!(err.message.contains("`id`"), "{err}");
    }

    #[test]
    fn unknown_top_level_arguments_are_ignored_as_they_always_were() {
        let parsed: FlowVersionArgs = parse(args(json!({"id": "v1", "approve": true}))).unwrap();
        assert_eq!(parsed.id, "v1");
    }

    #[test]
    fn answers_fold_into_the_context_by_question_and_model_answers_refine_the_intent() {
        let parsed: FlowProposeArgs = parse(args(json!({
            "intent": " a wall shelf ",
            "context": {"manufacturing_context": {"route": "in_house"}},
            "answers": {"in_house_capabilities": "FDM printing, laser cutting",
                        "target_maturity": "concept", "model_1": "a brick wall"}
        })))
        .unwrap();
        let context = parsed.context_with_answers().unwrap().unwrap();
        let mc = context.manufacturing_context.unwrap();
        assert_eq!(mc.processes, ["FDM printing", "laser cutting"]);
        assert!(context.target_maturity.is_some());
        assert_eq!(
            parsed.generator_intent().as_deref(),
            Some("a wall shelf\nAnswer to model_1: a brick wall")
        );
    }

    #[test]
    fn an_answer_to_no_question_or_of_the_wrong_kind_names_it() {
        let parsed: FlowProposeArgs = parse(args(json!({"answers": {"favourite_colour": "red"}}))).unwrap();
        let err = parsed.context_with_answers().unwrap_err();
        assert_eq!(err.field, "answers.favourite_colour");
        let parsed: FlowProposeArgs =
            parse(args(json!({"answers": {"target_maturity": "finished"}}))).unwrap();
        let err = parsed.context_with_answers().unwrap_err();
        assert_eq!(err.field, "answers.target_maturity");
        assert!(err.message.contains("finished"), "{err}");
    }

    #[test]
    fn flow_validate_takes_exactly_one_flow() {
        let none: FlowValidateArgs = parse(Map::new()).unwrap();
        assert_eq!(none.flow_to_validate().unwrap_err().field, "flow");
        let two: FlowValidateArgs =
            parse(args(json!({"source": "id: x", "template_id": "mech_v1"}))).unwrap();
        let err = two.flow_to_validate().unwrap_err();
        assert!(err.message.contains("[\"source\", \"template_id\"]"), "{err}");
        let one: FlowValidateArgs = parse(args(json!({"template_id": "mech_v1"}))).unwrap();
        assert_eq!(
            one.flow_to_validate().unwrap(),
            FlowToValidate::Template("mech_v1".to_owned())
        );
    }
}
