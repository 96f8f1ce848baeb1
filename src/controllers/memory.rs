//! The path by which the one-shot commands (`cli/snapshot.rs`) start from a policy's past as
//! the operator does. The history itself, and everything the policy controller remembers, is
//! [`crate::core::history`].

use std::collections::BTreeSet;

use jiff::Timestamp;

use crate::core::{Past, PastAction, PolicyHistory};
use crate::crd::{Mode, RemediationPolicyStatus};

/// A fresh [`PolicyHistory`], as after a restart.
#[derive(Debug, Default)]
pub struct PolicyMemory(PolicyHistory);

impl PolicyMemory {
    /// The recent actions (for rate limits) and the pods already acted on that the status
    /// records in `mode` ([`PolicyHistory::past`]).
    pub fn history(
        &mut self,
        mode: Mode,
        status: Option<&RemediationPolicyStatus>,
        now: Timestamp,
    ) -> (Vec<PastAction>, BTreeSet<String>) {
        let Past { recent, acted, .. } = self.0.past(mode, status, now);
        (recent, acted)
    }
}
