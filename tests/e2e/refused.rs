//! A force delete the API server refuses every time: an admission policy (a
//! ValidatingAdmissionPolicy, CEL in the API server itself, standing in for a webhook) denies
//! the operator's DELETE of one pod. The operator retries it with a doubling wait (10 s, 20 s,
//! 40 s, ... up to 5 min), reports it as failing (metric, Event, one status entry however many
//! attempts), and still releases the other pods of the same policy on time.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, DeleteParams, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::faults::{LEASE_STALE_FOR, NOT_READY_FOR, policy_spec, running_pod_on};
use crate::fixtures::{uid, until};
use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![e2e!("rf-refused-delete", a_refused_delete_backs_off_and_the_others_go_on)]
}

/// Denies DELETE of the pod `refused` in the test's namespace when the operator sends it.
async fn refuse_the_operators_delete(env: &TestEnv) -> Result<String> {
    let name = format!("{}-refuse-delete", env.name);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["DELETE"], "resources": ["pods"],
            }]},
            "validations": [{
                "expression": format!(
                    "!(request.userInfo.username == '{OPERATOR_USER}' && \
                     oldObject.metadata.name == 'refused')"
                ),
                "message": "deletion refused by the e2e admission policy",
            }],
        },
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": { "namespaceSelector": { "matchLabels": {
                "kubernetes.io/metadata.name": env.namespace,
            }}},
        },
    }))?;
    Api::<ValidatingAdmissionPolicy>::all(env.client.clone())
        .create(&PostParams::default(), &policy)
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(name)
}

async fn remove_refusal(env: &TestEnv, name: &str) -> Result<()> {
    let dp = DeleteParams::default();
    Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone()).delete(name, &dp).await?;
    Api::<ValidatingAdmissionPolicy>::all(env.client.clone()).delete(name, &dp).await?;
    Ok(())
}

async fn a_refused_delete_backs_off_and_the_others_go_on(env: &TestEnv) -> Result<()> {
    let refusal = refuse_the_operators_delete(env).await?;
    let result = refused_delete(env).await;
    remove_refusal(env, &refusal).await?;
    result
}

async fn refused_delete(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let victim = env.add_node("victim").await?;
    let refused = uid(&running_pod_on(env, "refused", &victim).await?);
    let normal = uid(&running_pod_on(env, "normal", &victim).await?);
    env.create_policy(policy_spec(env)).await?;
    let op = Operator::start(cluster, env).await?;
    env.kill_node(&victim).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.delete_gracefully("refused", 1).await?;
    let terminating = env.delete_gracefully("normal", 1).await?;
    let deleted = terminating.metadata.deletion_timestamp.context("not Terminating")?.0;
    let due = env
        .dead_at(&victim, NOT_READY_FOR, LEASE_STALE_FOR)
        .await?
        .max(deleted + SignedDuration::from_secs(1));

    // The other pod of the same policy is released on time.
    wait_for("pod normal to be gone", until(due) + Duration::from_secs(10), || async {
        let p = env.pods().get_opt("normal").await?;
        Ok((p.map(|p| uid(&p)) != Some(normal.clone())).then_some(()))
    })
    .await?;
    let normal_after = Timestamp::now().duration_since(due).as_secs_f64();

    // The refused one: attempts 10 s, then 20 s apart (audit log: refused requests too).
    let attempts = wait_for("three refused DELETEs", Duration::from_secs(60), || async {
        let deletes = cluster.operator_pod_deletes(&env.namespace, "refused")?;
        Ok((deletes.len() >= 3).then_some(deletes))
    })
    .await?;
    let times: Vec<Timestamp> = attempts
        .iter()
        .map(|a| a.received.context("audit entry without time"))
        .collect::<Result<_>>()?;
    let gaps: Vec<f64> =
        times.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64()).collect();
    ensure!(
        gaps[0] >= 9.0 && gaps[1] >= 1.5 * gaps[0],
        "the waits between attempts should double from 10 s: {gaps:?}"
    );
    let p = env.pods().get_opt("refused").await?;
    ensure!(p.map(|p| uid(&p)) == Some(refused.clone()), "pod refused is gone");

    // Reported as failing: one status entry, the refusal named; Event; metric. Each attempt is
    // recorded `Pending` before its request and that record stands beside the `Failed` one until
    // the attempt's outcome replaces both: read the status once no attempt is in flight (the next
    // is 40 s away).
    let records = wait_for("no attempt of refused in flight", Duration::from_secs(10), || async {
        let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
        let records: Vec<_> =
            status.recent_actions.into_iter().filter(|a| a.uid == refused).collect();
        Ok(records.iter().all(|a| a.result.as_str() != "Pending").then_some(records))
    })
    .await?;
    ensure!(
        records.len() == 1 && records[0].result.as_str() == "Failed",
        "one Failed entry of refused wanted: {records:?}"
    );
    let detail = records[0].detail.clone().unwrap_or_default();
    ensure!(detail.contains("refused by the e2e admission policy"), "detail: {detail}");
    env.wait_event("Pod", "refused", "ForceDeleteFailed", Duration::from_secs(15)).await?;
    let labels = [("policy", env.name.as_str()), ("result", "Failed")];
    let failed = op.metric("kube_remediator_actions_total", &labels).await?.unwrap_or(0.0);
    ensure!(failed >= 3.0, "actions_total Failed = {failed}");
    eprintln!(
        "[rf-refused-delete] the other pod released {normal_after:.2}s after its due instant; the \
         refused one attempted {} times, {gaps:.1?}s apart; one status entry, {failed} failures \
         counted",
        times.len()
    );
    Ok(())
}
