//! The storm guard's memory (safety invariant 4: storms hold every destructive action; nodes we
//! deleted still count for a while; a latched circuit stays latched until re-armed), each shown
//! by the writes the operator sends (the API server's audit log):
//!
//! - `kc-status-refused-latch`: **the latch survives a failed status write.** A policy with
//!   `safety.latch` sees a storm (more of its nodes unhealthy than `maxUnhealthyNodes`) while an
//!   admission policy refuses every write of its status by the operator, and the storm passes
//!   while they are still refused: the only record of the open circuit is the operator's own
//!   memory, the status still says what it said before the storm. Once status writes are
//!   allowed again, a node dies with a pod stuck Terminating on it: the pod is not
//!   force-deleted (the circuit is latched, and the status comes to say so); removing the
//!   re-arm annotation `remediator.io/rearm-circuit` is no re-arm (an absence is nothing an
//!   admin said); giving it a new value re-arms, and the pod is released at once.
//! - `kc-deleted-nodes-still-count`: **nodes we deleted keep counting as unhealthy** in the storm
//!   guard (for 10 minutes). A failure spreads slowly: node A dies, the cloud provider marks it
//!   shut down, and the operator deletes it (`deleteNodeAfter`); then node B dies the same way,
//!   with a pod stuck Terminating on it. A, deleted by the operator a minute ago, and B make 2
//!   unhealthy nodes, more than the policy's `maxUnhealthyNodes: 1`: the circuit opens, and
//!   neither B nor its pod is deleted.
//!
//! They run on the production-like control plane ([`prod_e2e!`]): PodGC on, the default
//! tolerations and node-monitor grace period (a killed node turns Unknown about 50 s after its
//! last heartbeat). Each test scopes its policy to its own zone and starts its own operator
//! (`--leader-elect=false`) with `--max-unhealthy-nodes-in-cluster=100%`: other tests kill nodes
//! on the same control plane at the same time, and the cluster-wide storm guard must not be what
//! holds the operator here, or an absence of writes would prove nothing; the policy's own limit
//! is what these tests are about, and they check that it is what holds.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use libtest_mimic::Trial;
use serde_json::{Value, json};

use kube_remediator::crd::{CircuitState, RemediationPolicy, RemediationPolicyStatus};

use crate::faults::{kill_and_strand, running_pod_on, wait_gone};
use crate::fixtures::{uid, until};
use crate::prod_e2e;
use crate::support::cluster::Cluster;
use crate::support::env::{ZONE_LABEL, node_ready_status};
use crate::support::operator::Operator;
use crate::support::pki::OPERATOR_USER;
use crate::support::{TestEnv, holds_for, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("kc-status-refused-latch", the_latch_survives_a_refused_status_write),
        prod_e2e!("kc-deleted-nodes-still-count", nodes_we_deleted_still_count_as_unhealthy),
    ]
}

const NOT_READY_FOR: i64 = 10;
/// The documented minimum.
const LEASE_STALE_FOR: i64 = 40;
/// `nodeActions.deleteNodeAfter` of the deletion test.
const DELETE_NODE_AFTER: i64 = 5;
/// How long past the instant the operator would act at (it requeues at the exact instant) the
/// tests watch for a write that must not come: covers a loaded 2-core machine.
const MARGIN: SignedDuration = SignedDuration::from_secs(30);
/// How long after removing the re-arm annotation the latch must still hold.
const REMOVAL_HOLD: Duration = Duration::from_secs(20);
/// How long after its instant a legitimate action may come at the latest.
const ACT_WITHIN: Duration = Duration::from_secs(20);
/// A killed node turns Unknown about 50 s after its last heartbeat (the default grace period).
const UNKNOWN_WITHIN: Duration = Duration::from_secs(150);
/// Audit timestamps against ours.
const TOLERANCE: SignedDuration = SignedDuration::from_secs(1);
const REARM: &str = "remediator.io/rearm-circuit";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// The message of the admission policy that refuses the status writes.
const REFUSED: &str = "status write refused by the e2e admission policy";

/// The Enforce policy of both tests: this test's zone, the short windows, no delay after the
/// grace period, `safety`, and `node_actions` if any.
fn policy_spec(env: &TestEnv, safety: Value, node_actions: Option<Value>) -> Value {
    let mut spec = json!({
        "mode": "Enforce",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": safety,
    });
    if let Some(actions) = node_actions {
        spec["nodeActions"] = actions;
    }
    spec
}

/// The test's operator, alone, with the cluster-wide storm guard out of the way (see the top of
/// the file), ready.
async fn start_operator(cluster: &Cluster, env: &TestEnv) -> Result<Operator> {
    let extra = ["--leader-elect=false", "--max-unhealthy-nodes-in-cluster=100%"];
    Operator::start_replica(cluster, env, "", &extra).await
}

/// A client with the operator's identity, for the test's dry-run probes of the admission policy.
async fn operator_client(cluster: &Cluster) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(&cluster.operator_kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Waits until the kubelet of each of `nodes` renewed its Lease after `after` (kwok renews every
/// 10 s): an operator ready at `after` has seen them alive by its own clock, and dates their
/// deaths from a renewal as the objects do.
async fn renewed_since(env: &TestEnv, nodes: &[&str], after: Timestamp) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    for node in nodes {
        wait_for(&format!("the Lease of {node} renewed"), Duration::from_secs(30), || {
            let leases = leases.clone();
            async move {
                let lease = leases.get_opt(node).await?;
                let renewed = lease.and_then(|l| l.spec).and_then(|s| s.renew_time).map(|t| t.0);
                Ok(renewed.filter(|r| *r > after).map(|_| ()))
            }
        })
        .await?;
    }
    Ok(())
}

async fn wait_unknown(env: &TestEnv, node: &str) -> Result<()> {
    wait_for(&format!("node {node} Ready=Unknown"), UNKNOWN_WITHIN, || async move {
        let n = env.nodes().get_opt(node).await?;
        Ok(n.filter(|n| node_ready_status(n).as_deref() == Some("Unknown")).map(|_| ()))
    })
    .await
}

/// Waits until the killed `node` is Unknown and returns the instant the policy counts it dead.
async fn dead_instant(env: &TestEnv, node: &str) -> Result<Timestamp> {
    wait_unknown(env, node).await?;
    let dead = env.dead_at(node, NOT_READY_FOR, LEASE_STALE_FOR).await?;
    eprintln!("[{}] {node} counts as dead from {dead}", env.name);
    Ok(dead)
}

/// When the policy releases `pod` on a node dead at `dead`: its grace period (1 s) ended and
/// the node dead.
fn release_due(pod: &Pod, dead: Timestamp) -> Result<Timestamp> {
    let deleted = pod.metadata.deletion_timestamp.as_ref().context("not Terminating")?.0;
    Ok(dead.max(deleted + SignedDuration::from_secs(1)))
}

/// The policy's status as stored now (default if none yet).
async fn stored_status(env: &TestEnv) -> Result<RemediationPolicyStatus> {
    Ok(env.policies().get(&env.name).await?.status.unwrap_or_default())
}

fn circuit_state(s: &RemediationPolicyStatus) -> CircuitState {
    s.circuit.as_ref().map_or(CircuitState::Closed, |c| c.state)
}

/// The `CircuitOpen` condition: (status, reason, message).
fn circuit_condition(s: &RemediationPolicyStatus) -> Option<(String, String, String)> {
    let c = s.conditions.iter().find(|c| c.type_ == "CircuitOpen")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn has_policy_event(env: &TestEnv, reason: &str) -> Result<bool> {
    Ok(!env.events_about("RemediationPolicy", &env.name, reason).await?.is_empty())
}

/// Sets (`Some`) or removes (`None`) the policy's re-arm annotation, as an admin would.
async fn set_rearm(env: &TestEnv, value: Option<&str>) -> Result<()> {
    let patch = json!({ "metadata": { "annotations": { REARM: value } } });
    env.policies().patch(&env.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// The operator's own writes of the policy's status (audit log; not the test's dry-run probes):
/// when each was received and the API server's answer (HTTP code).
fn operator_status_writes(cluster: &Cluster, policy: &str) -> Result<Vec<(Timestamp, i64)>> {
    Ok(cluster
        .audit_writes()?
        .into_iter()
        .filter(|e| {
            e.user == OPERATOR_USER
                && e.resource == "remediationpolicies"
                && e.subresource.as_deref() == Some("status")
                && e.name.as_deref() == Some(policy)
                && !e.dry_run
        })
        .filter_map(|e| Some((e.received?, e.code?)))
        .collect())
}

/// An admission policy (CEL in the API server, standing in for a webhook or an admission
/// controller that misbehaves) that refuses the operator's writes of this test's policy's
/// status; every other write passes. Returns its name.
async fn refuse_status_writes(env: &TestEnv) -> Result<String> {
    let name = format!("{}-refuse-status", env.name);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{
                "apiGroups": ["remediator.io"], "apiVersions": ["*"],
                "operations": ["UPDATE"], "resources": ["remediationpolicies/status"],
            }]},
            "validations": [{
                "expression": format!(
                    "!(request.userInfo.username == '{OPERATOR_USER}' && \
                     request.name == '{}')",
                    env.name
                ),
                "message": REFUSED,
            }],
        },
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "policyName": name, "validationActions": ["Deny"] },
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

/// Waits until a dry-run write of the policy's status with the operator's identity is refused
/// by the admission policy (`refused`), or passes (`!refused`): the API server enforces what it
/// was last given.
async fn wait_refusal(cluster: &Cluster, env: &TestEnv, refused: bool) -> Result<()> {
    let api: Api<RemediationPolicy> = Api::all(operator_client(cluster).await?);
    let params = PatchParams { dry_run: true, ..PatchParams::default() };
    let patch = json!({ "status": {} });
    let what = if refused { "refused" } else { "allowed" };
    wait_for(&format!("the operator's status writes {what}"), Duration::from_secs(30), || {
        let (api, params, patch) = (&api, &params, &patch);
        async move {
            let answer = api.patch_status(&env.name, params, &Patch::Merge(patch)).await;
            let is_refused =
                matches!(&answer, Err(kube::Error::Api(e)) if e.message.contains(REFUSED));
            if let Err(e) = &answer
                && !matches!(e, kube::Error::Api(_))
            {
                bail!("the probe failed: {e}");
            }
            Ok((is_refused == refused).then_some(()))
        }
    })
    .await
}

/// Holds until `end` that the operator sent no DELETE of `pod` and it is still there; a
/// violation names the circuit the policy status shows.
async fn never_force_deleted(
    cluster: &Cluster,
    env: &TestEnv,
    pod: &str,
    pod_uid: &str,
    end: Timestamp,
    what: &str,
) -> Result<()> {
    holds_for(what, until(end), || async {
        let deletes = cluster.operator_pod_deletes(&env.namespace, pod)?;
        let p = env.pods().get_opt(pod).await?;
        let gone = p.as_ref().map(uid).as_deref() != Some(pod_uid);
        if deletes.is_empty() && !gone {
            return Ok(());
        }
        let status = stored_status(env).await?;
        let at = deletes.first().and_then(|d| d.received).map(|t| t.to_string());
        bail!(
            "pod {pod} gone: {gone}; the operator's DELETEs of it: {} (first at {at:?}); the \
             policy status shows the circuit {:?} (condition CircuitOpen {:?})",
            deletes.len(),
            status.circuit,
            circuit_condition(&status)
        )
    })
    .await
}

/// A policy with `safety.latch` (no cool-down) over 4 nodes of the test's zone, at most 1 of
/// them unhealthy; its re-arm annotation has the value `before` from the start. The operator's
/// status writes of the policy are refused (admission policy); s1 and s2 die together: the
/// circuit opens (metric, Event), the stored status does not say so. They come back: the
/// operator decides the storm has passed (its metric or its Event says so) while the status is
/// still refused; then the refusal is lifted. The victim dies with a pod stuck Terminating: no
/// DELETE of the pod for 30 s past its due instant, and the status shows the circuit Latched.
/// The annotation is removed: still no DELETE for 20 s, still Latched. It gets a new value: the
/// circuit is re-armed and the pod released at once.
async fn the_latch_survives_a_refused_status_write(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    let s1 = env.add_node("s1").await?;
    let s2 = env.add_node("s2").await?;
    let victim = env.add_node("victim").await?;
    running_pod_on(env, "stuck", &victim).await?;
    env.create_policy(policy_spec(
        env,
        json!({ "maxUnhealthyNodes": 1, "latch": true, "cooldown": "0s" }),
        None,
    ))
    .await?;
    set_rearm(env, Some("before")).await?;
    let mut op = start_operator(cluster, env).await?;
    renewed_since(env, &[&s1, &s2, &victim], Timestamp::now()).await?;
    env.wait_policy("the first status: 4 nodes, circuit closed", ACT_WITHIN, |s| {
        let closed = circuit_condition(s).is_some_and(|(status, ..)| status == "False");
        (s.matched_nodes == 4 && closed && circuit_state(s) == CircuitState::Closed).then_some(())
    })
    .await?;

    let refusal = refuse_status_writes(env).await?;
    let result = refused_then_latched(cluster, env, &mut op, &refusal, [&s1, &s2], &victim).await;
    // Whatever happened, the admission policy goes and no node stays dead.
    let _ = remove_refusal(env, &refusal).await;
    for node in [&s1, &s2, &victim] {
        env.revive_node(node).await?;
    }
    result?;
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    Ok(())
}

async fn refused_then_latched(
    cluster: &Cluster,
    env: &TestEnv,
    op: &mut Operator,
    refusal: &str,
    storm: [&String; 2],
    victim: &str,
) -> Result<()> {
    let circuit_metric = || async {
        let labels = [("policy", env.name.as_str())];
        op.metric("kube_remediator_circuit_open", &labels).await
    };
    wait_refusal(cluster, env, true).await?;
    let refused_from = Timestamp::now();

    // The storm: 2 of the policy's 4 nodes at once, more than its 1.
    tokio::try_join!(env.kill_node(storm[0]), env.kill_node(storm[1]))?;
    tokio::try_join!(wait_unknown(env, storm[0]), wait_unknown(env, storm[1]))?;
    wait_for("the circuit open (metric and CircuitOpen Event)", ACT_WITHIN, || async {
        let open = circuit_metric().await? == Some(1.0);
        Ok((open && has_policy_event(env, "CircuitOpen").await?).then_some(()))
    })
    .await?;
    let refused = wait_for("a refused status write of the operator", ACT_WITHIN, || async {
        let writes = operator_status_writes(cluster, &env.name)?;
        let refused = writes.iter().filter(|(t, code)| *t >= refused_from && *code >= 400).count();
        Ok((refused > 0).then_some(refused))
    })
    .await?;
    let status = stored_status(env).await?;
    ensure!(
        circuit_state(&status) == CircuitState::Closed
            && circuit_condition(&status).is_some_and(|(s, ..)| s == "False"),
        "setup: the stored status shows the circuit although its writes are refused: {:?} {:?}",
        status.circuit,
        circuit_condition(&status)
    );
    eprintln!(
        "[{}] the storm opened the circuit; {refused} status writes refused, the stored status \
         still says Closed",
        env.name
    );

    // The storm passes while the status is still refused.
    for node in storm {
        env.revive_node(node).await?;
    }
    for node in storm {
        env.wait_node_ready(node, "True").await?;
    }
    let seen = wait_for("the operator to decide the storm passed", ACT_WITHIN * 3, || async {
        if has_policy_event(env, "CircuitLatched").await? {
            return Ok(Some("CircuitLatched Event"));
        }
        Ok((circuit_metric().await? == Some(0.0)).then_some("circuit_open metric 0"))
    })
    .await?;
    let status = stored_status(env).await?;
    ensure!(
        circuit_state(&status) == CircuitState::Closed,
        "setup: the stored status shows the circuit {:?} although its writes are refused",
        status.circuit
    );
    remove_refusal(env, refusal).await?;
    wait_refusal(cluster, env, false).await?;
    eprintln!(
        "[{}] the storm passed with the status refused (the operator says so: {seen}); refusal \
         lifted",
        env.name
    );

    // A single node dies, a pod stuck Terminating on it: 1 unhealthy node, within the limit.
    let stranded = kill_and_strand(env, victim, "stuck").await?;
    let pod_uid = uid(&stranded);
    let dead = dead_instant(env, victim).await?;
    let due = release_due(&stranded, dead)?;
    never_force_deleted(cluster, env, "stuck", &pod_uid, due + MARGIN, "the latch to hold").await?;
    let status = env
        .wait_policy("the status to show the circuit Latched", ACT_WITHIN * 3, |s| {
            (circuit_state(s) == CircuitState::Latched).then(|| s.clone())
        })
        .await?;
    let (cond, reason, _) = circuit_condition(&status).context("no CircuitOpen condition")?;
    ensure!(cond == "True" && reason == "Latched", "CircuitOpen {cond} {reason} while Latched");
    ensure!(
        status.unhealthy_nodes == 1,
        "the policy counts {} unhealthy nodes, not the victim alone: the storm guard itself would \
         hold",
        status.unhealthy_nodes
    );
    let token = status.circuit.as_ref().and_then(|c| c.rearm_token.clone());
    ensure!(token.as_deref() == Some("before"), "latched with the re-arm token {token:?}");

    // Removing the annotation is no re-arm.
    set_rearm(env, None).await?;
    let removed = Timestamp::now();
    let end = removed + SignedDuration::try_from(REMOVAL_HOLD)?;
    never_force_deleted(cluster, env, "stuck", &pod_uid, end, "no re-arm by a removal").await?;
    let status = stored_status(env).await?;
    ensure!(
        circuit_state(&status) == CircuitState::Latched,
        "the circuit is no longer latched once the annotation was removed: {:?}",
        status.circuit
    );

    // A new value re-arms: the pod goes at once, by the operator's DELETE.
    let rearmed = Timestamp::now();
    set_rearm(env, Some("after")).await?;
    wait_gone(env, "stuck", &pod_uid, ACT_WITHIN).await?;
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, "stuck").await?;
    let first = deletes.first().and_then(|d| d.received).context("no DELETE by the operator")?;
    ensure!(first >= rearmed - TOLERANCE, "the operator's DELETE at {first}, before the re-arm");
    wait_for("a CircuitRearmed Event", ACT_WITHIN, || async {
        Ok(has_policy_event(env, "CircuitRearmed").await?.then_some(()))
    })
    .await?;
    eprintln!(
        "[{}] latched {}s past the pod's due instant and {}s after the annotation was removed; \
         released {:.2}s after the re-arm",
        env.name,
        MARGIN.as_secs(),
        REMOVAL_HOLD.as_secs(),
        first.duration_since(rearmed).as_secs_f64()
    );
    Ok(())
}

/// A policy over 3 nodes of the test's zone, at most 1 of them unhealthy, deleting a dead Node
/// 5 s after it counts as dead (with fencing: the cloud provider's shutdown taint) and
/// force-deleting pods stuck Terminating on it. A dies and is deleted by the operator (the
/// control). Then B dies, a pod stuck Terminating on it: A (deleted by the operator a minute
/// ago) and B are 2 unhealthy nodes: neither B nor its pod is deleted, nor B written at all, for
/// 30 s past their due instants; the circuit is open for 2 unhealthy nodes.
async fn nodes_we_deleted_still_count_as_unhealthy(cluster: &Cluster, env: &TestEnv) -> Result<()> {
    let a = env.add_node("a").await?;
    let b = env.add_node("b").await?;
    running_pod_on(env, "on-b", &b).await?;
    let delete_after = format!("{DELETE_NODE_AFTER}s");
    env.create_policy(policy_spec(
        env,
        json!({ "maxUnhealthyNodes": 1 }),
        Some(json!({ "deleteNodeAfter": delete_after })),
    ))
    .await?;
    let mut op = start_operator(cluster, env).await?;
    renewed_since(env, &[&a, &b], Timestamp::now()).await?;

    // A dies; the cloud provider sees the machine off; the operator deletes the Node.
    env.kill_node(&a).await?;
    env.add_taint(&a, SHUTDOWN, None, "NoSchedule").await?;
    let dead_a = dead_instant(env, &a).await?;
    let delete_a = dead_a + SignedDuration::from_secs(DELETE_NODE_AFTER);
    wait_for(&format!("node {a} deleted"), until(delete_a) + ACT_WITHIN, || async {
        Ok(env.nodes().get_opt(&a).await?.is_none().then_some(()))
    })
    .await
    .context("the control: the operator deletes a dead, fenced node within its limit")?;
    let deleted_a = cluster
        .operator_node_writes(&a)?
        .into_iter()
        .filter(|w| w.verb == "delete")
        .find_map(|w| w.received)
        .with_context(|| format!("{a} is gone, without a DELETE of the operator"))?;

    // B dies next, its pod stuck Terminating; the cloud provider marks it off too.
    let stranded = kill_and_strand(env, &b, "on-b").await?;
    env.add_taint(&b, SHUTDOWN, None, "NoSchedule").await?;
    let pod_uid = uid(&stranded);
    let dead_b = dead_instant(env, &b).await?;
    let due =
        release_due(&stranded, dead_b)?.max(dead_b + SignedDuration::from_secs(DELETE_NODE_AFTER));
    let held = holds_for("no action on B", until(due + MARGIN), || async {
        let writes = cluster.operator_node_writes(&b)?;
        let deletes = cluster.operator_pod_deletes(&env.namespace, "on-b")?;
        let node_there = env.nodes().get_opt(&b).await?.is_some();
        let p = env.pods().get_opt("on-b").await?;
        let pod_there = p.as_ref().map(uid).as_deref() == Some(pod_uid.as_str());
        if writes.is_empty() && deletes.is_empty() && node_there && pod_there {
            return Ok(());
        }
        let status = stored_status(env).await?;
        let verbs: Vec<String> = writes
            .iter()
            .map(|w| format!("{} at {:?}", w.verb, w.received.map(|t| t.to_string())))
            .collect();
        bail!(
            "the operator wrote to {b}: {verbs:?}; DELETEs of on-b: {}; node there: \
             {node_there}, pod there: {pod_there}; the policy counts {} unhealthy nodes, \
             circuit {:?} (condition CircuitOpen {:?}); {a} was deleted by the operator at \
             {deleted_a}",
            deletes.len(),
            status.unhealthy_nodes,
            status.circuit,
            circuit_condition(&status)
        )
    });
    held.await?;
    // What held: the policy's own storm guard, counting A.
    let status = stored_status(env).await?;
    let (cond, reason, message) = circuit_condition(&status).context("no CircuitOpen condition")?;
    ensure!(
        cond == "True" && reason == "TooManyUnhealthyNodes" && status.unhealthy_nodes == 2,
        "the policy counts {} unhealthy nodes, CircuitOpen {cond} {reason}: {message}",
        status.unhealthy_nodes
    );
    let since_a = Timestamp::now().duration_since(deleted_a);
    ensure!(since_a < SignedDuration::from_mins(10), "{a} was deleted {since_a:#} ago");
    if let Some(status) = op.exited()? {
        bail!("the operator exited ({status}); see {}", op.log.display());
    }
    eprintln!(
        "[{}] {a} deleted by the operator at {deleted_a}; {b} dead {:.0}s later: 2 unhealthy \
         nodes, circuit open, no action on {b} or its pod {}s past their due instants",
        env.name,
        dead_b.duration_since(deleted_a).as_secs_f64(),
        MARGIN.as_secs()
    );
    env.revive_node(&b).await?;
    Ok(())
}
