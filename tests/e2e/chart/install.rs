//! `chart-install`: `helm install` of the packaged chart on the test control plane; the operator,
//! run out of cluster as the chart's ServiceAccount (impersonated), starts and serves its policy,
//! and is refused Secrets and node deletion; the grants are those of `NEEDED`
//! (`tests/support/rbac.rs`), which `chart-rbac` checks the chart's roles against.
//! With `$KUBE_REMEDIATOR_IMAGE` set (`tools/test`, running it with the image's binary), the
//! chart is installed with the image's digest, and the Deployment must run exactly that image.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_remediator::adapters::NODE_LEASE_NAMESPACE;
use kube_remediator::crd::RemediationPolicy;
use serde_json::json;

use crate::support::chart::{Helm, LEADER_LEASE, helm_async, package};
use crate::support::cluster::Cluster;
use crate::support::env::TEST_LABEL;
use crate::support::operator::{Operator, binary, image_dir};
use crate::support::rbac::{Grant, Scope, needed, refused};
use crate::support::{TestEnv, install_crd, shared_cluster, wait_for};

pub(super) async fn installed_chart_grants_enough_and_no_more(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    install_crd(&env.client).await?;
    // The pods must pass the "restricted" Pod Security Standard.
    let psa = json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    Api::<Namespace>::all(env.client.clone())
        .patch(&env.namespace, &PatchParams::default(), &Patch::Merge(&psa))
        .await?;
    // Two nodes of this test's own, so the spread over nodes shows; both schedulable before
    // the chart's pods are placed (the spread does not count a node tainted not-ready).
    let second = env.add_node("b").await?;
    for node in [&env.healthy_node, &second] {
        env.wait_node_schedulable(node).await?;
    }

    let release = env.name.clone();
    let fullname = format!("{release}-kube-remediator");
    let policy = format!("{}-audit", env.name);
    // Nothing here may touch the other tests: the policy has a unique name, selects no node,
    // and only this test's operator serves it; the pods run on this test's nodes.
    let mut values = json!({
        "policySelector": format!("{TEST_LABEL}={}", env.name),
        "defaultPolicy": {
            "name": policy,
            "labels": { TEST_LABEL: env.name },
            "spec": {
                "mode": "DryRun",
                "nodeSelector": { "matchLabels": { TEST_LABEL: format!("{}-no-such-node", env.name) } },
            },
        },
        "nodeSelector": { TEST_LABEL: env.name },
    });
    let digest = image_digest()?;
    if let Some(digest) = &digest {
        values["image"] = json!({ "digest": digest });
    }
    let values_file = cluster.dir.join(format!("{}-values.yaml", env.name));
    std::fs::write(&values_file, yaml_serde::to_string(&values)?)?;

    let kubeconfig = cluster.kubeconfig.display().to_string();
    let values_file = values_file.display().to_string();
    // The chart as users get it: packaged.
    let package_dir = cluster.dir.join(format!("{}-chart", env.name));
    let package = tokio::task::spawn_blocking(move || package(&Helm::new()?, &package_dir))
        .await??
        .display()
        .to_string();
    let install = helm_async(&[
        "install",
        &release,
        &package,
        "--namespace",
        &env.namespace,
        "--kubeconfig",
        &kubeconfig,
        "--skip-crds",
        "--values",
        &values_file,
        "--timeout",
        "60s",
    ])
    .await?;
    for needle in ["kubectl get rp", "recentActions", "WouldForceDelete", "kube-remediator plan"] {
        ensure!(install.stdout.contains(needle), "NOTES lack {needle:?}:\n{}", install.stdout);
    }

    wait_deployment_available(env, &release, &fullname, 2).await?;
    let pods = env
        .list_pods(&format!("app.kubernetes.io/instance={release}"))
        .await?
        .into_iter()
        .filter_map(|p: Pod| p.spec.and_then(|s| s.node_name))
        .collect::<BTreeSet<String>>();
    let want: BTreeSet<String> = [env.healthy_node.clone(), second].into();
    ensure!(pods == want, "the two replicas run on {pods:?}, expected one on each of {want:?}");

    // The chart's ServiceAccount, impersonated by the admin.
    let sa = format!("system:serviceaccount:{}:{fullname}", env.namespace);
    let sa_kubeconfig = cluster.dir.join(format!("{}.kubeconfig", env.name));
    write_impersonating_kubeconfig(cluster, &sa, &sa_kubeconfig)?;
    let as_sa = client_for(&sa_kubeconfig).await?;

    // Everything in NEEDED is allowed, nothing in refused() is.
    let mut failures = Vec::new();
    for (g, why) in needed(true, &[]) {
        if !allowed(&as_sa, &g, &env.namespace).await? {
            failures.push(format!("refused, but the code needs it: {g} ({why})"));
        }
    }
    for g in refused() {
        if allowed(&as_sa, &g, &env.namespace).await? {
            failures.push(format!("allowed, but must be refused: {g}"));
        }
    }
    // And for real: no Secrets (Helm keeps its releases in this very namespace), no node deletion.
    let no_node = format!("{}-no-such-node", env.name);
    let real = [
        (
            "list secrets",
            code(Api::<Secret>::all(as_sa.clone()).list(&ListParams::default()).await),
        ),
        (
            "list secrets in the release namespace",
            code(
                Api::<Secret>::namespaced(as_sa.clone(), &env.namespace)
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "delete nodes",
            code(Api::<Node>::all(as_sa.clone()).delete(&no_node, &DeleteParams::default()).await),
        ),
    ];
    for (what, status) in real {
        if status != 403 {
            failures.push(format!("{what} as {sa}: HTTP {status}, expected 403"));
        }
    }
    ensure!(failures.is_empty(), "{} problems:\n  {}", failures.len(), failures.join("\n  "));

    // The operator, with the chart's own arguments, as that ServiceAccount: it passes its
    // preflight, its watches sync (/readyz), and it writes its policy's status.
    let deploy = env.api::<Deployment>().get(&fullname).await?;
    let container = deploy
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .context("the Deployment has no container")?;
    if let Some(digest) = &digest {
        let image = container.image.clone().unwrap_or_default();
        ensure!(
            image.ends_with(&format!("@{digest}")),
            "the Deployment runs {image}, not {digest}"
        );
    }
    let chart_args = container.args.context("the Deployment's container has no args")?;
    let args: Vec<String> =
        chart_args.into_iter().filter(|a| !a.starts_with("--metrics-addr")).collect();
    let mut operator = Operator::start_with_args(cluster, &env.name, &sa_kubeconfig, &args).await?;
    let policies: Api<RemediationPolicy> = Api::all(env.client.clone());
    wait_for("the operator to write the policy's status", Duration::from_secs(30), || {
        let (policies, policy) = (policies.clone(), policy.clone());
        async move {
            let p = policies.get(&policy).await?;
            let status = p.status.as_ref();
            let ready = status.is_some_and(|s| {
                s.observed_generation == p.metadata.generation
                    && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
            });
            Ok(ready.then_some(()))
        }
    })
    .await
    .with_context(|| format!("see {}", operator.log.display()))?;
    // It took the chart's leader Lease (create, get) in the release namespace, and hands it
    // back (update) on SIGTERM.
    let leader = operator.metric("kube_remediator_leader", &[]).await?;
    ensure!(leader == Some(1.0), "kube_remediator_leader = {leader:?}: the Lease was not taken");
    let status = operator.terminate(Duration::from_secs(10))?;
    ensure!(status.success(), "the operator exited with {status} on SIGTERM");
    let lease =
        Api::<Lease>::namespaced(env.client.clone(), &env.namespace).get(LEADER_LEASE).await?;
    let holder = lease.spec.and_then(|s| s.holder_identity);
    ensure!(holder.is_none(), "the Lease is still held by {holder:?} after SIGTERM");

    // `kube-remediator plan`, which NOTES.txt tells users to run in the pod, works with the
    // same grants.
    let plan = {
        let (kubeconfig, selector) = (sa_kubeconfig.clone(), format!("{TEST_LABEL}={}", env.name));
        tokio::task::spawn_blocking(move || {
            Command::new(binary())
                .args(["plan", "-o", "json", "--policy-selector", &selector, "--kubeconfig"])
                .arg(kubeconfig)
                .output()
        })
        .await??
    };
    ensure!(
        plan.status.success() && String::from_utf8_lossy(&plan.stdout).contains(&policy),
        "kube-remediator plan as {sa} failed ({}):\n{}{}",
        plan.status,
        String::from_utf8_lossy(&plan.stdout),
        String::from_utf8_lossy(&plan.stderr)
    );

    // Uninstalling removes the cluster-scoped objects too.
    helm_async(&[
        "uninstall",
        &release,
        "--namespace",
        &env.namespace,
        "--kubeconfig",
        &kubeconfig,
        "--wait",
    ])
    .await?;
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    ensure!(roles.get_opt(&fullname).await?.is_none(), "ClusterRole {fullname} survived");
    ensure!(policies.get_opt(&policy).await?.is_none(), "policy {policy} survived");
    Ok(())
}

/// Waits until the release's Deployment has `count` available replicas; fails at once when its
/// ReplicaSet cannot create pods (Pod Security admission refusing them, say).
async fn wait_deployment_available(
    env: &TestEnv,
    release: &str,
    name: &str,
    count: i32,
) -> Result<()> {
    let deployments = env.api::<Deployment>();
    let replica_sets = env.api::<ReplicaSet>();
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    let outcome = wait_for(
        &format!("Deployment {name} to have {count} available replicas"),
        Duration::from_secs(60),
        || {
            let (deployments, replica_sets, lp) = (&deployments, &replica_sets, &lp);
            async move {
                for rs in replica_sets.list(lp).await?.items {
                    let failure = rs
                        .status
                        .and_then(|s| s.conditions)
                        .into_iter()
                        .flatten()
                        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True");
                    if let Some(c) = failure {
                        return Ok(Some(Err(c.message.unwrap_or_default())));
                    }
                }
                let d = deployments.get(name).await?;
                let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
                Ok((available == count).then_some(Ok(())))
            }
        },
    )
    .await?;
    outcome.map_err(|message| anyhow::anyhow!("the operator's pods were refused: {message}"))
}

/// The admin kubeconfig with `as: <user>`: every request is made as `user` (kube-rs sends the
/// Impersonate-User header for it).
pub(super) fn write_impersonating_kubeconfig(
    cluster: &Cluster,
    user: &str,
    path: &Path,
) -> Result<()> {
    let mut kubeconfig = Kubeconfig::read_from(&cluster.kubeconfig)?;
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate = Some(user.to_string());
        }
    }
    std::fs::write(path, yaml_serde::to_string(&kubeconfig)?)?;
    Ok(())
}

pub(super) async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Whether the client's user may do `g`, by a SelfSubjectAccessReview.
async fn allowed(client: &kube::Client, g: &Grant, release_namespace: &str) -> Result<bool> {
    let (resource, subresource) = match g.resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (g.resource.clone(), None),
    };
    let namespace = match g.scope {
        Scope::Cluster => None,
        Scope::NodeLeases => Some(NODE_LEASE_NAMESPACE.to_string()),
        Scope::Release => Some(release_namespace.to_string()),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(g.group.clone()),
                resource: Some(resource),
                subresource,
                verb: Some(g.verb.clone()),
                namespace,
                name: (!g.name.is_empty()).then(|| g.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .with_context(|| format!("SelfSubjectAccessReview of {g}"))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The HTTP status of an API call: 200 when it succeeded, 0 when it failed without an answer.
fn code<T>(result: kube::Result<T>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(_) => 0,
    }
}

/// The digest `tools/image` printed, when this run checks the image (`$KUBE_REMEDIATOR_IMAGE`).
fn image_digest() -> Result<Option<String>> {
    let Some(dir) = image_dir() else {
        return Ok(None);
    };
    let path = dir.join("digest");
    let digest =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(digest.trim().to_string()))
}
