//! The project context a flow is tailored under, and the questions asked when it is incomplete
//! (FORGE-463): missing inputs are asked for, never guessed.
//!
//! The questions and the context fields their answers fill are one piece of knowledge, kept
//! here: [`required_questions`] asks by [`QuestionId`], and [`FlowContext::answer`] folds a
//! person's answer to that id into the field it names, typed, so a renamed field fails to
//! compile instead of failing at run time in a door.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// How the thing will be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ManufacturingRoute {
    /// Made with the person's own processes, machines and stock.
    InHouse,
    /// Made by a vendor.
    Vendor,
    /// Not decided yet: tailoring inserts a human-gated route-selection phase.
    Undecided,
}

/// How far the person wants to take the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TargetMaturity {
    /// A concept only.
    Concept,
    /// Validated in simulation.
    SimValidated,
    /// Validated on a physical article.
    PhysicallyValidated,
    /// Released for production.
    Released,
}

/// What the person can make it with. snake_case and camelCase field names are both accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ManufacturingContext {
    /// in_house, vendor or undecided; `None` when not stated.
    #[serde(default)]
    pub route: Option<ManufacturingRoute>,
    /// Processes available (free text each).
    #[serde(default)]
    pub processes: Vec<String>,
    /// Machines available, as free-form capability descriptions.
    #[serde(default)]
    pub machines: Vec<String>,
    /// Stock materials at hand.
    #[serde(default, alias = "stockMaterials")]
    pub stock_materials: Vec<String>,
    /// How many will be made.
    #[serde(
        default,
        alias = "productionQuantity",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u64>, minimum = 0, maximum = 4_294_967_295_u64))]
    pub production_quantity: Option<u32>,
}

/// The request context for tailoring and for context-aware validation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlowContext {
    /// Manufacturing route and capabilities.
    #[serde(default, alias = "manufacturingContext")]
    pub manufacturing_context: Option<ManufacturingContext>,
    /// How far the person wants to go.
    #[serde(default, alias = "targetMaturity")]
    pub target_maturity: Option<TargetMaturity>,
    /// What it carries and how it is used; `unknown` / `tbd` are valid answers meaning unknown.
    #[serde(default, alias = "loadsAndUse")]
    pub loads_and_use: Option<String>,
    /// Optional budget, free-form (a number or a text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<serde_json::Value>,
}

impl FlowContext {
    /// The stated route, if any.
    pub fn route(&self) -> Option<ManufacturingRoute> {
        self.manufacturing_context.as_ref().and_then(|m| m.route)
    }

    /// True when loads were stated, whatever the answer (including "unknown").
    pub fn loads_stated(&self) -> bool {
        self.loads_and_use
            .as_deref()
            .is_some_and(|l| !l.trim().is_empty())
    }

    /// True when the loads are unknown: not stated, or answered `unknown` / `tbd`.
    pub fn loads_unknown(&self) -> bool {
        match self.loads_and_use.as_deref().map(str::trim) {
            None | Some("") => true,
            Some(answer) => {
                let lowered = answer.to_ascii_lowercase();
                let lowered = lowered.trim_end_matches(['.', '!']);
                matches!(lowered, "unknown" | "tbd" | "to be determined" | "not known")
            }
        }
    }

    /// The server-written basis a tailoring change records: what the generator was told.
    pub fn basis(&self) -> String {
        let mc = self.manufacturing_context.clone().unwrap_or_default();
        let route = mc.route.map_or("unstated", |r| match r {
            ManufacturingRoute::InHouse => "in_house",
            ManufacturingRoute::Vendor => "vendor",
            ManufacturingRoute::Undecided => "undecided",
        });
        format!(
            "route={route}; processes=[{}]; machines=[{}]; stock_materials=[{}]",
            mc.processes.join(", "),
            mc.machines.join(", "),
            mc.stock_materials.join(", ")
        )
    }

    /// Folds a person's answer to question `id` into the field the question names (its
    /// [`Question::field`]): the route, the in-house capabilities, the target maturity, or the
    /// loads. A `null` answer clears the field. Nothing changes when the answer is refused.
    ///
    /// `in_house_capabilities` takes a list of processes, or comma-separated text of them, or an
    /// object of capability groups (`processes`, `machines`, `stock_materials`, each a list or
    /// comma-separated text, plus `production_quantity`), which replaces the groups it names;
    /// other keys in that object are ignored, as the manufacturing context ignores them.
    pub fn answer(&mut self, id: QuestionId, value: &Value) -> Result<(), ContextAnswerError> {
        let refused = |e: serde_json::Error| ContextAnswerError {
            question: id,
            message: e.to_string(),
        };
        match id {
            QuestionId::ManufacturingRoute => {
                let route = Option::<ManufacturingRoute>::deserialize(value).map_err(refused)?;
                self.manufacturing_context.get_or_insert_default().route = route;
            }
            QuestionId::InHouseCapabilities => {
                let answer = CapabilitiesAnswer::deserialize(value).map_err(refused)?;
                let mc = self.manufacturing_context.get_or_insert_default();
                match answer {
                    CapabilitiesAnswer::Processes(list) => mc.processes = list.0,
                    CapabilitiesAnswer::Groups(groups) => {
                        if let Some(list) = groups.processes {
                            mc.processes = list.0;
                        }
                        if let Some(list) = groups.machines {
                            mc.machines = list.0;
                        }
                        if let Some(list) = groups.stock_materials {
                            mc.stock_materials = list.0;
                        }
                        if let Some(quantity) = groups.production_quantity {
                            mc.production_quantity = quantity;
                        }
                    }
                }
            }
            QuestionId::TargetMaturity => {
                self.target_maturity = Option::<TargetMaturity>::deserialize(value).map_err(refused)?;
            }
            QuestionId::LoadsAndUse => {
                self.loads_and_use = Option::<String>::deserialize(value).map_err(refused)?;
            }
        }
        Ok(())
    }
}

/// A list answer: a list of strings, or one text of comma-separated items (blanks dropped).
#[derive(Debug)]
struct Listed(Vec<String>);

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged, expecting = "a list of strings or comma-separated text")]
        enum Form {
            Text(String),
            List(Vec<String>),
        }
        Ok(Self(match Form::deserialize(deserializer)? {
            Form::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(str::to_owned)
                .collect(),
            Form::List(list) => list,
        }))
    }
}

/// The capability groups an object answer to `in_house_capabilities` may replace.
#[derive(Debug, Deserialize)]
struct CapabilityGroups {
    #[serde(default)]
    processes: Option<Listed>,
    #[serde(default)]
    machines: Option<Listed>,
    #[serde(default, alias = "stockMaterials")]
    stock_materials: Option<Listed>,
    #[serde(default, alias = "productionQuantity", deserialize_with = "present_or_null")]
    production_quantity: Option<Option<u32>>,
}

/// A present field as `Some` (its value, which may be `null`), so `null` clears it.
fn present_or_null<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(deserializer).map(Some)
}

/// An answer to `in_house_capabilities`.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a list of processes, comma-separated text, or an object of capability groups"
)]
enum CapabilitiesAnswer {
    Processes(Listed),
    Groups(CapabilityGroups),
}

/// The questions the server asks before it tailors, by stable id. The id is also the key a
/// person's answer comes back under (`answers: {manufacturing_route: …}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum QuestionId {
    /// How it will be made: in house, by a vendor, or undecided.
    ManufacturingRoute,
    /// What an in-house maker has: processes, machines, stock.
    InHouseCapabilities,
    /// How far the work should go.
    TargetMaturity,
    /// What it carries and how it is used.
    LoadsAndUse,
}

impl QuestionId {
    /// Every id, in the order [`required_questions`] asks them.
    pub const ALL: [Self; 4] = [
        Self::ManufacturingRoute,
        Self::InHouseCapabilities,
        Self::TargetMaturity,
        Self::LoadsAndUse,
    ];

    /// The wire id (`manufacturing_route`, …), as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ManufacturingRoute => "manufacturing_route",
            Self::InHouseCapabilities => "in_house_capabilities",
            Self::TargetMaturity => "target_maturity",
            Self::LoadsAndUse => "loads_and_use",
        }
    }
}

impl fmt::Display for QuestionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Text that is not the id of a question the server asks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a question MetaForge asks")]
pub struct UnknownQuestion(pub String);

impl FromStr for QuestionId {
    type Err = UnknownQuestion;

    fn from_str(id: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|q| q.as_str() == id)
            .ok_or_else(|| UnknownQuestion(id.to_owned()))
    }
}

/// A person's answer that does not fit the field its question fills; the context is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{question}: {message}")]
pub struct ContextAnswerError {
    /// The question answered.
    pub question: QuestionId,
    /// What is wrong with the answer.
    pub message: String,
}

/// One question the server asks before it tailors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    /// Stable id: manufacturing_route, in_house_capabilities, target_maturity, loads_and_use.
    pub id: QuestionId,
    /// The question, for a person.
    pub question: &'static str,
    /// Why it matters.
    pub why: &'static str,
    /// choice, list_group or text.
    pub answer_type: &'static str,
    /// The allowed answers, for choices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<&'static str>>,
    /// The request field the answer goes in.
    pub field: &'static str,
}

/// The questions still open for `context`, in the fixed order manufacturing_route,
/// in_house_capabilities, target_maturity, loads_and_use. Empty means tailoring may proceed.
pub fn required_questions(context: Option<&FlowContext>) -> Vec<Question> {
    let empty = FlowContext::default();
    let ctx = context.unwrap_or(&empty);
    let mut questions = Vec::new();
    match ctx.manufacturing_context.as_ref().and_then(|m| m.route.map(|r| (m, r))) {
        None => questions.push(Question {
            id: QuestionId::ManufacturingRoute,
            question: "How will it be made: in house with your own equipment, by a vendor, or is that undecided?",
            why: "The flow is manufacturing-led: process and material choices follow from the route, and an undecided route adds a route-selection gate.",
            answer_type: "choice",
            options: Some(vec!["in_house", "vendor", "undecided"]),
            field: "manufacturing_context.route",
        }),
        Some((mc, ManufacturingRoute::InHouse))
            if mc.processes.is_empty() && mc.machines.is_empty() && mc.stock_materials.is_empty() =>
        {
            questions.push(Question {
                id: QuestionId::InHouseCapabilities,
                question: "Which processes, machines and stock materials do you have?",
                why: "Making it in house only works with what you actually have; the design is derived from those capabilities.",
                answer_type: "list_group",
                options: None,
                field: "manufacturing_context",
            });
        }
        Some(_) => {}
    }
    if ctx.target_maturity.is_none() {
        questions.push(Question {
            id: QuestionId::TargetMaturity,
            question: "How far do you want to take it: concept, validated in simulation, validated physically, or released?",
            why: "The target maturity decides which verification phases the flow must keep.",
            answer_type: "choice",
            options: Some(vec!["concept", "sim_validated", "physically_validated", "released"]),
            field: "target_maturity",
        });
    }
    if !ctx.loads_stated() {
        questions.push(Question {
            id: QuestionId::LoadsAndUse,
            question: "What loads will it carry and how will it be used? (\"unknown\" is a valid answer.)",
            why: "Without known loads no test plan can stand in for a simulation or verification phase.",
            answer_type: "text",
            options: None,
            field: "loads_and_use",
        });
    }
    questions
}
