//! `cargo bench --bench rss`: the operator's whole-process memory, measured as a user would
//! (its own `kube_remediator_resident_memory_bytes` and `..._peak_...` gauges, VmRSS and VmHWM)
//! on the real test control plane populated with kwok nodes and realistic pods: three
//! containers with env, probes, resources and mounts, five volumes, an owner reference, labels
//! and annotations, and two field managers, so each pod weighs several KB of JSON as in real
//! clusters. The operator is started once on the empty cluster and once after it is populated;
//! the difference is what its initial lists and its records cost. Asserts nothing.
//!
//! `KUBE_REMEDIATOR_BENCH_PODS` (default 3000) and `KUBE_REMEDIATOR_BENCH_NODES` (default 100)
//! set the size.

// The benchmark uses a small part of the test support; the end-to-end tests, which include the
// same module without this allowance, keep it free of dead code.
#[path = "../support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::operator::Operator;
use support::{Cluster, TestEnv};

const MIB: f64 = 1024.0 * 1024.0;

fn main() {
    if let Err(e) = support::runtime().block_on(run()) {
        eprintln!("rss benchmark failed: {e:#}");
        std::process::exit(1);
    }
}

fn size(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn run() -> Result<()> {
    let cluster = Cluster::start(&support::new_run_dir("bench")).await?;
    let result = scenario(&cluster).await;
    cluster.stop();
    result
}

async fn scenario(cluster: &Cluster) -> Result<()> {
    let pods = size("KUBE_REMEDIATOR_BENCH_PODS", 3000);
    let nodes = size("KUBE_REMEDIATOR_BENCH_NODES", 100);
    let env = TestEnv::new(cluster.client().await?, "bench-rss").await?;
    env.create_policy(json!({})).await?;

    let empty = measure(cluster, &env, "empty cluster", &[]).await?;

    let started = Instant::now();
    let names: Vec<String> = futures::stream::iter(0..nodes)
        .map(|i| {
            let env = &env;
            async move { env.add_node(&format!("n{i:04}")).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    eprintln!("[rss] {nodes} kwok nodes Ready in {:.0}s", started.elapsed().as_secs_f64());
    let owner: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "owner" } }))?;
    let owner = env.api::<ConfigMap>().create(&PostParams::default(), &owner).await?;
    let owner_uid = owner.metadata.uid.context("ConfigMap without uid")?;

    let started = Instant::now();
    let created = futures::stream::iter(0..pods)
        .map(|i| {
            let (env, node, owner_uid) = (&env, &names[i % names.len()], &owner_uid);
            async move { create_pod(env, i, node, owner_uid).await }
        })
        .buffer_unordered(32)
        .fold(0usize, |n, r| async move {
            if let Err(e) = r {
                eprintln!("[rss] a pod was not created: {e:#}");
                return n;
            }
            if (n + 1) % 500 == 0 {
                eprintln!("[rss] {} pods created", n + 1);
            }
            n + 1
        })
        .await;
    let list = env.pods().list(&ListParams::default().limit(1)).await?;
    let one = list.items.first().context("no pod")?;
    let bytes = serde_json::to_vec(one)?.len();
    eprintln!(
        "[rss] {created} pods created in {:.0}s (one weighs {bytes} bytes of JSON with its \
         managedFields)",
        started.elapsed().as_secs_f64()
    );
    // kwok reports them Running: their status grows to what a kubelet writes.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let populated = format!("{created} pods on {nodes} nodes");
    let streamed = measure(
        cluster,
        &env,
        &format!("{populated}, streaming lists"),
        &["--initial-lists=streaming"],
    )
    .await?;
    let paged =
        measure(cluster, &env, &format!("{populated}, paged lists"), &["--initial-lists=paged"])
            .await?;

    println!();
    println!("| cluster | steady RSS | peak RSS |");
    println!("| --- | --- | --- |");
    for (what, steady, peak) in [empty, streamed, paged] {
        println!("| {what} | {:.1} MiB | {:.1} MiB |", steady / MIB, peak / MIB);
    }
    Ok(())
}

/// Starts the operator, waits until it is ready (every watch listed), lets it settle for 15 s
/// and reads its memory gauges; stops it.
async fn measure(
    cluster: &Cluster,
    env: &TestEnv,
    what: &str,
    extra: &[&str],
) -> Result<(String, f64, f64)> {
    let started = Instant::now();
    let op = Operator::start_replica(cluster, env, "", extra).await?;
    let ready = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let rss = op.metric("kube_remediator_resident_memory_bytes", &[]).await?.unwrap_or(0.0);
    let peak = op.metric("kube_remediator_peak_resident_memory_bytes", &[]).await?.unwrap_or(0.0);
    eprintln!(
        "[rss] {what}: ready in {ready:.1}s; RSS {:.1} MiB, peak {:.1} MiB",
        rss / MIB,
        peak / MIB
    );
    drop(op);
    Ok((what.to_string(), rss, peak))
}

/// A pod as real workloads have them, bound to `node`, then labelled by a second field manager.
async fn create_pod(env: &TestEnv, i: usize, node: &str, owner_uid: &str) -> Result<()> {
    let name = format!("app-{i:05}");
    let app = format!("shop-{}", i % 30);
    let env_vars: Vec<_> = (0..12)
        .map(|k| json!({ "name": format!("SETTING_{k}"), "value": format!("value-{k}-for-{app}-in-production") }))
        .collect();
    let container = |n: &str, port: i32| {
        json!({
            "name": n,
            "image": format!("registry.example.com/{app}/{n}:v1.2.3"),
            "command": ["/bin/server"],
            "args": ["--listen", format!(":{port}"), "--log-level=info", "--config=/etc/app/config.yaml"],
            "env": env_vars,
            "envFrom": [{ "configMapRef": { "name": format!("{app}-config") } }],
            "ports": [{ "name": "http", "containerPort": port, "protocol": "TCP" }],
            "resources": {
                "requests": { "cpu": "100m", "memory": "128Mi" },
                "limits": { "cpu": "500m", "memory": "512Mi" },
            },
            "livenessProbe": { "httpGet": { "path": "/healthz", "port": port }, "periodSeconds": 10 },
            "readinessProbe": { "httpGet": { "path": "/readyz", "port": port }, "periodSeconds": 5 },
            "volumeMounts": [
                { "name": "config", "mountPath": "/etc/app" },
                { "name": "secrets", "mountPath": "/etc/secrets", "readOnly": true },
                { "name": "cache", "mountPath": "/var/cache/app" },
                { "name": "token", "mountPath": "/var/run/secrets/tokens", "readOnly": true },
            ],
        })
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "app": app, "tier": "backend", "version": "v1", "pod-template-hash": "7b79559df9" },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
                "example.com/team": "payments",
            },
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [container("app", 8080), container("sidecar", 9090), container("metrics", 9100)],
            "volumes": [
                { "name": "config", "configMap": { "name": format!("{app}-config") } },
                { "name": "secrets", "secret": { "secretName": format!("{app}-secrets") } },
                { "name": "cache", "emptyDir": { "sizeLimit": "1Gi" } },
                { "name": "token", "projected": { "sources": [{ "serviceAccountToken": {
                    "path": "token", "expirationSeconds": 3600, "audience": "vault" } }] } },
                { "name": "scratch", "emptyDir": {} },
            ],
            "tolerations": [
                { "key": "dedicated", "operator": "Equal", "value": "backend", "effect": "NoSchedule" },
            ],
        },
    }))?;
    let pods = env.pods();
    let create = PostParams { field_manager: Some("bench-deployer".into()), ..Default::default() };
    pods.create(&create, &pod).await?;
    let label = json!({ "metadata": { "labels": { "example.com/audited": "true" } } });
    let patch = PatchParams { field_manager: Some("bench-labeler".into()), ..Default::default() };
    pods.patch(&name, &patch, &Patch::Merge(&label)).await?;
    Ok(())
}
