//! `kube-remediator explain pod`, run the way an on-call engineer would: as the kubectl plugin
//! (the binary linked under the name `kubectl-remediator`), with the admin kubeconfig.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::e2e;
use crate::support::env::{TEST_LABEL, ZONE_LABEL, pod_is_ready};
use crate::support::operator::binary;
use crate::support::{TestEnv, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![e2e!("ex-explain-finalizer", explain_names_the_finalizer_and_what_each_policy_does)]
}

const FINALIZER: &str = "example.com/hold";

/// The binary linked as `kubectl-remediator` in a directory of this test's own, as `kubectl`
/// finds plugins on the PATH.
pub(crate) fn plugin(env: &TestEnv) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("kube-remediator-{}", env.name));
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("kubectl-remediator");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(binary(), &link)?;
    Ok(link)
}

/// Runs the plugin with `args` and the admin kubeconfig; (exit success, stdout, stderr).
pub(crate) async fn run(
    plugin: &Path,
    kubeconfig: &Path,
    args: &[&str],
) -> Result<(bool, String, String)> {
    let mut cmd = Command::new(plugin);
    cmd.args(args).arg("--kubeconfig").arg(kubeconfig);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    Ok((out.status.success(), String::from_utf8(out.stdout)?, String::from_utf8(out.stderr)?))
}

/// Incident 3 through `explain`: a pod that a finalizer nobody removes keeps Terminating on a
/// healthy node (its kubelet, kwok, finished it; the API server keeps it for the finalizer).
/// `kubectl remediator explain pod NS/NAME -o json` names the finalizer as the cause, shows the
/// node Ready, and says what each policy does: the test's DryRun policy holds it
/// (`HeldByFinalizers`: no finalizer is removable), and a policy of another zone does not cover
/// it. A pod that does not exist is one clear error, and `--help` speaks as the plugin.
async fn explain_names_the_finalizer_and_what_each_policy_does(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let node = env.add_node("live").await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "held", "finalizers": [FINALIZER],
            "labels": { "app": "held", TEST_LABEL: env.name },
        },
        "spec": {
            "nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
        },
    }))?;
    env.pods().create(&PostParams::default(), &pod).await?;
    wait_for("the pod to run", Duration::from_secs(30), || async {
        Ok(env.pods().get_opt("held").await?.filter(pod_is_ready))
    })
    .await?;
    env.delete_gracefully("held", 1).await?;
    let mine = json!({
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "liveNodeStuck": { "delayAfterGrace": "1s" },
    });
    env.create_policy(mine).await?;
    let other = format!("{}-elsewhere", env.name);
    let elsewhere = json!({ "nodeSelector": { "matchLabels": { ZONE_LABEL: "no-such-zone" } } });
    env.create_named_policy(&other, elsewhere).await?;

    let plugin = plugin(env)?;
    let target = format!("{}/held", env.namespace);
    let selector = format!("{TEST_LABEL}={}", env.name);
    let args = [
        "explain",
        "pod",
        &target,
        "-o",
        "json",
        "--observe",
        "0s",
        "--policy-selector",
        &selector,
    ];
    let outcome = async {
        // Stuck once the grace period and the rule's delay have passed.
        let doc = wait_for("explain to diagnose the pod", Duration::from_secs(30), || async {
            let (ok, out, err) = run(&plugin, &cluster.kubeconfig, &args).await?;
            ensure!(ok, "explain failed: {err}");
            let doc: Value =
                serde_json::from_str(&out).with_context(|| format!("not JSON: {out}"))?;
            // Diagnosed once past the grace period; held by the policy once past its delay.
            let held = doc["policies"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["code"] == "HeldByFinalizers"));
            Ok((doc["diagnosis"]["cause"].is_string() && held).then_some(doc))
        })
        .await?;
        ensure!(doc["diagnosis"]["cause"] == "Finalizers", "diagnosis: {doc:#}");
        let summary = doc["diagnosis"]["summary"].as_str().unwrap_or_default();
        ensure!(summary.contains(FINALIZER), "the diagnosis does not name {FINALIZER}: {summary}");
        ensure!(doc["node"]["ready"] == "Ready", "node: {doc:#}");
        let policies = doc["policies"].as_array().context("no policies")?;
        let by_name = |name: &str| policies.iter().find(|p| p["policy"] == name).cloned();
        let own = by_name(&env.name).context("the test's policy is not listed")?;
        ensure!(own["code"] == "HeldByFinalizers" && own["covers"] == true, "{own:#}");
        ensure!(own["says"].as_str().unwrap_or_default().contains(FINALIZER), "{own:#}");
        let far = by_name(&other).context("the other policy is not listed")?;
        ensure!(far["covers"] == false && far["code"] == "NotSelected", "{far:#}");

        let text_args =
            ["explain", "pod", &target, "--observe", "0s", "--policy-selector", &selector];
        let (ok, text, err) = run(&plugin, &cluster.kubeconfig, &text_args).await?;
        ensure!(ok, "explain (text) failed: {err}");
        eprintln!("[{}] kubectl remediator explain pod {target}:\n{text}", env.name);
        ensure!(text.contains("diagnosis (Finalizers)") && text.contains(FINALIZER), "{text}");

        let missing = format!("{}/no-such-pod", env.namespace);
        let (ok, _, err) =
            run(&plugin, &cluster.kubeconfig, &["explain", "pod", &missing, "--observe", "0s"])
                .await?;
        ensure!(!ok && err.contains("not found"), "a missing pod: exit ok={ok}, stderr {err}");

        let (ok, help, _) = run(&plugin, &cluster.kubeconfig, &["explain", "--help"]).await?;
        ensure!(ok && help.contains("kubectl remediator explain"), "{help}");
        Ok(())
    }
    .await;
    // Let the namespace go: nobody else removes the finalizer.
    let release = json!({ "metadata": { "finalizers": null } });
    env.pods().patch("held", &PatchParams::default(), &Patch::Merge(&release)).await?;
    outcome
}
