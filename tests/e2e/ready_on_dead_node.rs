//! Pods left Ready=True on a dead node (kubernetes/kubernetes#112733, #125618, #135205), the
//! mirror image of field incident 2.
//!
//! The node lifecycle controller marks a node's pods not Ready only when it sees the node's
//! Ready condition go from True to something else itself. The test plays three kubelets
//! (`add_live_node_without_kubelet`) and reproduces three orders of events on the
//! production-like control plane ([`prod_e2e!`]: kube-controller-manager as users run it):
//! - (a) the kubelet posts NodeReady=False ("container runtime is down"), then goes silent:
//!   the controller sees False become Unknown, never True become something else: its pod stays
//!   Ready=True;
//! - (b) the kubelet goes silent: the controller marks the node Unknown and its pod not Ready
//!   (upstream handles it);
//! - (c) the kubelet goes silent, the controller marks its pod not Ready, then a pod status the
//!   kubelet sent before it died lands (Ready=True): nothing marks it again, it stays Ready=True.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::fixtures::renewed_since;
use crate::prod_e2e;
use crate::support::cluster::Cluster;
use crate::support::env::ZONE_LABEL;
use crate::support::operator::Operator;
use crate::support::{TestEnv, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![prod_e2e!("rd-orders-reported", pods_left_ready_on_dead_nodes_are_reported)]
}

const NOT_READY_FOR: i64 = 10;
const LEASE_STALE_FOR: i64 = 40;

fn ready(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

/// The three orders; a policy reports `pa` and `pc` (Event, gauge, status), never `pb`, once
/// their nodes are dead by its evidence.
async fn pods_left_ready_on_dead_nodes_are_reported(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (a, kubelet_a) = env.add_live_node_without_kubelet("a").await?;
    let (b, kubelet_b) = env.add_live_node_without_kubelet("b").await?;
    let (c, kubelet_c) = env.add_live_node_without_kubelet("c").await?;
    for (pod, node) in [("pa", &a), ("pb", &b), ("pc", &c)] {
        env.create_bound_pod(pod, node).await?;
        env.write_pod_status(pod, true).await?;
    }
    env.create_policy(json!({
        "mode": "DryRun",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "safety": { "maxUnhealthyNodes": 3 },
    }))
    .await?;
    let op = Operator::start(cluster, env).await?;
    let started = Timestamp::now();
    for node in [&a, &b, &c] {
        renewed_since(env, node, started).await?;
    }

    // (a) NotReady posted by the kubelet, then silence.
    drop(kubelet_a);
    let now = Timestamp::now().to_string();
    let not_ready = json!({ "status": { "conditions": [{
        "type": "Ready", "status": "False", "reason": "KubeletNotReady",
        "message": "container runtime is down", "lastHeartbeatTime": now, "lastTransitionTime": now,
    }] } });
    env.nodes().patch_status(&a, &PatchParams::default(), &Patch::Strategic(&not_ready)).await?;
    // (b) silence.
    drop(kubelet_b);
    // (c) silence; once the controller marked the pod not Ready, the kubelet's last pod status
    // lands.
    drop(kubelet_c);
    wait_for("pc marked not Ready", Duration::from_secs(120), || async {
        Ok((ready(&env.pods().get("pc").await?).as_deref() == Some("False")).then_some(()))
    })
    .await?;
    env.write_pod_status("pc", true).await?;
    for node in [&a, &b, &c] {
        env.wait_node_ready(node, "Unknown").await?;
    }
    wait_for("pb marked not Ready", Duration::from_secs(60), || async {
        Ok((ready(&env.pods().get("pb").await?).as_deref() == Some("False")).then_some(()))
    })
    .await?;
    // The upstream gap: pa and pc Ready on nodes the controller itself marked Unknown.
    for pod in ["pa", "pc"] {
        let state = ready(&env.pods().get(pod).await?);
        ensure!(state.as_deref() == Some("True"), "{pod} is Ready={state:?}: no upstream gap");
    }

    // Reported once their nodes are dead by the policy's evidence.
    let reported = env
        .wait_policy("pa and pc reported", Duration::from_secs(150), |s| {
            let names: Vec<&str> =
                s.ready_on_dead_node_pods.iter().map(|p| p.name.as_str()).collect();
            (names.contains(&"pa") && names.contains(&"pc"))
                .then(|| (Timestamp::now(), s.ready_on_dead_node_pods.clone()))
        })
        .await?;
    let (seen_at, pods) = reported;
    ensure!(pods.iter().all(|p| p.name != "pb"), "pb reported: {pods:?}");
    let dead_since = pods
        .iter()
        .filter_map(|p| p.node_dead_since.as_ref().map(|t| t.0))
        .max()
        .context("no nodeDeadSince in the report")?;
    let gauge =
        op.metric("kube_remediator_ready_on_dead_node_pods", &[("policy", &env.name)]).await?;
    ensure!(gauge == Some(2.0), "ready_on_dead_node_pods = {gauge:?}");
    for pod in ["pa", "pc"] {
        let events = env.events_about("Pod", pod, "ReadyOnDeadNode").await?;
        ensure!(!events.is_empty(), "no ReadyOnDeadNode Event on {pod}");
    }
    ensure!(env.events_about("Pod", "pb", "ReadyOnDeadNode").await?.is_empty(), "pb got an Event");
    eprintln!(
        "[{}] upstream left pa (NotReady posted, then silent) and pc (late pod status) Ready=True \
         and marked pb (silent) not Ready; reported at most {:.1}s after the later node was dead \
         by our evidence ({dead_since})",
        env.name,
        seen_at.duration_since(dead_since).as_secs_f64()
    );
    Ok(())
}
