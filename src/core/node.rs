//! Node health from the evidence a kubelet leaves behind: the NodeReady condition and the
//! kubelet's Lease in `kube-node-lease`.

use jiff::{SignedDuration, Timestamp};

/// The status of a node's `Ready` condition as the node lifecycle controller reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// `Ready=True`: the kubelet reports healthy.
    Ready,
    /// `Ready=False`: the kubelet reports a problem, so it is alive.
    NotReady,
    /// `Ready=Unknown`: the node controller stopped hearing from the kubelet.
    Unknown,
    /// No `Ready` condition yet (a node that never started).
    Missing,
}

impl Readiness {
    /// Parses a condition status (`True`, `False`, `Unknown`); `None` means no condition.
    pub fn from_condition_status(status: Option<&str>) -> Self {
        match status {
            Some("True") => Readiness::Ready,
            Some("False") => Readiness::NotReady,
            Some(_) => Readiness::Unknown,
            None => Readiness::Missing,
        }
    }

    /// The word shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Ready => "Ready",
            Readiness::NotReady => "NotReady",
            Readiness::Unknown => "Unknown",
            Readiness::Missing => "NoCondition",
        }
    }
}

/// What is known about one node, extracted from its Node object and kubelet Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeObservation {
    pub name: String,
    pub readiness: Readiness,
    /// When the `Ready` condition last changed status.
    pub ready_transition: Option<Timestamp>,
    /// When the kubelet last renewed its Lease (`spec.renewTime`).
    pub lease_renewed: Option<Timestamp>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `key:effect` of each taint.
    pub taints: Vec<String>,
}

/// The assessed health of one node at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHealth {
    pub readiness: Readiness,
    /// How long the node has been anything but Ready (None while Ready or when unknown).
    pub not_ready_for: Option<SignedDuration>,
    /// How long ago the kubelet last renewed its Lease (None without a Lease).
    pub lease_age: Option<SignedDuration>,
}

impl NodeHealth {
    /// A node is healthy when it is Ready.
    pub fn is_healthy(&self) -> bool {
        self.readiness == Readiness::Ready
    }
}

/// Assesses a node at `now`. Timestamps in the future (clock skew) count as zero age.
pub fn assess_node(node: &NodeObservation, now: Timestamp) -> NodeHealth {
    let age = |t: Timestamp| now.duration_since(t).max(SignedDuration::ZERO);
    NodeHealth {
        readiness: node.readiness,
        not_ready_for: match node.readiness {
            Readiness::Ready | Readiness::Missing => None,
            Readiness::NotReady | Readiness::Unknown => node.ready_transition.map(age),
        },
        lease_age: node.lease_renewed.map(age),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    #[test]
    fn readiness_from_condition_status() {
        let table = [
            (Some("True"), Readiness::Ready),
            (Some("False"), Readiness::NotReady),
            (Some("Unknown"), Readiness::Unknown),
            (Some("garbage"), Readiness::Unknown),
            (None, Readiness::Missing),
        ];
        for (status, want) in table {
            assert_eq!(Readiness::from_condition_status(status), want, "status {status:?}");
        }
    }

    #[test]
    fn assess_node_table() {
        let now = ts("2026-01-01T00:10:00Z");
        let node = |readiness, transition: Option<&str>, lease: Option<&str>| NodeObservation {
            name: "n".into(),
            readiness,
            ready_transition: transition.map(ts),
            lease_renewed: lease.map(ts),
            unschedulable: false,
            taints: vec![],
        };
        let secs = |s| Some(SignedDuration::from_secs(s));
        let table = [
            // (case, node, healthy, not_ready_for, lease_age)
            (
                "ready with fresh lease",
                node(Readiness::Ready, Some("2026-01-01T00:00:00Z"), Some("2026-01-01T00:09:58Z")),
                true,
                None,
                secs(2),
            ),
            (
                "unknown for five minutes",
                node(
                    Readiness::Unknown,
                    Some("2026-01-01T00:05:00Z"),
                    Some("2026-01-01T00:04:20Z"),
                ),
                false,
                secs(300),
                secs(340),
            ),
            (
                "not ready without lease",
                node(Readiness::NotReady, Some("2026-01-01T00:09:00Z"), None),
                false,
                secs(60),
                None,
            ),
            (
                "lease renewed in the future (skew) counts as zero",
                node(Readiness::Ready, None, Some("2026-01-01T00:10:05Z")),
                true,
                None,
                secs(0),
            ),
            ("no condition yet", node(Readiness::Missing, None, None), false, None, None),
        ];
        for (case, obs, healthy, not_ready_for, lease_age) in table {
            let health = assess_node(&obs, now);
            assert_eq!(health.is_healthy(), healthy, "{case}");
            assert_eq!(health.not_ready_for, not_ready_for, "{case}");
            assert_eq!(health.lease_age, lease_age, "{case}");
        }
    }
}
