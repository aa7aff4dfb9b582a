//! The project context a flow is tailored under, and the questions asked when it is incomplete
//! (FORGE-463): missing inputs are asked for, never guessed.

use serde::{Deserialize, Serialize};

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
}

/// One question the server asks before it tailors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    /// Stable id: manufacturing_route, in_house_capabilities, target_maturity, loads_and_use.
    pub id: &'static str,
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
            id: "manufacturing_route",
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
                id: "in_house_capabilities",
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
            id: "target_maturity",
            question: "How far do you want to take it: concept, validated in simulation, validated physically, or released?",
            why: "The target maturity decides which verification phases the flow must keep.",
            answer_type: "choice",
            options: Some(vec!["concept", "sim_validated", "physically_validated", "released"]),
            field: "target_maturity",
        });
    }
    if !ctx.loads_stated() {
        questions.push(Question {
            id: "loads_and_use",
            question: "What loads will it carry and how will it be used? (\"unknown\" is a valid answer.)",
            why: "Without known loads no test plan can stand in for a simulation or verification phase.",
            answer_type: "text",
            options: None,
            field: "loads_and_use",
        });
    }
    questions
}
