//! Sliding-window budgets: at most `limit` actions in any [`RATE_WINDOW`], and the exact instant
//! the next slot frees, so the controller can requeue for it instead of polling.

use jiff::{SignedDuration, Timestamp};

/// The window of `rateLimit.actionsPerMinute` and `maxPodsPerOwnerPerMinute`.
pub const RATE_WINDOW: SignedDuration = SignedDuration::from_secs(60);

/// `t + d`, saturating at the ends of time instead of panicking on absurd inputs.
pub fn add(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.saturating_add(d).unwrap_or(if d.is_negative() { Timestamp::MIN } else { Timestamp::MAX })
}

/// The actions that still occupy a slot at `now`, and the limit.
///
/// An action at `t` occupies a slot during `[t, t + 60s)`: at exactly `t + 60s` it has freed.
/// Actions dated in the future (clock skew) occupy a slot too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Sorted, oldest first.
    times: Vec<Timestamp>,
    limit: u32,
}

impl Window {
    /// The window at `now` over past action instants.
    pub fn new(past: impl IntoIterator<Item = Timestamp>, now: Timestamp, limit: u32) -> Self {
        let mut times: Vec<Timestamp> =
            past.into_iter().filter(|t| add(*t, RATE_WINDOW) > now).collect();
        times.sort();
        Window { times, limit }
    }

    /// Actions currently in the window.
    pub fn used(&self) -> usize {
        self.times.len()
    }

    /// Whether one more action fits now.
    pub fn has_room(&self) -> bool {
        self.times.len() < self.limit as usize
    }

    /// Records an action at `at`.
    pub fn record(&mut self, at: Timestamp) {
        let i = self.times.partition_point(|t| *t <= at);
        self.times.insert(i, at);
    }

    /// When the next slot frees: `None` if one is free now. With `n` actions in the window and a
    /// limit `l`, `n - l + 1` of them must leave it, the `(n - l)`-th oldest last.
    pub fn next_free(&self) -> Option<Timestamp> {
        let excess = self.times.len().checked_sub(self.limit as usize)?;
        self.times.get(excess).map(|t| add(*t, RATE_WINDOW))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    #[test]
    fn window_table() {
        let now = ts("2026-01-01T00:10:00Z");
        // (case, past actions, limit, used, has_room, next_free)
        type Row<'a> = (&'a str, &'a [&'a str], u32, usize, bool, Option<&'a str>);
        let table: [Row; 7] = [
            ("empty", &[], 2, 0, true, None),
            ("one of two", &["2026-01-01T00:09:30Z"], 2, 1, true, None),
            (
                "full: oldest frees first",
                &["2026-01-01T00:09:45Z", "2026-01-01T00:09:30Z"],
                2,
                2,
                false,
                Some("2026-01-01T00:10:30Z"),
            ),
            ("exactly 60s old has left", &["2026-01-01T00:09:00Z"], 1, 0, true, None),
            (
                "59.999s old still counts",
                &["2026-01-01T00:09:00.001Z"],
                1,
                1,
                false,
                Some("2026-01-01T00:10:00.001Z"),
            ),
            (
                "over the limit (limit lowered): wait for enough to leave",
                &["2026-01-01T00:09:10Z", "2026-01-01T00:09:20Z", "2026-01-01T00:09:30Z"],
                1,
                3,
                false,
                Some("2026-01-01T00:10:30Z"),
            ),
            (
                "future action counts",
                &["2026-01-01T00:10:05Z"],
                1,
                1,
                false,
                Some("2026-01-01T00:11:05Z"),
            ),
        ];
        for (case, past, limit, used, room, next) in table {
            let w = Window::new(past.iter().map(|s| ts(s)), now, limit);
            assert_eq!(w.used(), used, "{case}");
            assert_eq!(w.has_room(), room, "{case}");
            assert_eq!(w.next_free(), next.map(ts), "{case}");
        }
    }

    #[test]
    fn recording_fills_the_window() {
        let now = ts("2026-01-01T00:10:00Z");
        let mut w = Window::new([ts("2026-01-01T00:09:50Z")], now, 3);
        w.record(now);
        assert!(w.has_room());
        w.record(now);
        assert!(!w.has_room());
        assert_eq!(w.next_free(), Some(ts("2026-01-01T00:10:50Z")));
    }

    #[test]
    fn add_saturates() {
        assert_eq!(add(Timestamp::MAX, SignedDuration::from_secs(1)), Timestamp::MAX);
        assert_eq!(add(Timestamp::MIN, SignedDuration::from_secs(-1)), Timestamp::MIN);
        assert_eq!(add(ts("2026-01-01T00:00:00Z"), RATE_WINDOW), ts("2026-01-01T00:01:00Z"));
    }
}
