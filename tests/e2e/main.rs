//! End-to-end tests against a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok) started once per run on 127.0.0.1.
//!
//! Run with `tools/test` (or `cargo test --test e2e`); filter like any cargo test
//! (`cargo test --test e2e -- dead_node`). Component logs are kept under `target/e2e/`.

#[path = "../support/mod.rs"]
mod support;

mod chart;
mod control_plane;
mod fixtures;
mod leader;
mod operator_errors;
mod policy_validation;
mod rollouts;
mod stuck_terminating;

fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    // The tests mostly wait on the control plane, so run more of them than there are cores.
    if args.test_threads.is_none() {
        args.test_threads = Some(6);
    }
    let trials: Vec<_> = [
        control_plane::trials(),
        policy_validation::trials(),
        stuck_terminating::trials(),
        operator_errors::trials(),
        rollouts::trials(),
        chart::trials(),
        leader::trials(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    support::stop_shared_cluster();
    conclusion.exit();
}
