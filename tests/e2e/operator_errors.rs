//! Bad input never crashes the operator: an invalid policy is reported in its status while the
//! others keep being served, and missing permissions are one clear error at start-up.

use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::support::operator::{Operator, binary};
use crate::support::{TestEnv, shared_cluster};

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("oe-invalid-policy", invalid_policy_is_reported_and_others_are_served),
        e2e!("oe-missing-rbac", missing_permissions_fail_start_up_with_one_clear_error),
        e2e!("oe-kubeconfig-env", kubeconfig_is_read_from_the_environment_as_kubectl_does),
        e2e!("oe-deleted-policy-series", a_deleted_policys_series_leave_metrics),
        e2e!("oe-server-features", server_features_are_detected_and_shown),
    ]
}

fn condition<'a>(
    status: &'a kube_remediator::crd::RemediationPolicyStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

async fn invalid_policy_is_reported_and_others_are_served(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    // Selectors the API server accepts (it checks neither operators nor label syntax in a
    // custom resource) and no selector could use: each would match nothing, or everything.
    // (suffix, spec, words the Invalid condition must contain)
    let table: [(&str, serde_json::Value, &[&str]); 7] = [
        (
            "bad-operator",
            json!({ "podSelector": { "matchExpressions": [{ "key": "app", "operator": "Foo" }] } }),
            &["podSelector", "Foo"],
        ),
        (
            "bad-key",
            json!({ "podSelector": { "matchLabels": { "bad key!": "x" } } }),
            &["podSelector", "bad key!"],
        ),
        (
            "bad-prefix",
            json!({ "nodeSelector": { "matchLabels": { "-bad.example/role": "db" } } }),
            &["nodeSelector", "-bad.example/role"],
        ),
        (
            "bad-value",
            json!({ "namespaceSelector": { "matchLabels": { "team": "a b" } } }),
            &["namespaceSelector", "a b"],
        ),
        (
            "in-without-values",
            json!({ "podSelector": { "matchExpressions": [{ "key": "app", "operator": "In" }] } }),
            &["podSelector", "In", "at least one value"],
        ),
        (
            "exists-with-values",
            json!({ "nodeSelector": { "matchExpressions": [
                { "key": "role", "operator": "Exists", "values": ["db"] }] } }),
            &["nodeSelector", "Exists", "takes no values"],
        ),
        (
            "bad-expression-value",
            json!({ "podSelector": { "matchExpressions": [
                { "key": "app", "operator": "NotIn", "values": ["ok", "not ok"] }] } }),
            &["podSelector", "not ok"],
        ),
    ];
    for (suffix, spec, _) in &table {
        env.create_named_policy(&format!("{}-{suffix}", env.name), spec.clone()).await?;
    }
    env.create_policy(json!({})).await?;
    let op = Operator::start(cluster, env).await?;

    let mut failures = Vec::new();
    for (suffix, _, words) in &table {
        let name = format!("{}-{suffix}", env.name);
        let reason = env
            .wait_named_policy(&name, "the Invalid condition", Duration::from_secs(20), |s| {
                condition(s, "Invalid").filter(|c| c.status == "True").map(|c| c.message.clone())
            })
            .await?;
        let missing: Vec<&&str> = words.iter().filter(|w| !reason.contains(**w)).collect();
        if !missing.is_empty() {
            failures.push(format!("{suffix}: the Invalid condition lacks {missing:?}: {reason}"));
        }
        let invalid = op.metric("kube_remediator_policy_invalid", &[("policy", &name)]).await?;
        if invalid != Some(1.0) {
            failures.push(format!("{suffix}: policy_invalid = {invalid:?}"));
        }
        if env.events_about("RemediationPolicy", &name, "InvalidSpec").await?.is_empty() {
            failures.push(format!("{suffix}: no InvalidSpec Event"));
        }
    }
    ensure!(failures.is_empty(), "{} problems:\n  {}", failures.len(), failures.join("\n  "));
    // The valid policy is served all the same.
    env.wait_policy("the valid policy to be Ready", Duration::from_secs(20), |s| {
        condition(s, "Ready").filter(|c| c.status == "True").map(|_| ())
    })
    .await?;
    Ok(())
}

async fn missing_permissions_fail_start_up_with_one_clear_error(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    crate::support::install_crd(&env.client).await?;
    // The admin impersonating a service account that has no RBAC at all.
    let admin = std::fs::read_to_string(&cluster.kubeconfig)?;
    let user = format!("system:serviceaccount:{}:nobody", env.namespace);
    let kubeconfig = cluster.dir.join(format!("{}.kubeconfig", env.name));
    std::fs::write(&kubeconfig, admin.replace("  user:\n", &format!("  user:\n    as: {user}\n")))?;

    let out = tokio::task::spawn_blocking(move || {
        Command::new(binary())
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--metrics-addr", "127.0.0.1:0"])
            .output()
    })
    .await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "run should fail without permissions; stderr:\n{stderr}");
    ensure!(
        stderr.contains("permission denied to list remediationpolicies"),
        "expected one clear permission error, got:\n{stderr}"
    );
    ensure!(stderr.lines().filter(|l| l.starts_with("error:")).count() == 1, "{stderr}");
    Ok(())
}

/// Runs `kube-remediator cluster-info` with `KUBECONFIG` set to `kubeconfig_env` and `HOME` a
/// directory without `.kube`, outside any cluster: (success, stderr).
async fn cluster_info_with(
    kubeconfig_env: String,
    home: std::path::PathBuf,
) -> Result<(bool, String)> {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(binary())
            .arg("cluster-info")
            .env("KUBECONFIG", kubeconfig_env)
            .env("HOME", home)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .output()
    })
    .await??;
    Ok((out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// `KUBECONFIG` as kubectl reads it: a list of files (an empty entry ignored), and an empty
/// value is as if unset, as some CI systems leave it. A list naming the test kubeconfig works;
/// an empty one with no `~/.kube/config` and no cluster around fails with one clear error about
/// the kubeconfig, not "a value is required for --kubeconfig", and no cause said twice.
async fn kubeconfig_is_read_from_the_environment_as_kubectl_does(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let home = cluster.dir.join(format!("{}-home", env.name));
    std::fs::create_dir_all(&home)?;
    let list = format!(":{}", cluster.kubeconfig.display());
    let (ok, stderr) = cluster_info_with(list, home.clone()).await?;
    ensure!(ok, "KUBECONFIG as a list did not work:\n{stderr}");

    let (ok, stderr) = cluster_info_with(String::new(), home).await?;
    ensure!(!ok, "no kubeconfig anywhere, yet cluster-info succeeded");
    ensure!(!stderr.contains("a value is required"), "KUBECONFIG= read as a flag:\n{stderr}");
    ensure!(
        stderr.to_lowercase().contains("kubeconfig"),
        "the error does not say what is missing:\n{stderr}"
    );
    let causes: Vec<&str> = stderr.lines().filter(|l| l.contains("caused by:")).collect();
    let mut unique = causes.clone();
    unique.dedup();
    ensure!(unique.len() == causes.len(), "a cause said twice:\n{stderr}");
    Ok(())
}

/// A deleted policy (no finalizer: the controller never reconciles it again) leaves `/metrics`
/// within the sweep's 5 s, while the other policy's series stay.
async fn a_deleted_policys_series_leave_metrics(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let doomed = format!("{}-doomed", env.name);
    env.create_named_policy(&doomed, json!({})).await?;
    env.create_policy(json!({})).await?;
    let op = Operator::start(cluster, env).await?;
    let series = |text: &str, policy: &str| text.contains(&format!("policy=\"{policy}\""));
    crate::support::wait_for("both policies' series", Duration::from_secs(20), || async {
        let text = op.metrics().await?;
        Ok((series(&text, &doomed) && series(&text, &env.name)).then_some(()))
    })
    .await?;
    env.policies().delete(&doomed, &Default::default()).await?;
    let deleted = std::time::Instant::now();
    crate::support::wait_for(
        "the deleted policy's series to go",
        Duration::from_secs(15),
        || async { Ok((!series(&op.metrics().await?, &doomed)).then_some(())) },
    )
    .await?;
    ensure!(series(&op.metrics().await?, &env.name), "the other policy's series went too");
    eprintln!(
        "[{}] series gone {:.1}s after the deletion",
        env.name,
        deleted.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the operator finds out about the server matches the release the control plane was
/// built from: `cluster-info -o json` names the version and each feature's state on it, and
/// `run` logs the same once at start-up and picks its initial lists by it (paged on 1.33, where
/// WatchList is off by default; streamed from 1.34).
async fn server_features_are_detected_and_shown(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    crate::support::install_crd(&env.client).await?;
    let version = cluster.bin.kubernetes_version()?;
    let minor = cluster.bin.kubernetes_minor()?;
    let kubeconfig = cluster.kubeconfig.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(binary())
            .args(["cluster-info", "-o", "json", "--kubeconfig"])
            .arg(&kubeconfig)
            .output()
    })
    .await??;
    ensure!(out.status.success(), "cluster-info failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    ensure!(
        doc["serverVersion"] == version.as_str(),
        "serverVersion {} on {version}",
        doc["serverVersion"]
    );
    ensure!(doc["supported"] == true, "{version} reported unsupported: {doc}");
    let state = |feature: &str| {
        doc["features"]
            .as_array()
            .and_then(|f| f.iter().find(|l| l["feature"] == feature))
            .and_then(|l| l["state"].as_str())
            .unwrap_or("absent")
            .to_string()
    };
    let streaming = if minor >= 34 { "yes" } else { "no" };
    let gated = if minor >= 37 { "alpha" } else { "no" };
    for (feature, want) in [
        ("streaming initial lists", streaming),
        ("ValidatingAdmissionPolicy", "yes"),
        ("out-of-service taint", "yes"),
        ("pod DisruptionTarget condition", "yes"),
        ("node lifecycle conditions", gated),
        ("StatefulSet Recreate", gated),
    ] {
        ensure!(
            state(feature) == want,
            "{feature}: {} on {version}, expected {want}",
            state(feature)
        );
    }

    let op = Operator::start(cluster, env).await?;
    let log = std::fs::read_to_string(&op.log)?;
    ensure!(log.contains(&format!("Kubernetes {version} is supported")), "no version line:\n{log}");
    let lists = if minor >= 34 { "streaming" } else { "paged" };
    ensure!(
        log.contains(&format!("watches get the current state by {lists} lists")),
        "expected {lists} lists on {version}:\n{log}"
    );
    Ok(())
}
