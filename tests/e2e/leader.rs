//! Leader election: several operator processes serving the same policies share one Lease (the
//! test's own, in its namespace). Exactly one acts; the others are ready and act only once
//! they hold the Lease. A killed leader is replaced within the lease duration, without a pod
//! deleted twice or not at all; a leader stopped with SIGTERM hands the Lease over at once; a
//! leader that loses the Lease exits with a failure; a leader whose API server answers slowly
//! (3 s a request, through a fault proxy) keeps the Lease; one whose API server goes silent past
//! the renew deadline pauses, and resumes its term when it answers again, unless a follower took
//! the Lease over meanwhile: then it exits.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::fixtures::deployment;
use crate::support::env::HOSTNAME_LABEL;
use crate::support::operator::{Operator, http_get};
use crate::support::pki::OPERATOR_USER;
use crate::support::proxy::{FaultProxy, api_server_addr};
use crate::support::{TestEnv, holds_for, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        e2e!("le-one-leader", one_replica_leads_the_other_stands_by_ready),
        e2e!("le-failover", a_killed_leader_is_replaced_and_every_pod_deleted_once),
        e2e!("le-sigterm-handover", sigterm_hands_the_lease_over_at_once),
        e2e!("le-lost-exits", a_leader_that_loses_the_lease_exits_with_a_failure),
        e2e!("le-slow-api", a_leader_keeps_the_lease_on_an_api_server_slow_to_answer),
        e2e!("le-stall-pause", a_leader_paused_by_a_silent_api_server_resumes_its_term),
        e2e!("le-pause-taken", a_paused_leader_whose_lease_was_taken_over_exits),
    ]
}

/// `run`'s default `--lease-duration`.
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// The leader gauge of a replica: `Some(true)` while it leads.
async fn leads(op: &Operator) -> Result<bool> {
    let value = op.metric("kube_remediator_leader", &[]).await?;
    Ok(value.context("no kube_remediator_leader gauge")? == 1.0)
}

/// Waits until `op` leads; returns how long that took.
async fn wait_leads(op: &Operator, timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    wait_for("the replica to lead", timeout, || async { Ok(leads(op).await?.then_some(())) })
        .await
        .with_context(|| format!("see {}", op.log.display()))?;
    Ok(started.elapsed())
}

async fn ready(op: &Operator) -> Result<bool> {
    Ok(http_get(op.metrics_addr, "/readyz").await?.0 == 200)
}

/// The test's leader Lease.
async fn lease(env: &TestEnv) -> Result<Lease> {
    Ok(Api::<Lease>::namespaced(env.client.clone(), &env.namespace).get(&env.name).await?)
}

async fn holder(env: &TestEnv) -> Result<String> {
    Ok(lease(env).await?.spec.and_then(|s| s.holder_identity).unwrap_or_default())
}

/// Starts replicas `a` then `b` of the test's operator: `a` finds the Lease free and leads, `b`
/// follows. Checks that, and that both are ready.
async fn leader_and_follower(env: &TestEnv) -> Result<(Operator, Operator)> {
    let cluster = shared_cluster().await?;
    let a = Operator::start_replica(cluster, env, "a", &[]).await?;
    ensure!(leads(&a).await?, "the first replica does not lead; see {}", a.log.display());
    let b = Operator::start_replica(cluster, env, "b", &[]).await?;
    ensure!(!leads(&b).await?, "the second replica leads too; see {}", b.log.display());
    ensure!(ready(&a).await? && ready(&b).await?, "both replicas must be ready");
    let holder = holder(env).await?;
    ensure!(holder.starts_with(&format!("e2e-{}-a-", env.name)), "the Lease is held by {holder}");
    Ok((a, b))
}

async fn one_replica_leads_the_other_stands_by_ready(env: &TestEnv) -> Result<()> {
    // The API server cannot check selector operators, the operator can: an invalid policy gets
    // an Event and a status from whoever acts.
    let bad = format!("{}-bad", env.name);
    env.create_named_policy(
        &bad,
        json!({ "podSelector": { "matchExpressions": [{ "key": "app", "operator": "Foo" }] } }),
    )
    .await?;
    env.create_policy(json!({ "mode": "DryRun" })).await?;
    let (a, b) = leader_and_follower(env).await?;

    env.wait_policy("the leader to write the policy's status", Duration::from_secs(20), |s| {
        s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await?;
    // For a while: still one leader, both ready, and the follower reconciles nothing.
    holds_for("one leader, one ready follower", Duration::from_secs(4), || async {
        ensure!(leads(&a).await? && !leads(&b).await?, "the leadership moved");
        ensure!(ready(&a).await? && ready(&b).await?, "a replica is not ready");
        let text = b.metrics().await?;
        ensure!(
            !text.contains("kube_remediator_policy_invalid{"),
            "the follower reconciled policies:\n{text}"
        );
        Ok(())
    })
    .await?;
    let invalid = a.metric("kube_remediator_policy_invalid", &[("policy", &bad)]).await?;
    ensure!(invalid == Some(1.0), "the leader's policy_invalid{{{bad}}} = {invalid:?}");

    // One InvalidSpec Event, published by the leader.
    let reporters: Vec<String> = env
        .events_about("RemediationPolicy", &bad, "InvalidSpec")
        .await?
        .into_iter()
        .map(|e| e.reporting_instance.unwrap_or_default())
        .collect();
    ensure!(
        reporters == [format!("e2e-{}-a", env.name)],
        "InvalidSpec Events reported by {reporters:?}, expected the leader's one"
    );
    Ok(())
}

const NOT_READY_FOR: i64 = 10;
const LEASE_STALE_FOR: i64 = 40;
const PODS: usize = 3;

async fn a_killed_leader_is_replaced_and_every_pod_deleted_once(env: &TestEnv) -> Result<()> {
    let victim = env.add_node("victim").await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "stuckTerminating": { "delayAfterGrace": "5s" },
        "safety": { "maxUnhealthyNodes": 2, "rateLimit": { "actionsPerMinute": 60 } },
    }))
    .await?;
    let (mut a, b) = leader_and_follower(env).await?;
    let d = deployment("api", PODS as i32, "Recreate", json!({ HOSTNAME_LABEL: victim }))?;
    env.api::<Deployment>().create(&PostParams::default(), &d).await?;
    let pods: BTreeMap<String, String> = env
        .wait_pods_ready("app=api", PODS)
        .await?
        .into_iter()
        .map(|p| (name(&p), p.metadata.uid.unwrap_or_default()))
        .collect();

    // The node dies; once its pods are Terminating, the leader dies too (SIGKILL: no release),
    // before any pod is due.
    env.kill_node(&victim).await?;
    wait_for("the pods to be Terminating", Duration::from_secs(60), || async {
        let terminating = env
            .list_pods("app=api")
            .await?
            .iter()
            .filter(|p| pods.get(&name(p)).is_some_and(|uid| p.metadata.uid.as_ref() == Some(uid)))
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count();
        Ok((terminating == PODS).then_some(()))
    })
    .await?;
    let node_lease =
        Api::<Lease>::namespaced(env.client.clone(), "kube-node-lease").get(&victim).await?;
    let renewed = node_lease.spec.and_then(|s| s.renew_time).context("no renewTime")?.0;
    // The pods are due no earlier than this (the node's Lease must be stale first).
    let earliest_due = renewed + SignedDuration::from_secs(LEASE_STALE_FOR);
    let last_renewal = lease(env).await?.spec.and_then(|s| s.renew_time).context("renewTime")?.0;
    a.kill();
    let killed = Timestamp::now();
    ensure!(
        killed < earliest_due,
        "the leader was killed after the pods were due ({earliest_due})"
    );

    // The follower takes over within the lease duration of the last renewal it saw.
    let took = wait_leads(&b, LEASE_DURATION + Duration::from_secs(5)).await?;
    let since_renewal = Timestamp::now().duration_since(last_renewal);
    eprintln!(
        "[le-failover] the follower leads {:.1}s after the leader was killed, {:.1}s after its \
         last renewal; the pods are due {:.1}s after the kill",
        took.as_secs_f64(),
        since_renewal.as_secs_f64(),
        earliest_due.duration_since(killed).as_secs_f64()
    );
    // A follower sees a renewal within its read period (1 s), and takes over the Lease once it
    // has not changed for the lease duration since; plus the requests' latency.
    ensure!(
        since_renewal <= SignedDuration::try_from(LEASE_DURATION + Duration::from_secs(3))?,
        "takeover {since_renewal:?} after the last renewal, lease duration {LEASE_DURATION:?}"
    );
    ensure!(holder(env).await?.starts_with(&format!("e2e-{}-b-", env.name)), "b is not the holder");

    // Every pod is force-deleted by the new leader, exactly once.
    let timeout = Duration::try_from(earliest_due.duration_since(Timestamp::now()))
        .unwrap_or_default()
        + Duration::from_secs(30);
    wait_for("every pod to be force-deleted", timeout, || async {
        let left = env.list_pods("app=api").await?;
        let old = left.iter().filter(|p| pods.get(&name(p)) == p.metadata.uid.as_ref()).count();
        Ok((old == 0).then_some(()))
    })
    .await
    .with_context(|| format!("see {}", b.log.display()))?;
    // The writes of both processes (the same user): the DELETEs of this test's pods, each after
    // the pod's DisruptionTarget.
    let cluster = shared_cluster().await?;
    let mut deletes: BTreeMap<String, usize> = BTreeMap::new();
    for w in cluster.audit_writes()? {
        if w.user == OPERATOR_USER
            && w.resource == "pods"
            && w.namespace.as_deref() == Some(env.namespace.as_str())
        {
            let status = w.verb == "patch" && w.subresource.as_deref() == Some("status");
            ensure!(
                w.verb == "delete" || status,
                "the operator wrote a pod otherwise than saying why it goes and deleting it: {w:?}"
            );
            if !status {
                *deletes.entry(w.name.unwrap_or_default()).or_default() += 1;
            }
        }
    }
    let want: BTreeMap<String, usize> = pods.keys().map(|p| (p.clone(), 1)).collect();
    ensure!(deletes == want, "DELETEs per pod {deletes:?}, expected one each of {want:?}");
    let done = b
        .metric(
            "kube_remediator_actions_total",
            &[("policy", &env.name), ("mode", "Enforce"), ("result", "Done")],
        )
        .await?;
    ensure!(done == Some(PODS as f64), "the new leader's actions_total{{Done}} = {done:?}");
    Ok(())
}

async fn sigterm_hands_the_lease_over_at_once(env: &TestEnv) -> Result<()> {
    env.create_policy(json!({ "mode": "DryRun" })).await?;
    let (mut a, b) = leader_and_follower(env).await?;
    let transitions = lease(env).await?.spec.and_then(|s| s.lease_transitions).unwrap_or(0);

    let sent = Instant::now();
    let status = a.terminate(Duration::from_secs(10))?;
    let exited = sent.elapsed();
    ensure!(status.success(), "the leader exited with {status} on SIGTERM");
    let log = std::fs::read_to_string(&a.log)?;
    ensure!(log.contains("released the Lease"), "no release in {}", a.log.display());

    wait_leads(&b, LEASE_DURATION).await?;
    let took = sent.elapsed();
    eprintln!(
        "[le-sigterm-handover] the leader exited {:.2}s after SIGTERM; the follower led {:.2}s \
         after it (lease duration {LEASE_DURATION:?})",
        exited.as_secs_f64(),
        took.as_secs_f64()
    );
    ensure!(
        took < Duration::from_secs(3),
        "the follower took {took:?} to lead: the Lease was not released"
    );
    let spec = lease(env).await?.spec.unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    ensure!(holder.starts_with(&format!("e2e-{}-b-", env.name)), "the Lease is held by {holder}");
    ensure!(spec.lease_transitions == Some(transitions + 1), "leaseTransitions {spec:?}");
    // And the new leader acts: it reconciles the policy.
    let labels = [("policy", env.name.as_str())];
    wait_for("the new leader to reconcile the policy", Duration::from_secs(10), || {
        b.metric("kube_remediator_policy_invalid", &labels)
    })
    .await?;
    Ok(())
}

async fn a_leader_that_loses_the_lease_exits_with_a_failure(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    env.create_policy(json!({ "mode": "DryRun" })).await?;
    let mut a = Operator::start_replica(cluster, env, "a", &[]).await?;
    ensure!(leads(&a).await?, "the replica does not lead");

    // Someone else takes the Lease (the update a competing candidate would make).
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut taken = leases.get(&env.name).await?;
    if let Some(spec) = taken.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
    }
    leases.replace(&env.name, &PostParams::default(), &taken).await?;
    let stolen = Instant::now();

    // The leader notices at its next renewal (its update refused with a Conflict, every fifth
    // of the renew deadline) and exits.
    let status =
        wait_for("the leader to exit", LEASE_DURATION / 3 + Duration::from_secs(5), || {
            let exited = a.exited();
            async move { exited }
        })
        .await?;
    eprintln!(
        "[le-lost-exits] the leader exited {:.1}s after losing the Lease, with {status}",
        stolen.elapsed().as_secs_f64()
    );
    ensure!(!status.success(), "a leader that lost the Lease exited with {status}");
    let log = std::fs::read_to_string(&a.log)?;
    ensure!(log.contains("lost the leader"), "no word of the loss in {}", a.log.display());
    ensure!(holder(env).await? == "intruder", "the lost leader wrote the Lease again");
    Ok(())
}

/// A DryRun policy and one replica reaching the API server through a fault proxy, leading;
/// the Lease's spec then.
async fn leader_through_a_proxy(env: &TestEnv) -> Result<(FaultProxy, Operator, LeaseSpec)> {
    let cluster = shared_cluster().await?;
    env.create_policy(json!({ "mode": "DryRun" })).await?;
    let proxy = FaultProxy::start(api_server_addr(&cluster.operator_kubeconfig)?).await?;
    let kubeconfig = cluster.dir.join(format!("proxy-{}.kubeconfig", env.name));
    proxy.kubeconfig(&cluster.operator_kubeconfig, &kubeconfig)?;
    let op = Operator::start_through(cluster, env, &kubeconfig, &[]).await?;
    ensure!(leads(&op).await?, "the replica does not lead; see {}", op.log.display());
    let before = lease(env).await?.spec.unwrap_or_default();
    Ok((proxy, op, before))
}

/// The operator reaches the API server through a fault proxy that, once it leads, delays every
/// chunk by 1.5 s each way: 3 s a request, a lasting slowness that a renewal made of a read and
/// an update, sent a third of the lease duration after the last was answered, cannot survive
/// (3 + 5 + 3 + 3 s from one renewal's sending to the next one's answer, past the 10 s deadline).
/// The leader renews with one update every 2 s (each answered 3 s after it was sent) and keeps
/// the Lease for three lease durations: still the holder, never a transition, and renewed.
async fn a_leader_keeps_the_lease_on_an_api_server_slow_to_answer(env: &TestEnv) -> Result<()> {
    let (proxy, mut op, before) = leader_through_a_proxy(env).await?;
    let holder_before = before.holder_identity.clone().unwrap_or_default();

    proxy.set_latency(Duration::from_millis(1_500));
    let slowed = Timestamp::now();
    let hold = LEASE_DURATION * 3;
    // A process that exited fails the check too: its metrics endpoint is gone.
    holds_for("the leader to keep the Lease on a slow API server", hold, || async {
        ensure!(leads(&op).await?, "the replica no longer leads; see {}", op.log.display());
        Ok(())
    })
    .await?;
    ensure!(op.exited()?.is_none(), "the leader exited; see {}", op.log.display());
    let after = lease(env).await?.spec.unwrap_or_default();
    let holder_after = after.holder_identity.clone().unwrap_or_default();
    ensure!(
        holder_after == holder_before,
        "the Lease moved from {holder_before} to {holder_after}"
    );
    ensure!(
        after.lease_transitions == before.lease_transitions,
        "the Lease changed hands: transitions {:?} then {:?}",
        before.lease_transitions,
        after.lease_transitions
    );
    let renewed = after.renew_time.map(|t| t.0).context("no renewTime")?;
    // Renewed within the last deadline and a request (13 s), by the leader's own clock, which
    // is this machine's.
    let age = Timestamp::now().duration_since(renewed);
    ensure!(
        renewed > slowed && age < SignedDuration::from_secs(13),
        "the Lease was last renewed at {renewed}, {age:#} ago, slowed at {slowed}"
    );
    let log = std::fs::read_to_string(&op.log)?;
    ensure!(
        !log.contains("lost the leader"),
        "the leader lost the Lease; see {}",
        op.log.display()
    );
    eprintln!(
        "[le-slow-api] kept the Lease for {}s of 3 s requests; last renewed {age:#} before the end",
        hold.as_secs()
    );
    Ok(())
}

/// How long the API server stays silent for the leader in `le-stall-pause`: past the renew
/// deadline (10 s) and the lease duration (15 s).
const SILENCE: Duration = Duration::from_secs(20);

/// The leader reaches the API server through a fault proxy that goes silent for [`SILENCE`]
/// (every open connection blackholed, new ones too until the end): no renewal is stored, and
/// the leader pauses when its renew deadline passes (the leader gauge 0, a pause counted), its
/// process still up. When new connections pass again, its next renewal is stored with the
/// version its last one left (nobody wrote the Lease), and the term resumes: the same holder
/// and transitions, the gauge at 1, and it writes again (a policy created afterwards gets its
/// status). One replica: the test is about the leader alone (a rival's takeover in a pause is
/// proven on a mock Lease API, `src/leader/tests.rs`).
async fn a_leader_paused_by_a_silent_api_server_resumes_its_term(env: &TestEnv) -> Result<()> {
    let (proxy, mut op, before) = leader_through_a_proxy(env).await?;

    proxy.blackhole(true);
    let silenced = Instant::now();
    // Paused at the renew deadline, 10 s at most after its last renewal was sent; 5 s more for
    // a loaded machine.
    wait_for("the leader to pause", LEASE_DURATION, || async {
        Ok((!leads(&op).await?).then_some(()))
    })
    .await
    .with_context(|| format!("see {}", op.log.display()))?;
    let paused_after = silenced.elapsed();
    let pauses = op.metric("kube_remediator_leader_pauses_total", &[]).await?;
    ensure!(pauses == Some(1.0), "pauses counted: {pauses:?}");
    tokio::time::sleep(SILENCE.saturating_sub(silenced.elapsed())).await;
    ensure!(op.exited()?.is_none(), "the paused leader exited; see {}", op.log.display());
    ensure!(!leads(&op).await?, "acting in the silence; see {}", op.log.display());

    proxy.heal();
    let healed = Instant::now();
    // Its connections blackholed before are given up within 10 s of unanswered pings, and a
    // paused renewal times out after 10 s: resumed within 30 s of the heal; 30 s more for a
    // loaded machine.
    wait_leads(&op, Duration::from_secs(60)).await?;
    let resumed_after = healed.elapsed();
    ensure!(op.exited()?.is_none(), "the leader exited; see {}", op.log.display());
    let after = lease(env).await?.spec.unwrap_or_default();
    ensure!(
        after.holder_identity == before.holder_identity
            && after.lease_transitions == before.lease_transitions,
        "another term: {before:?} then {after:?}"
    );
    let log = std::fs::read_to_string(&op.log)?;
    ensure!(log.contains("resumed"), "no word of the resume in {}", op.log.display());
    ensure!(
        !log.contains("lost the leader"),
        "the leader lost the Lease; see {}",
        op.log.display()
    );

    // It writes again: a policy created now gets its status.
    let second = format!("{}-after", env.name);
    env.create_named_policy(&second, json!({ "mode": "DryRun" })).await?;
    env.wait_named_policy(&second, "the second policy's status", Duration::from_secs(30), |s| {
        s.observed_generation
    })
    .await?;
    eprintln!(
        "[le-stall-pause] paused {:.1}s into the silence, resumed {:.1}s after it ended",
        paused_after.as_secs_f64(),
        resumed_after.as_secs_f64()
    );
    Ok(())
}

/// The leader reaches the API server through a fault proxy that goes silent; a follower that
/// reaches it directly takes the Lease over once it has not changed for its duration. When the
/// silence ends, the paused leader's renewal is refused (the Lease changed since its last one)
/// and its read names the follower: it exits with a failure, and the Lease stays the
/// follower's (the leader never takes a Lease back).
async fn a_paused_leader_whose_lease_was_taken_over_exits(env: &TestEnv) -> Result<()> {
    let (proxy, mut a, before) = leader_through_a_proxy(env).await?;
    let b = Operator::start_replica(shared_cluster().await?, env, "b", &[]).await?;
    ensure!(!leads(&b).await?, "the second replica leads too; see {}", b.log.display());

    proxy.blackhole(true);
    let silenced = Instant::now();
    // The follower leads within the lease duration and a second of the leader's last renewal;
    // 10 s more for a loaded machine.
    wait_leads(&b, LEASE_DURATION + Duration::from_secs(10)).await?;
    let took_after = silenced.elapsed();
    let taken = lease(env).await?.spec.unwrap_or_default();
    let new_holder = taken.holder_identity.clone().unwrap_or_default();
    ensure!(new_holder.starts_with(&format!("e2e-{}-b-", env.name)), "held by {new_holder}");
    ensure!(!leads(&a).await?, "both replicas lead; see {}", a.log.display());
    let pauses = a.metric("kube_remediator_leader_pauses_total", &[]).await?;
    ensure!(pauses == Some(1.0), "the old leader's pauses: {pauses:?}");

    proxy.heal();
    let healed = Instant::now();
    // Its blackholed connections are given up within 10 s of unanswered pings and a paused
    // renewal times out after 10 s: it learns within 30 s of the heal; 30 s more for a loaded
    // machine.
    let status = wait_for("the paused leader to exit", Duration::from_secs(60), || {
        let exited = a.exited();
        async move { exited }
    })
    .await?;
    let exited_after = healed.elapsed();
    ensure!(!status.success(), "the paused leader exited with {status}");
    let log = std::fs::read_to_string(&a.log)?;
    ensure!(log.contains("lost the leader"), "no word of the loss in {}", a.log.display());
    let after = lease(env).await?.spec.unwrap_or_default();
    ensure!(
        after.holder_identity == taken.holder_identity
            && after.lease_transitions == before.lease_transitions.map(|t| t + 1),
        "the Lease changed again: {before:?}, then {taken:?}, then {after:?}"
    );
    ensure!(leads(&b).await?, "the new leader no longer leads; see {}", b.log.display());
    eprintln!(
        "[le-pause-taken] the follower led {:.1}s into the silence; the old leader exited {:.1}s \
         after it ended",
        took_after.as_secs_f64(),
        exited_after.as_secs_f64()
    );
    Ok(())
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}
