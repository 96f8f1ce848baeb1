//! The one writer: the only module that sends mutations to the API server (pod deletions,
//! policy status, Events). It is also where DryRun turns an action into a record instead of a
//! request: in DryRun nothing here deletes or patches a pod or a node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::{BoxFuture, FutureExt, Shared};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use k8s_openapi::api::coordination::v1::Lease;

use crate::adapters::{NODE_LEASE_NAMESPACE, WatchedPod, excluded, node_view, pod_record};

use crate::core::rollouts::WorkloadRef;
use crate::core::{
    Action, FencingNotice, ForceDelete, FreshNode, FreshPod, FreshPolicy, LastLook, NodeView,
    PodNotice, ValidatedPolicy, push_recent_actions,
};
use crate::crd::{
    ActionKind, ActionResult, Mode, OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE, RecentAction,
    RemediationPolicy, RemediationPolicyStatus,
};
use crate::leader::LeaderGuard;
use crate::metrics::{ActionLabels, DelayLabels, Metrics, WriteKind, WriteLabels};
use crate::{Error, Result};

/// The name Events are reported under.
pub const CONTROLLER_NAME: &str = "kube-remediator";
/// Field manager of every patch (status, nodes, pods): the safety kernel reads it back in a
/// node's managedFields to tell our cordon from an admin's.
pub use crate::crd::FIELD_MANAGER;
/// How many actions of one plan run at once.
pub const MAX_IN_FLIGHT: usize = 8;
/// How long one fresh read of a node, its Lease and the policy serves the last looks of other
/// force deletes on that node: those that start while it is in flight or within this long
/// after it was sent. 110 pods due at once on one node then cost a few reads, not 330.
pub const SHARED_LOOK_FOR: Duration = Duration::from_millis(100);
/// From how many force deletes on one node in a plan their last looks read the node's pods in
/// one request (a LIST of `spec.nodeName=<node>`, shared like the node's read) rather than one
/// GET each.
pub const LIST_PODS_FROM: usize = 4;

#[derive(Clone)]
pub struct Writer {
    client: Client,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    /// Checked right before every mutation (DELETE, status patch, Event): a replica that does
    /// not hold the leader Lease sends none.
    leader: LeaderGuard,
    /// Test builds only: hold each force delete before its last look (see
    /// [`Writer::with_e2e_hold_dir`]).
    #[cfg(feature = "e2e-hooks")]
    hold_dir: Option<std::path::PathBuf>,
}

/// A Warning Event on the policy, published with a reconcile's writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// The reference of an Event about a pod.
pub(crate) fn pod_reference(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..ObjectReference::default()
    }
}

/// Everything one reconcile hands to the writer, written together: the notices (policy
/// Events), the plan's actions, and the desired status, which gets the actions' records.
pub struct Commit<'a> {
    pub policy: &'a RemediationPolicy,
    /// The validated spec, or `None` when it is invalid (then nothing is acted on).
    pub validated: Option<&'a ValidatedPolicy>,
    pub actions: &'a [Action],
    pub notices: Vec<Notice>,
    /// Pods newly held for want of fencing: an Event on each and on its owner.
    pub fencing_notices: Vec<FencingNotice>,
    /// Pods newly stuck on a live node or left Ready=False, or with new evidence: an Event on
    /// each.
    pub pod_notices: Vec<PodNotice>,
    /// The desired status, before this reconcile's action records are added.
    pub status: RemediationPolicyStatus,
    /// Records of earlier actions to add first: ones whose status write failed (their Events
    /// were published), and `Pending` ones a previous run left, resolved (`resolved`: their
    /// Events are published now, the previous run having stopped before).
    pub carried: Vec<RecentAction>,
    pub resolved: Vec<RecentAction>,
    /// The status last written, to skip writing an unchanged one.
    pub previous: Option<&'a RemediationPolicyStatus>,
}

/// What a commit did. The outcomes are returned even when the status write failed, so the
/// caller never forgets an action it took.
pub struct Committed {
    pub outcomes: Vec<Outcome>,
    /// The status written (`Ok(None)`: unchanged, not written).
    pub status: Result<Option<RemediationPolicyStatus>>,
}

/// What happened to one planned action.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub record: RecentAction,
    /// Whether the action counts as taken (Done, or WouldAct in DryRun).
    pub handled: bool,
    /// How it is remembered as taken: the pod's UID, or the node action's key.
    pub acted_key: String,
}

impl Writer {
    /// `instance` names this replica in Events (e.g. the pod name).
    pub fn new(client: Client, metrics: Arc<Metrics>, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: CONTROLLER_NAME.into(), instance };
        let recorder = Recorder::new(client.clone(), reporter);
        Writer {
            recorder,
            client,
            metrics,
            leader: LeaderGuard::always(),
            #[cfg(feature = "e2e-hooks")]
            hold_dir: None,
        }
    }

    /// Test builds only (cargo feature `e2e-hooks`): before the last look of each force delete,
    /// create `<dir>/<pod uid>.held` and wait until `<dir>/<pod uid>.release` exists (at most
    /// 120 s), so an end-to-end test can change the world between the plan and the request.
    #[cfg(feature = "e2e-hooks")]
    pub fn with_e2e_hold_dir(self, dir: Option<std::path::PathBuf>) -> Self {
        Writer { hold_dir: dir, ..self }
    }

    #[cfg(feature = "e2e-hooks")]
    async fn hold_before_last_look(&self, fd: &ForceDelete) {
        let Some(dir) = &self.hold_dir else { return };
        let held = dir.join(format!("{}.held", fd.uid));
        let release = dir.join(format!("{}.release", fd.uid));
        if let Err(e) = std::fs::write(&held, format!("{}/{}", fd.namespace, fd.name)) {
            warn!(error = %e, "e2e hook: cannot write {}", held.display());
            return;
        }
        info!(pod = %fd.name, "e2e hook: holding before the last look");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !release.exists() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        info!(pod = %fd.name, "e2e hook: released");
    }

    /// With `<hold dir>/hold-after-delete` present: after the DELETE is answered, before its
    /// outcome is recorded, create `<DIR>/<pod uid>.deleted` and wait (up to 120 s) for
    /// `<DIR>/<pod uid>.after`, so a test can kill the process in that instant.
    #[cfg(feature = "e2e-hooks")]
    async fn hold_after_delete(&self, fd: &ForceDelete) {
        let Some(dir) = &self.hold_dir else { return };
        if !dir.join("hold-after-delete").exists() {
            return;
        }
        let deleted = dir.join(format!("{}.deleted", fd.uid));
        let after = dir.join(format!("{}.after", fd.uid));
        if let Err(e) = std::fs::write(&deleted, format!("{}/{}", fd.namespace, fd.name)) {
            warn!(error = %e, "e2e hook: cannot write {}", deleted.display());
            return;
        }
        info!(pod = %fd.name, "e2e hook: holding after the DELETE");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !after.exists() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Mutates only while `leader` is open (by default always: no leader election).
    pub fn with_leader_guard(self, leader: LeaderGuard) -> Self {
        Writer { leader, ..self }
    }

    /// Writes one reconcile's result: the notices, then the actions (carried out or recorded),
    /// then the status with the actions' records, if it changed.
    pub async fn commit(&self, commit: Commit<'_>) -> Committed {
        let Commit {
            policy,
            validated,
            actions,
            notices,
            fencing_notices,
            pod_notices,
            mut status,
            previous,
            carried,
            resolved,
        } = commit;
        for record in &resolved {
            self.resolved_events(policy, record).await;
        }
        push_recent_actions(&mut status, carried.into_iter().chain(resolved));
        for notice in notices {
            self.policy_event(
                policy,
                EventType::Warning,
                notice.reason,
                notice.action,
                notice.note,
            )
            .await;
        }
        for notice in &fencing_notices {
            self.fencing_events(&policy.name_any(), notice).await;
        }
        for notice in &pod_notices {
            self.pod_notice_event(&policy.name_any(), notice).await;
        }
        let outcomes = match validated {
            Some(validated) if !actions.is_empty() => {
                // Every request is recorded before it is sent: an operator stopped between the
                // request and its outcome leaves a Pending record, which its next run resolves.
                let mut fresh_policy = None;
                if validated.mode == Mode::Enforce {
                    let pending = actions.iter().map(|a| pending_record(a, crate::clock::now()));
                    push_recent_actions(&mut status, pending);
                    let sent = Instant::now();
                    match self.write_status(&policy.name_any(), &status).await {
                        // The API server answers with the policy as it stands: the last looks
                        // that start soon after need not read it again.
                        Ok(answer) => fresh_policy = Some((sent, answer)),
                        Err(e) => {
                            warn!(policy = %policy.name_any(), error = %e,
                                "cannot record the actions before taking them: none taken");
                            return Committed { outcomes: Vec::new(), status: Err(e) };
                        }
                    }
                }
                let looks = SharedLooks::new(self, policy.name_any(), actions, fresh_policy);
                self.execute_with(policy, validated, actions, crate::clock::now, looks).await
            }
            _ => Vec::new(),
        };
        push_recent_actions(&mut status, outcomes.iter().map(|o| o.record.clone()));
        let status = if previous == Some(&status) {
            Ok(None)
        } else {
            let name = policy.name_any();
            match self.patch_status(&name, &status).await {
                Ok(()) => {
                    info!(policy = %name, "status updated");
                    Ok(Some(status))
                }
                Err(e) => Err(e),
            }
        };
        Committed { outcomes, status }
    }

    /// Carries out (Enforce) or records (DryRun) a plan's actions, oldest threshold first.
    /// Every action leaves an Event on its pod or node and one on the policy, a log line, a
    /// metric and a status record. A force delete's Events are published once the plan's last
    /// action is answered (before this returns): on a busy API server they would otherwise
    /// delay the DELETEs still due, two Events for each.
    pub async fn execute(
        &self,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        actions: &[Action],
        now: impl Fn() -> Timestamp,
    ) -> Vec<Outcome> {
        let looks = SharedLooks::new(self, policy.name_any(), actions, None);
        self.execute_with(policy, validated, actions, now, looks).await
    }

    async fn execute_with<'a>(
        &'a self,
        policy: &'a RemediationPolicy,
        validated: &'a ValidatedPolicy,
        actions: &[Action],
        now: impl Fn() -> Timestamp,
        looks: SharedLooks<'a>,
    ) -> Vec<Outcome> {
        // Up to MAX_IN_FLIGHT actions at once (client-side pacing: kube-rs has no QPS limiter),
        // results kept in plan order; then their records, as many at once.
        let (outcomes, records): (Vec<Outcome>, Vec<Option<BoxFuture<'_, ()>>>) =
            futures::stream::iter(actions.iter().cloned())
                .map(|action| self.execute_one(policy, validated, action, &now, &looks))
                .buffered(MAX_IN_FLIGHT)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .unzip();
        futures::stream::iter(records.into_iter().flatten())
            .buffer_unordered(MAX_IN_FLIGHT)
            .for_each(|()| futures::future::ready(()))
            .await;
        outcomes
    }

    async fn execute_one<'a>(
        &'a self,
        policy: &'a RemediationPolicy,
        validated: &'a ValidatedPolicy,
        action: Action,
        now: &impl Fn() -> Timestamp,
        looks: &SharedLooks<'a>,
    ) -> (Outcome, Option<BoxFuture<'a, ()>>) {
        match action {
            Action::ForceDelete(fd) => {
                let (outcome, records) =
                    self.execute_force_delete(policy, validated, fd, now, looks).await;
                (outcome, Some(records))
            }
            Action::Node(na) => (self.execute_node_action(policy, validated, na, now).await, None),
            Action::RemoveFinalizers(rf) => {
                (self.execute_remove_finalizers(policy, validated, rf, now).await, None)
            }
            Action::Evict(evict) => (self.execute_evict(policy, validated, evict, now).await, None),
        }
    }

    /// The action, then (returned, to be awaited by the caller) its Events.
    async fn execute_force_delete<'a>(
        &'a self,
        policy: &'a RemediationPolicy,
        validated: &ValidatedPolicy,
        fd: ForceDelete,
        now: &impl Fn() -> Timestamp,
        looks: &SharedLooks<'a>,
    ) -> (Outcome, BoxFuture<'a, ()>) {
        let kind = ActionKind::ForceDelete;
        let (policy_name, mode) = (&*policy.name_any(), validated.mode);
        let (result, detail) = match mode {
            Mode::DryRun => (ActionResult::WouldAct, None),
            Mode::Enforce => self.force_delete(&fd, policy, validated, looks).await,
        };
        let at = now();
        self.account(policy_name, mode, kind, result, fd.threshold, at);
        let workload_note = fd.blocks_rollout.as_ref().map(|workload| {
            let (reason, verb) = match (mode, result) {
                (Mode::DryRun, _) => ("WouldReleaseBlockingPod", "would force-delete"),
                (Mode::Enforce, ActionResult::Done) => ("ReleasedBlockingPod", "force-deleted"),
                (Mode::Enforce, _) => ("ReleaseBlockingPodSkipped", "did not force-delete"),
            };
            let note = format!(
                "[{}] policy {policy_name} {verb} pod {} to unblock this rollout: {}",
                mode.as_str(),
                fd.name,
                fd.reason
            );
            (workload.clone(), reason, note)
        });
        let fields = (fd.namespace.as_str(), fd.name.as_str(), fd.node.as_str());
        match result {
            ActionResult::Failed => warn!(
                policy = %policy_name, mode = mode.as_str(), action = "ForceDelete",
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                reason = %fd.reason, detail = detail.as_deref().unwrap_or(""), "action failed"
            ),
            _ => info!(
                policy = %policy_name, mode = mode.as_str(), action = "ForceDelete",
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                reason = %fd.reason, detail = detail.as_deref().unwrap_or(""),
                "{}", if mode == Mode::DryRun { "would force-delete pod" } else { "force-delete pod" }
            ),
        }
        let events = {
            let (fd, detail) = (fd.clone(), detail.clone());
            async move {
                self.force_delete_events(policy, mode, &fd, result, detail.as_deref()).await;
                if let Some((workload, reason, note)) = workload_note {
                    self.workload_event(&workload, EventType::Warning, reason, note).await;
                }
            }
            .boxed()
        };
        let outcome = Outcome {
            // A skip (the last look found the world changed) or a failure is not handled: the
            // next plan decides again from what it sees then.
            handled: result.counts_as_action(),
            acted_key: fd.uid.clone(),
            record: RecentAction {
                time: Time(at),
                action: ActionKind::ForceDelete,
                mode,
                namespace: fd.namespace.clone(),
                name: fd.name.clone(),
                uid: fd.uid.clone(),
                node: fd.node.clone(),
                owner: fd.owner.as_ref().map(|o| format!("{}/{}", o.kind, o.name)),
                reason: fd.reason.clone(),
                result,
                detail,
            },
        };
        (outcome, events)
    }

    /// The last look, then the request: fresh reads (never from a cache) of the pod, its node,
    /// the node's Lease and the policy, all at once (each shared with the force deletes on the
    /// same node whose last look starts within [`SHARED_LOOK_FOR`]: see [`SharedLooks`]); then,
    /// if the action still stands ([`ForceDelete::recheck`]), a DELETE with grace 0 and a UID
    /// precondition.
    async fn force_delete(
        &self,
        fd: &ForceDelete,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        looks: &SharedLooks<'_>,
    ) -> (ActionResult, Option<String>) {
        #[cfg(feature = "e2e-hooks")]
        self.hold_before_last_look(fd).await;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &fd.namespace);
        let (pod, node, fresh_policy) =
            tokio::join!(looks.pod(fd), looks.node(&fd.node), looks.policy());
        let pod = match pod {
            Ok(None) => return (ActionResult::Skipped, Some("pod already gone".into())),
            Ok(pod) => pod,
            Err(e) => return (ActionResult::Failed, Some(format!("last look: the pod: {e}"))),
        };
        let (node, lease) = match &*node {
            Ok(evidence) => evidence,
            Err(e) => return (ActionResult::Failed, Some(e.clone())),
        };
        let fresh_policy = match &*fresh_policy {
            Ok(policy) => policy,
            Err(e) => return (ActionResult::Failed, Some(e.clone())),
        };
        let look = last_look(pod.as_ref(), node.as_ref(), lease.as_ref(), fresh_policy.as_ref());
        if let Err(skip) = fd.recheck(&look, policy.metadata.generation, &validated.fencing) {
            return (ActionResult::Skipped, Some(skip));
        }
        let action = Action::ForceDelete(fd.clone());
        if let Err(refused) = self.kernel_admits(policy, validated, &action, &look, None).await {
            return refused;
        }
        let deleted = self.delete_pod(&pods, fd).await;
        #[cfg(feature = "e2e-hooks")]
        self.hold_after_delete(fd).await;
        deleted
    }

    /// The last look's fresh reads (never from a cache) of a node, its Lease and the policy,
    /// all at once; `Err` says which read failed.
    pub(crate) async fn reread(
        &self,
        node: &str,
        policy: &str,
    ) -> std::result::Result<(Option<Node>, Option<Lease>, Option<RemediationPolicy>), String> {
        let (node_and_lease, policy) = tokio::join!(self.read_node(node), self.read_policy(policy));
        let (node, lease) = node_and_lease?;
        Ok((node, lease, policy?))
    }

    /// The last look of a pod action other than a force delete (an eviction, a finalizer
    /// removal): fresh reads of the pod, its node, the node's Lease and the policy, all at once,
    /// in the core's terms. `Err` is the result to record (the read failed), and why.
    pub(crate) async fn look_at_pod(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        policy: &str,
    ) -> std::result::Result<PodLook, (ActionResult, Option<String>)> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let (pod, rest) = tokio::join!(pods.get_opt(name), self.reread(node, policy));
        let pod =
            pod.map_err(|e| (ActionResult::Failed, Some(format!("last look: the pod: {e}"))))?;
        let (node, lease, policy) = rest.map_err(|e| (ActionResult::Failed, Some(e)))?;
        Ok(PodLook { pod, node, lease, policy })
    }

    /// What a fresh read says of the pod a Pending record names: gone (absent, or another pod
    /// under its name), Terminating, or there. `Err`: the read failed (resolve later).
    pub async fn pod_now(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> std::result::Result<crate::core::PodNow, String> {
        use crate::core::PodNow;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = pods.get_opt(name).await.map_err(|e| e.to_string())?;
        Ok(match pod {
            Some(p) if p.metadata.uid.as_deref() == Some(uid) => {
                if p.metadata.deletion_timestamp.is_some() {
                    PodNow::Terminating
                } else {
                    PodNow::Present
                }
            }
            _ => PodNow::Gone,
        })
    }

    /// A fresh read of a Node, in the core's terms (`None`: there is none).
    pub async fn node_now(&self, name: &str) -> std::result::Result<Option<NodeView>, String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        Ok(nodes.get_opt(name).await.map_err(|e| e.to_string())?.as_ref().map(node_view))
    }

    /// The last look's fresh reads of a node and its Lease, both at once.
    async fn read_node(&self, node: &str) -> std::result::Result<NodeEvidence, String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        let (node, lease) = tokio::join!(nodes.get_opt(node), leases.get_opt(node));
        let what = |what: &str, e: kube::Error| format!("last look: the {what}: {e}");
        Ok((node.map_err(|e| what("node", e))?, lease.map_err(|e| what("node's Lease", e))?))
    }

    /// The last look's fresh read of a policy.
    async fn read_policy(
        &self,
        name: &str,
    ) -> std::result::Result<Option<RemediationPolicy>, String> {
        let policies: Api<RemediationPolicy> = Api::all(self.client.clone());
        policies.get_opt(name).await.map_err(|e| format!("last look: the policy: {e}"))
    }

    /// DELETE with grace 0 and a UID precondition, if this replica leads.
    async fn delete_pod(
        &self,
        pods: &Api<Pod>,
        fd: &ForceDelete,
    ) -> (ActionResult, Option<String>) {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(fd.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if !self.may_write(WriteKind::DeletePod) {
            return (ActionResult::Failed, Some("not the leader: refused to delete".into()));
        }
        match pods.delete(&fd.name, &params).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some("pod already gone".into()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => (
                ActionResult::Skipped,
                Some(format!("UID precondition failed, the pod was replaced: {}", s.message)),
            ),
            Err(e) => {
                let err = Error::DeletePod {
                    namespace: fd.namespace.clone(),
                    name: fd.name.clone(),
                    source: e,
                };
                (ActionResult::Failed, Some(err.to_string()))
            }
        }
    }

    /// The safety kernel's word on a write about to be sent ([`crate::safety::admit`]). A
    /// refusal is a defect of the rules: it blocks the write, is logged at error level, counted
    /// by invariant and told in an Event on the policy about the object; `Err` is the result
    /// to record (skipped, so the action waits its backoff) and why.
    pub(crate) async fn kernel_admits(
        &self,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        action: &Action,
        look: &LastLook<'_>,
        undo: Option<crate::safety::UndoChanges>,
    ) -> std::result::Result<(), (ActionResult, Option<String>)> {
        let write = crate::safety::Write {
            action,
            policy: validated,
            planned_generation: policy.metadata.generation,
            look,
            undo,
            now: crate::clock::now(),
        };
        let Err(refusal) = crate::safety::admit(&write) else { return Ok(()) };
        let (namespace, name) = action.target();
        tracing::error!(
            policy = %policy.name_any(), action = action.kind().as_str(), namespace, name,
            invariant = refusal.invariant.as_str(), why = %refusal.why,
            "the safety kernel refused a write: a defect of the rules, the write is not sent"
        );
        self.metrics
            .safety_refusals
            .get_or_create(&crate::metrics::InvariantLabels {
                invariant: crate::metrics::Label(refusal.invariant),
            })
            .inc();
        let related = if namespace.is_empty() {
            ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.to_string()),
                uid: Some(action.uid().to_string()),
                ..ObjectReference::default()
            }
        } else {
            pod_reference(namespace, name, action.uid())
        };
        let note = format!(
            "{} {}{}{name} not sent: {refusal}",
            action.kind().as_str(),
            namespace,
            if namespace.is_empty() { "" } else { "/" }
        );
        self.policy_event_on(policy, related, "SafetyRefused", action.kind().as_str(), note).await;
        Err((ActionResult::Skipped, Some(refusal.to_string())))
    }

    /// Whether this replica may send a write now (it holds the leader Lease); counts refusals.
    pub(crate) fn may_write(&self, write: WriteKind) -> bool {
        let may = self.leader.may_act();
        if !may {
            self.metrics.writes_refused_not_leader.get_or_create(&WriteLabels { write }).inc();
        }
        may
    }

    pub(crate) fn account(
        &self,
        policy: &str,
        mode: Mode,
        action: ActionKind,
        result: ActionResult,
        threshold: Timestamp,
        at: Timestamp,
    ) {
        self.metrics
            .actions
            .get_or_create(&ActionLabels { policy: policy.to_string(), action, mode, result })
            .inc();
        if matches!(result, ActionResult::Done | ActionResult::WouldAct) {
            let delay = at.duration_since(threshold).as_secs_f64().max(0.0);
            self.metrics
                .action_delay
                .get_or_create(&DelayLabels { policy: policy.to_string(), action, mode })
                .observe(delay);
        }
    }

    /// The Events of a force delete: on the pod, and on the policy about the pod.
    async fn force_delete_events(
        &self,
        policy: &RemediationPolicy,
        mode: Mode,
        fd: &ForceDelete,
        result: ActionResult,
        detail: Option<&str>,
    ) {
        let reason = match (mode, result) {
            (Mode::DryRun, _) => "WouldForceDelete",
            (Mode::Enforce, ActionResult::Done) => "ForceDeleted",
            (Mode::Enforce, ActionResult::Failed) => "ForceDeleteFailed",
            (Mode::Enforce, _) => "ForceDeleteSkipped",
        };
        let mut note = format!("[{}] policy {}: {}", mode.as_str(), policy.name_any(), fd.reason);
        if let Some(detail) = detail {
            note.push_str(&format!(" ({detail})"));
        }
        let reference = pod_reference(&fd.namespace, &fd.name, &fd.uid);
        let policy_note = format!("pod {}/{}: {note}", fd.namespace, fd.name);
        // Both at once.
        tokio::join!(
            self.event(&reference, EventType::Warning, reason, "ForceDelete", note),
            self.policy_event_on(policy, reference.clone(), reason, "ForceDelete", policy_note),
        );
    }

    /// The Events, log line and metric of an action a previous run took and did not record,
    /// found done now ([`crate::core::resolve_pending`]).
    async fn resolved_events(&self, policy: &RemediationPolicy, record: &RecentAction) {
        if record.result != ActionResult::Done {
            return;
        }
        let policy_name = policy.name_any();
        self.metrics
            .actions
            .get_or_create(&ActionLabels {
                policy: policy_name.clone(),
                action: record.action,
                mode: record.mode,
                result: record.result,
            })
            .inc();
        let note = format!(
            "[{}] policy {policy_name}: {} ({})",
            record.mode.as_str(),
            record.reason,
            record.detail.as_deref().unwrap_or_default()
        );
        let reason = node::event_reason(record.action, record.mode, record.result);
        let action = record.action.as_str();
        let (reference, about) = if record.namespace.is_empty() {
            let node = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(record.name.clone()),
                uid: Some(record.uid.clone()),
                ..ObjectReference::default()
            };
            (node, format!("node {}", record.name))
        } else {
            let pod = pod_reference(&record.namespace, &record.name, &record.uid);
            (pod, format!("pod {}/{}", record.namespace, record.name))
        };
        self.event(&reference, EventType::Warning, &reason, action, note.clone()).await;
        let policy_note = format!("{about}: {note}");
        self.policy_event_on(policy, reference, &reason, action, policy_note).await;
        info!(
            policy = %policy_name, action, result = record.result.as_str(),
            namespace = %record.namespace, name = %record.name,
            "action of a previous run found done"
        );
    }

    /// Publishes an Event on a Deployment or StatefulSet.
    pub async fn workload_event(
        &self,
        workload: &WorkloadRef,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let reference = ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some(workload.kind.as_str().into()),
            namespace: Some(workload.namespace.clone()),
            name: Some(workload.name.clone()),
            uid: Some(workload.uid.clone()),
            ..ObjectReference::default()
        };
        self.event(&reference, type_, reason, "Report", note).await;
    }

    /// Publishes an Event on the policy.
    pub async fn policy_event(
        &self,
        policy: &RemediationPolicy,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let reference = policy.object_ref(&());
        self.event_about(&reference, None, type_, reason, action, note).await;
    }

    /// Publishes an Event on the policy about one object it acted on (its `related`). Events
    /// with the same reason on the same object are merged into one series that keeps the first
    /// note; naming the pod or node in `related` keeps each action's Event on the policy apart.
    pub async fn policy_event_on(
        &self,
        policy: &RemediationPolicy,
        related: ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let reference = policy.object_ref(&());
        self.event_about(&reference, Some(related), EventType::Warning, reason, action, note).await;
    }

    pub(crate) async fn event(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.event_about(reference, None, type_, reason, action, note).await;
    }

    async fn event_about(
        &self,
        reference: &ObjectReference,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        mut note: String,
    ) {
        if !self.may_write(WriteKind::Event) {
            debug!(reason, "not the leader: Event not published");
            return;
        }
        // The Events API limits notes to 1 kB.
        if note.len() > 1000 {
            let mut cut = 990;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str(" …");
        }
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            warn!(error = %e, reason, "cannot publish Event");
        }
    }

    /// Writes a policy's status (merge patch of the status subresource).
    pub async fn patch_status(&self, name: &str, status: &RemediationPolicyStatus) -> Result<()> {
        self.write_status(name, status).await.map(drop)
    }

    /// [`Writer::patch_status`], returning the policy as the API server holds it after the write.
    async fn write_status(
        &self,
        name: &str,
        status: &RemediationPolicyStatus,
    ) -> Result<RemediationPolicy> {
        if !self.may_write(WriteKind::PatchStatus) {
            return Err(Error::NotLeader { operation: "write a policy status" });
        }
        let api: Api<RemediationPolicy> = Api::all(self.client.clone());
        let patch = serde_json::json!({ "status": status });
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        api.patch_status(name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::PatchStatus { name: name.to_string(), source })
    }
}

/// A pod, its node, the node's Lease and the policy, freshly read ([`Writer::look_at_pod`]).
pub(crate) struct PodLook {
    pub pod: Option<Pod>,
    pub node: Option<Node>,
    pub lease: Option<Lease>,
    pub policy: Option<RemediationPolicy>,
}

impl PodLook {
    /// The reads in the core's terms.
    pub fn look(&self) -> LastLook<'_> {
        last_look(self.pod.as_ref(), self.node.as_ref(), self.lease.as_ref(), self.policy.as_ref())
    }
}

/// A node and its Lease, freshly read.
type NodeEvidence = (Option<Node>, Option<Lease>);

/// The pods on one node, by namespace and name, or why they could not be read.
type NodePods = std::result::Result<HashMap<(String, String), Pod>, String>;

/// A fresh read shared by several last looks, and when it was sent.
type SharedRead<'a, T> = (Instant, Shared<BoxFuture<'a, Arc<T>>>);

/// One plan's last-look reads of nodes, Leases, the policy and, where several of its force
/// deletes are on one node, that node's pods: each shared by the force deletes (on the same
/// node) whose last look starts within [`SHARED_LOOK_FOR`] of its request. The policy may come
/// from the answer to the status write that recorded the plan's actions `Pending`, made just
/// before them.
struct SharedLooks<'a> {
    writer: &'a Writer,
    policy: String,
    /// Nodes with at least [`LIST_PODS_FROM`] force deletes in the plan.
    list_pods_on: std::collections::HashSet<String>,
    nodes: Mutex<HashMap<String, SharedRead<'a, std::result::Result<NodeEvidence, String>>>>,
    policies: Mutex<HashMap<String, SharedRead<'a, PolicyEvidence>>>,
    pod_lists: Mutex<HashMap<String, SharedRead<'a, NodePods>>>,
}

/// The policy, freshly read.
type PolicyEvidence = std::result::Result<Option<RemediationPolicy>, String>;

impl<'a> SharedLooks<'a> {
    /// `fresh_policy`: the policy as the API server answered a write sent at that instant.
    fn new(
        writer: &'a Writer,
        policy: String,
        actions: &[Action],
        fresh_policy: Option<(Instant, RemediationPolicy)>,
    ) -> Self {
        let mut policies = HashMap::new();
        if let Some((sent, answer)) = fresh_policy {
            let read = futures::future::ready(Arc::new(Ok(Some(answer)))).boxed().shared();
            policies.insert(policy.clone(), (sent, read));
        }
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for action in actions {
            if let Action::ForceDelete(fd) = action {
                *per_node.entry(fd.node.as_str()).or_default() += 1;
            }
        }
        let list_pods_on = per_node
            .into_iter()
            .filter(|(_, n)| *n >= LIST_PODS_FROM)
            .map(|(node, _)| node.to_string())
            .collect();
        SharedLooks {
            writer,
            policy,
            list_pods_on,
            nodes: Mutex::new(HashMap::new()),
            policies: Mutex::new(policies),
            pod_lists: Mutex::new(HashMap::new()),
        }
    }

    /// A read sent less than [`SHARED_LOOK_FOR`] ago (answered or in flight) under `key`, or a
    /// new one made by `read`.
    async fn shared<T: Send + Sync + 'a>(
        cache: &Mutex<HashMap<String, SharedRead<'a, T>>>,
        key: &str,
        read: impl FnOnce() -> BoxFuture<'a, T>,
    ) -> Arc<T> {
        let read = {
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            match cache.get(key) {
                Some((sent, read)) if sent.elapsed() < SHARED_LOOK_FOR => read.clone(),
                _ => {
                    let read = read().map(Arc::new).boxed().shared();
                    cache.insert(key.to_string(), (Instant::now(), read.clone()));
                    read
                }
            }
        };
        read.await
    }

    /// The node `node` and its Lease.
    async fn node(&self, node: &str) -> Arc<std::result::Result<NodeEvidence, String>> {
        let (writer, name) = (self.writer, node.to_string());
        Self::shared(&self.nodes, node, move || {
            async move { writer.read_node(&name).await }.boxed()
        })
        .await
    }

    /// The policy.
    async fn policy(&self) -> Arc<PolicyEvidence> {
        let (writer, name) = (self.writer, self.policy.clone());
        Self::shared(&self.policies, &self.policy, move || {
            async move { writer.read_policy(&name).await }.boxed()
        })
        .await
    }

    /// The pod of `fd`, fresh: from its node's shared LIST where the plan has several force
    /// deletes there, else (and where the LIST does not hold it: gone, or replaced by a pod of
    /// the same name elsewhere) by a GET of its own.
    async fn pod(&self, fd: &ForceDelete) -> std::result::Result<Option<Pod>, String> {
        if self.list_pods_on.contains(&fd.node) {
            let (client, node) = (self.writer.client.clone(), fd.node.clone());
            let listed = Self::shared(&self.pod_lists, &fd.node, move || {
                async move {
                    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
                    let pods =
                        Api::<Pod>::all(client).list(&params).await.map_err(|e| e.to_string())?;
                    Ok(pods
                        .items
                        .into_iter()
                        .map(|p| ((p.namespace().unwrap_or_default(), p.name_any()), p))
                        .collect())
                }
                .boxed()
            })
            .await;
            match &*listed {
                Ok(pods) => {
                    if let Some(pod) = pods.get(&(fd.namespace.clone(), fd.name.clone())) {
                        return Ok(Some(pod.clone()));
                    }
                }
                Err(e) => return Err(e.clone()),
            }
        }
        let pods: Api<Pod> = Api::namespaced(self.writer.client.clone(), &fd.namespace);
        pods.get_opt(&fd.name).await.map_err(|e| e.to_string())
    }
}

/// The record of an action about to be sent (Enforce), replaced by its outcome's.
fn pending_record(action: &Action, at: Timestamp) -> RecentAction {
    let (namespace, name) = action.target();
    RecentAction {
        time: Time(at),
        action: action.kind(),
        mode: Mode::Enforce,
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: action.uid().to_string(),
        node: action.node().to_string(),
        owner: action.owner().map(|o| format!("{}/{}", o.kind, o.name)),
        reason: action.reason().to_string(),
        result: ActionResult::Pending,
        detail: Some("being sent: recorded before the request".into()),
    }
}

/// A freshly read policy, in the core's terms.
fn fresh_policy(policy: &RemediationPolicy) -> FreshPolicy {
    FreshPolicy {
        mode: policy.spec.mode,
        paused: policy.spec.paused,
        generation: policy.metadata.generation,
    }
}

/// What the fresh reads say, in the core's terms.
pub(crate) fn last_look<'a>(
    pod: Option<&'a Pod>,
    node: Option<&Node>,
    lease: Option<&Lease>,
    policy: Option<&RemediationPolicy>,
) -> LastLook<'a> {
    LastLook {
        pod: pod.map(|p| FreshPod {
            uid: p.metadata.uid.as_deref(),
            terminating: p.metadata.deletion_timestamp.is_some(),
            node: p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default(),
            excluded: excluded(p.metadata.annotations.as_ref()),
            stale: pod_record(&WatchedPod::from(p))
                .is_some_and(|r| r.view.stale_ready_since.is_some()),
        }),
        node: node.map(|n| {
            let view = node_view(n);
            FreshNode {
                observation: view.observation,
                excluded: view.excluded,
                control: view.control,
                cordon_managers: field_managers(n, &["f:spec", "f:unschedulable"]),
                out_of_service_added: out_of_service_added(n),
            }
        }),
        lease_renewed: lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0),
        policy: policy.map(fresh_policy),
    }
}

/// The managers whose managedFields entry holds the field at `path` (`["f:spec",
/// "f:unschedulable"]`).
fn field_managers(node: &Node, path: &[&str]) -> Vec<String> {
    let entries = node.metadata.managed_fields.as_deref().unwrap_or_default();
    entries
        .iter()
        .filter(|e| {
            let fields = e.fields_v1.as_ref().map(|f| &f.0);
            path.iter().try_fold(fields, |at, key| Some(at?.get(*key))).flatten().is_some()
        })
        .filter_map(|e| e.manager.clone())
        .collect()
}

/// The `timeAdded` of the node's out-of-service taint with this operator's value and effect.
fn out_of_service_added(node: &Node) -> Option<Timestamp> {
    let taints = node.spec.as_ref()?.taints.as_deref()?;
    taints.iter().find(|t| our_taint(t))?.time_added.as_ref().map(|t| t.0)
}

/// The out-of-service taint as this operator adds it (key, value, effect).
pub(crate) fn our_taint(t: &k8s_openapi::api::core::v1::Taint) -> bool {
    t.key == OUT_OF_SERVICE_TAINT
        && t.effect == "NoExecute"
        && t.value.as_deref() == Some(OUT_OF_SERVICE_VALUE)
}

mod evict;
mod finalizers;
mod node;
mod notices;
#[cfg(test)]
mod tests;
