//! Network faults between the operator and the API server, through a fault proxy of the
//! test's own ([`crate::support::proxy`]): only this test's operator talks through it, so the
//! trials run on the shared control plane beside the others.
//!
//! - `nf-blackhole`: every connection goes silent while a force delete is under way, old ones
//!   for good (half-open), new ones for 15 s. The last look's requests time out
//!   (`--request-timeout`, 10 s) and the action is recorded as failed (metric, status). The
//!   watches opened before the fault are silent forever: the silent Lease view suspends all
//!   evidence until the watcher replaces it, within 60 s (their shared HTTP/2 connection is
//!   closed when a ping goes unanswered, 15 s at most; else the watch timeout of 55 s plus the
//!   watcher's 5 s margin; kube's default of 290 s would hold it five minutes), and a full
//!   evidence window later the force delete is retried and done, once, over connections that
//!   add half a second of latency each way (below the request timeout: slow is not failed).
//!   The pods' watch, on an HTTP/1.1 connection of its own (no pings), is replaced once that
//!   connection has been silent for 90 s: a pod that goes Terminating on a live node after the
//!   fault is counted (`kube_remediator_stuck_terminating_pods`) within 90 s of it plus slack,
//!   where a silent pods' watch would have hidden it for its whole bound (600 s).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use libtest_mimic::Trial;

use crate::e2e;
use crate::faults::{LEASE_STALE_FOR, kill_and_strand, policy_spec, running_pod_on};
use crate::fixtures::{uid, until};
use crate::live_node::{create_held_pod, delete_and_wait_finished, then_release};
use crate::support::operator::Operator;
use crate::support::proxy::{FaultProxy, api_server_addr};
use crate::support::{Cluster, TestEnv, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![e2e!("nf-blackhole", blackholed_connections_time_out_and_are_replaced)]
}

/// How long a silent watch may go unnoticed: `WATCH_TIMEOUT_SECS` (55 s) plus the watcher's
/// own 5 s margin.
const WATCH_STALL_BOUND: i64 = 60;
/// How long the pods' watch connection may be silent before the watch is replaced, in seconds.
const PODS_WATCH_SILENCE: i64 = kube_remediator::cli::PODS_WATCH_SILENCE.as_secs() as i64;
/// How long new connections are blackholed too: longer than the request timeout (10 s), so
/// the last look's requests time out whichever connections they use.
const FULL_BLACKHOLE: Duration = Duration::from_secs(15);

/// Fails unless the operator sent exactly one DELETE of `pod` that reached the API server.
async fn one_delete(cluster: &Cluster, env: &TestEnv, pod: &str) -> Result<()> {
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, pod).await?;
    ensure!(deletes.len() == 1, "expected one DELETE of {pod}, got {deletes:?}");
    Ok(())
}

/// The operator runs without leader election here (a single replica): its leader Lease renewals
/// would go through the proxy too, and a leader that cannot renew within 10 s pauses its writes
/// until a renewal is stored, which `le-stall-pause` tests. This test is about the writer's
/// requests and the watches.
async fn blackholed_connections_time_out_and_are_replaced(env: &TestEnv) -> Result<()> {
    // A pod kept by a finalizer, on a live node: released whatever the outcome.
    let live = env.add_node("live").await?;
    create_held_pod(env, "held", &live).await?;
    then_release(env, "held", blackholed_and_replaced(env)).await
}

async fn blackholed_and_replaced(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let proxy = FaultProxy::start(api_server_addr(&cluster.operator_kubeconfig)?).await?;
    let kubeconfig = cluster.dir.join(format!("proxy-{}.kubeconfig", env.name));
    proxy.kubeconfig(&cluster.operator_kubeconfig, &kubeconfig)?;
    let first = env.add_node("first").await?;
    running_pod_on(env, "early", &first).await?;
    env.create_policy(policy_spec(env)).await?;
    let hold_dir = cluster.dir.join(format!("hold-{}", env.name));
    std::fs::create_dir_all(&hold_dir)?;
    let hold = hold_dir.to_str().context("hold directory path is not UTF-8")?;
    let extra = ["--e2e-hold-dir", hold, "--leader-elect=false"];
    let op = Operator::start_through(cluster, env, &kubeconfig, &extra).await?;

    // The first node dies; the operator decides to release its pod and is held right before
    // its last look.
    let early_uid = uid(&kill_and_strand(env, &first, "early").await?);
    let held = hold_dir.join(format!("{early_uid}.held"));
    let timeout = Duration::from_secs(LEASE_STALE_FOR as u64 + 50);
    wait_for("the operator to hold before its last look", timeout, || async {
        Ok(held.exists().then_some(()))
    })
    .await?;

    // Every connection goes silent: the open ones for good, new ones for FULL_BLACKHOLE.
    // HTTP/2: each of the operator's clients (watches and reads, writes) shares one connection
    // for all its requests (on HTTP/1.1 each open watch held one of its own); the pods' watch
    // has one of its own, on HTTP/1.1.
    let opened_before = proxy.connections();
    ensure!(opened_before <= 4, "{opened_before} connections open: not one per client");
    proxy.blackhole(true);
    let blackholed = Timestamp::now();
    release(&hold_dir, &early_uid)?;
    // The last look's reads time out after 10 s; 20 s leaves room for a loaded machine.
    let failed = wait_for("the force delete to fail (metric)", Duration::from_secs(20), || async {
        let labels = [("policy", env.name.as_str()), ("result", "Failed")];
        Ok(op.metric("kube_remediator_actions_total", &labels).await?.filter(|n| *n >= 1.0))
    })
    .await?;
    let failed_after = Timestamp::now().duration_since(blackholed).as_secs_f64();
    tokio::time::sleep(until(blackholed + SignedDuration::try_from(FULL_BLACKHOLE)?)).await;
    // New connections pass again, on a slow network (half a second each way per chunk).
    proxy.set_latency(Duration::from_millis(500));
    proxy.heal();
    let healed = Timestamp::now();
    // A pod goes Terminating on the live node: only the pods' watch can tell the operator.
    delete_and_wait_finished(env, "held").await?;

    // The Lease watch opened before the blackhole never delivers again, so no evidence is
    // trusted (the Lease view is silent) until the watcher replaces it; the evidence window
    // restarts then, and the node is dead for the operator a full window later. Then the
    // force delete is retried on fresh connections, and done once.
    // 30 s of slack for the slow network and a loaded machine: kube's default watch timeout
    // would take 295 s before the window could even start.
    let bound = blackholed + SignedDuration::from_secs(WATCH_STALL_BOUND + LEASE_STALE_FOR + 30);
    wait_gone(env, "early", &early_uid, until(bound)).await?;
    let gone = Timestamp::now();
    one_delete(cluster, env, "early").await?;
    let records = env
        .wait_policy("a Done record of early", Duration::from_secs(30), |s| {
            let done = s.recent_actions.iter().filter(|a| a.uid == early_uid);
            let results: Vec<&str> = done.map(|a| a.result.as_str()).collect();
            results.contains(&"Done").then_some(results)
        })
        .await?;
    ensure!(
        records.iter().filter(|r| **r == "Done").count() == 1 && records.contains(&"Failed"),
        "records of early: {records:?}"
    );
    // The pods' watch was replaced once its connection had been silent for its bound; 60 s of
    // slack for the reconnection over the slow network and a loaded machine (a silent pods'
    // watch would take its 600 s bound).
    let stuck_bound = blackholed + SignedDuration::from_secs(PODS_WATCH_SILENCE + 60);
    let labels = [("policy", env.name.as_str()), ("node_state", "Healthy")];
    wait_for("the held pod counted stuck on its live node", until(stuck_bound), || async {
        Ok(op
            .metric("kube_remediator_stuck_terminating_pods", &labels)
            .await?
            .filter(|n| *n >= 1.0))
    })
    .await?;
    let counted = Timestamp::now();
    eprintln!(
        "[nf-blackhole] {opened_before} connections open before the blackhole; the force delete \
         failed (request timeout; actions_total Failed = {failed}) {failed_after:.1}s after it; \
         done {:.1}s after it (bound {}s: watch replaced within {WATCH_STALL_BOUND}s, then a \
         {LEASE_STALE_FOR}s evidence window), {:.1}s after new connections passed again (500 ms \
         latency); one DELETE, records {records:?}; the pod Terminating on the live node \
         counted {:.1}s after the blackhole (bound {}s: the pods' watch replaced after \
         {PODS_WATCH_SILENCE}s of silence)",
        gone.duration_since(blackholed).as_secs_f64(),
        bound.duration_since(blackholed).as_secs(),
        gone.duration_since(healed).as_secs_f64(),
        counted.duration_since(blackholed).as_secs_f64(),
        stuck_bound.duration_since(blackholed).as_secs(),
    );
    Ok(())
}

async fn wait_gone(env: &TestEnv, name: &str, pod_uid: &str, timeout: Duration) -> Result<()> {
    wait_for(&format!("pod {name} to be gone"), timeout, || async move {
        let p = env.pods().get_opt(name).await?;
        Ok((p.as_ref().map(uid).as_deref() != Some(pod_uid)).then_some(()))
    })
    .await
}

/// Lets the operator held on the pod `uid` go on to its last look.
fn release(hold_dir: &Path, uid: &str) -> Result<()> {
    std::fs::write(hold_dir.join(format!("{uid}.release")), b"")
        .with_context(|| format!("releasing the hold of {uid}"))
}
