//! An optional instant in 8 bytes, for the records kept for every node.
//!
//! A node record holds eight optional instants; as `Option<Timestamp>` each takes 24 bytes
//! (jiff's `Timestamp` is 16 and leaves no niche for `None`), 192 bytes a node of 376. A
//! [`Stamp`] keeps the instant to the microsecond in one `i64` and `None` in a value no instant
//! takes: 64 bytes for the eight.
//!
//! To the microsecond is exact for what a node record holds: the API server's stamps
//! (`renewTime` is a `MicroTime`, conditions' times are whole seconds) and the operator's own
//! clock, which reads to the microsecond ([`crate::clock::now`]). A finer instant (a test's, or
//! a stamp some other writer sent in nanoseconds) is kept rounded down to its microsecond.

use std::fmt;

use jiff::Timestamp;

/// An optional instant, to the microsecond, in 8 bytes. Read with [`Stamp::get`]; made from an
/// `Option<Timestamp>` or a `Timestamp` with `into()`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp(i64);

/// No instant: below every microsecond jiff can represent.
const UNSET: i64 = i64::MIN;

impl Stamp {
    pub const NONE: Stamp = Stamp(UNSET);

    /// The instant, if set.
    pub fn get(self) -> Option<Timestamp> {
        (self.0 != UNSET).then(|| Timestamp::from_microsecond(self.0).ok()).flatten()
    }

    pub fn is_none(self) -> bool {
        self.0 == UNSET
    }

    pub fn is_some(self) -> bool {
        self.0 != UNSET
    }

    /// `at` rounded up to the microsecond: for an instant something may happen at (a deadline,
    /// the start of a grace), kept never earlier than it was, so that a wake-up for it is not
    /// early and a grace from it is not shorter. Exact for our clock's instants and the API
    /// server's stamps; jiff's very last second is kept as its first microsecond, as by `from`.
    pub fn at_or_after(at: Timestamp) -> Stamp {
        let down = Stamp::from(at);
        match down.get() {
            Some(kept) if kept < at && Timestamp::from_microsecond(down.0 + 1).is_ok() => {
                Stamp(down.0 + 1)
            }
            _ => down,
        }
    }
}

impl Default for Stamp {
    fn default() -> Self {
        Stamp::NONE
    }
}

impl From<Timestamp> for Stamp {
    /// Rounded down to the microsecond. Every instant jiff represents is kept as one that reads
    /// back (its last microsecond, which jiff does not make from microseconds, as its second):
    /// a set stamp never reads as unset.
    fn from(at: Timestamp) -> Self {
        let micros = at.as_microsecond();
        let micros = if at.subsec_nanosecond() < 0 && at.subsec_nanosecond() % 1000 != 0 {
            micros - 1
        } else {
            micros
        };
        if Timestamp::from_microsecond(micros).is_ok() {
            Stamp(micros)
        } else {
            Stamp(at.as_second().saturating_mul(1_000_000))
        }
    }
}

impl From<Option<Timestamp>> for Stamp {
    fn from(at: Option<Timestamp>) -> Self {
        at.map_or(Stamp::NONE, Stamp::from)
    }
}

impl PartialEq<Option<Timestamp>> for Stamp {
    fn eq(&self, other: &Option<Timestamp>) -> bool {
        self.get() == *other
    }
}

impl fmt::Debug for Stamp {
    /// As the `Option<Timestamp>` it stands for.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_an_optional_instant_in_eight_bytes() {
        assert_eq!(std::mem::size_of::<Stamp>(), 8);
        assert_eq!(std::mem::size_of::<Option<Timestamp>>(), 24);
    }

    fn ts(text: &str) -> Timestamp {
        text.parse().expect("a test timestamp")
    }

    #[test]
    fn round_trips_instants_to_the_microsecond_and_rounds_finer_ones_down() {
        let micro: Timestamp = ts("2026-11-28T17:00:01.123456Z");
        let second: Timestamp = ts("2026-11-28T17:00:01Z");
        let finer: Timestamp = ts("2026-11-28T17:00:01.123456789Z");
        let before_epoch: Timestamp = ts("1969-12-31T23:59:59.9999995Z");
        let cases: [(Option<Timestamp>, Option<Timestamp>); 8] = [
            (None, None),
            (Some(micro), Some(micro)),
            (Some(second), Some(second)),
            (Some(Timestamp::UNIX_EPOCH), Some(Timestamp::UNIX_EPOCH)),
            (Some(finer), Some(micro)),
            (Some(before_epoch), Some(ts("1969-12-31T23:59:59.999999Z"))),
            (Some(Timestamp::MIN), Some(Timestamp::MIN)),
            (Some(Timestamp::MAX), Some(ts("9999-12-30T22:00:00Z"))),
        ];
        for (given, kept) in cases {
            let stamp = Stamp::from(given);
            assert_eq!(stamp.get(), kept, "{given:?}");
            assert_eq!(stamp.is_none(), given.is_none(), "{given:?}");
            assert_eq!(format!("{stamp:?}"), format!("{kept:?}"));
        }
    }

    #[test]
    fn rounds_up_where_an_instant_must_not_come_early() {
        let cases = [
            ("2026-11-28T17:00:01.123456Z", "2026-11-28T17:00:01.123456Z"),
            ("2026-11-28T17:00:01.123456001Z", "2026-11-28T17:00:01.123457Z"),
            ("2026-11-28T17:00:01.123456999Z", "2026-11-28T17:00:01.123457Z"),
            ("1969-12-31T23:59:59.9999995Z", "1970-01-01T00:00:00Z"),
            ("1969-12-31T23:59:59.999998Z", "1969-12-31T23:59:59.999998Z"),
        ];
        for (given, kept) in cases {
            assert_eq!(Stamp::at_or_after(ts(given)).get(), Some(ts(kept)), "{given}");
        }
        assert_eq!(Stamp::at_or_after(Timestamp::MIN).get(), Some(Timestamp::MIN));
    }

    #[test]
    fn orders_nothing_apart_from_every_instant() {
        assert_ne!(Stamp::from(Timestamp::MIN), Stamp::NONE);
        assert_eq!(Stamp::default(), Stamp::NONE);
        assert!(Stamp::NONE == None);
    }

    proptest::proptest! {
        /// Every instant jiff represents is kept set, no later than itself and less than a
        /// second earlier (a microsecond, but for jiff's very last one).
        #[test]
        fn every_instant_is_kept_set_and_never_later(
            second in Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
            nanos in 0i32..1_000_000_000,
        ) {
            let Ok(at) = Timestamp::new(second, nanos) else { return Ok(()) };
            let kept = Stamp::from(at).get();
            proptest::prop_assert!(kept.is_some());
            let kept = kept.unwrap_or(Timestamp::MIN);
            proptest::prop_assert!(kept <= at);
            proptest::prop_assert!(at.duration_since(kept) < jiff::SignedDuration::from_secs(1));
            proptest::prop_assert_eq!(Stamp::from(kept).get(), Some(kept));
        }
    }
}
