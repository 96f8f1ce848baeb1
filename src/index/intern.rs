//! One copy of each repeated string the watch index keeps: nodes repeat the same label keys and
//! most values (zone, instance type, os, arch, node pool) thousands of times, and the pods kept
//! repeat their labels, namespace, node, owner and phase.
//!
//! Strings nobody else holds any more are forgotten once the set has doubled since the last
//! sweep, so the set stays within about twice the strings in use however labels churn.

use std::collections::HashSet;
use std::sync::Arc;

use crate::core::Labels;

#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    /// The set's size after the last sweep.
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

    /// `labels` with every key and value shared.
    pub fn labels(&mut self, labels: &Labels) -> Labels {
        let pairs: Vec<(Arc<str>, Arc<str>)> =
            labels.pairs().iter().map(|(k, v)| (self.intern(k), self.intern(v))).collect();
        Labels::from_pairs(pairs)
    }

    /// Forgets the strings only the set holds, once it has doubled since the last sweep.
    fn sweep(&mut self) {
        if self.strings.len() < 2 * self.swept_at + 64 {
            return;
        }
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.strings.shrink_to_fit();
        self.swept_at = self.strings.len();
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
}
