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
}
