//! The test control plane behaves like a real cluster, and reproduces field incident 1 without
//! any operator: pods Terminating forever on a dead node, and a Recreate rollout stuck behind them.

use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::fixtures::deployment;
use crate::support::cluster::{DEFAULT_TOLERATION_SECONDS, NODE_MONITOR_GRACE_SECONDS};
use crate::support::env::{HOSTNAME_LABEL, ZONE_LABEL};
use crate::support::{TestEnv, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("cp-deployment-ready", deployment_pods_are_scheduled_and_become_ready),
        e2e!("cp-dead-node", dead_node_leaves_evicted_pods_terminating_until_revived),
        e2e!("cp-recreate-stuck", recreate_rollout_is_blocked_by_pod_on_dead_node),
    ]
}

async fn deployment_pods_are_scheduled_and_become_ready(env: &TestEnv) -> Result<()> {
    let second = env.add_node("b").await?;
    let deploy = deployment("web", 3, "RollingUpdate", json!({ ZONE_LABEL: env.zone }))?;
    env.api::<Deployment>().create(&PostParams::default(), &deploy).await?;

    let pods = env.wait_pods_ready("app=web", 3).await?;
    for pod in &pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        ensure!(
            node == env.healthy_node || node == second,
            "pod {:?} was scheduled on {node:?}, outside this test's zone",
            pod.metadata.name
        );
    }
    let deployments = env.api::<Deployment>();
    wait_for("the Deployment to report 3 available replicas", Duration::from_secs(30), || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("web").await?;
            Ok((d.status.and_then(|s| s.available_replicas) == Some(3)).then_some(()))
        }
    })
    .await
}

/// Waits until the node carries `key:NoExecute`.
async fn wait_noexecute_taint(env: &TestEnv, node: &str, key: &str) -> Result<()> {
    let nodes = env.nodes();
    wait_for(&format!("taint {key}:NoExecute on {node}"), Duration::from_secs(30), || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get(node).await?;
            let tainted = n
                .spec
                .and_then(|s| s.taints)
                .is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == "NoExecute"));
            Ok(tainted.then_some(()))
        }
    })
    .await
}

/// Waits until the named pod has a deletionTimestamp and returns it.
async fn wait_terminating(env: &TestEnv, pod: &str) -> Result<Pod> {
    let timeout =
        Duration::from_secs((NODE_MONITOR_GRACE_SECONDS + DEFAULT_TOLERATION_SECONDS + 30).into());
    env.wait_terminating(pod, timeout).await
}

async fn dead_node_leaves_evicted_pods_terminating_until_revived(env: &TestEnv) -> Result<()> {
    let victim = env.add_node("victim").await?;
    let deploy = deployment("db", 2, "RollingUpdate", json!({ HOSTNAME_LABEL: victim }))?;
    env.api::<Deployment>().create(&PostParams::default(), &deploy).await?;
    let pods = env.wait_pods_ready("app=db", 2).await?;
    let names: Vec<String> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();

    env.kill_node(&victim).await?;
    env.wait_node_ready(&victim, "Unknown").await?;
    wait_noexecute_taint(env, &victim, "node.kubernetes.io/unreachable").await?;
    for name in &names {
        wait_terminating(env, name).await?;
    }

    // Nobody finalizes them while the node is dead: they stay Terminating.
    holds_for(
        "the evicted pods to stay Terminating on the dead node",
        Duration::from_secs(15),
        || async {
            for name in &names {
                match env.pods().get_opt(name).await? {
                    Some(p) if p.metadata.deletion_timestamp.is_some() => {}
                    Some(_) => bail!("pod {name} lost its deletionTimestamp"),
                    None => bail!("pod {name} disappeared while its node was dead"),
                }
            }
            Ok(())
        },
    )
    .await?;

    env.revive_node(&victim).await?;
    env.wait_node_ready(&victim, "True").await?;
    for name in &names {
        let pods = env.pods();
        wait_for(
            &format!("pod {name} to be finalized after the node came back"),
            Duration::from_secs(60),
            || {
                let pods = pods.clone();
                async move { Ok(pods.get_opt(name).await?.is_none().then_some(())) }
            },
        )
        .await?;
    }
    Ok(())
}

async fn recreate_rollout_is_blocked_by_pod_on_dead_node(env: &TestEnv) -> Result<()> {
    let victim = env.add_node("victim").await?;
    let deploy = deployment("legacy", 1, "Recreate", json!({ HOSTNAME_LABEL: victim }))?;
    let deployments = env.api::<Deployment>();
    deployments.create(&PostParams::default(), &deploy).await?;
    let pods = env.wait_pods_ready("app=legacy", 1).await?;
    let old = pods[0].metadata.name.clone().unwrap_or_default();

    env.kill_node(&victim).await?;
    wait_terminating(env, &old).await?;

    // `kubectl set image` plus letting the new pod run anywhere in the zone.
    let patch = json!({ "spec": { "template": { "spec": {
        "nodeSelector": { HOSTNAME_LABEL: null, ZONE_LABEL: env.zone },
        "containers": [{ "name": "app", "image": "registry.invalid/app:v2" }],
    }}}});
    deployments.patch("legacy", &PatchParams::default(), &Patch::Strategic(&patch)).await?;
    wait_for(
        "the deployment controller to observe the new template",
        Duration::from_secs(30),
        || {
            let deployments = deployments.clone();
            async move {
                let d = deployments.get("legacy").await?;
                let observed = d.status.and_then(|s| s.observed_generation);
                Ok((observed.is_some() && observed == d.metadata.generation).then_some(()))
            }
        },
    )
    .await?;

    // The old ReplicaSet may briefly create (and the Recreate scale-down delete) a replacement
    // with the old template; what must never appear is a pod of the new template.
    let old_hash = pods[0]
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash").cloned())
        .unwrap_or_default();
    holds_for(
        "no pod of the new ReplicaSet while the old pod is Terminating",
        Duration::from_secs(20),
        || async {
            let pods = env.list_pods("app=legacy").await?;
            for p in &pods {
                let name = p.metadata.name.clone().unwrap_or_default();
                let hash = p.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash"));
                if hash.map(String::as_str) != Some(old_hash.as_str()) {
                    bail!(
                        "pod {name} of the new template was created although {old} is Terminating"
                    );
                }
            }
            let old_pod = pods.iter().find(|p| p.metadata.name.as_deref() == Some(old.as_str()));
            ensure!(
                old_pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
                "old pod {old} is no longer Terminating"
            );
            Ok(())
        },
    )
    .await
}
