//! End-to-end tests against a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok) started once per run on 127.0.0.1.
//!
//! Run with `tools/test` (or `cargo test --features e2e-hooks --test e2e`); filter like any
//! cargo test (`cargo test --features e2e-hooks --test e2e -- st-`). Component logs are kept
//! under `target/e2e/`.

#[path = "../support/mod.rs"]
mod support;

mod chart;
mod control_plane;
mod disruption;
mod explain;
mod failed_by_shutdown;
mod faults;
mod fixtures;
mod hollow;
mod leader;
mod live_node;
mod metrics;
mod network;
mod node_actions;
mod node_lifecycle;
mod operator_errors;
mod policy_validation;
mod protobuf;
mod ready_on_dead_node;
mod refused;
mod rollouts;
mod safety_circuit;
mod safety_look;
mod safety_nodes;
mod safety_pods;
mod stale_readiness;
mod storm;
mod stuck_terminating;

/// The smoke set: every write the operator makes (force delete with its DisruptionTarget status
/// write, eviction, finalizer removal, the delete of a pod a shutdown left Failed, each node
/// action and its undo, status, Events, the leader Lease), the CRD's validation, the live
/// /metrics, and the chart with its admission policy. `tools/test` runs it on the oldest supported Kubernetes
/// (`KUBE_REMEDIATOR_E2E_SET=smoke`); the whole suite runs on the newest.
const SMOKE: &[&str] = &[
    "cp-dead-node",
    "oe-server-features",
    "pv-examples-accepted",
    "pv-bad-specs-refused",
    "st-enforce",
    "st-statefulset-fencing",
    "ln-finalizer-reported",
    "ln-kubelet-not-finishing",
    "sr-blip-evict",
    "ro-recreate-enforce",
    "na-thresholds",
    "na-undo",
    "le-one-leader",
    "le-failover",
    "dt-job-not-a-failure",
    "nl-taint-provenance",
    "fs-shutdown-pods",
    "me-live-metrics",
    "rd-mark-not-ready",
    "pb-pods-as-json",
    "chart-install",
    "chart-admission-guard",
];

fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    // The tests mostly wait on the control plane, so run more of them than there are cores.
    // Fault trials queued behind another on their own control plane only wait for its lock:
    // they get threads of their own rather than taking them from the other tests.
    if args.test_threads.is_none() {
        args.test_threads = Some(6 + faults::QUEUED_FAULT_TRIALS);
    }
    // The fault tests first: their stalls are the longest trials of the run, and the storm
    // guard's test queues behind them on its fault control plane; then the node actions, about
    // three minutes each on the production-like control plane.
    let trials: Vec<_> = [
        faults::trials(),
        storm::trials(),
        hollow::trials(),
        node_actions::trials(),
        disruption::trials(),
        node_lifecycle::trials(),
        control_plane::trials(),
        policy_validation::trials(),
        stuck_terminating::trials(),
        network::trials(),
        protobuf::trials(),
        refused::trials(),
        live_node::trials(),
        operator_errors::trials(),
        explain::trials(),
        rollouts::trials(),
        safety_circuit::trials(),
        safety_look::trials(),
        safety_nodes::trials(),
        safety_pods::trials(),
        stale_readiness::trials(),
        failed_by_shutdown::trials(),
        ready_on_dead_node::trials(),
        chart::trials(),
        leader::trials(),
        metrics::trials(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let trials = match std::env::var("KUBE_REMEDIATOR_E2E_SET").as_deref() {
        Ok("smoke") => {
            let missing: Vec<_> =
                SMOKE.iter().filter(|name| !trials.iter().any(|t| t.name() == **name)).collect();
            assert!(
                missing.is_empty(),
                "the smoke set names trials that do not exist: {missing:?}"
            );
            trials.into_iter().filter(|t| SMOKE.contains(&t.name())).collect()
        }
        Ok("all") | Err(_) => trials,
        Ok(other) => panic!("KUBE_REMEDIATOR_E2E_SET={other}: expected smoke or all"),
    };
    if let (false, Ok(bin)) = (args.list, support::cluster::TestBin::locate()) {
        let version = bin.kubernetes_version().unwrap_or_else(|e| format!("unknown ({e:#})"));
        eprintln!("e2e: {} trials on Kubernetes {version} ({})", trials.len(), bin.dir.display());
    }
    let conclusion = libtest_mimic::run(&args, trials);
    support::stop_clusters();
    conclusion.exit();
}
