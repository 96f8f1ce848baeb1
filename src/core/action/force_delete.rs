//! A pod force delete: the pod's `DisruptionTarget` condition (why it goes, as PodGC and the taint
//! manager say it), then a DELETE with `gracePeriodSeconds: 0` and a UID precondition.

use jiff::Timestamp;

use super::{
    Act, LastLook, LiveDeletion, PodTarget, Skip, Target, policy_still_enforces, same_pod,
};
use crate::core::node::{DeathEvidence, fencing_evidence, own_taint_aside};
use crate::core::observed::{NodeView, Readiness, WorkloadRef};
use crate::crd::{ActionKind, ActionResult, FencingRequirement, FencingSpec, Mode};

/// A pod force delete: DELETE with `gracePeriodSeconds: 0` and a UID precondition. Its
/// threshold is the instant the pod became due (latest of node death and `deletionTimestamp +
/// delay`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForceDelete {
    pub pod: PodTarget,
    /// The workload whose rollout the pod blocks, told in an Event when it is released.
    pub blocks_rollout: Option<WorkloadRef>,
    /// The node's Lease `renewTime` the plan judged on: any other value in the last look is a
    /// renewal since the plan, so the kubelet is alive.
    pub lease_renewed: Option<Timestamp>,
    /// The fencing the pod needs, which the last look must still find on its node.
    pub fencing_required: Option<FencingRequirement>,
    /// A pod stuck on a live node (liveNodeStuck.forceDeleteAfter), with its deletion as we
    /// timed it: the last look wants its node still Ready, not dead.
    pub live: Option<LiveDeletion>,
    /// The evidence its node is dead (`None` on a live node), checked again by the safety
    /// kernel right before the request.
    pub death: Option<DeathEvidence>,
}

impl Act for ForceDelete {
    fn kind(&self) -> ActionKind {
        ActionKind::ForceDelete
    }

    fn target(&self) -> Target<'_> {
        Target::Pod(&self.pod)
    }

    /// Skipped when the pod changed, the policy left Enforce or changed, or the node is no
    /// longer dead by fresh evidence (Ready, a Lease renewed since the plan, excluded, fencing
    /// gone).
    fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        fencing: &FencingSpec,
    ) -> Result<(), Skip> {
        let pod = same_pod(look, &self.pod)?;
        if !pod.terminating {
            return Err(Skip::PodNotTerminating);
        }
        if pod.node != self.pod.node {
            return Err(Skip::PodMoved { to: pod.node.to_string() });
        }
        if pod.excluded {
            return Err(Skip::PodExcluded);
        }
        policy_still_enforces(look.policy, planned_generation, "deleted")?;
        if self.live.is_some() {
            return match &look.node {
                Some(node) if node.excluded => Err(Skip::NodeExcluded),
                Some(node) if node.observation.readiness == Readiness::Ready => Ok(()),
                _ => Err(Skip::NodeNoLongerReady),
            };
        }
        if look.lease_renewed != self.lease_renewed {
            return Err(Skip::LeaseRenewedFrom {
                planned: self.lease_renewed,
                now: look.lease_renewed,
            });
        }
        let fenced = match &look.node {
            // Seen deleted when planned, back now: a new Node, whatever it says.
            Some(_) if self.death == Some(DeathEvidence::Deleted) => {
                return Err(Skip::NodeBack);
            }
            Some(node) => {
                if node.observation.readiness == Readiness::Ready {
                    return Err(Skip::NodeReadyAgain);
                }
                if node.excluded {
                    return Err(Skip::NodeExcluded);
                }
                let fencing = own_taint_aside(fencing, &node.control);
                fencing_evidence(&node.observation, &fencing, false)
            }
            None => fencing_evidence(
                &NodeView::deleted_unknown(&self.pod.node).observation,
                fencing,
                true,
            ),
        };
        if let (Some(required), None) = (self.fencing_required, fenced) {
            return Err(Skip::FencingGone(required));
        }
        Ok(())
    }
}

/// The reason of the `DisruptionTarget` condition this operator sets on a pod before it
/// force-deletes it (upstream's are `DeletionByPodGC` and `DeletionByTaintManager`).
pub const DISRUPTION_REASON: &str = "DeletionByKubeRemediator";
/// The pod condition that says a pod goes because of a disruption, not a failure of its own: a
/// Job's `podFailurePolicy` can match it (`onPodConditions`).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// The status write that goes before a force delete, on the pod as the last look read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisruptionWrite {
    /// Add `DisruptionTarget` (status True, [`DISRUPTION_REASON`]).
    pub condition: bool,
    /// Set the phase `Failed`, as PodGC does before it deletes a pod no kubelet will finish: a
    /// Job with `podFailurePolicy` or `podReplacementPolicy: Failed` counts (or ignores) and
    /// replaces a pod only once it is Failed, and keeps its tracking finalizer on it until then.
    pub fail: bool,
}

/// A pod's status as the last look read it, for the write before its force delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodPhaseNow<'a> {
    /// `status.phase` (`None`: none reported).
    pub phase: Option<&'a str>,
    /// A `DisruptionTarget` condition with status True is there already (ours from a run that
    /// stopped between the two requests, the taint manager's, PodGC's).
    pub disruption_target: bool,
}

impl ForceDelete {
    /// What to write to the pod's status before the DELETE, `None` for nothing: the
    /// `DisruptionTarget` condition unless one is True already; on a dead node (no kubelet will
    /// ever report it) also the phase `Failed` unless the pod is terminal. On a live node the
    /// kubelet owns the phase: it reports it once it has stopped the containers.
    pub fn disruption_write(&self, now: PodPhaseNow<'_>) -> Option<DisruptionWrite> {
        let terminal = matches!(now.phase, Some("Failed" | "Succeeded"));
        let write = DisruptionWrite {
            condition: !now.disruption_target,
            fail: self.live.is_none() && !terminal,
        };
        (write.condition || write.fail).then_some(write)
    }

    /// The message of the `DisruptionTarget` condition.
    pub fn disruption_message(&self, policy: &str) -> String {
        format!("kube-remediator policy {policy} force-deletes the pod: {}", self.pod.reason)
    }

    /// The Event on the workload whose rollout the pod blocks, if it does: the workload, the
    /// Event's reason and its note.
    pub fn rollout_notice(
        &self,
        policy: &str,
        mode: Mode,
        result: ActionResult,
    ) -> Option<(WorkloadRef, &'static str, String)> {
        let workload = self.blocks_rollout.as_ref()?;
        let (reason, verb) = match (mode, result) {
            (Mode::DryRun, _) => ("WouldReleaseBlockingPod", "would force-delete"),
            (Mode::Enforce, ActionResult::Done) => ("ReleasedBlockingPod", "force-deleted"),
            (Mode::Enforce, _) => ("ReleaseBlockingPodSkipped", "did not force-delete"),
        };
        let note = format!(
            "[{}] policy {policy} {verb} pod {} to unblock this rollout: {}",
            mode.as_str(),
            self.pod.name,
            self.pod.reason
        );
        Some((workload.clone(), reason, note))
    }
}

#[cfg(test)]
mod tests {
    use crate::core::stamp::Stamp;
    use jiff::SignedDuration;

    use super::*;
    use crate::core::action::{FreshNode, FreshPod, FreshPolicy, fixtures};
    use crate::core::observed::NodeObservation;

    /// 2026-01-01T00:MM:SSZ.
    fn t(min: i64, sec: i64) -> Timestamp {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        start + SignedDuration::from_secs(min * 60 + sec)
    }
    fn now() -> Timestamp {
        t(10, 0)
    }

    /// Node `name` as a fresh read sees it: "ready", or "dead" (Unknown since 00:00).
    fn node(name: &str, health: &str) -> NodeView {
        let readiness = match health {
            "ready" => Readiness::Ready,
            "dead" => Readiness::Unknown,
            other => panic!("unknown health {other}"),
        };
        NodeView {
            observation: NodeObservation {
                name: name.into(),
                readiness,
                ready_transition: Some(t(0, 0)).into(),
                lease_renewed: Some(t(0, 0)).into(),
                not_ready_seen: (readiness != Readiness::Ready).then_some(t(0, 0)).into(),
                lease_seen: Some(t(0, 0)).into(),
                lease_duration_s: None,
                ready_heartbeat: Stamp::NONE,
                heartbeat_seen: Stamp::NONE,
                seen_from_stamps: false,
                not_ready_from_stamp: false,
                unschedulable: false,
                taints: Box::default(),
                volumes_in_use: Box::default(),
            },
            labels: Default::default(),
            excluded: false,
            deleted: false,
            control: Default::default(),
        }
    }

    /// The pod every table here acts on.
    fn web_0() -> PodTarget {
        PodTarget {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "u1".into(),
            node: "n1".into(),
            owner: None,
            reason: String::new(),
            threshold: now(),
            shutdown_seen: None,
        }
    }

    #[test]
    fn disruption_write_table() {
        let target = web_0();
        let dead = ForceDelete {
            pod: target,
            blocks_rollout: None,
            lease_renewed: None,
            fencing_required: None,
            live: None,
            death: Some(DeathEvidence::Deleted),
        };
        let live =
            ForceDelete { live: Some(fixtures::live_deletion()), death: None, ..dead.clone() };
        let write = |condition, fail| Some(DisruptionWrite { condition, fail });
        let now = |phase, disruption_target| PodPhaseNow { phase, disruption_target };
        let table = [
            (
                "dead node, Running, no condition",
                &dead,
                now(Some("Running"), false),
                write(true, true),
            ),
            ("dead node, no phase reported", &dead, now(None, false), write(true, true)),
            (
                "dead node, the taint manager's condition there: only the phase",
                &dead,
                now(Some("Running"), true),
                write(false, true),
            ),
            (
                "dead node, a restart after our status write: nothing again",
                &dead,
                now(Some("Failed"), true),
                None,
            ),
            (
                "dead node, Succeeded: the phase stays",
                &dead,
                now(Some("Succeeded"), false),
                write(true, false),
            ),
            (
                "live node: the condition, the kubelet owns the phase",
                &live,
                now(Some("Running"), false),
                write(true, false),
            ),
            ("live node, condition there", &live, now(Some("Running"), true), None),
        ];
        for (case, fd, pod, want) in table {
            assert_eq!(fd.disruption_write(pod), want, "{case}");
        }
    }

    #[test]
    fn recheck_table() {
        let renewed = Some(t(0, 0));
        let fd = ForceDelete {
            pod: web_0(),
            blocks_rollout: None,
            lease_renewed: renewed,
            fencing_required: None,
            live: None,
            death: None,
        };
        let fenced =
            ForceDelete { fencing_required: Some(FencingRequirement::StatefulSet), ..fd.clone() };
        let pod = FreshPod {
            uid: Some("u1"),
            terminating: true,
            deletion: Some((t(0, 0), 0)),
            node: "n1",
            excluded: false,
            stale: false,
            failed_by_shutdown: false,
            ready: false,
        };
        let dead = FreshNode {
            observation: node("n1", "dead").observation,
            excluded: false,
            control: Default::default(),
            cordon_managers: vec![],
            out_of_service_added: None,
        };
        let enforce = FreshPolicy { mode: Mode::Enforce, paused: false, generation: Some(3) };
        let good = LastLook {
            pod: Some(pod),
            node: Some(dead.clone()),
            lease_renewed: renewed,
            policy: Some(enforce),
        };
        let oos = {
            let mut n = dead.clone();
            n.observation.taints =
                vec!["node.kubernetes.io/out-of-service:NoExecute".into()].into();
            n
        };
        struct Row {
            case: &'static str,
            action: ForceDelete,
            look: LastLook<'static>,
            want: Result<(), &'static str>,
        }
        let row = |case, look, want| Row { case, action: fd.clone(), look, want };
        let table = vec![
            row("still applies", good.clone(), Ok(())),
            row("gone", LastLook { pod: None, ..good.clone() }, Err("pod already gone")),
            row(
                "replaced by a pod with the same name",
                LastLook { pod: Some(FreshPod { uid: Some("u2"), ..pod }), ..good.clone() },
                Err("a new pod with the same name replaced it; left alone"),
            ),
            row(
                "no longer Terminating",
                LastLook { pod: Some(FreshPod { terminating: false, ..pod }), ..good.clone() },
                Err("pod is no longer Terminating"),
            ),
            row(
                "moved",
                LastLook { pod: Some(FreshPod { node: "n2", ..pod }), ..good.clone() },
                Err("pod moved to node \"n2\""),
            ),
            row(
                "pod excluded since the plan",
                LastLook { pod: Some(FreshPod { excluded: true, ..pod }), ..good.clone() },
                Err("pod annotated remediator.io/exclude=true; left alone"),
            ),
            row(
                "policy switched to DryRun",
                LastLook {
                    policy: Some(FreshPolicy {
                        mode: Mode::DryRun,
                        generation: Some(4),
                        ..enforce
                    }),
                    ..good.clone()
                },
                Err("the policy is in DryRun now; nothing deleted"),
            ),
            row(
                "policy paused",
                LastLook {
                    policy: Some(FreshPolicy { paused: true, generation: Some(4), ..enforce }),
                    ..good.clone()
                },
                Err("the policy is paused now; nothing deleted"),
            ),
            row(
                "policy changed otherwise",
                LastLook {
                    policy: Some(FreshPolicy { generation: Some(4), ..enforce }),
                    ..good.clone()
                },
                Err("the policy changed since the plan; its next evaluation decides"),
            ),
            row(
                "policy deleted",
                LastLook { policy: None, ..good.clone() },
                Err("the policy was deleted"),
            ),
            row(
                "Lease renewed since the plan",
                LastLook { lease_renewed: Some(t(0, 1)), ..good.clone() },
                Err(
                    "the node's Lease was renewed since the plan (renewTime 2026-01-01T00:00:00Z -> \
                     2026-01-01T00:00:01Z): its kubelet is alive; left alone",
                ),
            ),
            row(
                "Lease appeared since the plan",
                LastLook { lease_renewed: None, ..good.clone() },
                Err(
                    "the node's Lease was renewed since the plan (renewTime 2026-01-01T00:00:00Z -> \
                     none): its kubelet is alive; left alone",
                ),
            ),
            row(
                "node Ready again",
                LastLook {
                    node: Some(FreshNode {
                        observation: node("n1", "ready").observation,
                        excluded: false,
                        control: Default::default(),
                        cordon_managers: vec![],
                        out_of_service_added: None,
                    }),
                    ..good.clone()
                },
                Err("node is Ready again; left alone"),
            ),
            row(
                "node excluded since the plan",
                LastLook {
                    node: Some(FreshNode { excluded: true, ..dead.clone() }),
                    ..good.clone()
                },
                Err("node annotated remediator.io/exclude=true; left alone"),
            ),
            row("node deleted: still dead", LastLook { node: None, ..good.clone() }, Ok(())),
            Row {
                case: "fencing still there",
                action: fenced.clone(),
                look: LastLook { node: Some(oos.clone()), ..good.clone() },
                want: Ok(()),
            },
            Row {
                case: "fencing gone since the plan",
                action: fenced.clone(),
                look: good.clone(),
                want: Err("fencing evidence (StatefulSet) no longer on the node; left alone"),
            },
            Row {
                case: "node deleted counts as fencing",
                action: fenced.clone(),
                look: LastLook { node: None, ..good.clone() },
                want: Ok(()),
            },
        ];
        let fencing = crate::crd::FencingSpec::default();
        for r in table {
            assert_eq!(
                r.action.recheck(&r.look, Some(3), &fencing).map_err(|skip| skip.to_string()),
                r.want.map_err(String::from),
                "{}",
                r.case
            );
        }
    }
}
