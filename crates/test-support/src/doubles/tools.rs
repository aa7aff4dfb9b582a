//! A fake MCP tool server: scripted handlers per tool, optional delays, and a record of every
//! call (order started, order finished, most calls in flight at once).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use metaforge_ports::{PortError, PortErrorKind, ToolDescriptor, ToolHints, ToolOutput, ToolSource};
use serde_json::{Map, Value, json};

use super::lock;

/// What a fake tool answers for given arguments.
pub type ToolHandler = Arc<dyn Fn(&Map<String, Value>) -> Result<ToolOutput, PortError> + Send + Sync>;

struct FakeTool {
    descriptor: ToolDescriptor,
    handler: ToolHandler,
    delay: Duration,
}

/// An MCP tool server double (unit tests only).
pub struct FakeToolSource {
    name: String,
    tools: Vec<FakeTool>,
    started: Mutex<Vec<(String, Value)>>,
    finished: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    list_error: Option<String>,
}

impl std::fmt::Debug for FakeToolSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeToolSource")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A descriptor with `schema` as its input schema: read-only, or an explicitly non-destructive write.
pub fn descriptor(name: &str, schema: Value, read_only: bool) -> ToolDescriptor {
    ToolDescriptor {
        name: name.to_owned(),
        title: None,
        description: format!("the {name} tool"),
        input_schema: schema,
        hints: ToolHints {
            read_only_hint: Some(read_only),
            destructive_hint: (!read_only).then_some(false),
            ..ToolHints::default()
        },
    }
}

impl FakeToolSource {
    /// A server named `name` with no tools yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            tools: Vec::new(),
            started: Mutex::new(Vec::new()),
            finished: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            list_error: None,
        }
    }

    /// A server whose `tools/list` fails with `message` (`Unavailable`), like one that crashed.
    pub fn unlistable(mut self, message: impl Into<String>) -> Self {
        self.list_error = Some(message.into());
        self
    }

    /// Adds a tool answering with `handler` after `delay`.
    pub fn with_tool(
        mut self,
        descriptor: ToolDescriptor,
        delay: Duration,
        handler: impl Fn(&Map<String, Value>) -> Result<ToolOutput, PortError> + Send + Sync + 'static,
    ) -> Self {
        self.tools.push(FakeTool {
            descriptor,
            handler: Arc::new(handler),
            delay,
        });
        self
    }

    /// Adds a tool that echoes its arguments as `{"tool": name, "arguments": …}` after `delay`.
    pub fn with_echo(self, descriptor: ToolDescriptor, delay: Duration) -> Self {
        let name = descriptor.name.clone();
        self.with_tool(descriptor, delay, move |args| {
            Ok(ToolOutput::json(json!({"tool": name, "arguments": args})))
        })
    }

    /// Every call started, `(tool, arguments)`, in the order it started.
    pub fn calls(&self) -> Vec<(String, Value)> {
        lock(&self.started).clone()
    }

    /// Calls of one tool.
    pub fn calls_of(&self, tool: &str) -> usize {
        lock(&self.started).iter().filter(|(t, _)| t == tool).count()
    }

    /// Tools in the order their calls finished.
    pub fn finished(&self) -> Vec<String> {
        lock(&self.finished).clone()
    }

    /// The most calls that ran at once.
    pub fn max_concurrency(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ToolSource for FakeToolSource {
    fn server_name(&self) -> &str {
        &self.name
    }

    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, PortError> {
        if let Some(message) = &self.list_error {
            return Err(PortError::new(PortErrorKind::Unavailable, message.clone()));
        }
        Ok(self.tools.iter().map(|t| t.descriptor.clone()).collect())
    }

    async fn call_tool(&self, tool: &str, arguments: Map<String, Value>) -> Result<ToolOutput, PortError> {
        let Some(fake) = self.tools.iter().find(|t| t.descriptor.name == tool) else {
            return Err(PortError::new(
                PortErrorKind::NotFound,
                format!("no tool {tool:?}"),
            ));
        };
        lock(&self.started).push((tool.to_owned(), Value::Object(arguments.clone())));
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if !fake.delay.is_zero() {
            tokio::time::sleep(fake.delay).await;
        }
        let result = (fake.handler)(&arguments);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        lock(&self.finished).push(tool.to_owned());
        result
    }
}
