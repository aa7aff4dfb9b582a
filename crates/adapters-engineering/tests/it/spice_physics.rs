//! `spice.*` against ngspice in its sandbox, each figure checked against the textbook formula it
//! must match (and printed beside it).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a tool that misbehaves must fail the test loudly"
)]

use std::path::PathBuf;
use std::time::Duration;

use metaforge_adapters_engineering::runner::Runner;
use metaforge_adapters_engineering::spice::SpiceHost;

use metaforge_sandbox::ResourceLimits;
use metaforge_test_support::{Peer, require};
use serde_json::{Value, json};

fn host() -> Option<SpiceHost> {
    require(Peer::Bubblewrap)?;
    let ngspice = require(Peer::Ngspice)?;
    let runner = Runner::new(
        ngspice,
        ResourceLimits {
            cpu_seconds: 60,
            memory_mb: 2048,
            file_size_mb: 256,
            open_files: 256,
            processes: 64,
        },
        Duration::from_secs(60),
        true,
        Some("/usr/bin:/bin"),
        &[PathBuf::from("/root")],
    )
    .unwrap();
    Some(SpiceHost::new(runner, "ngspice-39"))
}

/// The tool's result, and whether it was an error envelope.
async fn call(host: &SpiceHost, tool: &str, arguments: Value) -> (Value, bool) {
    let (value, output) = crate::host_call::call_host(host, tool, arguments).await;
    (value, output.is_error)
}

#[tokio::test]
async fn a_10k_10k_divider_on_5_v_sits_at_2_5_v() {
    let Some(host) = host() else {
        return;
    };
    let netlist = "divider\nV1 in 0 DC 5\nR1 in out 10k\nR2 out 0 10k\n.end\n";
    let (result, error) = call(&host, "spice.op", json!({"netlist": netlist})).await;
    assert!(!error, "{result}");
    let out = result["node_voltages_v"]["out"].as_f64().unwrap();
    let current = result["source_currents_a"]["v1"].as_f64().unwrap();
    println!("divider: v(out) = {out} V (theory 2.5 V), i(V1) = {current} A (theory -0.25 mA)");
    assert!((out - 2.5).abs() < 1e-6, "{result}");
    assert!((current + 2.5e-4).abs() < 1e-9, "{result}");
    assert_eq!(result["run"]["program"], "ngspice");
    assert_eq!(result["run"]["input_sha256"].as_str().unwrap().len(), 64);
}

#[tokio::test]
async fn an_rc_low_pass_is_3_db_down_at_one_over_two_pi_rc() {
    let Some(host) = host() else {
        return;
    };
    let (r, c) = (1_000.0_f64, 1e-6_f64);
    let netlist =
        "rc low-pass\nV1 in 0 AC 1\nR1 in out 1k\nC1 out 0 1u\n.meas ac f3db WHEN vdb(out)=-3.0103\n";
    let (result, error) = call(
        &host,
        "spice.ac",
        json!({"netlist": netlist, "start_hz": 1, "stop_hz": 1e6, "points_per_decade": 50, "outputs": ["out"]}),
    )
    .await;
    assert!(!error, "{result}");
    let corner = result["nodes"]["out"]["minus_3db_hz"][0].as_f64().unwrap();
    let theory = 1.0 / (2.0 * std::f64::consts::PI * r * c);
    println!("rc low-pass: -3 dB at {corner:.3} Hz (theory {theory:.3} Hz)");
    assert!((corner - theory).abs() / theory < 0.01, "{result}");
    assert_eq!(
        result["nodes"]["out"]["minus_3db_hz"].as_array().unwrap().len(),
        1,
        "a low-pass has one corner"
    );
    let points = result["nodes"]["out"]["points"].as_array().unwrap();
    assert!(points.len() <= 200);
    // The netlist's own measurement of the corner agrees (ngspice interpolates between points).
    let measured = result["measurements"]["f3db"].as_f64().unwrap();
    println!("rc low-pass: .meas ac f3db = {measured:.3} Hz");
    assert!((measured - theory).abs() / theory < 0.01, "{result}");
    let last_phase = points.last().unwrap()["phase_deg"].as_f64().unwrap();
    assert!(
        (last_phase + 90.0).abs() < 1.0,
        "far above the corner the phase is -90°: {last_phase}"
    );
}

#[tokio::test]
async fn an_rlc_step_overshoots_as_its_damping_ratio_says() {
    let Some(host) = host() else {
        return;
    };
    // Series RLC driven by a 1 V step, output across C: zeta = R/2 * sqrt(C/L).
    let (r, l, c) = (20.0_f64, 10e-3_f64, 1e-6_f64);
    let zeta = r / 2.0 * (c / l).sqrt();
    let theory = (-std::f64::consts::PI * zeta / (1.0 - zeta * zeta).sqrt()).exp();
    let netlist = "rlc step\nV1 in 0 PWL(0 0 1n 1)\nR1 in a 20\nL1 a out 10m\nC1 out 0 1u\n.meas tran vmax MAX v(out)\n";
    let (result, error) = call(
        &host,
        "spice.transient",
        json!({"netlist": netlist, "step_s": 1e-6, "stop_s": 5e-3, "max_step_s": 1e-6, "outputs": ["out"]}),
    )
    .await;
    assert!(!error, "{result}");
    let peak = result["nodes"]["out"]["max_v"].as_f64().unwrap();
    let measured = result["measurements"]["vmax"].as_f64().unwrap();
    let overshoot = peak - 1.0;
    println!(
        "rlc step: zeta = {zeta:.3}, overshoot {:.4} (theory {theory:.4}), .meas vmax = {measured:.4} V",
        overshoot
    );
    assert!((overshoot - theory).abs() / theory < 0.02, "{result}");
    assert!(
        (measured - peak).abs() < 1e-3,
        "the .meas result is the same peak"
    );
    let points = result["nodes"]["out"]["points"].as_array().unwrap();
    assert!(points.len() <= 200, "downsampled: {}", points.len());
    let kept_peak = points
        .iter()
        .map(|p| p["v"].as_f64().unwrap())
        .fold(f64::MIN, f64::max);
    assert!(
        (kept_peak - peak).abs() < 1e-9,
        "the downsampled vector keeps the peak"
    );
}

#[tokio::test]
async fn a_netlist_ngspice_cannot_read_is_refused_with_its_line() {
    let Some(host) = host() else {
        return;
    };
    // A comment before the bad line: the line ngspice names is still the caller's.
    let netlist = "bad\n* supply\nV1 in 0 DC 5\nR1 in out 10k\nC2 out 0 foo\n";
    let (result, error) = call(&host, "spice.validate_netlist", json!({"netlist": netlist})).await;
    println!("{result}");
    assert!(error);
    assert_eq!(result["error"], "simulation_failed");
    let errors = result["errors"].to_string();
    assert!(
        errors.contains("line 5"),
        "ngspice names the caller's line: {errors}"
    );
    let (ok, error) = call(
        &host,
        "spice.validate_netlist",
        json!({"netlist": "ok\nV1 a 0 1\nR1 a 0 1k\n"}),
    )
    .await;
    assert!(!error, "{ok}");
    assert_eq!(ok["nodes"], json!(["a"]));
}

#[tokio::test]
async fn a_netlist_asking_for_a_shell_is_refused_before_ngspice_runs() {
    let Some(host) = host() else {
        return;
    };
    let netlist = "evil\nV1 a 0 1\nR1 a 0 1k\n.control\nshell touch /tmp/owned\n.endc\n";
    let (result, error) = call(&host, "spice.op", json!({"netlist": netlist})).await;
    assert!(error);
    assert_eq!(result["error"], "invalid_netlist");
    assert_eq!(result["line"], 4, "{result}");
}

#[tokio::test]
async fn a_simulation_past_its_wall_time_is_stopped_with_a_named_error() {
    if require(Peer::Bubblewrap).is_none() {
        return;
    }
    let Some(ngspice) = require(Peer::Ngspice) else {
        return;
    };
    let runner = Runner::new(
        ngspice,
        ResourceLimits::default(),
        Duration::from_millis(300),
        true,
        Some("/usr/bin:/bin"),
        &[],
    )
    .unwrap();
    let host = SpiceHost::new(runner, "ngspice-39");
    let netlist = "long\nV1 in 0 SIN(0 1 1k)\nR1 in out 1k\nC1 out 0 1u\n";
    let (result, error) = call(
        &host,
        "spice.transient",
        json!({"netlist": netlist, "step_s": 1e-9, "stop_s": 1e-3, "max_step_s": 1e-9}),
    )
    .await;
    println!("{result}");
    assert!(error);
    assert_eq!(result["error"], "time_limit", "{result}");
}
