//! `cargo bench --bench scale`: memory and CPU of the operator's compact state and planner at
//! the brief's target scale (5,000 nodes, 150,000 pods). Prints numbers; asserts nothing.
//!
//! Memory is the growth of the process's resident set while the state is filled from
//! synthetic watch events (full Pod and Node objects, built and dropped one at a time as a
//! watch delivers them), so it is what the operator keeps, not what passes through.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube_remediator::adapters::WatchedPod;
use kube_remediator::core::{plan, validate};
use kube_remediator::crd::RemediationPolicySpec;
use kube_remediator::index::state::{ClusterState, WatchedKind};
use serde_json::json;

const NODES: usize = 5_000;
const PODS: usize = 150_000;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn node(i: usize, now: Timestamp, dead: bool) -> Node {
    let since = now - SignedDuration::from_secs(if dead { 900 } else { 86_400 });
    serde_json::from_value(json!({
        "metadata": { "name": format!("node-{i:05}"), "labels": {
            "kubernetes.io/hostname": format!("node-{i:05}"),
            "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
            "node.kubernetes.io/instance-type": "m6i.2xlarge",
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        }},
        "spec": { "taints": if dead { json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]) } else { json!([]) } },
        "status": {
            "conditions": [{ "type": "Ready", "status": if dead { "Unknown" } else { "True" },
                             "lastTransitionTime": since.to_string() }],
            "capacity": { "cpu": "8", "memory": "32Gi", "pods": "110" },
        },
    }))
    .expect("node")
}

fn pod(i: usize, now: Timestamp, terminating: bool) -> WatchedPod {
    let mut meta = json!({
        "name": format!("app-{}-{i:06}", i % 500), "namespace": format!("ns-{}", i % 200),
        "uid": format!("00000000-0000-0000-0000-{i:012}"),
        "labels": { "app": format!("app-{}", i % 500), "pod-template-hash": "5d8f7c9b6", "tier": "web" },
        "annotations": { "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z" },
        "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": true,
                              "name": format!("app-{}-5d8f7c9b6", i % 500), "uid": format!("rs-{}", i % 500) }],
    });
    if terminating {
        meta["deletionTimestamp"] = json!((now - SignedDuration::from_secs(600)).to_string());
        meta["deletionGracePeriodSeconds"] = json!(30);
    }
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {
            "nodeName": format!("node-{:05}", i % NODES),
            "containers": [{ "name": "app", "image": "registry.example/app:1.2.3",
                             "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } },
                             "env": [{ "name": "A", "value": "1" }, { "name": "B", "value": "2" }] }],
            "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": format!("data-{i}") } }],
        },
        "status": { "phase": "Running", "podIP": "10.0.0.1" },
    }))
    .expect("pod")
}

fn main() {
    let now = Timestamp::now();
    // One node in 50 is dead, and every pod on a dead node is Terminating: 100 dead nodes and
    // 3,000 Terminating pods, a bad day.
    let dead = |i: usize| i.is_multiple_of(50);

    let before = rss_kib();
    let mut state = ClusterState::new();
    let t = Instant::now();
    for kind in WatchedKind::ALL {
        state.list_started(kind);
    }
    for i in 0..NODES {
        state.apply_node(&node(i, now, dead(i)), now);
        state.apply_lease(
            &format!("node-{i:05}"),
            Some(now - SignedDuration::from_secs(if dead(i) { 900 } else { 5 })),
            now,
        );
    }
    let mut terminating = 0;
    for i in 0..PODS {
        let t = dead(i % NODES);
        terminating += usize::from(t);
        state.apply_pod(&pod(i, now, t), now);
    }
    let synced = now - SignedDuration::from_secs(3600);
    for kind in WatchedKind::ALL {
        state.list_done(kind, synced);
    }
    let fill = t.elapsed();
    // An hour of heartbeats from a live node since the watches synced.
    for s in (0..3600).step_by(10) {
        let at = synced + SignedDuration::from_secs(s);
        state.apply_lease("node-00001", Some(at), at);
    }
    let after = rss_kib();
    println!(
        "scale: {NODES} nodes, {PODS} pods ({terminating} Terminating on {} dead nodes)",
        NODES / 50
    );
    println!(
        "  fill from watch events: {:.2}s ({:.1} µs per object, including JSON decoding)",
        fill.as_secs_f64(),
        fill.as_secs_f64() * 1e6 / (NODES * 2 + PODS) as f64
    );
    println!(
        "  resident set growth for the compact state: {:.1} MiB (process RSS {:.1} MiB)",
        (after.saturating_sub(before)) as f64 / 1024.0,
        after as f64 / 1024.0
    );
    println!(
        "  a full Pod object in memory is typically 13-30 KiB in Go controllers; 150,000 of them: 2-4 GiB"
    );

    let spec = RemediationPolicySpec::default();
    let policy = validate(&spec).expect("default policy is valid");
    let rounds = 20;
    let t = Instant::now();
    let mut observed = state.observe(now, Vec::new(), BTreeSet::new());
    for _ in 1..rounds {
        observed = black_box(state.observe(now, Vec::new(), BTreeSet::new()));
    }
    let observe = t.elapsed() / rounds;
    // The default circuit (30%) is closed with 2% of nodes dead.
    let t = Instant::now();
    let mut result = plan(&observed, &policy, now);
    for _ in 1..rounds {
        result = black_box(plan(&observed, &policy, now));
    }
    let planning = t.elapsed() / rounds;
    println!("  observe (assemble the planner's input): {:.1} ms", observe.as_secs_f64() * 1e3);
    println!(
        "  plan: {:.1} ms for {} pods considered, {} actions due, {} nodes dead",
        planning.as_secs_f64() * 1e3,
        result.decisions.len(),
        result.actions.len(),
        result.counts.dead_nodes
    );
}
