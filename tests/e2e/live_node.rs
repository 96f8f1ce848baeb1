//! Field incident 3 with the operator: pods stuck Terminating on a live node (Ready, its kubelet
//! renewing its Lease). The cause is diagnosed and reported (`StuckTerminating` Event, the gauge
//! `kube_remediator_live_node_stuck_pods`, `status.stuckOnLiveNodes`, `plan`); the pod is
//! released only where the policy opts in: allowlisted finalizers removed
//! (`finalizers.removable`), or a force delete after `liveNodeStuck.forceDeleteAfter`, never
//! while a finalizer holds it and never before the pod's own grace period has run out.
//!
//! Two kinds of live node: a kwok node, whose kubelet (kwok) finishes every deleted pod with its
//! final DELETE (grace 0), so that only a finalizer can keep one; and a node this test heartbeats
//! itself (`add_live_node_without_kubelet`), on which nothing finalizes pods and the test writes
//! the pod status a kubelet would. Every write of the operator to a pod is read from the audit
//! log.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::e2e;
use crate::fixtures::{secs, stamped_after, uid, until};
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::{TEST_LABEL, pod_is_ready};
use crate::support::operator::{Operator, binary};
use crate::support::{TestEnv, holds_for, shared_cluster, wait_for};

/// The longest first: `ln-grace-respected` waits out a 120 s grace period.
pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("ln-grace-respected", a_pod_in_its_grace_period_is_not_stuck),
        e2e!(
            "ln-finalizer-reported",
            a_finalizer_nobody_removes_is_reported_then_removed_once_allowed
        ),
        e2e!("ln-finalizer-dry-run", dry_run_records_the_finalizer_removal_and_writes_nothing),
        e2e!("ln-kubelet-not-finishing", kubelet_not_finishing_is_reported_and_released_on_opt_in),
    ]
}

/// `liveNodeStuck.delayAfterGrace` of every test here (the default is 2 minutes).
const DELAY: i64 = 5;
/// The finalizer nobody removes.
const HOLD: &str = "example.com/hold";
/// The volume the kubelet of `ln-kubelet-not-finishing` cannot unmount, as a kubelet names it
/// in `node.status.volumesInUse`.
const VOLUME: &str = "kubernetes.io/csi/csi.example.com^vol-data";
/// How long after its threshold an action may come at the latest: the operator requeues at the
/// exact instant; this covers a loaded 2-core machine.
const ACT_WITHIN: Duration = Duration::from_secs(10);

/// The pod's deletionTimestamp.
fn deletion_timestamp(pod: &Pod) -> Result<Timestamp> {
    Ok(pod.metadata.deletion_timestamp.as_ref().context("pod not Terminating")?.0)
}

/// Fails if the operator wrote to the pod, or if the pod with this UID is gone.
async fn untouched(cluster: &Cluster, env: &TestEnv, name: &str, pod_uid: &str) -> Result<()> {
    let writes = cluster.operator_pod_writes(&env.namespace, Some(name))?;
    ensure!(writes.is_empty(), "the operator wrote to pod {name}: {writes:?}");
    match env.pods().get_opt(name).await? {
        Some(p) if uid(&p) == pod_uid => Ok(()),
        _ => bail!("pod {name} ({pod_uid}) is gone"),
    }
}

/// Waits until the pod with this UID is gone.
async fn wait_gone(env: &TestEnv, name: &str, pod_uid: &str, timeout: Duration) -> Result<()> {
    wait_for(&format!("pod {name} ({pod_uid}) to be gone"), timeout, || async move {
        let p = env.pods().get_opt(name).await?;
        Ok((p.as_ref().map(uid).as_deref() != Some(pod_uid)).then_some(()))
    })
    .await
}

fn note(event: &Event) -> String {
    event.note.clone().unwrap_or_default()
}

/// When the Event was emitted.
fn event_time(event: &Event) -> Option<Timestamp> {
    event.event_time.as_ref().map(|t| t.0)
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

/// The entries of the plan's list `key` about the pod `name`.
fn plan_entries(plan: &Value, key: &str, name: &str) -> Vec<Value> {
    let list = plan[key].as_array().cloned().unwrap_or_default();
    list.into_iter().filter(|e| e["pod"] == name).collect()
}

/// The value of the gauge `kube_remediator_live_node_stuck_pods` for this test's policy.
async fn stuck_gauge(op: &Operator, env: &TestEnv, cause: &str) -> Result<Option<f64>> {
    op.metric("kube_remediator_live_node_stuck_pods", &[("policy", &env.name), ("cause", cause)])
        .await
}

/// Waits until the gauge reads `value` for `cause`.
async fn wait_gauge(op: &Operator, env: &TestEnv, cause: &str, value: f64) -> Result<()> {
    wait_for(&format!("live_node_stuck_pods{{cause={cause}}} = {value}"), ACT_WITHIN, || async {
        Ok((stuck_gauge(op, env, cause).await? == Some(value)).then_some(()))
    })
    .await
}

/// Waits until this test's policy no longer lists the (gone) pod `name` in
/// `status.stuckOnLiveNodes`; on a timeout, says what the status still lists.
async fn wait_unlisted(env: &TestEnv, name: &str) -> Result<()> {
    let what = format!("pod {name} gone from status.stuckOnLiveNodes");
    let unlisted = env
        .wait_policy(&what, ACT_WITHIN, |s| {
            s.stuck_on_live_nodes.iter().all(|e| e.name != name).then_some(())
        })
        .await;
    if let Err(e) = unlisted {
        let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
        let gone = env.pods().get_opt(name).await?.is_none();
        bail!(
            "{e:#}: the pod is gone ({gone}), the status still lists {:?} (observedGeneration \
             {:?}, recentActions {:?})",
            status.stuck_on_live_nodes,
            status.observed_generation,
            status.recent_actions.iter().map(|a| (&a.name, a.action, a.result)).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// Creates the bare pod `name` on `node` with the finalizer [`HOLD`] and a 1 s grace period.
pub(crate) async fn create_held_pod(env: &TestEnv, name: &str, node: &str) -> Result<Pod> {
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
    wait_for(&format!("pod {name} to run on {node}"), Duration::from_secs(30), || async move {
        Ok(env.pods().get_opt(name).await?.filter(pod_is_ready))
    })
    .await
}

/// Deletes the pod `name` on a kwok node with a 1 s grace period and waits until kwok, playing
/// its kubelet, has finished it: its final DELETE (grace 0) leaves `deletionGracePeriodSeconds`
/// at 0, and only the finalizer keeps the object. Returns the pod then.
pub(crate) async fn delete_and_wait_finished(env: &TestEnv, name: &str) -> Result<Pod> {
    env.delete_gracefully(name, 1).await?;
    wait_for(&format!("kwok to finish pod {name}"), Duration::from_secs(30), || async move {
        let p = env.pods().get_opt(name).await?;
        Ok(p.filter(|p| p.metadata.deletion_grace_period_seconds == Some(0)))
    })
    .await
}

/// Removes every finalizer of the pod `name`, if it is still there (the end of a test, also a
/// failed one, so that nothing keeps the namespace).
async fn release_pod(env: &TestEnv, name: &str) -> Result<()> {
    if env.pods().get_opt(name).await?.is_none() {
        return Ok(());
    }
    let patch = json!({ "metadata": { "finalizers": null } });
    env.pods().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Runs `body`, then removes the finalizers of `pod` whatever the outcome.
pub(crate) async fn then_release(
    env: &TestEnv,
    pod: &str,
    body: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    let outcome = body.await;
    let released = release_pod(env, pod).await;
    outcome.and(released)
}

/// A kubelet-formatted timestamp.
fn stamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Writes the pod status a kubelet reports for a pod whose one container `app` runs.
async fn report_running(env: &TestEnv, name: &str) -> Result<()> {
    let now = stamp(Timestamp::now());
    let condition = |t: &str| json!({ "type": t, "status": "True", "lastTransitionTime": now });
    let conditions = ["PodScheduled", "Initialized", "ContainersReady", "Ready"].map(condition);
    let status = json!({ "status": {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "startTime": now,
        "conditions": conditions,
        "containerStatuses": [{
            "name": "app", "image": "registry.invalid/app:v1", "imageID": "",
            "ready": true, "started": true, "restartCount": 0,
            "state": { "running": { "startedAt": now } },
        }],
    }});
    env.pods().patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

/// Writes the pod status a kubelet (1.27 and later) reports once it has stopped every container
/// of a deleted pod: the container terminated (exit 0), the pod in its terminal phase
/// (Succeeded), not Ready. The kubelet sends the final DELETE only later, once the pod's
/// resources are reclaimed (volumes unmounted, cgroup removed).
async fn report_stopped(env: &TestEnv, name: &str) -> Result<()> {
    let pod = env.pods().get(name).await?;
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or_else(|| stamp(Timestamp::now()), |t| stamp(t.0));
    let now = stamp(Timestamp::now());
    let condition = |(t, s): (&str, &str)| {
        let mut c = json!({ "type": t, "status": s, "lastTransitionTime": now });
        if s == "False" {
            c["reason"] = json!("PodCompleted");
        }
        c
    };
    let conditions = [
        ("PodScheduled", "True"),
        ("Initialized", "True"),
        ("ContainersReady", "False"),
        ("Ready", "False"),
    ]
    .map(condition);
    let status = json!({ "status": {
        "phase": "Succeeded",
        "conditions": conditions,
        "containerStatuses": [{
            "name": "app", "image": "registry.invalid/app:v1", "imageID": "",
            "ready": false, "started": false, "restartCount": 0,
            "state": { "terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now,
            } },
        }],
    }});
    env.pods().patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

/// Field incident 3, a finalizer nobody removes: a pod on a healthy kwok node is deleted, kwok
/// finishes it (its final DELETE, grace 0), and the finalizer `example.com/hold` keeps it. The
/// policy (Enforce) opts in to force deletes after 5 s, which must not matter: a pod a finalizer
/// holds is never force-deleted (the delete would not remove it). It is reported with cause
/// Finalizers, the finalizer named (one `StuckTerminating` Event, the gauge, status, `plan`),
/// and for 20 s the operator neither deletes nor patches it (audit log). Control: once the policy
/// lists the finalizer as removable, the operator removes it (one PATCH, audit log;
/// `RemovedFinalizers` Event and status record) and the pod is gone, which shows the 20 s of
/// nothing were the policy's choice and not a blind operator. Its report ends with it: the gauge
/// back to 0, the entry gone from status.stuckOnLiveNodes.
async fn a_finalizer_nobody_removes_is_reported_then_removed_once_allowed(
    env: &TestEnv,
) -> Result<()> {
    then_release(env, "held", finalizer_reported_then_removed(env)).await
}

async fn finalizer_reported_then_removed(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "liveNodeStuck": { "delayAfterGrace": format!("{DELAY}s"), "forceDeleteAfter": format!("{DELAY}s") },
    }))
    .await?;
    let op = Operator::start(cluster, env).await?;
    let node = env.healthy_node.clone();
    let pod_uid = uid(&create_held_pod(env, "held", &node).await?);
    let finished = delete_and_wait_finished(env, "held").await?;
    let stuck_at = deletion_timestamp(&finished)? + secs(DELAY);

    // Reported: the Event, naming the finalizer.
    let events =
        env.wait_event("Pod", "held", "StuckTerminating", until(stuck_at) + ACT_WITHIN).await?;
    let reported = event_time(&events[0]).context("StuckTerminating Event without eventTime")?;
    let text = note(&events[0]);
    ensure!(
        text.contains("(Finalizers)") && text.contains(HOLD) && text.contains(&node),
        "the StuckTerminating Event does not name the cause and the finalizer: {text}"
    );
    ensure!(reported >= stuck_at, "reported at {reported}, before it was stuck ({stuck_at})");
    // The status and the gauge.
    let entry = env
        .wait_policy("held in status.stuckOnLiveNodes", ACT_WITHIN, |s| {
            s.stuck_on_live_nodes.iter().find(|e| e.name == "held").cloned()
        })
        .await?;
    ensure!(
        entry.cause == "Finalizers"
            && entry.detail.contains(HOLD)
            && entry.node == node
            && entry.namespace == env.namespace
            && stamped_after(entry.since.0, stuck_at),
        "unexpected status entry {entry:?} (stuck since {stuck_at})"
    );
    wait_gauge(&op, env, "Finalizers", 1.0).await?;
    // Most specific cause first: its container still shows running, but the finalizer is why.
    let running = stuck_gauge(&op, env, "ContainersRunning").await?;
    ensure!(running == Some(0.0), "live_node_stuck_pods{{cause=ContainersRunning}} = {running:?}");
    // `plan` says the same, and that the finalizer holds it: no action.
    let plan = run_plan(cluster, env).await?;
    let listed = plan_entries(&plan, "stuckOnLiveNodes", "held");
    ensure!(
        listed.len() == 1
            && listed[0]["cause"] == "Finalizers"
            && listed[0]["node"] == node.as_str()
            && listed[0]["detail"].as_str().is_some_and(|d| d.contains(HOLD)),
        "plan's stuckOnLiveNodes does not list held: {plan:#}"
    );
    let waiting = plan_entries(&plan, "notActing", "held");
    ensure!(
        waiting.len() == 1 && waiting[0]["code"] == "HeldByFinalizers",
        "plan does not say a finalizer holds it: {plan:#}"
    );
    ensure!(plan_entries(&plan, "actions", "held").is_empty(), "plan would act: {plan:#}");
    eprintln!(
        "[ln-finalizer-reported] reported {:.2}s after it was stuck; plan: {}",
        reported.duration_since(stuck_at).as_secs_f64(),
        waiting[0]["reason"]
    );

    // Held by a finalizer not allowlisted: never deleted nor patched, although forceDeleteAfter
    // passed long ago.
    holds_for("the held pod to be left alone", Duration::from_secs(20), || {
        untouched(cluster, env, "held", &pod_uid)
    })
    .await?;
    let events = env.events_about("Pod", "held", "StuckTerminating").await?;
    ensure!(events.len() == 1, "expected one StuckTerminating Event: {events:?}");

    // Control: the finalizer made removable, the operator removes it and the pod is gone.
    let allowed = Timestamp::now();
    let patch = json!({ "spec": { "finalizers": { "removable": [HOLD], "removeAfter": "0s" } } });
    env.policies().patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_gone(env, "held", &pod_uid, ACT_WITHIN).await?;
    let writes = cluster.operator_pod_writes(&env.namespace, Some("held"))?;
    ensure!(
        writes.len() == 1 && writes[0].verb == "patch" && writes[0].subresource.is_none(),
        "expected one PATCH of held by the operator, and nothing else: {writes:?}"
    );
    let patched = writes[0].received.context("audit entry without requestReceivedTimestamp")?;
    let events = env.wait_event("Pod", "held", "RemovedFinalizers", ACT_WITHIN).await?;
    ensure!(note(&events[0]).contains(HOLD), "RemovedFinalizers: {}", note(&events[0]));
    let record = env
        .wait_policy("a RemoveFinalizers record in the status", ACT_WITHIN, |s| {
            s.recent_actions.iter().find(|a| a.uid == pod_uid).cloned()
        })
        .await?;
    ensure!(
        record.action.as_str() == "RemoveFinalizers"
            && record.result.as_str() == "Done"
            && record.mode.as_str() == "Enforce",
        "unexpected record {record:?}"
    );
    let deletes = cluster.operator_pod_deletes(&env.namespace, "held")?;
    ensure!(deletes.is_empty(), "the operator sent a DELETE of held: {deletes:?}");
    // The report ends with the pod.
    wait_gauge(&op, env, "Finalizers", 0.0).await?;
    wait_unlisted(env, "held").await?;
    eprintln!(
        "[ln-finalizer-reported] finalizer removed (PATCH received) {:.2}s after the policy allowed it",
        patched.duration_since(allowed).as_secs_f64()
    );
    Ok(())
}

/// DryRun with the finalizer allowlisted: the same decision as Enforce is recorded, never
/// carried out. The pod held by `example.com/hold` on a kwok node gets a `WouldRemoveFinalizers`
/// Event and a WouldAct status record, no earlier than it is stuck, `plan` lists the would-be
/// removal, and the operator writes nothing to the pod (audit log, 5 s past the record).
/// Control: switched to Enforce, the policy removes the finalizer at once (one PATCH).
async fn dry_run_records_the_finalizer_removal_and_writes_nothing(env: &TestEnv) -> Result<()> {
    then_release(env, "held", finalizer_dry_run(env)).await
}

async fn finalizer_dry_run(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    env.create_policy(json!({
        "mode": "DryRun",
        "liveNodeStuck": { "delayAfterGrace": format!("{DELAY}s") },
        "finalizers": { "removable": [HOLD], "removeAfter": "0s" },
    }))
    .await?;
    let _op = Operator::start(cluster, env).await?;
    let pod_uid = uid(&create_held_pod(env, "held", &env.healthy_node).await?);
    let finished = delete_and_wait_finished(env, "held").await?;
    let stuck_at = deletion_timestamp(&finished)? + secs(DELAY);

    let events = env
        .wait_event("Pod", "held", "WouldRemoveFinalizers", until(stuck_at) + ACT_WITHIN)
        .await?;
    ensure!(note(&events[0]).contains(HOLD), "WouldRemoveFinalizers: {}", note(&events[0]));
    let recorded = event_time(&events[0]).context("WouldRemoveFinalizers without eventTime")?;
    ensure!(recorded >= stuck_at, "recorded at {recorded}, before it was stuck ({stuck_at})");
    let record = env
        .wait_policy("a WouldAct record in the status", ACT_WITHIN, |s| {
            s.recent_actions.iter().find(|a| a.uid == pod_uid).cloned()
        })
        .await?;
    ensure!(
        record.action.as_str() == "RemoveFinalizers"
            && record.result.as_str() == "WouldAct"
            && record.mode.as_str() == "DryRun",
        "unexpected record {record:?}"
    );
    // Status times have a resolution of one second.
    ensure!(
        record.time.0.as_second() >= stuck_at.as_second(),
        "recorded at {} before the pod was stuck ({stuck_at})",
        record.time.0
    );
    let plan = run_plan(cluster, env).await?;
    let actions = plan_entries(&plan, "actions", "held");
    ensure!(
        actions.len() == 1
            && actions[0]["action"] == "RemoveFinalizers"
            && actions[0]["finalizers"] == json!([HOLD]),
        "plan lacks the would-be removal: {plan:#}"
    );
    holds_for("DryRun to write nothing to the pod", Duration::from_secs(5), || {
        untouched(cluster, env, "held", &pod_uid)
    })
    .await?;
    // Recorded once, not at every reconcile.
    let status = env.policies().get_status(&env.name).await?.status.unwrap_or_default();
    let records = status.recent_actions.iter().filter(|a| a.uid == pod_uid).count();
    ensure!(records == 1, "{records} records of the would-be removal, want 1: {status:?}");

    // Control: Enforce removes it.
    let flipped = Timestamp::now();
    let patch = json!({ "spec": { "mode": "Enforce" } });
    env.policies().patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_gone(env, "held", &pod_uid, ACT_WITHIN).await?;
    // The API server writes a request's audit entry once its response is sent: the pod can be
    // seen gone a moment before its PATCH is in the log.
    let writes = wait_for("the operator's PATCH of held in the audit log", ACT_WITHIN, || async {
        let writes = cluster.operator_pod_writes(&env.namespace, Some("held"))?;
        Ok((!writes.is_empty()).then_some(writes))
    })
    .await?;
    ensure!(
        writes.len() == 1 && writes[0].verb == "patch",
        "expected one PATCH of held once in Enforce: {writes:?}"
    );
    eprintln!(
        "[ln-finalizer-dry-run] recorded {:.2}s after it was stuck; Enforce removed the finalizer \
         {:.2}s after the switch",
        recorded.duration_since(stuck_at).as_secs_f64(),
        Timestamp::now().duration_since(flipped).as_secs_f64()
    );
    Ok(())
}

/// Field incident 3 as reported: the kubelet stopped the containers, but a volume does not
/// unmount, so its "resources reclaimed" check never passes and it never sends the final DELETE.
/// Played on a node this test heartbeats (Ready, Lease renewed every 2 s) where nothing finalizes
/// pods: the test writes the status a 1.27+ kubelet leaves (container terminated with exit 0,
/// phase Succeeded, not Ready) and the node's `status.volumesInUse` still naming the volume.
/// What is faithful is what the API shows, which is all the operator reads; what is not: no
/// volume manager retries the unmount, the statuses are written by the test's admin identity
/// rather than the node's, and the pod spec references no volume (the kubelet's report is
/// per node).
///
/// Shows: reported with cause KubeletNotFinishing, naming the volume (Event, status, gauge);
/// without `forceDeleteAfter` never released (no DELETE, nor any write to the pod, until 15 s
/// past the instant it became stuck); once the policy sets it, force-deleted (the pod vanishes
/// at once: grace 0, on a node where no kubelet would finish a graceful delete) by one DELETE
/// of the operator, not before `deletionTimestamp + forceDeleteAfter` and soon after; its report
/// ends with it (gauge back to 0, status entry gone).
async fn kubelet_not_finishing_is_reported_and_released_on_opt_in(env: &TestEnv) -> Result<()> {
    const FORCE_DELETE_AFTER: i64 = 30;
    let cluster = shared_cluster().await?;
    let (node, _kubelet) = env.add_live_node_without_kubelet("live").await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "liveNodeStuck": { "delayAfterGrace": format!("{DELAY}s") },
    }))
    .await?;
    let op = Operator::start(cluster, env).await?;
    env.create_bound_pod("unmounting", &node).await?;
    report_running(env, "unmounting").await?;
    let volumes = json!({ "status": { "volumesInUse": [VOLUME] } });
    env.nodes().patch_status(&node, &PatchParams::default(), &Patch::Merge(&volumes)).await?;
    let pod = env.delete_gracefully("unmounting", 1).await?;
    report_stopped(env, "unmounting").await?;
    let pod_uid = uid(&pod);
    let deleted_at = deletion_timestamp(&pod)?;
    let stuck_at = deleted_at + secs(DELAY);

    let events = env
        .wait_event("Pod", "unmounting", "StuckTerminating", until(stuck_at) + ACT_WITHIN)
        .await?;
    let text = note(&events[0]);
    ensure!(
        text.contains("(KubeletNotFinishing)") && text.contains(VOLUME),
        "the StuckTerminating Event does not name the cause and the volume: {text}"
    );
    let reported = event_time(&events[0]).context("StuckTerminating Event without eventTime")?;
    ensure!(reported >= stuck_at, "reported at {reported}, before it was stuck ({stuck_at})");
    let entry = env
        .wait_policy("unmounting in status.stuckOnLiveNodes", ACT_WITHIN, |s| {
            s.stuck_on_live_nodes.iter().find(|e| e.name == "unmounting").cloned()
        })
        .await?;
    ensure!(
        entry.cause == "KubeletNotFinishing"
            && entry.detail.contains(VOLUME)
            && entry.node == node
            && stamped_after(entry.since.0, stuck_at),
        "unexpected status entry {entry:?} (stuck since {stuck_at})"
    );
    wait_gauge(&op, env, "KubeletNotFinishing", 1.0).await?;

    // Reported only: no write to the pod until 15 s past the instant it became stuck.
    holds_for(
        "the stuck pod to be left alone without forceDeleteAfter",
        until(stuck_at + secs(15)),
        || untouched(cluster, env, "unmounting", &pod_uid),
    )
    .await?;
    // The test's heartbeats patched the node's status meanwhile; the volume is still reported.
    let n = env.nodes().get(&node).await?;
    let in_use = n.status.and_then(|s| s.volumes_in_use).unwrap_or_default();
    ensure!(in_use == [VOLUME], "node.status.volumesInUse changed: {in_use:?}");

    // Opt in: released at deletionTimestamp + forceDeleteAfter, not before.
    let due = deleted_at + secs(FORCE_DELETE_AFTER);
    ensure!(until(due) > Duration::from_secs(3), "too late to opt in before {due}");
    let patch = json!({ "spec": { "liveNodeStuck": { "forceDeleteAfter": format!("{FORCE_DELETE_AFTER}s") } } });
    env.policies().patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    holds_for(
        "the stuck pod to stay until forceDeleteAfter",
        until(due).saturating_sub(Duration::from_millis(500)),
        || untouched(cluster, env, "unmounting", &pod_uid),
    )
    .await?;
    wait_gone(env, "unmounting", &pod_uid, until(due) + ACT_WITHIN).await?;
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, "unmounting").await?;
    let writes = cluster.operator_pod_writes(&env.namespace, Some("unmounting"))?;
    ensure!(
        deletes.len() == 1 && AuditEntry::is_release(&writes),
        "expected the pod's status and one DELETE by the operator, no other write: {writes:?}"
    );
    let received = deletes[0].received.context("audit entry without requestReceivedTimestamp")?;
    let late = received.duration_since(due);
    eprintln!(
        "[ln-kubelet-not-finishing] reported {:.2}s after it was stuck; DELETE received {:.3}s \
         after deletionTimestamp + forceDeleteAfter ({FORCE_DELETE_AFTER}s)",
        reported.duration_since(stuck_at).as_secs_f64(),
        late.as_secs_f64()
    );
    ensure!(received >= due, "force-deleted at {received}, before {due}");
    let events = env.wait_event("Pod", "unmounting", "ForceDeleted", ACT_WITHIN).await?;
    ensure!(
        note(&events[0]).contains("forceDeleteAfter"),
        "the ForceDeleted Event does not say why: {}",
        note(&events[0])
    );
    let record = env
        .wait_policy("a ForceDelete record in the status", ACT_WITHIN, |s| {
            s.recent_actions.iter().find(|a| a.uid == pod_uid).cloned()
        })
        .await?;
    ensure!(
        record.action.as_str() == "ForceDelete" && record.result.as_str() == "Done",
        "unexpected record {record:?}"
    );
    // The report ends with the pod.
    wait_gauge(&op, env, "KubeletNotFinishing", 0.0).await?;
    wait_unlisted(env, "unmounting").await?;
    Ok(())
}

/// A pod's own grace period is respected on a live node: a pod with a 120 s grace period (a
/// slow shutdown), its container still reported running on a node this test heartbeats, is
/// deleted; the policy opts in to force deletes 5 s after the deletionTimestamp (deletion +
/// 120 s). For 20 s after the deletion it is not stuck: no StuckTerminating Event, not in
/// status.stuckOnLiveNodes, not in `plan`'s stuckOnLiveNodes, whose next deadline is not within
/// the grace period; and the operator writes nothing to it until deletionTimestamp + 5 s (audit
/// log). Then it is reported (ContainersRunning) and force-deleted (one DELETE), not before
/// that instant and soon after: the control showing that the wait was the grace period.
async fn a_pod_in_its_grace_period_is_not_stuck(env: &TestEnv) -> Result<()> {
    const GRACE: u32 = 120;
    let cluster = shared_cluster().await?;
    let (node, _kubelet) = env.add_live_node_without_kubelet("live").await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "liveNodeStuck": { "delayAfterGrace": format!("{DELAY}s"), "forceDeleteAfter": format!("{DELAY}s") },
    }))
    .await?;
    let _op = Operator::start(cluster, env).await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "slow", "labels": { "app": "slow", TEST_LABEL: env.name } },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": GRACE,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    report_running(env, "slow").await?;
    let asked = Timestamp::now();
    let pod = env.delete_gracefully("slow", GRACE).await?;
    let pod_uid = uid(&pod);
    let deletion = deletion_timestamp(&pod)?;
    // deletionTimestamp has whole seconds.
    ensure!(
        deletion >= asked + secs(i64::from(GRACE) - 1),
        "deletionTimestamp {deletion} does not carry the {GRACE}s grace period (deleted at {asked})"
    );
    let due = deletion + secs(DELAY);

    // In its grace period: not stuck, nothing written.
    holds_for("the pod in its grace period to be left alone", Duration::from_secs(20), || async {
        untouched(cluster, env, "slow", &pod_uid).await?;
        let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
        ensure!(
            status.stuck_on_live_nodes.is_empty(),
            "reported stuck in its grace period: {:?}",
            status.stuck_on_live_nodes
        );
        Ok(())
    })
    .await?;
    let events = env.events_about("Pod", "slow", "StuckTerminating").await?;
    ensure!(events.is_empty(), "a StuckTerminating Event in its grace period: {events:?}");
    let plan = run_plan(cluster, env).await?;
    ensure!(
        plan_entries(&plan, "stuckOnLiveNodes", "slow").is_empty()
            && plan_entries(&plan, "actions", "slow").is_empty(),
        "plan calls the pod in its grace period stuck: {plan:#}"
    );
    // Nothing changes before the grace period is over (the count of pods past their grace
    // period changes at the deletionTimestamp, the verdict at the stuck instant).
    let next: Option<Timestamp> = plan["nextDeadline"].as_str().and_then(|t| t.parse().ok());
    ensure!(
        next.is_some_and(|t| t >= deletion && t <= due),
        "plan's next deadline {next:?} is not between {deletion} and {due}: {plan:#}"
    );
    let waiting = plan_entries(&plan, "notActing", "slow");
    eprintln!(
        "[ln-grace-respected] 20s after the deletion: plan says {}: {}; next deadline {} \
         (deletionTimestamp {deletion})",
        waiting.first().map_or(Value::Null, |w| w["code"].clone()),
        waiting.first().map_or(Value::Null, |w| w["reason"].clone()),
        plan["nextDeadline"]
    );

    // Until deletionTimestamp + delayAfterGrace, still nothing; then released.
    holds_for(
        "the pod to be left alone until its grace period and the delay are over",
        until(due).saturating_sub(Duration::from_millis(500)),
        || untouched(cluster, env, "slow", &pod_uid),
    )
    .await?;
    wait_gone(env, "slow", &pod_uid, until(due) + ACT_WITHIN).await?;
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, "slow").await?;
    let writes = cluster.operator_pod_writes(&env.namespace, Some("slow"))?;
    ensure!(
        deletes.len() == 1 && AuditEntry::is_release(&writes),
        "expected the pod's status and one DELETE by the operator, no other write: {writes:?}"
    );
    let received = deletes[0].received.context("audit entry without requestReceivedTimestamp")?;
    eprintln!(
        "[ln-grace-respected] DELETE received {:.3}s after deletionTimestamp + {DELAY}s \
         ({:.1}s after the deletion)",
        received.duration_since(due).as_secs_f64(),
        received.duration_since(asked).as_secs_f64()
    );
    ensure!(received >= due, "force-deleted at {received}, before {due}");
    let events = env.wait_event("Pod", "slow", "StuckTerminating", ACT_WITHIN).await?;
    ensure!(
        note(&events[0]).contains("(ContainersRunning)"),
        "StuckTerminating: {}",
        note(&events[0])
    );
    Ok(())
}
