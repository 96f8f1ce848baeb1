//! What every policy in Enforce did, shared by all of them: the per-owner budgets are one
//! budget whatever number of policies select a pod, and a pod one policy acted on is not acted
//! on again by another. Plain data: the controller holds it under a lock from observing to
//! recording by each Enforce reconcile, so two overlapping policies never decide on the same pod
//! at the same time.

use std::collections::BTreeSet;

use jiff::Timestamp;

use super::guards::RATE_WINDOW;
use super::history::{ActionOutcome, owner_key};
use super::observed::{Observed, PastAction};

#[derive(Debug, Default)]
pub struct Ledger {
    /// Recent actions, with the policy that took them.
    actions: Vec<(String, PastAction)>,
    /// Pods acted on, by UID (forgotten once gone).
    acted: BTreeSet<String>,
}

impl Ledger {
    /// The other policies' actions of the last minute, and every pod acted on.
    pub fn for_policy(
        &mut self,
        policy: &str,
        now: Timestamp,
    ) -> (Vec<PastAction>, BTreeSet<String>) {
        self.actions.retain(|(_, a)| now.duration_since(a.at) < RATE_WINDOW);
        let others =
            self.actions.iter().filter(|(p, _)| p != policy).map(|(_, a)| a.clone()).collect();
        (others, self.acted.clone())
    }

    /// Records a policy's outcomes in Enforce. Pods no longer present in what the policy
    /// `observed` are forgotten.
    pub fn record(&mut self, policy: &str, outcomes: &[ActionOutcome<'_>], observed: &Observed) {
        let live: BTreeSet<&str> = observed.pods.iter().map(|p| p.uid.as_str()).collect();
        self.acted.retain(|key| live.contains(key.split('/').next().unwrap_or_default()));
        for outcome in outcomes.iter().filter(|o| o.record.result.spends_budget()) {
            let action = PastAction { at: outcome.record.time.0, owner: owner_key(outcome.record) };
            self.actions.push((policy.to_string(), action));
            // Every pod action, once, whichever policy took it: one eviction per pod across
            // every policy, as one force delete.
            let pod_action = !outcome.record.namespace.is_empty();
            if outcome.handled && pod_action {
                self.acted.insert(outcome.acted_key.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::tests::{at, record};
    use crate::core::observed::fixtures::pod;
    use crate::crd::{ActionKind, ActionResult, Mode, RecentAction};

    #[test]
    fn every_policy_sees_the_others_actions_and_every_pod_acted_on() {
        let done = record("uid-web-0", Mode::Enforce, ActionResult::Done, 0);
        let cordon = RecentAction {
            action: ActionKind::Cordon,
            namespace: String::new(),
            ..record("uid-n1", Mode::Enforce, ActionResult::Done, 0)
        };
        let skipped = record("uid-web-1", Mode::Enforce, ActionResult::Skipped, 0);
        let outcome = |record, handled| ActionOutcome { record, handled, acted_key: &record.uid };
        let outcomes = [outcome(&done, true), outcome(&cordon, true), outcome(&skipped, false)];
        let observed = Observed { pods: vec![pod("web-0", "n1").into()], ..Default::default() };
        let mut ledger = Ledger::default();
        ledger.record("a", &outcomes, &observed);

        // (case, asking policy, seconds later, the others' actions, the pods acted on)
        let table = [
            ("its own actions are not the others'", "a", 1, 0, vec!["uid-web-0"]),
            ("another sees both sent actions, one pod", "b", 1, 2, vec!["uid-web-0"]),
            ("a minute later the budget is free again", "b", 60, 0, vec!["uid-web-0"]),
        ];
        for (case, policy, later, others, acted) in table {
            let (theirs, acted_on) = ledger.for_policy(policy, at(later));
            let acted_on: Vec<&str> = acted_on.iter().map(String::as_str).collect();
            assert_eq!((theirs.len(), acted_on), (others, acted), "{case}");
        }
        // Forgotten once the pod is gone.
        ledger.record("a", &[], &Observed::default());
        assert!(ledger.for_policy("b", at(61)).1.is_empty());
    }
}
