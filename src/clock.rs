//! The operator's own clock.
//!
//! Every instant the operator records (when it saw a Lease renewed, a node go NotReady, a watch
//! sync) and every `now` it hands to the pure core come from here: the wall clock read once, at
//! the first use, then advanced by the monotonic clock. A step of the machine's wall clock (NTP,
//! an admin's `date -s`) therefore never makes evidence older or younger than it is, and no
//! other machine's clock is ever compared with it: a kubelet's `renewTime` is only shown to
//! people.

use std::sync::LazyLock;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};

struct Anchor {
    wall: Timestamp,
    mono: Instant,
}

static ANCHOR: LazyLock<Anchor> =
    LazyLock::new(|| Anchor { wall: Timestamp::now(), mono: Instant::now() });

/// Now, by the operator's clock, to the microsecond: what the API server's stamps carry, and
/// what the node records keep exactly ([`crate::core::stamp::Stamp`]).
pub fn now() -> Timestamp {
    let anchor = &*ANCHOR;
    let elapsed = SignedDuration::try_from(anchor.mono.elapsed()).unwrap_or(SignedDuration::MAX);
    let at = anchor.wall.checked_add(elapsed).unwrap_or(Timestamp::MAX);
    Timestamp::from_microsecond(at.as_microsecond()).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_monotonically_from_the_wall_clock() {
        let wall = Timestamp::now();
        let a = now();
        let b = now();
        assert!(b >= a);
        assert_eq!(a.subsec_nanosecond() % 1000, 0, "{a}: finer than a microsecond");
        // Anchored on the wall clock when first read (within the test's own run time).
        assert!(a.duration_since(wall).abs() < SignedDuration::from_secs(60));
    }
}
