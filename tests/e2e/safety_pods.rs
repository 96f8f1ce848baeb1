//! Safety invariants about pods, each shown by the writes the operator sends (the audit log):
//!
//! - **Repair only what the failure did** (`kn-readiness-gate`): a pod left Ready=False because
//!   its own readiness gate is not satisfied, or because its native sidecar (an init container
//!   with `restartPolicy: Always`) is not ready, is failing its own readiness: it is never
//!   evicted by `staleReadiness: Evict`, on a node that stayed Ready, nor after a node blip the
//!   operator saw, while a pod the blip really left stale beside them is evicted.
//! - **A refused eviction waits its backoff** (`kn-refused-eviction`): a stale pod whose
//!   PodDisruptionBudget never allows an eviction costs a handful of eviction requests, status
//!   patches and Events over two minutes, not a loop; the refusal names the budget.
//! - **A fully disrupted zone holds every release** (`kn-zone-partition`,
//!   `kn-zone-deprecated-label`): as upstream's node lifecycle controller sees it, a zone is
//!   fully disrupted when every node in it is unhealthy *now*, however long ago the first one
//!   went, and a node's zone is its `topology.kubernetes.io/zone` label or, without it, the
//!   deprecated `failure-domain.beta.kubernetes.io/zone`. Pods stuck Terminating there are not
//!   force-deleted, while a dead node of a zone that still has a healthy node is released.
//!
//! They run on the production-like control plane ([`prod_e2e!`]): PodGC on, the default
//! tolerations (300 s), node-monitor grace period (a node without heartbeat turns Unknown about
//! 50 s later) and eviction rates. Each test's operator runs alone (`--leader-elect=false`) with
//! `--max-unhealthy-nodes-in-cluster=100%`: the tests here and the others on this control plane
//! kill nodes at the same time, and the cluster-wide storm guard (tested by `st-cluster-storm`)
//! must not hold the operator for them, or an absence of writes here would prove nothing. Each
//! policy's own `maxUnhealthyNodes` stays within its limit, and the tests check so.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use kube_remediator::crd::RemediationPolicyStatus;

use crate::faults::{kill_and_strand, running_pod_on, wait_gone};
use crate::fixtures::{uid, until};
use crate::prod_e2e;
use crate::support::cluster::{AuditEntry, Cluster};
use crate::support::env::{HOSTNAME_LABEL, ZONE_LABEL, node_ready_status};
use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("kn-zone-partition", a_zone_down_now_is_partitioned_however_it_went_down),
        prod_e2e!("kn-refused-eviction", a_refused_eviction_waits_its_backoff),
        prod_e2e!("kn-readiness-gate", a_pod_failing_its_own_readiness_is_never_evicted),
        prod_e2e!("kn-zone-deprecated-label", the_deprecated_zone_label_names_a_zone),
    ]
}

/// `staleReadiness.nodeReadyFor` of the readiness tests.
const NODE_READY_FOR: i64 = 5;
/// How long past an instant the operator would act at today (it requeues at the exact instant)
/// the tests watch for a write that must not come: covers a loaded 2-core machine.
const MARGIN: SignedDuration = SignedDuration::from_secs(30);
/// The dead-node windows of the zone tests.
const NOT_READY_FOR: i64 = 10;
/// The documented minimum.
const LEASE_STALE_FOR: i64 = 40;
/// A node without heartbeat turns Unknown about 50 s after its last one on this control plane.
const UNKNOWN_WITHIN: Duration = Duration::from_secs(150);
/// How long after its due instant a legitimate release or eviction may come at the latest.
const ACT_WITHIN: Duration = Duration::from_secs(20);
/// The readiness gate of the gated pod.
const GATE: &str = "example.com/lb-ready";
/// The budget that refuses every eviction: a name that appears nowhere else in the test.
const PDB_NAME: &str = "frontend-budget";
/// Over how long after the first refused eviction the operator's writes are counted.
const REFUSED_WINDOW: SignedDuration = SignedDuration::from_secs(120);
/// The most eviction requests of the refused pod in that window: 10 s doubling to 5 min is
/// at most 4 (at 0, 10, 30 and 70 s), and a small margin.
const MAX_EVICTIONS: usize = 6;
/// The most status patches of the policy, and the most Event writes, in that window.
const MAX_STATUS_PATCHES: usize = 15;
const MAX_EVENT_WRITES: usize = 15;
const DEPRECATED_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// The test's operator, alone, with the cluster-wide storm guard out of the way (see the top of
/// the file), ready.
async fn start_operator(cluster: &Cluster, env: &TestEnv) -> Result<Operator> {
    let extra = ["--leader-elect=false", "--max-unhealthy-nodes-in-cluster=100%"];
    Operator::start_replica(cluster, env, "", &extra).await
}

/// The operator's writes (audit log), oldest first.
fn operator_writes(cluster: &Cluster) -> Result<Vec<AuditEntry>> {
    Ok(cluster.audit_writes()?.into_iter().filter(|e| e.user == OPERATOR_USER).collect())
}

fn is_eviction(e: &AuditEntry, env: &TestEnv) -> bool {
    e.verb == "create"
        && e.resource == "pods"
        && e.subresource.as_deref() == Some("eviction")
        && e.namespace.as_deref() == Some(&env.namespace)
}

/// The operator's eviction requests (audit log: refused ones too) of pods named in `pods`.
fn evictions_of(cluster: &Cluster, env: &TestEnv, pods: &[String]) -> Result<Vec<AuditEntry>> {
    Ok(operator_writes(cluster)?
        .into_iter()
        .filter(|e| is_eviction(e, env))
        .filter(|e| e.name.as_ref().is_some_and(|n| pods.contains(n)))
        .collect())
}

async fn wait_unknown(env: &TestEnv, node: &str) -> Result<Node> {
    wait_for(&format!("node {node} Ready=Unknown"), UNKNOWN_WITHIN, || async move {
        let n = env.nodes().get_opt(node).await?;
        Ok(n.filter(|n| node_ready_status(n).as_deref() == Some("Unknown")))
    })
    .await
}

fn ready_transition(node: &Node) -> Option<Timestamp> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    Some(conditions.iter().find(|c| c.type_ == "Ready")?.last_transition_time.as_ref()?.0)
}

// ---------------------------------------------------------------------------------------------
// Readiness: a pod failing its own readiness is never evicted.

/// A Deployment `name` of one pod pinned to `node` (tolerating its node unreachable or not
/// ready for 300 s, as by default), with a native sidecar `proxy` (an init container with
/// `restartPolicy: Always` and a readiness probe) and/or the readiness gate [`GATE`].
fn pinned(name: &str, node: &str, sidecar: bool, gate: bool) -> Result<Deployment> {
    let toleration = |key: &str| json!({ "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 });
    let mut spec = json!({
        "nodeSelector": { HOSTNAME_LABEL: node },
        "terminationGracePeriodSeconds": 1,
        "tolerations": [
            toleration("node.kubernetes.io/unreachable"),
            toleration("node.kubernetes.io/not-ready"),
        ],
        "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
    });
    if sidecar {
        spec["initContainers"] = json!([{
            "name": "proxy", "image": "registry.invalid/proxy:v1", "restartPolicy": "Always",
            "readinessProbe": { "exec": { "command": ["/ready"] }, "periodSeconds": 5 },
        }]);
    }
    if gate {
        spec["readinessGates"] = json!([{ "conditionType": GATE }]);
    }
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": name } },
            "template": { "metadata": { "labels": { "app": name } }, "spec": spec },
        },
    }))?)
}

/// A running container's status, ready or not.
fn container_status(name: &str, image: &str, ready: bool, now: &str) -> Value {
    json!({
        "name": name, "image": image, "imageID": "", "ready": ready, "restartCount": 0,
        "started": true, "state": { "running": { "startedAt": now } },
    })
}

/// The whole status of a running pod as its kubelet computes it: container `app` ready; the
/// sidecar `proxy` ready or not (`None`: no sidecar); the gate condition True or False, as the
/// controller owning the gate wrote it (`None`: no gate). Ready is True only when every
/// container, the sidecar included, is ready and the gate is True, else False with the
/// kubelet's reason (`ContainersNotReady` before `ReadinessGatesNotReady`).
fn kubelet_status(sidecar: Option<bool>, gate: Option<bool>) -> Value {
    let now = Timestamp::now().to_string();
    let containers_ready = sidecar.unwrap_or(true);
    let gate_true = gate.unwrap_or(true);
    let s = |b: bool| if b { "True" } else { "False" };
    let (reason, message) = if !containers_ready {
        ("ContainersNotReady", "containers with unready status: [proxy]".to_string())
    } else {
        (
            "ReadinessGatesNotReady",
            format!("the status of pod readiness gate \"{GATE}\" is not \"True\", but False"),
        )
    };
    let mut containers_ready_condition = json!({
        "type": "ContainersReady", "status": s(containers_ready), "lastTransitionTime": now,
    });
    if !containers_ready {
        containers_ready_condition["reason"] = json!(reason);
        containers_ready_condition["message"] = json!(message);
    }
    let ready = containers_ready && gate_true;
    let mut ready_condition =
        json!({ "type": "Ready", "status": s(ready), "lastTransitionTime": now });
    if !ready {
        ready_condition["reason"] = json!(reason);
        ready_condition["message"] = json!(message);
    }
    let mut conditions = vec![
        json!({ "type": "PodScheduled", "status": "True", "lastTransitionTime": now }),
        json!({ "type": "Initialized", "status": "True", "lastTransitionTime": now }),
        containers_ready_condition,
        ready_condition,
    ];
    if let Some(g) = gate {
        conditions.push(json!({ "type": GATE, "status": s(g), "lastTransitionTime": now }));
    }
    let mut status = json!({
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": [container_status("app", "registry.invalid/app:v1", true, &now)],
    });
    if let Some(ready) = sidecar {
        status["initContainerStatuses"] =
            json!([container_status("proxy", "registry.invalid/proxy:v1", ready, &now)]);
    }
    json!({ "status": status })
}

/// Writes the pod's status with a JSON merge patch (the whole of each list).
async fn write_status(env: &TestEnv, pod: &str, status: &Value) -> Result<()> {
    env.pods()
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(status))
        .await
        .with_context(|| format!("writing the status of pod {pod}"))?;
    Ok(())
}

/// Patches the pod's status with a strategic merge patch: conditions merge by type, so the
/// ones not named and the fields not given (a `lastTransitionTime`) are kept.
async fn patch_status(env: &TestEnv, pod: &str, status: &Value) -> Result<()> {
    env.pods()
        .patch_status(pod, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .with_context(|| format!("patching the status of pod {pod}"))?;
    Ok(())
}

fn pod_ready(pod: &Pod) -> Option<&str> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.as_str())
}

/// The one pod of Deployment `app`, once bound to `node`.
async fn bound_pod(env: &TestEnv, app: &str, node: &str) -> Result<Pod> {
    wait_for(&format!("the pod of {app} bound to {node}"), Duration::from_secs(60), || async {
        let pods = env.list_pods(&format!("app={app}")).await?;
        Ok(pods.into_iter().find(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        }))
    })
    .await
}

/// Holds until `end` that the operator sent no eviction of `pods`; on a violation, waits a few
/// seconds more to name every pod it evicted.
async fn never_evicted(
    cluster: &Cluster,
    env: &TestEnv,
    pods: &[String],
    end: Timestamp,
    what: &str,
) -> Result<()> {
    let none = || async {
        let evicted = evictions_of(cluster, env, pods)?;
        ensure!(evicted.is_empty(), "evicted");
        Ok(())
    };
    if holds_for(what, until(end), none).await.is_ok() {
        return Ok(());
    }
    let all = || async {
        let evicted = evictions_of(cluster, env, pods)?;
        let names: Vec<&String> =
            pods.iter().filter(|p| evicted.iter().any(|e| e.name.as_ref() == Some(*p))).collect();
        Ok((names.len() == pods.len()).then_some(()))
    };
    let _ = wait_for("every pod evicted", Duration::from_secs(10), all).await;
    let evicted = evictions_of(cluster, env, pods)?;
    let mut summary = Vec::new();
    for pod in pods {
        let times: Vec<String> = evicted
            .iter()
            .filter(|e| e.name.as_ref() == Some(pod))
            .filter_map(|e| e.received.map(|t| t.to_string()))
            .collect();
        summary.push(format!("{pod}: {} eviction request(s) {times:?}", times.len()));
    }
    bail!("{what}: the operator evicted a pod failing its own readiness: {}", summary.join("; "))
}

/// On a node whose kubelet the test plays, Deployments `gated` (readiness gate [`GATE`]),
/// `sidecar` (native sidecar `proxy`) and `web` (neither), one pod each, under
/// `staleReadiness: {action: Evict, nodeReadyFor: 5s}`.
///
/// 1. The node is Ready the whole time. `gated`'s gate is False (Ready=False
///    `ReadinessGatesNotReady`, every container ready); `sidecar`'s sidecar fails its probe
///    (Ready=False `ContainersNotReady`, every regular container ready); `web` is Ready. For
///    nodeReadyFor + 30 s after the operator is ready, it evicts neither pod.
/// 2. All three become Ready. The node blips (no heartbeat until it is Unknown: the node
///    lifecycle controller marks the three pods not Ready). During the outage the gate's
///    controller sets the gate False (its load balancer lost the pod), and the kubelet, back,
///    reports the sidecar not ready (Ready=False `ContainersNotReady`, its transition time kept).
///    `web`, left Ready=False with every container ready, is evicted (the operator does repair
///    what the blip did here); `gated` and `sidecar` are not, for nodeReadyFor + 30 s after the
///    node is Ready again.
async fn a_pod_failing_its_own_readiness_is_never_evicted(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (node, kubelet) = env.add_live_node_without_kubelet("kubelet").await?;
    let deployments = env.api::<Deployment>();
    let pp = PostParams::default();
    deployments.create(&pp, &pinned("gated", &node, false, true)?).await?;
    deployments.create(&pp, &pinned("sidecar", &node, true, false)?).await?;
    deployments.create(&pp, &pinned("web", &node, false, false)?).await?;
    let gated = name(&bound_pod(env, "gated", &node).await?);
    let sidecar = name(&bound_pod(env, "sidecar", &node).await?);
    let web = name(&bound_pod(env, "web", &node).await?);
    write_status(env, &gated, &kubelet_status(None, Some(false))).await?;
    write_status(env, &sidecar, &kubelet_status(Some(false), None)).await?;
    write_status(env, &web, &kubelet_status(None, None)).await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "staleReadiness": { "action": "Evict", "nodeReadyFor": format!("{NODE_READY_FOR}s") },
        // The blip node, in phase 2.
        "safety": { "maxUnhealthyNodes": 1 },
    }))
    .await?;
    let mut op = start_operator(cluster, env).await?;
    let ready = Timestamp::now();
    let own = [gated.clone(), sidecar.clone()];

    // 1. The node stays Ready.
    let end = ready + SignedDuration::from_secs(NODE_READY_FOR) + MARGIN;
    never_evicted(cluster, env, &own, end, "on a node Ready the whole time").await?;

    // 2. The blip.
    write_status(env, &gated, &kubelet_status(None, Some(true))).await?;
    write_status(env, &sidecar, &kubelet_status(Some(true), None)).await?;
    drop(kubelet);
    wait_unknown(env, &node).await?;
    let all = [gated.clone(), sidecar.clone(), web.clone()];
    wait_for("the three pods marked not Ready", Duration::from_secs(30), || async {
        for pod in &all {
            if pod_ready(&env.pods().get(pod).await?) != Some("False") {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    let now = Timestamp::now().to_string();
    let gate_false = json!({ "status": { "conditions": [
        { "type": GATE, "status": "False", "lastTransitionTime": now },
    ]}});
    patch_status(env, &gated, &gate_false).await?;
    // The kubelet's first word when it is back: the sidecar is not ready.
    let message = "containers with unready status: [proxy]";
    let sidecar_not_ready = json!({ "status": {
        "conditions": [
            { "type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
              "message": message, "lastTransitionTime": now },
            { "type": "Ready", "status": "False", "reason": "ContainersNotReady",
              "message": message },
        ],
        "initContainerStatuses": [
            container_status("proxy", "registry.invalid/proxy:v1", false, &now),
        ],
    }});
    patch_status(env, &sidecar, &sidecar_not_ready).await?;
    let _kubelet = env.heartbeat_again(&node).await?;
    env.wait_node_ready(&node, "True").await?;
    let back = Timestamp::now();
    let due = back + SignedDuration::from_secs(NODE_READY_FOR);
    let web_evicted = wait_for("web's pod to be evicted", until(due) + ACT_WITHIN, || async {
        let evicted = evictions_of(cluster, env, std::slice::from_ref(&web))?;
        Ok(evicted.first().and_then(|e| e.received))
    })
    .await;
    never_evicted(cluster, env, &own, due + MARGIN, "after a node blip").await?;
    let web_evicted = web_evicted.context("the pod the blip left stale (the control)")?;
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    eprintln!(
        "[{}] neither {gated} (gate False) nor {sidecar} (sidecar not ready) evicted, on a Ready \
         node and after a blip; {web} evicted {:.1}s after the node was Ready again",
        env.name,
        web_evicted.duration_since(back).as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A refused eviction waits its backoff.

/// What the operator wrote in `[from, to)`: evictions of `pod`, status patches of the policy,
/// Event writes of this test (about its pods, or about its policy).
#[derive(Debug, Default)]
struct WriteCount {
    evictions: usize,
    status_patches: usize,
    event_writes: usize,
}

fn count_writes(
    cluster: &Cluster,
    env: &TestEnv,
    pod: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<WriteCount> {
    let mut count = WriteCount::default();
    let policy_event = format!("{}.", env.name);
    for e in operator_writes(cluster)? {
        if e.received.is_none_or(|t| t < from || t >= to) {
            continue;
        }
        if is_eviction(&e, env) && e.name.as_deref() == Some(pod) {
            count.evictions += 1;
        } else if e.resource == "remediationpolicies"
            && e.subresource.as_deref() == Some("status")
            && e.name.as_deref() == Some(env.name.as_str())
        {
            count.status_patches += 1;
        } else if e.resource == "events"
            && (e.namespace.as_deref() == Some(env.namespace.as_str())
                || e.name.as_deref().is_some_and(|n| n.starts_with(&policy_event)))
        {
            count.event_writes += 1;
        }
    }
    Ok(count)
}

/// Deployment `web` (one pod) on a node whose kubelet the test plays; a PodDisruptionBudget
/// `frontend-budget` of `maxUnavailable: 0` refuses every eviction of it. The node blips as in
/// `sr-blip-evict`, leaving the pod Ready=False with every container ready: legitimately stale,
/// under `staleReadiness: {action: Evict, nodeReadyFor: 5s}`. Over the two minutes after the
/// operator's first (refused) eviction request, it sends at most [`MAX_EVICTIONS`] of them (the
/// backoff: 10 s doubling to 5 min), at most [`MAX_STATUS_PATCHES`] status patches of the policy
/// and [`MAX_EVENT_WRITES`] Event writes; the pod is still there, and an Event of the operator
/// about it names the budget.
async fn a_refused_eviction_waits_its_backoff(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    let (node, kubelet) = env.add_live_node_without_kubelet("blip").await?;
    env.api::<Deployment>()
        .create(&PostParams::default(), &pinned("web", &node, false, false)?)
        .await?;
    let pod = bound_pod(env, "web", &node).await?;
    let (web, web_uid) = (name(&pod), uid(&pod));
    env.write_pod_status(&web, true).await?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": PDB_NAME },
        "spec": { "maxUnavailable": 0, "selector": { "matchLabels": { "app": "web" } } },
    }))?;
    env.api::<PodDisruptionBudget>().create(&PostParams::default(), &pdb).await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "staleReadiness": { "action": "Evict", "nodeReadyFor": format!("{NODE_READY_FOR}s") },
        "safety": { "maxUnhealthyNodes": 1 },
    }))
    .await?;
    let mut op = start_operator(cluster, env).await?;

    // The blip.
    drop(kubelet);
    wait_unknown(env, &node).await?;
    wait_for("the web pod marked not Ready", Duration::from_secs(30), || async {
        Ok((pod_ready(&env.pods().get(&web).await?) == Some("False")).then_some(()))
    })
    .await?;
    let _kubelet = env.heartbeat_again(&node).await?;
    env.wait_node_ready(&node, "True").await?;
    let due = Timestamp::now() + SignedDuration::from_secs(NODE_READY_FOR);

    let first = wait_for("the first eviction request", until(due) + ACT_WITHIN, || async {
        let evicted = evictions_of(cluster, env, std::slice::from_ref(&web))?;
        Ok(evicted.first().and_then(|e| e.received))
    })
    .await?;
    let end = first + REFUSED_WINDOW;
    let bounded = || async {
        let now = Timestamp::now();
        let c = count_writes(cluster, env, &web, first, end)?;
        ensure!(
            c.evictions <= MAX_EVICTIONS
                && c.status_patches <= MAX_STATUS_PATCHES
                && c.event_writes <= MAX_EVENT_WRITES,
            "in the {:.1}s after the first refused eviction: {} eviction requests (at most \
             {MAX_EVICTIONS}), {} status patches of the policy (at most {MAX_STATUS_PATCHES}), \
             {} Event writes (at most {MAX_EVENT_WRITES})",
            now.duration_since(first).as_secs_f64().min(REFUSED_WINDOW.as_secs_f64()),
            c.evictions,
            c.status_patches,
            c.event_writes,
        );
        Ok(())
    };
    holds_for("the refused eviction to wait its backoff", until(end), bounded).await?;
    // The audit log is written as requests complete: once it has one received after the end,
    // it has those received before. A quiet cluster may write nothing it keeps (Lease renewals
    // and node status are not logged), so past `later` the test writes a marker ConfigMap of
    // its own (not the operator's: not counted).
    let later = end + SignedDuration::from_secs(1);
    let configmaps = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace);
    let marker: ConfigMap = serde_json::from_value(json!({
        "metadata": { "generateName": "audit-marker-" },
    }))?;
    let mut marked = false;
    wait_for("the audit log past the window", Duration::from_secs(30), || {
        let write_marker = !marked && Timestamp::now() > later;
        marked |= write_marker;
        let (configmaps, marker) = (&configmaps, &marker);
        async move {
            if write_marker {
                configmaps.create(&PostParams::default(), marker).await?;
            }
            Ok(cluster
                .audit_writes()?
                .iter()
                .any(|e| e.received.is_some_and(|t| t > later))
                .then_some(()))
        }
    })
    .await?;
    bounded().await.context("the refused eviction to wait its backoff")?;
    let c = count_writes(cluster, env, &web, first, end)?;

    let p = env.pods().get_opt(&web).await?;
    ensure!(
        p.as_ref().is_some_and(|p| uid(p) == web_uid && p.metadata.deletion_timestamp.is_none()),
        "the web pod went despite its budget"
    );
    let events: Vec<Event> = Api::<Event>::namespaced(env.client.clone(), &env.namespace)
        .list(&ListParams::default())
        .await?
        .items;
    let ours: Vec<&Event> = events
        .iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(web.as_str())
                && e.reporting_controller.as_deref().is_some_and(|c| c.contains("remediator"))
        })
        .collect();
    ensure!(
        ours.iter().any(|e| e.note.as_deref().is_some_and(|n| n.contains(PDB_NAME))),
        "no Event of the operator about {web} names the PodDisruptionBudget {PDB_NAME}: {:?}",
        ours.iter().map(|e| (e.reason.as_deref(), e.note.as_deref())).collect::<Vec<_>>()
    );
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    eprintln!(
        "[{}] over {}s after the first refused eviction: {c:?}",
        env.name,
        REFUSED_WINDOW.as_secs()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A fully disrupted zone holds every release.

/// The Enforce policy of the zone tests: every node of the test, the short windows, no delay
/// after the grace period, and at most half of the test's nodes unhealthy. Pods without a
/// volume, not of a StatefulSet, need no fencing (`requireFencingFor` by default).
fn zone_policy() -> Value {
    json!({
        "mode": "Enforce",
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": "50%" },
    })
}

/// Waits until the kubelet of each of `nodes` renewed its Lease after `after` (kwok renews
/// every 10 s): the operator ready at `after` has seen them alive by its own clock.
async fn renewed_since(env: &TestEnv, nodes: &[String], after: Timestamp) -> Result<()> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.client.clone(), "kube-node-lease");
    for node in nodes {
        wait_for(&format!("the Lease of {node} renewed"), Duration::from_secs(60), || {
            let leases = leases.clone();
            async move {
                let lease = leases.get_opt(node).await?;
                let renewed = lease.and_then(|l| l.spec).and_then(|s| s.renew_time).map(|t| t.0);
                Ok(renewed.filter(|r| *r > after).map(|_| ()))
            }
        })
        .await?;
    }
    Ok(())
}

/// Adds `count` more healthy nodes `<test>-h<i>` to the test's own zone.
async fn add_healthy(env: &TestEnv, count: usize) -> Result<()> {
    let adds = (2..2 + count).map(|i| async move { env.add_node(&format!("h{i}")).await });
    futures::future::try_join_all(adds).await?;
    Ok(())
}

/// Checks the policy's own storm guard is not what holds: it counts `unhealthy` nodes and its
/// circuit is not open for their number.
async fn within_own_limit(env: &TestEnv, unhealthy: i32) -> Result<()> {
    let what = format!("the policy to count {unhealthy} unhealthy nodes");
    let status: RemediationPolicyStatus = env
        .wait_policy(&what, Duration::from_secs(30), |s| {
            (s.unhealthy_nodes == unhealthy).then(|| s.clone())
        })
        .await?;
    let circuit = status.conditions.iter().find(|c| c.type_ == "CircuitOpen");
    if let Some(c) = circuit {
        ensure!(
            !(c.status == "True"
                && (c.reason == "TooManyUnhealthyNodes" || c.reason == "ClusterStorm")),
            "the storm guard holds the policy ({}: {}), not the zone guard",
            c.reason,
            c.message
        );
    }
    Ok(())
}

/// Holds until `end` that the operator sent no DELETE of any of `pods` and they are still
/// there.
async fn never_force_deleted(
    cluster: &Cluster,
    env: &TestEnv,
    pods: &[(String, String)],
    end: Timestamp,
    what: &str,
) -> Result<()> {
    let deleted = |pod: &str| -> Result<()> {
        let deletes = cluster.operator_pod_deletes(&env.namespace, pod)?;
        if let Some(first) = deletes.first() {
            let at = first.received.map(|t| t.to_string()).unwrap_or_default();
            bail!("the operator sent a DELETE of {pod} at {at}: {} in all", deletes.len());
        }
        Ok(())
    };
    holds_for(what, until(end), || async {
        for (pod, pod_uid) in pods {
            deleted(pod)?;
            let p = env.pods().get_opt(pod).await?;
            if p.as_ref().map(uid).as_deref() != Some(pod_uid.as_str()) {
                // The audit log has the DELETE once its response is sent: say whose it was.
                let by_us =
                    wait_for("the DELETE in the audit log", Duration::from_secs(10), || {
                        std::future::ready(Ok(deleted(pod).err()))
                    });
                match by_us.await {
                    Ok(e) => return Err(e),
                    Err(_) => bail!("{pod} is gone, without a DELETE of the operator"),
                }
            }
        }
        Ok(())
    })
    .await
}

/// The operator released `pod` on the dead `node` (the control: the policy does act on a dead
/// node of a zone that is not fully disrupted): gone by `due` + [`ACT_WITHIN`], by the
/// operator's DELETE (audit log).
async fn released(
    cluster: &Cluster,
    env: &TestEnv,
    pod: &str,
    pod_uid: &str,
    due: Timestamp,
) -> Result<()> {
    wait_gone(env, pod, pod_uid, until(due) + ACT_WITHIN)
        .await
        .with_context(|| format!("the control: {pod} on a dead node of a zone not down"))?;
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, pod).await?;
    ensure!(!deletes.is_empty(), "{pod} went, but not by the operator's DELETE");
    Ok(())
}

/// Zone p of 4 nodes, each running a pod; the test's own zone has 6 healthy nodes; the policy
/// covers all 10 and allows 5 unhealthy. p1 dies (its pod stranded Terminating) and is released
/// once dead: the zone still has healthy nodes (the control). Once p1 has been Unknown for 35 s,
/// p2, p3 and p4 die together, their pods stranded Terminating: they turn Unknown more than 60 s
/// after p1, and then every node of zone p is unhealthy: fully disrupted, as the node lifecycle
/// controller sees it. 4 of 10 nodes are unhealthy, within the policy's limit. No pod on p2-p4
/// is force-deleted until 30 s after they count as dead.
async fn a_zone_down_now_is_partitioned_however_it_went_down(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let zone = format!("zone-{}-p", env.name);
    add_healthy(env, 5).await?;
    let mut partition = Vec::new();
    for i in 1..=4 {
        partition.push(env.add_node_in_zone(&format!("p{i}"), &zone).await?);
    }
    let mut pods = Vec::new();
    for (i, node) in partition.iter().enumerate() {
        let pod = running_pod_on(env, &format!("on-p{}", i + 1), node).await?;
        pods.push((name(&pod), uid(&pod)));
    }
    env.create_policy(zone_policy()).await?;
    let mut op = start_operator(cluster, env).await?;
    renewed_since(env, &partition, Timestamp::now()).await?;

    // p1 dies alone and is released: the zone has healthy nodes.
    let first = kill_and_strand(env, &partition[0], "on-p1").await?;
    let p1 = wait_unknown(env, &partition[0]).await?;
    let p1_unknown = Timestamp::now();
    let p1_dead = env.dead_at(&partition[0], NOT_READY_FOR, LEASE_STALE_FOR).await?;
    released(cluster, env, "on-p1", &uid(&first), p1_dead).await?;

    // The rest of the zone dies together, long after p1.
    tokio::time::sleep(until(p1_unknown + SignedDuration::from_secs(35))).await;
    let rest = &partition[1..];
    tokio::try_join!(
        kill_and_strand(env, &rest[0], "on-p2"),
        kill_and_strand(env, &rest[1], "on-p3"),
        kill_and_strand(env, &rest[2], "on-p4"),
    )?;
    let mut dead = Timestamp::UNIX_EPOCH;
    for node in rest {
        let n = wait_unknown(env, node).await?;
        let gap = match (ready_transition(&p1), ready_transition(&n)) {
            (Some(a), Some(b)) => b.duration_since(a),
            _ => bail!("a Ready condition without lastTransitionTime"),
        };
        ensure!(
            gap > SignedDuration::from_secs(62),
            "setup: {node} went Unknown only {:.0}s after p1; the test needs more than 60 s",
            gap.as_secs_f64()
        );
        dead = dead.max(env.dead_at(node, NOT_READY_FOR, LEASE_STALE_FOR).await?);
    }
    within_own_limit(env, 4).await?;
    let held = &pods[1..];
    never_force_deleted(cluster, env, held, dead + MARGIN, "zone p fully disrupted").await?;
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    eprintln!(
        "[{}] zone p fully disrupted ({:.0}s after p1 went): no pod released there {}s after its \
         nodes counted as dead",
        env.name,
        dead.duration_since(p1_dead).as_secs_f64(),
        MARGIN.as_secs()
    );
    // Leave no dead node behind.
    for node in &partition {
        env.revive_node(node).await?;
    }
    Ok(())
}

/// Zone `old` of 3 nodes labelled only with the deprecated `failure-domain.beta.kubernetes.io/
/// zone`, each running a pod; the test's own zone has 6 healthy nodes and a 7th, v1, running a
/// pod too; the policy covers all 10 and allows 5 unhealthy. Zone old and v1 die together,
/// their pods stranded Terminating: v1's pod is released once v1 counts as dead (its zone has
/// healthy nodes: the control), and no pod of zone old is force-deleted until 30 s after its
/// nodes count as dead.
async fn the_deprecated_zone_label_names_a_zone(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    let zone = format!("zone-{}-old", env.name);
    add_healthy(env, 5).await?;
    let victim = env.add_node("v1").await?;
    let mut old = Vec::new();
    for i in 1..=3 {
        let labels = [(DEPRECATED_ZONE_LABEL, zone.as_str())];
        old.push(env.add_node_with_labels(&format!("d{i}"), &labels).await?);
    }
    for node in &old {
        let n = env.nodes().get(node).await?;
        let labels = n.metadata.labels.unwrap_or_default();
        ensure!(!labels.contains_key(ZONE_LABEL), "{node} has {ZONE_LABEL}");
    }
    let control = uid(&running_pod_on(env, "on-v1", &victim).await?);
    let mut pods = Vec::new();
    for (i, node) in old.iter().enumerate() {
        let pod = running_pod_on(env, &format!("on-d{}", i + 1), node).await?;
        pods.push((name(&pod), uid(&pod)));
    }
    env.create_policy(zone_policy()).await?;
    let mut op = start_operator(cluster, env).await?;
    let mut watched = old.clone();
    watched.push(victim.clone());
    renewed_since(env, &watched, Timestamp::now()).await?;

    tokio::try_join!(
        kill_and_strand(env, &old[0], "on-d1"),
        kill_and_strand(env, &old[1], "on-d2"),
        kill_and_strand(env, &old[2], "on-d3"),
        kill_and_strand(env, &victim, "on-v1"),
    )?;
    let mut dead = Timestamp::UNIX_EPOCH;
    for node in &old {
        wait_unknown(env, node).await?;
        dead = dead.max(env.dead_at(node, NOT_READY_FOR, LEASE_STALE_FOR).await?);
    }
    wait_unknown(env, &victim).await?;
    let victim_dead = env.dead_at(&victim, NOT_READY_FOR, LEASE_STALE_FOR).await?;
    within_own_limit(env, 4).await?;
    let (held, control_released) = tokio::join!(
        never_force_deleted(cluster, env, &pods, dead + MARGIN, "zone old fully disrupted"),
        released(cluster, env, "on-v1", &control, victim_dead),
    );
    held?;
    control_released?;
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    eprintln!(
        "[{}] zone old (deprecated label) fully disrupted: no pod released there {}s after its \
         nodes counted as dead; on-v1 released",
        env.name,
        MARGIN.as_secs()
    );
    for node in old.iter().chain([&victim]) {
        env.revive_node(node).await?;
    }
    Ok(())
}
