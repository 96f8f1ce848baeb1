//! Records stored ahead of an action's due instant. Every request is recorded (`Pending`)
//! before it is sent; for an action that becomes due at an instant known in advance (a pod's
//! grace and `delayAfterGrace` running out on a dead node, a node crossing `notReadyFor`), the
//! record can be stored before that instant, so that when it comes the request waits only for
//! its last look, not for a status write as well.
//!
//! Only for the one live policy: two overlapping policies could both record a pod ahead, and
//! after a restart before either acted the records could not say which did. Not for a retry
//! after a failure: while it backs off its status keeps one record, the latest `Failed` one.
//!
//! How: a plan's next deadline [`RECORD_AHEAD`] or less away is planned again at that instant,
//! from what is observed now; the actions that plan takes and this one does not get their
//! `Pending` record now, saying when they are due. At the deadline the plan is made afresh as
//! always; its actions whose record this run stored (and the status last written still holds)
//! are sent without another record. A record stored ahead whose action the plan at or after its
//! due instant does not take (the node came back, the pod went) is replaced by a `Skipped` one.
//! A restart in between leaves a `Pending` record as any other, resolved by the next run from
//! what the cluster shows.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use super::action::{Action, PodTarget};
use super::plan::{Plan, plan};
use super::status::push_recent_actions;
use super::{Observed, ValidatedPolicy};
use crate::crd::{ActionKind, ActionResult, Mode, RecentAction, RemediationPolicyStatus};

/// How long before its due instant an action's record may be stored: long enough for a status
/// write on a busy API server, short enough that a record rarely waits for an action that does
/// not come.
pub const RECORD_AHEAD: SignedDuration = SignedDuration::from_secs(1);

/// What a record is about: the UID of its pod or node, and the action.
pub type RecordKey = (String, ActionKind);

/// No record stored ahead: for commits outside a plan (an invalid spec, tests).
pub static NOTHING_AHEAD: BTreeSet<RecordKey> = BTreeSet::new();

/// What one decision does with records ahead of their actions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ahead {
    /// `Pending` records of actions due at the plan's next deadline, to be stored now.
    pub records: Vec<RecentAction>,
    /// Their keys, with the instant each is due at: the history keeps them once stored.
    pub recorded: Vec<(RecordKey, Timestamp)>,
    /// `Skipped` records replacing those stored ahead whose action did not come when due.
    pub withdrawn: Vec<RecentAction>,
    /// The keys the history forgets once the status is written: the withdrawn ones.
    pub forgotten: Vec<RecordKey>,
    /// The plan's actions whose `Pending` record is stored already: sent without another.
    pub stored: BTreeSet<RecordKey>,
    /// When to decide again for them: ahead of the next deadline, to record its actions; at a
    /// stored record's due instant, to take or withdraw it.
    pub wake_at: Option<Timestamp>,
    /// The pods of the force deletes recorded now, with their due instant: once the records
    /// are stored, their last looks' reads may be sent shortly before it (the writer's
    /// `LOOK_EARLY`), so that the look made when they are due finds them answered.
    pub early_looks: Vec<(Timestamp, PodTarget)>,
}

/// The key of a record.
pub fn record_key(record: &RecentAction) -> RecordKey {
    (record.uid.clone(), record.action)
}

/// What `plan` (made at `now`) does with records ahead: `stored_ahead` are the records this
/// run stored ahead (by key, with their due instants), `previous` the status last written.
pub fn ahead(
    observed: &Observed,
    policy: &ValidatedPolicy,
    now_plan: &Plan,
    stored_ahead: &BTreeMap<RecordKey, Timestamp>,
    previous: Option<&RemediationPolicyStatus>,
    now: Timestamp,
) -> Ahead {
    // Only Enforce sends; in DryRun (switched to within the second) a record ahead is withdrawn.
    let sent = now_plan.actions.iter().filter(|_| policy.mode == Mode::Enforce);
    let acting: BTreeSet<RecordKey> = sent.map(Action::record_key).collect();
    let held: BTreeMap<RecordKey, &RecentAction> =
        enforced(previous, ActionResult::Pending).map(|r| (record_key(r), r)).collect();
    // A retry after a failure keeps one record, its latest Failed one, while it backs off.
    let failed: BTreeSet<RecordKey> =
        enforced(previous, ActionResult::Failed).map(record_key).collect();
    let mut out = Ahead::default();
    for (key, due) in stored_ahead {
        if acting.contains(key) {
            if held.contains_key(key) {
                out.stored.insert(key.clone());
            }
        } else if *due <= now {
            if let Some(record) = held.get(key) {
                out.withdrawn.push(withdrawn(record, *due, now));
            }
            out.forgotten.push(key.clone());
        } else {
            out.wake_at = earliest(out.wake_at, *due);
        }
    }
    // With another live policy, both could record the same pod ahead, and a restart before
    // either acted could not tell which did: each is recorded at its instant instead.
    let alone = observed
        .acting
        .live_policies
        .as_ref()
        .is_some_and(|live| live.len() == 1 && live.contains(&observed.acting.policy));
    let enforcing = policy.mode == Mode::Enforce && alone;
    let Some(deadline) = now_plan.next_deadline.filter(|_| enforcing) else {
        return out;
    };
    if !now_plan.synced || deadline <= now {
        return out;
    }
    if deadline.duration_since(now) > RECORD_AHEAD {
        out.wake_at = earliest(out.wake_at, deadline - RECORD_AHEAD);
        return out;
    }
    let then = plan(observed, policy, deadline);
    for action in &then.actions {
        let key = action.record_key();
        let stored = stored_ahead.contains_key(&key) && held.contains_key(&key);
        if acting.contains(&key) || stored || failed.contains(&key) {
            continue;
        }
        let detail = format!("due at {deadline}: recorded ahead, before the request");
        out.records.push(action.pending_record(now, detail));
        out.recorded.push((key, deadline));
        if let Action::ForceDelete(fd) = action {
            out.early_looks.push((deadline, fd.pod.clone()));
        }
    }
    out
}

/// The `Pending` records a commit stores before its requests, added to `status` (the decision's,
/// with its records ahead and withdrawals): one for each action whose record was not stored
/// ahead (`recorded_ahead`); and if that pushes out one stored ahead (the status keeps
/// [`crate::crd::MAX_RECENT_ACTIONS`] records, newest first), one again, now, for every action
/// stored ahead: the batch's records then come first, and a plan's batch is never more than the
/// status keeps. So every request goes out with its record in the status as stored. Returns
/// whether the status must be written before the requests: not when every record was stored
/// ahead (the status as stored holds them all).
pub fn records_before_requests(
    status: &mut RemediationPolicyStatus,
    actions: &[Action],
    recorded_ahead: &BTreeSet<RecordKey>,
    now: Timestamp,
) -> bool {
    let (ahead, unrecorded): (Vec<&Action>, Vec<&Action>) =
        actions.iter().partition(|a| recorded_ahead.contains(&a.record_key()));
    if unrecorded.is_empty() {
        return false;
    }
    let detail = || "being sent: recorded before the request".to_string();
    push_recent_actions(status, unrecorded.iter().map(|a| a.pending_record(now, detail())));
    let holds = |status: &RemediationPolicyStatus, key: &RecordKey| {
        enforced(Some(status), ActionResult::Pending).any(|r| record_key(r) == *key)
    };
    if ahead.iter().any(|a| !holds(status, &a.record_key())) {
        let again = "being sent: recorded again before the request";
        // Pushed last, they come first among the records of this instant.
        push_recent_actions(status, ahead.iter().map(|a| a.pending_record(now, again.into())));
    }
    true
}

/// The Enforce records of `status` with this result.
fn enforced(
    status: Option<&RemediationPolicyStatus>,
    result: ActionResult,
) -> impl Iterator<Item = &RecentAction> {
    let records = status.into_iter().flat_map(|s| &s.recent_actions);
    records.filter(move |r| r.result == result && r.mode == Mode::Enforce)
}

/// The record replacing one stored ahead whose action did not come.
fn withdrawn(record: &RecentAction, due: Timestamp, now: Timestamp) -> RecentAction {
    RecentAction {
        time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        result: ActionResult::Skipped,
        detail: Some(format!(
            "recorded ahead of its due instant {due}, never sent: the plan at that instant did \
             not take it (it is decided again from then on)"
        )),
        ..record.clone()
    }
}

fn earliest(a: Option<Timestamp>, b: Timestamp) -> Option<Timestamp> {
    Some(a.map_or(b, |a| a.min(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{ForceDelete, PodTarget};
    use crate::crd::MAX_RECENT_ACTIONS;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("ts")
    }

    fn force_delete(i: usize) -> Action {
        Action::ForceDelete(ForceDelete {
            pod: PodTarget {
                namespace: "ns".into(),
                name: format!("web-{i}"),
                uid: format!("uid-{i}"),
                node: "n1".into(),
                owner: None,
                reason: "node n1 dead".into(),
                threshold: at(0),
                shutdown_seen: None,
            },
            blocks_rollout: None,
            lease_renewed: None,
            fencing_required: None,
            live: None,
            death: None,
        })
    }

    fn holds_pending(status: &RemediationPolicyStatus, action: &Action) -> bool {
        status
            .recent_actions
            .iter()
            .any(|r| r.result == ActionResult::Pending && record_key(r) == action.record_key())
    }

    /// Every action of a batch has its `Pending` record in what is written before the requests,
    /// however many newer records (ahead of the next deadline, withdrawals, earlier outcomes)
    /// the status holds; none is written when every record was stored ahead.
    #[test]
    fn every_request_goes_out_with_its_record_in_the_status_as_stored() {
        struct Row {
            case: &'static str,
            /// The batch: this many actions, the first `stored` of them recorded ahead (1 s
            /// before `now`, in the status as stored).
            batch: usize,
            stored: usize,
            /// Records newer than those ahead already in the status to write (the decision's
            /// records ahead of the next deadline, withdrawals: `now`).
            newer: usize,
            write_first: bool,
        }
        let rows = [
            Row { case: "nothing ahead", batch: 3, stored: 0, newer: 0, write_first: true },
            Row { case: "all ahead", batch: 5, stored: 5, newer: 19, write_first: false },
            Row { case: "some ahead, room left", batch: 5, stored: 2, newer: 3, write_first: true },
            Row {
                case: "some ahead, pushed out",
                batch: 20,
                stored: 15,
                newer: 10,
                write_first: true,
            },
            Row {
                case: "one ahead, a full status",
                batch: 2,
                stored: 1,
                newer: 20,
                write_first: true,
            },
        ];
        for row in rows {
            let batch: Vec<Action> = (0..row.batch).map(force_delete).collect();
            let recorded: BTreeSet<RecordKey> =
                batch.iter().take(row.stored).map(Action::record_key).collect();
            let mut status = RemediationPolicyStatus::default();
            let ahead =
                batch.iter().take(row.stored).map(|a| a.pending_record(at(-1), "due".into()));
            push_recent_actions(&mut status, ahead);
            let newer = (100..100 + row.newer)
                .map(|i| force_delete(i).pending_record(at(0), "due at the next deadline".into()));
            push_recent_actions(&mut status, newer);
            let before = status.clone();
            let write_first = records_before_requests(&mut status, &batch, &recorded, at(0));
            assert_eq!(write_first, row.write_first, "{}", row.case);
            if !write_first {
                assert_eq!(status, before, "{}: nothing added when nothing is written", row.case);
                continue;
            }
            assert!(status.recent_actions.len() <= MAX_RECENT_ACTIONS, "{}", row.case);
            for action in &batch {
                assert!(holds_pending(&status, action), "{}: {:?}", row.case, action.record_key());
            }
        }
    }
}
