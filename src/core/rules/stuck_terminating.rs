//! `stuckTerminating`: releases every Terminating pod on a dead node once its grace period and
//! `delayAfterGrace` have passed, under the shared release gates and guards.
//!
//! A module of its own, like every rule: what the rule applies to and with which delay is stated
//! here and nowhere else.

use jiff::SignedDuration;

use crate::core::observed::PodView;
use crate::core::policy::ValidatedPolicy;

/// Whether the rule applies to a Terminating pod, and with which `delayAfterGrace`: to every pod,
/// while the rule is enabled.
pub fn delay(_pod: &PodView, policy: &ValidatedPolicy) -> Option<SignedDuration> {
    policy.stuck_terminating_delay
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RemediationPolicySpec;

    #[test]
    fn applies_to_every_pod_while_enabled() {
        struct Row {
            case: &'static str,
            enabled: bool,
            want: Option<SignedDuration>,
        }
        let table = [
            Row { case: "enabled", enabled: true, want: Some(SignedDuration::from_secs(90)) },
            Row { case: "disabled", enabled: false, want: None },
        ];
        let pod = crate::core::observed::fixtures::pod("web-1-abc", "n1");
        for r in table {
            let mut spec = RemediationPolicySpec::default();
            spec.stuck_terminating.enabled = r.enabled;
            spec.stuck_terminating.delay_after_grace = "90s".into();
            let policy = crate::core::validate(&spec).expect("valid test policy");
            assert_eq!(delay(&pod, &policy), r.want, "{}", r.case);
        }
    }
}
