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
    // The API server cannot check selector operators; only the operator can.
    let bad = format!("{}-bad", env.name);
    env.create_named_policy(
        &bad,
        json!({ "podSelector": { "matchExpressions": [{ "key": "app", "operator": "Foo" }] } }),
    )
    .await?;
    env.create_policy(json!({})).await?;
    let op = Operator::start(cluster, env).await?;

    let reason = env
        .wait_named_policy(&bad, "the Invalid condition", Duration::from_secs(20), |s| {
            condition(s, "Invalid").filter(|c| c.status == "True").map(|c| c.message.clone())
        })
        .await?;
    ensure!(reason.contains("Foo"), "the Invalid condition should name the bad operator: {reason}");
    env.wait_policy("the valid policy to be Ready", Duration::from_secs(20), |s| {
        condition(s, "Ready").filter(|c| c.status == "True").map(|_| ())
    })
    .await?;
    let invalid = op.metric("kube_remediator_policy_invalid", &[("policy", &bad)]).await?;
    ensure!(invalid == Some(1.0), "policy_invalid{{{bad}}} = {invalid:?}");
    let found = !env.events_about("RemediationPolicy", &bad, "InvalidSpec").await?.is_empty();
    ensure!(found, "no InvalidSpec Event on {bad}");
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
