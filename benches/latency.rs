//! `cargo bench --bench latency`: how soon after its threshold instant a remediation fires,
//! on the real test control plane. Several nodes die at once with pods on them; the operator
//! (Enforce) force-deletes them. Prints the operator's own histogram (threshold to action) and
//! the delay from each pod's threshold (as the operator logged it) to the moment a watch saw it
//! gone, and the time to the first pod of a blocked Recreate Deployment's new ReplicaSet.
//! Asserts nothing.
//!
//! `cargo bench --bench latency -- side-by-side` instead measures time to remediation of
//! kube-remediator, its Go peer and the upstream path (out-of-service taint, then PodGC) side
//! by side on the production-like control plane: see `remediation.rs`.

// The benchmark uses a small part of the test support; the end-to-end tests, which include the
// same module without this allowance, keep it free of dead code.
#[path = "../tests/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

// The side-by-side run (`-- side-by-side`) starts the Go peer as the rss benchmark does.
#[allow(dead_code)]
mod measure;
mod remediation;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use support::operator::Operator;
use support::{Cluster, TestEnv, wait_for};

const VICTIMS: usize = 4;
const PODS_PER_NODE: usize = 10;
const NOT_READY_FOR: i64 = 10;
const LEASE_STALE_FOR: i64 = 40;
const DELAY: i64 = 2;

fn main() {
    if std::env::args().any(|a| a == "side-by-side") {
        let side_by_side = async {
            let (peer, _) = measure::locate_peer()?;
            remediation::run(&peer).await
        };
        if let Err(e) = support::runtime().block_on(side_by_side) {
            eprintln!("time-to-remediation benchmark failed: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = support::runtime().block_on(run()) {
        eprintln!("latency benchmark failed: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> Result<()> {
    let cluster = Cluster::start(&support::new_run_dir("bench")).await?;
    let result = scenario(&cluster).await;
    cluster.stop();
    result
}

async fn scenario(cluster: &Cluster) -> Result<()> {
    let env = TestEnv::new(cluster.client().await?, "bench-latency").await?;
    let mut victims = Vec::new();
    for i in 0..VICTIMS {
        victims.push(env.add_node(&format!("v{i}")).await?);
    }
    env.create_policy(json!({
        "mode": "Enforce",
        "deadNode": { "notReadyFor": format!("{NOT_READY_FOR}s"), "leaseStaleFor": format!("{LEASE_STALE_FOR}s") },
        "stuckTerminating": { "delayAfterGrace": format!("{DELAY}s") },
        "safety": { "maxUnhealthyNodes": VICTIMS, "rateLimit": { "actionsPerMinute": 1000 } },
    }))
    .await?;
    let operator = Operator::start(cluster, &env).await?;

    let pods = env.pods();
    for (n, node) in victims.iter().enumerate() {
        for i in 0..PODS_PER_NODE {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": { "name": format!("p{n}-{i}"), "labels": { "bench": "yes" } },
                "spec": { "nodeName": node, "terminationGracePeriodSeconds": 1,
                          "containers": [{ "name": "c", "image": "registry.invalid/c:1" }] },
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
        }
    }
    let total = VICTIMS * PODS_PER_NODE;
    env.wait_pods_ready("bench=yes", total).await?;
    // A Recreate Deployment on the first victim, rolled out once its pod is stuck.
    let shop: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "shop" },
        "spec": {
            "replicas": 1, "strategy": { "type": "Recreate" },
            "selector": { "matchLabels": { "app": "shop" } },
            "template": { "metadata": { "labels": { "app": "shop" } }, "spec": {
                "nodeSelector": { "kubernetes.io/hostname": victims[0] },
                "terminationGracePeriodSeconds": 1,
                "containers": [{ "name": "c", "image": "registry.invalid/shop:1" }] } },
        },
    }))?;
    env.api::<Deployment>().create(&PostParams::default(), &shop).await?;
    let old_shop = env.wait_pods_ready("app=shop", 1).await?.remove(0);

    // Record when each pod disappears, as a watch sees it.
    let gone: std::sync::Arc<tokio::sync::Mutex<HashMap<String, Timestamp>>> = Default::default();
    let watch = {
        let gone = gone.clone();
        let stream = watcher::watcher(pods.clone(), watcher::Config::default().labels("bench=yes"));
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Delete(p) = event {
                    gone.lock().await.insert(p.metadata.name.unwrap_or_default(), Timestamp::now());
                }
            }
        })
    };

    for node in &victims {
        env.kill_node(node).await?;
    }
    // Terminating now, whether or not the node lifecycle controller evicts them: it stops
    // evicting in a zone where most nodes are down (here 4 of 5), so it may not reach them all.
    pods.delete_collection(&DeleteParams::default(), &ListParams::default().labels("bench=yes"))
        .await?;
    println!(
        "latency: {VICTIMS} nodes killed with {total} pods; waiting for the policy's thresholds (~{LEASE_STALE_FOR}s)"
    );
    let gone_ref = &gone;
    let old_name = old_shop.metadata.name.clone().unwrap_or_default();
    env.wait_terminating(&old_name, Duration::from_secs(60)).await?;
    let patch = json!({ "spec": { "template": { "spec": {
        "nodeSelector": { "kubernetes.io/hostname": env.healthy_node },
        "containers": [{ "name": "c", "image": "registry.invalid/shop:2" }],
    }}}});
    env.api::<Deployment>()
        .patch("shop", &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    wait_for("every pod force-deleted", Duration::from_secs(180), || async move {
        Ok((gone_ref.lock().await.len() == total).then_some(()))
    })
    .await?;
    watch.abort();

    // Each pod's threshold as the operator computed it (its log line for the action says when
    // the node became dead), against the moment a watch saw the pod gone.
    let log = strip_ansi(&std::fs::read_to_string(&operator.log)?);
    let mut thresholds: HashMap<String, Timestamp> = HashMap::new();
    for line in log.lines().filter(|l| l.contains("force-delete pod")) {
        let pod = line.split("pod=\"").nth(1).and_then(|r| r.split('"').next());
        let dead = line.split("dead since ").nth(1).and_then(|r| r.split(": ").next());
        if let (Some(pod), Some(Ok(dead))) = (pod, dead.map(str::parse::<Timestamp>)) {
            thresholds.insert(pod.to_string(), dead);
        }
    }
    let gone = gone.lock().await.clone();
    let mut delays: Vec<f64> = gone
        .iter()
        .filter_map(|(pod, at)| thresholds.get(pod).map(|t| at.duration_since(*t).as_secs_f64()))
        .collect();
    let shop_dead = thresholds.get(&old_name).copied();
    delays.sort_by(|a, b| a.total_cmp(b));
    anyhow::ensure!(!delays.is_empty(), "no action found in {}", operator.log.display());
    let pct = |p: f64| delays[((delays.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "  due -> pod gone (watch): n={} p50={:.3}s p99={:.3}s max={:.3}s",
        delays.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    let old_hash =
        old_shop.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash").cloned());
    let new_pod = wait_for("the new ReplicaSet's pod to run", Duration::from_secs(60), || async {
        let pods = env.wait_pods_ready("app=shop", 1).await?;
        Ok(pods.into_iter().find(|p| {
            p.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash").cloned()) != old_hash
        }))
    })
    .await?;
    let created = new_pod.metadata.creation_timestamp.map(|t| t.0).unwrap_or_default();
    let shop_dead = shop_dead.unwrap_or(created);
    println!(
        "  Recreate rollout: threshold -> new ReplicaSet's first pod created: {:.3}s (creationTimestamp is truncated to the second: within 1 s, may read negative)",
        created.duration_since(shop_dead).as_secs_f64()
    );
    let metrics = operator.metrics().await?;
    println!(
        "  operator histogram kube_remediator_action_delay_seconds (threshold -> action done):"
    );
    for line in metrics.lines().filter(|l| l.starts_with("kube_remediator_action_delay_seconds")) {
        println!("    {line}");
    }
    Ok(())
}

/// Drops terminal colour sequences (`ESC [ ... m`) from the operator's text log.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
