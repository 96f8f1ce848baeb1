//! Issue 10: actions on a dead node itself (`nodeActions`): cordon, the out-of-service taint,
//! deleting the Node, and undoing what the operator did once the node is back.
//!
//! They run on the production-like control plane that no test stalls ([`prod_e2e!`]): PodGC on,
//! as in production, so the operator and PodGC are tested together (after the out-of-service
//! taint PodGC force-deletes the node's Terminating pods); the default node-monitor grace period
//! (a killed node turns Unknown about 50 s after its last heartbeat) and the kubelet's 40 s
//! Lease. Every test scopes its policy to its own zone and starts its own operator
//! (`--leader-elect=false`) before its node dies, and waits until that operator has seen the
//! node's Lease renewed, so the operator's own clock dates the death as the objects do.
//!
//! When each action happened is read from the audit log (the operator's PATCH or DELETE of the
//! Node, as the API server received it); that it did not happen earlier is also watched on the
//! Node itself, every 250 ms.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::fixtures::stateful_set;
use crate::fixtures::{renewed_since, secs, uid, until};
use crate::prod_e2e;
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::{TEST_LABEL, ZONE_LABEL, node_ready_status, pod_is_ready};
use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("na-thresholds", actions_come_at_their_thresholds_and_not_before),
        prod_e2e!("na-undo", our_cordon_and_taint_are_undone_when_the_node_returns),
        prod_e2e!("na-admin-uncordon", an_admins_uncordon_and_taint_are_respected),
        prod_e2e!("na-clock-skew", a_kubelet_clock_behind_ours_gets_no_node_action),
        prod_e2e!("na-dry-run", dry_run_records_node_actions_and_writes_nothing),
        prod_e2e!("na-flapping-node", a_flapping_node_gets_no_action),
    ]
}

pub(crate) const NOT_READY_FOR: i64 = 10;
/// The documented minimum.
pub(crate) const LEASE_STALE_FOR: i64 = 40;
/// How much earlier than our reading of the objects the operator's own clock may date a death
/// (the Ready condition's `lastTransitionTime` has whole seconds), and audit timestamps' rounding.
pub(crate) const TOLERANCE: SignedDuration = SignedDuration::from_secs(1);
/// How long after its threshold an action may come at the latest: the operator requeues at the
/// exact instant; this covers a loaded 2-core machine.
pub(crate) const ACT_WITHIN: Duration = Duration::from_secs(15);
/// The skewed kubelet's clock runs 5 minutes behind ours.
const SKEW: SignedDuration = SignedDuration::from_secs(-300);

pub(crate) const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
pub(crate) const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// A taint of the admin's own.
const MAINTENANCE: &str = "example.com/maintenance";
/// The operator's record of what it did to a node.
const RECORD: &str = "remediator.io/node-actions";

/// The policy of every test here: the short windows, this test's zone, room for its unhealthy
/// nodes, and `node_actions`.
fn policy_spec(env: &TestEnv, mode: &str, node_actions: Value) -> Value {
    json!({
        "mode": mode,
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "safety": { "maxUnhealthyNodes": 3 },
        "nodeActions": node_actions,
    })
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

pub(crate) fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

fn has_taint(node: &Node, key: &str, effect: &str) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    taints.is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == effect))
}

fn out_of_service(node: &Node) -> bool {
    has_taint(node, OUT_OF_SERVICE, "NoExecute")
}

/// The operator's record on the node (its annotation, parsed), if any.
fn record(node: &Node) -> Option<Result<Value>> {
    let text = node.metadata.annotations.as_ref()?.get(RECORD)?;
    Some(serde_json::from_str(text).with_context(|| format!("{RECORD} is not JSON: {text}")))
}

/// Checks the record names this test's policy and has each of `keys` (e.g. `cordoned`), not null.
fn check_record(env: &TestEnv, node: &Node, keys: &[&str]) -> Result<Value> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let record = record(node).with_context(|| format!("no {RECORD} annotation on {name}"))??;
    ensure!(
        record["policy"] == env.name.as_str(),
        "{RECORD} on {name} does not name the policy {}: {record}",
        env.name
    );
    for key in keys {
        ensure!(
            record.get(*key).is_some_and(|v| !v.is_null()),
            "{RECORD} on {name} lacks {key:?}: {record}"
        );
    }
    Ok(record)
}

/// The operator of this test, alone (no leader election), ready.
pub(crate) async fn start_operator(cluster: &Cluster, env: &TestEnv) -> Result<Operator> {
    Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await
}

/// Waits until the killed `node` is Unknown (with the default grace period, about 50 s after its
/// last heartbeat) and returns the instant the policy counts it dead.
async fn dead_instant(env: &TestEnv, node: &str) -> Result<Timestamp> {
    dead_instant_with(env, node, NOT_READY_FOR).await
}

/// Like [`dead_instant`], for a policy whose `notReadyFor` is `not_ready_for` seconds.
async fn dead_instant_with(env: &TestEnv, node: &str, not_ready_for: i64) -> Result<Timestamp> {
    wait_for(&format!("node {node} Ready=Unknown"), Duration::from_secs(150), || async move {
        let n = env.nodes().get_opt(node).await?;
        Ok(n.filter(|n| node_ready_status(n).as_deref() == Some("Unknown")).map(|_| ()))
    })
    .await?;
    let dead = env.dead_at(node, not_ready_for, LEASE_STALE_FOR).await?;
    eprintln!("[{}] {node} counts as dead from {dead}", env.name);
    Ok(dead)
}

/// Waits until the node satisfies `check`; returns it and the instant it was seen so.
pub(crate) async fn wait_node(
    env: &TestEnv,
    node: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Node) -> bool,
) -> Result<(Node, Timestamp)> {
    let check = &check;
    let n = wait_for(&format!("{what} on node {node}"), timeout, || async move {
        Ok(env.nodes().get_opt(node).await?.filter(|n| check(n)))
    })
    .await?;
    Ok((n, Timestamp::now()))
}

/// Waits until the Node object is gone; returns the instant it was seen gone.
async fn wait_node_gone(env: &TestEnv, node: &str, timeout: Duration) -> Result<Timestamp> {
    wait_for(&format!("node {node} to be deleted"), timeout, || async move {
        Ok(env.nodes().get_opt(node).await?.is_none().then_some(()))
    })
    .await?;
    Ok(Timestamp::now())
}

/// Checks every 250 ms until `t` that the node exists and `check` accepts it.
async fn node_holds_until(
    env: &TestEnv,
    node: &str,
    what: &str,
    t: Timestamp,
    check: impl Fn(&Node) -> Result<()>,
) -> Result<()> {
    let check = &check;
    holds_for(&format!("{what} on node {node} until {t}"), until(t), || async move {
        let n = env.nodes().get_opt(node).await?.with_context(|| format!("{node} is gone"))?;
        check(&n)
    })
    .await
}

/// The operator's writes to `node` received at or after `from`.
fn operator_writes_since(
    cluster: &Cluster,
    node: &str,
    from: Timestamp,
) -> Result<Vec<AuditEntry>> {
    Ok(cluster
        .operator_node_writes(node)?
        .into_iter()
        .filter(|w| w.received.is_none_or(|r| r >= from))
        .collect())
}

/// The operator's request (of `verb`) that made a change first seen at `seen`: the last one
/// received before it.
fn write_before(writes: &[AuditEntry], verb: &str, seen: Timestamp) -> Result<Timestamp> {
    writes
        .iter()
        .filter(|w| w.verb == verb)
        .filter_map(|w| w.received)
        .rfind(|r| *r <= seen)
        .with_context(|| format!("no {verb} of the operator before {seen} in {writes:?}"))
}

/// Waits until the node has an Event of `reason`.
async fn wait_node_event(env: &TestEnv, node: &str, reason: &str) -> Result<()> {
    wait_for(&format!("a {reason} Event on node {node}"), Duration::from_secs(15), || async {
        Ok((!env.events_about("Node", node, reason).await?.is_empty()).then_some(()))
    })
    .await
}

/// Waits until the policy status records `action` on `node` with `result`.
async fn wait_status_entry(env: &TestEnv, node: &str, action: &str, result: &str) -> Result<()> {
    let what = format!("a {action} {result} entry for {node} in the policy status");
    let entry = env
        .wait_policy(&what, Duration::from_secs(15), |s| {
            s.recent_actions
                .iter()
                .find(|a| {
                    a.action.as_str() == action && a.name == node && a.result.as_str() == result
                })
                .cloned()
        })
        .await?;
    ensure!(entry.node == node, "status entry for {action} names node {:?}: {entry:?}", entry.node);
    Ok(())
}

/// Checks `kube_remediator_actions_total` of this test's policy for `action`.
async fn check_metric(
    op: &Operator,
    env: &TestEnv,
    action: &str,
    mode: &str,
    result: &str,
) -> Result<()> {
    let labels =
        [("policy", env.name.as_str()), ("action", action), ("mode", mode), ("result", result)];
    let value = op.metric("kube_remediator_actions_total", &labels).await?;
    ensure!(value == Some(1.0), "actions_total{{{action},{mode},{result}}} = {value:?}");
    Ok(())
}

/// Creates node `<test>-<suffix>` and kills it once the operator (ready at `ready`) has seen its
/// Lease renewed. Returns its name.
async fn add_and_kill(env: &TestEnv, suffix: &str, ready: Timestamp) -> Result<String> {
    let node = env.add_node(suffix).await?;
    renewed_since(env, &node, ready).await?;
    env.kill_node(&node).await?;
    Ok(node)
}

/// Cordon, out-of-service taint and delete of a dead node that has the cloud provider's
/// shutdown taint, each at its threshold and not before; after the taint the node's pods are
/// gone (PodGC or the operator) and its StatefulSet pod comes back on the healthy node, once.
async fn actions_come_at_their_thresholds_and_not_before(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let victim = env.add_node("victim").await?;
    // web-0 lands on the victim: the healthy node is cordoned while it is scheduled.
    env.set_unschedulable(&env.healthy_node, true).await?;
    let sts = stateful_set("web", 1, json!({ ZONE_LABEL: env.zone }))?;
    env.api::<StatefulSet>().create(&PostParams::default(), &sts).await?;
    let web = env.wait_pods_ready("app=web", 1).await?.remove(0);
    env.set_unschedulable(&env.healthy_node, false).await?;
    ensure!(node_of(&web) == Some(victim.as_str()), "web-0 is not on {victim}");
    let old_uid = uid(&web);
    env.create_bound_pod("bare", &victim).await?;
    env.wait_pods_ready("app=bare", 1).await?;

    env.create_policy(policy_spec(
        env,
        "Enforce",
        json!({
            "cordonAfter": "10s",
            "outOfServiceTaintAfter": "20s",
            "deleteNodeAfter": "60s",
            "undoAfter": "10s",
        }),
    ))
    .await?;
    let op = start_operator(cluster, env).await?;
    renewed_since(env, &victim, Timestamp::now()).await?;
    env.kill_node(&victim).await?;
    // The cloud provider sees the machine off: fencing evidence for the out-of-service taint.
    env.add_taint(&victim, SHUTDOWN, None, "NoSchedule").await?;
    let dead = dead_instant(env, &victim).await?;
    let (cordon_at, taint_at, delete_at) = (dead + secs(10), dead + secs(20), dead + secs(60));

    node_holds_until(env, &victim, "no cordon, no taint yet", cordon_at - TOLERANCE, |n| {
        ensure!(!cordoned(n) && !out_of_service(n), "acted before the cordon threshold");
        let writes = cluster.operator_node_writes(&victim)?;
        ensure!(writes.is_empty(), "the operator wrote to {victim} early: {writes:?}");
        Ok(())
    })
    .await?;
    let (_, cordon_seen) =
        wait_node(env, &victim, "our cordon", until(cordon_at) + ACT_WITHIN, cordoned).await?;
    node_holds_until(env, &victim, "no taint yet", taint_at - TOLERANCE, |n| {
        ensure!(!out_of_service(n), "tainted before the taint threshold");
        Ok(())
    })
    .await?;
    let (tainted, taint_seen) =
        wait_node(env, &victim, "our out-of-service taint", until(taint_at) + ACT_WITHIN, |n| {
            out_of_service(n)
        })
        .await?;
    let taint = tainted
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .and_then(|ts| ts.iter().find(|t| t.key == OUT_OF_SERVICE))
        .cloned()
        .context("no out-of-service taint")?;
    ensure!(taint.value.as_deref() == Some("nodeshutdown"), "unexpected taint {taint:?}");
    ensure!(cordoned(&tainted), "the cordon is gone");
    check_record(env, &tainted, &["cordoned", "tainted"])?;

    // After the taint: every pod of the node goes (PodGC or us), and web-0 comes back on the
    // healthy node.
    let on_victim = ListParams::default().fields(&format!("spec.nodeName={victim}"));
    let on_victim = &on_victim;
    wait_for("the victim's pods to be gone", Duration::from_secs(60), || async move {
        Ok(env.pods().list(on_victim).await?.items.is_empty().then_some(()))
    })
    .await?;
    let pods_gone = Timestamp::now();
    let old_uid = &old_uid;
    let replacement = wait_for("web-0 to run again", Duration::from_secs(60), || async move {
        let p = env.pods().get_opt("web-0").await?;
        Ok(p.filter(|p| uid(p) != *old_uid && pod_is_ready(p)))
    })
    .await?;
    let replaced = Timestamp::now();
    ensure!(
        node_of(&replacement) == Some(env.healthy_node.as_str()),
        "web-0 came back on {:?}, not on the healthy node",
        node_of(&replacement)
    );
    let new_uid = uid(&replacement);
    let new_uid = &new_uid;
    let replacement_stays = || async move {
        let p = env.pods().get_opt("web-0").await?.context("web-0 vanished")?;
        ensure!(
            uid(&p) == *new_uid && p.metadata.deletion_timestamp.is_none(),
            "the new web-0 ({new_uid}) was deleted or replaced"
        );
        Ok(())
    };

    holds_for("the node to stay and web-0 to keep running", until(delete_at - TOLERANCE), || {
        let stays = replacement_stays();
        let victim = &victim;
        async move {
            env.nodes().get_opt(victim).await?.context("deleted before its threshold")?;
            stays.await
        }
    })
    .await?;
    let delete_seen = wait_node_gone(env, &victim, until(delete_at) + ACT_WITHIN).await?;
    holds_for("the new web-0 to be left alone", Duration::from_secs(5), replacement_stays).await?;

    // The audit log: when each request came, and nothing else.
    let writes = cluster.operator_node_writes(&victim)?;
    ensure!(
        writes.iter().all(|w| w.verb == "patch" || w.verb == "delete"),
        "unexpected writes of the operator to {victim}: {writes:?}"
    );
    let cordoned_at = write_before(&writes, "patch", cordon_seen)?;
    let tainted_at = write_before(&writes, "patch", taint_seen)?;
    let deletes: Vec<_> = writes.iter().filter(|w| w.verb == "delete").collect();
    ensure!(deletes.len() == 1, "expected one DELETE of {victim}: {deletes:?}");
    let deleted_at = deletes[0].received.context("audit entry without a time")?;
    ensure!(deleted_at <= delete_seen, "the DELETE came after the node was gone?");
    let first = writes.first().and_then(|w| w.received).context("no timed write")?;
    ensure!(first >= cordon_at - TOLERANCE, "first write at {first}, before the cordon threshold");
    ensure!(cordoned_at >= cordon_at - TOLERANCE, "cordoned at {cordoned_at}, before {cordon_at}");
    ensure!(tainted_at >= taint_at - TOLERANCE, "tainted at {tainted_at}, before {taint_at}");
    ensure!(deleted_at >= delete_at - TOLERANCE, "deleted at {deleted_at}, before {delete_at}");
    let late_deletes: Vec<_> = cluster
        .operator_pod_deletes(&env.namespace, "web-0")?
        .into_iter()
        .filter(|d| d.received.is_none_or(|r| r >= replaced))
        .collect();
    ensure!(late_deletes.is_empty(), "the operator deleted the new web-0: {late_deletes:?}");
    let delay = |t: Timestamp, threshold: Timestamp| t.duration_since(threshold).as_secs_f64();
    eprintln!(
        "[{}] threshold -> action: cordon {:.2}s, out-of-service taint {:.2}s, delete {:.2}s; \
         the node's pods gone {:.1}s after the taint, web-0 running again {:.1}s after it",
        env.name,
        delay(cordoned_at, cordon_at),
        delay(tainted_at, taint_at),
        delay(deleted_at, delete_at),
        delay(pods_gone, tainted_at),
        delay(replaced, tainted_at),
    );

    for reason in ["Cordoned", "TaintedOutOfService", "DeletedNode"] {
        wait_node_event(env, &victim, reason).await?;
    }
    for action in ["Cordon", "OutOfServiceTaint", "DeleteNode"] {
        wait_status_entry(env, &victim, action, "Done").await?;
        check_metric(&op, env, action, "Enforce", "Done").await?;
    }
    Ok(())
}

/// A node cordoned and tainted by us (assumed off) comes back: once Ready for `undoAfter`, and
/// not before, our cordon, our taint and the record go; the admin's own taint stays.
async fn our_cordon_and_taint_are_undone_when_the_node_returns(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    env.create_policy(policy_spec(
        env,
        "Enforce",
        json!({
            "cordonAfter": "10s",
            "outOfServiceTaintAfter": "10s",
            "assumeOffAfter": "10s",
            "undoAfter": "10s",
        }),
    ))
    .await?;
    let op = start_operator(cluster, env).await?;
    let victim = add_and_kill(env, "victim", Timestamp::now()).await?;
    let dead = dead_instant(env, &victim).await?;
    let (acted, _) = wait_node(
        env,
        &victim,
        "our cordon, taint and record",
        until(dead + secs(10)) + ACT_WITHIN,
        |n| cordoned(n) && out_of_service(n) && record(n).is_some(),
    )
    .await?;
    check_record(env, &acted, &["cordoned", "tainted"])?;
    // The admin's own taint, added during the outage.
    env.add_taint(&victim, MAINTENANCE, None, "NoSchedule").await?;

    let revived = Timestamp::now();
    env.revive_node(&victim).await?;
    let ready = env.wait_node_ready(&victim, "True").await?;
    let transition = ready
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .map_or(revived, |t| t.0);
    // The node is Ready from neither before the revive nor before its condition says.
    let undo_at = revived.max(transition) + secs(10);

    node_holds_until(env, &victim, "our cordon and taint to stay", undo_at - TOLERANCE, |n| {
        ensure!(cordoned(n) && out_of_service(n), "undone before undoAfter");
        ensure!(record(n).is_some(), "the record went before undoAfter");
        ensure!(has_taint(n, MAINTENANCE, "NoSchedule"), "the admin's taint is gone");
        Ok(())
    })
    .await?;
    let (undone, undo_seen) =
        wait_node(env, &victim, "the undo", until(undo_at) + ACT_WITHIN, |n| {
            !cordoned(n) && !out_of_service(n) && record(n).is_none()
        })
        .await?;
    ensure!(has_taint(&undone, MAINTENANCE, "NoSchedule"), "the undo removed the admin's taint");
    node_holds_until(env, &victim, "the admin's taint to stay", Timestamp::now() + secs(5), |n| {
        ensure!(has_taint(n, MAINTENANCE, "NoSchedule"), "the admin's taint was removed");
        ensure!(!cordoned(n) && !out_of_service(n), "cordoned or tainted again");
        Ok(())
    })
    .await?;

    let writes = operator_writes_since(cluster, &victim, revived)?;
    let first = writes.first().and_then(|w| w.received).context("no write since the revive")?;
    ensure!(
        first >= undo_at - TOLERANCE,
        "the operator wrote to {victim} at {first}, before {undo_at}"
    );
    let undone_at = write_before(&writes, "patch", undo_seen)?;
    eprintln!(
        "[{}] undoAfter -> undo {:.2}s",
        env.name,
        undone_at.duration_since(undo_at).as_secs_f64()
    );
    wait_node_event(env, &victim, "UndidNodeActions").await?;
    wait_status_entry(env, &victim, "UndoNodeActions", "Done").await?;
    check_metric(&op, env, "UndoNodeActions", "Enforce", "Done").await?;
    Ok(())
}

/// An admin uncordons a node we cordoned, during the outage: it is not cordoned again. An
/// admin's out-of-service taint on another dead node (the policy adds none) survives our undo of
/// our cordon there when that node returns.
async fn an_admins_uncordon_and_taint_are_respected(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    env.create_policy(policy_spec(
        env,
        "Enforce",
        json!({ "cordonAfter": "10s", "undoAfter": "10s" }),
    ))
    .await?;
    // A second healthy node: two of four unhealthy keeps the zone below the node lifecycle
    // controller's partial disruption.
    env.add_node("healthy-2").await?;
    let _op = start_operator(cluster, env).await?;
    let ready = Timestamp::now();
    let (a, b) = tokio::try_join!(add_and_kill(env, "a", ready), add_and_kill(env, "b", ready))?;
    // The admin declares b off.
    env.add_taint(&b, OUT_OF_SERVICE, Some("nodeshutdown"), "NoExecute").await?;
    let (dead_a, dead_b) = tokio::try_join!(dead_instant(env, &a), dead_instant(env, &b))?;

    let (_, cordon_seen) =
        wait_node(env, &a, "our cordon", until(dead_a + secs(10)) + ACT_WITHIN, cordoned).await?;
    let uncordoned = Timestamp::now();
    env.set_unschedulable(&a, false).await?;
    eprintln!(
        "[{}] {a} cordoned (seen {:.1}s after its threshold), uncordoned by the admin",
        env.name,
        cordon_seen.duration_since(dead_a + secs(10)).as_secs_f64()
    );

    let a_respected =
        holds_for("the admin's uncordon to be respected", Duration::from_secs(20), || {
            let a = &a;
            async move {
                let n = env.nodes().get_opt(a).await?.with_context(|| format!("{a} is gone"))?;
                ensure!(!cordoned(&n), "{a} was cordoned again");
                let writes = operator_writes_since(cluster, a, uncordoned)?;
                ensure!(
                    writes.is_empty(),
                    "the operator wrote to {a} after the uncordon: {writes:?}"
                );
                Ok(())
            }
        });
    let b_taint_kept = async {
        let (cordoned_b, _) =
            wait_node(env, &b, "our cordon", until(dead_b + secs(10)) + ACT_WITHIN, |n| {
                cordoned(n) && record(n).is_some()
            })
            .await?;
        let rec = check_record(env, &cordoned_b, &["cordoned"])?;
        ensure!(
            rec.get("tainted").is_none_or(Value::is_null),
            "the record claims the admin's taint: {rec}"
        );
        env.revive_node(&b).await?;
        env.wait_node_ready(&b, "True").await?;
        let (undone, _) =
            wait_node(env, &b, "the undo of our cordon", Duration::from_secs(40), |n| {
                !cordoned(n) && record(n).is_none()
            })
            .await?;
        ensure!(out_of_service(&undone), "the undo removed the admin's out-of-service taint");
        node_holds_until(env, &b, "the admin's taint to stay", Timestamp::now() + secs(5), |n| {
            ensure!(out_of_service(n), "the admin's out-of-service taint was removed");
            Ok(())
        })
        .await
    };
    tokio::try_join!(a_respected, b_taint_kept)?;
    let writes = operator_writes_since(cluster, &a, uncordoned)?;
    ensure!(writes.is_empty(), "the operator wrote to {a} after the uncordon: {writes:?}");
    // Leave no dead node behind on the shared control plane.
    env.revive_node(&a).await?;
    Ok(())
}

/// A live `Ready=False` node whose kubelet clock runs 5 minutes behind: its Lease's `renewTime`
/// always looks old but changes every 2 s. It is never cordoned, tainted or deleted for twice
/// the policy's windows; a really dead node of the same policy meanwhile is (deleted).
async fn a_kubelet_clock_behind_ours_gets_no_node_action(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (skewed, kubelet) = env.add_skewed_node("skewed", "False", SKEW).await?;
    env.create_policy(policy_spec(
        env,
        "Enforce",
        json!({
            "cordonAfter": "10s",
            "outOfServiceTaintAfter": "20s",
            "assumeOffAfter": "10s",
            "deleteNodeAfter": "20s",
            "undoAfter": "10s",
        }),
    ))
    .await?;
    let _op = start_operator(cluster, env).await?;
    let started = Timestamp::now();
    let window = Duration::from_secs(2 * (LEASE_STALE_FOR as u64 + 20));
    let control = add_and_kill(env, "control", started).await?;

    let skewed_alone = holds_for("the skewed node to be left alone", window, || {
        let skewed = &skewed;
        async move {
            let n = env.nodes().get_opt(skewed).await?.context("the skewed node was deleted")?;
            ensure!(
                !cordoned(&n) && !out_of_service(&n),
                "the skewed node was cordoned or tainted"
            );
            let writes = cluster.operator_node_writes(skewed)?;
            ensure!(writes.is_empty(), "the operator wrote to {skewed}: {writes:?}");
            Ok(())
        }
    });
    // The same policy does act on a really dead node in that time.
    let control_deleted = async {
        let gone = wait_node_gone(env, &control, window).await?;
        eprintln!(
            "[{}] the dead control node was deleted {:.1}s after the operator started",
            env.name,
            gone.duration_since(started).as_secs_f64()
        );
        Ok(())
    };
    tokio::try_join!(skewed_alone, control_deleted)?;
    let writes = cluster.operator_node_writes(&skewed)?;
    ensure!(writes.is_empty(), "the operator wrote to {skewed}: {writes:?}");
    let deletes = cluster.operator_node_writes(&control)?;
    ensure!(
        deletes.iter().any(|w| w.verb == "delete"),
        "{control} is gone, but not by a DELETE of the operator: {deletes:?}"
    );
    // Leave no dead node behind: without its heartbeat the skewed node would die.
    drop(kubelet);
    env.nodes().delete(&skewed, &DeleteParams::default()).await?;
    Ok(())
}

/// DryRun: the would-be cordon is recorded (Event, status, metric) at its threshold, and the
/// operator writes nothing to any node.
async fn dry_run_records_node_actions_and_writes_nothing(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    env.create_policy(policy_spec(env, "DryRun", json!({ "cordonAfter": "10s" }))).await?;
    let op = start_operator(cluster, env).await?;
    let victim = add_and_kill(env, "victim", Timestamp::now()).await?;
    let dead = dead_instant(env, &victim).await?;
    let cordon_at = dead + secs(10);

    node_holds_until(env, &victim, "no cordon", cordon_at - TOLERANCE, |n| {
        ensure!(!cordoned(n), "DryRun cordoned the node");
        Ok(())
    })
    .await?;
    wait_for("a WouldCordon Event on the node", until(cordon_at) + ACT_WITHIN, || async {
        Ok((!env.events_about("Node", &victim, "WouldCordon").await?.is_empty()).then_some(()))
    })
    .await?;
    let entry = env
        .wait_policy("a WouldAct Cordon entry in the status", Duration::from_secs(15), |s| {
            s.recent_actions
                .iter()
                .find(|a| a.action.as_str() == "Cordon" && a.name == victim)
                .cloned()
        })
        .await?;
    ensure!(
        entry.result.as_str() == "WouldAct" && entry.mode.as_str() == "DryRun",
        "unexpected status entry {entry:?}"
    );
    // Status times have whole seconds.
    ensure!(
        entry.time.0.as_second() >= (cordon_at - TOLERANCE).as_second(),
        "recorded at {} before the threshold {cordon_at}",
        entry.time.0
    );
    eprintln!(
        "[{}] threshold -> WouldCordon record {:.0}s (whole seconds)",
        env.name,
        entry.time.0.duration_since(cordon_at).as_secs_f64()
    );

    node_holds_until(env, &victim, "no cordon", Timestamp::now() + secs(5), |n| {
        ensure!(!cordoned(n), "DryRun cordoned the node");
        Ok(())
    })
    .await?;
    let prefix = format!("{}-", env.name);
    let writes: Vec<_> = cluster
        .audit_writes()?
        .into_iter()
        .filter(|w| w.user == OPERATOR_USER && w.resource == "nodes")
        .filter(|w| w.name.as_deref().is_some_and(|n| n.starts_with(&prefix)))
        .collect();
    ensure!(writes.is_empty(), "DryRun wrote to nodes: {writes:?}");
    // One would-be cordon is recorded once, not at every reconcile.
    let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
    let entries = status
        .recent_actions
        .iter()
        .filter(|a| a.action.as_str() == "Cordon" && a.name == victim)
        .count();
    ensure!(entries == 1, "{entries} status entries for the one would-be cordon of {victim}");
    check_metric(&op, env, "Cordon", "DryRun", "WouldAct").await?;
    // Leave no dead node behind on the shared control plane.
    env.revive_node(&victim).await?;
    Ok(())
}

/// The flapping node's `notReadyFor`: longer than any of its dead phases.
const FLAP_NOT_READY_FOR: i64 = 20;
/// Dead, then alive, this many times.
const FLAPS: u32 = 10;
/// Dead, then alive, this many times more with the Lease silent throughout: the Lease is stale
/// (40 s) from the third flap on, which leaves at least two full flaps where only `notReadyFor`
/// restarting at every flap keeps the node alive.
const SILENT_FLAPS: u32 = 6;
/// How long each dead phase and each alive phase lasts.
const FLAP_PHASE: Duration = Duration::from_secs(8);
/// A finalizer of the test's own. kwok finishes a Terminating pod of a node it manages (a DELETE
/// with grace period 0) as soon as it sees it, so without it no pod stays Terminating on a node
/// that is alive half the time; with it, the pod stays Terminating, due for a force delete
/// (grace period over, `delayAfterGrace` 0 s) whenever its node counts as dead.
const HOLD: &str = "e2e.remediator.io/hold";

/// The Event reasons of node actions (`src/writer/node.rs`): done, DryRun, skipped, failed.
fn node_action_reasons() -> Vec<String> {
    let mut reasons: Vec<String> = [
        "Cordoned",
        "WouldCordon",
        "TaintedOutOfService",
        "WouldTaintOutOfService",
        "DeletedNode",
        "WouldDeleteNode",
        "UndidNodeActions",
        "WouldUndoNodeActions",
    ]
    .map(String::from)
    .to_vec();
    for kind in ["Cordon", "OutOfServiceTaint", "DeleteNode", "UndoNodeActions"] {
        reasons.extend([format!("{kind}Skipped"), format!("{kind}Failed")]);
    }
    reasons
}

/// Events about the Node `node` that record a node action: reported by kube-remediator, or with
/// the reason of one.
async fn node_action_events(env: &TestEnv, node: &str) -> Result<Vec<Event>> {
    let reasons = node_action_reasons();
    let events: Api<Event> = Api::all(env.client.clone());
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            let r = e.regarding.as_ref();
            r.and_then(|r| r.kind.as_deref()) == Some("Node")
                && r.and_then(|r| r.name.as_deref()) == Some(node)
        })
        .filter(|e| {
            e.reporting_controller.as_deref() == Some("kube-remediator")
                || e.reason.as_ref().is_some_and(|r| reasons.contains(r))
        })
        .collect())
}

/// Sets the node's Ready condition to Unknown as kube-controller-manager's node lifecycle
/// controller does when a kubelet stops posting its status (reason `NodeStatusUnknown`, a new
/// `lastTransitionTime`, the last heartbeat kept), but at once instead of after its grace
/// period.
async fn mark_ready_unknown(env: &TestEnv, node: &str) -> Result<()> {
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let status = json!({ "status": { "conditions": [{
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastTransitionTime": now,
    }] } });
    env.nodes()
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .with_context(|| format!("setting Ready=Unknown on {node}"))?;
    Ok(())
}

/// Creates the bare pod `name` on `node` with the test's [`HOLD`] finalizer, waits until it
/// runs, deletes it with a 1 s grace period and waits until it is Terminating.
async fn held_terminating_pod(env: &TestEnv, name: &str, node: &str) -> Result<Pod> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "app": name, TEST_LABEL: env.name },
            "finalizers": [HOLD],
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    env.wait_pods_ready(&format!("app={name}"), 1).await?;
    env.delete_gracefully(name, 1).await
}

/// Sets the node's Ready condition to True with a fresh heartbeat, as a kubelet posting its
/// status does.
async fn mark_ready_true(env: &TestEnv, node: &str) -> Result<()> {
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let status = json!({ "status": { "conditions": [{
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }] } });
    env.nodes()
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .with_context(|| format!("setting Ready=True on {node}"))?;
    Ok(())
}

/// Removes the [`HOLD`] finalizer, so the pod can go (if it is still there).
async fn release_hold(env: &TestEnv, name: &str) -> Result<()> {
    if env.pods().get_opt(name).await?.is_none() {
        return Ok(());
    }
    let patch = json!({ "metadata": { "finalizers": null } });
    env.pods().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// What the test saw of the flapping node's kubelet.
#[derive(Default)]
struct FlapLog {
    /// Every distinct Lease `renewTime` seen, in order.
    renewals: Vec<Timestamp>,
    /// The longest stretch from our `Ready=Unknown` to `Ready=True` seen again.
    longest_not_ready: Duration,
    /// The longest time from a revive to `Ready=True` seen.
    slowest_revive: Duration,
}

impl FlapLog {
    fn renewed(&mut self, renewed: Option<Timestamp>) {
        if let Some(r) = renewed
            && self.renewals.last() != Some(&r)
        {
            self.renewals.push(r);
        }
    }

    /// The longest time between two renewals seen (renewTime, kwok's clock, which is ours).
    fn longest_lease_gap(&self) -> Duration {
        let gaps = self.renewals.windows(2).map(|w| w[1].duration_since(w[0]));
        gaps.max().and_then(|g| Duration::try_from(g).ok()).unwrap_or_default()
    }
}

/// Fails if the operator touched the flapping node or its pods: a write of its user to the Node
/// or any write to either pod (audit log), or the node cordoned, tainted out of service or
/// carrying the operator's record. Returns the node and its Lease's `renewTime`.
async fn flapper_untouched(
    cluster: &Cluster,
    env: &TestEnv,
    node: &str,
) -> Result<(Node, Option<Timestamp>)> {
    let writes = cluster.operator_node_writes(node)?;
    ensure!(writes.is_empty(), "the operator wrote to {node}: {writes:?}");
    let pod_writes: Vec<_> = cluster
        .audit_writes()?
        .into_iter()
        .filter(|e| {
            e.user == OPERATOR_USER
                && e.resource == "pods"
                && e.namespace.as_deref() == Some(env.namespace.as_str())
                && matches!(e.name.as_deref(), Some("held" | "running"))
        })
        .collect();
    ensure!(pod_writes.is_empty(), "the operator wrote to a pod: {pod_writes:?}");
    let n = env.nodes().get_opt(node).await?.with_context(|| format!("{node} is gone"))?;
    ensure!(!cordoned(&n), "{node} was cordoned");
    ensure!(!out_of_service(&n), "{node} got the out-of-service taint");
    ensure!(record(&n).is_none(), "{node} carries {RECORD}");
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    let renewed = leases.get_opt(node).await?.and_then(|l| l.spec).and_then(|s| s.renew_time);
    Ok((n, renewed.map(|t| t.0)))
}

/// Checks every 250 ms for `phase` that the flapping node is untouched
/// ([`flapper_untouched`]) and its Ready condition is `True` (`ready`) or not (`!ready`),
/// recording its Lease renewals in `log`; then that no node-action Event names it.
async fn flap_phase(
    cluster: &Cluster,
    env: &TestEnv,
    node: &str,
    phase: Duration,
    ready: bool,
    log: &std::sync::Mutex<FlapLog>,
) -> Result<()> {
    let what = format!("{node} untouched while {}", if ready { "alive" } else { "dead" });
    holds_for(&what, phase, || async {
        let (n, renewed) = flapper_untouched(cluster, env, node).await?;
        log.lock().unwrap_or_else(|e| e.into_inner()).renewed(renewed);
        let status = node_ready_status(&n);
        if ready {
            ensure!(status.as_deref() == Some("True"), "{node} left Ready: {status:?}");
        } else {
            // kwok reports Ready=True again only for a node it manages.
            ensure!(
                status.as_deref() != Some("True"),
                "{node} turned Ready while dead: kwok still managed it"
            );
        }
        Ok(())
    })
    .await?;
    let events = node_action_events(env, node).await?;
    ensure!(events.is_empty(), "node-action Events on {node}: {events:?}");
    Ok(())
}

/// How the alive phase of a flap comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Revival {
    /// kwok manages the node again: it renews the Lease at once and reports `Ready=True`.
    Kwok,
    /// kwok stays off, so the Lease stays silent; the test posts `Ready=True` itself, as a
    /// kubelet whose status updates get through while its Lease renewals do not.
    StatusOnly,
}

/// Flaps `node` `flaps` times: dead for [`FLAP_PHASE`] (killed, `Ready=Unknown` set at once),
/// then alive for [`FLAP_PHASE`] from `Ready=True` seen, revived as `revival` says. Checks the
/// node is untouched throughout ([`flap_phase`]) and records what it saw in `log`.
async fn flap(
    cluster: &Cluster,
    env: &TestEnv,
    node: &str,
    flaps: u32,
    revival: Revival,
    log: &std::sync::Mutex<FlapLog>,
) -> Result<()> {
    for n in 1..=flaps {
        let died = Instant::now();
        env.kill_node(node).await?;
        mark_ready_unknown(env, node).await?;
        let unknown = Instant::now();
        flap_phase(cluster, env, node, FLAP_PHASE.saturating_sub(died.elapsed()), false, log)
            .await
            .with_context(|| format!("dead phase {n} ({revival:?})"))?;
        let revived = Instant::now();
        match revival {
            Revival::Kwok => env.revive_node(node).await?,
            Revival::StatusOnly => mark_ready_true(env, node).await?,
        }
        env.wait_node_ready(node, "True").await?;
        {
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            log.longest_not_ready = log.longest_not_ready.max(unknown.elapsed());
            log.slowest_revive = log.slowest_revive.max(revived.elapsed());
        }
        flap_phase(cluster, env, node, FLAP_PHASE, true, log)
            .await
            .with_context(|| format!("alive phase {n} ({revival:?})"))?;
    }
    // The flaps were the ones under test: no stretch of Ready not True came near 20 s.
    let longest = log.lock().unwrap_or_else(|e| e.into_inner()).longest_not_ready;
    ensure!(
        longest < Duration::from_secs(FLAP_NOT_READY_FOR as u64),
        "a dead phase lasted {longest:?} (Ready not True): not the flap under test"
    );
    Ok(())
}

/// The issue: "A node dead 8 s / alive 8 s ten times with a 20 s threshold: no action, nothing
/// left behind." An Enforce policy (`notReadyFor` 20 s, `leaseStaleFor` 40 s, the documented
/// minimum) whose node actions all fire the instant a node counts as dead (cordon, and the
/// out-of-service taint with the node assumed off at once), with a pod held Terminating (a
/// finalizer of the test's, due for a force delete) and a running pod on the node, and the
/// operator watching before the first flap.
///
/// Each dead phase kills the node (kwok stops its Lease and its status) and sets its Ready
/// condition to Unknown as kube-controller-manager would, since with its 50 s grace period a node
/// dead for 8 s never turns Unknown on its own. Ten flaps revive it through kwok, which renews
/// its Lease at once: the Lease alone then keeps the node alive (never 40 s old), so six more
/// flaps keep kwok off and post `Ready=True` in the test's name: the Lease goes stale, and only
/// `notReadyFor` restarting at every flap stands between the node and a death (an operator that
/// summed the not-Ready stretches would act on the third of them).
///
/// Throughout (every 250 ms) and afterwards: no write of the operator to the Node and no DELETE
/// of either pod (audit log), no cordon, no out-of-service taint, no `remediator.io/node-actions`
/// record, no node-action Event and no status entry for the node. Then the control: the node,
/// left silent, is cordoned and tainted and its held pod released (its removable finalizer
/// removed, then the pod force-deleted) once it counts as dead
/// (Ready not True for 20 s after kube-controller-manager marks it Unknown, Lease 40 s old), not
/// before, so the harness and the policy do act.
async fn a_flapping_node_gets_no_action(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    let node = env.add_node("flapper").await?;
    env.create_bound_pod("running", &node).await?;
    env.wait_pods_ready("app=running", 1).await?;
    let held = held_terminating_pod(env, "held", &node).await?;
    let held_uid = uid(&held);
    env.create_policy(json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": {
            "notReadyFor": format!("{FLAP_NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": 3 },
        "nodeActions": {
            "cordonAfter": "0s",
            "outOfServiceTaintAfter": "0s",
            "assumeOffAfter": "0s",
        },
        // A finalizer holds the pod: only a removable one lets the operator release it, removed
        // first, then the pod force-deleted. Not while the node is alive: liveNodeStuck (which
        // would remove it from a pod stuck on a live node) is off, this test is about deaths.
        "finalizers": { "removable": [HOLD], "removeAfter": "0s" },
        "liveNodeStuck": { "enabled": false },
    }))
    .await?;
    let mut op = start_operator(cluster, env).await?;
    renewed_since(env, &node, Timestamp::now()).await?;

    let kwok_log = std::sync::Mutex::new(FlapLog::default());
    let flapping = Instant::now();
    flap(cluster, env, &node, FLAPS, Revival::Kwok, &kwok_log).await?;
    let flapped_for = flapping.elapsed();
    let silent_log = std::sync::Mutex::new(FlapLog::default());
    let (silent, silent_from) = (Instant::now(), Timestamp::now());
    flap(cluster, env, &node, SILENT_FLAPS, Revival::StatusOnly, &silent_log).await?;
    let silent_for = silent.elapsed();

    let kwok_log = kwok_log.into_inner().unwrap_or_else(|e| e.into_inner());
    let silent_log = silent_log.into_inner().unwrap_or_else(|e| e.into_inner());
    // The silent flaps were: no renewal after the first kill (but one in flight), and the Lease
    // stale (40 s) for two flaps or more.
    let last_renewal = silent_log
        .renewals
        .last()
        .or(kwok_log.renewals.last())
        .copied()
        .context("no Lease renewal seen")?;
    ensure!(
        last_renewal <= silent_from + TOLERANCE,
        "the Lease was renewed at {last_renewal}, during the silent flaps (from {silent_from})"
    );
    let stale_for = Timestamp::now().duration_since(last_renewal) - secs(LEASE_STALE_FOR);
    ensure!(
        stale_for >= SignedDuration::try_from(FLAP_PHASE * 4)?,
        "the Lease was stale for only {stale_for:?} of the silent flaps"
    );

    flapper_untouched(cluster, env, &node).await?;
    let held_now = env.pods().get_opt("held").await?;
    ensure!(held_now.as_ref().map(uid) == Some(held_uid.clone()), "the held pod is gone");
    ensure!(env.pods().get_opt("running").await?.is_some(), "the running pod is gone");
    let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
    let entries: Vec<_> = status.recent_actions.iter().filter(|a| a.node == node).collect();
    ensure!(entries.is_empty(), "the policy status records actions on {node}: {entries:?}");
    if let Some(exit) = op.exited()? {
        anyhow::bail!("the operator exited ({exit}) while the node flapped");
    }
    eprintln!(
        "[{}] {FLAPS} flaps through kwok in {:.0}s: Ready not True at most {:.1}s per dead phase, \
         Ready=True at most {:.1}s after a revive, {} Lease renewals at most {:.1}s apart; \
         {SILENT_FLAPS} flaps with the Lease silent in {:.0}s (Ready not True at most {:.1}s), \
         the Lease stale (40 s) for the last {:.0}s of them; no write, no Event, no status entry",
        env.name,
        flapped_for.as_secs_f64(),
        kwok_log.longest_not_ready.as_secs_f64(),
        kwok_log.slowest_revive.as_secs_f64(),
        kwok_log.renewals.len(),
        kwok_log.longest_lease_gap().as_secs_f64(),
        silent_for.as_secs_f64(),
        silent_log.longest_not_ready.as_secs_f64(),
        stale_for.as_secs_f64(),
    );

    // The control: the node stays silent after its last Ready=True; kube-controller-manager
    // marks it Unknown after its grace period.
    let last_heartbeat = Timestamp::now() - SignedDuration::try_from(FLAP_PHASE)?;
    let dead = dead_instant_with(env, &node, FLAP_NOT_READY_FOR).await?;
    node_holds_until(env, &node, "no node action before the death", dead - TOLERANCE, |n| {
        ensure!(!cordoned(n) && !out_of_service(n), "acted before the node counted as dead");
        let writes = cluster.operator_node_writes(&node)?;
        ensure!(writes.is_empty(), "the operator wrote to {node} early: {writes:?}");
        Ok(())
    })
    .await?;
    let (acted, seen) = wait_node(
        env,
        &node,
        "our cordon and out-of-service taint",
        until(dead) + ACT_WITHIN,
        |n| cordoned(n) && out_of_service(n),
    )
    .await?;
    check_record(env, &acted, &["cordoned", "tainted"])?;
    let writes = cluster.operator_node_writes(&node)?;
    let first = writes.first().and_then(|w| w.received).context("no timed write")?;
    ensure!(first >= dead - TOLERANCE, "first write at {first}, before the death at {dead}");
    let acted_at = write_before(&writes, "patch", seen)?;
    // Its removable finalizer removed, the held pod goes: force-deleted by us or by PodGC
    // (the out-of-service taint), whichever is first.
    let deleted = wait_for("the operator's release of the held pod", ACT_WITHIN, || async {
        let writes = cluster.audit_writes()?;
        Ok(writes
            .into_iter()
            .filter(|e| e.user == OPERATOR_USER && e.resource == "pods")
            .filter(|e| e.namespace.as_deref() == Some(env.namespace.as_str()))
            .find(|e| e.name.as_deref() == Some("held"))
            .and_then(|e| e.received))
    })
    .await?;
    ensure!(deleted >= dead - TOLERANCE, "the held pod was released at {deleted}, before {dead}");
    wait_for("the held pod to be gone", ACT_WITHIN, || async {
        let now = env.pods().get_opt("held").await?;
        Ok((now.as_ref().map(uid) != Some(held_uid.clone())).then_some(()))
    })
    .await?;
    wait_node_event(env, &node, "Cordoned").await?;
    eprintln!(
        "[{}] left silent: dead {:.1}s after its last Ready=True; threshold -> cordon and taint \
         {:.2}s, release of the held pod (its finalizer removed) {:.2}s",
        env.name,
        dead.duration_since(last_heartbeat).as_secs_f64(),
        acted_at.duration_since(dead).as_secs_f64(),
        deleted.duration_since(dead).as_secs_f64(),
    );
    // Leave nothing held and no dead node behind on the shared control plane.
    release_hold(env, "held").await?;
    env.revive_node(&node).await?;
    Ok(())
}
