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
//! `KUBE_REMEDIATOR_BENCH_TTR_PODS` (default `1,110,50x30`) lists the shapes to run: `N` pods on
//! one node, or `KxN`, N pods on each of K nodes. `KUBE_REMEDIATOR_BENCH_TTR_PATHS` (default
//! `remediator,peer,upstream`) picks the contenders. `KUBE_REMEDIATOR_BENCH_TTR_CHURN` (pods per
//! second, default 10; 0 for none) is the background churn during every measurement: pods
//! created on a live node of their own and deleted 5 s later, so every watcher of pods sees
//! creates, kwok's status updates and deletes while the dead nodes' pods come due.

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
/// How long after the last removal a contender's requests still count (its records follow).
const RECORDS_AFTER: SignedDuration = SignedDuration::from_secs(5);
/// The policy's `rateLimit.actionsPerMinute` for the run (default 10), above the largest shape.
const ACTIONS_PER_MINUTE: u32 = 2000;

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

/// Pods on nodes: `pods` on each of `nodes` nodes.
#[derive(Clone, Copy)]
struct Shape {
    nodes: usize,
    pods: usize,
}

impl Shape {
    fn parse(text: &str) -> Option<Shape> {
        match text.trim().split_once('x') {
            Some((k, n)) => Some(Shape { nodes: k.parse().ok()?, pods: n.parse().ok()? }),
            None => Some(Shape { nodes: 1, pods: text.trim().parse().ok()? }),
        }
    }

    fn total(self) -> usize {
        self.nodes * self.pods
    }

    fn label(self) -> String {
        match self.nodes {
            1 => format!("{} on 1 node", self.pods),
            k => format!("{} on {k} nodes ({} each)", self.total(), self.pods),
        }
    }
}

/// One contender on its own nodes and pods.
struct Run {
    path: Remedy,
    shape: Shape,
    nodes: Vec<String>,
    /// The pods' label selector, `ttr=<run>`.
    label: String,
}

async fn scenario(cluster: &Cluster, peer: &Path) -> Result<()> {
    let shapes: Vec<Shape> = std::env::var("KUBE_REMEDIATOR_BENCH_TTR_PODS")
        .unwrap_or_else(|_| "1,110,50x30".into())
        .split(',')
        .map(|s| Shape::parse(s).with_context(|| format!("not a shape: {s:?} (N or KxN)")))
        .collect::<Result<_>>()?;
    let paths: Vec<Remedy> = std::env::var("KUBE_REMEDIATOR_BENCH_TTR_PATHS")
        .unwrap_or_else(|_| "remediator,peer,upstream".into())
        .split(',')
        .map(|p| match p.trim() {
            "remediator" => Ok(Remedy::Remediator),
            "peer" => Ok(Remedy::Peer),
            "upstream" => Ok(Remedy::Upstream),
            other => bail!("not a path: {other:?} (remediator, peer, upstream)"),
        })
        .collect::<Result<_>>()?;
    let churn: f64 = match std::env::var("KUBE_REMEDIATOR_BENCH_TTR_CHURN") {
        Ok(v) => v.parse().with_context(|| format!("KUBE_REMEDIATOR_BENCH_TTR_CHURN={v:?}"))?,
        Err(_) => 10.0,
    };
    let client = cluster.client().await?;
    let env = TestEnv::new(client.clone(), "bench-ttr").await?;
    crate::measure::prepare(&client).await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "deadNode": { "notReadyFor": format!("{NOT_READY_FOR}s"), "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
                      "requireFencingFor": ["None"] },
        "stuckTerminating": { "delayAfterGrace": format!("{DELAY}s") },
        "safety": { "maxUnhealthyNodes": "100%", "rateLimit": { "actionsPerMinute": ACTIONS_PER_MINUTE } },
    }))
    .await?;
    let churn_node = env.add_node("ttr-churn").await?;
    let mut runs = Vec::new();
    for &shape in &shapes {
        for &path in &paths {
            let run = runs.len();
            let env_ref = &env;
            let nodes: Vec<String> = futures::stream::iter(0..shape.nodes)
                .map(|j| async move { env_ref.add_node(&format!("ttr-{run}-{j}")).await })
                .buffered(8)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<_>>()?;
            let pods = nodes.iter().enumerate().flat_map(|(j, node)| {
                (0..shape.pods).map(move |i| (node.clone(), format!("ttr-{run}-{j}-{i:03}")))
            });
            futures::stream::iter(pods)
                .map(|(node, name)| async move { create_pod(env_ref, &node, run, name).await })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>>>()?;
            let label = format!("ttr={run}");
            env.wait_pods_ready(&label, shape.total()).await?;
            eprintln!("[ttr] run {run}: {} for {}", shape.label(), path.label());
            runs.push(Run { path, shape, nodes, label });
        }
    }
    for node in runs.iter().flat_map(|r| &r.nodes) {
        env.kill_node(node).await?;
    }
    eprintln!(
        "[ttr] {} nodes killed; waiting until they are Unknown",
        runs.iter().map(|r| r.nodes.len()).sum::<usize>()
    );
    // kube-controller-manager marks them at its own pace (its client is limited to 20 requests
    // a second): one wait for all, with a deadline growing with their number.
    let dead: std::collections::HashSet<&str> =
        runs.iter().flat_map(|r| r.nodes.iter().map(String::as_str)).collect();
    let (env_ref, dead_ref) = (&env, &dead);
    let deadline = Duration::from_secs(180 + 2 * dead.len() as u64);
    let shown = std::sync::atomic::AtomicUsize::new(usize::MAX);
    wait_for("every killed node Unknown", deadline, || {
        let shown = &shown;
        async move {
            let nodes = env_ref.nodes().list(&Default::default()).await?;
            let unknown = nodes
                .items
                .iter()
                .filter(|n| n.metadata.name.as_deref().is_some_and(|name| dead_ref.contains(name)))
                .filter(|n| crate::support::env::node_ready_status(n).as_deref() == Some("Unknown"))
                .count();
            if shown.swap(unknown, std::sync::atomic::Ordering::Relaxed) != unknown {
                eprintln!("[ttr] {unknown} of {} killed nodes Unknown", dead_ref.len());
            }
            Ok((unknown == dead_ref.len()).then_some(()))
        }
    })
    .await?;
    let mut table = Vec::new();
    let mut requests = Vec::new();
    for run in &runs {
        let (row, load) = one(cluster, &env, peer, run, &churn_node, churn).await?;
        table.push(row);
        requests.push(load);
    }
    println!();
    println!(
        "Time to remediation: from each pod's threshold (deletionTimestamp + {DELAY} s, computed from \
         the benchmark's send times) to the DELETE that removed it (audit log); background churn \
         {churn} pods per second."
    );
    println!();
    println!("| path | pods | removed | p50 | p99 | max | last removed after | DELETE sent by |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for row in table {
        println!("{row}");
    }
    println!();
    println!(
        "Requests by the sender of the removing DELETEs, from the first pod's threshold until 5 s \
         after the last removal (audit log), per removed pod:"
    );
    println!();
    println!("| path | pods | reads | pod DELETEs | Events | other writes | of which Leases |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for row in requests {
        println!("{row}");
    }
    Ok(())
}

async fn create_pod(env: &TestEnv, node: &str, run: usize, name: String) -> Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "ttr": run.to_string() } },
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
    run: &Run,
    churn_node: &str,
    churn: f64,
) -> Result<(String, String)> {
    let (path, n, label) = (run.path, run.shape.total(), run.label.as_str());
    let mut operator = None;
    let mut peer_process = None;
    // Each contender runs as a service account of the namespace `measured`, whose every request
    // (reads too) the audit log records.
    let identity = format!("ttr-{}", label.replace('=', "-"));
    let (kubeconfig, _) = crate::measure::identity(&env.client, cluster, &identity).await?;
    match path {
        Remedy::Remediator => {
            operator = Some(
                Operator::start_through(
                    cluster,
                    env,
                    &kubeconfig,
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
                .arg(&kubeconfig)
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
    let churning = (churn > 0.0).then(|| {
        tokio::spawn(churn_pods(env.pods(), churn_node.to_string(), label.replace('=', "-"), churn))
    });
    // Both count the node dead at the latest LEASE_STALE_FOR s after they start (their own
    // clocks): before the pods' thresholds, GRACE + DELAY s after the deletes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Just after a whole second.
    let now = Timestamp::now();
    let next = Timestamp::from_second(now.as_second() + 1)? + SignedDuration::from_millis(5);
    tokio::time::sleep(next.duration_since(now).unsigned_abs()).await;
    let names: Vec<String> =
        env.list_pods(label).await?.into_iter().filter_map(|p| p.metadata.name).collect();
    if names.len() != n {
        bail!("{label}: {} pods, not {n}", names.len());
    }
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
        .buffer_unordered(n.clamp(1, 128))
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
    let first = thresholds.values().min().copied().context("no pod")?;
    let latest = thresholds.values().max().copied().context("no pod")?;
    if path == Remedy::Upstream {
        let wait = latest.duration_since(Timestamp::now());
        if wait.is_positive() {
            tokio::time::sleep(wait.unsigned_abs()).await;
        }
        futures::stream::iter(&run.nodes)
            .map(|node| {
                env.add_taint(
                    node,
                    "node.kubernetes.io/out-of-service",
                    Some("nodeshutdown"),
                    "NoExecute",
                )
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
    }
    let env_ref = env;
    wait_for(&format!("{n} pods of {label} gone"), Duration::from_secs(180), || async move {
        Ok(env_ref.list_pods(label).await?.is_empty().then_some(()))
    })
    .await?;
    if let Some(churning) = churning {
        churning.abort();
    }
    // Its records follow the DELETEs: stopped once they are out.
    tokio::time::sleep(RECORDS_AFTER.unsigned_abs()).await;
    drop(operator);
    drop(peer_process);
    // The DELETE that removed each pod: the last successful one.
    let text = std::fs::read_to_string(&cluster.audit_log)?;
    let lines: Vec<serde_json::Value> =
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let mut removed: HashMap<String, (Timestamp, String)> = HashMap::new();
    for v in &lines {
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
    let last = removed.values().map(|(at, _)| *at).max().context("no removal")?;
    let span = last.duration_since(first).as_secs_f64();
    // The records (Events, the status) follow the last DELETE: counted until RECORDS_AFTER later.
    let load = requests(&lines, &users, first, last + RECORDS_AFTER);
    let pct = |p: f64| delays[((delays.len() as f64 - 1.0) * p).round() as usize];
    let shape = run.shape.label();
    eprintln!(
        "[ttr] {} with {shape}: p50 {:.3}s p99 {:.3}s max {:.3}s (min {:.3}s), last {span:.3}s after \
         the first threshold, by {users:?}; requests {load:?}",
        path.label(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        pct(0.0)
    );
    let per_pod = |count: usize| format!("{:.2}", count as f64 / delays.len() as f64);
    Ok((
        format!(
            "| {} | {shape} | {} | {:.3} s | {:.3} s | {:.3} s | {span:.3} s | {} |",
            path.label(),
            delays.len(),
            pct(0.5),
            pct(0.99),
            pct(1.0),
            users.join(", ")
        ),
        format!(
            "| {} | {shape} | {} | {} | {} | {} | {} |",
            path.label(),
            per_pod(load.reads),
            per_pod(load.pod_deletes),
            per_pod(load.events),
            per_pod(load.other_writes),
            per_pod(load.leases),
        ),
    ))
}

/// Creates a pod on `node` every 1/`per_second` s and deletes each 5 s after it was created,
/// until aborted.
async fn churn_pods(pods: kube::Api<Pod>, node: String, prefix: String, per_second: f64) {
    let every = Duration::from_secs_f64(1.0 / per_second);
    let keep = (5.0 * per_second).ceil() as usize;
    let mut tick = tokio::time::interval(every);
    for i in 0usize.. {
        tick.tick().await;
        let pod = json!({
            "metadata": { "name": format!("churn-{prefix}-{i}"), "labels": { "churn": prefix } },
            "spec": { "nodeName": node, "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }] },
        });
        let Ok(pod) = serde_json::from_value::<Pod>(pod) else { return };
        let api = pods.clone();
        tokio::spawn(async move {
            let _ = api.create(&PostParams::default(), &pod).await;
        });
        if let Some(old) = i.checked_sub(keep) {
            let api = pods.clone();
            let name = format!("churn-{prefix}-{old}");
            tokio::spawn(async move {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            });
        }
    }
}

/// The requests of a set of senders in a time window, by kind.
#[derive(Debug, Default)]
struct Load {
    /// GETs and LISTs.
    reads: usize,
    pod_deletes: usize,
    events: usize,
    /// Leases (leader election) apart.
    leases: usize,
    other_writes: usize,
}

fn requests(lines: &[serde_json::Value], senders: &[&str], from: Timestamp, to: Timestamp) -> Load {
    let mut load = Load::default();
    for v in lines {
        let s = |ptr: &str| v.pointer(ptr).and_then(|x| x.as_str()).unwrap_or_default();
        if s("/stage") != "ResponseComplete" {
            continue;
        }
        let Ok(at) = s("/requestReceivedTimestamp").parse::<Timestamp>() else { continue };
        if at < from
            || at > to
            || !senders.contains(&sender(s("/user/username"), s("/userAgent")).as_str())
        {
            continue;
        }
        match (s("/verb"), s("/objectRef/resource")) {
            ("get" | "list", _) => load.reads += 1,
            ("watch", _) => {}
            ("delete", "pods") => load.pod_deletes += 1,
            (_, "events") => load.events += 1,
            (_, "leases") => load.leases += 1,
            _ => load.other_writes += 1,
        }
    }
    load
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
