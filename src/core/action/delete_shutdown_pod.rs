//! A normal DELETE of a pod left Failed by a graceful node shutdown (`failedByShutdown`).

use jiff::Timestamp;

use super::{Act, LastLook, PodTarget, Skip, Target, policy_still_enforces, same_pod};
use crate::crd::{ActionKind, FencingSpec};

/// A DELETE (no grace period given: the API server removes a Failed pod at once) with a UID
/// precondition of a pod whose phase is Failed with a graceful node shutdown's reason, seen so by
/// the operator for `failedByShutdown.deleteAfter`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteShutdownPod {
    pub pod: PodTarget,
    /// Its `status.reason` as planned (`Terminated`, `Shutdown`, `NodeShutdown`).
    pub shutdown_reason: String,
    /// When the operator first saw it so, by its own clock.
    pub seen: Timestamp,
}

impl Act for DeleteShutdownPod {
    fn kind(&self) -> ActionKind {
        ActionKind::DeleteShutdownPod
    }

    fn target(&self) -> Target<'_> {
        Target::Pod(&self.pod)
    }

    /// Stands with the same pod, not Terminating, not excluded, still Failed with a shutdown's
    /// reason.
    fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        _: &FencingSpec,
    ) -> Result<(), Skip> {
        policy_still_enforces(look.policy, planned_generation, "deleted")?;
        let pod = same_pod(look, &self.pod)?;
        if pod.terminating {
            return Err(Skip::PodTerminatingAlready);
        }
        if pod.excluded {
            return Err(Skip::PodExcluded);
        }
        if !pod.failed_by_shutdown {
            return Err(Skip::PodNoLongerFailedByShutdown);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::action::{FreshPod, FreshPolicy, PolicySkip};
    use crate::crd::Mode;

    #[test]
    fn recheck_table() {
        let action = DeleteShutdownPod {
            pod: PodTarget {
                namespace: "ns".into(),
                name: "p".into(),
                uid: "u1".into(),
                node: "n1".into(),
                owner: None,
                reason: "left Failed".into(),
                threshold: Timestamp::UNIX_EPOCH,
                shutdown_seen: None,
            },
            shutdown_reason: "Terminated".into(),
            seen: Timestamp::UNIX_EPOCH,
        };
        let fresh = FreshPod {
            uid: Some("u1"),
            terminating: false,
            deletion: None,
            node: "n1",
            excluded: false,
            stale: false,
            failed_by_shutdown: true,
            ready: false,
        };
        let enforce = FreshPolicy { mode: Mode::Enforce, paused: false, generation: Some(1) };
        type Row<'a> = (&'a str, Option<FreshPod<'a>>, FreshPolicy, Result<(), Skip>);
        let table: Vec<Row> = vec![
            ("stands", Some(fresh), enforce, Ok(())),
            ("gone", None, enforce, Err(Skip::PodGone)),
            (
                "replaced",
                Some(FreshPod { uid: Some("u2"), ..fresh }),
                enforce,
                Err(Skip::PodReplaced),
            ),
            (
                "being deleted",
                Some(FreshPod { terminating: true, ..fresh }),
                enforce,
                Err(Skip::PodTerminatingAlready),
            ),
            (
                "excluded",
                Some(FreshPod { excluded: true, ..fresh }),
                enforce,
                Err(Skip::PodExcluded),
            ),
            (
                "no longer Failed by a shutdown",
                Some(FreshPod { failed_by_shutdown: false, ..fresh }),
                enforce,
                Err(Skip::PodNoLongerFailedByShutdown),
            ),
            (
                "policy in DryRun now",
                Some(fresh),
                FreshPolicy { mode: Mode::DryRun, ..enforce },
                Err(PolicySkip::NotEnforcing { mode: Mode::DryRun, verb: "deleted" }.into()),
            ),
        ];
        for (case, pod, policy, want) in table {
            let look = LastLook { pod, node: None, lease_renewed: None, policy: Some(policy) };
            assert_eq!(action.recheck(&look, Some(1), &FencingSpec::default()), want, "{case}");
        }
    }
}
