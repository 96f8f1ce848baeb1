//! `chart-admission-guard`: the chart's admission guard (`admissionGuard.enabled`, a
//! ValidatingAdmissionPolicy matching only the operator's ServiceAccount) on the test control
//! plane. Requests forged with the operator's identity (the admin impersonating the chart's
//! ServiceAccount, which RBAC allows every one of them: `nodeActions.enabled`) are refused by the
//! policy, naming it: a DELETE of a running pod, a DELETE of a Ready node, node patches adding a
//! label or a taint, a finalizer removed from a running pod, a label added to a Terminating pod,
//! the operator's DisruptionTarget condition on a running pod, another condition or a label
//! written through a Terminating pod's status, a DELETE of a pod Failed for another reason than
//! a graceful node shutdown.
//! And real remediations pass through it: the operator, run with the chart's arguments as that
//! ServiceAccount under a policy in Enforce, force-deletes a pod stuck Terminating on a killed
//! node, cordons the node, adds the out-of-service taint (the cloud provider's shutdown taint is
//! the fencing evidence) and deletes the Node, and removes an allowlisted finalizer from a pod
//! stuck Terminating on a live node, and deletes a pod left Failed by a graceful node shutdown:
//! each recorded Done in the policy status, where a refusal would show as Failed with the API
//! server's answer.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_remediator::crd::{
    APPLIED_BY_US, EXCLUDE_ANNOTATION, OUT_OF_SERVICE_APPLIED_BY, SHUTDOWN_TAINT,
};
use serde_json::json;

use super::install::{client_for, write_impersonating_kubeconfig};
use crate::failed_by_shutdown::fail_pod;
use crate::fixtures::{renewed_since, uid};
use crate::support::chart::{Helm, helm_async, package};
use crate::support::env::{TEST_LABEL, ZONE_LABEL, pod_is_ready};
use crate::support::operator::Operator;
use crate::support::{TestEnv, install_crd, shared_cluster, wait_for};

/// The finalizer nobody but the operator (allowlisted by the policy) removes.
const HOLD: &str = "example.com/hold";
/// How long each remediation may take: the node's death (a 40 s Lease window) and its
/// thresholds, on a loaded 2-core machine.
const REMEDIATION_TIMEOUT: Duration = Duration::from_secs(150);

pub(super) async fn the_guard_refuses_forged_writes_and_passes_remediations(
    env: &TestEnv,
) -> Result<()> {
    let outcome = guard(env).await;
    // Whatever happened, nothing of this test's keeps its namespace: the finalizers go.
    let released = release(env, &["running", "frozen", "held"]).await;
    outcome.and(released)
}

async fn guard(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    install_crd(&env.client).await?;
    // The zone: the healthy node, a spare (Ready; the forged node writes aim at it) and the
    // victim, killed below: one of three unhealthy keeps the zone below the node lifecycle
    // controller's partial disruption.
    let (spare, victim) = tokio::try_join!(env.add_node("spare"), env.add_node("victim"))?;

    // The pods: "running" (Running, with a finalizer), "frozen" (excluded from remediation, to be
    // Terminating and held by its finalizer), "held" (its finalizer allowlisted by the policy),
    // and "doomed", on the victim.
    let healthy = env.healthy_node.clone();
    tokio::try_join!(
        create_pod(env, "running", &healthy, true, false),
        create_pod(env, "frozen", &healthy, true, true),
        create_pod(env, "held", &healthy, true, false),
        create_pod(env, "doomed", &victim, false, false),
        create_pod(env, "pressure", &healthy, false, false),
        create_pod(env, "shut", &healthy, false, false),
    )?;
    env.delete_gracefully("frozen", 1).await?;
    // Ended by their kubelet: by a memory-pressure eviction, and by a graceful node shutdown.
    fail_pod(env, "pressure", "Evicted").await?;
    fail_pod(env, "shut", "Terminated").await?;
    let shut_uid = uid(&env.pods().get("shut").await?);

    // The chart, as users get it (packaged), with the guard on by default and node actions
    // allowed, so that RBAC lets every forged request below reach admission. No operator pods
    // (replicaCount 0): the operator runs here, with the Deployment's arguments.
    let release = env.name.clone();
    let fullname = format!("{release}-kube-remediator");
    let guard = format!("{fullname}-admission-guard");
    let scope = json!({ "matchLabels": { TEST_LABEL: env.name } });
    let values = json!({
        "replicaCount": 0,
        "nodeActions": { "enabled": true },
        // Other tests' nodes die on this control plane at the same time.
        "stormGuard": { "maxUnhealthyNodesInCluster": "100%" },
        "policySelector": format!("{TEST_LABEL}={}", env.name),
        "defaultPolicy": {
            "name": env.name,
            "labels": { TEST_LABEL: env.name },
            "spec": {
                "mode": "Enforce",
                "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
                "namespaceSelector": scope,
                "deadNode": { "notReadyFor": "10s", "leaseStaleFor": "40s" },
                "stuckTerminating": { "delayAfterGrace": "5s" },
                "nodeActions": {
                    "cordonAfter": "0s",
                    "outOfServiceTaintAfter": "5s",
                    "deleteNodeAfter": "15s",
                },
                "liveNodeStuck": { "delayAfterGrace": "5s" },
                "finalizers": { "removable": [HOLD], "removeAfter": "0s" },
                "failedByShutdown": { "enabled": true, "deleteAfter": "0s" },
                "safety": { "maxUnhealthyNodes": 2, "rateLimit": { "actionsPerMinute": 60 } },
            },
        },
    });
    let values_file = cluster.dir.join(format!("{}-values.yaml", env.name));
    std::fs::write(&values_file, yaml_serde::to_string(&values)?)?;
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let values_file = values_file.display().to_string();
    let package_dir = cluster.dir.join(format!("{}-chart", env.name));
    let package = tokio::task::spawn_blocking(move || package(&Helm::new()?, &package_dir))
        .await??
        .display()
        .to_string();
    let helm_release = ["--namespace", &env.namespace, "--kubeconfig", &kubeconfig];
    let mut install = vec!["install", &release, &package, "--skip-crds", "--values", &values_file];
    install.extend_from_slice(&helm_release);
    helm_async(&install).await?;

    // The chart's ServiceAccount, impersonated by the admin.
    let sa = format!("system:serviceaccount:{}:{fullname}", env.namespace);
    let sa_kubeconfig = cluster.dir.join(format!("{}.kubeconfig", env.name));
    write_impersonating_kubeconfig(cluster, &sa, &sa_kubeconfig)?;
    let as_sa = client_for(&sa_kubeconfig).await?;
    let pods: Api<Pod> = Api::namespaced(as_sa.clone(), &env.namespace);
    let nodes: Api<Node> = Api::all(as_sa.clone());

    // The operator, with the chart's own arguments, as that ServiceAccount. It must see the
    // victim's Lease renewed before the victim dies, to date the death by its own clock.
    let args = chart_args(env, &fullname).await?;
    let operator = Operator::start_with_args(cluster, &env.name, &sa_kubeconfig, &args).await?;
    let ready = jiff::Timestamp::now();
    renewed_since(env, &victim, ready).await?;
    env.kill_node(&victim).await?;
    // The cloud provider sees the machine off: the fencing evidence the taint and the Node
    // deletion need.
    env.add_taint(&victim, SHUTDOWN_TAINT, None, "NoSchedule").await?;

    // The API server loads a new admission policy a moment after it is created: wait until it
    // refuses a server-side dry run (admission runs, nothing is deleted).
    wait_for(&format!("{guard} to refuse a dry-run DELETE"), Duration::from_secs(30), || {
        let (pods, guard) = (pods.clone(), guard.clone());
        async move {
            let dry_run = DeleteParams { dry_run: true, ..DeleteParams::default() };
            let result = pods.delete("running", &dry_run).await;
            Ok(refused_by(&guard, &result).then_some(()))
        }
    })
    .await?;

    // Forged requests with the operator's identity: each refused, by the guard.
    let mut failures = Vec::new();
    let mut check = |what: &str, refused: Result<(), String>| {
        if let Err(answer) = refused {
            failures.push(format!("{what}: {answer}"));
        }
    };
    check(
        "DELETE of the running pod",
        by_guard(&guard, pods.delete("running", &DeleteParams::default()).await),
    );
    let force = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    check(
        "force DELETE of the running pod",
        by_guard(&guard, pods.delete("running", &force).await),
    );
    check(
        "DELETE of the Ready node",
        by_guard(&guard, nodes.delete(&spare, &DeleteParams::default()).await),
    );
    let label = json!({ "metadata": { "labels": { "forged": "true" } } });
    check(
        "a label added to the node",
        by_guard(&guard, nodes.patch(&spare, &PatchParams::default(), &Patch::Merge(&label)).await),
    );
    let tainted = json!({ "spec": { "taints": [{ "key": "forged", "effect": "NoExecute" }] } });
    check(
        "a NoExecute taint added to the node",
        by_guard(
            &guard,
            nodes.patch(&spare, &PatchParams::default(), &Patch::Merge(&tainted)).await,
        ),
    );
    // The operator's own finalizer patch, on a pod that is not Terminating.
    let unhold: json_patch::Patch = serde_json::from_value(
        json!([{ "op": "replace", "path": "/metadata/finalizers", "value": [] }]),
    )?;
    check(
        "a finalizer removed from the running pod",
        by_guard(
            &guard,
            pods.patch("running", &PatchParams::default(), &Patch::<()>::Json(unhold)).await,
        ),
    );
    // Another tool's provenance of an out-of-service taint is never ours to change: the admin
    // (as Pacemaker would) marks the spare's taint as applied by pacemaker.
    let admin_nodes: Api<Node> = Api::all(env.client.clone());
    let pacemaker =
        json!({ "metadata": { "annotations": { OUT_OF_SERVICE_APPLIED_BY: "pacemaker" } } });
    admin_nodes.patch(&spare, &PatchParams::default(), &Patch::Merge(&pacemaker)).await?;
    let ours =
        json!({ "metadata": { "annotations": { OUT_OF_SERVICE_APPLIED_BY: APPLIED_BY_US } } });
    check(
        "another tool's applied-by overwritten with ours",
        by_guard(&guard, nodes.patch(&spare, &PatchParams::default(), &Patch::Merge(&ours)).await),
    );
    let removed = json!({ "metadata": { "annotations": { OUT_OF_SERVICE_APPLIED_BY: null } } });
    check(
        "another tool's applied-by removed",
        by_guard(
            &guard,
            nodes.patch(&spare, &PatchParams::default(), &Patch::Merge(&removed)).await,
        ),
    );
    check(
        "a label added to a Terminating pod",
        by_guard(
            &guard,
            pods.patch("frozen", &PatchParams::default(), &Patch::Merge(&label)).await,
        ),
    );
    // The status writes the operator makes before a force delete, where they do not belong.
    let disruption = json!({ "status": { "phase": "Failed", "conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByKubeRemediator",
    }]}});
    check(
        "DisruptionTarget written to the running pod",
        by_guard(
            &guard,
            pods.patch_status("running", &PatchParams::default(), &Patch::Strategic(&disruption))
                .await,
        ),
    );
    let not_ready = json!({ "status": { "conditions": [{ "type": "Ready", "status": "False" }] } });
    check(
        "the Ready condition written to a Terminating pod",
        by_guard(
            &guard,
            pods.patch_status("frozen", &PatchParams::default(), &Patch::Strategic(&not_ready))
                .await,
        ),
    );
    let other_reason = json!({ "status": { "conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
    }]}});
    check(
        "DisruptionTarget with another reason written to a Terminating pod",
        by_guard(
            &guard,
            pods.patch_status("frozen", &PatchParams::default(), &Patch::Strategic(&other_reason))
                .await,
        ),
    );
    check(
        "a label added through a Terminating pod's status",
        by_guard(
            &guard,
            pods.patch_status("frozen", &PatchParams::default(), &Patch::Merge(&label)).await,
        ),
    );
    // The marking of a pod left Ready on a dead node (readyOnDeadNode.markNotReady) with more
    // in it, or with another reason.
    let mark = |reason: &str, extra: serde_json::Value| {
        let mut status = json!({ "conditions": [{
            "type": "Ready", "status": "False", "reason": reason,
        }]});
        if let (Some(status), Some(extra)) = (status.as_object_mut(), extra.as_object()) {
            status.extend(extra.clone());
        }
        json!({ "status": status })
    };
    for (what, patch) in [
        ("Ready=False with another reason", mark("NodeNotReady", json!({}))),
        (
            "Ready=False with our reason and the phase Succeeded",
            mark(NOT_READY, json!({ "phase": "Succeeded" })),
        ),
        (
            "Ready=False with our reason and a new podIP",
            mark(NOT_READY, json!({ "podIP": "10.9.9.9" })),
        ),
    ] {
        check(
            &format!("{what} written to the running pod"),
            by_guard(
                &guard,
                pods.patch_status("running", &PatchParams::default(), &Patch::Strategic(&patch))
                    .await,
            ),
        );
    }
    // The marking itself passes the guard (dry run: the guard knows nothing of the node).
    let dry_run = PatchParams { dry_run: true, ..PatchParams::default() };
    let marked = pods
        .patch_status("running", &dry_run, &Patch::Strategic(&mark(NOT_READY, json!({}))))
        .await;
    let marked = marked.map(|_| ()).map_err(|e| e.to_string());
    check(
        "DELETE of a pod Failed by a memory-pressure eviction",
        by_guard(&guard, pods.delete("pressure", &DeleteParams::default()).await),
    );
    ensure!(failures.is_empty(), "{} problems:\n  {}", failures.len(), failures.join("\n  "));
    if let Err(e) = marked {
        bail!("the marking of the Ready running pod was refused: {e}");
    }
    // And nothing happened to them.
    let running = env.pods().get("running").await?;
    ensure!(running.metadata.deletion_timestamp.is_none(), "the running pod is Terminating");
    let spare_node = env.nodes().get(&spare).await?;
    let labels = spare_node.metadata.labels.unwrap_or_default();
    let taints = spare_node.spec.and_then(|s| s.taints).unwrap_or_default();
    ensure!(!labels.contains_key("forged"), "the spare node got the forged label");
    ensure!(!taints.iter().any(|t| t.key == "forged"), "the spare node got the forged taint");

    // Real remediations pass. On the live node: the allowlisted finalizer of a stuck pod.
    let held_uid = uid(&env.delete_gracefully("held", 1).await?);
    wait_done(env, "RemoveFinalizers", "held", REMEDIATION_TIMEOUT).await?;
    wait_gone(env, "held", &held_uid).await?;
    // The pod a graceful shutdown left Failed: deleted (normally) through the guard.
    wait_done(env, "DeleteShutdownPod", "shut", REMEDIATION_TIMEOUT).await?;
    wait_gone(env, "shut", &shut_uid).await?;
    ensure!(env.pods().get_opt("pressure").await?.is_some(), "the evicted pod is gone");
    // On the dead node: its pod (evicted by the node lifecycle controller, Terminating for
    // good) force-deleted, the node cordoned, tainted out-of-service, deleted.
    let doomed = env.wait_terminating("doomed", REMEDIATION_TIMEOUT).await?;
    wait_done(env, "ForceDelete", "doomed", REMEDIATION_TIMEOUT).await?;
    // Its status write went through the guard too (a refusal would have left it Failed).
    wait_gone(env, "doomed", &uid(&doomed)).await?;
    for action in ["Cordon", "OutOfServiceTaint", "DeleteNode"] {
        wait_done(env, action, &victim, REMEDIATION_TIMEOUT).await?;
    }
    ensure!(env.nodes().get_opt(&victim).await?.is_none(), "node {victim} is still there");
    drop(operator);

    // Uninstalling removes the guard.
    let mut uninstall = vec!["uninstall", &release, "--wait"];
    uninstall.extend_from_slice(&helm_release);
    helm_async(&uninstall).await?;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.client.clone());
    ensure!(policies.get_opt(&guard).await?.is_none(), "{guard} survived the uninstall");
    ensure!(bindings.get_opt(&guard).await?.is_none(), "its binding survived the uninstall");
    Ok(())
}

/// Creates the bare pod `name` on `node` (1 s grace period), with the finalizer [`HOLD`] when
/// `hold`, and annotated to be left alone by every policy when `excluded`; waits until it runs.
async fn create_pod(
    env: &TestEnv,
    name: &str,
    node: &str,
    hold: bool,
    excluded: bool,
) -> Result<()> {
    let finalizers: Vec<&str> = if hold { vec![HOLD] } else { vec![] };
    let annotations = if excluded { json!({ EXCLUDE_ANNOTATION: "true" }) } else { json!({}) };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "app": name, TEST_LABEL: env.name },
            "annotations": annotations,
            "finalizers": finalizers,
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    wait_for(&format!("pod {name} to run on {node}"), Duration::from_secs(30), || async move {
        Ok(env.pods().get_opt(name).await?.filter(pod_is_ready).map(|_| ()))
    })
    .await
}

/// The `run` arguments of the chart's Deployment, but its metrics address.
async fn chart_args(env: &TestEnv, fullname: &str) -> Result<Vec<String>> {
    let deploy = env.api::<Deployment>().get(fullname).await?;
    let container = deploy
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .context("the Deployment has no container")?;
    let args = container.args.context("the Deployment's container has no args")?;
    Ok(args.into_iter().filter(|a| !a.starts_with("--metrics-addr")).collect())
}

/// Whether the request was refused by the admission policy `guard` (403, naming it).
fn refused_by<T>(guard: &str, result: &kube::Result<T>) -> bool {
    matches!(result, Err(kube::Error::Api(s))
        if s.code == 403 && s.message.contains(&format!("ValidatingAdmissionPolicy '{guard}'")))
}

/// The reason of the marking of a pod left Ready on a dead node.
const NOT_READY: &str = "NodeDeadByKubeRemediator";

/// Ok when the request was refused by `guard`; otherwise what the API server answered.
fn by_guard<T>(guard: &str, result: kube::Result<T>) -> Result<(), String> {
    if refused_by(guard, &result) {
        return Ok(());
    }
    match result {
        Ok(_) => Err("allowed".into()),
        Err(e) => Err(format!("refused, but not by {guard}: {e}")),
    }
}

/// Waits until the policy status records `action` on `name` as Done; fails at once when it
/// records it Failed (a refusal by the guard shows there, with the API server's answer).
async fn wait_done(env: &TestEnv, action: &str, name: &str, timeout: Duration) -> Result<()> {
    let outcome = env
        .wait_policy(&format!("{action} of {name} Done in the policy status"), timeout, |s| {
            s.recent_actions
                .iter()
                .filter(|a| a.action.as_str() == action && a.name == name)
                .find_map(|a| match a.result.as_str() {
                    "Done" => Some(Ok(())),
                    "Failed" => Some(Err(a.detail.clone().unwrap_or_default())),
                    _ => None,
                })
        })
        .await?;
    outcome.map_err(|detail| anyhow!("the operator's {action} of {name} failed: {detail}"))
}

/// Waits until the pod with this UID is gone.
async fn wait_gone(env: &TestEnv, name: &str, pod_uid: &str) -> Result<()> {
    wait_for(&format!("pod {name} ({pod_uid}) to be gone"), Duration::from_secs(30), || async {
        let p = env.pods().get_opt(name).await?;
        Ok((p.and_then(|p| p.metadata.uid).as_deref() != Some(pod_uid)).then_some(()))
    })
    .await
}

/// Removes the finalizers of the named pods that are still there.
async fn release(env: &TestEnv, names: &[&str]) -> Result<()> {
    let patch = json!({ "metadata": { "finalizers": null } });
    for name in names {
        if env.pods().get_opt(name).await?.is_some() {
            env.pods().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
    }
    Ok(())
}
