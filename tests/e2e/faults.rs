//! Issue 8: faults that must never read as deaths, and the last look before a force-delete.
//!
//! - A kubelet whose clock runs minutes behind renews its Lease with old-looking timestamps: it
//!   is alive, as kube-controller-manager (which times heartbeats by when it saw them change)
//!   agrees, and its pods are never force-deleted.
//! - A stall of etcd or of the API server (SIGSTOP, then SIGCONT) silences every Lease at once:
//!   no node counts as dead for it, so neither a pod nor a Node is written for it (the policy
//!   would cordon a node the instant it counts as dead). A node that is really dead is released
//!   and cordoned once a full `leaseStaleFor` has passed after the stall, not before. These run
//!   on production-like control planes of their own (PodGC on, default eviction rates and
//!   tolerations, the kubelet's 40 s Lease), one test at a time per control plane, since a stall
//!   disturbs every test on it.
//! - The last look: when a pod is excluded or its policy leaves Enforce between the plan and
//!   the DELETE, nothing is deleted and the skip is recorded. The test build's hold hook
//!   (`--e2e-hold-dir`, cargo feature `e2e-hooks`) holds the operator right before its last
//!   look until the test has made its change, so the window is hit every time.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::fixtures::{uid, until};
use crate::support::cluster::Cluster;
use crate::support::env::{TEST_LABEL, pod_is_ready};
use crate::support::operator::{Operator, binary};
use crate::support::{TestEnv, holds_for, shared_cluster, wait_for};
use crate::{e2e, fault_e2e};

/// Fault trials queued behind another on their fault control plane: each holds a test thread
/// while it waits for the control plane's lock (see `main`). The stalls here and the storm
/// guard's trial (`storm.rs`), on two control planes.
pub const QUEUED_FAULT_TRIALS: usize = 4;

/// The stall trials first: they are the longest, and two fault control planes run them in
/// parallel (libtest-mimic starts trials in list order), about 7 minutes each in all.
pub fn trials() -> Vec<Trial> {
    let stalls = vec![
        fault_e2e!(A, "fa-etcd-stall-5x", etcd_stall_of_5x_the_window_is_not_a_death),
        fault_e2e!(B, "fa-etcd-stall-2x", etcd_stall_of_2x_the_window_is_not_a_death),
        fault_e2e!(B, "fa-apiserver-stall", apiserver_stall_is_not_a_death),
        fault_e2e!(A, "fa-etcd-stall-2x-restarts", etcd_stall_with_leader_restarts_is_not_a_death),
        fault_e2e!(B, "fa-etcd-stall-1.25x", etcd_stall_of_1_25x_the_window_is_not_a_death),
    ];
    debug_assert_eq!(stalls.len() + crate::storm::trials().len() - 2, QUEUED_FAULT_TRIALS);
    let others = vec![
        e2e!("sk-clock-skew", a_kubelet_clock_behind_ours_is_not_a_dead_node),
        e2e!("ll-exclude", last_look_spares_a_pod_excluded_after_the_plan),
        e2e!("ll-dry-run", last_look_spares_a_pod_whose_policy_went_dry_run),
        e2e!("ll-node-returns", last_look_skips_a_node_back_then_releases_once_dead_again),
        e2e!("ll-killed-after-delete", an_action_is_recorded_before_it_is_taken),
        e2e!("ll-killed-overlapping", overlapping_policies_act_once_across_a_restart),
    ];
    stalls.into_iter().chain(others).collect()
}

pub(crate) const NOT_READY_FOR: i64 = 10;
/// The documented minimum, as in the report.
pub(crate) const LEASE_STALE_FOR: i64 = 40;
/// The skewed kubelet's clock runs 5 minutes behind ours.
const SKEW: SignedDuration = SignedDuration::from_secs(-300);
/// How late after the end of a stall a really dead node's pod may be released: the window
/// restarts when Lease events resume (within a couple of seconds), then kube-controller-manager
/// and the operator need a few more.
const RELEASE_MARGIN: i64 = 30;
/// Audit and wall-clock timestamps come from one machine; this absorbs their rounding.
const TOLERANCE: SignedDuration = SignedDuration::from_millis(500);

/// The Enforce policy of every test here: the windows, no delay after the grace
/// period, and room for the test's two unhealthy nodes.
pub(crate) fn policy_spec(env: &TestEnv) -> serde_json::Value {
    json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { "topology.kubernetes.io/zone": env.zone } },
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": 2 },
    })
}

/// The stall tests' policy: [`policy_spec`], and a node action that fires the instant a node
/// counts as dead (cordon), so a stall read as a death would show as a write to a live Node.
fn stall_policy_spec(env: &TestEnv) -> serde_json::Value {
    let mut spec = policy_spec(env);
    spec["nodeActions"] = json!({ "cordonAfter": "0s" });
    spec
}

/// Fails if the operator sent a DELETE of the pod (audit log).
fn no_operator_delete(cluster: &Cluster, env: &TestEnv, pod: &str) -> Result<()> {
    let deletes = cluster.operator_pod_deletes(&env.namespace, pod)?;
    ensure!(deletes.is_empty(), "the operator sent a DELETE of {pod}: {deletes:?}");
    Ok(())
}

/// Fails if the operator wrote to any of `nodes` (audit log: any verb, any subresource).
fn no_operator_node_write(cluster: &Cluster, nodes: &[&str]) -> Result<()> {
    for node in nodes {
        let writes = cluster.operator_node_writes(node)?;
        ensure!(writes.is_empty(), "the operator wrote to node {node}: {writes:?}");
    }
    Ok(())
}

/// Waits until the node is cordoned (`spec.unschedulable`).
async fn wait_cordoned(env: &TestEnv, node: &str, timeout: Duration) -> Result<()> {
    wait_for(&format!("node {node} to be cordoned"), timeout, || async move {
        let n = env.nodes().get_opt(node).await?;
        let cordoned = n.and_then(|n| n.spec).and_then(|s| s.unschedulable).unwrap_or(false);
        Ok(cordoned.then_some(()))
    })
    .await
}

/// Fails if the pod is gone or replaced. A request that fails is not a violation: right after
/// a stall the API can be briefly unavailable, and the audit log is the authority on deletes.
async fn still_there(env: &TestEnv, pod: &str, pod_uid: &str) -> Result<()> {
    match env.pods().get_opt(pod).await {
        Ok(Some(p)) if uid(&p) == pod_uid => Ok(()),
        Ok(_) => bail!("pod {pod} ({pod_uid}) is gone"),
        Err(_) => Ok(()),
    }
}

/// Waits until the pod with this UID is gone.
pub(crate) async fn wait_gone(
    env: &TestEnv,
    pod: &str,
    pod_uid: &str,
    timeout: Duration,
) -> Result<()> {
    wait_for(&format!("pod {pod} ({pod_uid}) to be gone"), timeout, || async move {
        let p = env.pods().get_opt(pod).await?;
        Ok((p.as_ref().map(uid).as_deref() != Some(pod_uid)).then_some(()))
    })
    .await
}

/// Creates pod `name` on the kwok node `node` and waits until it runs.
pub(crate) async fn running_pod_on(env: &TestEnv, name: &str, node: &str) -> Result<Pod> {
    env.create_bound_pod(name, node).await?;
    wait_for(&format!("pod {name} to run on {node}"), Duration::from_secs(60), || async move {
        Ok(env.pods().get_opt(name).await?.filter(pod_is_ready))
    })
    .await
}

/// Kills the kwok node and deletes its pod `pod` with a 1 s grace period: with no kubelet to
/// finish it, the pod stays Terminating (field incident 1). Takes about 5 s. kwok drops the
/// node from its label-selected watch within moments of the kill; the pod is deleted 1 s after
/// it, and the test checks the pod outlives its grace period, so a kwok that still finalized
/// it fails here instead of going unnoticed.
pub(crate) async fn kill_and_strand(env: &TestEnv, node: &str, pod: &str) -> Result<Pod> {
    env.kill_node(node).await?;
    let killed = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let terminating = env.delete_gracefully(pod, 1).await?;
    let pod_uid = uid(&terminating);
    let window = Duration::from_secs(5).saturating_sub(killed.elapsed());
    holds_for(&format!("pod {pod} to stay Terminating on dead {node}"), window, || async {
        match env.pods().get_opt(pod).await? {
            Some(p) if uid(&p) == pod_uid => Ok(()),
            _ => bail!("pod {pod} was finalized: kwok still managed {node}"),
        }
    })
    .await?;
    Ok(terminating)
}

/// Runs `kube-remediator plan -o json` (admin kubeconfig) for this test's policy, with `extra`
/// arguments.
async fn run_plan(cluster: &Cluster, env: &TestEnv, extra: &[&str]) -> Result<serde_json::Value> {
    let mut cmd = Command::new(binary());
    cmd.args(["plan", "-o", "json", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .arg("--policy-selector")
        .arg(format!("{TEST_LABEL}={}", env.name))
        .args(extra);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    ensure!(out.status.success(), "plan failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).context("plan -o json printed no JSON")
}

/// Field incident: a live `Ready=False` node (its container runtime is down, so its pod stays
/// Terminating) whose kubelet clock runs 5 minutes behind ours. Its Lease's `renewTime` always
/// looks 5 minutes old, but it changes every 2 s: the node is alive, the pod is never
/// force-deleted (audit log, over twice the policy's windows), and `plan` says why.
async fn a_kubelet_clock_behind_ours_is_not_a_dead_node(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let (node, _kubelet) = env.add_skewed_node("skewed", "False", SKEW).await?;
    env.create_bound_pod("on-skewed", &node).await?;
    let pod = env.delete_gracefully("on-skewed", 1).await?;
    let pod_uid = uid(&pod);
    env.create_policy(policy_spec(env)).await?;
    let _op = Operator::start(cluster, env).await?;

    let window = Duration::from_secs(2 * NOT_READY_FOR.max(LEASE_STALE_FOR) as u64 + 5);
    holds_for("the skewed node's pod to be left alone", window, || async {
        no_operator_delete(cluster, env, "on-skewed")?;
        still_there(env, "on-skewed", &pod_uid).await
    })
    .await?;
    no_operator_delete(cluster, env, "on-skewed")?;

    let plan = run_plan(cluster, env, &["--observe", "5s"]).await?;
    let unhealthy = plan[0]["unhealthyNodes"].as_array().cloned().unwrap_or_default();
    let entry = unhealthy
        .iter()
        .find(|n| n["node"] == node.as_str())
        .with_context(|| format!("plan lists no unhealthy node {node}: {plan:#}"))?;
    ensure!(entry["state"] != "Dead", "plan calls the live node {node} dead: {entry:#}");
    let why = entry["why"].as_str().unwrap_or_default();
    ensure!(
        why.contains("by our clock") && why.to_lowercase().contains("clock skew"),
        "plan does not explain the clock skew of {node}: {entry:#}"
    );
    let actions = plan[0]["actions"].as_array().cloned().unwrap_or_default();
    ensure!(
        !actions.iter().any(|a| a["pod"] == "on-skewed"),
        "plan would act on the live node's pod: {plan:#}"
    );
    eprintln!("[sk-clock-skew] plan: {node} {}: {why}", entry["state"]);
    Ok(())
}

async fn etcd_stall_of_1_25x_the_window_is_not_a_death(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    a_stall_is_not_a_death(cluster, env, "etcd", 125, Deployed::Alone).await
}

async fn etcd_stall_of_2x_the_window_is_not_a_death(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    a_stall_is_not_a_death(cluster, env, "etcd", 200, Deployed::Alone).await
}

async fn etcd_stall_of_5x_the_window_is_not_a_death(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    a_stall_is_not_a_death(cluster, env, "etcd", 500, Deployed::Alone).await
}

async fn etcd_stall_with_leader_restarts_is_not_a_death(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    a_stall_is_not_a_death(cluster, env, "etcd", 200, Deployed::Restarted).await
}

async fn apiserver_stall_is_not_a_death(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    a_stall_is_not_a_death(cluster, env, "kube-apiserver", 125, Deployed::Alone).await
}

/// How the operator runs through a stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deployed {
    /// One replica without leader election (the chart's `leaderElection.enabled=false`): it
    /// lives through the stall with its watches open and silent, as in the report, so
    /// its own stall handling is what is tested.
    Alone,
    /// Leader election on (the chart's default), and restarted 2 s after every exit as a
    /// Deployment's container is: the leader pauses about 10 s into the stall (no renewal of
    /// its Lease is stored) and resumes its term after it, its state kept through the stall;
    /// were it to exit, its successors would start while the control plane does not answer.
    Restarted,
}

/// Invariant 2: a stall of `component` for `percent`% of `leaseStaleFor` is not a death. A
/// live `Ready=False` node (clock 5 minutes behind, renewing every 2 s) with a Terminating pod
/// and a really dead kwok node (killed about 5 s before the stall) with a Terminating pod go
/// through the stall, beside the zone's healthy kwok node; the policy would also cordon a node
/// the instant it counts as dead ([`stall_policy_spec`]). The operator never writes to the live
/// node or the healthy one, nor deletes the live node's pod (audit log: during the stall and
/// until `leaseStaleFor` + 10 s after it); it force-deletes the dead node's pod and cordons the
/// dead node once a full `leaseStaleFor` has passed after the resume, not before (no write to
/// that node either before then), and within [`RELEASE_MARGIN`] seconds of that.
async fn a_stall_is_not_a_death(
    cluster: &Cluster,
    env: &TestEnv,
    component: &str,
    percent: u64,
    deployed: Deployed,
) -> Result<()> {
    let (live, _kubelet) = env.add_skewed_node("live", "False", SKEW).await?;
    let dead = env.add_node("dead").await?;
    env.create_bound_pod("on-live", &live).await?;
    let live_uid = uid(&env.delete_gracefully("on-live", 1).await?);
    running_pod_on(env, "on-dead", &dead).await?;
    env.create_policy(stall_policy_spec(env)).await?;
    let live_nodes = [live.as_str(), env.healthy_node.as_str()];
    let scenario =
        through_the_stall(cluster, env, component, percent, &live_uid, &live_nodes, &dead);
    match deployed {
        Deployed::Alone => {
            let mut op =
                Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;
            let outcome = scenario.await;
            if let Some(status) = op.exited()? {
                bail!("the operator exited ({status}) during the test; see {}", op.log.display());
            }
            outcome
        }
        Deployed::Restarted => {
            let op = Operator::start(cluster, env).await?;
            let restarts = AtomicU32::new(0);
            let outcome = tokio::select! {
                outcome = scenario => outcome,
                failed = restart_on_exit(cluster, env, op, &restarts) => failed,
            };
            eprintln!("[{}] the operator was restarted {} times", env.name, restarts.into_inner());
            outcome
        }
    }
}

/// Plays the kubelet for the operator's container: restarts it 2 s after each exit (a new
/// replica name per restart, so each keeps its log). Returns only when a restart fails.
async fn restart_on_exit(
    cluster: &Cluster,
    env: &TestEnv,
    first: Operator,
    restarts: &AtomicU32,
) -> Result<()> {
    let mut current = first;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Some(status) = current.exited()? {
            let n = restarts.fetch_add(1, Ordering::SeqCst) + 1;
            eprintln!(
                "[{}] the operator exited ({status}, see {}); restarting it in 2s",
                env.name,
                current.log.display()
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
            current = Operator::spawn_replica(cluster, env, &format!("restart-{n}"), &[])?;
        }
    }
}

/// The part of [`a_stall_is_not_a_death`] after the operator started: the dead node dies,
/// `component` stalls, and what happens after the resume is checked. `live_nodes` are the
/// nodes that stay alive.
async fn through_the_stall(
    cluster: &Cluster,
    env: &TestEnv,
    component: &str,
    percent: u64,
    live_uid: &str,
    live_nodes: &[&str],
    dead: &str,
) -> Result<()> {
    let dead_uid = uid(&kill_and_strand(env, dead, "on-dead").await?);
    no_operator_delete(cluster, env, "on-live")?;
    no_operator_delete(cluster, env, "on-dead")?;
    no_operator_node_write(cluster, live_nodes)?;
    no_operator_node_write(cluster, &[dead])?;

    let length = Duration::from_secs(LEASE_STALE_FOR as u64 * percent / 100);
    let stall = cluster.stall(component)?;
    // The stall itself: only the audit log (a file) is read meanwhile.
    let during = holds_for(&format!("no write while {component} is stalled"), length, || async {
        no_operator_delete(cluster, env, "on-live")?;
        no_operator_delete(cluster, env, "on-dead")?;
        no_operator_node_write(cluster, live_nodes)?;
        no_operator_node_write(cluster, &[dead])
    })
    .await;
    let resumed = stall.resume()?;
    during?;

    let released_from = resumed + SignedDuration::from_secs(LEASE_STALE_FOR);
    let released_by = released_from + SignedDuration::from_secs(RELEASE_MARGIN);
    let live_alone = holds_for(
        "the live nodes and the live node's pod to be left alone after the stall",
        until(released_from + SignedDuration::from_secs(10)),
        || async {
            no_operator_delete(cluster, env, "on-live")?;
            no_operator_node_write(cluster, live_nodes)?;
            still_there(env, "on-live", live_uid).await
        },
    );
    let dead_released = async {
        holds_for(
            "the dead node and its pod to wait a full window after the stall",
            until(released_from - TOLERANCE),
            || async {
                no_operator_delete(cluster, env, "on-dead")?;
                no_operator_node_write(cluster, &[dead])?;
                still_there(env, "on-dead", &dead_uid).await
            },
        )
        .await?;
        let by = until(released_by) + Duration::from_secs(1);
        tokio::try_join!(wait_gone(env, "on-dead", &dead_uid, by), wait_cordoned(env, dead, by))
    };
    tokio::try_join!(live_alone, dead_released)?;

    no_operator_delete(cluster, env, "on-live")?;
    no_operator_node_write(cluster, live_nodes)?;
    let node_writes = cluster.operator_node_writes(dead)?;
    let cordon =
        node_writes.first().context("the dead node is cordoned, but not by the operator")?;
    let cordoned = cordon.received.context("audit entry without requestReceivedTimestamp")?;
    let cordon_delay = cordoned.duration_since(resumed);
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, "on-dead").await?;
    let first = deletes.first().context("on-dead is gone, but not by a DELETE of the operator")?;
    let received = first.received.context("audit entry without requestReceivedTimestamp")?;
    let delay = received.duration_since(resumed);
    eprintln!(
        "[{}] {component} stalled {}s ({percent}% of leaseStaleFor {LEASE_STALE_FOR}s): the dead \
         node's pod was force-deleted {:.1}s and the node cordoned {:.1}s after the resume; no \
         write to the live nodes",
        env.name,
        length.as_secs(),
        delay.as_secs_f64(),
        cordon_delay.as_secs_f64()
    );
    ensure!(
        received >= released_from - TOLERANCE,
        "the dead node's pod was force-deleted {:.1}s after the stall, before a full window",
        delay.as_secs_f64()
    );
    ensure!(
        received <= released_by,
        "the dead node's pod was force-deleted only {:.1}s after the stall",
        delay.as_secs_f64()
    );
    ensure!(
        cordoned >= released_from - TOLERANCE,
        "the dead node was cordoned {:.1}s after the stall, before a full window",
        cordon_delay.as_secs_f64()
    );
    ensure!(
        cordoned <= released_by,
        "the dead node was cordoned only {:.1}s after the stall",
        cordon_delay.as_secs_f64()
    );
    Ok(())
}

/// What the test changes while the operator is held before its last look.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Annotates the pod `remediator.io/exclude: "true"`.
    ExcludePod,
    /// Switches the policy to DryRun.
    PolicyToDryRun,
}

/// The last look (`--e2e-hold-dir`): pod excluded after the plan, nothing deleted.
async fn last_look_spares_a_pod_excluded_after_the_plan(env: &TestEnv) -> Result<()> {
    last_look_spares(env, Change::ExcludePod).await
}

/// The last look (`--e2e-hold-dir`): policy switched to DryRun after the plan, nothing deleted.
async fn last_look_spares_a_pod_whose_policy_went_dry_run(env: &TestEnv) -> Result<()> {
    last_look_spares(env, Change::PolicyToDryRun).await
}

/// A pod stuck Terminating on a dead node becomes due; the operator, held by the test build's
/// hook right before its last look, waits while the test applies `change`; released, it reads
/// pod, node, Lease and policy afresh and skips: no DELETE (audit log), the pod keeps its UID,
/// and the skip is recorded (`ForceDeleteSkipped` Event on the pod, a `Skipped` status entry).
async fn last_look_spares(env: &TestEnv, change: Change) -> Result<()> {
    let cluster = shared_cluster().await?;
    let dead = env.add_node("dead").await?;
    running_pod_on(env, "victim", &dead).await?;
    env.create_policy(policy_spec(env)).await?;
    let hold_dir = cluster.dir.join(format!("hold-{}", env.name));
    std::fs::create_dir_all(&hold_dir)?;
    let hold_arg = hold_dir.to_str().context("hold directory path is not UTF-8")?;
    let _op = Operator::start_replica(cluster, env, "", &["--e2e-hold-dir", hold_arg]).await?;
    let pod_uid = uid(&kill_and_strand(env, &dead, "victim").await?);

    // A fresh operator trusts evidence only from its sync on: the pod is due a full window
    // after its start, plus the time kube-controller-manager takes to mark the node.
    let held = hold_dir.join(format!("{pod_uid}.held"));
    let timeout = Duration::from_secs(LEASE_STALE_FOR as u64 + 50);
    let content = wait_for("the operator to hold before its last look", timeout, || async {
        Ok(std::fs::read_to_string(&held).ok())
    })
    .await?;
    ensure!(
        content.trim() == format!("{}/victim", env.namespace),
        "unexpected hold file content {content:?}"
    );
    no_operator_delete(cluster, env, "victim")?;

    match change {
        Change::ExcludePod => {
            let patch =
                json!({ "metadata": { "annotations": { "remediator.io/exclude": "true" } } });
            env.pods().patch("victim", &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Change::PolicyToDryRun => {
            let patch = json!({ "spec": { "mode": "DryRun" } });
            env.policies().patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
    }
    release(&hold_dir, &pod_uid)?;

    let events =
        wait_for("a ForceDeleteSkipped Event on the pod", Duration::from_secs(30), || async move {
            let events = env.events_about("Pod", "victim", "ForceDeleteSkipped").await?;
            Ok((!events.is_empty()).then_some(events))
        })
        .await?;
    let record = env
        .wait_policy("a Skipped record in the policy status", Duration::from_secs(15), |s| {
            s.recent_actions
                .iter()
                .find(|a| a.uid == pod_uid && a.result.as_str() == "Skipped")
                .cloned()
        })
        .await?;
    holds_for("the pod to stay after the skip", Duration::from_secs(5), || async {
        no_operator_delete(cluster, env, "victim")?;
        let p = env.pods().get_opt("victim").await?;
        ensure!(p.as_ref().map(uid).as_deref() == Some(pod_uid.as_str()), "victim is gone");
        Ok(())
    })
    .await?;
    let note = events[0].note.clone().unwrap_or_default();
    eprintln!("[{}] {change:?}: skipped ({note}); status detail {:?}", env.name, record.detail);
    Ok(())
}

/// The node comes back between the plan and the DELETE, then dies for good. Played on a node
/// whose kubelet the test is (its heartbeat stopped, resumed, stopped again), so that nothing
/// finalizes the pod while the node is back. The last look sees the Lease renewed and skips
/// (a Skipped record, no DELETE); a skip is not an action taken, so once the node is dead
/// again the pod is released, by one DELETE.
async fn last_look_skips_a_node_back_then_releases_once_dead_again(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let (node, beat) = env.add_live_node_without_kubelet("flapper").await?;
    env.create_bound_pod("victim", &node).await?;
    env.create_policy(policy_spec(env)).await?;
    let hold_dir = cluster.dir.join(format!("hold-{}", env.name));
    std::fs::create_dir_all(&hold_dir)?;
    let hold_arg = hold_dir.to_str().context("hold directory path is not UTF-8")?;
    let _op = Operator::start_replica(cluster, env, "", &["--e2e-hold-dir", hold_arg]).await?;
    drop(beat);
    let pod_uid = uid(&env.delete_gracefully("victim", 1).await?);
    let held = hold_dir.join(format!("{pod_uid}.held"));
    let timeout = Duration::from_secs(LEASE_STALE_FOR as u64 + 50);
    wait_for("the operator to hold before its last look", timeout, || async {
        Ok(held.exists().then_some(()))
    })
    .await?;

    let beat = env.heartbeat_again(&node).await?;
    env.wait_node_ready(&node, "True").await?;
    release(&hold_dir, &pod_uid)?;
    env.wait_policy("a Skipped record in the policy status", Duration::from_secs(15), |s| {
        s.recent_actions
            .iter()
            .find(|a| a.uid == pod_uid && a.result.as_str() == "Skipped")
            .cloned()
    })
    .await?;
    no_operator_delete(cluster, env, "victim")?;

    drop(beat);
    let died = Timestamp::now();
    wait_for(
        "the pod to be released",
        Duration::from_secs(LEASE_STALE_FOR as u64 + 40),
        || async {
            let p = env.pods().get_opt("victim").await?;
            Ok((p.as_ref().map(uid).as_deref() != Some(pod_uid.as_str())).then_some(()))
        },
    )
    .await?;
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, "victim").await?;
    ensure!(deletes.len() == 1, "expected one DELETE of victim: {deletes:?}");
    eprintln!(
        "[ll-node-returns] skipped while the node was back; released {:.1}s after it died again \
         (leaseStaleFor {LEASE_STALE_FOR}s), by one DELETE",
        Timestamp::now().duration_since(died).as_secs_f64()
    );
    Ok(())
}

/// The operator is killed (SIGKILL) right after its DELETE is answered, before it records the
/// outcome (the test build's hook holds it there). The status already holds the action,
/// `Pending`: it was recorded before the request. The restarted operator finds the pod gone and
/// records the action Done, with its Events, once; nothing is deleted twice.
async fn an_action_is_recorded_before_it_is_taken(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let dead = env.add_node("dead").await?;
    running_pod_on(env, "victim", &dead).await?;
    env.create_policy(policy_spec(env)).await?;
    let hold_dir = cluster.dir.join(format!("hold-{}", env.name));
    std::fs::create_dir_all(&hold_dir)?;
    std::fs::write(hold_dir.join("hold-after-delete"), b"")?;
    let hold_arg = hold_dir.to_str().context("hold directory path is not UTF-8")?;
    let mut op = Operator::start_replica(cluster, env, "", &["--e2e-hold-dir", hold_arg]).await?;
    let pod_uid = uid(&kill_and_strand(env, &dead, "victim").await?);
    release(&hold_dir, &pod_uid)?;
    let deleted = hold_dir.join(format!("{pod_uid}.deleted"));
    let timeout = Duration::from_secs(LEASE_STALE_FOR as u64 + 50);
    wait_for("the operator to hold after its DELETE", timeout, || async {
        Ok(deleted.exists().then_some(()))
    })
    .await?;
    op.kill();

    let deletes = cluster.await_operator_pod_deletes(&env.namespace, "victim").await?;
    ensure!(deletes.len() == 1, "expected the one DELETE: {deletes:?}");
    let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
    let before: Vec<_> = status.recent_actions.iter().filter(|a| a.uid == pod_uid).collect();
    ensure!(
        before.len() == 1 && before[0].result.as_str() == "Pending",
        "the action should be recorded Pending before its request: {before:?}"
    );
    ensure!(
        env.events_about("Pod", "victim", "ForceDeleted").await?.is_empty(),
        "an Event before the kill: the hook held too late"
    );

    // A new run (it takes the leader Lease once the killed one's expires).
    let restarted = Timestamp::now();
    let _op = Operator::start_replica(cluster, env, "", &[]).await?;
    let record = env
        .wait_policy("the Pending record resolved", Duration::from_secs(40), |s| {
            let records: Vec<_> = s.recent_actions.iter().filter(|a| a.uid == pod_uid).collect();
            (records.len() == 1 && records[0].result.as_str() != "Pending")
                .then(|| records[0].clone())
        })
        .await?;
    let detail = record.detail.clone().unwrap_or_default();
    ensure!(
        record.result.as_str() == "Done" && detail.contains("previous run"),
        "resolved as {record:?}"
    );
    let events = wait_for("a ForceDeleted Event on the pod", Duration::from_secs(10), || async {
        let events = env.events_about("Pod", "victim", "ForceDeleted").await?;
        Ok((!events.is_empty()).then_some(events))
    })
    .await?;
    holds_for("one ForceDeleted Event, one record", Duration::from_secs(3), || async {
        let events = env.events_about("Pod", "victim", "ForceDeleted").await?;
        ensure!(events.len() == 1, "{} ForceDeleted Events", events.len());
        let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
        let n = status.recent_actions.iter().filter(|a| a.uid == pod_uid).count();
        ensure!(n == 1, "{n} records of the pod");
        Ok(())
    })
    .await?;
    let deletes = cluster.operator_pod_deletes(&env.namespace, "victim")?;
    ensure!(deletes.len() == 1, "deleted again after the restart: {deletes:?}");
    eprintln!(
        "[ll-killed-after-delete] Pending before the DELETE; the new run resolved it Done {:.1}s \
         after its start: {detail:?}; Event: {:?}",
        Timestamp::now().duration_since(restarted).as_secs_f64(),
        events[0].note
    );
    Ok(())
}

/// Two overlapping Enforce policies select the same three pods on a dead node; the operator is
/// killed right after its first DELETE and restarted. Every pod is deleted once (audit log), has
/// one Done record across both policies' statuses, and no Pending record is left.
async fn overlapping_policies_act_once_across_a_restart(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let dead = env.add_node("dead").await?;
    let names = ["p1", "p2", "p3"];
    for name in names {
        running_pod_on(env, name, &dead).await?;
    }
    let other = format!("{}-b", env.name);
    env.create_policy(policy_spec(env)).await?;
    env.create_named_policy(&other, policy_spec(env)).await?;
    let hold_dir = cluster.dir.join(format!("hold-{}", env.name));
    std::fs::create_dir_all(&hold_dir)?;
    std::fs::write(hold_dir.join("hold-after-delete"), b"")?;
    let hold_arg = hold_dir.to_str().context("hold directory path is not UTF-8")?;
    let mut op = Operator::start_replica(cluster, env, "", &["--e2e-hold-dir", hold_arg]).await?;
    env.kill_node(&dead).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut uids = Vec::new();
    for name in names {
        let pod_uid = uid(&env.delete_gracefully(name, 1).await?);
        release(&hold_dir, &pod_uid)?;
        uids.push(pod_uid);
    }
    let timeout = Duration::from_secs(LEASE_STALE_FOR as u64 + 50);
    wait_for("the operator to hold after a DELETE", timeout, || async {
        Ok(uids.iter().any(|u| hold_dir.join(format!("{u}.deleted")).exists()).then_some(()))
    })
    .await?;
    op.kill();
    let _op = Operator::start_replica(cluster, env, "", &[]).await?;

    for name in names {
        wait_for(&format!("pod {name} to be gone"), Duration::from_secs(60), || async move {
            Ok(env.pods().get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
    }
    let records =
        wait_for("one Done record per pod, none Pending", Duration::from_secs(30), || {
            let other = other.clone();
            let uids = uids.clone();
            async move {
                let mut records = Vec::new();
                for policy in [env.name.clone(), other] {
                    let status = env.policies().get(&policy).await?.status.unwrap_or_default();
                    records.extend(status.recent_actions.into_iter().map(|a| (policy.clone(), a)));
                }
                let done = |u: &String| {
                    records
                        .iter()
                        .filter(|(_, a)| &a.uid == u && a.result.as_str() == "Done")
                        .count()
                };
                let pending = records.iter().any(|(_, a)| a.result.as_str() == "Pending");
                Ok((uids.iter().all(|u| done(u) == 1) && !pending).then_some(records))
            }
        })
        .await?;
    for name in names {
        let deletes = cluster.await_operator_pod_deletes(&env.namespace, name).await?;
        ensure!(deletes.len() == 1, "{} DELETEs of {name}: {deletes:?}", deletes.len());
    }
    let summary: Vec<String> =
        records.iter().map(|(p, a)| format!("{p}: {} {}", a.name, a.result.as_str())).collect();
    eprintln!("[ll-killed-overlapping] one DELETE per pod; records {summary:?}");
    Ok(())
}

/// Lets the operator held on the pod `uid` go on to its last look.
fn release(hold_dir: &Path, uid: &str) -> Result<()> {
    std::fs::write(hold_dir.join(format!("{uid}.release")), b"")
        .with_context(|| format!("releasing the hold of {uid}"))
}
