//! Prints how long `validate` takes on generated flows (issue 12's timing table):
//! `cargo run --release -p metaforge-domain --example validate_timing -- 1000 4000 10000`.
//! Each size is measured for a dependency chain and for one big cycle; the figure is the best of
//! a few repetitions, so a noisy machine inflates it less.

use std::time::{Duration, Instant};

use metaforge_domain::flow::validate;

#[path = "../tests/it/support/big_flows.rs"]
mod big_flows;

use big_flows::{Shape, big_flow, maximum_flow};

fn best_of(repetitions: usize, mut run: impl FnMut()) -> Duration {
    (0..repetitions)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 4_000, 10_000]
    } else {
        sizes
    };
    println!("| phases | shape | violations | validate |");
    println!("|---:|---|---:|---:|");
    for n in sizes {
        for shape in [Shape::Chain, Shape::Cycle] {
            let flow = big_flow(n, shape);
            let mut count = 0;
            let repetitions = if n > 5_000 { 1 } else { 3 };
            let took = best_of(repetitions, || count = validate(&flow, None).len());
            println!(
                "| {n} | {} | {count} | {:.3} s |",
                shape.label(),
                took.as_secs_f64()
            );
        }
    }
    let flow = maximum_flow();
    let mut count = 0;
    let took = best_of(5, || count = validate(&flow, None).len());
    let deps: usize = flow.phases.iter().map(|p| p.depends_on.len()).sum();
    let deliverables: usize = flow
        .phases
        .iter()
        .map(|p| p.expected_artifacts.len() + p.required_deliverables.len())
        .sum();
    println!(
        "| {} at the limits ({deps} deps, {deliverables} deliverables) | cycle | {count} | {:.4} s |",
        flow.phases.len(),
        took.as_secs_f64()
    );
}
