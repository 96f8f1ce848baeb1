//! Field incident 2 (kubernetes/kubernetes#80968): pods left Ready=False after a node blip.
//!
//! The blip is reproduced as it happens: the test plays the node's kubelet (its Ready condition
//! and Lease, `add_live_node_without_kubelet`) and writes its pods' statuses as that kubelet
//! would. The kubelet stops heartbeating for longer than the node-monitor grace period (10 s on
//! this control plane) and shorter than the pods' tolerations (300 s, so the taint manager does
//! not evict them): kube-controller-manager marks the node Unknown and its pods not Ready
//! (their Ready condition only; the containers still report ready). Then the kubelet comes back
//! and heartbeats again but, like the kubelet of the incident, never resends the pods' statuses:
//! they stay Ready=False, out of their Services' endpoints, with every container ready.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::{TEST_LABEL, ZONE_LABEL};
use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![e2e!("sr-blip-evict", pods_left_not_ready_by_a_blip_are_found_and_evicted_one_at_a_time)]
}

/// The label that steers the test's Deployments to a node.
const POOL: &str = "remediator.io/e2e-pool";
const NODE_READY_FOR: i64 = 5;

/// A Deployment of `replicas` pods in this test's pool, tolerating an unreachable or not-ready
/// node for 300 s (this control plane's default is 5 s).
fn pooled(env: &TestEnv, name: &str, replicas: i32) -> Result<Deployment> {
    let toleration = |key: &str| json!({ "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 });
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name, TEST_LABEL: env.name } },
                "spec": {
                    "nodeSelector": { POOL: env.name },
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [
                        toleration("node.kubernetes.io/unreachable"),
                        toleration("node.kubernetes.io/not-ready"),
                    ],
                    "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
                },
            },
        },
    }))?)
}

async fn set_pool(env: &TestEnv, node: &str, member: bool) -> Result<()> {
    let value = if member { json!(env.name) } else { json!(null) };
    let patch = json!({ "metadata": { "labels": { POOL: value } } });
    env.nodes().patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

fn ready_condition(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

/// The pods labelled `app=<app>` bound to `node`, by name.
async fn pods_on(env: &TestEnv, app: &str, node: &str) -> Result<Vec<Pod>> {
    let pods = env.list_pods(&format!("app={app}")).await?;
    Ok(pods
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect())
}

/// Plays the kubelet of the blip node for evicted pods (each `web` pod there being deleted is
/// finished: DELETE with grace 0), and returns how many `web` pods are left there, not evicted.
async fn web_pods_left(env: &TestEnv, node: &str) -> Result<usize> {
    let mut left = 0;
    for pod in pods_on(env, "web", node).await? {
        if pod.metadata.deletion_timestamp.is_some() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
            let _ = env.pods().delete(&name, &now).await;
        } else {
            left += 1;
        }
    }
    Ok(left)
}

/// The operator's evictions (audit log), oldest first.
fn evictions(cluster: &Cluster, env: &TestEnv) -> Result<Vec<AuditEntry>> {
    Ok(cluster
        .audit_writes()?
        .into_iter()
        .filter(|e| {
            e.user == OPERATOR_USER
                && e.verb == "create"
                && e.resource == "pods"
                && e.subresource.as_deref() == Some("eviction")
                && e.namespace.as_deref() == Some(&env.namespace)
        })
        .collect())
}

/// Two pods of Deployment `web` and the one pod of Deployment `probe` run on a node whose
/// kubelet the test plays; `probe`'s container fails its readiness probe (container not ready,
/// pod Ready=False: `ContainersNotReady`). A PodDisruptionBudget of maxUnavailable 1 guards
/// `web`. The node blips; `web`'s pods are left Ready=False with every container ready. The test
/// finishes the evicted pods as their kubelet would (a DELETE with grace 0).
///
/// With `staleReadiness: {action: Evict, nodeReadyFor: 5s}` and one pod per owner per minute:
/// - both `web` pods are found (status.staleReadyPods, the gauge, a StaleReadiness Event), and
///   `probe`'s pod is not: its own container is not ready;
/// - while the budget allows no eviction (minAvailable 3 of 2 pods) the refusal is reported
///   (EvictSkipped naming the budget), retried, and nothing is deleted;
/// - once the budget is maxUnavailable 1 and lets pods that are not Ready go
///   (`unhealthyPodEvictionPolicy: AlwaysAllow`: with the default IfHealthyBudget, two
///   stale pods of two count as a disrupted application and are never evictable), the pods are
///   evicted one at a time, a minute apart (the owner budget), and replaced on a healthy node;
///   `probe`'s pod is never evicted.
async fn pods_left_not_ready_by_a_blip_are_found_and_evicted_one_at_a_time(
    env: &TestEnv,
) -> Result<()> {
    let cluster = shared_cluster().await?;
    let (blip, kubelet) = env.add_live_node_without_kubelet("blip").await?;
    set_pool(env, &blip, true).await?;
    let deployments = env.api::<Deployment>();
    deployments.create(&PostParams::default(), &pooled(env, "web", 2)?).await?;
    deployments.create(&PostParams::default(), &pooled(env, "probe", 1)?).await?;
    let bound = wait_for("3 pods bound to the blip node", Duration::from_secs(30), || async {
        let web = pods_on(env, "web", &blip).await?;
        let probe = pods_on(env, "probe", &blip).await?;
        Ok((web.len() == 2 && probe.len() == 1).then_some((web, probe)))
    })
    .await?;
    let (web, probe) = bound;
    for pod in &web {
        env.write_pod_status(&pod.metadata.name.clone().unwrap_or_default(), true).await?;
    }
    let probe_name = probe[0].metadata.name.clone().unwrap_or_default();
    env.write_pod_status(&probe_name, false).await?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "minAvailable": 3, "selector": { "matchLabels": { "app": "web" } } },
    }))?;
    env.api::<PodDisruptionBudget>().create(&PostParams::default(), &pdb).await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "staleReadiness": { "action": "Evict", "nodeReadyFor": format!("{NODE_READY_FOR}s") },
        "safety": { "maxPodsPerOwnerPerMinute": 1, "maxUnhealthyNodes": 1 },
    }))
    .await?;
    let op = Operator::start(cluster, env).await?;

    // The blip: no heartbeat until the node is Unknown and its pods marked not Ready.
    drop(kubelet);
    env.wait_node_ready(&blip, "Unknown").await?;
    wait_for("the web pods marked not Ready", Duration::from_secs(30), || async {
        let pods = pods_on(env, "web", &blip).await?;
        Ok(pods.iter().all(|p| ready_condition(p).as_deref() == Some("False")).then_some(()))
    })
    .await?;
    let _kubelet = env.heartbeat_again(&blip).await?;
    env.wait_node_ready(&blip, "True").await?;
    let back = Timestamp::now();
    // Replacements go to a healthy node that kwok runs.
    set_pool(env, &blip, false).await?;
    set_pool(env, &env.healthy_node, true).await?;

    let stale = env
        .wait_policy("the stale pods in the status", Duration::from_secs(30), |s| {
            (s.stale_ready_pods.len() == 2).then(|| s.stale_ready_pods.clone())
        })
        .await?;
    let found_after = Timestamp::now().duration_since(back);
    ensure!(
        found_after >= SignedDuration::from_secs(NODE_READY_FOR) - SignedDuration::from_secs(1),
        "found {:.1}s after the node came back, before nodeReadyFor",
        found_after.as_secs_f64()
    );
    ensure!(
        stale.iter().all(|s| s.name != probe_name),
        "the probe pod counted as stale: {stale:?}"
    );
    let gauge = op.metric("kube_remediator_stale_ready_pods", &[("policy", &env.name)]).await?;
    ensure!(gauge == Some(2.0), "stale_ready_pods = {gauge:?}");
    let web_name = web[0].metadata.name.clone().unwrap_or_default();
    env.wait_event("Pod", &web_name, "StaleReadiness", Duration::from_secs(15)).await?;

    // The budget refuses: reported, nothing deleted.
    wait_for("a refused eviction to be reported", Duration::from_secs(30), || async {
        let events = env.events_about("Pod", &web_name, "EvictSkipped").await?;
        Ok(events
            .iter()
            .any(|e| e.note.as_deref().is_some_and(|n| n.contains("PodDisruptionBudget")))
            .then_some(()))
    })
    .await?;
    ensure!(pods_on(env, "web", &blip).await?.len() == 2, "a web pod went despite the budget");

    // The budget lets unhealthy pods go: one eviction a minute.
    let patch = json!({ "spec": {
        "minAvailable": null, "maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow",
    } });
    env.api::<PodDisruptionBudget>()
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let first = wait_for("the first eviction", Duration::from_secs(30), || async {
        Ok((web_pods_left(env, &blip).await? == 1).then(Timestamp::now))
    })
    .await?;
    holds_for("the second pod to wait for the owner budget", Duration::from_secs(50), || async {
        let left = web_pods_left(env, &blip).await?;
        ensure!(left == 1, "{left} web pods left: a second eviction within the minute?");
        Ok(())
    })
    .await?;
    let second = wait_for("the second eviction", Duration::from_secs(30), || async {
        Ok((web_pods_left(env, &blip).await? == 0).then(Timestamp::now))
    })
    .await?;
    wait_for("the evicted pods gone", Duration::from_secs(30), || async {
        Ok(pods_on(env, "web", &blip).await?.is_empty().then_some(()))
    })
    .await?;
    let done: Vec<_> = evictions(cluster, env)?;
    let probe_evicted = done.iter().any(|e| e.name.as_deref() == Some(probe_name.as_str()));
    ensure!(!probe_evicted, "the probe pod was evicted: {done:?}");
    let replaced = env.wait_pods_ready("app=web", 2).await?;
    let healthy = env.healthy_node.as_str();
    ensure!(
        replaced
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(healthy)),
        "the replacements are not on {healthy}"
    );
    let node: Node = env.nodes().get(&blip).await?;
    ensure!(node.metadata.deletion_timestamp.is_none(), "the blip node was touched");
    let gap = second.duration_since(first);
    eprintln!(
        "[{}] stale pods found {:.1}s after the node came back (nodeReadyFor {NODE_READY_FOR}s); \
         evicted {:.1}s apart (one per owner per minute); {} eviction requests in all",
        env.name,
        found_after.as_secs_f64(),
        gap.as_secs_f64(),
        done.len()
    );
    let probe_left = env.pods().get_opt(&probe_name).await?.context("the probe pod is gone")?;
    ensure!(probe_left.metadata.deletion_timestamp.is_none(), "the probe pod is being deleted");
    Ok(())
}
