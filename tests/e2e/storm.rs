//! The storm guard over the whole cluster (`run --max-unhealthy-nodes-in-cluster`), and the
//! circuit over time (`safety.latch` with its re-arm annotation, `safety.cooldown`).
//!
//! The cluster-wide limit counts every node the operator sees, so its test cannot share a
//! control plane with other tests' outages: it runs alone on a fault control plane
//! ([`fault_e2e!`]), which is production-like (PodGC on, default eviction rates, the default
//! node-monitor grace period: a killed node turns Unknown about 50 s after its last heartbeat).
//! The tests that ran there before it leave their dead nodes behind; the test counts them when
//! it starts and sets the limit that many above the 2 it is about.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, Patch, PatchParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use kube_remediator::crd::{CircuitState, RemediationPolicyStatus};

use crate::fault_e2e;
use crate::faults::{kill_and_strand, running_pod_on, wait_gone};
use crate::fixtures::{renewed_since, uid, until};
use crate::support::cluster::Cluster;
use crate::support::env::{ZONE_LABEL, node_ready_status};
use crate::support::operator::Operator;
use crate::support::{TestEnv, holds_for, wait_for};

/// On fault control plane B: its stall trials take less time in all than A's.
pub fn trials() -> Vec<Trial> {
    vec![fault_e2e!(B, "st-cluster-storm", a_cluster_storm_holds_every_policy)]
}

const NOT_READY_FOR: i64 = 10;
/// The documented minimum.
const LEASE_STALE_FOR: i64 = 40;
/// The cool-down of the policy without a latch.
const COOLDOWN: i64 = 15;
/// How many unhealthy nodes of this test the cluster-wide limit allows: the two dead nodes of
/// the policies, not the three of the storm on top of them.
const ALLOWED: usize = 2;
/// How long the policies must keep still with their dead nodes due, in the storm.
const STORM_HOLD: Duration = Duration::from_secs(15);
/// How long the latched policy must keep still after the other one acted.
const LATCH_HOLD: Duration = Duration::from_secs(20);
/// How long after its instant an action may come at the latest (the operator requeues at the
/// exact instant; this covers a loaded 2-core machine).
const ACT_WITHIN: Duration = Duration::from_secs(15);
/// Audit timestamps against ours and whole-second status times.
const TOLERANCE: SignedDuration = SignedDuration::from_secs(1);
/// A killed node turns Unknown about 50 s after its last heartbeat (the default grace period).
const UNKNOWN_WITHIN: Duration = Duration::from_secs(150);
const REARM: &str = "remediator.io/rearm-circuit";

fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

/// The nodes the operator counts as unhealthy across the cluster (a Ready condition False or
/// Unknown; nodes without one never ran and do not count) whose name does not start with
/// `prefix`: those other tests left behind.
async fn others_unhealthy(env: &TestEnv, prefix: &str) -> Result<usize> {
    let nodes = env.nodes().list(&ListParams::default()).await?.items;
    Ok(nodes
        .iter()
        .filter(|n| !n.metadata.name.as_deref().unwrap_or_default().starts_with(prefix))
        .filter(|n| node_ready_status(n).is_some_and(|s| s != "True"))
        .count())
}

/// An Enforce policy for the nodes of `zone`: the short windows, no delay after the grace
/// period, the cordon the instant a node counts as dead, and `safety`.
fn zone_policy(zone: &str, safety: Value) -> Value {
    json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: zone } },
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "nodeActions": { "cordonAfter": "0s" },
        "safety": safety,
    })
}

fn circuit_condition(s: &RemediationPolicyStatus) -> Option<&Condition> {
    s.conditions.iter().find(|c| c.type_ == "CircuitOpen")
}

/// Waits until the policy's `CircuitOpen` condition is True with `reason` and its
/// `status.circuit` in `state`; returns the status.
async fn wait_circuit(
    env: &TestEnv,
    policy: &str,
    reason: &str,
    state: CircuitState,
    timeout: Duration,
) -> Result<RemediationPolicyStatus> {
    let what = format!("policy {policy}: CircuitOpen=True {reason}, circuit {state:?}");
    env.wait_named_policy(policy, &what, timeout, |s| {
        let c = circuit_condition(s)?;
        let in_state = s.circuit.as_ref().is_some_and(|c| c.state == state);
        (c.status == "True" && c.reason == reason && in_state).then(|| s.clone())
    })
    .await
}

/// Waits until the policy has an Event of `reason`.
async fn wait_policy_event(env: &TestEnv, policy: &str, reason: &str) -> Result<()> {
    wait_for(&format!("a {reason} Event on policy {policy}"), Duration::from_secs(15), || async {
        Ok((!env.events_about("RemediationPolicy", policy, reason).await?.is_empty()).then_some(()))
    })
    .await
}

/// Waits until `node` is Unknown, then returns when a policy with the test's windows counts it
/// dead (from the objects: [`TestEnv::dead_at`]).
async fn dead_instant(env: &TestEnv, node: &str) -> Result<Timestamp> {
    wait_for(&format!("node {node} Ready=Unknown"), UNKNOWN_WITHIN, || async move {
        let n = env.nodes().get_opt(node).await?;
        Ok(n.filter(|n| node_ready_status(n).as_deref() == Some("Unknown")).map(|_| ()))
    })
    .await?;
    env.dead_at(node, NOT_READY_FOR, LEASE_STALE_FOR).await
}

/// Fails if the operator sent a DELETE of `pod` or wrote to `node` (audit log), or the pod is
/// gone or replaced.
async fn untouched(
    cluster: &Cluster,
    env: &TestEnv,
    pod: &str,
    pod_uid: &str,
    node: &str,
) -> Result<()> {
    let deletes = cluster.operator_pod_deletes(&env.namespace, pod)?;
    ensure!(deletes.is_empty(), "the operator sent a DELETE of {pod}: {deletes:?}");
    let writes = cluster.operator_node_writes(node)?;
    ensure!(writes.is_empty(), "the operator wrote to {node}: {writes:?}");
    let p = env.pods().get_opt(pod).await?;
    ensure!(p.as_ref().map(uid).as_deref() == Some(pod_uid), "{pod} ({pod_uid}) is gone");
    Ok(())
}

/// When the operator acted on `pod` and `node`: its first DELETE of the pod and its first write
/// to the node (audit log).
async fn acted_at(
    cluster: &Cluster,
    env: &TestEnv,
    pod: &str,
    node: &str,
) -> Result<(Timestamp, Timestamp)> {
    let delete = cluster.await_operator_pod_deletes(&env.namespace, pod).await?;
    let deleted = delete.first().and_then(|d| d.received);
    let writes = cluster.operator_node_writes(node)?;
    let cordon = writes.first().filter(|w| w.verb == "patch").and_then(|w| w.received);
    match (deleted, cordon) {
        (Some(d), Some(c)) => Ok((d, c)),
        _ => {
            bail!("no DELETE of {pod} or no PATCH of {node} by the operator: {delete:?} {writes:?}")
        }
    }
}

/// Waits until the pod is gone and the node cordoned.
async fn wait_released(
    env: &TestEnv,
    pod: &str,
    pod_uid: &str,
    node: &str,
    timeout: Duration,
) -> Result<()> {
    let what = format!("node {node} cordoned");
    let cordon = wait_for(&what, timeout, || async move {
        Ok(env.nodes().get_opt(node).await?.filter(cordoned).map(|_| ()))
    });
    tokio::try_join!(wait_gone(env, pod, pod_uid, timeout), cordon)?;
    Ok(())
}

/// The issue: "More nodes unhealthy than allowed across the cluster: no pod or node action by
/// any policy, including a narrow policy whose own nodes are within its limit. With latch, it
/// stays open after recovery until re-armed."
///
/// Three zones of the test's own: a (2 nodes) and b (2 nodes), each with an Enforce policy that
/// allows one unhealthy node of its own (`maxUnhealthyNodes: 1`), force-deletes pods stuck
/// Terminating on a dead node and cordons it the instant it counts as dead; the one of zone a
/// latches (`latch: true`, no cool-down), the one of zone b cools down for 15 s. Zone c (3
/// nodes) has no policy. The operator's cluster-wide limit is 2 (above the unhealthy nodes
/// other tests left on this control plane).
///
/// Zone c dies (one node every 3 s): once its nodes are Unknown, both policies' circuits are
/// open (`ClusterStorm`) while their own nodes are all healthy. Then a1 and b1 die with a pod
/// stranded Terminating on each: both nodes count as dead by the policies' windows, and each
/// policy's own count (status) is within its limit, yet for 15 s more neither pod is deleted nor
/// either node written (audit log). Zone c comes back: the policy of zone b cools down
/// (`CoolingDown` until the end of the storm + 15 s) and acts at the end of its cool-down, not
/// before; the policy of zone a stays `Latched`, 20 s more after the other acted, until the
/// test re-arms it (`remediator.io/rearm-circuit`): then it closes and acts at once
/// (`CircuitRearmed`). The operator never writes to the nodes that stay alive.
async fn a_cluster_storm_holds_every_policy(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    let prefix = format!("{}-", env.name);
    let baseline = others_unhealthy(env, &prefix).await?;
    let limit = baseline + ALLOWED;
    let zone = |z: &str| format!("zone-{}-{z}", env.name);
    let a1 = env.add_node_in_zone("a1", &zone("a")).await?;
    let a2 = env.add_node_in_zone("a2", &zone("a")).await?;
    let b1 = env.add_node_in_zone("b1", &zone("b")).await?;
    let b2 = env.add_node_in_zone("b2", &zone("b")).await?;
    let mut storm = Vec::new();
    for suffix in ["c1", "c2", "c3"] {
        storm.push(env.add_node_in_zone(suffix, &zone("c")).await?);
    }
    let on_a1 = uid(&running_pod_on(env, "on-a1", &a1).await?);
    let on_b1 = uid(&running_pod_on(env, "on-b1", &b1).await?);
    let latched = format!("{}-latched", env.name);
    let cool = format!("{}-cool", env.name);
    env.create_named_policy(
        &latched,
        zone_policy(&zone("a"), json!({ "maxUnhealthyNodes": 1, "latch": true, "cooldown": "0s" })),
    )
    .await?;
    env.create_named_policy(
        &cool,
        zone_policy(
            &zone("b"),
            json!({ "maxUnhealthyNodes": 1, "cooldown": format!("{COOLDOWN}s") }),
        ),
    )
    .await?;
    let limit_arg = format!("--max-unhealthy-nodes-in-cluster={limit}");
    let mut op =
        Operator::start_replica(cluster, env, "", &["--leader-elect=false", &limit_arg]).await?;
    let ready = Timestamp::now();
    tokio::try_join!(renewed_since(env, &a1, ready), renewed_since(env, &b1, ready))?;
    eprintln!("[{}] {baseline} unhealthy nodes left by other tests: {limit_arg}", env.name);

    // The storm: zone c dies, one node every 3 s (a zone dying at once would look like a
    // partition; this one is a storm for the cluster-wide count alone).
    let storm_killed = Timestamp::now();
    for (i, node) in storm.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        env.kill_node(node).await?;
    }
    for node in &storm {
        wait_for(&format!("node {node} Ready=Unknown"), UNKNOWN_WITHIN, || async move {
            let n = env.nodes().get_opt(node).await?;
            Ok(n.filter(|n| node_ready_status(n).as_deref() == Some("Unknown")).map(|_| ()))
        })
        .await?;
    }
    let storm_seen = Timestamp::now();
    for policy in [&latched, &cool] {
        let status =
            wait_circuit(env, policy, "ClusterStorm", CircuitState::Open, Duration::from_secs(30))
                .await?;
        ensure!(
            status.unhealthy_nodes == 0,
            "policy {policy} counts {} unhealthy nodes of its own before any died",
            status.unhealthy_nodes
        );
        let message = circuit_condition(&status).map(|c| c.message.clone()).unwrap_or_default();
        let count = format!("{} of ", baseline + storm.len());
        let limit_text = format!("--max-unhealthy-nodes-in-cluster {limit} = {limit}");
        ensure!(
            message.contains(&count) && message.contains(&limit_text),
            "policy {policy}: CircuitOpen does not count the cluster's nodes ({count}..., \
             {limit_text}): {message}"
        );
        wait_policy_event(env, policy, "CircuitOpen").await?;
    }
    let opened = Timestamp::now();
    ensure!(
        others_unhealthy(env, &prefix).await? == baseline,
        "other tests' nodes changed health: the cluster count is not this test's"
    );

    // a1 and b1 die in the storm, each with a pod stranded Terminating.
    let (a_pod, b_pod) =
        tokio::try_join!(kill_and_strand(env, &a1, "on-a1"), kill_and_strand(env, &b1, "on-b1"))?;
    ensure!(uid(&a_pod) == on_a1 && uid(&b_pod) == on_b1, "the stranded pods were replaced");
    let (dead_a, dead_b) = tokio::try_join!(dead_instant(env, &a1), dead_instant(env, &b1))?;
    let dead = dead_a.max(dead_b);
    // Each policy counts its one dead node, within its own limit of 1.
    for policy in [&latched, &cool] {
        let what = format!("policy {policy}: 1 unhealthy and 1 dead node of its own");
        let status = env
            .wait_named_policy(policy, &what, until(dead) + ACT_WITHIN, |s| {
                (s.unhealthy_nodes == 1 && s.dead_nodes == 1).then(|| s.clone())
            })
            .await?;
        let c = circuit_condition(&status).context("no CircuitOpen condition")?;
        ensure!(
            c.status == "True" && c.reason == "ClusterStorm",
            "policy {policy}: CircuitOpen {} {} with its dead node",
            c.status,
            c.reason
        );
    }
    let hold_until = Timestamp::now().max(dead) + SignedDuration::try_from(STORM_HOLD)?;
    holds_for("no action by either policy in the storm", until(hold_until), || async {
        untouched(cluster, env, "on-a1", &on_a1, &a1).await?;
        untouched(cluster, env, "on-b1", &on_b1, &b1).await
    })
    .await?;
    eprintln!(
        "[{}] the storm: zone c Unknown {:.0}s after its first kill, both circuits ClusterStorm \
         {:.1}s after; a1 and b1 dead by the windows, no action {:.0}s past their deaths",
        env.name,
        storm_seen.duration_since(storm_killed).as_secs_f64(),
        opened.duration_since(storm_seen).as_secs_f64(),
        hold_until.duration_since(dead).as_secs_f64(),
    );

    // The storm passes: zone c comes back.
    for node in &storm {
        env.revive_node(node).await?;
    }
    for node in &storm {
        env.wait_node_ready(node, "True").await?;
    }
    let storm_over = Timestamp::now();
    let cooling =
        wait_circuit(env, &cool, "CoolingDown", CircuitState::CoolingDown, Duration::from_secs(15))
            .await?;
    let cool_until = cooling.circuit.and_then(|c| c.until).context("CoolingDown without until")?.0;
    let expected = storm_over + SignedDuration::from_secs(COOLDOWN);
    ensure!(
        (cool_until.duration_since(expected)).abs() <= SignedDuration::from_secs(3),
        "policy {cool} cools down until {cool_until}, not the end of the storm ({storm_over}) + \
         {COOLDOWN}s"
    );
    wait_circuit(env, &latched, "Latched", CircuitState::Latched, Duration::from_secs(15)).await?;
    wait_policy_event(env, &latched, "CircuitLatched").await?;
    wait_policy_event(env, &cool, "CircuitCoolingDown").await?;

    // The cool-down: nothing before its end, then b1's pod and b1.
    holds_for("no action during the cool-down", until(cool_until - TOLERANCE), || async {
        untouched(cluster, env, "on-a1", &on_a1, &a1).await?;
        untouched(cluster, env, "on-b1", &on_b1, &b1).await
    })
    .await?;
    wait_released(env, "on-b1", &on_b1, &b1, until(cool_until) + ACT_WITHIN).await?;
    let (b_deleted, b_cordoned) = acted_at(cluster, env, "on-b1", &b1).await?;
    for t in [b_deleted, b_cordoned] {
        ensure!(t >= cool_until - TOLERANCE, "policy {cool} acted at {t}, before {cool_until}");
    }
    wait_policy_event(env, &cool, "CircuitClosed").await?;

    // The latch: still nothing on a1, 20 s after the other policy acted.
    let b_acted = b_deleted.max(b_cordoned);
    holds_for(
        "the latch to hold",
        until(b_acted + SignedDuration::try_from(LATCH_HOLD)?),
        || async { untouched(cluster, env, "on-a1", &on_a1, &a1).await },
    )
    .await?;
    let status = env.policies().get(&latched).await?.status.unwrap_or_default();
    ensure!(
        status.circuit.as_ref().is_some_and(|c| c.state == CircuitState::Latched),
        "policy {latched} is no longer latched: {:?}",
        status.circuit
    );

    // The admin re-arms it: a1's pod and a1 at once.
    let rearmed = Timestamp::now();
    let patch =
        json!({ "metadata": { "annotations": { REARM: rearmed.as_second().to_string() } } });
    env.policies().patch(&latched, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_policy_event(env, &latched, "CircuitRearmed").await?;
    wait_released(env, "on-a1", &on_a1, &a1, ACT_WITHIN).await?;
    let (a_deleted, a_cordoned) = acted_at(cluster, env, "on-a1", &a1).await?;
    for t in [a_deleted, a_cordoned] {
        ensure!(t >= rearmed - TOLERANCE, "policy {latched} acted at {t}, before the re-arm");
    }
    // Without a cool-down the re-arm closes the circuit at once (its one Event: CircuitRearmed).
    let what = format!("policy {latched}: CircuitOpen=False WithinLimit after the re-arm");
    env.wait_named_policy(&latched, &what, Duration::from_secs(15), |s| {
        let c = circuit_condition(s)?;
        let closed = s.circuit.as_ref().is_none_or(|c| c.state == CircuitState::Closed);
        (c.status == "False" && c.reason == "WithinLimit" && closed).then_some(())
    })
    .await?;

    for node in [&a2, &b2, &env.healthy_node].into_iter().chain(&storm) {
        let writes = cluster.operator_node_writes(node)?;
        ensure!(writes.is_empty(), "the operator wrote to {node}, which stayed alive: {writes:?}");
    }
    ensure!(
        others_unhealthy(env, &prefix).await? == baseline,
        "other tests' nodes changed health: the cluster count is not this test's"
    );
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    let secs = |t: Timestamp, from: Timestamp| t.duration_since(from).as_secs_f64();
    eprintln!(
        "[{}] storm over at {storm_over}: {cool} cooled down until +{:.1}s and force-deleted \
         {:.2}s / cordoned {:.2}s after the end of its cool-down; {latched} held {:.0}s after \
         that, then force-deleted {:.2}s / cordoned {:.2}s after the re-arm",
        env.name,
        secs(cool_until, storm_over),
        secs(b_deleted, cool_until),
        secs(b_cordoned, cool_until),
        secs(rearmed, b_acted),
        secs(a_deleted, rearmed),
        secs(a_cordoned, rearmed),
    );
    // Leave no dead node behind.
    env.revive_node(&a1).await?;
    env.revive_node(&b1).await?;
    Ok(())
}
