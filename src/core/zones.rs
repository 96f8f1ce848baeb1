//! Per-zone awareness, as the node lifecycle controller sees zones: a zone where every node is
//! unhealthy now looks like a partition (a switch, a link, a zone's power feed) more than like
//! machines dying, however long ago its first node went, and gets no destructive action until
//! its nodes come back. The node lifecycle controller stops evicting in such a zone for the
//! same reason ("full disruption").
//!
//! - A node's zone is its `topology.kubernetes.io/zone` label, else the deprecated
//!   `failure-domain.beta.kubernetes.io/zone`, else the one zone of every unlabelled node (as
//!   upstream groups them).
//! - A zone needs at least [`MIN_ZONE_NODES`] nodes: a single-node zone cannot tell a partition
//!   from a death. Nodes that never reported Ready (no condition yet) and tombstones are not
//!   members.
//! - A zone coming back from a partition stays held for [`ZONE_COOLDOWN`] after its first node
//!   returned, while some of its nodes are still unhealthy: a partition heals node by node, and
//!   the nodes still out are most likely on their way back, not dead. "Returned" is a return
//!   the operator watched ([`crate::core::NodeControl::last_outage`]), so a restart does not
//!   hold every zone with a dead node.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::duration::add;
use super::observed::{NodeView, Readiness};

/// The node label naming its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The zone label before `topology.kubernetes.io/zone` (still set by some providers alone).
pub const DEPRECATED_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
/// The fewest nodes a zone needs for its full outage to read as a partition.
pub const MIN_ZONE_NODES: usize = 2;
/// How long a zone returning from a partition stays held while some of its nodes are still
/// out: one kubelet Lease duration (40 s), in which every kubelet of a healed partition renews
/// (every 10 s) at least a few times. A node still silent after that is not on its way back,
/// and the dead-node rules judge it (its own `leaseStaleFor` still runs from its last renewal).
pub const ZONE_COOLDOWN: SignedDuration = SignedDuration::from_secs(40);

/// Why a zone holds every destructive action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneHold {
    /// Every one of its `nodes` is unhealthy now.
    Partitioned { nodes: u32 },
    /// It is coming back from a partition: its Ready nodes all returned within
    /// [`ZONE_COOLDOWN`]; held until `until`.
    Returning { nodes: u32, until: Timestamp },
}

/// The zone a node belongs to (`""`: the zone of every unlabelled node).
pub fn zone_of(node: &NodeView) -> &str {
    let labels = &node.labels;
    labels.get(ZONE_LABEL).or_else(|| labels.get(DEPRECATED_ZONE_LABEL)).unwrap_or("")
}

/// The zones that hold every destructive action at `now`, by zone.
pub fn held_zones(nodes: &[impl Borrow<NodeView>], now: Timestamp) -> BTreeMap<String, ZoneHold> {
    let mut zones: BTreeMap<&str, Vec<&NodeView>> = BTreeMap::new();
    for node in nodes.iter().map(Borrow::borrow).filter(|n: &&NodeView| !n.deleted) {
        if node.observation.readiness != Readiness::Missing {
            zones.entry(zone_of(node)).or_default().push(node);
        }
    }
    zones
        .into_iter()
        .filter(|(_, nodes)| nodes.len() >= MIN_ZONE_NODES)
        .filter_map(|(zone, members)| {
            let nodes = u32::try_from(members.len()).unwrap_or(u32::MAX);
            let ready: Vec<&&NodeView> =
                members.iter().filter(|n| n.observation.readiness == Readiness::Ready).collect();
            if ready.is_empty() {
                return Some((zone.to_string(), ZoneHold::Partitioned { nodes }));
            }
            if ready.len() == members.len() {
                return None;
            }
            // Some back, some still out: held while every node back returned lately.
            let returns: Option<Vec<Timestamp>> =
                ready.iter().map(|n| n.control.rare.last_outage.map(|o| o.to)).collect();
            let first = returns?.into_iter().min()?;
            let until = add(first, ZONE_COOLDOWN);
            (now < until).then(|| (zone.to_string(), ZoneHold::Returning { nodes, until }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observed::Outage;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("test instant")
    }

    /// A node in `zone` (under `label`), unhealthy since `down` or Ready, back from an outage
    /// watched to end at `back`.
    fn node(zone: Option<(&str, &str)>, down: Option<i64>, back: Option<i64>) -> NodeView {
        let mut n = NodeView::unknown("n");
        n.observation.readiness =
            if down.is_some() { Readiness::Unknown } else { Readiness::Ready };
        n.observation.not_ready_seen = down.map(at).into();
        n.control
            .rare
            .update(|r| r.last_outage = back.map(|b| Outage { from: at(b - 100), to: at(b) }));
        if let Some((label, zone)) = zone {
            n.labels.insert(label, zone);
        }
        n
    }

    #[test]
    fn held_zones_table() {
        let (z, dep) = (ZONE_LABEL, DEPRECATED_ZONE_LABEL);
        let a = Some((z, "a"));
        let now = 1000;
        let partitioned = |n| ZoneHold::Partitioned { nodes: n };
        let returning = |n, until| ZoneHold::Returning { nodes: n, until: at(until) };
        type Row = (&'static str, Vec<NodeView>, Vec<(&'static str, ZoneHold)>);
        let table: Vec<Row> = vec![
            (
                "every node down at once",
                vec![node(a, Some(0), None), node(a, Some(30), None)],
                vec![("a", partitioned(2))],
            ),
            (
                "one long dead, the rest down later: still every node",
                vec![
                    node(a, Some(-5000), None),
                    node(a, Some(900), None),
                    node(a, Some(901), None),
                    node(a, Some(902), None),
                ],
                vec![("a", partitioned(4))],
            ),
            (
                "one node still Ready (for long)",
                vec![node(a, Some(0), None), node(a, Some(0), None), node(a, None, None)],
                vec![],
            ),
            (
                "a single-node zone cannot tell",
                vec![node(a, Some(0), None), node(Some((z, "b")), None, None)],
                vec![],
            ),
            (
                "the deprecated label names a zone",
                vec![
                    node(Some((dep, "old")), Some(0), None),
                    node(Some((dep, "old")), Some(1), None),
                ],
                vec![("old", partitioned(2))],
            ),
            (
                "the current label wins over the deprecated one",
                vec![
                    {
                        let mut n = node(a, Some(0), None);
                        n.labels.insert(dep, "old");
                        n
                    },
                    node(Some((dep, "old")), Some(0), None),
                ],
                vec![],
            ),
            (
                "unlabelled nodes are one zone",
                vec![node(None, Some(0), None), node(None, Some(5), None)],
                vec![("", partitioned(2))],
            ),
            (
                "returning: the first node back 30 s ago, the others still out",
                vec![node(a, None, Some(970)), node(a, Some(0), None), node(a, Some(0), None)],
                vec![("a", returning(3, 1010))],
            ),
            (
                "returned long enough ago: a death, not a partition",
                vec![node(a, None, Some(800)), node(a, Some(0), None)],
                vec![],
            ),
            (
                "one Ready node never away: no hold",
                vec![node(a, None, Some(970)), node(a, None, None), node(a, Some(0), None)],
                vec![],
            ),
            ("all back: no hold", vec![node(a, None, Some(970)), node(a, None, Some(990))], vec![]),
        ];
        for (case, nodes, want) in table {
            let got = held_zones(&nodes, at(now));
            let want: BTreeMap<String, ZoneHold> =
                want.into_iter().map(|(z, h)| (z.to_string(), h)).collect();
            assert_eq!(got, want, "{case}");
        }
    }
}
