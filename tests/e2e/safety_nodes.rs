//! Safety invariants of node actions, each shown on a real control plane by a write the operator
//! must not make:
//!
//! - `kn-lease-deleted` (invariant 2, death needs evidence we saw): a not-Ready node whose
//!   kubelet keeps renewing its Lease has that Lease deleted (by an admin, a cleanup job, a
//!   restore); the kubelet re-creates it 10 s later, as a kubelet does at its next renewal. A
//!   missing Lease is *unknown*, not dead: the operator neither cordons, taints nor deletes the
//!   node, nor force-deletes the pod Terminating on it, for longer than `leaseStaleFor` +
//!   `notReadyFor` after the deletion, although every node action and the pod release are
//!   allowed without fencing and due at once on a dead node.
//! - `kn-delete-unfenced` (invariant 5, fencing before a second writer): deleting a Node releases
//!   every pod bound to it (PodGC), so `deleteNodeAfter` needs fencing evidence from outside the
//!   operator. A dead node with a StatefulSet pod Terminating on it, without the cloud
//!   provider's shutdown taint and with no `assumeOffAfter`, is cordoned (the node does count as
//!   dead) but not deleted for `deleteNodeAfter` + a margin, nor its pod force-deleted; once the
//!   cloud provider's shutdown taint appears, the Node is deleted.
//! - `kn-admin-recordon` (invariant 6, undo only what is still ours): a node the operator cordoned
//!   is uncordoned by an admin, then cordoned again by the admin for the repair (`kubectl
//!   uncordon`, `kubectl cordon`, the real binary). When the node comes back, the cordon is the
//!   admin's: it stays past `undoAfter`.
//!
//! - `kn-long-lease` (invariant 2, death needs evidence we saw): a kubelet configured with a
//!   240 s Lease (`nodeLeaseDurationSeconds`) renews it every 60 s, as the kubelet renews every
//!   quarter of its Lease. Its node is not Ready and a pod is Terminating on it. Between two
//!   renewals 60 s pass, more than `leaseStaleFor` (40 s): that gap is no evidence of death
//!   while it is shorter than the Lease the kubelet declares. The pod is not released; the pod
//!   of a 40 s kubelet that stopped, beside it under the same policy, is.
//!
//! They run on the production-like control plane ([`prod_e2e!`]): PodGC on and the upstream
//! timings, as users run them. Each test scopes its policy to its own zone and starts its own
//! operator (`--leader-elect=false`). What the operator wrote, and when, is read from the API
//! server's audit log (its user's requests); the objects are watched every 250 ms besides.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::fixtures::stateful_set;
use crate::fixtures::{renewed_since, secs, uid, until};
use crate::prod_e2e;
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::{ZONE_LABEL, node_ready_status, renew_lease};
use crate::support::operator::Operator;
use crate::support::{TestEnv, command_output, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("kn-lease-deleted", a_deleted_lease_is_unknown_not_death),
        prod_e2e!("kn-delete-unfenced", deleting_a_node_waits_for_fencing),
        prod_e2e!("kn-admin-recordon", an_admins_cordon_after_ours_is_never_undone),
        prod_e2e!("kn-long-lease", a_gap_shorter_than_the_declared_lease_is_not_death),
    ]
}

const NOT_READY_FOR: i64 = 10;
/// The documented minimum.
const LEASE_STALE_FOR: i64 = 40;
/// Added to a window in which a write must not come: covers a loaded 2-core machine.
const MARGIN: i64 = 20;
/// How long after its threshold an action may come at the latest.
const ACT_WITHIN: Duration = Duration::from_secs(15);

const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// The operator's record of what it did to a node.
const RECORD: &str = "remediator.io/node-actions";

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

fn has_record(node: &Node) -> bool {
    node.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(RECORD))
}

/// The policy of every test here: the short windows, this test's zone, room for its unhealthy
/// nodes, `dead_node` merged into `deadNode`, and `node_actions`.
fn policy_spec(env: &TestEnv, dead_node: Value, node_actions: Value) -> Value {
    let mut dead = json!({
        "notReadyFor": format!("{NOT_READY_FOR}s"),
        "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
    });
    if let (Some(d), Some(extra)) = (dead.as_object_mut(), dead_node.as_object()) {
        d.extend(extra.clone());
    }
    json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": dead,
        "stuckTerminating": { "enabled": true, "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": 3 },
        "nodeActions": node_actions,
    })
}

/// The operator of this test, alone (no leader election), ready.
async fn start_operator(cluster: &Cluster, env: &TestEnv) -> Result<Operator> {
    Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await
}

/// The operator's writes to the node `node` and DELETEs of the pod `pod` of this test (if any)
/// received at or after `from`, oldest first.
fn operator_writes(
    cluster: &Cluster,
    env: &TestEnv,
    node: &str,
    pod: Option<&str>,
    from: Timestamp,
) -> Result<Vec<AuditEntry>> {
    let mut writes = cluster.operator_node_writes(node)?;
    if let Some(pod) = pod {
        writes.extend(cluster.operator_pod_deletes(&env.namespace, pod)?);
    }
    writes.retain(|w| w.received.is_none_or(|r| r >= from));
    writes.sort_by_key(|w| w.received);
    Ok(writes)
}

/// "patch nodes/n at +0.8s, delete pods/ns/p at +1.1s": the writes, timed from `since`.
fn describe(writes: &[AuditEntry], since: Timestamp) -> String {
    let items: Vec<String> = writes
        .iter()
        .map(|w| {
            let target = match &w.namespace {
                Some(ns) => format!("{}/{ns}/{}", w.resource, w.name.as_deref().unwrap_or("?")),
                None => format!("{}/{}", w.resource, w.name.as_deref().unwrap_or("?")),
            };
            let at = w.received.map_or("at an unknown time".into(), |r| {
                format!("at {:+.1}s", r.duration_since(since).as_secs_f64())
            });
            format!("{} {target} {at}", w.verb)
        })
        .collect();
    if items.is_empty() { "none".into() } else { items.join(", ") }
}

/// Waits until the node satisfies `check`; returns it and the instant it was seen so.
async fn wait_node(
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

/// Waits until the killed `node` is Unknown (with the default grace period, about 50 s after its
/// last heartbeat) and returns the instant the policy counts it dead.
async fn dead_instant(env: &TestEnv, node: &str) -> Result<Timestamp> {
    wait_for(&format!("node {node} Ready=Unknown"), Duration::from_secs(150), || async move {
        let n = env.nodes().get_opt(node).await?;
        Ok(n.filter(|n| node_ready_status(n).as_deref() == Some("Unknown")).map(|_| ()))
    })
    .await?;
    let dead = env.dead_at(node, NOT_READY_FOR, LEASE_STALE_FOR).await?;
    eprintln!("[{}] {node} counts as dead from {dead}", env.name);
    Ok(dead)
}

/// The kubelet this test plays for a node kwok does not manage, whose container runtime is down:
/// every 2 s it reports `Ready=False` and, while its Lease writes are on, renews its Lease
/// (kube-node-lease, 40 s, re-created if it is gone, as the kubelet's lease controller does).
/// Stops when dropped.
struct RuntimeDownKubelet {
    /// Whether the Lease is renewed; locked for the whole of each heartbeat, so that once the
    /// test holds it no heartbeat is in flight.
    lease_on: Arc<tokio::sync::Mutex<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RuntimeDownKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RuntimeDownKubelet {
    /// Creates node `<test>-<suffix>` in the test's zone, heartbeats it and waits until it shows
    /// `Ready=False`.
    async fn start(env: &TestEnv, suffix: &str) -> Result<(String, RuntimeDownKubelet)> {
        let (name, node_uid) = env.create_node_without_kubelet(suffix).await?;
        let lease_on = Arc::new(tokio::sync::Mutex::new(true));
        let (client, node, on) = (env.client.clone(), name.clone(), lease_on.clone());
        let transition = Timestamp::now();
        let task = tokio::spawn(async move {
            loop {
                {
                    let on = on.lock().await;
                    let _ = runtime_down_beat(&client, &node, &node_uid, transition, *on).await;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        let kubelet = RuntimeDownKubelet { lease_on, task };
        env.wait_node_ready(&name, "False").await?;
        Ok((name, kubelet))
    }

    /// Stops the Lease renewals (the node status goes on) and deletes the Lease once no
    /// heartbeat is in flight; returns the instant just before the DELETE was sent.
    async fn delete_lease(&self, env: &TestEnv, node: &str) -> Result<Timestamp> {
        let mut on = self.lease_on.lock().await;
        *on = false;
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
        let sent = Timestamp::now();
        leases
            .delete(node, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting the Lease of {node}"))?;
        Ok(sent)
    }

    /// Renews the Lease again from the next heartbeat on (re-creating it).
    async fn resume_lease(&self) {
        *self.lease_on.lock().await = true;
    }
}

/// One heartbeat of a kubelet whose runtime is down: `Ready=False` with a fresh
/// `lastHeartbeatTime`, and (`lease`) its Lease renewed, re-created if it is gone.
async fn runtime_down_beat(
    client: &kube::Client,
    node: &str,
    node_uid: &str,
    transition: Timestamp,
    lease: bool,
) -> Result<()> {
    let now = Timestamp::now();
    let status = json!({ "status": { "conditions": [{
        "type": "Ready", "status": "False", "reason": "KubeletNotReady",
        "message": "container runtime is down", "lastHeartbeatTime": now.to_string(),
        "lastTransitionTime": transition.to_string(),
    }] } });
    Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&status))
        .await?;
    if !lease {
        return Ok(());
    }
    renew_lease(client, node, node_uid, LEASE_STALE_FOR as u32, now).await
}

/// How long the operator watches the node held alive (not Ready, Lease renewed) before its Lease
/// is deleted: past `leaseStaleFor` + `deleteNodeAfter` from the operator's start, so that a
/// Lease read as unrenewed since the start of the evidence window is overdue for every node
/// action at once.
const HELD_ALIVE_FOR: Duration = Duration::from_secs(60);
/// How long the test's kubelet leaves its deleted Lease absent before re-creating it (the
/// kubelet's renewal period).
const LEASE_ABSENT_FOR: Duration = Duration::from_secs(10);

/// A node whose container runtime is down (`Ready=False`) but whose kubelet renews its Lease
/// every 2 s is held alive, with a pod Terminating on it (deleted with a 1 s grace, nothing
/// finalizes it). The policy would act at once on a dead node: every node action 5-10 s after
/// death (the out-of-service taint and the delete with `assumeOffAfter`), pods released without
/// fencing (`requireFencingFor: [None]`) and without delay. After the operator has watched the
/// node held alive for a minute, with no write, the node's Lease is deleted; the kubelet
/// re-creates it 10 s later and renews it again. For `leaseStaleFor` + `notReadyFor` + a margin
/// after the deletion the operator makes no write to the node and no DELETE of the pod: the
/// deleted Lease is unknown, the renewals before and after it say the kubelet answers.
async fn a_deleted_lease_is_unknown_not_death(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    let (node, kubelet) = RuntimeDownKubelet::start(env, "held").await?;
    env.create_bound_pod("stuck", &node).await?;
    env.write_pod_status("stuck", false).await?;
    let pod = env.delete_gracefully("stuck", 1).await?;
    let pod_uid = uid(&pod);
    env.create_policy(policy_spec(
        env,
        json!({ "requireFencingFor": ["None"] }),
        json!({
            "cordonAfter": "5s",
            "outOfServiceTaintAfter": "5s",
            "assumeOffAfter": "5s",
            "deleteNodeAfter": "10s",
            "undoAfter": "10s",
        }),
    ))
    .await?;
    let started = Timestamp::now();
    let _op = start_operator(cluster, env).await?;
    // The operator sees the node not Ready, and not dead.
    env.wait_policy(
        "the policy status: 2 nodes matched, 1 unhealthy, none dead",
        Duration::from_secs(30),
        |s| (s.matched_nodes == 2 && s.unhealthy_nodes == 1 && s.dead_nodes == 0).then_some(()),
    )
    .await?;

    let (node, pod_uid) = (&node, &pod_uid);
    let untouched = |from: Timestamp, what: &'static str| async move {
        let writes = operator_writes(cluster, env, node, Some("stuck"), from)?;
        let node_there = env.nodes().get_opt(node).await?.is_some();
        let p = env.pods().get_opt("stuck").await?;
        let pod_there = p.as_ref().map(uid).as_ref() == Some(pod_uid);
        if writes.is_empty() && node_there && pod_there {
            return Ok(());
        }
        // Diagnostics only: the audit log lags the API by a moment; let the operator's burst
        // of writes land in it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let writes = operator_writes(cluster, env, node, Some("stuck"), from)?;
        bail!(
            "node {}, pod stuck {}; the operator's writes {what}: {}",
            if node_there { "there" } else { "gone" },
            if pod_there { "there" } else { "gone" },
            describe(&writes, from)
        )
    };
    holds_for(
        &format!("{node} (Ready=False, Lease renewed) held alive with no write"),
        HELD_ALIVE_FOR,
        || untouched(started, "while the node was held alive (times from the operator's start)"),
    )
    .await?;

    let deleted = kubelet.delete_lease(env, node).await?;
    eprintln!("[{}] the Lease of {node} deleted at {deleted}", env.name);
    let window = Duration::from_secs((LEASE_STALE_FOR + NOT_READY_FOR + MARGIN) as u64);
    let recreated = async {
        tokio::time::sleep(LEASE_ABSENT_FOR).await;
        kubelet.resume_lease().await;
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
        let leases = &leases;
        wait_for(&format!("the Lease of {node} re-created"), Duration::from_secs(15), || async {
            Ok(leases.get_opt(node).await?.map(|_| ()))
        })
        .await?;
        let at = Timestamp::now();
        eprintln!(
            "[{}] the Lease of {node} re-created {:.1}s after its deletion",
            env.name,
            at.duration_since(deleted).as_secs_f64()
        );
        Ok(())
    };
    let what =
        format!("no operator write to {node} nor DELETE of its stuck pod after its Lease went");
    let held = holds_for(&what, window, || {
        untouched(deleted, "after the Lease was deleted (times from the deletion)")
    });
    tokio::try_join!(held, recreated)?;

    // Leave no node behind: without its heartbeat it would die.
    drop(kubelet);
    env.nodes().delete(node, &DeleteParams::default()).await?;
    Ok(())
}

/// A kwok node running a StatefulSet pod dies; its pod is evicted (deleted with a 1 s grace, as
/// the node lifecycle controller does once its toleration runs out) and stays Terminating.
/// The policy cordons at once and deletes the Node 10 s after death, with no `assumeOffAfter`;
/// the node has no fencing evidence. The cordon comes (the node counts as dead), but for
/// `deleteNodeAfter` + a margin after death there is no DELETE of the Node and no DELETE of the
/// pod by the operator. Then the cloud provider's shutdown taint appears on the node (the test,
/// as the cloud provider would): the operator deletes the Node.
async fn deleting_a_node_waits_for_fencing(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    const DELETE_AFTER: i64 = 10;
    let victim = env.add_node("victim").await?;
    // web-0 lands on the victim: the healthy node is cordoned while it is scheduled.
    env.set_unschedulable(&env.healthy_node, true).await?;
    let sts = stateful_set("web", 1, json!({ ZONE_LABEL: env.zone }))?;
    env.api::<StatefulSet>().create(&PostParams::default(), &sts).await?;
    let web = env.wait_pods_ready("app=web", 1).await?.remove(0);
    env.set_unschedulable(&env.healthy_node, false).await?;
    ensure!(node_of(&web) == Some(victim.as_str()), "web-0 is not on {victim}");

    env.create_policy(policy_spec(
        env,
        json!({}),
        json!({
            "cordonAfter": "0s",
            "deleteNodeAfter": format!("{DELETE_AFTER}s"),
            "undoAfter": "10s",
        }),
    ))
    .await?;
    let started = Timestamp::now();
    let _op = start_operator(cluster, env).await?;
    renewed_since(env, &victim, Timestamp::now()).await?;
    env.kill_node(&victim).await?;
    let dead = dead_instant(env, &victim).await?;
    // The node lifecycle controller's eviction, early (its default toleration is 300 s); kwok
    // no longer manages the node, so nothing finalizes the pod.
    let web = env.delete_gracefully("web-0", 1).await?;
    let web_uid = uid(&web);
    ensure!(node_of(&web) == Some(victim.as_str()), "the Terminating web-0 is not on {victim}");

    // The control: the node does count as dead.
    let (_, cordon_seen) =
        wait_node(env, &victim, "our cordon", until(dead) + ACT_WITHIN, cordoned).await?;
    eprintln!(
        "[{}] {victim} cordoned (seen {:.1}s after its death)",
        env.name,
        cordon_seen.duration_since(dead).as_secs_f64()
    );

    let delete_at = dead + secs(DELETE_AFTER);
    let (victim, web_uid) = (&victim, &web_uid);
    holds_for(
        &format!(
            "{victim} (no fencing evidence) kept, and web-0 with it, until {delete_at} + {MARGIN}s"
        ),
        until(delete_at + secs(MARGIN)),
        || async move {
            let writes = operator_writes(cluster, env, victim, Some("web-0"), started)?;
            let deletes: Vec<AuditEntry> =
                writes.into_iter().filter(|w| w.verb == "delete").collect();
            ensure!(
                deletes.is_empty(),
                "the operator deleted without fencing evidence: {} (times from the death; \
                 deleteNodeAfter {DELETE_AFTER}s)",
                describe(&deletes, dead)
            );
            env.nodes().get_opt(victim).await?.with_context(|| format!("{victim} is gone"))?;
            let p = env.pods().get_opt("web-0").await?;
            ensure!(p.as_ref().map(uid).as_ref() == Some(web_uid), "web-0 ({web_uid}) is gone");
            Ok(())
        },
    )
    .await?;

    // The cloud provider reports the instance shut down: fencing evidence from outside.
    let tainted = Timestamp::now();
    env.add_taint(victim, SHUTDOWN, None, "NoSchedule").await?;
    wait_for(
        &format!("the operator's DELETE of {victim} after the shutdown taint"),
        Duration::from_secs(DELETE_AFTER as u64) + ACT_WITHIN,
        || async move {
            let writes = operator_writes(cluster, env, victim, None, tainted)?;
            Ok(writes.iter().any(|w| w.verb == "delete").then_some(()))
        },
    )
    .await?;
    wait_for(&format!("{victim} to be gone"), ACT_WITHIN, || async move {
        Ok(env.nodes().get_opt(victim).await?.is_none().then_some(()))
    })
    .await?;
    let writes = operator_writes(cluster, env, victim, None, started)?;
    eprintln!(
        "[{}] the operator's node writes, timed from the shutdown taint: {}",
        env.name,
        describe(&writes, tainted)
    );
    Ok(())
}

/// Runs the real `kubectl` (admin kubeconfig) with `args`, as an admin at a terminal.
async fn kubectl(cluster: &Cluster, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(cluster.bin.path("kubectl"));
    cmd.arg("--kubeconfig").arg(&cluster.kubeconfig).args(args);
    tokio::task::spawn_blocking(move || command_output(&mut cmd)).await?
}

/// The field managers that own the node's `spec.unschedulable` (its managedFields).
fn unschedulable_managers(node: &Node) -> Vec<String> {
    let entries = node.metadata.managed_fields.iter().flatten();
    entries
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| f.0.pointer("/f:spec/f:unschedulable").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// A kwok node dies and the operator cordons it (its record on the node says so). During the
/// outage an admin uncordons it, then cordons it again for the repair (`kubectl uncordon`,
/// `kubectl cordon`). The node comes back: for `undoAfter` + a margin after it is Ready again,
/// checked every 250 ms, it stays cordoned; afterwards `spec.unschedulable` is still the admin's
/// field, never written by the operator since.
async fn an_admins_cordon_after_ours_is_never_undone(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const UNDO_AFTER: i64 = 10;
    env.create_policy(policy_spec(
        env,
        json!({}),
        json!({ "cordonAfter": "0s", "undoAfter": format!("{UNDO_AFTER}s") }),
    ))
    .await?;
    let _op = start_operator(cluster, env).await?;
    let victim = env.add_node("victim").await?;
    renewed_since(env, &victim, Timestamp::now()).await?;
    env.kill_node(&victim).await?;
    let dead = dead_instant(env, &victim).await?;
    let (ours, _) =
        wait_node(env, &victim, "our cordon and record", until(dead) + ACT_WITHIN, |n| {
            cordoned(n) && has_record(n)
        })
        .await?;
    // Who wrote the operator's cordon, as the API server tracks it (managedFields).
    let operator_managers = unschedulable_managers(&ours);
    ensure!(!operator_managers.is_empty(), "no field manager owns the operator's cordon");
    let operators = |managers: &[String]| -> Vec<String> {
        managers.iter().filter(|m| operator_managers.contains(m)).cloned().collect()
    };

    kubectl(cluster, &["uncordon", &victim]).await?;
    let victim = &victim;
    holds_for("the admin's uncordon to stand", Duration::from_secs(5), || async move {
        let n = env.nodes().get_opt(victim).await?.with_context(|| format!("{victim} is gone"))?;
        ensure!(!cordoned(&n), "{victim} was cordoned again");
        Ok(())
    })
    .await?;
    let recordoned = Timestamp::now();
    kubectl(cluster, &["cordon", victim]).await?;
    let n = env.nodes().get(victim).await?;
    let managers = unschedulable_managers(&n);
    ensure!(cordoned(&n), "kubectl cordon did not cordon {victim}");
    ensure!(
        operators(&managers).is_empty(),
        "after kubectl cordon the operator ({operator_managers:?}) still owns \
         spec.unschedulable: {managers:?}"
    );
    eprintln!(
        "[{}] {victim} cordoned by the operator ({operator_managers:?}), uncordoned, then \
         cordoned again by kubectl ({managers:?})",
        env.name
    );

    let revived = Timestamp::now();
    env.revive_node(victim).await?;
    let ready = env.wait_node_ready(victim, "True").await?;
    let transition = ready
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .map_or(revived, |t| t.0);
    let undo_at = revived.max(transition) + secs(UNDO_AFTER);
    holds_for(
        &format!("the admin's cordon on {victim} to stay past undoAfter ({undo_at}) + {MARGIN}s"),
        until(undo_at + secs(MARGIN)),
        || async move {
            let n =
                env.nodes().get_opt(victim).await?.with_context(|| format!("{victim} is gone"))?;
            if !cordoned(&n) {
                let late = Timestamp::now().duration_since(undo_at).as_secs_f64();
                // Diagnostics only: the audit log lags the API by a moment.
                tokio::time::sleep(Duration::from_secs(3)).await;
                let writes = operator_writes(cluster, env, victim, None, recordoned)?;
                bail!(
                    "the admin's cordon was seen removed {:.1}s after undoAfter ran out; \
                     spec.unschedulable now managed by {:?}; the operator's writes to {victim} \
                     since the admin's re-cordon (times from it): {}",
                    late,
                    unschedulable_managers(&n),
                    describe(&writes, recordoned)
                );
            }
            Ok(())
        },
    )
    .await?;
    let n = env.nodes().get(victim).await?;
    let managers = unschedulable_managers(&n);
    ensure!(
        operators(&managers).is_empty(),
        "the operator wrote spec.unschedulable after the admin's re-cordon: {managers:?}; its \
         writes since (times from the re-cordon): {}",
        describe(&operator_writes(cluster, env, victim, None, recordoned)?, recordoned)
    );
    eprintln!(
        "[{}] the admin's cordon stayed; the operator's writes since the re-cordon: {}",
        env.name,
        describe(&operator_writes(cluster, env, victim, None, recordoned)?, recordoned)
    );
    // Leave nothing cordoned behind on the shared control plane.
    kubectl(cluster, &["uncordon", victim]).await?;
    Ok(())
}

/// A kubelet this test plays whose container runtime is down: it reports `Ready=False` once,
/// as a kubelet posts an unchanged status only every few minutes, and renews its Lease, which
/// declares `lease_seconds`, every quarter of that, as the kubelet's lease controller does.
/// Stops when dropped.
struct LeaseOnlyKubelet(tokio::task::JoinHandle<()>);

impl Drop for LeaseOnlyKubelet {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl LeaseOnlyKubelet {
    /// Creates node `<test>-<suffix>` in the test's zone, reports it `Ready=False`, renews its
    /// Lease (the first renewal at once) and waits until the node shows `Ready=False`.
    async fn start(
        env: &TestEnv,
        suffix: &str,
        lease_seconds: u32,
    ) -> Result<(String, LeaseOnlyKubelet)> {
        let (name, node_uid) = env.create_node_without_kubelet(suffix).await?;
        let now = Timestamp::now();
        let status = json!({ "status": { "conditions": [{
            "type": "Ready", "status": "False", "reason": "KubeletNotReady",
            "message": "container runtime is down", "lastHeartbeatTime": now.to_string(),
            "lastTransitionTime": now.to_string(),
        }] } });
        env.nodes()
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
            .await?;
        let (client, node) = (env.client.clone(), name.clone());
        let task = tokio::spawn(async move {
            let mut renewals =
                tokio::time::interval(Duration::from_secs(u64::from(lease_seconds / 4)));
            loop {
                renewals.tick().await;
                let _ =
                    renew_lease(&client, &node, &node_uid, lease_seconds, Timestamp::now()).await;
            }
        });
        env.wait_node_ready(&name, "False").await?;
        Ok((name, LeaseOnlyKubelet(task)))
    }
}

/// The Lease of the kubelet configured for a longer one, and how long the test watches it:
/// three renewal gaps of 60 s, each longer than `leaseStaleFor` + `notReadyFor`.
const LONG_LEASE: u32 = 240;
const LONG_WATCH: Duration = Duration::from_secs(190);

/// Two nodes not Ready (runtime down) under one policy that releases pods at once on a dead
/// node (`requireFencingFor: [None]`, no delay), each with a pod Terminating on it (deleted with
/// a 1 s grace; nothing finalizes it). `long`'s kubelet declares a 240 s Lease and renews it
/// every 60 s; `short`'s declares the kubelet's 40 s, renews every 10 s, and stops when the
/// operator has started. Within `leaseStaleFor` + `notReadyFor` + a margin of that, the
/// operator force-deletes `short`'s pod (the control: the policy acts). For
/// [`LONG_WATCH`] from the operator's start, three gaps of 60 s without a renewal, each longer
/// than `leaseStaleFor`, it never deletes `long`'s pod nor writes `long`.
async fn a_gap_shorter_than_the_declared_lease_is_not_death(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (long, long_kubelet) = LeaseOnlyKubelet::start(env, "long", LONG_LEASE).await?;
    let (short, short_kubelet) = LeaseOnlyKubelet::start(env, "short", 40).await?;
    for (pod, node) in [("on-long", &long), ("on-short", &short)] {
        env.create_bound_pod(pod, node).await?;
        env.write_pod_status(pod, false).await?;
    }
    let on_long_uid = uid(&env.delete_gracefully("on-long", 1).await?);
    env.delete_gracefully("on-short", 1).await?;
    env.create_policy(policy_spec(env, json!({ "requireFencingFor": ["None"] }), json!({})))
        .await?;
    let started = Timestamp::now();
    let _op = start_operator(cluster, env).await?;
    drop(short_kubelet);
    let stopped = Timestamp::now();

    let control = async {
        let within = secs(LEASE_STALE_FOR + NOT_READY_FOR + MARGIN);
        let deleted = wait_for(
            &format!("the operator's DELETE of on-short (its 40 s kubelet on {short} stopped)"),
            until(stopped + within),
            || async {
                let deletes = cluster.operator_pod_deletes(&env.namespace, "on-short")?;
                Ok(deletes.first().and_then(|d| d.received))
            },
        )
        .await?;
        eprintln!(
            "[{}] on-short force-deleted {:.1}s after its kubelet stopped",
            env.name,
            deleted.duration_since(stopped).as_secs_f64()
        );
        Ok::<_, anyhow::Error>(())
    };
    let (long_ref, on_long_uid) = (&long, &on_long_uid);
    let what = format!("no write to {long} (240 s Lease renewed every 60 s) nor DELETE of on-long");
    let held = holds_for(&what, LONG_WATCH, || async move {
        let writes = operator_writes(cluster, env, long_ref, Some("on-long"), started)?;
        ensure!(
            writes.is_empty(),
            "the operator wrote, times from its start: {}",
            describe(&writes, started)
        );
        let p = env.pods().get_opt("on-long").await?;
        ensure!(p.as_ref().map(uid).as_ref() == Some(on_long_uid), "on-long is gone");
        Ok(())
    });
    tokio::try_join!(control, held)?;
    eprintln!(
        "[{}] {long} (240 s Lease, renewed every 60 s) untouched for {}s",
        env.name,
        LONG_WATCH.as_secs()
    );

    drop(long_kubelet);
    for node in [&long, &short] {
        env.nodes().delete(node, &DeleteParams::default()).await?;
    }
    Ok(())
}
