//! Field incident 1 from the workload's side: a Recreate rollout blocked behind a pod
//! Terminating on a dead node is reported on the Deployment and, in Enforce, unblocked by the
//! recreateRollouts rule; in DryRun it stays blocked with an explanation; a pod still in its
//! termination grace on a live node is never touched. A StatefulSet with the Recreate strategy
//! (Kubernetes 1.37, alpha) blocked the same way is reported, held until fencing evidence
//! appears, released, and rolls with one pod per ordinal at any time (on the production-like
//! control plane: PodGC and the StatefulSet controller as users run them).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::fixtures::renewed_since;
use crate::fixtures::{PodHistory, deployment, force_delete_delay, stateful_set, uid, until};
use crate::support::cluster::Cluster;
use crate::support::env::{HOSTNAME_LABEL, ZONE_LABEL};
use crate::{e2e, prod_e2e};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube_remediator::core::rollouts::{BlockCause, LIVE_FINISH_GRACE};
use kube_remediator::crd::SHUTDOWN_TAINT;

use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("ro-recreate-enforce", recreate_rollout_completes_once_the_node_is_dead),
        e2e!("ro-recreate-dry-run", dry_run_leaves_the_rollout_blocked_and_explains_why),
        e2e!("ro-grace-respected", pod_in_grace_on_a_live_node_is_left_alone),
        prod_e2e!("ro-sts-recreate", a_recreate_stateful_set_rolls_once_its_dead_pod_is_fenced),
    ]
}

/// Policy: only recreateRollouts releases pods (stuckTerminating off), short windows.
fn rollout_policy(mode: &str) -> serde_json::Value {
    json!({
        "mode": mode,
        "deadNode": { "notReadyFor": "10s", "leaseStaleFor": "40s" },
        "stuckTerminating": { "enabled": false },
        "recreateRollouts": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": 2 },
    })
}

/// A Recreate Deployment `legacy` with its pod on `node`, rolled out to a new template that
/// may run anywhere in the zone. Returns the old pod.
async fn blocked_rollout(env: &TestEnv, node: &str, grace: i64) -> Result<Pod> {
    let mut d = deployment("legacy", 1, "Recreate", json!({ HOSTNAME_LABEL: node }))?;
    if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.termination_grace_period_seconds = Some(grace);
    }
    env.api::<Deployment>().create(&PostParams::default(), &d).await?;
    let old = wait_for("the first pod to be bound", Duration::from_secs(30), || async {
        let list = env.list_pods("app=legacy").await?;
        Ok(list
            .into_iter()
            .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)))
    })
    .await?;
    Ok(old)
}

async fn roll_out_v2(env: &TestEnv) -> Result<()> {
    let patch = json!({ "spec": { "template": { "spec": {
        "nodeSelector": { HOSTNAME_LABEL: null, ZONE_LABEL: env.zone },
        "containers": [{ "name": "app", "image": "registry.invalid/app:v2" }],
    }}}});
    env.api::<Deployment>()
        .patch("legacy", &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    Ok(())
}

fn template_hash(pod: &Pod) -> String {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash").cloned())
        .unwrap_or_default()
}

/// Events on the Deployment `legacy` with `reason`.
async fn deployment_events(env: &TestEnv, reason: &str) -> Result<Vec<Event>> {
    env.events_about("Deployment", "legacy", reason).await
}

async fn wait_deployment_event(env: &TestEnv, reason: &str, timeout: Duration) -> Result<String> {
    wait_for(&format!("a {reason} Event on Deployment legacy"), timeout, || async {
        Ok(deployment_events(env, reason).await?.into_iter().next().and_then(|e| e.note))
    })
    .await
}

/// When the policy considers the node dead (after the kill): 10 s NotReady and 40 s of Lease.
async fn dead_at(env: &TestEnv, node: &str) -> Result<Timestamp> {
    env.dead_at(node, 10, 40).await
}

async fn recreate_rollout_completes_once_the_node_is_dead(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    env.create_policy(rollout_policy("Enforce")).await?;
    let op = Operator::start(cluster, env).await?;
    let old = blocked_rollout(env, &victim, 1).await?;
    env.wait_pods_ready("app=legacy", 1).await?;
    let old_name = old.metadata.name.clone().unwrap_or_default();
    let old_hash = template_hash(&old);

    env.kill_node(&victim).await?;
    env.wait_terminating(&old_name, Duration::from_secs(60)).await?;
    roll_out_v2(env).await?;
    wait_for(
        "a RolloutBlocked Event naming the pod and its node",
        Duration::from_secs(30),
        || async {
            let notes: Vec<String> = deployment_events(env, "RolloutBlocked")
                .await?
                .into_iter()
                .filter_map(|e| e.note)
                .collect();
            Ok(notes.into_iter().find(|n| n.contains(&old_name) && n.contains(&victim)))
        },
    )
    .await?;
    // Every test's operator reports every blocked workload of the cluster: at least this one.
    let labels = [("kind", "Deployment"), ("cause", "NodeUnhealthy")];
    wait_for("the blocked_rollouts gauge", Duration::from_secs(10), || async {
        let blocked = op.metric("kube_remediator_blocked_rollouts", &labels).await?;
        Ok(blocked.filter(|n| *n >= 1.0))
    })
    .await?;
    let dead = dead_at(env, &victim).await?;
    let v2 = wait_for(
        "a pod of the new template to run",
        Duration::try_from(dead.duration_since(Timestamp::now())).unwrap_or_default()
            + Duration::from_secs(30),
        || async {
            let list = env.list_pods("app=legacy").await?;
            Ok(list
                .into_iter()
                .find(|p| template_hash(p) != old_hash && crate::support::env::pod_is_ready(p)))
        },
    )
    .await?;
    let created = v2.metadata.creation_timestamp.as_ref().context("no creationTimestamp")?.0;
    ensure!(
        created >= dead - SignedDuration::from_secs(1),
        "the new pod was created before the node was dead"
    );
    eprintln!(
        "[ro-recreate-enforce] new ReplicaSet's pod created {:.1}s after the threshold (creationTimestamp has 1 s resolution), on {}",
        created.duration_since(dead).as_secs_f64(),
        v2.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
    );
    ensure!(
        !deployment_events(env, "ReleasedBlockingPod").await?.is_empty(),
        "no ReleasedBlockingPod Event"
    );
    let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
    ensure!(
        status
            .recent_actions
            .iter()
            .any(|a| a.name == old_name && a.reason.contains("blocks the rollout")),
        "the action record should say it unblocked the rollout: {:?}",
        status.recent_actions
    );
    // The rollout completed: the status stops listing it within seconds, like the gauge.
    let rolled = Timestamp::now();
    env.wait_policy("status.blockedRollouts without legacy", Duration::from_secs(10), |s| {
        (!s.blocked_rollouts.iter().any(|b| b.name == "legacy")).then_some(())
    })
    .await?;
    eprintln!(
        "[ro-recreate-enforce] status.blockedRollouts cleared {:.1}s after the new pod ran",
        Timestamp::now().duration_since(rolled).as_secs_f64()
    );
    Ok(())
}

async fn dry_run_leaves_the_rollout_blocked_and_explains_why(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    env.create_policy(rollout_policy("DryRun")).await?;
    let _op = Operator::start(cluster, env).await?;
    let old = blocked_rollout(env, &victim, 1).await?;
    env.wait_pods_ready("app=legacy", 1).await?;
    let (old_name, old_hash) = (old.metadata.name.clone().unwrap_or_default(), template_hash(&old));

    env.kill_node(&victim).await?;
    env.wait_terminating(&old_name, Duration::from_secs(60)).await?;
    roll_out_v2(env).await?;
    let dead = dead_at(env, &victim).await?;
    let until_dead = Duration::try_from(dead.duration_since(Timestamp::now())).unwrap_or_default();
    let note =
        wait_deployment_event(env, "WouldReleaseBlockingPod", until_dead + Duration::from_secs(10))
            .await?;
    ensure!(
        note.contains("[DryRun]") && note.contains(&old_name),
        "WouldReleaseBlockingPod note: {note}"
    );
    let listed = env
        .wait_policy("the blocked rollout in the policy status", Duration::from_secs(10), |s| {
            s.blocked_rollouts.iter().find(|b| b.name == "legacy").cloned()
        })
        .await?;
    ensure!(listed.blocking_pods.iter().any(|p| p.contains(&old_name)), "{listed:?}");

    holds_for("the rollout to stay blocked in DryRun", Duration::from_secs(5), || async {
        let list = env.list_pods("app=legacy").await?;
        if let Some(p) = list.iter().find(|p| template_hash(p) != old_hash) {
            bail!("a pod of the new template appeared: {:?}", p.metadata.name);
        }
        ensure!(
            list.iter().any(|p| p.metadata.name.as_deref() == Some(old_name.as_str())),
            "old pod gone"
        );
        Ok(())
    })
    .await?;
    let writes: Vec<_> = cluster
        .audit_writes()?
        .into_iter()
        .filter(|e| {
            e.user == OPERATOR_USER
                && e.resource == "pods"
                && e.namespace.as_deref() == Some(env.namespace.as_str())
        })
        .collect();
    ensure!(writes.is_empty(), "DryRun wrote pods: {writes:?}");
    Ok(())
}

/// Fails if the Deployment `legacy` was reported blocked by an Event of before `before` (its
/// `eventTime`, the operator's clock, which is ours): the operator reports at the window's end
/// to the millisecond, and a check sent just before it whose answer is slow (a busy machine)
/// sees the Event of just after. Tells apart the two reasons a report can come early: the
/// operator judging a live node's pod too early (a fault of the operator), or the node having
/// really gone not Ready because this test's played heartbeat lagged past the node-monitor grace
/// period (10 s), which the operator then rightly reports (a fault of the test's set-up, named
/// as such, with the node's Ready condition).
async fn no_report_while_live(
    env: &TestEnv,
    node: &str,
    when: &str,
    before: Timestamp,
) -> Result<()> {
    let events = deployment_events(env, "RolloutBlocked").await?;
    let mut early =
        events.into_iter().filter(|e| e.event_time.as_ref().is_none_or(|t| t.0 < before));
    let Some(note) = early.find_map(|e| e.note) else {
        return Ok(());
    };
    if note.contains(BlockCause::NodeUnhealthy.describe()) {
        let n = env.nodes().get(node).await?;
        let ready = n
            .status
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| format!("{} since {:?} ({:?})", c.status, c.last_transition_time, c.reason));
        bail!(
            "set-up, not the operator: the test's played heartbeat of {node} lagged past the \
             node-monitor grace period (the machine too busy?), kube-controller-manager marked \
             the node not Ready, and the operator rightly reported the pod blocked by an \
             unhealthy node {when}. Node Ready now: {ready:?}. Event: {note}"
        );
    }
    bail!("reported as blocked {when}: {note}")
}

async fn pod_in_grace_on_a_live_node_is_left_alone(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let (live, _heartbeat) = env.add_live_node_without_kubelet("live").await?;
    let mut spec = rollout_policy("Enforce");
    spec["stuckTerminating"] = json!({ "enabled": true, "delayAfterGrace": "0s" });
    env.create_policy(spec).await?;
    let _op = Operator::start(cluster, env).await?;
    // A 20 s grace period (a slow preStop), on a node whose kubelet never finishes pods.
    let old = blocked_rollout(env, &live, 20).await?;
    let old_name = old.metadata.name.clone().unwrap_or_default();
    let old_hash = template_hash(&old);
    roll_out_v2(env).await?;
    let terminating = env
        .wait_terminating(&old_name, Duration::from_secs(30))
        .await?
        .metadata
        .deletion_timestamp
        .context("Terminating without deletionTimestamp")?
        .0;
    let started = Instant::now();
    let in_grace =
        Duration::try_from(terminating.duration_since(Timestamp::now())).unwrap_or_default();
    ensure!(in_grace > Duration::from_secs(10), "grace period too short to observe: {in_grace:?}");

    // Within its grace period: no report, no action, no new pod.
    holds_for(
        "the pod in grace to be left alone",
        in_grace.saturating_sub(Duration::from_secs(1)),
        || async {
            let list = env.list_pods("app=legacy").await?;
            ensure!(
                list.iter().all(|p| template_hash(p) == old_hash),
                "a new-template pod appeared during the grace period"
            );
            ensure!(
                list.iter().any(|p| p.metadata.name.as_deref() == Some(old_name.as_str())),
                "old pod deleted in grace"
            );
            no_report_while_live(env, &live, "while in grace", Timestamp::MAX).await
        },
    )
    .await?;
    // A live kubelet gets LIVE_FINISH_GRACE (30 s) past the grace period to finish: not yet
    // blocking. After it, the kubelet still does not finish: reported as stuck on a live node,
    // and (this policy releasing only pods of dead nodes) still not deleted.
    let finish_by = terminating + LIVE_FINISH_GRACE;
    let wait = Duration::try_from(finish_by.duration_since(Timestamp::now())).unwrap_or_default();
    holds_for("no report while the kubelet may still finish", wait, || async {
        no_report_while_live(env, &live, "before the kubelet's time to finish passed", finish_by)
            .await
    })
    .await?;
    let note = wait_deployment_event(env, "RolloutBlocked", Duration::from_secs(10)).await?;
    ensure!(note.contains("node is Ready but the kubelet does not finish it"), "{note}");
    let reported = deployment_events(env, "RolloutBlocked")
        .await?
        .iter()
        .filter_map(|e| e.event_time.as_ref().map(|t| t.0))
        .min();
    eprintln!(
        "[ro-grace-respected] reported {:.3}s after the kubelet's time to finish (its Event's eventTime)",
        reported.map_or(f64::NAN, |t| t.duration_since(finish_by).as_secs_f64())
    );
    let p = env.pods().get_opt(&old_name).await?;
    ensure!(p.is_some(), "the pod on the live node was deleted");
    let deletes: Vec<_> = cluster
        .audit_writes()?
        .into_iter()
        .filter(|e| {
            e.user == OPERATOR_USER
                && e.verb == "delete"
                && e.namespace.as_deref() == Some(env.namespace.as_str())
        })
        .collect();
    ensure!(deletes.is_empty(), "the operator deleted pods on a live node: {deletes:?}");
    eprintln!("[ro-grace-respected] observed for {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `kube-remediator plan` (a table) of this test's policy.
async fn run_plan_table(cluster: &Cluster, env: &TestEnv) -> Result<String> {
    let mut cmd = std::process::Command::new(crate::support::operator::binary());
    cmd.args(["plan", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .arg("--policy-selector")
        .arg(format!("{}={}", crate::support::env::TEST_LABEL, env.name));
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    ensure!(out.status.success(), "plan failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The revision label of a StatefulSet's pod.
fn revision(pod: &Pod) -> String {
    let labels = pod.metadata.labels.as_ref();
    labels.and_then(|l| l.get("controller-revision-hash").cloned()).unwrap_or_default()
}

async fn a_recreate_stateful_set_rolls_once_its_dead_pod_is_fenced(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const NAME: &str = "[ro-sts-recreate]";
    let victim = env.add_node("victim").await?;
    let mut spec = rollout_policy("Enforce");
    spec["nodeSelector"] = json!({ "matchLabels": { ZONE_LABEL: env.zone } });
    env.create_policy(spec).await?;
    let op = Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;
    let ready = Timestamp::now();
    let history = PodHistory::watch(env.client.clone(), &env.namespace, "app=web");

    // web-0 on the victim (the healthy node cordoned), web-1 and web-2 on the healthy node (the
    // victim cordoned); the pods tolerate their node's death 1 s.
    let mut sts = stateful_set("web", 1, json!({ ZONE_LABEL: env.zone }))?;
    if let Some(spec) = sts.spec.as_mut() {
        spec.update_strategy = Some(serde_json::from_value(json!({ "type": "Recreate" }))?);
        if let Some(pod) = spec.template.spec.as_mut() {
            pod.tolerations = Some(serde_json::from_value(json!([
                { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1 },
                { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1 },
            ]))?);
        }
    }
    env.set_unschedulable(&env.healthy_node, true).await?;
    let stateful_sets = env.api::<StatefulSet>();
    stateful_sets.create(&PostParams::default(), &sts).await?;
    let old = env.wait_pods_ready("app=web", 1).await?.remove(0);
    ensure!(
        old.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(victim.as_str()),
        "web-0 is not on {victim}"
    );
    env.set_unschedulable(&env.healthy_node, false).await?;
    env.set_unschedulable(&victim, true).await?;
    let scale = json!({ "spec": { "replicas": 3 } });
    stateful_sets.patch("web", &PatchParams::default(), &Patch::Merge(&scale)).await?;
    env.wait_pods_ready("app=web", 3).await?;
    env.set_unschedulable(&victim, false).await?;
    let (old_uid, old_revision) = (uid(&old), revision(&old));
    // The Recreate strategy is read back as the control plane stores it (its feature gate on).
    let stored = stateful_sets.get("web").await?;
    let strategy = stored.spec.and_then(|s| s.update_strategy).and_then(|u| u.type_);
    ensure!(strategy.as_deref() == Some("Recreate"), "updateStrategy.type: {strategy:?}");

    renewed_since(env, &victim, ready).await?;
    env.kill_node(&victim).await?;
    env.wait_terminating("web-0", Duration::from_secs(150)).await?;
    let rollout = json!({ "spec": { "template": { "spec": {
        "containers": [{ "name": "app", "image": "registry.invalid/app:v2" }],
    }}}});
    stateful_sets.patch("web", &PatchParams::default(), &Patch::Strategic(&rollout)).await?;

    // Reported: the Event on the StatefulSet names the pod and the strategy, the status lists it.
    let note =
        wait_for("a RolloutBlocked Event on StatefulSet web", Duration::from_secs(60), || async {
            let events = env.events_about("StatefulSet", "web", "RolloutBlocked").await?;
            Ok(events
                .into_iter()
                .filter_map(|e| e.note)
                .find(|n| n.contains("web-0") && n.contains("strategy Recreate")))
        })
        .await?;
    eprintln!("{NAME} {note}");
    env.wait_policy("status.blockedRollouts with web", Duration::from_secs(30), |s| {
        s.blocked_rollouts.iter().find(|b| b.name == "web").map(|_| ())
    })
    .await?;

    // Dead, but a StatefulSet pod needs fencing: held until the cloud provider's shutdown taint,
    // and `plan` says both.
    let dead = env.dead_at(&victim, 10, 40).await?;
    tokio::time::sleep(until(dead) + Duration::from_secs(1)).await;
    let plan = run_plan_table(cluster, env).await?;
    ensure!(
        plan.lines()
            .any(|l| l.contains("StatefulSet") && l.contains("(Recreate)") && l.contains("web-0")),
        "plan does not list the blocked StatefulSet:\n{plan}"
    );
    ensure!(
        plan.contains("need fencing evidence"),
        "plan does not say web-0 waits for fencing:\n{plan}"
    );
    let held_until = dead + SignedDuration::from_secs(5);
    holds_for("web-0 held without fencing evidence", until(held_until), || async {
        let pod = env.pods().get_opt("web-0").await?;
        ensure!(
            pod.as_ref().map(uid).as_deref() == Some(old_uid.as_str()),
            "web-0 released without fencing"
        );
        Ok(())
    })
    .await?;
    env.add_taint(&victim, SHUTDOWN_TAINT, None, "NoSchedule").await?;
    let fenced = Timestamp::now();

    // Released, and the rollout completes: three pods of the new revision, Ready.
    wait_for("the StatefulSet rolled out", Duration::from_secs(120), || async {
        let s = stateful_sets.get("web").await?.status.unwrap_or_default();
        let done = s.current_revision.is_some()
            && s.current_revision == s.update_revision
            && s.ready_replicas == Some(3)
            && s.updated_replicas == Some(3);
        Ok(done.then_some(()))
    })
    .await?;
    let pods = env.list_pods("app=web").await?;
    ensure!(pods.iter().all(|p| revision(p) != old_revision), "an old pod is left: {pods:?}");
    let writes = cluster.operator_pod_writes(&env.namespace, None)?;
    let shape: Vec<_> = writes
        .iter()
        .map(|w| (w.verb.as_str(), w.subresource.as_deref(), w.name.as_deref()))
        .collect();
    ensure!(
        shape == [("patch", Some("status"), Some("web-0")), ("delete", None, Some("web-0"))],
        "the operator's pod writes: {shape:?}"
    );
    let deleted = writes[1].received.context("no time")?;
    ensure!(deleted >= fenced, "web-0 deleted before the fencing evidence");
    eprintln!(
        "{NAME} web-0 released {:.3}s after its threshold (fencing evidence added {:.1}s after the node was dead)",
        deleted.duration_since(fenced.max(dead)).as_secs_f64(),
        fenced.duration_since(dead).as_secs_f64()
    );
    let (count, mean) = force_delete_delay(&op, &env.name).await?;
    ensure!(count == 1.0, "{count} force deletes");
    eprintln!(
        "{NAME} the operator's own measure: {mean:.3}s from its threshold (the node dead; the fencing came later) to the DELETE's answer"
    );
    env.wait_event("StatefulSet", "web", "ReleasedBlockingPod", Duration::from_secs(15)).await?;

    // One pod per ordinal at any time, Terminating ones included; and Recreate's promise: no
    // pod of the new revision before every old one was gone.
    if let Some(two) = history.two_of_one_name() {
        bail!("two pods of one ordinal: {two}");
    }
    let seen = history.seen();
    let last_old_gone = seen
        .iter()
        .rposition(|p| p.deleted && p.revision.as_deref() == Some(old_revision.as_str()));
    let first_new =
        seen.iter().position(|p| p.revision.as_deref().is_some_and(|r| r != old_revision));
    match (last_old_gone, first_new) {
        (Some(gone), Some(new)) => ensure!(
            gone < new,
            "a new-revision pod appeared before the old ones were gone: {seen:?}"
        ),
        other => bail!("the watch missed the rollout: {other:?} in {seen:?}"),
    }
    ensure!(seen.iter().any(|p| p.uid == old_uid && p.terminating), "never saw web-0 Terminating");
    env.wait_policy("status.blockedRollouts without web", Duration::from_secs(30), |s| {
        (!s.blocked_rollouts.iter().any(|b| b.name == "web")).then_some(())
    })
    .await?;
    Ok(())
}
