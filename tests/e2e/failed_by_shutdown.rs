//! Pods left Failed by a graceful node shutdown (kubernetes/kubernetes#113278): the kubelet's
//! shutdown manager ends every pod with phase Failed, reason `Terminated` and the condition
//! `DisruptionTarget` (reason `TerminationByKubelet`), and nothing deletes them but PodGC's
//! `terminated-pod-gc-threshold` (12500 pods by default).
//!
//! The test plays the node's kubelet (`add_live_node_without_kubelet`) and writes its pods'
//! statuses as the shutdown manager does. It runs on the production-like control plane
//! ([`prod_e2e!`]): PodGC on, as in production, to show that it leaves them.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::fixtures::uid;
use crate::prod_e2e;
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::ZONE_LABEL;
use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![prod_e2e!("fs-shutdown-pods", pods_left_failed_by_a_shutdown_are_recorded_then_deleted)]
}

/// `failedByShutdown.deleteAfter` of the test's policy.
const DELETE_AFTER: i64 = 5;

/// Writes pod `name`'s status as a kubelet that ended it: phase Failed with `reason`; with the
/// shutdown manager's message and `DisruptionTarget` condition when `reason` is `Terminated`.
pub async fn fail_pod(env: &TestEnv, name: &str, reason: &str) -> Result<()> {
    let now = Timestamp::now().to_string();
    let by_shutdown = reason == "Terminated";
    let mut conditions = vec![
        json!({ "type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now }),
        json!({ "type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": now }),
    ];
    if by_shutdown {
        conditions.push(json!({
            "type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
            "message": "Pod was terminated in response to imminent node shutdown.",
            "lastTransitionTime": now,
        }));
    }
    let message = if by_shutdown {
        "Pod was terminated in response to imminent node shutdown."
    } else {
        "The node was low on resource: memory."
    };
    let status = json!({ "status": {
        "phase": "Failed",
        "reason": reason,
        "message": message,
        "conditions": conditions,
        "containerStatuses": [{
            "name": "app", "image": "registry.invalid/app:v1", "imageID": "",
            "ready": false, "restartCount": 0, "started": false,
            "state": { "terminated": { "exitCode": 137, "reason": "Error",
                                       "startedAt": now, "finishedAt": now } },
        }],
    }});
    env.pods()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("writing the Failed status of pod {name}"))?;
    Ok(())
}

/// The operator's DELETEs of pods in this test's namespace (audit log), oldest first.
fn deletes(cluster: &Cluster, env: &TestEnv) -> Result<Vec<AuditEntry>> {
    Ok(cluster
        .audit_writes()?
        .into_iter()
        .filter(|e| {
            e.user == OPERATOR_USER
                && e.verb == "delete"
                && e.resource == "pods"
                && e.subresource.is_none()
                && e.namespace.as_deref() == Some(&env.namespace)
        })
        .collect())
}

/// Three pods on a node whose kubelet the test plays: `early` and `late` are ended by its
/// graceful shutdown (Failed, `Terminated`), `pressure` by a memory-pressure eviction (Failed,
/// `Evicted`), `web` keeps running.
///
/// With `failedByShutdown: {enabled: true, deleteAfter: 5s}`:
/// - in DryRun: `early` is recorded (`WouldDeleteShutdownPod`, status) and nothing is deleted
///   (audit log), PodGC included;
/// - switched to Enforce: `early` is deleted at once (seen long enough already), `late`,
///   failed after the switch, `deleteAfter` after it was failed (the time from the threshold to
///   the DELETE is printed), each with a normal DELETE; `pressure` and `web` are never touched.
async fn pods_left_failed_by_a_shutdown_are_recorded_then_deleted(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (node, _kubelet) = env.add_live_node_without_kubelet("shut").await?;
    let names = ["early", "late", "pressure", "web"];
    for name in names {
        env.create_bound_pod(name, &node).await?;
        env.write_pod_status(name, true).await?;
    }
    let early_uid = uid(&env.pods().get("early").await?);
    fail_pod(env, "early", "Terminated").await?;
    fail_pod(env, "pressure", "Evicted").await?;
    let policy = env
        .create_policy(json!({
            "mode": "DryRun",
            "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
            "failedByShutdown": { "enabled": true, "deleteAfter": format!("{DELETE_AFTER}s") },
        }))
        .await?;
    let _op = Operator::start(cluster, env).await?;

    // DryRun: recorded, nothing deleted.
    let recorded = wait_for("the would-be delete recorded", Duration::from_secs(60), || async {
        let events = env.events_about("Pod", "early", "WouldDeleteShutdownPod").await?;
        Ok((!events.is_empty()).then_some(events))
    })
    .await?;
    let note = recorded[0].note.clone().unwrap_or_default();
    ensure!(note.contains("Terminated"), "the Event does not say why: {note}");
    env.wait_policy("the record in the status", Duration::from_secs(30), |s| {
        s.recent_actions
            .iter()
            .any(|a| a.name == "early" && a.action.as_str() == "DeleteShutdownPod")
            .then_some(())
    })
    .await?;
    holds_for(
        "every pod still there in DryRun",
        Duration::from_secs(DELETE_AFTER as u64),
        || async {
            for name in names {
                ensure!(env.pods().get_opt(name).await?.is_some(), "pod {name} is gone in DryRun");
            }
            Ok(())
        },
    )
    .await?;
    ensure!(deletes(cluster, env)?.is_empty(), "a DELETE in DryRun: {:?}", deletes(cluster, env)?);

    // Enforce.
    let patch = json!({ "spec": { "mode": "Enforce" } });
    env.policies()
        .patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("switching the policy to Enforce")?;
    let generation = policy.metadata.generation.unwrap_or_default();
    wait_for("early deleted", Duration::from_secs(30), || async {
        Ok(env.pods().get_opt("early").await?.is_none().then_some(()))
    })
    .await?;
    let failed_at = Timestamp::now();
    fail_pod(env, "late", "Terminated").await?;
    let threshold = failed_at + SignedDuration::from_secs(DELETE_AFTER);
    let gone = wait_for("late deleted", Duration::from_secs(60), || async {
        Ok(env.pods().get_opt("late").await?.is_none().then(Timestamp::now))
    })
    .await?;
    let sent = deletes(cluster, env)?;
    let late_delete = sent
        .iter()
        .find(|e| e.name.as_deref() == Some("late"))
        .and_then(|e| e.received)
        .context("no DELETE of late by the operator in the audit log")?;
    let after = late_delete.duration_since(threshold);
    ensure!(
        after >= SignedDuration::ZERO,
        "late deleted {:.3}s before its deleteAfter passed",
        -after.as_secs_f64()
    );
    env.wait_event("Pod", "late", "DeletedShutdownPod", Duration::from_secs(15)).await?;

    // The others are never touched.
    holds_for(
        "pressure and web left alone",
        Duration::from_secs(DELETE_AFTER as u64 + 3),
        || async {
            for name in ["pressure", "web"] {
                let pod =
                    env.pods().get_opt(name).await?.with_context(|| format!("{name} is gone"))?;
                ensure!(pod.metadata.deletion_timestamp.is_none(), "{name} is Terminating");
            }
            Ok(())
        },
    )
    .await?;
    let sent = deletes(cluster, env)?;
    let names_sent: Vec<_> = sent.iter().filter_map(|e| e.name.clone()).collect();
    ensure!(names_sent == ["early", "late"], "the operator's DELETEs: {names_sent:?}");
    ensure!(
        env.pods().get_opt("early").await?.is_none_or(|p| uid(&p) != early_uid),
        "early is still there"
    );
    eprintln!(
        "[{}] late deleted {:.3}s after its threshold (failed + deleteAfter {DELETE_AFTER}s; \
         gone as seen by the test {:.3}s after it), policy generation {generation} -> Enforce",
        env.name,
        after.as_secs_f64(),
        gone.duration_since(threshold).as_secs_f64()
    );
    Ok(())
}
