//! The safety kernel's looks at pods on live nodes and at Nodes deleted by someone else, each
//! shown by the writes the operator sends (the audit log):
//!
//! - **Fencing before a second writer, on a live node too** (`kl-live-node-fencing`): a
//!   StatefulSet pod stuck Terminating on a live node is never force-deleted by
//!   `liveNodeStuck.forceDeleteAfter` (its kubelet may still hold the volume): it is held,
//!   saying `NeedsFencing`, while a bare pod beside it is released; only
//!   `liveNodeStuck.forceDeleteUnfenced: true` lets it go.
//! - **Time on a live node is ours** (`kl-live-node-our-clock`): a pod already Terminating long
//!   before the operator starts is stuck `forceDeleteAfter` after the operator first saw it
//!   (plus its grace period), never by the API server's `deletionTimestamp` against our clock.
//! - **A deleted Node must still be gone** (`kl-node-recreated`): a pod whose Node someone
//!   deleted counts as on a dead node; when a Node of the same name is created again between
//!   the plan and the DELETE (the test build's hold hook, `--e2e-hold-dir`, stops the operator
//!   there), the last look leaves the pod alone and says so.
//!
//! The live nodes are nodes whose kubelet the test plays (`add_live_node_without_kubelet`:
//! Ready, Lease renewed every 2 s), on which nothing finalizes a deleted pod. Every test runs on
//! the production-like control plane ([`prod_e2e!`]: PodGC on, the default tolerations,
//! node-monitor grace period and eviction rates), in its own zone with its own nodes and its
//! own operator.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::faults::{kill_and_strand, running_pod_on};
use crate::fixtures::stateful_set;
use crate::fixtures::{secs, uid, until};
use crate::prod_e2e;
use crate::support::cluster::{ALIVE_LABEL, AuditEntry, Cluster};
use crate::support::env::{HOSTNAME_LABEL, TEST_LABEL};
use crate::support::operator::{Operator, binary};
use crate::support::{TestEnv, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("kl-live-node-our-clock", time_on_a_live_node_starts_when_we_saw_the_pod),
        prod_e2e!("kl-live-node-fencing", a_pod_that_needs_fencing_stays_on_a_live_node),
        prod_e2e!("kl-node-recreated", a_node_created_again_after_the_plan_is_not_dead),
    ]
}

/// `liveNodeStuck.delayAfterGrace` of the live-node tests.
const DELAY: i64 = 5;
/// The grace period the tests delete their pods with.
const GRACE: i64 = 1;
/// How late after its due instant an action may come at the latest: the operator requeues at
/// the exact instant; this covers a loaded 2-core machine.
const ACT_WITHIN: Duration = Duration::from_secs(15);
/// How long past the instant the operator would act at the tests watch for a write that must
/// not come.
const MARGIN: SignedDuration = SignedDuration::from_secs(20);
/// Audit and wall-clock timestamps come from one machine; this absorbs their rounding.
const TOLERANCE: SignedDuration = SignedDuration::from_millis(500);

fn note(event: &Event) -> String {
    event.note.clone().unwrap_or_default()
}

/// Fails if the operator wrote to the pod `name`, or if the pod with this UID is gone.
async fn untouched(cluster: &Cluster, env: &TestEnv, name: &str, pod_uid: &str) -> Result<()> {
    let writes = cluster.operator_pod_writes(&env.namespace, Some(name))?;
    if let Some(first) = writes.first() {
        let at = first.received.map(|t| t.to_string()).unwrap_or_default();
        bail!("the operator sent a {} of pod {name} at {at}: {writes:?}", first.verb);
    }
    match env.pods().get_opt(name).await? {
        Some(p) if uid(&p) == pod_uid => Ok(()),
        _ => bail!("pod {name} ({pod_uid}) is gone, without a write of the operator"),
    }
}

/// Waits until the pod with this UID is gone; then checks the operator sent exactly one write
/// to it, a DELETE, and returns when the API server received it.
async fn released_by_one_delete(
    cluster: &Cluster,
    env: &TestEnv,
    name: &str,
    pod_uid: &str,
    timeout: Duration,
) -> Result<Timestamp> {
    wait_for(&format!("pod {name} ({pod_uid}) to be gone"), timeout, || async move {
        let p = env.pods().get_opt(name).await?;
        Ok((p.as_ref().map(uid).as_deref() != Some(pod_uid)).then_some(()))
    })
    .await?;
    // The audit entry is written after the answer: wait for the DELETE's first.
    cluster.await_operator_pod_deletes(&env.namespace, name).await?;
    let writes = cluster.operator_pod_writes(&env.namespace, Some(name))?;
    ensure!(
        AuditEntry::is_release(&writes),
        "expected the status and one DELETE of pod {name} by the operator, no other write: \
         {writes:?}"
    );
    writes[1].received.context("audit entry without requestReceivedTimestamp")
}

/// Runs `kube-remediator plan -o json` (admin kubeconfig) for this test's policy; returns the
/// policy's entry.
async fn run_plan(cluster: &Cluster, env: &TestEnv) -> Result<Value> {
    let mut cmd = Command::new(binary());
    cmd.args(["plan", "-o", "json", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .arg("--policy-selector")
        .arg(format!("{TEST_LABEL}={}", env.name));
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    ensure!(out.status.success(), "plan failed: {}", String::from_utf8_lossy(&out.stderr));
    let plan: Value =
        serde_json::from_slice(&out.stdout).context("plan -o json printed no JSON")?;
    Ok(plan[0].clone())
}

/// Merges `patch` into this test's policy spec.
async fn patch_policy(env: &TestEnv, patch: Value) -> Result<()> {
    let patch = json!({ "spec": patch });
    env.policies()
        .patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("patching the policy")?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Live nodes.

/// A StatefulSet `db` of one pod pinned to the live `node`, and a bare pod `plain` bound to it,
/// both reported running by the test (their kubelet). Returns db-0.
async fn db_and_plain_on(env: &TestEnv, node: &str) -> Result<Pod> {
    let sts = stateful_set("db", 1, json!({ HOSTNAME_LABEL: node }))?;
    env.api::<StatefulSet>().create(&PostParams::default(), &sts).await?;
    let db = wait_for("db-0 bound to the live node", Duration::from_secs(60), || async {
        let p = env.pods().get_opt("db-0").await?;
        Ok(p.filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)))
    })
    .await?;
    env.create_bound_pod("plain", node).await?;
    env.write_pod_status("db-0", true).await?;
    env.write_pod_status("plain", true).await?;
    Ok(db)
}

/// On a live node, under `liveNodeStuck: {delayAfterGrace: 5s, forceDeleteAfter: 10s}` in
/// Enforce and the default `requireFencingFor` (StatefulSet, ReadWriteOnce): the StatefulSet
/// pod db-0 and the bare pod `plain` are deleted (grace 1 s) and stay Terminating, nothing
/// finalizing them.
///
/// - `plain` is force-deleted once forceDeleteAfter has passed (the control: the policy does
///   release pods on this node), by one DELETE;
/// - db-0 is not, until 20 s past that instant: no write of the operator to it (audit log). It
///   is held for want of fencing and says so: a `NeedsFencing` Event on it, the reason in its
///   `StuckTerminating` Event, and `plan` lists it as not acted on with code `NeedsFencing`;
/// - once the policy sets `liveNodeStuck.forceDeleteUnfenced: true`, db-0 is force-deleted, by
///   one DELETE.
async fn a_pod_that_needs_fencing_stays_on_a_live_node(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const FORCE_DELETE_AFTER: i64 = 10;
    let (node, _kubelet) = env.add_live_node_without_kubelet("live").await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "liveNodeStuck": {
            "delayAfterGrace": format!("{DELAY}s"),
            "forceDeleteAfter": format!("{FORCE_DELETE_AFTER}s"),
        },
    }))
    .await?;
    let _op = Operator::start(cluster, env).await?;
    let db = db_and_plain_on(env, &node).await?;
    let db_uid = uid(&db);

    // The operator cannot have seen them Terminating before this instant: each is due
    // forceDeleteAfter after its grace period, from here at the earliest.
    let deleted = Timestamp::now();
    let plain = env.delete_gracefully("plain", GRACE as u32).await?;
    let plain_uid = uid(&plain);
    env.delete_gracefully("db-0", GRACE as u32).await?;
    let due = deleted + secs(GRACE + FORCE_DELETE_AFTER);

    // The control: the bare pod is released, not before forceDeleteAfter (its deletionTimestamp
    // has whole seconds, the earlier bound).
    let received =
        released_by_one_delete(cluster, env, "plain", &plain_uid, until(due) + ACT_WITHIN)
            .await
            .context("the control: a bare pod stuck on the live node")?;
    let stamp = plain.metadata.deletion_timestamp.as_ref().context("plain not Terminating")?.0;
    let earliest = stamp + secs(FORCE_DELETE_AFTER) - TOLERANCE;
    ensure!(received >= earliest, "plain force-deleted at {received}, before {earliest}");

    // db-0 needs fencing: left alone well past the same instant.
    holds_for(
        "db-0 (a StatefulSet pod) to stay on the live node without forceDeleteUnfenced",
        until(due + MARGIN),
        || untouched(cluster, env, "db-0", &db_uid),
    )
    .await?;
    // Said once, on the pod, by the operator; and in its report of the stuck pod.
    let events = env.wait_event("Pod", "db-0", "NeedsFencing", ACT_WITHIN).await?;
    ensure!(events.len() == 1, "{} NeedsFencing Events on db-0: {events:?}", events.len());
    let stuck = env.wait_event("Pod", "db-0", "StuckTerminating", ACT_WITHIN).await?;
    ensure!(
        stuck.iter().any(|e| note(e).contains("fencing")),
        "the StuckTerminating Event of db-0 does not say it needs fencing: {:?}",
        stuck.iter().map(note).collect::<Vec<_>>()
    );
    // `plan` times the pod from its own listing (it watches for 12 s, more than the grace
    // period and delayAfterGrace), so it reaches the same verdict as the operator.
    let plan = run_plan(cluster, env).await?;
    let waiting = plan["notActing"].as_array().cloned().unwrap_or_default();
    ensure!(
        waiting.iter().any(|w| w["pod"] == "db-0" && w["code"] == "NeedsFencing"),
        "plan does not say db-0 needs fencing: {plan:#}"
    );
    let actions = plan["actions"].as_array().cloned().unwrap_or_default();
    ensure!(!actions.iter().any(|a| a["pod"] == "db-0"), "plan would release db-0: {plan:#}");

    // The policy's explicit opt-in releases it. (A CRD without the field prunes it: the pod
    // then stays and the wait below fails.)
    let opted = Timestamp::now();
    patch_policy(env, json!({ "liveNodeStuck": { "forceDeleteUnfenced": true } })).await?;
    released_by_one_delete(cluster, env, "db-0", &db_uid, ACT_WITHIN)
        .await
        .context("db-0 once the policy sets liveNodeStuck.forceDeleteUnfenced")?;
    eprintln!(
        "[{}] plain released {:.2}s after its due instant; db-0 held ({}), released {:.1}s after \
         forceDeleteUnfenced",
        env.name,
        received.duration_since(due).as_secs_f64(),
        note(&events[0]),
        Timestamp::now().duration_since(opted).as_secs_f64()
    );
    Ok(())
}

/// A bare pod on a live node is deleted (grace 1 s) while no operator runs, and stays
/// Terminating. 30 s later, when its `deletionTimestamp` is 29 s past (more than the policy's
/// `forceDeleteAfter` of 20 s), the operator starts, in Enforce. It first sees the pod now: the
/// pod is due 21 s (grace + forceDeleteAfter) after the operator's start, and the operator
/// writes nothing to it before (audit log), then force-deletes it, by one DELETE.
async fn time_on_a_live_node_starts_when_we_saw_the_pod(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const FORCE_DELETE_AFTER: i64 = 20;
    let (node, _kubelet) = env.add_live_node_without_kubelet("live").await?;
    env.create_bound_pod("early", &node).await?;
    env.write_pod_status("early", true).await?;
    let pod = env.delete_gracefully("early", GRACE as u32).await?;
    let pod_uid = uid(&pod);
    let deletion = pod.metadata.deletion_timestamp.as_ref().context("not Terminating")?.0;
    env.create_policy(json!({
        "mode": "Enforce",
        "liveNodeStuck": {
            "delayAfterGrace": format!("{DELAY}s"),
            "forceDeleteAfter": format!("{FORCE_DELETE_AFTER}s"),
        },
    }))
    .await?;
    // Long past, by the API server's timestamp, before any operator runs.
    let past = deletion + secs(FORCE_DELETE_AFTER + 10);
    holds_for("the pod to stay Terminating, no operator running", until(past), || async {
        let p = env.pods().get_opt("early").await?;
        ensure!(p.as_ref().map(uid).as_deref() == Some(pod_uid.as_str()), "early is gone");
        Ok(())
    })
    .await?;

    let started = Timestamp::now();
    let _op = Operator::start(cluster, env).await?;
    let ready = Timestamp::now();
    let due = started + secs(GRACE + FORCE_DELETE_AFTER);
    holds_for(
        "the pod to stay until forceDeleteAfter has passed since the operator first saw it",
        until(due - TOLERANCE),
        || untouched(cluster, env, "early", &pod_uid),
    )
    .await?;
    let latest = ready + secs(GRACE + FORCE_DELETE_AFTER);
    let received =
        released_by_one_delete(cluster, env, "early", &pod_uid, until(latest) + ACT_WITHIN)
            .await
            .context("the pod, forceDeleteAfter after the operator first saw it")?;
    ensure!(received >= due - TOLERANCE, "force-deleted at {received}, before {due}");
    eprintln!(
        "[{}] deletionTimestamp {:.1}s before the operator started; force-deleted {:.1}s after \
         its start (grace + forceDeleteAfter = {}s)",
        env.name,
        started.duration_since(deletion).as_secs_f64(),
        received.duration_since(started).as_secs_f64(),
        GRACE + FORCE_DELETE_AFTER
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A Node deleted by someone else, then created again.

/// The Enforce policy of `kl-node-recreated`: every node (an empty nodeSelector, so that the pod
/// is in scope whatever is known of its deleted Node's labels), no delay after the grace period,
/// and the storm guard out of the way (the other tests on this control plane kill nodes
/// meanwhile, and every node counts here); the namespace stays the test's own.
fn every_node_policy() -> Value {
    json!({
        "mode": "Enforce",
        "nodeSelector": {},
        "deadNode": { "notReadyFor": "10s", "leaseStaleFor": "40s" },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": "100%" },
    })
}

/// Lets the operator held on the pod `uid` go on to its last look.
fn release(hold_dir: &Path, uid: &str) -> Result<()> {
    std::fs::write(hold_dir.join(format!("{uid}.release")), b"")
        .with_context(|| format!("releasing the hold of {uid}"))
}

/// A kwok node dies (its kubelet stops) and its pod `victim` is deleted (grace 1 s): it stays
/// Terminating. Someone deletes the node's Lease and its Node object: a Node deleted by someone
/// else is dead (and fenced) without a Lease, so the operator (Enforce, no delay after the
/// grace period) plans to force-delete the pod, and the test build's hook holds it right before
/// its last look. Meanwhile a Node of the same name is created again (a new UID, no Lease, no
/// status: a machine joining under the old name, not the dead one). Released, the operator must
/// not delete the pod: no DELETE for 20 s (audit log), the pod keeps its UID, and the skip is
/// recorded (`ForceDeleteSkipped` Event on the pod, a `Skipped` status record naming the Node).
///
/// PodGC (on here) force-deletes the pods of a deleted Node only after it has been missing for
/// 40 s; the Node is back within a few seconds of its deletion, so PodGC does not race the
/// operator.
async fn a_node_created_again_after_the_plan_is_not_dead(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let dead = env.add_node("dead").await?;
    running_pod_on(env, "victim", &dead).await?;
    env.create_policy(every_node_policy()).await?;
    let hold_dir = cluster.dir.join(format!("hold-{}", env.name));
    std::fs::create_dir_all(&hold_dir)?;
    let hold_arg = hold_dir.to_str().context("hold directory path is not UTF-8")?;
    let mut op = Operator::start_replica(cluster, env, "", &["--e2e-hold-dir", hold_arg]).await?;
    let pod_uid = uid(&kill_and_strand(env, &dead, "victim").await?);

    // Someone deletes the Lease and the Node (the Lease first, so that the last look compares
    // no Lease with no Lease and cannot skip for a Lease).
    let old = env.nodes().get(&dead).await?;
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    match leases.delete(&dead, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e).context("deleting the dead node's Lease"),
    }
    env.nodes().delete(&dead, &DeleteParams::default()).await?;
    wait_for("the Node and its Lease gone", Duration::from_secs(30), || async {
        let gone =
            env.nodes().get_opt(&dead).await?.is_none() && leases.get_opt(&dead).await?.is_none();
        Ok(gone.then_some(()))
    })
    .await?;

    let held = hold_dir.join(format!("{pod_uid}.held"));
    wait_for("the operator to hold before its last look", Duration::from_secs(60), || async {
        Ok(held.exists().then_some(()))
    })
    .await
    .context("the operator should plan to release a pod whose Node someone deleted")?;
    ensure!(
        cluster.operator_pod_deletes(&env.namespace, "victim")?.is_empty(),
        "the operator deleted victim before its last look"
    );

    // A Node of the same name again: a new UID, no Lease, no status, not managed by kwok.
    let mut labels = old.metadata.labels.clone().unwrap_or_default();
    labels.remove(ALIVE_LABEL);
    let again: Node = serde_json::from_value(json!({
        "metadata": { "name": dead, "labels": labels },
    }))?;
    let again = env.nodes().create(&PostParams::default(), &again).await?;
    let new_uid = again.metadata.uid.clone().unwrap_or_default();
    ensure!(new_uid != old_uid, "the Node created again has the old UID");
    ensure!(leases.get_opt(&dead).await?.is_none(), "a Lease of {dead} exists");
    release(&hold_dir, &pod_uid)?;
    let released = Timestamp::now();

    holds_for(
        "the pod of the Node created again to be left alone",
        Duration::from_secs(20),
        || untouched(cluster, env, "victim", &pod_uid),
    )
    .await?;
    let record = env
        .wait_policy("a Skipped record of victim", Duration::from_secs(10), |s| {
            s.recent_actions
                .iter()
                .find(|a| a.uid == pod_uid && a.result.as_str() == "Skipped")
                .cloned()
        })
        .await?;
    let detail = record.detail.clone().unwrap_or_default();
    ensure!(
        detail.contains("Node") && !detail.contains("Lease"),
        "the Skipped record does not say the Node exists again: {record:?}"
    );
    let events = env.wait_event("Pod", "victim", "ForceDeleteSkipped", ACT_WITHIN).await?;
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    eprintln!(
        "[{}] Node {dead} created again ({old_uid} -> {new_uid}) between the plan and the last \
         look: no DELETE for 20 s after the release at {released}; Skipped: {detail:?}; Event: {}",
        env.name,
        note(&events[0])
    );
    // Leave nothing behind: the operator first, so that it does not see the Node go.
    op.stop();
    let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    env.pods().delete("victim", &now).await?;
    env.nodes().delete(&dead, &DeleteParams::default()).await?;
    Ok(())
}
