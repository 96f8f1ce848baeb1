//! Per-zone awareness: a zone where every node went unhealthy at once looks like a partition
//! (a switch, a link, a zone's power feed) more than like machines dying, and gets no
//! destructive action until one of its nodes comes back. The node lifecycle controller stops
//! evicting in such a zone for the same reason ("full disruption").
//!
//! "At once" means the nodes were all seen leaving Ready within [`AT_ONCE`]. A zone needs at
//! least [`MIN_ZONE_NODES`] nodes: a single-node zone cannot tell a partition from a death.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::observed::{NodeView, Readiness};

/// The node label naming its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Nodes seen leaving Ready within this of each other went unhealthy "at once".
pub const AT_ONCE: SignedDuration = SignedDuration::from_secs(60);
/// The fewest nodes a zone needs for its full outage to read as a partition.
pub const MIN_ZONE_NODES: usize = 2;

/// The zones that look partitioned, with how many nodes each has.
pub fn partitioned_zones(nodes: &[NodeView]) -> BTreeMap<String, u32> {
    let mut zones: BTreeMap<&str, Vec<&NodeView>> = BTreeMap::new();
    for node in nodes.iter().filter(|n| !n.deleted) {
        if let Some(zone) = node.labels.get(ZONE_LABEL) {
            zones.entry(zone).or_default().push(node);
        }
    }
    zones
        .into_iter()
        .filter(|(_, nodes)| nodes.len() >= MIN_ZONE_NODES)
        .filter_map(|(zone, nodes)| {
            let since: Option<Vec<Timestamp>> = nodes
                .iter()
                .map(|n| {
                    let obs = &n.observation;
                    if obs.readiness == Readiness::Ready { None } else { obs.not_ready_seen }
                })
                .collect();
            let since = since?;
            let (first, last) = (since.iter().min()?, since.iter().max()?);
            (last.duration_since(*first) <= AT_ONCE)
                .then(|| (zone.to_string(), u32::try_from(nodes.len()).unwrap_or(u32::MAX)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("test instant")
    }

    fn node(name: &str, zone: Option<&str>, not_ready_since: Option<i64>) -> NodeView {
        let mut n = NodeView::deleted_unknown(name);
        n.deleted = false;
        n.observation.readiness =
            if not_ready_since.is_some() { Readiness::Unknown } else { Readiness::Ready };
        n.observation.not_ready_seen = not_ready_since.map(at);
        if let Some(zone) = zone {
            n.labels.insert(ZONE_LABEL.into(), zone.into());
        }
        n
    }

    struct Row {
        case: &'static str,
        nodes: Vec<NodeView>,
        want: &'static [(&'static str, u32)],
    }

    #[test]
    fn partitioned_zones_table() {
        let table = [
            Row {
                case: "every node of a zone down within a minute",
                nodes: vec![node("a1", Some("a"), Some(0)), node("a2", Some("a"), Some(30))],
                want: &[("a", 2)],
            },
            Row {
                case: "one node still Ready",
                nodes: vec![
                    node("a1", Some("a"), Some(0)),
                    node("a2", Some("a"), Some(0)),
                    node("a3", Some("a"), None),
                ],
                want: &[],
            },
            Row {
                case: "down one after the other: deaths, not a partition",
                nodes: vec![node("a1", Some("a"), Some(0)), node("a2", Some("a"), Some(61))],
                want: &[],
            },
            Row {
                case: "a single-node zone cannot tell",
                nodes: vec![node("a1", Some("a"), Some(0)), node("b1", Some("b"), None)],
                want: &[],
            },
            Row {
                case: "nodes without a zone are no zone",
                nodes: vec![node("x1", None, Some(0)), node("x2", None, Some(0))],
                want: &[],
            },
        ];
        for r in table {
            let got = partitioned_zones(&r.nodes);
            let want: BTreeMap<String, u32> =
                r.want.iter().map(|(z, n)| (z.to_string(), *n)).collect();
            assert_eq!(got, want, "{}", r.case);
        }
    }
}
