//! Field incident 1 from the workload's side: a Recreate rollout blocked behind a pod
//! Terminating on a dead node is reported on the Deployment and, in Enforce, unblocked by the
//! recreateRollouts rule; in DryRun it stays blocked with an explanation; a pod still in its
//! termination grace on a live node is never touched.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::fixtures::deployment;
use crate::support::env::{HOSTNAME_LABEL, ZONE_LABEL};
use kube_remediator::core::rollouts::LIVE_FINISH_GRACE;

use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("ro-recreate-enforce", recreate_rollout_completes_once_the_node_is_dead),
        e2e!("ro-recreate-dry-run", dry_run_leaves_the_rollout_blocked_and_explains_why),
        e2e!("ro-grace-respected", pod_in_grace_on_a_live_node_is_left_alone),
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
            ensure!(
                deployment_events(env, "RolloutBlocked").await?.is_empty(),
                "reported as blocked while in grace"
            );
            Ok(())
        },
    )
    .await?;
    // A live kubelet gets LIVE_FINISH_GRACE (30 s) past the grace period to finish: not yet
    // blocking. After it, the kubelet still does not finish: reported as stuck on a live node,
    // and (this policy releasing only pods of dead nodes) still not deleted.
    let finish_by = terminating + LIVE_FINISH_GRACE;
    let wait = Duration::try_from(finish_by.duration_since(Timestamp::now())).unwrap_or_default();
    holds_for("no report while the kubelet may still finish", wait, || async {
        ensure!(
            deployment_events(env, "RolloutBlocked").await?.is_empty(),
            "reported as blocked before the kubelet's time to finish passed"
        );
        Ok(())
    })
    .await?;
    let note = wait_deployment_event(env, "RolloutBlocked", Duration::from_secs(10)).await?;
    ensure!(note.contains("node is Ready but the kubelet does not finish it"), "{note}");
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
