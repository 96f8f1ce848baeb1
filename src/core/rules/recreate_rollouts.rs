//! `recreateRollouts`: releases the Terminating pods that block the rollout of a Recreate
//! Deployment or a StatefulSet (see [`crate::core::rollouts`]), with its own `delayAfterGrace`,
//! under the shared release gates and guards.
//!
//! A module of its own, like every rule: what the rule applies to and with which delay is stated
//! here and nowhere else.

use jiff::SignedDuration;

use crate::core::observed::PodView;
use crate::core::policy::ValidatedPolicy;

/// Whether the rule applies to a Terminating pod, and with which `delayAfterGrace`: to a pod
/// that blocks a rollout, while the rule is enabled.
pub fn delay(pod: &PodView, policy: &ValidatedPolicy) -> Option<SignedDuration> {
    pod.blocks_rollout.as_ref().and(policy.recreate_rollouts_delay)
}

/// What the release of a blocking pod unblocks, for its reason; said whichever rule releases it.
pub fn note(pod: &PodView) -> Option<String> {
    pod.blocks_rollout.as_ref().map(|w| format!("; blocks the rollout of {w}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observed::{WorkloadKind, WorkloadRef};
    use crate::crd::RemediationPolicySpec;

    #[test]
    fn applies_to_blocking_pods_while_enabled() {
        struct Row {
            case: &'static str,
            enabled: bool,
            blocks: bool,
            want: Option<SignedDuration>,
            note: Option<&'static str>,
        }
        let secs = |s| Some(SignedDuration::from_secs(s));
        let blocking = Some("; blocks the rollout of Deployment default/web");
        let table = [
            Row {
                case: "blocking, enabled",
                enabled: true,
                blocks: true,
                want: secs(0),
                note: blocking,
            },
            Row {
                case: "blocking, disabled",
                enabled: false,
                blocks: true,
                want: None,
                note: blocking,
            },
            Row { case: "not blocking", enabled: true, blocks: false, want: None, note: None },
        ];
        for r in table {
            let mut spec = RemediationPolicySpec::default();
            spec.recreate_rollouts.enabled = r.enabled;
            spec.recreate_rollouts.delay_after_grace = "0s".into();
            let policy = crate::core::validate(&spec).expect("valid test policy");
            let mut pod = crate::core::observed::fixtures::pod("web-1-abc", "n1");
            if r.blocks {
                pod.blocks_rollout = Some(Box::new(WorkloadRef {
                    kind: WorkloadKind::Deployment,
                    namespace: "default".into(),
                    name: "web".into(),
                    uid: "d".into(),
                }));
            }
            assert_eq!(delay(&pod, &policy), r.want, "{}", r.case);
            assert_eq!(note(&pod).as_deref(), r.note, "{}", r.case);
        }
    }
}
