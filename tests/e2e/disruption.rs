//! Saying why a pod goes, the way Kubernetes does: before a force delete the operator writes the
//! pod's `DisruptionTarget` condition (reason `DeletionByKubeRemediator`) and, on a dead node,
//! the phase `Failed`, as PodGC does, so a Job's `podFailurePolicy` can tell the release from a
//! failure.
//!
//! It runs on the production-like control plane ([`prod_e2e!`]): PodGC, the Job controller and
//! the taint manager as users run them. The test plays the kubelet of the node that dies
//! (kwok completes Job pods at once; a real kubelet runs them), so its pods are Running when
//! it stops.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use kube::api::PostParams;
use libtest_mimic::Trial;
use serde_json::json;

use crate::fixtures::renewed_since;
use crate::fixtures::{PodHistory, SeenPod, force_delete_delay, uid, until};
use crate::prod_e2e;
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::ZONE_LABEL;
use crate::support::operator::Operator;
use crate::support::{TestEnv, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![prod_e2e!("dt-job-not-a-failure", a_released_job_pod_is_a_disruption_not_a_failure)]
}

/// The Job `name`: one completion, no failure allowed (`backoffLimit: 0`), a replacement only
/// for a pod that is Failed, and pods with `DisruptionTarget` ignored. `tolerate`: how long its
/// pods tolerate their node unreachable or not ready (`None`: for ever).
fn job(env: &TestEnv, name: &str, tolerate: Option<i64>) -> Result<Job> {
    let toleration = |key: &str| {
        let mut t = json!({ "key": key, "operator": "Exists", "effect": "NoExecute" });
        if let Some(seconds) = tolerate {
            t["tolerationSeconds"] = json!(seconds);
        }
        t
    };
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": 0,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": { "rules": [{
                "action": "Ignore",
                "onPodConditions": [{ "type": "DisruptionTarget" }],
            }]},
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": { ZONE_LABEL: env.zone },
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [
                        toleration("node.kubernetes.io/unreachable"),
                        toleration("node.kubernetes.io/not-ready"),
                    ],
                    "containers": [{ "name": "app", "image": "registry.invalid/job:v1" }],
                },
            },
        },
    }))?)
}

/// The last version of the pod `uid` the watch saw before it was deleted.
fn last_before_gone(history: &[SeenPod], uid: &str) -> Option<SeenPod> {
    history.iter().rfind(|p| p.uid == uid && !p.deleted).cloned()
}

async fn a_released_job_pod_is_a_disruption_not_a_failure(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (victim, heartbeat) = env.add_live_node_without_kubelet("victim").await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": { "notReadyFor": "10s", "leaseStaleFor": "40s" },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": 2 },
    }))
    .await?;
    let op = Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;
    let ready = Timestamp::now();
    let history = PodHistory::watch(env.client.clone(), &env.namespace, "job-name");

    // Two Jobs with their first pod on the victim (the healthy node cordoned meanwhile):
    // "evicted" tolerates its node's death 1 s (the taint manager evicts it), "deleted" for ever
    // (an admin deletes it).
    env.set_unschedulable(&env.healthy_node, true).await?;
    let jobs = env.api::<Job>();
    let mut first = Vec::new();
    for (name, tolerate) in [("evicted", Some(1)), ("deleted", None)] {
        jobs.create(&PostParams::default(), &job(env, name, tolerate)?).await?;
        let pod = wait_for(
            &format!("the pod of Job {name} on {victim}"),
            Duration::from_secs(60),
            || async {
                let pods = env.list_pods(&format!("job-name={name}")).await?;
                Ok(pods.into_iter().find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(victim.as_str())
                }))
            },
        )
        .await?;
        let pod_name = pod.metadata.name.clone().context("pod without a name")?;
        env.write_pod_status(&pod_name, true).await?;
        first.push((name, pod_name, uid(&pod)));
    }
    env.set_unschedulable(&env.healthy_node, false).await?;

    // The kubelet stops; the operator saw its Lease renewed first.
    renewed_since(env, &victim, ready).await?;
    drop(heartbeat);
    let dead = env.dead_at(&victim, 10, 40).await?;
    eprintln!("[dt-job-not-a-failure] {victim} counts as dead from {dead}");
    let (_, deleted_name, _) = &first[1];
    let deleted_at = Timestamp::now();
    env.delete_gracefully(deleted_name, 1).await?;
    let threshold = |name: &str| {
        if name == "deleted" { dead.max(deleted_at + SignedDuration::from_secs(1)) } else { dead }
    };

    for (job_name, pod_name, pod_uid) in &first {
        // The Job completes on the healthy node (kwok completes its pods): the release counted
        // as no failure, or backoffLimit 0 would have failed it.
        let done = wait_for(
            &format!("Job {job_name} to complete"),
            until(dead) + Duration::from_secs(90),
            || async {
                let j = jobs.get(job_name).await?;
                let status = j.status.clone().unwrap_or_default();
                let failed = status
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == "Failed" && c.status == "True");
                ensure!(failed.is_none(), "Job {job_name} failed: {:?}", failed);
                Ok((status.succeeded.unwrap_or(0) >= 1).then_some(status))
            },
        )
        .await?;
        ensure!(done.failed.unwrap_or(0) == 0, "Job {job_name} counts a failure: {done:?}");

        // Two writes of the operator on the pod: its status, then the DELETE.
        let writes = cluster.operator_pod_writes(&env.namespace, Some(pod_name))?;
        ensure!(AuditEntry::is_release(&writes), "the operator's writes on {pod_name}: {writes:?}");
        let (status_at, deleted) = (writes[0].received, writes[1].received.context("no time")?);
        eprintln!(
            "[dt-job-not-a-failure] {job_name}: DisruptionTarget written, then DELETE {:.3}s after the threshold",
            deleted.duration_since(threshold(job_name)).as_secs_f64()
        );

        // What the pod carried just before it went.
        let seen = history.seen();
        let last = last_before_gone(&seen, pod_uid)
            .with_context(|| format!("the watch never saw {pod_name}"))?;
        ensure!(last.phase.as_deref() == Some("Failed"), "{pod_name} went as {last:?}");
        let reasons: Vec<Option<String>> =
            seen.iter().filter(|p| p.uid == *pod_uid).map(|p| p.disruption.clone()).collect();
        eprintln!(
            "[dt-job-not-a-failure] {job_name}: DisruptionTarget reasons the pod carried: {reasons:?}"
        );
        match *job_name {
            // The taint manager said it first; the operator left its condition as it was.
            "evicted" => {
                let first_reason = reasons.iter().flatten().next().cloned();
                ensure!(
                    first_reason.as_deref() == Some("DeletionByTaintManager")
                        && last.disruption == first_reason,
                    "{pod_name}: {reasons:?}"
                );
            }
            _ => ensure!(
                last.disruption.as_deref() == Some("DeletionByKubeRemediator"),
                "{pod_name}: {reasons:?}"
            ),
        }
        // The replacement came once the pod was Failed by the operator's write, not before.
        let replacement = seen
            .iter()
            .find(|p| p.name != *pod_name && p.name.starts_with(&format!("{job_name}-")))
            .with_context(|| format!("no replacement of {pod_name} seen"))?;
        let created = replacement.created.context("no creationTimestamp")?;
        let written = status_at.context("no time")?;
        ensure!(
            created >= written - SignedDuration::from_secs(1),
            "the replacement {} was created at {created}, before the status write at {written}",
            replacement.name
        );
    }
    let (count, mean) = force_delete_delay(&op, &env.name).await?;
    eprintln!(
        "[dt-job-not-a-failure] the operator's own measure: {count} force deletes, {mean:.3}s from threshold to answer on average"
    );
    let labels = [
        ("policy", env.name.as_str()),
        ("action", "ForceDelete"),
        ("mode", "Enforce"),
        ("result", "Done"),
    ];
    let done = op.metric("kube_remediator_actions_total", &labels).await?;
    ensure!(done == Some(2.0), "actions_total ForceDelete Done = {done:?}");
    Ok(())
}
