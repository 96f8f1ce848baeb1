//! `tools/demo`: brings up the local control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok) on 127.0.0.1 with a few simulated nodes,
//! reproduces field incident 1 (a node dies, its pod stays Terminating forever and a Recreate
//! rollout is stuck behind it), and runs kube-remediator with a policy: first in DryRun (it
//! records what it would do, `plan` shows it), then in Enforce (it force-deletes the pod and
//! the rollout completes). Then field incident 3: a pod stuck Terminating on a healthy node,
//! held by a finalizer nobody removes, which kube-remediator diagnoses and reports (`explain`).

// The demo uses a small part of the test support; the end-to-end tests, which include the same
// module without this allowance, keep it free of dead code.
#[path = "../tests/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use support::env::{HOSTNAME_LABEL, ZONE_LABEL};
use support::operator::Operator;
use support::{Cluster, TestEnv, wait_for};

/// Runs the kube-remediator demo on a local control plane with simulated nodes.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// Keep the control plane running after the scenario until Ctrl-C, to explore it with
    /// kubectl (the kubeconfig path is printed).
    #[arg(long)]
    keep: bool,

    /// Path to the kube-remediator binary (default: the one in the same target directory).
    #[arg(long, env = "KUBE_REMEDIATOR_BIN")]
    remediator: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match support::runtime().block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

struct Narrator {
    start: Instant,
}

impl Narrator {
    fn say(&self, msg: &str) {
        println!("[{:>5.1}s] {msg}", self.start.elapsed().as_secs_f64());
    }
}

async fn run(args: Args) -> Result<()> {
    let remediator = args.remediator.unwrap_or_else(support::operator::binary);
    let n = Narrator { start: Instant::now() };
    n.say("starting the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)");
    let cluster = Cluster::start(&support::new_run_dir("demo")).await?;
    let result = scenario(&n, &cluster, &remediator).await;
    if result.is_ok() && args.keep {
        println!();
        println!("The control plane keeps running. Explore it with:");
        println!("  export KUBECONFIG={}", cluster.kubeconfig.display());
        println!("  {} get nodes,pods -A", cluster.bin.path("kubectl").display());
        println!("  {} cluster-info", remediator.display());
        println!("Press Ctrl-C to stop it.");
        tokio::signal::ctrl_c().await?;
    }
    cluster.stop();
    println!("control plane stopped; component logs are in {}", cluster.dir.display());
    result
}

async fn scenario(n: &Narrator, cluster: &Cluster, remediator: &std::path::Path) -> Result<()> {
    let env = TestEnv::new(cluster.client().await?, "demo").await?;
    let worker = env.add_node("worker-1").await?;
    let spare = env.add_node("worker-2").await?;
    n.say(&format!(
        "nodes {}, {worker} and {spare} are Ready in zone {}",
        env.healthy_node, env.zone
    ));

    // Short windows so the demo takes a minute; the defaults are 5m / 2m / 30s.
    env.create_policy(json!({
        "mode": "DryRun",
        "deadNode": { "notReadyFor": "10s", "leaseStaleFor": "40s" },
        "stuckTerminating": { "delayAfterGrace": "5s" },
        "liveNodeStuck": { "delayAfterGrace": "5s" },
        "safety": { "maxUnhealthyNodes": 1 },
    }))
    .await?;
    n.say("RemediationPolicy demo created in DryRun: a node is dead after 10s NotReady and 40s without Lease renewal; pods are released 5s after their deletionTimestamp");
    let operator = Operator::start(cluster, &env).await?;
    n.say(&format!("kube-remediator runs (log: {})", operator.log.display()));

    let deployments = env.api::<Deployment>();
    let shop: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "shop" },
        "spec": {
            "replicas": 1,
            "strategy": { "type": "Recreate" },
            "selector": { "matchLabels": { "app": "shop" } },
            "template": {
                "metadata": { "labels": { "app": "shop" } },
                "spec": {
                    "nodeSelector": { HOSTNAME_LABEL: worker },
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{ "name": "shop", "image": "registry.invalid/shop:v1" }],
                },
            },
        },
    }))?;
    deployments.create(&PostParams::default(), &shop).await?;
    let pods = env.wait_pods_ready("app=shop", 1).await?;
    let old = pods[0].metadata.name.clone().unwrap_or_default();
    let old_uid = pods[0].metadata.uid.clone().unwrap_or_default();
    n.say(&format!("Deployment shop (strategy Recreate) runs pod {old} on {worker}"));

    env.kill_node(&worker).await?;
    n.say(&format!(
        "{worker} dies: its kubelet stops heartbeating (disk failure, machine powered off)"
    ));
    env.wait_node_ready(&worker, "Unknown").await?;
    n.say(&format!(
        "kube-controller-manager marks {worker} Ready=Unknown and taints it unreachable:NoExecute"
    ));
    let pods_api = env.pods();
    wait_for("the pod to be evicted", Duration::from_secs(60), || {
        let pods_api = pods_api.clone();
        let old = old.clone();
        async move { Ok(pods_api.get(&old).await?.metadata.deletion_timestamp.map(|_| ())) }
    })
    .await?;
    n.say(&format!(
        "the taint manager evicts {old}: it is Terminating, and no kubelet will ever confirm it"
    ));

    let patch = json!({ "spec": { "template": { "spec": {
        "nodeSelector": { HOSTNAME_LABEL: null, ZONE_LABEL: env.zone },
        "containers": [{ "name": "shop", "image": "registry.invalid/shop:v2" }],
    }}}});
    deployments.patch("shop", &PatchParams::default(), &Patch::Strategic(&patch)).await?;
    n.say("shop is rolled out to v2 (kubectl set image), and is stuck: Recreate waits for the old pod to terminate");

    n.say("waiting for the policy's evidence window (about 40 s)...");
    let record = env
        .wait_policy("a would-be action", Duration::from_secs(120), |s| {
            s.recent_actions.iter().find(|a| a.uid == old_uid).cloned()
        })
        .await?;
    n.say(&format!(
        "DryRun: kube-remediator recorded that it would force-delete {}/{}: {}",
        record.namespace, record.name, record.reason
    ));
    println!();
    n.say("`kube-remediator plan` now says:");
    remediator_cli(remediator, cluster, &["plan", "--policy-selector", "remediator.io/test=demo"])?;
    println!();
    let v2_pods = env.list_pods("app=shop").await?;
    n.say(&format!(
        "the pod is still there ({} shop pod(s), none of v2): DryRun changes nothing",
        v2_pods.len()
    ));

    let patch = json!({ "spec": { "mode": "Enforce" } });
    env.policies().patch("demo", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    n.say("the policy is switched to Enforce");
    let pods_api = env.pods();
    wait_for("the stuck pod to be force-deleted", Duration::from_secs(30), || {
        let pods_api = pods_api.clone();
        let old = old.clone();
        async move { Ok(pods_api.get_opt(&old).await?.is_none().then_some(())) }
    })
    .await?;
    n.say(&format!("kube-remediator force-deleted {old} (grace 0, UID precondition)"));
    let v2 = env.wait_pods_ready("app=shop", 1).await?;
    n.say(&format!(
        "the rollout completes: {} runs v2 on {}",
        v2[0].metadata.name.as_deref().unwrap_or_default(),
        v2[0].spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
    ));

    println!();
    n.say("the policy's status:");
    let kubectl = cluster.bin.path("kubectl");
    let status = Command::new(&kubectl)
        .args(["--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .args(["get", "remediationpolicy", "demo"])
        .status()?;
    anyhow::ensure!(status.success(), "kubectl get remediationpolicy failed");
    let policy = env.policies().get("demo").await?;
    for a in policy.status.map(|s| s.recent_actions).unwrap_or_default() {
        println!(
            "  {}  {} {}/{} on {}: {} [{}]",
            a.time.0,
            a.action.as_str(),
            a.namespace,
            a.name,
            a.node,
            a.result.as_str(),
            a.mode.as_str()
        );
    }
    println!();
    n.say("kube-remediator cluster-info:");
    remediator_cli(remediator, cluster, &["cluster-info"])?;
    incident_3(n, &env, cluster, remediator, &spare).await?;
    drop(operator);
    Ok(())
}

/// Field incident 3 on the healthy node `node`: a pod held by a finalizer nobody removes stays
/// Terminating although its kubelet finished it; kube-remediator diagnoses it and, with the
/// policy's defaults, only reports it.
async fn incident_3(
    n: &Narrator,
    env: &TestEnv,
    cluster: &Cluster,
    remediator: &std::path::Path,
    node: &str,
) -> Result<()> {
    println!();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": { "name": "billing", "finalizers": ["example.com/backup-done"] },
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "billing", "image": "registry.invalid/billing:v1" }],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    wait_for("billing to run", Duration::from_secs(30), || async {
        Ok(env.pods().get_opt("billing").await?.filter(support::env::pod_is_ready))
    })
    .await?;
    env.delete_gracefully("billing", 1).await?;
    n.say(&format!(
        "incident 3: pod billing on healthy node {node} is deleted and stays Terminating past its \
         grace period: the finalizer example.com/backup-done is never removed"
    ));
    let stuck = env
        .wait_policy("the stuck pod in the status", Duration::from_secs(30), |s| {
            s.stuck_on_live_nodes.iter().find(|p| p.name == "billing").cloned()
        })
        .await?;
    n.say(&format!(
        "kube-remediator reports it ({}): {} (a StuckTerminating Event, status.stuckOnLiveNodes, \
         kube_remediator_live_node_stuck_pods); the policy only reports it",
        stuck.cause, stuck.detail
    ));
    n.say("`kubectl remediator explain pod demo/billing` (the binary as the kubectl plugin) says:");
    let target = format!("{}/billing", env.namespace);
    remediator_cli(remediator, cluster, &["explain", "pod", &target, "--observe", "0s"])?;
    let release = json!({ "metadata": { "finalizers": null } });
    env.pods().patch("billing", &PatchParams::default(), &Patch::Merge(&release)).await?;
    n.say(
        "the finalizer's owner (or finalizers.removable in a policy) releases it: billing is gone",
    );
    Ok(())
}

/// Runs the kube-remediator binary against the demo cluster, output to the terminal.
fn remediator_cli(remediator: &std::path::Path, cluster: &Cluster, args: &[&str]) -> Result<()> {
    let status = Command::new(remediator)
        .args(args)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .status()
        .with_context(|| format!("running {} (build it with cargo build)", remediator.display()))?;
    anyhow::ensure!(status.success(), "kube-remediator {} failed ({status})", args.join(" "));
    Ok(())
}
