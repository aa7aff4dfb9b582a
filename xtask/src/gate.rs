//! The gate's step runner: every step is timed, has a budget, and is watched.
//!
//! A watchdog thread prints the step that is running every 60 s and, past the step's budget or
//! the gate's whole budget, names the step, kills every process the gate started and exits 1 —
//! so a hung test or peer fails the gate instead of holding it until CI's limit. Every cargo
//! step's stderr is read line by line (and passed on) to count the crates it compiled, which
//! the timing table reports as `cold` (something compiled) or `cached` (nothing did).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How often the watchdog says which step is running.
const HEARTBEAT: Duration = Duration::from_secs(60);

/// The variable every process the gate starts carries (its value is the gate's pid), so the
/// listener check can tell the gate's servers from anybody else's on a shared machine.
pub(crate) const GATE_MARK: &str = "METAFORGE_GATE_PID";

/// How one step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
    /// Not run, for the reason given.
    Skipped(String),
}

/// One line of the timing table.
#[derive(Debug, Clone)]
struct Record {
    name: String,
    seconds: f64,
    budget: Duration,
    outcome: Outcome,
    /// Crates cargo compiled or checked in this step; `None` for a step that is not a cargo build.
    compiled: Option<usize>,
}

/// The step running now, as the watchdog sees it.
struct Running {
    name: String,
    started: Instant,
    budget: Duration,
}

struct State {
    records: Vec<Record>,
    running: Option<Running>,
}

/// A gate: a titled sequence of timed, budgeted steps.
pub(crate) struct Gate {
    title: String,
    started: Instant,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gate {
    /// Starts a gate whose steps together may take at most `budget`, and its watchdog.
    pub(crate) fn start(title: &str, budget: Duration) -> Self {
        let gate = Self {
            title: title.to_owned(),
            started: Instant::now(),
            state: Arc::new(Mutex::new(State {
                records: Vec::new(),
                running: None,
            })),
        };
        let state = Arc::clone(&gate.state);
        let (title, started) = (gate.title.clone(), gate.started);
        std::thread::spawn(move || watchdog(&state, &title, started, budget));
        gate
    }

    /// Runs `body` as the step `name`, which may take at most `budget`.
    pub(crate) fn step(&self, name: &str, budget: Duration, body: impl FnOnce() -> Result<()>) -> Result<()> {
        self.timed(name, budget, None, body)
    }

    /// Records a step that was not run, and why.
    pub(crate) fn skip(&self, name: &str, why: &str) {
        eprintln!("xtask: [{}] skipped {name}: {why}", self.title);
        lock(&self.state).records.push(Record {
            name: name.to_owned(),
            seconds: 0.0,
            budget: Duration::ZERO,
            outcome: Outcome::Skipped(why.to_owned()),
            compiled: None,
        });
    }

    /// Runs `cargo args` (with `envs` and the test tools' environment) as the step `name`,
    /// counting the crates it compiles.
    pub(crate) fn cargo(
        &self,
        name: &str,
        budget: Duration,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<()> {
        let compiled = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&compiled);
        self.timed(name, budget, Some(compiled), || {
            run_counting("cargo", args, envs, &counter)
        })
    }

    fn timed(
        &self,
        name: &str,
        budget: Duration,
        compiled: Option<Arc<AtomicUsize>>,
        body: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        eprintln!(
            "xtask: [{}] step {name} (budget {}s)",
            self.title,
            budget.as_secs()
        );
        let started = Instant::now();
        lock(&self.state).running = Some(Running {
            name: name.to_owned(),
            started,
            budget,
        });
        let result = body();
        let mut state = lock(&self.state);
        state.running = None;
        state.records.push(Record {
            name: name.to_owned(),
            seconds: started.elapsed().as_secs_f64(),
            budget,
            outcome: if result.is_ok() {
                Outcome::Passed
            } else {
                Outcome::Failed
            },
            compiled: compiled.map(|c| c.load(Ordering::Relaxed)),
        });
        drop(state);
        result.with_context(|| format!("step `{name}` failed"))
    }

    /// Ends what the gate started and is still running (a script that died before its guards
    /// stopped its servers), prints the timing table and passes `result` on.
    pub(crate) fn finish(self, result: Result<()>) -> Result<()> {
        let left = kill_descendants();
        if left > 0 {
            eprintln!(
                "xtask: [{}] killed {left} process(es) the gate started that were still running",
                self.title
            );
        }
        let state = lock(&self.state);
        print_table(&self.title, &state.records, None, self.started.elapsed());
        drop(state);
        match result {
            Ok(()) => {
                eprintln!("xtask: {} passed", self.title);
                Ok(())
            }
            Err(err) => Err(err),
        }
    }
}

/// Every 60 s: which step is running; past a budget: abort the gate naming the step.
fn watchdog(state: &Mutex<State>, title: &str, gate_started: Instant, gate_budget: Duration) {
    let mut last_beat = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let guard = lock(state);
        let Some(running) = guard.running.as_ref() else {
            continue;
        };
        let elapsed = running.started.elapsed();
        let over_step = elapsed > running.budget;
        let over_gate = gate_started.elapsed() > gate_budget;
        if over_step || over_gate {
            let what = if over_step {
                format!("its budget of {}s", running.budget.as_secs())
            } else {
                format!("the gate's budget of {}s", gate_budget.as_secs())
            };
            eprintln!(
                "xtask: [{title}] ABORT: step `{}` has run {}s, past {what}; killing what the gate started",
                running.name,
                elapsed.as_secs()
            );
            print_table(title, &guard.records, Some(running), gate_started.elapsed());
            kill_descendants();
            let _ = std::io::stderr().flush();
            std::process::exit(1);
        }
        if last_beat.elapsed() >= HEARTBEAT {
            last_beat = Instant::now();
            eprintln!(
                "xtask: [{title}] still running `{}`: {}s of its {}s (gate {}s)",
                running.name,
                elapsed.as_secs(),
                running.budget.as_secs(),
                gate_started.elapsed().as_secs()
            );
        }
    }
}

fn print_table(title: &str, records: &[Record], aborted: Option<&Running>, total: Duration) {
    let mut out = String::new();
    out.push_str(&format!("\nxtask: {title} timing\n"));
    out.push_str(&format!(
        "| {:<40} | {:>8} | {:>7} | {:<7} | {:<26} |\n",
        "step", "seconds", "budget", "result", "build"
    ));
    out.push_str(&format!(
        "|{:-<42}|{:->10}|{:->9}|{:-<9}|{:-<28}|\n",
        "", "", "", "", ""
    ));
    for record in records {
        let result = match &record.outcome {
            Outcome::Passed => "passed".to_owned(),
            Outcome::Failed => "FAILED".to_owned(),
            Outcome::Skipped(_) => "skipped".to_owned(),
        };
        let build = match (record.compiled, &record.outcome) {
            (_, Outcome::Skipped(why)) => why.clone(),
            (Some(0), _) => "cached".to_owned(),
            (Some(1), _) => "cold: 1 crate compiled".to_owned(),
            (Some(n), _) => format!("cold: {n} crates compiled"),
            (None, _) => String::new(),
        };
        out.push_str(&format!(
            "| {:<40} | {:>8.1} | {:>7} | {:<7} | {:<26} |\n",
            record.name,
            record.seconds,
            record.budget.as_secs(),
            result,
            build
        ));
    }
    if let Some(running) = aborted {
        out.push_str(&format!(
            "| {:<40} | {:>8.1} | {:>7} | {:<7} | {:<26} |\n",
            running.name,
            running.started.elapsed().as_secs_f64(),
            running.budget.as_secs(),
            "ABORTED",
            "over budget"
        ));
    }
    out.push_str(&format!(
        "| {:<40} | {:>8.1} | {:>7} | {:<7} | {:<26} |\n",
        "total",
        total.as_secs_f64(),
        "",
        "",
        ""
    ));
    eprint!("{out}");
}

/// Runs `program args`, passing its stderr on line by line and counting cargo's `Compiling` and
/// `Checking` lines into `compiled`.
fn run_counting(program: &str, args: &[&str], envs: &[(&str, &str)], compiled: &AtomicUsize) -> Result<()> {
    let shown: String = envs.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask: $ {shown}{program} {}", args.join(" "));
    let mut command = Command::new(program);
    crate::without_cargo_run_vars(&mut command);
    command
        .args(args)
        .envs(crate::setup::tool_env().iter().map(|(k, v)| (k, v)))
        .env(GATE_MARK, std::process::id().to_string())
        .envs(envs.iter().copied())
        .stderr(Stdio::piped());
    // The output is read through a pipe: keep cargo's colours for a person at a terminal.
    if std::env::var_os("CARGO_TERM_COLOR").is_none() && std::io::stderr().is_terminal() {
        command.env("CARGO_TERM_COLOR", "always");
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("could not start `{program}`"))?;
    if let Some(stderr) = child.stderr.take() {
        let mut err = std::io::stderr();
        for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
            if is_compile_line(&line) {
                compiled.fetch_add(1, Ordering::Relaxed);
            }
            let _ = err.write_all(&line);
            let _ = err.write_all(b"\n");
        }
    }
    let status = child.wait().with_context(|| format!("waiting for `{program}`"))?;
    if !status.success() {
        bail!("`{program} {}` failed with {status}", args.join(" "));
    }
    Ok(())
}

/// True for cargo's `   Compiling foo v1` / `    Checking foo v1` lines (colour codes ignored).
fn is_compile_line(line: &[u8]) -> bool {
    let text = String::from_utf8_lossy(line);
    let plain = strip_ansi(&text);
    let first = plain.split_whitespace().next();
    matches!(first, Some("Compiling" | "Checking"))
        && plain
            .split_whitespace()
            .nth(2)
            .is_some_and(|v| v.starts_with('v'))
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence ends at its first letter.
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The lines a child prints on `stdout`, `count` of them, read within `within`; fails naming
/// `what` when the child ends first or stays silent past the deadline.
pub(crate) fn lines_within(
    stdout: Option<std::process::ChildStdout>,
    count: usize,
    within: Duration,
    what: &str,
) -> Result<Vec<String>> {
    let stdout = stdout.with_context(|| format!("{what}: no stdout to read"))?;
    let (sender, receiver) = std::sync::mpsc::channel();
    // The reader ends when the child does (end of file), which the caller's guard ensures.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + within;
    let mut lines = Vec::with_capacity(count);
    while lines.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match receiver.recv_timeout(left) {
            Ok(Ok(line)) => lines.push(line),
            Ok(Err(err)) => bail!("{what}: reading its output: {err}"),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                bail!(
                    "{what}: printed {} of {count} line(s) within {}s: {lines:?}",
                    lines.len(),
                    within.as_secs()
                )
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                bail!(
                    "{what}: ended after {} of {count} line(s): {lines:?}",
                    lines.len()
                )
            }
        }
    }
    Ok(lines)
}

/// The parent of every process, from `/proc/<pid>/stat`.
pub(crate) fn parents() -> BTreeMap<u32, u32> {
    let mut parents = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return parents;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces; the parent pid is the second
        // field after it.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parents.insert(pid, ppid);
        }
    }
    parents
}

/// True when `pid` is this process or one of its descendants.
pub(crate) fn is_ours(pid: u32, parents: &BTreeMap<u32, u32>) -> bool {
    let me = std::process::id();
    let mut current = pid;
    for _ in 0..parents.len() + 1 {
        if current == me {
            return true;
        }
        match parents.get(&current) {
            Some(&parent) if parent != 0 && parent != current => current = parent,
            _ => return false,
        }
    }
    false
}

/// True when `pid`'s environment carries this gate's mark (a server a test started that
/// outlived its parent is no longer our descendant, but keeps the environment it was given).
pub(crate) fn carries_mark(pid: u32) -> bool {
    let wanted: OsString = format!("{GATE_MARK}={}", std::process::id()).into();
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|raw| raw.split(|b| *b == 0).any(|var| var == wanted.as_encoded_bytes()))
}

/// SIGKILLs every process the gate started — its descendants and whatever carries its mark —
/// and says how many there were.
fn kill_descendants() -> usize {
    let parents = parents();
    let me = std::process::id();
    let mut killed = 0;
    for &pid in parents.keys() {
        if pid != me && (is_ours(pid, &parents) || carries_mark(pid)) {
            let Ok(raw) = i32::try_from(pid) else {
                continue;
            };
            if nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), nix::sys::signal::Signal::SIGKILL)
                .is_ok()
            {
                killed += 1;
            }
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use super::{is_compile_line, is_ours, lines_within, parents, strip_ansi};

    #[test]
    fn a_child_silent_past_the_deadline_or_gone_early_fails_naming_it() {
        let mut quiet = Command::new("sleep")
            .arg("5")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let err = lines_within(quiet.stdout.take(), 1, Duration::from_millis(200), "the sleeper")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the sleeper: printed 0 of 1 line(s) within 0s"),
            "{err}"
        );
        quiet.kill().unwrap();
        quiet.wait().unwrap();
        let mut brief = Command::new("echo")
            .arg("one")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let err = lines_within(brief.stdout.take(), 2, Duration::from_secs(5), "the echo")
            .unwrap_err()
            .to_string();
        assert!(err.contains("the echo: ended after 1 of 2"), "{err}");
        brief.wait().unwrap();
        let mut talker = Command::new("printf")
            .arg("a\\nb\\n")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        assert_eq!(
            lines_within(talker.stdout.take(), 2, Duration::from_secs(5), "printf").unwrap(),
            vec!["a".to_owned(), "b".to_owned()]
        );
        talker.wait().unwrap();
    }

    #[test]
    fn cargo_compile_lines_count_with_or_without_colour_and_test_output_does_not() {
        let table: &[(&str, bool)] = &[
            ("   Compiling serde v1.0.228", true),
            (
                "    Checking metaforge-domain v0.1.0 (/work/main/crates/domain)",
                true,
            ),
            ("\u{1b}[1m\u{1b}[32m   Compiling\u{1b}[0m tokio v1.48.0", true),
            (
                "    Finished `dev` profile [unoptimized] target(s) in 1.2s",
                false,
            ),
            ("Checking the approvals ledger", false),
            ("        PASS [   0.010s] metaforge-domain it::rules", false),
        ];
        for (line, counted) in table {
            assert_eq!(is_compile_line(line.as_bytes()), *counted, "{line:?}");
        }
        assert_eq!(strip_ansi("\u{1b}[1mbold\u{1b}[0m plain"), "bold plain");
    }

    #[test]
    fn this_process_and_its_children_are_ours_and_init_is_not() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let table = parents();
        assert!(is_ours(std::process::id(), &table));
        assert!(is_ours(child.id(), &table));
        assert!(!is_ours(1, &table));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
