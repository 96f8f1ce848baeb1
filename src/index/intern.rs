//! One copy of each repeated string the watch index keeps: nodes repeat the same label keys and
//! most values (zone, instance type, os, arch, node pool) thousands of times, and the pods kept
//! repeat their labels, namespace, node, owner and phase; the pods of one workload have the same
//! label set, kept once.
//!
//! Strings nobody else holds any more are forgotten once the set has doubled since the last
//! sweep, so the set stays within about twice the strings in use however labels churn.

use std::collections::HashSet;
use std::sync::Arc;

use crate::core::{Labels, NodeLabels};

#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    /// Whole label sets: a workload's pods', a node pool's (without the host name).
    sets: HashSet<Labels>,
    /// The sets' size after the last sweep.
    swept_at: usize,
}

impl Interner {
    /// The shared copy of `s`.
    pub fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(s) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(s);
        self.strings.insert(shared.clone());
        self.sweep();
        shared
    }

    /// Replaces `s` with the shared copy of its text.
    pub fn share(&mut self, s: &mut Arc<str>) {
        *s = self.intern(s);
    }

    /// The shared copy of label set `labels`, its keys and values shared too: the pods of one
    /// workload keep one slice between them.
    pub fn label_set(&mut self, labels: &Labels) -> Labels {
        if let Some(shared) = self.sets.get(labels) {
            return shared.clone();
        }
        let shared = self.labels(labels);
        self.sets.insert(shared.clone());
        self.sweep();
        shared
    }

    /// A node's labels, the set without its host name shared by the nodes that have it, the
    /// host name shared with the node's name.
    pub fn node_labels(&mut self, labels: &NodeLabels) -> NodeLabels {
        let common = self.label_set(labels.common());
        NodeLabels::from_parts(common, labels.hostname().map(|h| self.intern(h)))
    }

    /// `labels` with every key and value shared.
    fn labels(&mut self, labels: &Labels) -> Labels {
        let pairs: Vec<(Arc<str>, Arc<str>)> =
            labels.pairs().iter().map(|(k, v)| (self.intern(k), self.intern(v))).collect();
        Labels::from_pairs(pairs)
    }

    /// Forgets the strings and label sets only the interner holds, once they have doubled
    /// since the last sweep.
    fn sweep(&mut self) {
        if self.strings.len() + self.sets.len() < 2 * self.swept_at + 64 {
            return;
        }
        // The sets first: a string may be held by nothing but a set about to go.
        self.sets.retain(Labels::is_shared);
        self.sets.shrink_to_fit();
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.strings.shrink_to_fit();
        self.swept_at = self.strings.len() + self.sets.len();
    }

    /// How many strings are kept.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_are_shared_and_unused_ones_swept() {
        let mut interner = Interner::default();
        let a: Labels = [("zone", "a"), ("os", "linux")].into_iter().collect();
        let b: Labels = [("zone", "b"), ("os", "linux")].into_iter().collect();
        let (a, b) = (interner.labels(&a), interner.labels(&b));
        assert_eq!(a.get("zone"), Some("a"));
        let shared = |l: &Labels, key: &str| l.pairs().iter().find(|(k, _)| &**k == key).cloned();
        let (ka, kb) = (shared(&a, "os").expect("os"), shared(&b, "os").expect("os"));
        assert!(Arc::ptr_eq(&ka.0, &kb.0) && Arc::ptr_eq(&ka.1, &kb.1));
        assert_eq!(interner.len(), 5);
        drop((a, b, ka, kb));
        // Many labels later, the ones nobody holds are gone.
        let kept: Vec<Labels> = (0..200)
            .map(|i| interner.labels(&[("host", format!("h{i}"))].into_iter().collect()))
            .collect();
        assert!(interner.len() <= 2 * kept.len() + 64);
        assert!(kept.iter().enumerate().all(|(i, l)| l.get("host") == Some(&*format!("h{i}"))));
    }

    #[test]
    fn equal_label_sets_share_one_slice_until_nobody_holds_it() {
        let mut interner = Interner::default();
        let set = |app: &str| -> Labels { [("app", app), ("tier", "web")].into_iter().collect() };
        let (a, b, c) = (
            interner.label_set(&set("a")),
            interner.label_set(&set("a")),
            interner.label_set(&set("c")),
        );
        assert!(std::ptr::eq(a.pairs(), b.pairs()), "one slice for equal sets");
        assert!(!std::ptr::eq(a.pairs(), c.pairs()));
        assert_eq!((a.get("app"), c.get("app")), (Some("a"), Some("c")));
        drop((a, b));
        let kept: Vec<Labels> =
            (0..200).map(|i| interner.label_set(&set(&format!("x{i}")))).collect();
        assert!(interner.sets.len() <= 2 * kept.len() + 64);
        assert!(!interner.sets.contains(&set("a")), "a set nobody holds is forgotten");
        assert!(interner.sets.contains(&c));
    }
}
