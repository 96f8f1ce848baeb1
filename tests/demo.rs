//! `tools/demo`: brings up the local control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok) on 127.0.0.1 with a few simulated nodes,
//! reproduces field incident 1 (a node dies, its pods stay Terminating forever and a Recreate
//! rollout is stuck behind them) and shows what kube-remediator sees.

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
use support::{Cluster, TestEnv, wait_for};

/// Runs the kube-remediator demo on a local control plane with simulated nodes.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// Keep the control plane running after the scenario until Ctrl-C, to explore it with
    /// kubectl (the kubeconfig path is printed).
    #[arg(long)]
    keep: bool,

    /// Path to the kube-remediator binary (default: next to this demo in target/).
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
    let remediator = match args.remediator {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .and_then(|examples| examples.parent())
            .map(|profile| profile.join("kube-remediator"))
            .context("cannot find the target directory")?,
    };
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
                    "containers": [{ "name": "shop", "image": "registry.invalid/shop:v1" }],
                },
            },
        },
    }))?;
    deployments.create(&PostParams::default(), &shop).await?;
    let pods = env.wait_pods_ready("app=shop", 1).await?;
    let old = pods[0].metadata.name.clone().unwrap_or_default();
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
    n.say("shop is rolled out to v2 (kubectl set image)...");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pods = env.list_pods("app=shop").await?;
    let stuck = pods.iter().all(|p| p.metadata.name.as_deref() == Some(old.as_str()));
    if stuck {
        n.say(&format!(
            "...and is stuck: after 10 s still no v2 pod, because Recreate waits for {old} to terminate"
        ));
    } else {
        n.say("...and a v2 pod appeared (unexpected on a dead node)");
    }

    println!();
    n.say("kube-remediator cluster-info:");
    let status = Command::new(remediator)
        .arg("cluster-info")
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .status()
        .with_context(|| format!("running {} (build it with cargo build)", remediator.display()))?;
    anyhow::ensure!(status.success(), "kube-remediator cluster-info failed ({status})");
    Ok(())
}
