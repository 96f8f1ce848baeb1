//! A node's labels, kept compact: one shared, sorted slice of shared strings.
//!
//! Nodes repeat the same label keys, and most values (zone, instance type, os, arch, the node
//! pool), thousands of times: as a `BTreeMap<String, String>` each node paid for a B-tree leaf
//! (about 540 bytes whatever the number of labels) and two heap strings per label. Here a node's
//! labels are one slice of `(key, value)` pairs whose strings can be shared between nodes (the
//! watch index interns them, `index::intern`), and cloning the labels (the
//! planner's input is a copy of every node) copies one pointer.
//!
//! Every label is kept, so a label selector matches exactly as it did on the map.
//!
//! A node's labels ([`NodeLabels`]) keep its host name apart: it differs on every node (it is
//! the node's name, shared with it), so the rest of the set, the same on every node of a pool,
//! can be one slice for all of them.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A label set: sorted by key, each key once.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Labels(Arc<[(Arc<str>, Arc<str>)]>);

impl Labels {
    /// Labels from pairs whose strings are already made (interned or not); a key given twice
    /// keeps its last value, as inserting into a map would.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (Arc<str>, Arc<str>)>) -> Labels {
        let mut pairs: Vec<(Arc<str>, Arc<str>)> = pairs.into_iter().collect();
        // Stable: among equal keys the last given stays last, and is the one kept.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut kept: Vec<(Arc<str>, Arc<str>)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match kept.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => kept.push(pair),
            }
        }
        Labels(kept.into())
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let at = self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok()?;
        Some(&self.0[at].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets label `key` (a copy of the set is made: for tests and one-off edits).
    pub fn insert(&mut self, key: impl Into<Arc<str>>, value: impl Into<Arc<str>>) {
        let pairs = self.0.iter().cloned().chain([(key.into(), value.into())]);
        *self = Labels::from_pairs(pairs);
    }

    /// The labels, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    /// The shared strings themselves (for an interner to share them further).
    pub fn pairs(&self) -> &[(Arc<str>, Arc<str>)] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether another copy of this set shares its slice.
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Labels::from_pairs(
            iter.into_iter().map(|(k, v)| (Arc::from(k.as_ref()), Arc::from(v.as_ref()))),
        )
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        map.iter().collect()
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        map.iter().collect()
    }
}

/// The label every node carries with its own host name (as a rule, the node's name).
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// A node's labels: the set it has in common with the other nodes of its pool, and its host
/// name apart. Reads, compares and iterates like one [`Labels`] holding them all.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct NodeLabels {
    /// Every label but [`HOSTNAME_LABEL`].
    common: Labels,
    /// The value of [`HOSTNAME_LABEL`].
    hostname: Option<Arc<str>>,
}

impl NodeLabels {
    /// A node's labels from its whole set.
    pub fn new(labels: Labels) -> NodeLabels {
        let host = labels.pairs().iter().find(|(k, _)| &**k == HOSTNAME_LABEL);
        match host.map(|(_, v)| v.clone()) {
            None => NodeLabels { common: labels, hostname: None },
            Some(hostname) => {
                let rest = labels.pairs().iter().filter(|(k, _)| &**k != HOSTNAME_LABEL);
                NodeLabels { common: Labels::from_pairs(rest.cloned()), hostname: Some(hostname) }
            }
        }
    }

    /// From the labels but the host name, and the host name (an interner's way back).
    pub fn from_parts(common: Labels, hostname: Option<Arc<str>>) -> NodeLabels {
        debug_assert!(!common.contains_key(HOSTNAME_LABEL));
        NodeLabels { common, hostname }
    }

    /// Every label but [`HOSTNAME_LABEL`].
    pub fn common(&self) -> &Labels {
        &self.common
    }

    /// The value of [`HOSTNAME_LABEL`].
    pub fn hostname(&self) -> Option<&Arc<str>> {
        self.hostname.as_ref()
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        match key {
            HOSTNAME_LABEL => self.hostname.as_deref(),
            _ => self.common.get(key),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets label `key` (for tests and one-off edits).
    pub fn insert(&mut self, key: impl Into<Arc<str>>, value: impl Into<Arc<str>>) {
        let (key, value) = (key.into(), value.into());
        match &*key {
            HOSTNAME_LABEL => self.hostname = Some(value),
            _ => self.common.insert(key, value),
        }
    }

    /// The labels, by key (the host name in its place among them).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let host = self.hostname.as_deref().map(|h| (HOSTNAME_LABEL, h));
        let before = self.common.iter().take_while(|(k, _)| *k < HOSTNAME_LABEL);
        let after = self.common.iter().skip_while(|(k, _)| *k < HOSTNAME_LABEL);
        before.chain(host).chain(after)
    }

    pub fn len(&self) -> usize {
        self.common.len() + usize::from(self.hostname.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for NodeLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for NodeLabels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        NodeLabels::new(iter.into_iter().collect())
    }
}

impl From<&BTreeMap<String, String>> for NodeLabels {
    /// Splits as it reads: one slice made, as for the whole set.
    fn from(map: &BTreeMap<String, String>) -> Self {
        let common = map.iter().filter(|(k, _)| *k != HOSTNAME_LABEL).collect();
        NodeLabels { common, hostname: map.get(HOSTNAME_LABEL).map(|h| Arc::from(h.as_str())) }
    }
}

impl From<BTreeMap<String, String>> for NodeLabels {
    fn from(map: BTreeMap<String, String>) -> Self {
        NodeLabels::from(&map)
    }
}

/// What a label selector reads: the value of a label, if set. Pods keep their labels as a map,
/// nodes as [`Labels`]; a selector matches either the same way.
pub trait LabelLookup {
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelLookup for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl LabelLookup for NodeLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl<T: LabelLookup> LabelLookup for Arc<T> {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_the_map_it_replaces() {
        let map: BTreeMap<String, String> = [("zone", "a"), ("arch", "amd64"), ("os", "linux")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let labels = Labels::from(&map);
        assert_eq!(labels.len(), 3);
        for (k, v) in &map {
            assert_eq!(labels.get(k), Some(v.as_str()));
            assert!(labels.contains_key(k));
        }
        assert_eq!(labels.get("zon"), None);
        assert_eq!(labels.get(""), None);
        let keys: Vec<&str> = labels.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["arch", "os", "zone"], "sorted by key, as the map iterates");
        assert_eq!(Labels::default().get("zone"), None);
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value() {
        let labels: Labels = [("zone", "a"), ("os", "linux"), ("zone", "b")].into_iter().collect();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels.get("zone"), Some("b"));
        let mut edited = labels.clone();
        edited.insert("zone", "c");
        edited.insert("arch", "arm64");
        assert_eq!(edited.get("zone"), Some("c"));
        assert_eq!(edited.get("arch"), Some("arm64"));
        assert_eq!(labels.get("zone"), Some("b"), "the copy it was made from is unchanged");
    }

    #[test]
    fn equal_whether_the_strings_are_shared_or_not() {
        let a: Labels = [("zone", "a")].into_iter().collect();
        let b: Labels = [("zone", "a")].into_iter().collect();
        assert_eq!(a, b);
        assert_ne!(a, [("zone", "b")].into_iter().collect::<Labels>());
    }

    #[test]
    fn node_labels_read_like_the_whole_set() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[(HOSTNAME_LABEL, "n1")],
            &[("zone", "a"), (HOSTNAME_LABEL, "n1"), ("arch", "amd64")],
            &[("kubernetes.io/arch", "amd64"), ("kubernetes.io/os", "linux")],
            &[("a", "1"), (HOSTNAME_LABEL, "n1"), ("kubernetes.io/os", "linux"), ("z", "2")],
        ];
        for pairs in cases {
            let whole: Labels = pairs.iter().copied().collect();
            let node = NodeLabels::new(whole.clone());
            assert_eq!(node.len(), whole.len(), "{pairs:?}");
            assert_eq!(node.is_empty(), whole.is_empty());
            assert!(node.iter().eq(whole.iter()), "{pairs:?}: {node:?} iterates as {whole:?}");
            for (k, v) in whole.iter() {
                assert_eq!(node.get(k), Some(v));
                assert_eq!(node.label(k), Some(v));
            }
            assert!(!node.common().contains_key(HOSTNAME_LABEL));
            assert_eq!(node.hostname().map(|h| &**h), whole.get(HOSTNAME_LABEL));
            assert_eq!(node.get("absent"), None);
            assert_eq!(node, pairs.iter().copied().collect::<NodeLabels>());
            let map: BTreeMap<String, String> =
                pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            assert_eq!(node, NodeLabels::from(&map));
        }
    }

    #[test]
    fn node_labels_differing_only_in_host_name_share_the_rest() {
        let pool = |host: &str| -> NodeLabels {
            [("zone", "a"), (HOSTNAME_LABEL, host), ("os", "linux")].into_iter().collect()
        };
        let (a, b) = (pool("n1"), pool("n2"));
        assert_ne!(a, b, "the host name tells them apart");
        assert_eq!(a.common(), b.common());
        let mut edited = a.clone();
        edited.insert(HOSTNAME_LABEL, "n2");
        assert_eq!(edited, b);
        edited.insert("zone", "b");
        assert_eq!((edited.get("zone"), a.get("zone")), (Some("b"), Some("a")));
    }
}
