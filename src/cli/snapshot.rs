//! One read-only look at the cluster for the one-shot commands (`plan`, `explain`): every
//! policy and every watched kind listed once, the kubelet Leases watched for a short while
//! (`--observe`), and each policy's plan made by the same planner as the operator's.
//!
//! What a one-shot listing cannot know: the running operator times every piece of evidence by
//! its own clock, from when it saw it change. A snapshot sees a Lease change only during
//! `--observe` (longer than a kubelet's 10 s renewal period by default, so a live kubelet shows
//! itself); evidence older than that it can only date by the timestamps in the objects, written
//! by the nodes' own clocks. [`Snapshot::note`] says so.

use std::sync::Arc;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};

use super::StormArgs;
use crate::adapters::{NODE_LEASE_NAMESPACE, rearm_token};
use crate::core::stamp::Stamp;
use crate::core::{
    Acting, Observed, Past, Plan, PolicyHistory, StormInput, circuit_memory, plan, validate,
};
use crate::crd::{Mode, RemediationPolicy};
use crate::index::kinds::WATCHED;
use crate::index::state::{ClusterState, WatchedKind};
use crate::{Error, Result};

/// One policy's result.
pub struct PolicyPlan {
    pub policy: RemediationPolicy,
    /// The plan, or why the spec is invalid.
    pub outcome: std::result::Result<Plan, String>,
}

/// The cluster as seen once, and every policy's plan at `now`.
pub struct Snapshot {
    pub plans: Vec<PolicyPlan>,
    pub state: ClusterState,
    /// The planner's input, before any policy's history is added.
    pub observed: Observed,
    pub now: Timestamp,
    /// What the look could and could not see, said plainly.
    pub note: String,
}

/// Lists the policies (those matching `policy_selector`) and every watched kind, watches the
/// Leases for `observe`, and plans every policy.
pub async fn take(
    client: &kube::Client,
    policy_selector: Option<&str>,
    observe: SignedDuration,
    storm: StormArgs,
) -> Result<Snapshot> {
    let mut lp = ListParams::default();
    if let Some(selector) = policy_selector {
        lp = lp.labels(selector);
    }
    let policies = match Api::<RemediationPolicy>::all(client.clone()).list(&lp).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::CrdMissing),
        Err(source) => return Err(Error::List { kind: "remediationpolicies", source }),
    };

    let now = crate::clock::now();
    let mut state = ClusterState::new();
    let mut lease_version = String::new();
    for kind in WATCHED {
        let resource = kind.kind().as_str();
        let version = kind
            .load(client.clone(), &mut state, now)
            .await
            .map_err(|source| Error::List { kind: resource, source })?;
        if kind.kind() == WatchedKind::Lease {
            lease_version = version;
        }
    }
    let leases = Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let listed_at = now;
    observe_renewals(&mut state, &leases, &lease_version, observe).await?;
    let now = crate::clock::now();
    let observed = one_shot_observed(&state, listed_at, now);

    let live_policies: std::collections::BTreeSet<String> =
        policies.iter().map(|p| p.name_any()).collect();
    let mut plans = Vec::new();
    for policy in policies {
        let outcome = validate(&policy.spec).map_err(|e| e.reason).map(|validated| {
            // The same history the operator starts from: the policy's recorded actions. In
            // DryRun a pod already recorded is still shown as what the policy would do: the
            // audit reader wants every would-be action, not only the ones not reported yet.
            let Past { recent: recent_actions, acted: mut acted_pods, .. } =
                PolicyHistory::default().past(validated.mode, policy.status.as_ref(), now);
            if validated.mode == Mode::DryRun {
                acted_pods.clear();
            }
            let storm = StormInput {
                cluster_limit: Some(storm.max_unhealthy_nodes_in_cluster),
                previous: circuit_memory(policy.status.as_ref()),
                rearm_token: rearm_token(&policy),
            };
            let acting =
                Acting { policy: policy.name_any(), live_policies: Some(live_policies.clone()) };
            let observed =
                Observed { recent_actions, acted_pods, storm, acting, ..observed.clone() };
            plan(&observed, &validated, now)
        });
        plans.push(PolicyPlan { policy, outcome });
    }
    Ok(Snapshot { plans, state, observed, now, note: evidence_note(observe) })
}

fn renew_time(lease: &Lease) -> Option<Timestamp> {
    lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0)
}

/// Watches the Leases from the listed version for `observe`: each renewal arriving is seen,
/// by our clock, when it arrives.
async fn observe_renewals(
    state: &mut ClusterState,
    leases: &Api<Lease>,
    version: &str,
    observe: SignedDuration,
) -> Result<()> {
    let Ok(observe) = std::time::Duration::try_from(observe) else { return Ok(()) };
    if observe.is_zero() {
        return Ok(());
    }
    let watch_error = |source| Error::List { kind: "leases", source };
    let params =
        WatchParams::default().timeout(u32::try_from(observe.as_secs() + 1).unwrap_or(300));
    let stream = leases.watch(&params, version).await.map_err(watch_error)?;
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + observe;
    while let Ok(next) = tokio::time::timeout_at(deadline, stream.next()).await {
        match next {
            Some(Ok(WatchEvent::Added(l) | WatchEvent::Modified(l))) => {
                let declared = crate::adapters::lease_duration_s(&l);
                state.apply_lease_declaring(
                    &l.name_any(),
                    renew_time(&l),
                    declared,
                    crate::clock::now(),
                );
            }
            Some(Ok(_)) => {}
            // An expired version or a broken stream: plan with what was seen so far.
            Some(Err(_)) | None => break,
        }
    }
    Ok(())
}

/// The planner's input for a one-shot run. Evidence seen changing during the observation is
/// timed by our clock; older evidence can only be dated by the timestamps in the objects (the
/// nodes' and the node controller's clocks), never later than the listing.
fn one_shot_observed(state: &ClusterState, listed_at: Timestamp, now: Timestamp) -> Observed {
    let mut observed = state.observe(now, Vec::new(), Default::default());
    for node in &mut observed.nodes {
        let node = std::sync::Arc::make_mut(node);
        let obs = &mut node.observation;
        if obs.lease_seen.get().is_some_and(|seen| seen <= listed_at) {
            obs.lease_seen = obs.lease_renewed.get().map(|t| t.min(listed_at)).into();
            obs.seen_from_stamps = true;
        }
        if obs.not_ready_seen.get().is_some_and(|seen| seen <= listed_at)
            && let Some(transition) = obs.ready_transition.get()
        {
            obs.not_ready_seen = Some(transition.min(listed_at)).into();
            obs.not_ready_from_stamp = true;
        }
        let lifecycle = &node.control.rare.lifecycle;
        if lifecycle.shutdown_seen.is_some_and(|seen| seen <= listed_at)
            && let Some(transition) = lifecycle.shutdown_transition
        {
            node.control.rare.update(|r| {
                r.lifecycle.shutdown_seen = Some(transition.min(listed_at));
                r.lifecycle.shutdown_from_stamp = true;
            });
        }
    }
    // A pod Terminating since before the listing is dated by its deletionTimestamp less its
    // grace period (the API server's clock), as the listing cannot say when it started.
    for pod in &mut observed.pods {
        if pod.terminating_seen.get().is_some_and(|seen| seen <= listed_at)
            && let Some(deleted) = pod.deletion_timestamp.get()
        {
            let grace = SignedDuration::from_secs(pod.deletion_grace_seconds.unwrap_or(0).max(0));
            Arc::make_mut(pod).terminating_seen =
                Stamp::at_or_after((deleted - grace).min(listed_at));
        }
    }
    observed.watch_synced_at = Some(Timestamp::MIN);
    observed.suspended = None;
    observed
}

/// What this run could and could not see, said plainly.
fn evidence_note(observe: SignedDuration) -> String {
    format!(
        "Evidence: kubelet Leases watched for {}; a renewal seen meanwhile is timed by this \
         machine's clock. Older evidence is dated by the timestamps in the objects (the nodes' \
         own clocks, a pod's deletionTimestamp), which the running operator never does: it times \
         everything from when it saw it change, and trusts nothing older than its own start. No \
         node outage is watched here, so no pod shows as left Ready=False by one. Rate limits and pods already \
         force-deleted (Enforce) come from each policy's status.recentActions (its last 20 \
         records), where the operator remembers every action since it started; in DryRun every \
         would-be action is shown, also those already recorded.",
        crate::core::format_duration(observe)
    )
}
