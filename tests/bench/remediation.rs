//! `cargo bench --bench latency -- side-by-side`: time to remediation of kube-remediator, of
//! its Go peer (`tools/peer`, tuned) and of the upstream path a user has today (at the
//! threshold someone adds the `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` taint
//! and PodGC force-deletes), one after the other on the production-like control plane (PodGC
//! on), each on a node and pods of its own. Asserts nothing.
//!
//! Every node is killed at the start and the run waits until kube-controller-manager marks them
//! all Unknown. Then, per contender: it is started (and is ready), and N pods on its node are
//! deleted with a grace period of `GRACE` s, all sent just after a whole second, so that the
//! API server's `deletionTimestamp` (one-second resolution) is exactly `floor(send) + GRACE`;
//! each pod's threshold is that plus `DELAY` (the policy's `delayAfterGrace`), computed from the
//! benchmark's own send times (and checked against the deletionTimestamp the API server
//! returned). The node itself counts as dead before that (`notReadyFor` 10 s, `leaseStaleFor`
//! 40 s, the least the operator accepts, timed from the contender's start at the latest).
//! Measured: from each pod's threshold to the `requestReceivedTimestamp` of the DELETE that
//! removed it (the last successful one), in the API server's audit log. The pods tolerate the
//! not-ready and unreachable taints for ever, so no eviction interferes.
//! `KUBE_REMEDIATOR_BENCH_TTR_PODS` (default `1,110`) lists the pods per node to run.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::support::operator::{Operator, http_get};
use crate::support::{Cluster, ClusterOptions, TestEnv, wait_for};

const GRACE: i64 = 45;
const DELAY: i64 = 2;
/// The policy's `notReadyFor`.
const NOT_READY_FOR: i64 = 10;
/// The policy's `leaseStaleFor`: the operator refuses less than the kubelet's 40 s Lease.
const LEASE_STALE_FOR: i64 = 40;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Remedy {
    Remediator,
    Peer,
    Upstream,
}

impl Remedy {
    fn label(self) -> &'static str {
        match self {
            Remedy::Remediator => "kube-remediator (Enforce)",
            Remedy::Peer => "Go peer, tuned",
            Remedy::Upstream => "out-of-service taint at the threshold, then PodGC",
        }
    }
}

pub async fn run(peer: &Path) -> Result<()> {
    let cluster = Cluster::start_with(
        &crate::support::new_run_dir("bench"),
        ClusterOptions::production_like(),
    )
    .await?;
    let result = scenario(&cluster, peer).await;
    cluster.stop();
    result
}

async fn scenario(cluster: &Cluster, peer: &Path) -> Result<()> {
    let sizes: Vec<usize> = std::env::var("KUBE_REMEDIATOR_BENCH_TTR_PODS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 110]);
    let env = TestEnv::new(cluster.client().await?, "bench-ttr").await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "deadNode": { "notReadyFor": format!("{NOT_READY_FOR}s"), "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
                      "requireFencingFor": ["None"] },
        "stuckTerminating": { "delayAfterGrace": format!("{DELAY}s") },
        "safety": { "maxUnhealthyNodes": "100%", "rateLimit": { "actionsPerMinute": 1000 } },
    }))
    .await?;
    let paths = [Remedy::Remediator, Remedy::Peer, Remedy::Upstream];
    let mut runs = Vec::new();
    for &n in &sizes {
        for &path in &paths {
            let node = env.add_node(&format!("ttr-{}-{n}", runs.len())).await?;
            let label = format!("ttr={}", runs.len());
            futures::stream::iter(0..n)
                .map(|i| create_pod(&env, &node, runs.len(), i))
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>>>()?;
            env.wait_pods_ready(&label, n).await?;
            runs.push((path, n, node, label));
        }
    }
    for (_, _, node, _) in &runs {
        env.kill_node(node).await?;
    }
    eprintln!("[ttr] {} nodes killed; waiting until they are Unknown", runs.len());
    let env_ref = &env;
    for (_, _, node, _) in &runs {
        wait_for(&format!("{node} Unknown"), Duration::from_secs(180), || async move {
            Ok(env_ref.nodes().get(node).await.ok().and_then(|n| {
                (crate::support::env::node_ready_status(&n).as_deref() == Some("Unknown"))
                    .then_some(())
            }))
        })
        .await?;
    }
    let mut table = Vec::new();
    for (path, n, node, label) in &runs {
        let row = one(cluster, &env, peer, *path, *n, node, label).await?;
        table.push(row);
    }
    println!();
    println!(
        "Time to remediation: from each pod's threshold (deletionTimestamp + {DELAY} s, computed from \
         the benchmark's send times) to the DELETE that removed it (audit log)."
    );
    println!();
    println!("| path | pods | removed | p50 | p99 | max | DELETE sent by |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for row in table {
        println!("{row}");
    }
    Ok(())
}

async fn create_pod(env: &TestEnv, node: &str, run: usize, i: usize) -> Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": format!("ttr-{run}-{i:03}"), "labels": { "ttr": run.to_string() } },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": GRACE,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
            // Tolerated for ever: no eviction by the node lifecycle controller during the run.
            "tolerations": [
                { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute" },
                { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute" },
            ],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    Ok(())
}

/// A running Go peer; killed on drop.
struct PeerProcess(Child);

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn one(
    cluster: &Cluster,
    env: &TestEnv,
    peer: &Path,
    path: Remedy,
    n: usize,
    node: &str,
    label: &str,
) -> Result<String> {
    let mut operator = None;
    let mut peer_process = None;
    match path {
        Remedy::Remediator => {
            operator = Some(
                Operator::start_replica(
                    cluster,
                    env,
                    "",
                    &["--max-unhealthy-nodes-in-cluster=100%"],
                )
                .await?,
            );
        }
        Remedy::Peer => {
            let addr = crate::measure::free_addr()?;
            let log = std::fs::File::create(cluster.dir.join("ttr-peer.log"))?;
            let child = Command::new(peer)
                .args(["--mode", "tuned", "--metrics-addr", "0"])
                .arg("--kubeconfig")
                .arg(&cluster.kubeconfig)
                .args(["--probe-addr", &addr.to_string()])
                .args(["--leader-election-namespace", &env.namespace])
                .args(["--leader-election-lease", "ttr-peer"])
                .args(["--not-ready-for", &format!("{NOT_READY_FOR}s")])
                .args(["--lease-stale-for", &format!("{LEASE_STALE_FOR}s")])
                .args(["--delay-after-grace", &format!("{DELAY}s")])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?;
            let mut process = PeerProcess(child);
            let started = std::time::Instant::now();
            while !matches!(http_get(addr, "/readyz").await, Ok((200, _))) {
                if let Some(status) = process.0.try_wait()? {
                    bail!("the Go peer exited: {status}");
                }
                if started.elapsed() > Duration::from_secs(60) {
                    bail!("the Go peer not ready after 60 s");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peer_process = Some(process);
        }
        Remedy::Upstream => {}
    }
    // Both count the node dead at the latest LEASE_STALE_FOR s after they start (their own
    // clocks): before the pods' thresholds, GRACE + DELAY s after the deletes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Just after a whole second.
    let now = Timestamp::now();
    let next = Timestamp::from_second(now.as_second() + 1)? + SignedDuration::from_millis(5);
    tokio::time::sleep(next.duration_since(now).unsigned_abs()).await;
    let names: Vec<String> = (0..n).map(|i| format!("ttr-{}-{i:03}", &label[4..])).collect();
    let pods = env.pods();
    let params = DeleteParams { grace_period_seconds: Some(GRACE as u32), ..Default::default() };
    let sent: Vec<(String, Timestamp, Option<Timestamp>)> = futures::stream::iter(names.clone())
        .map(|name| {
            let (pods, params) = (&pods, &params);
            async move {
                let at = Timestamp::now();
                let reply = pods.delete(&name, params).await?;
                let stamp = reply.left().and_then(|p| p.metadata.deletion_timestamp).map(|t| t.0);
                anyhow::Ok((name, at, stamp))
            }
        })
        .buffer_unordered(n.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let mut thresholds = HashMap::new();
    let mut mismatched = 0;
    for (name, at, stamp) in &sent {
        let ours = Timestamp::from_second(at.as_second())? + SignedDuration::from_secs(GRACE);
        if stamp.is_some_and(|s| s != ours) {
            mismatched += 1;
        }
        // What the controllers read: the API server's stamp (equal to ours unless mismatched).
        let base = stamp.unwrap_or(ours);
        thresholds.insert(name.clone(), base + SignedDuration::from_secs(DELAY));
    }
    if mismatched > 0 {
        eprintln!(
            "[ttr] {mismatched} of {n} deletionTimestamps were not floor(send) + {GRACE} s (a delete \
             crossed a second); their threshold is taken from the API server's stamp"
        );
    }
    let latest = thresholds.values().max().copied().context("no pod")?;
    if path == Remedy::Upstream {
        let wait = latest.duration_since(Timestamp::now());
        if wait.is_positive() {
            tokio::time::sleep(wait.unsigned_abs()).await;
        }
        env.add_taint(node, "node.kubernetes.io/out-of-service", Some("nodeshutdown"), "NoExecute")
            .await?;
    }
    let env_ref = env;
    wait_for(&format!("{n} pods of {label} gone"), Duration::from_secs(120), || async move {
        Ok(env_ref.list_pods(label).await?.is_empty().then_some(()))
    })
    .await?;
    drop(operator);
    drop(peer_process);
    // The DELETE that removed each pod: the last successful one.
    let text = std::fs::read_to_string(&cluster.audit_log)?;
    let mut removed: HashMap<String, (Timestamp, String)> = HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let s = |ptr: &str| v.pointer(ptr).and_then(|x| x.as_str()).unwrap_or_default();
        if s("/stage") != "ResponseComplete"
            || s("/verb") != "delete"
            || s("/objectRef/resource") != "pods"
            || s("/objectRef/namespace") != env.namespace
            || v.pointer("/responseStatus/code").and_then(|c| c.as_u64()) != Some(200)
        {
            continue;
        }
        let name = s("/objectRef/name");
        if !thresholds.contains_key(name) {
            continue;
        }
        let Ok(at) = s("/requestReceivedTimestamp").parse::<Timestamp>() else { continue };
        let entry = removed.entry(name.to_string()).or_insert((at, String::new()));
        if at >= entry.0 {
            *entry = (at, sender(s("/user/username"), s("/userAgent")));
        }
    }
    let mut delays: Vec<f64> = removed
        .iter()
        .filter_map(|(name, (at, _))| {
            thresholds.get(name).map(|t| at.duration_since(*t).as_secs_f64())
        })
        .collect();
    delays.sort_by(|a, b| a.total_cmp(b));
    let mut users: Vec<&str> = removed.values().map(|(_, u)| u.as_str()).collect();
    users.sort_unstable();
    users.dedup();
    if delays.is_empty() {
        bail!("no DELETE of {label} in the audit log");
    }
    let pct = |p: f64| delays[((delays.len() as f64 - 1.0) * p).round() as usize];
    eprintln!(
        "[ttr] {} with {n} pods: p50 {:.3}s p99 {:.3}s max {:.3}s (min {:.3}s) by {users:?}",
        path.label(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        pct(0.0)
    );
    Ok(format!(
        "| {} | {n} | {} | {:.3} s | {:.3} s | {:.3} s | {} |",
        path.label(),
        delays.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        users.join(", ")
    ))
}

/// Who sent a DELETE: the user, and the user agent's last part where several components share
/// the admin's identity (the Go peer, kube-controller-manager's controllers).
fn sender(user: &str, agent: &str) -> String {
    if agent.is_empty() {
        return user.to_string();
    }
    let product = agent.split(' ').next().unwrap_or(agent);
    let controller = agent.rsplit('/').next().unwrap_or(agent);
    if product.starts_with("kube-controller-manager") {
        format!("{user} (kube-controller-manager, {controller})")
    } else {
        format!("{user} ({product})")
    }
}
