//! Issue 22, the node-level items: Kubernetes 1.37's node lifecycle conditions (KEP-5683, gate
//! NodeLifecycleConditions on in the test control plane), nodes another tool manages, and the
//! provenance of the out-of-service taint.
//!
//! The conditions are admin-set: the test writes them on the Node's status (a strategic merge
//! patch of `status.conditions`, keyed by type), as an admin or an authorised controller would.
//! Every test runs on the production-like control plane (PodGC on), scopes its policy to its own
//! zone, starts its own operator before its nodes die and waits until that operator has seen
//! their Leases renewed. When the operator acted is read from the audit log.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::explain::{plugin, run};
use crate::fixtures::{renewed_since, secs, until};
use crate::node_actions::{
    ACT_WITHIN, LEASE_STALE_FOR, NOT_READY_FOR, OUT_OF_SERVICE, SHUTDOWN, TOLERANCE, cordoned,
    start_operator, wait_node,
};
use crate::prod_e2e;
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::{TEST_LABEL, ZONE_LABEL};
use crate::support::{TestEnv, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("nl-maintenance", a_dead_node_in_maintenance_is_left_alone_until_it_ends),
        prod_e2e!("nl-graceful-shutdown", a_node_shutting_down_gets_its_grace_first),
        prod_e2e!("nl-other-tool", a_karpenter_node_is_left_to_karpenter_and_said_once),
        prod_e2e!("nl-taint-provenance", our_taint_says_so_and_another_tools_counts_and_stays),
    ]
}

const APPLIED_BY: &str = "node.kubernetes.io/out-of-service-applied-by";

/// The policy of every test here: Enforce, this test's zone, the short windows, pods released
/// at once, nodes cordoned at once, and `extra` merged in.
fn policy_spec(env: &TestEnv, extra: Value) -> Value {
    let mut spec = json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": 3 },
        "nodeActions": { "cordonAfter": "0s" },
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    spec
}

/// Sets (`Some(status)`) or removes (`None`) the condition `type_` on the node's status, as an
/// admin would: a strategic merge patch keyed by type, so the node lifecycle controller's own
/// conditions are untouched. Returns the instant before the request.
async fn set_condition(
    env: &TestEnv,
    node: &str,
    type_: &str,
    status: Option<&str>,
) -> Result<Timestamp> {
    let before = Timestamp::now();
    let condition = match status {
        Some(status) => json!({
            "type": type_, "status": status, "reason": "SetByTheTest",
            "message": "set by the test as an admin would", "lastTransitionTime": before.to_string(),
        }),
        None => json!({ "type": type_, "$patch": "delete" }),
    };
    let patch = json!({ "status": { "conditions": [condition] } });
    env.nodes()
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .with_context(|| format!("setting condition {type_}={status:?} on {node}"))?;
    Ok(before)
}

fn condition(node: &Node, type_: &str) -> Option<String> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

fn taint_value(node: &Node, key: &str) -> Option<Option<String>> {
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    taints.iter().find(|t| t.key == key && t.effect == "NoExecute").map(|t| t.value.clone())
}

fn annotation(node: &Node, key: &str) -> Option<String> {
    node.metadata.annotations.as_ref()?.get(key).cloned()
}

/// The killed node's death instant by this test's policy, once it is Unknown.
async fn dead_instant(env: &TestEnv, node: &str) -> Result<Timestamp> {
    let dead = env.dead_at(node, NOT_READY_FOR, LEASE_STALE_FOR).await?;
    eprintln!("[{}] {node} counts as dead from {dead}", env.name);
    Ok(dead)
}

/// The operator's first write to the node received at or after `from`, of `verb`.
fn first_node_write(
    cluster: &Cluster,
    node: &str,
    verb: &str,
    from: Timestamp,
) -> Result<Timestamp> {
    cluster
        .operator_node_writes(node)?
        .into_iter()
        .filter(|w| w.verb == verb)
        .filter_map(|w| w.received)
        .find(|r| *r >= from - TOLERANCE)
        .with_context(|| format!("no {verb} of {node} by the operator since {from}"))
}

fn pod_deletes(cluster: &Cluster, env: &TestEnv, pod: &str) -> Result<Vec<AuditEntry>> {
    cluster.operator_pod_deletes(&env.namespace, pod)
}

/// Waits until the operator has force-deleted `pod` (its DELETE in the audit log); returns when
/// the API server received it.
async fn wait_pod_delete(
    cluster: &Cluster,
    env: &TestEnv,
    pod: &str,
    timeout: Duration,
) -> Result<Timestamp> {
    wait_for(&format!("the operator's DELETE of pod {pod}"), timeout, || async move {
        Ok(pod_deletes(cluster, env, pod)?.into_iter().find_map(|d| d.received))
    })
    .await
}

/// The node's `NodeLeftAlone` Events: (action, note, series count).
async fn left_alone_events(env: &TestEnv, node: &str) -> Result<Vec<(String, String, i32)>> {
    Ok(env
        .events_about("Node", node, "NodeLeftAlone")
        .await?
        .into_iter()
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (e.action.unwrap_or_default(), e.note.unwrap_or_default(), count)
        })
        .collect())
}

/// Waits until the node has a `NodeLeftAlone` Event with `action`; returns its note.
async fn wait_left_alone_event(env: &TestEnv, node: &str, action: &str) -> Result<String> {
    wait_for(&format!("a NodeLeftAlone {action} Event on {node}"), ACT_WITHIN, || async move {
        Ok(left_alone_events(env, node).await?.into_iter().find(|e| e.0 == action).map(|e| e.1))
    })
    .await
}

/// Waits until the policy's status lists the node as left alone for `reason`; returns the
/// message.
async fn wait_status_left_alone(env: &TestEnv, node: &str, reason: &str) -> Result<String> {
    let what = format!("{node} left alone ({reason}) in the policy status");
    env.wait_policy(&what, ACT_WITHIN, |s| {
        s.nodes_left_alone
            .iter()
            .find(|n| n.name == node && n.reason == reason)
            .map(|n| n.message.clone())
    })
    .await
}

/// `kubectl remediator plan -o json` for this test's policy: the policy's document.
async fn plan_json(cluster: &Cluster, env: &TestEnv) -> Result<Value> {
    let plugin = plugin(env)?;
    let selector = format!("{TEST_LABEL}={}", env.name);
    let args = ["plan", "-o", "json", "--observe", "0s", "--policy-selector", &selector];
    let (ok, out, err) = run(&plugin, &cluster.kubeconfig, &args).await?;
    ensure!(ok, "plan failed: {err}");
    let doc: Value = serde_json::from_str(&out).with_context(|| format!("not JSON: {out}"))?;
    doc.as_array().and_then(|a| a.first()).cloned().context("no policy in the plan")
}

/// The plan's word on `node`: its `leftAlone` reason and message.
fn plan_left_alone(policy: &Value, node: &str) -> Option<(String, String)> {
    let nodes = policy["unhealthyNodes"].as_array()?;
    let n = nodes.iter().find(|n| n["node"] == node)?;
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Some((s(&n["leftAlone"]["reason"]), s(&n["leftAlone"]["message"])))
}

/// A dead node carrying `MaintenanceInProgress`: no cordon, its Terminating pod not released,
/// said (a NodeLeftAlone Event, status.nodesLeftAlone, `plan` and `explain`). The condition
/// removed: the normal path resumes at once (cordon and force delete), timed from the removal.
async fn a_dead_node_in_maintenance_is_left_alone_until_it_ends(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let victim = env.add_node("victim").await?;
    env.create_bound_pod("p", &victim).await?;
    env.wait_pods_ready("app=p", 1).await?;
    env.create_policy(policy_spec(env, json!({}))).await?;
    let _op = start_operator(cluster, env).await?;
    renewed_since(env, &victim, Timestamp::now()).await?;
    // The admin starts a maintenance, and the machine goes down for it.
    set_condition(env, &victim, "MaintenanceInProgress", Some("True")).await?;
    env.kill_node(&victim).await?;
    env.wait_node_ready(&victim, "Unknown").await?;
    env.delete_gracefully("p", 1).await?;
    let dead = dead_instant(env, &victim).await?;

    // Said: once on the node, in the status, by `plan` and `explain`.
    let note = wait_left_alone_event(env, &victim, "InMaintenance").await?;
    ensure!(note.contains("MaintenanceInProgress=True"), "the Event does not name it: {note}");
    wait_status_left_alone(env, &victim, "InMaintenance").await?;
    let doc = plan_json(cluster, env).await?;
    let (reason, _) = plan_left_alone(&doc, &victim).with_context(|| format!("plan: {doc:#}"))?;
    ensure!(reason == "InMaintenance", "plan says {reason}: {doc:#}");
    let held = doc["notActing"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["pod"] == "p" && p["code"] == "InMaintenance");
    ensure!(held, "plan does not hold p InMaintenance: {doc:#}");
    let plugin = plugin(env)?;
    let target = format!("{}/p", env.namespace);
    let selector = format!("{TEST_LABEL}={}", env.name);
    let args = ["explain", "pod", &target, "--observe", "0s", "--policy-selector", &selector];
    let (ok, text, err) = run(&plugin, &cluster.kubeconfig, &args).await?;
    ensure!(ok && text.contains("InMaintenance"), "explain: {text}{err}");
    eprintln!("[{}] kubectl remediator explain pod {target}:\n{text}", env.name);

    // Nothing happens while it lasts: well past the thresholds (death, cordonAfter 0s, the
    // pod's delay 0s).
    let hold_until = dead.max(Timestamp::now()) + secs(15);
    holds_for("no action on the node in maintenance", until(hold_until), || async {
        let writes = cluster.operator_node_writes(&victim)?;
        ensure!(writes.is_empty(), "the operator wrote to {victim}: {writes:?}");
        let deletes = pod_deletes(cluster, env, "p")?;
        ensure!(deletes.is_empty(), "the operator deleted p: {deletes:?}");
        let n = env.nodes().get(&victim).await?;
        ensure!(
            condition(&n, "MaintenanceInProgress").as_deref() == Some("True"),
            "the condition went"
        );
        Ok(())
    })
    .await?;
    let events = left_alone_events(env, &victim).await?;
    ensure!(events.len() == 1 && events[0].2 == 1, "said more than once: {events:?}");

    // The maintenance ends: the normal path resumes.
    let removed = set_condition(env, &victim, "MaintenanceInProgress", None).await?;
    wait_node(env, &victim, "our cordon", ACT_WITHIN, cordoned).await?;
    let deleted = wait_pod_delete(cluster, env, "p", ACT_WITHIN).await?;
    let cordon = first_node_write(cluster, &victim, "patch", removed)?;
    let took = |t: Timestamp| t.duration_since(removed).as_secs_f64();
    eprintln!(
        "[{}] maintenance ended -> action: cordon {:.3}s, force delete {:.3}s",
        env.name,
        took(cordon),
        took(deleted)
    );
    ensure!(
        cordon >= removed - TOLERANCE && deleted >= removed - TOLERANCE,
        "acted before the end"
    );
    env.wait_policy("the maintenance gone from the status", ACT_WITHIN, |s| {
        s.nodes_left_alone.iter().all(|n| n.name != victim).then_some(())
    })
    .await?;
    Ok(())
}

/// `GracefulNodeShutdownInProgress` set on the live node, then the node stops: dead by the
/// evidence, yet no cordon and no force delete until `gracefulShutdownGrace` (90 s) has passed
/// since the condition appeared; then both at once. Timed from the grace's end.
async fn a_node_shutting_down_gets_its_grace_first(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    const GRACE: i64 = 90;
    let victim = env.add_node("victim").await?;
    env.create_bound_pod("p", &victim).await?;
    env.wait_pods_ready("app=p", 1).await?;
    let lifecycle = json!({ "nodeLifecycle": { "gracefulShutdownGrace": format!("{GRACE}s") } });
    env.create_policy(policy_spec(env, lifecycle)).await?;
    let _op = start_operator(cluster, env).await?;
    renewed_since(env, &victim, Timestamp::now()).await?;
    // The kubelet starts its graceful shutdown (it says so on the Node), then the machine stops.
    let began = set_condition(env, &victim, "GracefulNodeShutdownInProgress", Some("True")).await?;
    env.kill_node(&victim).await?;
    env.delete_gracefully("p", 1).await?;
    let dead = dead_instant(env, &victim).await?;
    let grace_end = began + secs(GRACE);
    ensure!(
        dead + secs(5) < grace_end,
        "the node died at {dead}, too close to the grace's end {grace_end} to tell them apart"
    );
    let n = env.nodes().get(&victim).await?;
    ensure!(
        condition(&n, "GracefulNodeShutdownInProgress").as_deref() == Some("True"),
        "the condition did not stay on the node"
    );
    let note = wait_left_alone_event(env, &victim, "ShuttingDown").await?;
    ensure!(note.contains("GracefulNodeShutdownInProgress"), "{note}");
    wait_status_left_alone(env, &victim, "ShuttingDown").await?;

    holds_for(
        "no action before the shutdown's grace ends",
        until(grace_end - TOLERANCE),
        || async {
            let writes = cluster.operator_node_writes(&victim)?;
            ensure!(writes.is_empty(), "the operator wrote to {victim}: {writes:?}");
            let deletes = pod_deletes(cluster, env, "p")?;
            ensure!(deletes.is_empty(), "the operator deleted p: {deletes:?}");
            Ok(())
        },
    )
    .await?;
    wait_node(env, &victim, "our cordon", until(grace_end) + ACT_WITHIN, cordoned).await?;
    let deleted = wait_pod_delete(cluster, env, "p", ACT_WITHIN).await?;
    let cordon = first_node_write(cluster, &victim, "patch", began)?;
    ensure!(cordon >= grace_end - TOLERANCE, "cordoned at {cordon}, before the grace's end");
    ensure!(deleted >= grace_end - TOLERANCE, "p deleted at {deleted}, before the grace's end");
    let took = |t: Timestamp| t.duration_since(grace_end).as_secs_f64();
    eprintln!(
        "[{}] dead {:.1}s before the grace's end; grace end -> action: cordon {:.3}s, force \
         delete {:.3}s",
        env.name,
        grace_end.duration_since(dead).as_secs_f64(),
        took(cordon),
        took(deleted)
    );
    Ok(())
}

/// A dead node labelled `karpenter.sh/nodepool`: no node action (left to Karpenter), one
/// NodeLeftAlone Event naming Karpenter and never again in the episode, the status, `plan` and
/// `explain` name it; its Terminating pod is released as on any node.
async fn a_karpenter_node_is_left_to_karpenter_and_said_once(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let labels = [(ZONE_LABEL, env.zone.as_str()), ("karpenter.sh/nodepool", "default")];
    let victim = env.add_node_with_labels("victim", &labels).await?;
    env.create_bound_pod("p", &victim).await?;
    env.create_bound_pod("q", &victim).await?;
    env.wait_pods_ready("app in (p, q)", 2).await?;
    env.create_policy(policy_spec(env, json!({}))).await?;
    let _op = start_operator(cluster, env).await?;
    renewed_since(env, &victim, Timestamp::now()).await?;
    env.kill_node(&victim).await?;
    env.wait_node_ready(&victim, "Unknown").await?;
    env.delete_gracefully("p", 1).await?;
    let dead = dead_instant(env, &victim).await?;

    let note = wait_left_alone_event(env, &victim, "LeftToAnotherTool").await?;
    let said = Timestamp::now();
    ensure!(note.contains("Karpenter") && note.contains("karpenter.sh/nodepool"), "{note}");
    let message = wait_status_left_alone(env, &victim, "LeftToAnotherTool").await?;
    ensure!(message.contains("Karpenter"), "{message}");
    // Its pod goes as anywhere.
    let deleted = wait_pod_delete(cluster, env, "p", ACT_WITHIN).await?;
    eprintln!(
        "[{}] dead -> NodeLeftAlone Event seen {:.1}s, force delete {:.3}s",
        env.name,
        said.duration_since(dead).as_secs_f64(),
        deleted.duration_since(dead).as_secs_f64()
    );
    let doc = plan_json(cluster, env).await?;
    let (reason, message) = plan_left_alone(&doc, &victim).with_context(|| format!("{doc:#}"))?;
    ensure!(reason == "LeftToAnotherTool" && message.contains("Karpenter"), "plan: {doc:#}");
    let plugin = plugin(env)?;
    let target = format!("{}/q", env.namespace);
    let selector = format!("{TEST_LABEL}={}", env.name);
    let args = ["explain", "pod", &target, "--observe", "0s", "--policy-selector", &selector];
    let (ok, text, err) = run(&plugin, &cluster.kubeconfig, &args).await?;
    ensure!(
        ok && text.contains("node left alone (LeftToAnotherTool)") && text.contains("Karpenter"),
        "explain: {text}{err}"
    );
    eprintln!("[{}] kubectl remediator explain pod {target}:\n{text}", env.name);

    // Later reconciles (the pod's release, the node's status updates) say nothing more, and
    // the node gets no write.
    holds_for("one Event, no node write", Duration::from_secs(20), || async {
        let events = left_alone_events(env, &victim).await?;
        ensure!(events.len() == 1 && events[0].2 == 1, "said more than once: {events:?}");
        let writes = cluster.operator_node_writes(&victim)?;
        ensure!(writes.is_empty(), "the operator wrote to {victim}: {writes:?}");
        Ok(())
    })
    .await?;
    Ok(())
}

/// Our out-of-service taint (fenced by the cloud's shutdown taint) carries
/// `node.kubernetes.io/out-of-service-applied-by: kube-remediator`, and both go when the node
/// returns. On another dead node, a pod that needs fencing waits until Pacemaker's taint
/// (applied-by `pacemaker`) arrives, then goes at once (timed from that taint); when that node
/// returns our cordon goes and Pacemaker's taint and annotation stay.
async fn our_taint_says_so_and_another_tools_counts_and_stays(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    // A second healthy node: two of four unhealthy keeps the zone below the node lifecycle
    // controller's partial disruption.
    env.add_node("healthy-2").await?;
    let (ours, theirs) = tokio::try_join!(env.add_node("ours"), env.add_node("theirs"))?;
    env.create_bound_pod("q", &theirs).await?;
    env.wait_pods_ready("app=q", 1).await?;
    let extra = json!({
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
            "requireFencingFor": ["All"],
        },
        "nodeActions": { "cordonAfter": "0s", "outOfServiceTaintAfter": "0s", "undoAfter": "5s" },
    });
    env.create_policy(policy_spec(env, extra)).await?;
    let _op = start_operator(cluster, env).await?;
    let ready = Timestamp::now();
    renewed_since(env, &ours, ready).await?;
    renewed_since(env, &theirs, ready).await?;
    env.kill_node(&ours).await?;
    env.kill_node(&theirs).await?;
    env.add_taint(&ours, SHUTDOWN, None, "NoSchedule").await?;
    env.wait_node_ready(&theirs, "Unknown").await?;
    env.delete_gracefully("q", 1).await?;
    let (dead_ours, dead_theirs) =
        tokio::try_join!(dead_instant(env, &ours), dead_instant(env, &theirs))?;

    // Ours: the taint says who applied it.
    let (tainted, _) =
        wait_node(env, &ours, "our out-of-service taint", until(dead_ours) + ACT_WITHIN, |n| {
            taint_value(n, OUT_OF_SERVICE).is_some()
        })
        .await?;
    ensure!(
        annotation(&tainted, APPLIED_BY).as_deref() == Some("kube-remediator"),
        "our taint without our applied-by: {:?}",
        tainted.metadata.annotations
    );
    let taint_at = first_node_write(cluster, &ours, "patch", dead_ours)?;

    // Theirs: cordoned by us, q held for want of fencing.
    wait_node(env, &theirs, "our cordon", until(dead_theirs) + ACT_WITHIN, cordoned).await?;
    holds_for("q held without fencing", Duration::from_secs(5), || async {
        let deletes = pod_deletes(cluster, env, "q")?;
        ensure!(deletes.is_empty(), "q was deleted without fencing: {deletes:?}");
        Ok(())
    })
    .await?;
    // Pacemaker fences the machine, then says so.
    let annotate = json!({ "metadata": { "annotations": { APPLIED_BY: "pacemaker" } } });
    let fenced = Timestamp::now();
    env.nodes().patch(&theirs, &PatchParams::default(), &Patch::Merge(&annotate)).await?;
    env.add_taint(&theirs, OUT_OF_SERVICE, Some("nodeshutdown"), "NoExecute").await?;
    // Fenced, q goes at once: force-deleted by us or by PodGC (on here, as in production: it
    // force-deletes a Terminating pod on an out-of-service node), whichever comes first. Ours,
    // if it was ours, came after the fence.
    wait_for("q to be gone after the fence", ACT_WITHIN, || async {
        Ok(env.pods().get_opt("q").await?.is_none().then_some(()))
    })
    .await?;
    let gone = Timestamp::now();
    let ours_at: Vec<Timestamp> =
        pod_deletes(cluster, env, "q")?.into_iter().filter_map(|d| d.received).collect();
    ensure!(
        ours_at.iter().all(|at| *at >= fenced - TOLERANCE),
        "q was deleted by the operator before the fence at {fenced}: {ours_at:?}"
    );
    let by = match ours_at.first() {
        Some(at) => format!("force-deleted by us {:.3}s", at.duration_since(fenced).as_secs_f64()),
        None => {
            format!("released by PodGC (gone {:.3}s)", gone.duration_since(fenced).as_secs_f64())
        }
    };
    eprintln!(
        "[{}] threshold -> our taint {:.3}s; pacemaker's taint -> q {by} after it",
        env.name,
        taint_at.duration_since(dead_ours).as_secs_f64(),
    );

    // Both come back: our taint and its annotation go; Pacemaker's stay.
    env.revive_node(&ours).await?;
    env.revive_node(&theirs).await?;
    let (undone, _) = wait_node(env, &ours, "our taint undone", Duration::from_secs(90), |n| {
        taint_value(n, OUT_OF_SERVICE).is_none() && !cordoned(n)
    })
    .await?;
    ensure!(annotation(&undone, APPLIED_BY).is_none(), "our applied-by stayed after the undo");
    wait_node(env, &theirs, "our cordon undone", Duration::from_secs(90), |n| !cordoned(n)).await?;
    let stays = || async {
        let n = env.nodes().get(&theirs).await?;
        ensure!(taint_value(&n, OUT_OF_SERVICE).is_some(), "Pacemaker's taint was removed");
        ensure!(
            annotation(&n, APPLIED_BY).as_deref() == Some("pacemaker"),
            "its applied-by changed"
        );
        Ok(())
    };
    holds_for("Pacemaker's taint and annotation to stay", Duration::from_secs(10), stays).await?;
    // Let the node go clean for the namespace's teardown.
    let clean =
        json!({ "metadata": { "annotations": { APPLIED_BY: null } }, "spec": { "taints": null } });
    env.nodes().patch(&theirs, &PatchParams::default(), &Patch::Merge(&clean)).await?;
    Ok(())
}
