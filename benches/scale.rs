//! `cargo bench --bench scale`: memory and CPU of the operator's compact state and planner at
//! the brief's target scale (5,000 nodes, 150,000 pods). Prints numbers; asserts nothing.
//!
//! Memory is the growth of the process's resident set while the state is filled from
//! synthetic watch events (full Pod and Node objects, built and dropped one at a time as a
//! watch delivers them), so it is what the operator keeps, not what passes through.
//!
//! `cargo bench --bench scale -- heap`: a heap profile of what one node costs. Under the dhat
//! heap profiler, the state is filled with the 5,000 nodes and their Leases alone, and the bytes
//! the state then keeps (the allocations still live, as the profiler counts them, without the
//! allocator's own headers) are attributed to what keeps them; then one reconcile's transient
//! peak (observe and plan) is read the same way, and what one kept pod record costs (30,000
//! Terminating pods added). Prints a breakdown per node and writes the profile
//! (`target/bench/dhat-scale-nodes.json`, for dhat's viewer).

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube_remediator::adapters::WatchedPod;
use kube_remediator::core::{NodeView, plan, validate};
use kube_remediator::crd::RemediationPolicySpec;
use kube_remediator::index::intern::Interner;
use kube_remediator::index::state::{ClusterState, WatchedKind};
use serde_json::json;

const NODES: usize = 5_000;
const PODS: usize = 150_000;

// dhat counts every allocation while its profiler runs (`-- heap` only); otherwise it hands
// each one straight to the system allocator.
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

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
        "metadata": { "name": format!("node-{i:05}"), "uid": format!("6f1c2a4e-0000-4000-8000-{i:012}"), "labels": {
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
    if std::env::args().any(|a| a == "heap") {
        heap_profile();
        return;
    }
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

/// Bytes and blocks live on the heap now, as dhat counts them.
#[derive(Clone, Copy, Default)]
struct Heap {
    bytes: u64,
    blocks: u64,
}

impl Heap {
    fn now() -> Heap {
        let s = dhat::HeapStats::get();
        Heap { bytes: s.curr_bytes as u64, blocks: s.curr_blocks as u64 }
    }

    fn since(self, before: Heap) -> Heap {
        Heap { bytes: self.bytes - before.bytes, blocks: self.blocks - before.blocks }
    }
}

/// What `f` allocates and keeps (its result held until measured).
fn kept<T>(f: impl FnOnce() -> T) -> (Heap, T) {
    let before = Heap::now();
    let value = f();
    (Heap::now().since(before), value)
}

/// What the clones of one field of every view allocate (not the Vec that holds them).
fn field<T>(views: &[Arc<NodeView>], f: impl Fn(&NodeView) -> T) -> Heap {
    let (heap, held) = kept(|| views.iter().map(|v| f(v)).collect::<Vec<T>>());
    let vec = (held.capacity() * std::mem::size_of::<T>()) as u64;
    Heap { bytes: heap.bytes - vec, blocks: heap.blocks - u64::from(vec > 0) }
}

/// `-- heap`: what one node costs, and what keeps the bytes.
fn heap_profile() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let _profiler = dhat::Profiler::builder().file_name(dir.join("dhat-scale-nodes.json")).build();
    let now = Timestamp::now();
    let dead = |i: usize| i.is_multiple_of(50);
    let mut state = ClusterState::new();
    for kind in WatchedKind::ALL {
        state.list_started(kind);
    }
    let synced = now - SignedDuration::from_secs(3600);
    let (node_store, ()) = kept(|| {
        for i in 0..NODES {
            state.apply_node(&node(i, now, dead(i)), now);
        }
        state.list_done(WatchedKind::Node, synced);
    });
    let (lease_store, ()) = kept(|| {
        for i in 0..NODES {
            let renewed = now - SignedDuration::from_secs(if dead(i) { 900 } else { 5 });
            state.apply_lease(&format!("node-{i:05}"), Some(renewed), now);
        }
        state.list_done(WatchedKind::Lease, synced);
    });
    for kind in WatchedKind::ALL {
        state.list_done(kind, synced);
    }
    // One reconcile: observe (the planner's input) and plan, with the state as it is. Read
    // first, while the heap's peak so far is the fill's.
    let spec = RemediationPolicySpec::default();
    let policy = validate(&spec).expect("default policy is valid");
    let before = Heap::now();
    let peak_before = dhat::HeapStats::get().max_bytes as u64;
    let observed = state.observe(now, Vec::new(), BTreeSet::new());
    let (planned, result) = kept(|| plan(&observed, &policy, now));
    let (observed_heap, peak) =
        (Heap::now().since(before), dhat::HeapStats::get().max_bytes as u64);
    // The peak since the profiler started: one reached during this reconcile only if it rose.
    let transient = if peak > peak_before { Some(peak - before.bytes) } else { None };
    drop(result);
    drop(observed);

    // What the node store's records hold on the heap, field by field: each field cloned alone
    // (a clone allocates what the original does, for these types), and the rest of the store
    // (its hash table: keys and records inline, control bytes, spare buckets) by difference.
    let views: Vec<Arc<NodeView>> = state.observe(now, Vec::new(), BTreeSet::new()).nodes;
    // The name is shared (with the hostname label, which every node of the fixture has, with
    // the node and Lease stores' keys and with the plans): a clone costs nothing, its text is
    // counted with the labels.
    let name = field(&views, |v| v.observation.name.clone());
    let uid = field(&views, |v| v.control.uid.clone());
    // Labels share their strings (one interner for all nodes), the nodes of a pool share one set
    // of all but the host name, and a clone shares the whole: what they cost is what interning
    // them all again into a fresh interner keeps.
    let (labels, interned) = kept(|| {
        let mut interner = Interner::default();
        let labels: Vec<_> = views.iter().map(|v| interner.node_labels(&v.labels)).collect();
        (interner, labels)
    });
    let held =
        (interned.1.capacity() * std::mem::size_of::<kube_remediator::core::NodeLabels>()) as u64;
    let labels = Heap { bytes: labels.bytes - held, blocks: labels.blocks - 1 };
    drop(interned);
    // Each record is in an Arc: one block of its inline size and two counts.
    let boxed = Heap {
        bytes: (views.len() * (std::mem::size_of::<NodeView>() + 16)) as u64,
        blocks: views.len() as u64,
    };
    let taints = field(&views, |v| v.observation.taints.clone());
    let volumes = field(&views, |v| v.observation.volumes_in_use.clone());
    let other = field(&views, |v| v.control.managed_by.clone());
    // The rarely set parts: a box with its strings, on the nodes that have one.
    let rare = field(&views, |v| v.control.rare.clone());
    let fields = [boxed, name, uid, labels, taints, volumes, other, rare];
    let in_fields = fields.iter().fold(Heap::default(), |a, f| Heap {
        bytes: a.bytes + f.bytes,
        blocks: a.blocks + f.blocks,
    });
    let table = Heap {
        bytes: node_store.bytes - in_fields.bytes,
        blocks: node_store.blocks - in_fields.blocks,
    };
    drop(views);

    let n = NODES as f64;
    let per = |h: Heap| (h.bytes as f64 / n, h.blocks as f64 / n);
    println!("heap profile: {NODES} nodes and their Leases ({} dead), no pods", NODES / 50);
    println!(
        "  sizes inline: NodeView {} bytes, NodeSummary {} bytes (DeathEvidence {}, NodeHold {}), LeaseRecord {} bytes, String {} bytes",
        std::mem::size_of::<NodeView>(),
        std::mem::size_of::<kube_remediator::core::node::NodeSummary>(),
        std::mem::size_of::<kube_remediator::core::node::DeathEvidence>(),
        std::mem::size_of::<kube_remediator::core::node::NodeHold>(),
        std::mem::size_of::<kube_remediator::index::state::LeaseRecord>(),
        std::mem::size_of::<String>()
    );
    println!("  kept per node, as the profiler counts it (bytes requested; the allocator adds");
    println!("  its own header and rounding, about 8-16 bytes a block, on top):");
    println!("  | what | bytes per node | blocks per node |");
    println!("  | --- | ---: | ---: |");
    let row = |what: &str, h: Heap| {
        let (b, k) = per(h);
        println!("  | {what} | {b:.0} | {k:.1} |");
    };
    row(
        "node store: hash table (the name shared as key and an Arc pointer, control bytes, \
         spare buckets; the dead nodes' pod-listing entries)",
        table,
    );
    row("node record inline (in an Arc, shared with the planner's input)", boxed);
    row("node record: name (shared with the hostname label: counted there)", name);
    row("node record: uid", uid);
    row(
        "node record: labels (one slice of shared strings per set of labels but the host \
         name, the host name shared with the name; and the interner)",
        labels,
    );
    row("node record: taints", taints);
    row("node record: volumesInUse", volumes);
    row("node record: managed-by marker", other);
    row("node record: rare parts (a box with its strings, only where one is set)", rare);
    row("Lease store (hash table, its keys the nodes' names shared, records inline)", lease_store);
    let total = Heap {
        bytes: node_store.bytes + lease_store.bytes,
        blocks: node_store.blocks + lease_store.blocks,
    };
    row("**total kept**", total);
    let (b, k) = per(total);
    println!(
        "  total with the allocator's overhead (16 bytes a block, glibc): about {:.0} bytes per node",
        b + 16.0 * k
    );
    let peak = transient.map_or("below the fill's".to_string(), |t| format!("{:.0}", t as f64 / n));
    println!(
        "  one reconcile (observe + plan, one policy), transient: peak {peak} bytes per node above \
         the kept state; at its end the planner's input holds {:.0}, the plan {:.0}",
        per(observed_heap).0 - per(planned).0,
        per(planned).0
    );

    // A pod is kept only while it matters (Terminating, left not Ready, failed by a shutdown,
    // Ready on a node that is not): what one such record costs, for a dead zone's worth.
    let kept_pods = 30_000;
    let (pod_store, ()) = kept(|| {
        for i in 0..kept_pods {
            state.apply_pod(&pod(i, now, true), now);
        }
    });
    println!(
        "  a kept pod record (a Terminating pod of the fixture: three labels, an owner, a \
         namespace shared by 150 pods, a label set by 60), {kept_pods} of them: {:.0} bytes in \
         {:.1} blocks per pod (its view {} bytes inline), about {:.0} with glibc's headers",
        pod_store.bytes as f64 / kept_pods as f64,
        pod_store.blocks as f64 / kept_pods as f64,
        std::mem::size_of::<kube_remediator::core::PodView>(),
        (pod_store.bytes + 16 * pod_store.blocks) as f64 / kept_pods as f64,
    );
}
