//! Field incident 1 with the operator: pods stuck Terminating on dead nodes are force-deleted
//! (Enforce) or recorded (DryRun) once the policy's thresholds pass, never before, never
//! outside the policy's scope, never without fencing where it is required, and never while too
//! many nodes are unhealthy.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_remediator::crd::{RemediationPolicy, RemediationPolicyStatus};
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::fixtures::{bare_pod, deployment, stateful_set};
use crate::fixtures::{uid, until};
use crate::support::cluster::AuditEntry;
use crate::support::env::{HOSTNAME_LABEL, TEST_LABEL, ZONE_LABEL, node_ready_status, renew_lease};
use crate::support::operator::{Operator, binary};
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("st-enforce", enforce_force_deletes_after_the_delay_and_not_before),
        e2e!("st-node-returns", pods_of_a_node_that_returns_are_left_alone),
        e2e!("st-dry-run", dry_run_records_without_mutating_then_enforce_acts),
        e2e!("st-statefulset-fencing", statefulset_pod_needs_fencing_and_replacement_is_spared),
        e2e!("st-inline-volume-fencing", a_pod_with_an_inline_block_device_needs_fencing),
        e2e!("st-scope", excluded_daemonset_and_unselected_pods_are_untouched),
        e2e!("st-circuit", circuit_breaker_blocks_deletions_when_too_many_nodes_die),
        e2e!("st-fresh-start-waits", a_fresh_operator_trusts_no_evidence_older_than_its_sync),
        e2e!("st-overlapping-budget", two_overlapping_policies_share_one_owner_budget),
        e2e!("st-zone-partition", a_zone_down_at_once_is_a_partition_not_deaths),
        e2e!("st-batch-records", each_pod_of_one_batch_has_its_own_records),
        e2e!("st-dry-run-restart", dry_run_records_a_pod_once_across_a_restart),
        e2e!("st-finalizer-restart", a_pod_a_finalizer_holds_is_never_force_deleted),
        e2e!("st-ahead-node-returns", a_record_ahead_is_withdrawn_when_the_node_returns),
        e2e!("st-ahead-restart", a_restart_after_a_record_ahead_sends_nothing_on_it),
    ]
}

const NOT_READY_FOR: i64 = 10;
const LEASE_STALE_FOR: i64 = 40;
const DELAY: i64 = 5;

/// The policy spec the tests start from: short windows, the test's own scope.
fn policy_spec(mode: &str) -> serde_json::Value {
    json!({
        "mode": mode,
        "deadNode": { "notReadyFor": format!("{NOT_READY_FOR}s"), "leaseStaleFor": format!("{LEASE_STALE_FOR}s") },
        "stuckTerminating": { "delayAfterGrace": format!("{DELAY}s") },
        "safety": { "maxUnhealthyNodes": 2, "rateLimit": { "actionsPerMinute": 60 } },
    })
}

/// Waits until the pod is Terminating; returns it.
async fn wait_terminating(env: &TestEnv, name: &str) -> Result<Pod> {
    env.wait_terminating(name, Duration::from_secs(60)).await
}

/// When the policy makes a pod on a node killed after the operator synced due: the node is
/// dead once NotReady for `notReadyFor` and its Lease stale for `leaseStaleFor`, and the pod
/// is due `delayAfterGrace` after its deletionTimestamp. Read from the same objects the
/// operator sees; waits until the node is Unknown first.
async fn due_instant(env: &TestEnv, node: &str, pod: &Pod) -> Result<Timestamp> {
    let dead = env.dead_at(node, NOT_READY_FOR, LEASE_STALE_FOR).await?;
    let deletion = pod.metadata.deletion_timestamp.as_ref().context("pod not Terminating")?.0;
    Ok(dead.max(deletion + SignedDuration::from_secs(DELAY)))
}

/// Asserts the pod keeps its UID until shortly before `due`.
async fn still_there_until(env: &TestEnv, name: &str, uid: &str, due: Timestamp) -> Result<()> {
    let window = until(due).saturating_sub(Duration::from_millis(1500));
    holds_for(&format!("pod {name} to be left alone before it is due"), window, || async {
        match env.pods().get_opt(name).await? {
            Some(p) if p.metadata.uid.as_deref() == Some(uid) => Ok(()),
            _ => bail!("pod {name} was deleted before {due}"),
        }
    })
    .await
}

/// Every version of the named policy's status, from now until its record of pod actions has
/// a Done one, with the instant the watch delivered each (at most 120 s).
async fn policy_statuses(
    policies: Api<RemediationPolicy>,
    name: String,
) -> Result<Vec<(Timestamp, RemediationPolicyStatus)>> {
    let params = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(120);
    let mut events = policies.watch(&params, "0").await?.boxed();
    let mut versions = Vec::new();
    while let Some(event) = events.try_next().await? {
        let policy = match event {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => p,
            WatchEvent::Error(e) => bail!("watching policy {name}: {e:?}"),
            _ => continue,
        };
        let status = policy.status.unwrap_or_default();
        let done = status.recent_actions.iter().any(|a| a.result.as_str() == "Done");
        versions.push((Timestamp::now(), status));
        if done {
            return Ok(versions);
        }
    }
    bail!("the watch of policy {name} ended before a Done record")
}

/// Waits, on a watch of the policy, until its status holds the pod's `Pending` record stored
/// ahead of its due instant; returns when the watch delivered it and the instant the record
/// says the pod is due at (the operator's own clock: it counts a Lease stale from when it saw
/// the Lease last renewed, a little after the `renewTime` the test reads).
async fn record_ahead(
    env: &TestEnv,
    pod_uid: &str,
    timeout: Duration,
) -> Result<(Timestamp, Timestamp)> {
    let params = WatchParams::default().fields(&format!("metadata.name={}", env.name));
    let policies = env.policies();
    let due_at = |detail: &str| {
        let (due, _) = detail.strip_prefix("due at ")?.split_once(": recorded ahead")?;
        due.parse::<Timestamp>().ok()
    };
    let watch = async {
        let mut events = policies.watch(&params, "0").await?.boxed();
        while let Some(event) = events.try_next().await? {
            let (WatchEvent::Added(p) | WatchEvent::Modified(p)) = event else { continue };
            let status = p.status.unwrap_or_default();
            let ahead = status.recent_actions.iter().find_map(|a| {
                let pending = a.uid == pod_uid && a.result.as_str() == "Pending";
                pending.then(|| a.detail.as_deref().and_then(due_at)).flatten()
            });
            if let Some(due) = ahead {
                return Ok((Timestamp::now(), due));
            }
        }
        bail!("the watch of policy {} ended before a record ahead", env.name)
    };
    tokio::time::timeout(timeout, watch)
        .await
        .with_context(|| format!("no record ahead of pod {pod_uid} within {timeout:?}"))?
}

/// Reports when a trial saw the record ahead and acted (`what`, at `acted`) before the due
/// instant the record names; fails if it acted too late for the trial to test its window.
fn in_the_window(
    trial: &str,
    what: &str,
    seen: Timestamp,
    acted: Timestamp,
    due: Timestamp,
) -> Result<()> {
    let before = |t: Timestamp| due.duration_since(t).as_secs_f64();
    eprintln!(
        "[{trial}] record ahead seen {:.3}s and {what} {:.3}s before the due instant",
        before(seen),
        before(acted)
    );
    ensure!(
        acted < due,
        "{what} {:.3}s after the due instant: the trial did not get its window",
        -before(acted)
    );
    Ok(())
}

/// Waits until the pod with this UID is gone.
async fn wait_gone(env: &TestEnv, name: &str, uid: &str, timeout: Duration) -> Result<()> {
    let pods = env.pods();
    wait_for(&format!("pod {name} ({uid}) to be gone"), timeout, || {
        let pods = pods.clone();
        async move {
            let p = pods.get_opt(name).await?;
            Ok((p.and_then(|p| p.metadata.uid).as_deref() != Some(uid)).then_some(()))
        }
    })
    .await
}

/// The operator's writes to pods or nodes of this test (Events and its policy status excluded).
async fn operator_mutations(env: &TestEnv) -> Result<Vec<AuditEntry>> {
    let cluster = shared_cluster().await?;
    let prefix = format!("{}-", env.name);
    Ok(cluster
        .audit_writes()?
        .into_iter()
        .filter(|e| e.user == OPERATOR_USER)
        .filter(|e| match e.resource.as_str() {
            "pods" => e
                .namespace
                .as_deref()
                .is_some_and(|ns| ns == env.namespace || ns.starts_with(&prefix)),
            "nodes" => e.name.as_deref().is_some_and(|n| n.starts_with(&prefix)),
            _ => false,
        })
        .collect())
}

/// Events in the test namespace about `pod` with `reason`.
async fn pod_events(env: &TestEnv, pod: &str, reason: &str) -> Result<Vec<Event>> {
    env.events_about("Pod", pod, reason).await
}

/// Runs `kube-remediator plan` with the admin kubeconfig for this test's policy.
async fn run_plan(env: &TestEnv, json_output: bool) -> Result<String> {
    let cluster = shared_cluster().await?;
    let mut cmd = Command::new(binary());
    cmd.arg("plan")
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .arg("--policy-selector")
        .arg(format!("{TEST_LABEL}={}", env.name));
    if json_output {
        cmd.args(["-o", "json"]);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    ensure!(out.status.success(), "plan failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?)
}

/// Creates a Deployment of one pod on `node` and returns the running pod.
async fn one_pod_on(env: &TestEnv, app: &str, node: &str) -> Result<Pod> {
    let d = deployment(app, 1, "Recreate", json!({ HOSTNAME_LABEL: node }))?;
    env.api::<Deployment>().create(&PostParams::default(), &d).await?;
    Ok(env.wait_pods_ready(&format!("app={app}"), 1).await?.remove(0))
}

/// One pod of a Deployment on a node that was killed, with the operator running.
pub(crate) struct Scenario {
    pub(crate) operator: Operator,
    victim: String,
    pod_name: String,
    pub(crate) pod_uid: String,
    /// When the policy makes the pod due.
    pub(crate) due: Timestamp,
}

/// Creates a node `<test>-<suffix>`, this test's policy in `mode` and its operator, a pod on
/// the node; kills the node and waits until the pod is Terminating.
pub(crate) async fn one_pod_on_a_dying_node(
    env: &TestEnv,
    suffix: &str,
    mode: &str,
) -> Result<Scenario> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node(suffix).await?;
    env.create_policy(policy_spec(mode)).await?;
    let operator = Operator::start(cluster, env).await?;
    let pod = one_pod_on(env, "api", &victim).await?;
    let (pod_name, pod_uid) = (name(&pod), uid(&pod));
    env.kill_node(&victim).await?;
    let terminating = wait_terminating(env, &pod_name).await?;
    let due = due_instant(env, &victim, &terminating).await?;
    Ok(Scenario { operator, victim, pod_name, pod_uid, due })
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

async fn enforce_force_deletes_after_the_delay_and_not_before(env: &TestEnv) -> Result<()> {
    let Scenario { operator: op, victim, pod_name, pod_uid, due } =
        one_pod_on_a_dying_node(env, "victim", "Enforce").await?;
    let statuses = tokio::spawn(policy_statuses(env.policies(), env.name.clone()));
    still_there_until(env, &pod_name, &pod_uid, due).await?;
    wait_gone(env, &pod_name, &pod_uid, until(due) + Duration::from_secs(10)).await?;
    eprintln!(
        "[st-enforce] force-deleted {:.2}s after its due instant",
        Timestamp::now().duration_since(due).as_secs_f64()
    );

    // Its Pending record was stored ahead of the due instant, saying so, and no other was
    // written before the DELETE: every version of the status, as a watch delivered them.
    let versions = statuses.await??;
    let pending = |version: &RemediationPolicyStatus, detail: &str| {
        version.recent_actions.iter().any(|a| {
            a.uid == pod_uid
                && a.result.as_str() == "Pending"
                && a.detail.as_deref().is_some_and(|d| d.starts_with(detail))
        })
    };
    let ahead = versions.iter().find(|(_, v)| pending(v, "due at")).map(|(seen, _)| *seen);
    let seen = ahead.with_context(|| {
        format!("no Pending record ahead of the due instant in {} versions", versions.len())
    })?;
    eprintln!(
        "[st-enforce] its record stored ahead, seen {:.2}s before its due instant",
        due.duration_since(seen).as_secs_f64()
    );
    ensure!(
        !versions.iter().any(|(_, v)| pending(v, "being sent")),
        "a second Pending record was written at the due instant: {versions:?}"
    );

    // Exactly one DELETE by the operator, after the pod's DisruptionTarget, and the record
    // everywhere. The API server logs a request after answering it: wait for the DELETE's
    // entry before reading every write.
    shared_cluster().await?.await_operator_pod_deletes(&env.namespace, &pod_name).await?;
    let writes = operator_mutations(env).await?;
    let deletes: Vec<_> = writes
        .iter()
        .filter(|w| w.verb == "delete" && w.name.as_deref() == Some(&pod_name))
        .collect();
    ensure!(
        deletes.len() == 1,
        "expected one DELETE of {pod_name} by the operator, got {writes:?}"
    );
    ensure!(
        AuditEntry::is_release(&writes),
        "the operator wrote more than the pod's status and the DELETE: {writes:?}"
    );
    let status = env
        .wait_policy("a Done record in the policy status", Duration::from_secs(10), |s| {
            s.recent_actions
                .iter()
                .find(|a| a.uid == pod_uid && a.result.as_str() == "Done")
                .cloned()
        })
        .await?;
    ensure!(
        status.mode.as_str() == "Enforce" && status.node == victim,
        "unexpected record {status:?}"
    );
    ensure!(
        !pod_events(env, &pod_name, "ForceDeleted").await?.is_empty(),
        "no ForceDeleted Event on the pod"
    );
    let done = op
        .metric(
            "kube_remediator_actions_total",
            &[("policy", &env.name), ("mode", "Enforce"), ("result", "Done")],
        )
        .await?;
    ensure!(done == Some(1.0), "actions_total{{Enforce,Done}} = {done:?}");
    let delays =
        op.metric("kube_remediator_action_delay_seconds_count", &[("policy", &env.name)]).await?;
    ensure!(delays == Some(1.0), "action_delay_seconds_count = {delays:?}");
    Ok(())
}

/// Three pods of one Deployment on one node that dies are due together and released in one
/// batch: each keeps its own record everywhere: a Done status record, a ForceDeleted Event on
/// the pod, and a ForceDeleted Event on the policy naming that pod (as its related object and
/// in its note). Events with the same reason on the same object are merged by the recorder,
/// keeping the first note, so one Event per batch, or per pod without a related object, would
/// lose the later pods of the batch from the policy's record.
async fn each_pod_of_one_batch_has_its_own_records(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    env.create_policy(policy_spec("Enforce")).await?;
    let _op = Operator::start(cluster, env).await?;
    let d = deployment("trio", 3, "Recreate", json!({ HOSTNAME_LABEL: victim }))?;
    env.api::<Deployment>().create(&PostParams::default(), &d).await?;
    let pods = env.wait_pods_ready("app=trio", 3).await?;
    env.kill_node(&victim).await?;
    let mut due = Timestamp::UNIX_EPOCH;
    for pod in &pods {
        let terminating = wait_terminating(env, &name(pod)).await?;
        due = due.max(due_instant(env, &victim, &terminating).await?);
    }
    for pod in &pods {
        wait_gone(env, &name(pod), &uid(pod), until(due) + Duration::from_secs(15)).await?;
    }
    let released = Timestamp::now().duration_since(due).as_secs_f64();
    let uids: std::collections::BTreeSet<String> = pods.iter().map(uid).collect();
    let done = env
        .wait_policy("three Done records", Duration::from_secs(10), |s| {
            let done: std::collections::BTreeSet<String> = s
                .recent_actions
                .iter()
                .filter(|a| a.result.as_str() == "Done" && uids.contains(&a.uid))
                .map(|a| a.uid.clone())
                .collect();
            (done.len() == 3).then_some(s.recent_actions.len())
        })
        .await?;
    ensure!(done == 3, "{done} status records, want one per pod");
    let records =
        wait_for("a ForceDeleted Event on the policy per pod", Duration::from_secs(10), || async {
            let events = env.events_about("RemediationPolicy", &env.name, "ForceDeleted").await?;
            let mut named = std::collections::BTreeSet::new();
            for e in &events {
                let related = e.related.as_ref().and_then(|r| r.name.clone()).unwrap_or_default();
                let note = e.note.clone().unwrap_or_default();
                if pods.iter().any(|p| name(p) == related) && note.contains(&related) {
                    named.insert(related);
                }
            }
            Ok((named.len() == 3).then_some(events.len()))
        })
        .await?;
    ensure!(records == 3, "{records} ForceDeleted Events on the policy, want 3");
    for pod in &pods {
        let events = pod_events(env, &name(pod), "ForceDeleted").await?;
        ensure!(events.len() == 1, "{} ForceDeleted Events on {}", events.len(), name(pod));
    }
    eprintln!(
        "[st-batch-records] 3 pods gone {released:.2}s after their due instant; 3 status records, \
         3 Events on the policy, one on each pod"
    );
    Ok(())
}

/// DryRun records a would-be action once, also across a restart: the new run remembers the
/// pods its policy already recorded from the status. Watched until well past the instant the
/// new run trusts its evidence (a full window after its start) and acts.
async fn dry_run_records_a_pod_once_across_a_restart(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let Scenario { operator: mut op, victim: _, pod_name, pod_uid, due } =
        one_pod_on_a_dying_node(env, "victim", "DryRun").await?;
    env.wait_policy("a WouldAct record", until(due) + Duration::from_secs(10), |s| {
        s.recent_actions.iter().find(|a| a.uid == pod_uid).map(|_| ())
    })
    .await?;
    op.kill();
    let _op = Operator::start(cluster, env).await?;
    let window = Duration::from_secs(LEASE_STALE_FOR as u64 + 10);
    holds_for("one record and one Event of the pod", window, || async {
        let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
        let records = status.recent_actions.iter().filter(|a| a.uid == pod_uid).count();
        ensure!(records == 1, "{records} records of the pod after the restart");
        let events = pod_events(env, &pod_name, "WouldForceDelete").await?;
        let count: i32 = events.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count)).sum();
        ensure!(count == 1, "{count} WouldForceDelete Events");
        Ok(())
    })
    .await?;
    Ok(())
}

/// A pod on a dead node that a finalizer holds: a force delete would not remove it, so it is
/// never sent, before or after an operator restart (audit log: no DELETE; no record); `plan`
/// names the finalizer.
async fn a_pod_a_finalizer_holds_is_never_force_deleted(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    env.create_policy(policy_spec("Enforce")).await?;
    let mut op = Operator::start(cluster, env).await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "held", "finalizers": ["example.com/keep"] },
        "spec": {
            "nodeName": victim,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    let result = held_pod_scenario(env, &victim, &mut op).await;
    let release = json!({ "metadata": { "finalizers": null } });
    env.pods().patch("held", &PatchParams::default(), &Patch::Merge(&release)).await?;
    result
}

async fn held_pod_scenario(env: &TestEnv, victim: &str, op: &mut Operator) -> Result<()> {
    let cluster = shared_cluster().await?;
    wait_for("pod held to run", Duration::from_secs(60), || async {
        Ok(env.pods().get_opt("held").await?.filter(crate::support::env::pod_is_ready))
    })
    .await?;
    env.kill_node(victim).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let terminating = env.delete_gracefully("held", 1).await?;
    let due = due_instant(env, victim, &terminating).await?;
    let untouched = || async {
        let writes = operator_mutations(env).await?;
        ensure!(writes.is_empty(), "the operator wrote to the held pod: {writes:?}");
        let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
        ensure!(status.recent_actions.is_empty(), "records: {:?}", status.recent_actions);
        Ok(())
    };
    holds_for("no DELETE of the held pod", until(due) + Duration::from_secs(5), untouched).await?;
    let plan: serde_json::Value = serde_json::from_str(&run_plan(env, true).await?)?;
    let held = plan[0]["notActing"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|w| w["pod"] == "held")
        .cloned()
        .unwrap_or_default();
    ensure!(
        held["code"] == "HeldByFinalizers"
            && held["reason"].as_str().is_some_and(|r| r.contains("example.com/keep")),
        "plan should say a finalizer holds it: {plan:#}"
    );
    // A new run trusts evidence a full window after its start; watched past that.
    op.kill();
    *op = Operator::start(cluster, env).await?;
    let window = Duration::from_secs(LEASE_STALE_FOR as u64 + 10);
    holds_for("no DELETE after the restart either", window, untouched).await?;
    Ok(())
}

async fn pods_of_a_node_that_returns_are_left_alone(env: &TestEnv) -> Result<()> {
    let Scenario { operator: _op, victim, pod_name, pod_uid, due } =
        one_pod_on_a_dying_node(env, "blip", "Enforce").await?;
    ensure!(until(due) > Duration::from_secs(5), "too late to revive the node before it is due");
    env.revive_node(&victim).await?;
    env.wait_node_ready(&victim, "True").await?;
    // The revived kubelet (kwok) finishes the pod itself.
    wait_gone(env, &pod_name, &pod_uid, Duration::from_secs(30)).await?;
    // Until past the instant it would have been due, the operator writes nothing.
    holds_for(
        "the operator to leave the revived node's pods alone",
        until(due) + Duration::from_secs(2),
        || async {
            let writes = operator_mutations(env).await?;
            ensure!(writes.is_empty(), "the operator mutated pods or nodes: {writes:?}");
            Ok(())
        },
    )
    .await?;
    let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
    ensure!(status.recent_actions.is_empty(), "unexpected actions {:?}", status.recent_actions);
    Ok(())
}

async fn dry_run_records_without_mutating_then_enforce_acts(env: &TestEnv) -> Result<()> {
    let Scenario { operator: op, victim: _, pod_name, pod_uid, due } =
        one_pod_on_a_dying_node(env, "victim", "DryRun").await?;
    let record = env
        .wait_policy(
            "a WouldAct record in the policy status",
            until(due) + Duration::from_secs(10),
            |s| s.recent_actions.iter().find(|a| a.uid == pod_uid).cloned(),
        )
        .await?;
    ensure!(record.result.as_str() == "WouldAct" && record.mode.as_str() == "DryRun", "{record:?}");
    // Status times have a resolution of one second.
    ensure!(
        record.time.0.as_second() >= due.as_second(),
        "recorded at {} before the due instant {due}",
        record.time.0
    );

    // Nothing mutated: the pod is still there, and the audit log has no write by the operator.
    holds_for("the pod to stay untouched in DryRun", Duration::from_secs(3), || async {
        let p = env.pods().get_opt(&pod_name).await?;
        ensure!(
            p.as_ref().map(uid).as_deref() == Some(pod_uid.as_str()),
            "pod {pod_name} changed or vanished"
        );
        Ok(())
    })
    .await?;
    let writes = operator_mutations(env).await?;
    ensure!(writes.is_empty(), "DryRun mutated pods or nodes: {writes:?}");
    ensure!(
        !pod_events(env, &pod_name, "WouldForceDelete").await?.is_empty(),
        "no WouldForceDelete Event"
    );
    let would = op
        .metric(
            "kube_remediator_actions_total",
            &[("policy", &env.name), ("mode", "DryRun"), ("result", "WouldAct")],
        )
        .await?;
    ensure!(would == Some(1.0), "actions_total{{DryRun,WouldAct}} = {would:?}");

    // `plan` shows the same decision.
    let plan: serde_json::Value = serde_json::from_str(&run_plan(env, true).await?)?;
    let actions = plan[0]["actions"].as_array().cloned().unwrap_or_default();
    ensure!(
        actions.iter().any(|a| a["pod"] == pod_name.as_str() && a["action"] == "ForceDelete"),
        "plan -o json lacks the action: {plan:#}"
    );
    ensure!(plan[0]["mode"] == "DryRun" && plan[0]["circuit"]["open"] == false, "{plan:#}");
    let table = run_plan(env, false).await?;
    ensure!(
        table.lines().any(|l| l.contains("WOULD (DryRun) ForceDelete") && l.contains(&pod_name)),
        "plan table lacks the action:\n{table}"
    );

    // Flip to Enforce: the pod goes within a couple of seconds.
    let flipped = std::time::Instant::now();
    let patch = json!({ "spec": { "mode": "Enforce" } });
    env.policies().patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_gone(env, &pod_name, &pod_uid, Duration::from_secs(5)).await?;
    eprintln!("[st-dry-run] Enforce acted {:.2}s after the flip", flipped.elapsed().as_secs_f64());
    Ok(())
}

async fn statefulset_pod_needs_fencing_and_replacement_is_spared(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    env.create_policy(policy_spec("Enforce")).await?;
    let _op = Operator::start(cluster, env).await?;
    // Land web-0 on the victim: cordon the healthy node while it is scheduled.
    env.set_unschedulable(&env.healthy_node, true).await?;
    let sts = stateful_set("web", 1, json!({ ZONE_LABEL: env.zone }))?;
    env.api::<StatefulSet>().create(&PostParams::default(), &sts).await?;
    let pod = env.wait_pods_ready("app=web", 1).await?.remove(0);
    env.set_unschedulable(&env.healthy_node, false).await?;
    ensure!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(victim.as_str()),
        "web-0 not on {victim}"
    );
    let old_uid = uid(&pod);

    env.kill_node(&victim).await?;
    let terminating = wait_terminating(env, "web-0").await?;
    let due = due_instant(env, &victim, &terminating).await?;
    // Without fencing evidence the pod stays, past its due instant.
    still_there_until(env, "web-0", &old_uid, due + SignedDuration::from_secs(5)).await?;
    let plan: serde_json::Value = serde_json::from_str(&run_plan(env, true).await?)?;
    let waiting = plan[0]["notActing"].as_array().cloned().unwrap_or_default();
    ensure!(
        waiting.iter().any(|w| w["pod"] == "web-0" && w["code"] == "NeedsFencing"),
        "plan does not say web-0 needs fencing: {plan:#}"
    );
    // And so do the pod and its StatefulSet: one Event each, naming the command that fences.
    for (kind, name, reason) in
        [("Pod", "web-0", "NeedsFencing"), ("StatefulSet", "web", "PodNeedsFencing")]
    {
        let events = wait_for(
            &format!("a {reason} Event on {kind} {name}"),
            Duration::from_secs(10),
            || async {
                let events = env.events_about(kind, name, reason).await?;
                Ok((!events.is_empty()).then_some(events))
            },
        )
        .await?;
        let note = events[0].note.clone().unwrap_or_default();
        ensure!(
            events.len() == 1
                && note.contains(&format!(
                    "kubectl taint node {victim} node.kubernetes.io/out-of-service"
                )),
            "{kind} {name}: {events:?}"
        );
    }

    // Fencing evidence: the admin marks the node out of service.
    let patch = json!({ "spec": { "taints": [
        { "key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute" },
        { "key": "node.kubernetes.io/unreachable", "effect": "NoExecute" },
        { "key": "node.kubernetes.io/unreachable", "effect": "NoSchedule" },
    ]}});
    env.nodes().patch(&victim, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_gone(env, "web-0", &old_uid, Duration::from_secs(10)).await?;

    // The StatefulSet recreates web-0 on the healthy node; the operator never touches it.
    let replacement = env.wait_pods_ready("app=web", 1).await?.remove(0);
    let new_uid = uid(&replacement);
    ensure!(new_uid != old_uid, "web-0 was not replaced");
    holds_for("the replacement web-0 to be left alone", Duration::from_secs(5), || async {
        let p = env.pods().get_opt("web-0").await?.context("web-0 vanished")?;
        ensure!(
            uid(&p) == new_uid && p.metadata.deletion_timestamp.is_none(),
            "replacement web-0 touched"
        );
        Ok(())
    })
    .await?;
    let deletes: Vec<_> =
        operator_mutations(env).await?.into_iter().filter(|w| w.verb == "delete").collect();
    ensure!(deletes.len() == 1, "expected exactly one DELETE by the operator: {deletes:?}");
    // Unblocked: the status stops listing the StatefulSet, and never names the replacement.
    env.wait_policy("status.blockedRollouts without web", Duration::from_secs(10), |s| {
        (!s.blocked_rollouts.iter().any(|b| b.name == "web")).then_some(())
    })
    .await?;
    Ok(())
}

/// A pod that mounts a block device only one node may write, named in the pod itself (an
/// inline iSCSI volume, no claim), needs fencing like a ReadWriteOnce claim's: on its dead node
/// it stays past its due instant (plan: NeedsFencing, ReadWriteOnce), and goes once the admin
/// marks the node out of service.
async fn a_pod_with_an_inline_block_device_needs_fencing(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    env.create_policy(policy_spec("Enforce")).await?;
    let _op = Operator::start(cluster, env).await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "block", "labels": { "app": "block" } },
        "spec": {
            "nodeName": victim,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
            "volumes": [{ "name": "data", "iscsi": {
                "targetPortal": "192.0.2.10:3260", "iqn": "iqn.2026-01.io.example:data", "lun": 0,
            } }],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    let pod = env.wait_pods_ready("app=block", 1).await?.remove(0);
    let old_uid = uid(&pod);
    env.kill_node(&victim).await?;
    let terminating = wait_terminating(env, "block").await?;
    let due = due_instant(env, &victim, &terminating).await?;
    still_there_until(env, "block", &old_uid, due + SignedDuration::from_secs(5)).await?;
    let plan: serde_json::Value = serde_json::from_str(&run_plan(env, true).await?)?;
    let waiting = plan[0]["notActing"].as_array().cloned().unwrap_or_default();
    let held = waiting.iter().find(|w| w["pod"] == "block").context("block not in the plan")?;
    ensure!(held["code"] == "NeedsFencing", "block is not held for fencing: {held:#}");
    let why = held.to_string();
    ensure!(why.contains("ReadWriteOnce"), "not held as a single-writer volume: {why}");

    let patch = json!({ "spec": { "taints": [
        { "key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute" },
    ]}});
    env.nodes().patch(&victim, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_gone(env, "block", &old_uid, Duration::from_secs(10)).await?;
    Ok(())
}

async fn excluded_daemonset_and_unselected_pods_are_untouched(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    let mut spec = policy_spec("Enforce");
    spec["podSelector"] = json!({ "matchExpressions": [{ "key": "tier", "operator": "NotIn", "values": ["unselected"] }] });
    env.create_policy(spec).await?;
    let _op = Operator::start(cluster, env).await?;

    let pods = env.pods();
    let no = json!({});
    for pod in [
        bare_pod("control", &victim, json!({ "tier": "app" }), no.clone())?,
        bare_pod(
            "opted-out",
            &victim,
            json!({ "tier": "app" }),
            json!({ "remediator.io/exclude": "true" }),
        )?,
        bare_pod("unselected", &victim, json!({ "tier": "unselected" }), no.clone())?,
    ] {
        pods.create(&PostParams::default(), &pod).await?;
    }
    // A namespace outside the policy's namespaceSelector.
    let other = format!("{}-other", env.name);
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": other } }))?;
    Api::<Namespace>::all(env.client.clone()).create(&PostParams::default(), &ns).await?;
    let other_pods: Api<Pod> = Api::namespaced(env.client.clone(), &other);
    other_pods
        .create(&PostParams::default(), &bare_pod("elsewhere", &victim, no.clone(), no.clone())?)
        .await?;
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": { "name": "agent" },
        "spec": {
            "selector": { "matchLabels": { "app": "agent" } },
            "template": crate::fixtures::pod_template("agent", json!({ HOSTNAME_LABEL: victim })),
        },
    }))?;
    env.api::<DaemonSet>().create(&PostParams::default(), &ds).await?;
    env.wait_pods_ready("tier", 3).await?;
    let agent = env.wait_pods_ready("app=agent", 1).await?.remove(0);

    env.kill_node(&victim).await?;
    let control = wait_terminating(env, "control").await?;
    // DaemonSet pods tolerate the unreachable taint; delete it by hand, as an admin would.
    pods.delete(&name(&agent), &DeleteParams::default()).await?;
    let due = due_instant(env, &victim, &control).await?;
    wait_gone(env, "control", &uid(&control), until(due) + Duration::from_secs(10)).await?;

    // A few seconds later every other pod is still there, Terminating.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (api, pod) in [
        (&pods, "opted-out"),
        (&pods, "unselected"),
        (&pods, name(&agent).as_str()),
        (&other_pods, "elsewhere"),
    ] {
        let p = api.get_opt(pod).await?.with_context(|| format!("pod {pod} was deleted"))?;
        ensure!(p.metadata.deletion_timestamp.is_some(), "pod {pod} is not Terminating");
    }
    let writes: Vec<_> = operator_mutations(env).await?;
    ensure!(
        AuditEntry::is_release(&writes)
            && writes.iter().all(|w| w.name.as_deref() == Some("control")),
        "the operator should have released only `control`: {writes:?}"
    );
    Ok(())
}

/// Invariant 3: with more of its nodes unhealthy than `maxUnhealthyNodes`, the policy deletes
/// nothing and says why (CircuitOpen condition, Event, gauge). When one node comes back, the
/// circuit cools down (`safety.cooldown`) before the other node's pod is released: not before
/// the cool-down ends, and soon after.
async fn circuit_breaker_blocks_deletions_when_too_many_nodes_die(env: &TestEnv) -> Result<()> {
    const COOLDOWN: i64 = 10;
    let cluster = shared_cluster().await?;
    let a = env.add_node("a").await?;
    let b = env.add_node("b").await?;
    let mut spec = policy_spec("Enforce");
    spec["safety"]["maxUnhealthyNodes"] = json!(1);
    spec["safety"]["cooldown"] = json!(format!("{COOLDOWN}s"));
    env.create_policy(spec).await?;
    let op = Operator::start(cluster, env).await?;
    let pods = env.pods();
    pods.create(&PostParams::default(), &bare_pod("on-a", &a, json!({}), json!({}))?).await?;
    pods.create(&PostParams::default(), &bare_pod("on-b", &b, json!({}), json!({}))?).await?;
    let on_b_uid = uid(&wait_for("on-b to run", Duration::from_secs(30), || async {
        Ok(env.pods().get("on-b").await.ok().filter(crate::support::env::pod_is_ready))
    })
    .await?);

    env.kill_node(&a).await?;
    env.kill_node(&b).await?;
    let on_a = wait_terminating(env, "on-a").await?;
    let on_b = wait_terminating(env, "on-b").await?;
    let due = due_instant(env, &a, &on_a).await?.max(due_instant(env, &b, &on_b).await?);
    let message = env
        .wait_policy("the CircuitOpen condition", Duration::from_secs(30), |s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "CircuitOpen" && c.status == "True")
                .map(|c| c.message.clone())
        })
        .await?;
    ensure!(message.contains("2 of 3"), "unexpected CircuitOpen message: {message}");
    still_there_until(env, "on-b", &on_b_uid, due + SignedDuration::from_secs(5)).await?;
    ensure!(
        operator_mutations(env).await?.is_empty(),
        "the operator mutated pods with the circuit open"
    );
    let open = op.metric("kube_remediator_circuit_open", &[("policy", &env.name)]).await?;
    ensure!(open == Some(1.0), "circuit_open gauge = {open:?}");
    let circuit_events =
        env.events_about("RemediationPolicy", &env.name, "CircuitOpen").await?.len();
    ensure!(circuit_events >= 1, "no CircuitOpen Event on the policy");

    // One node comes back: within the limit again, the circuit cools down, then the other
    // node's pod is released.
    env.revive_node(&a).await?;
    env.wait_node_ready(&a, "True").await?;
    let cooling_until = env
        .wait_policy("the circuit to cool down", Duration::from_secs(15), |s| {
            let c = s.circuit.as_ref()?;
            (c.state == kube_remediator::crd::CircuitState::CoolingDown)
                .then(|| c.until.as_ref().map(|t| t.0))?
        })
        .await?;
    let cooling_since = cooling_until - SignedDuration::from_secs(COOLDOWN);
    ensure!(
        cooling_since <= Timestamp::now(),
        "the cool-down starts in the future: until {cooling_until}"
    );
    still_there_until(env, "on-b", &on_b_uid, cooling_until).await?;
    wait_gone(env, "on-b", &on_b_uid, until(cooling_until) + Duration::from_secs(10)).await?;
    let gone_after = Timestamp::now().duration_since(cooling_until);
    eprintln!(
        "[st-circuit] released {:.1}s after the end of the {COOLDOWN}s cool-down",
        gone_after.as_secs_f64()
    );
    let cooling_events =
        env.events_about("RemediationPolicy", &env.name, "CircuitCoolingDown").await?.len();
    ensure!(cooling_events >= 1, "no CircuitCoolingDown Event on the policy");
    ensure!(
        node_ready_status(&env.nodes().get(&b).await?).as_deref() == Some("Unknown"),
        "b came back?"
    );
    Ok(())
}

/// Invariant 2: an operator that starts (or resyncs) after a node died does not take the old
/// Lease as evidence: the node counts as dead only a full `leaseStaleFor` after its own sync.
async fn a_fresh_operator_trusts_no_evidence_older_than_its_sync(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    env.create_policy(policy_spec("Enforce")).await?;
    let pod = one_pod_on(env, "api", &victim).await?;
    let (pod_name, pod_uid) = (name(&pod), uid(&pod));
    env.kill_node(&victim).await?;
    let terminating = wait_terminating(env, &pod_name).await?;
    let due = due_instant(env, &victim, &terminating).await?;
    // Start the operator only once the pod is long due by the cluster's own timestamps.
    tokio::time::sleep(until(due) + Duration::from_secs(2)).await;
    let started = Timestamp::now();
    let _op = Operator::start(cluster, env).await?;
    let trusted_from = started + SignedDuration::from_secs(LEASE_STALE_FOR);
    still_there_until(env, &pod_name, &pod_uid, trusted_from).await?;
    wait_gone(env, &pod_name, &pod_uid, until(trusted_from) + Duration::from_secs(10)).await?;
    eprintln!(
        "[st-fresh-start-waits] acted {:.1}s after the operator started (leaseStaleFor {LEASE_STALE_FOR}s)",
        Timestamp::now().duration_since(started).as_secs_f64()
    );
    Ok(())
}

/// Two overlapping Enforce policies select the same StatefulSet's pods on a dead, fenced node,
/// each with `maxPodsPerOwnerPerMinute: 1`: together they release one pod a minute, not two,
/// and each pod is deleted once.
async fn two_overlapping_policies_share_one_owner_budget(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    let mut spec = policy_spec("Enforce");
    spec["safety"]["maxPodsPerOwnerPerMinute"] = json!(1);
    env.create_named_policy(&format!("{}-a", env.name), spec.clone()).await?;
    env.create_named_policy(&format!("{}-b", env.name), spec).await?;
    let _op = Operator::start(cluster, env).await?;
    // Land the three pods on the victim: cordon the healthy node while they are scheduled.
    env.set_unschedulable(&env.healthy_node, true).await?;
    let sts = stateful_set("db", 3, json!({ ZONE_LABEL: env.zone }))?;
    env.api::<StatefulSet>().create(&PostParams::default(), &sts).await?;
    env.wait_pods_ready("app=db", 3).await?;
    env.set_unschedulable(&env.healthy_node, false).await?;
    // Fenced by the admin from the start, so only the budget paces the releases.
    let taint = json!({ "spec": { "taints": [
        { "key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute" },
    ]}});
    env.kill_node(&victim).await?;
    env.nodes().patch(&victim, &PatchParams::default(), &Patch::Merge(&taint)).await?;

    let deletes = || async {
        Ok::<_, anyhow::Error>(
            operator_mutations(env)
                .await?
                .into_iter()
                .filter(|e| e.verb == "delete" && e.resource == "pods")
                .filter(|e| e.name.as_deref().is_some_and(|n| n.starts_with("db-")))
                .collect::<Vec<_>>(),
        )
    };
    let first = wait_for("the first db pod to be released", Duration::from_secs(120), || async {
        let d = deletes().await?;
        Ok(d.first().and_then(|e| e.received))
    })
    .await?;
    // One budget for both policies: nothing more within the minute.
    let window = Duration::try_from(
        (first + SignedDuration::from_secs(55)).duration_since(Timestamp::now()),
    )
    .unwrap_or_default();
    holds_for("one release per minute across both policies", window, || async {
        let d = deletes().await?;
        ensure!(d.len() == 1, "{} DELETEs within the minute: {d:?}", d.len());
        Ok(())
    })
    .await?;
    let second = wait_for("the second db pod to be released", Duration::from_secs(40), || async {
        let d = deletes().await?;
        Ok(d.get(1).and_then(|e| e.received))
    })
    .await?;
    let gap = second.duration_since(first).as_secs_f64();
    ensure!(gap >= 59.0, "the second release came {gap:.1}s after the first");
    let names: Vec<Option<String>> = deletes().await?.into_iter().map(|e| e.name).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    ensure!(unique.len() == names.len(), "a pod was deleted twice: {names:?}");
    eprintln!("[st-overlapping-budget] second release {gap:.1}s after the first (budget 1/min)");
    Ok(())
}

/// Both nodes of a zone die at the same instant: that looks like a partition, so their pods
/// stay (past the instant they are due, audit log) and `plan` says why; once one node of the
/// zone is back, the other's pod is released.
async fn a_zone_down_at_once_is_a_partition_not_deaths(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let zone = format!("{}-b", env.zone);
    let mut nodes = Vec::new();
    for suffix in ["b1", "b2"] {
        let node = env.add_node(suffix).await?;
        let patch = json!({ "metadata": { "labels": { ZONE_LABEL: zone } } });
        env.nodes().patch(&node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        env.create_bound_pod(&format!("pod-{suffix}"), &node).await?;
        nodes.push(node);
    }
    let mut spec = policy_spec("Enforce");
    spec["safety"]["maxUnhealthyNodes"] = json!(3);
    env.create_policy(spec).await?;
    let _op = Operator::start(cluster, env).await?;
    env.wait_pods_ready("app=pod-b1", 1).await?;
    env.wait_pods_ready("app=pod-b2", 1).await?;
    for node in &nodes {
        env.kill_node(node).await?;
    }
    let mut uids = Vec::new();
    for suffix in ["b1", "b2"] {
        uids.push(uid(&env.delete_gracefully(&format!("pod-{suffix}"), 1).await?));
    }
    // Without the zone guard both pods would be due when the nodes are dead.
    let due = env.dead_at(&nodes[1], NOT_READY_FOR, LEASE_STALE_FOR).await?;
    still_there_until(env, "pod-b2", &uids[1], due + SignedDuration::from_secs(12)).await?;
    let plan: serde_json::Value = serde_json::from_str(&run_plan(env, true).await?)?;
    let waiting = plan[0]["notActing"].as_array().cloned().unwrap_or_default();
    ensure!(
        waiting.iter().any(|w| w["pod"] == "pod-b2" && w["code"] == "ZonePartitioned"),
        "plan does not say the zone looks partitioned: {plan:#}"
    );
    let deletes = cluster.operator_pod_deletes(&env.namespace, "pod-b2")?;
    ensure!(deletes.is_empty(), "pod-b2 deleted while its zone looked partitioned: {deletes:?}");

    // One node of the zone comes back: the other is a dead node like any, its pod released
    // once the zone's cool-down (one kubelet Lease duration, 40 s, after the first node came
    // back) has passed.
    let back = std::time::Instant::now();
    env.revive_node(&nodes[0]).await?;
    wait_gone(env, "pod-b2", &uids[1], Duration::from_secs(90)).await?;
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, "pod-b2").await?;
    ensure!(deletes.len() == 1, "expected one DELETE of pod-b2: {deletes:?}");
    eprintln!(
        "[st-zone-partition] pod-b2 released {:.1}s after one node of its zone came back",
        back.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A record stored ahead whose action does not come: the node's kubelet renews its Lease in
/// the second between the pod's `Pending` record ahead and its due instant. The plan at that
/// instant does not take the pod (its node is not dead), so the record is withdrawn (`Skipped`,
/// saying it was never sent), nothing is left `Pending`, and no DELETE goes out (audit log).
async fn a_record_ahead_is_withdrawn_when_the_node_returns(env: &TestEnv) -> Result<()> {
    let Scenario { operator: _op, victim, pod_name: _, pod_uid, due } =
        one_pod_on_a_dying_node(env, "returns", "Enforce").await?;
    let (seen, due) = record_ahead(env, &pod_uid, until(due) + Duration::from_secs(10)).await?;
    // The kubelet is back: its Lease renewed at once (as it would be first), then kwok
    // heartbeats the node again.
    let node = env.nodes().get(&victim).await?;
    let node_uid = node.metadata.uid.unwrap_or_default();
    renew_lease(&env.client, &victim, &node_uid, LEASE_STALE_FOR as u32, Timestamp::now()).await?;
    let renewed = Timestamp::now();
    env.revive_node(&victim).await?;
    in_the_window("st-ahead-node-returns", "the Lease renewed", seen, renewed, due)?;
    let withdrawn = env
        .wait_policy("the record ahead withdrawn", until(due) + Duration::from_secs(10), |s| {
            s.recent_actions
                .iter()
                .find(|a| a.uid == pod_uid && a.result.as_str() == "Skipped")
                .cloned()
        })
        .await?;
    ensure!(
        withdrawn.detail.as_deref().is_some_and(|d| d.contains("never sent")),
        "the pod's Skipped record does not say its record ahead was never sent: {withdrawn:?}"
    );
    holds_for("no DELETE after the record ahead", Duration::from_secs(5), || async {
        let writes = operator_mutations(env).await?;
        ensure!(writes.is_empty(), "the operator wrote to the returned node's pod: {writes:?}");
        let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
        let left: Vec<_> = status
            .recent_actions
            .iter()
            .filter(|a| a.uid == pod_uid && matches!(a.result.as_str(), "Pending" | "Done"))
            .collect();
        ensure!(left.is_empty(), "records of the pod still Pending or Done: {left:?}");
        Ok(())
    })
    .await
}

/// A restart between a record stored ahead and its due instant: the operator is killed the
/// moment its record ahead is seen. The next run sends nothing on that record: it trusts no
/// evidence older than its own sync, so the pod is due again a full `leaseStaleFor` after it,
/// and its DELETE (the only one, audit log) goes out after a `Pending` record of the new run.
async fn a_restart_after_a_record_ahead_sends_nothing_on_it(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let Scenario { operator: mut op, victim: _, pod_name, pod_uid, due } =
        one_pod_on_a_dying_node(env, "victim", "Enforce").await?;
    let statuses = tokio::spawn(policy_statuses(env.policies(), env.name.clone()));
    let (seen, due) = record_ahead(env, &pod_uid, until(due) + Duration::from_secs(10)).await?;
    op.kill();
    let killed = Timestamp::now();
    in_the_window("st-ahead-restart", "the operator killed", seen, killed, due)?;
    let _op = Operator::start(cluster, env).await?;
    let timeout = Duration::from_secs(LEASE_STALE_FOR as u64 + 30);
    wait_gone(env, &pod_name, &pod_uid, timeout).await?;
    // The pod can be seen gone before the API server has logged the DELETE that removed it.
    cluster.await_operator_pod_deletes(&env.namespace, &pod_name).await?;
    let writes = operator_mutations(env).await?;
    let deletes: Vec<_> = writes
        .iter()
        .filter(|w| w.verb == "delete" && w.name.as_deref() == Some(&pod_name))
        .collect();
    ensure!(deletes.len() == 1, "expected one DELETE of {pod_name}, got {writes:?}");
    let sent = deletes[0].received.context("the DELETE's audit entry has no time")?;
    ensure!(sent > killed, "the DELETE was received at {sent}, before the restart at {killed}");
    // The status as the watch delivered it, in the order written: a Pending record of the pod
    // by the new run (stamped after the kill; status times have a resolution of one second,
    // and the new run's evidence needs `leaseStaleFor` of its own), before its Done record.
    let versions = statuses.await??;
    let of_pod = |v: &RemediationPolicyStatus, result: &str, after: Timestamp| {
        v.recent_actions.iter().any(|a| {
            a.uid == pod_uid
                && a.result.as_str() == result
                && a.time.0.as_second() > after.as_second()
        })
    };
    let pending = versions.iter().position(|(_, v)| of_pod(v, "Pending", killed));
    let done = versions.iter().position(|(_, v)| of_pod(v, "Done", killed));
    let (Some(pending), Some(done)) = (pending, done) else {
        bail!("no Pending record by the new run, or no Done record: {versions:?}");
    };
    ensure!(pending < done, "the new run's Pending record came after its Done one: {versions:?}");
    eprintln!(
        "[st-ahead-restart] released {:.1}s after the restart",
        sent.duration_since(killed).as_secs_f64()
    );
    Ok(())
}
