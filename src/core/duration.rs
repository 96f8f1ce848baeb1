//! Go-style durations (`"90s"`, `"1m30s"`, `"250ms"`) as written in policies.
//!
//! The accepted grammar is the CRD's pattern, [`DURATION_PATTERN`](crate::crd::DURATION_PATTERN):
//! one or more `<digits><unit>` groups with units `ms`, `s`, `m`, `h`. No sign, no fractions, no
//! spaces: stricter than Go's `time.ParseDuration`, so every accepted string also means the same
//! thing to the API server's CEL `duration()`.
//!
//! Also the one piece of timestamp arithmetic the core does, [`add`], which saturates instead of
//! panicking on absurd inputs.

use jiff::{SignedDuration, Timestamp};

/// `t + d`, saturating at the ends of time instead of panicking on absurd inputs.
pub fn add(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.saturating_add(d).unwrap_or(if d.is_negative() { Timestamp::MIN } else { Timestamp::MAX })
}

/// Why a duration string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error(
        "duration {0:?} must be digits followed by a unit (ms, s, m, h), e.g. \"90s\" or \"1m30s\""
    )]
    Syntax(String),
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses `^([0-9]+(ms|s|m|h))+$` into a non-negative duration.
pub fn parse_duration(s: &str) -> Result<SignedDuration, DurationError> {
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let syntax = || DurationError::Syntax(s.to_string());
    let overflow = || DurationError::Overflow(s.to_string());
    let bytes = s.as_bytes();
    let mut total = SignedDuration::ZERO;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(syntax());
        }
        let number: i64 = s[start..i].parse().map_err(|_| overflow())?;
        let (unit_millis, unit_len) = match &bytes[i..] {
            [b'm', b's', ..] => (1, 2),
            [b's', ..] => (1_000, 1),
            [b'm', ..] => (60_000, 1),
            [b'h', ..] => (3_600_000, 1),
            _ => return Err(syntax()),
        };
        i += unit_len;
        let millis = number.checked_mul(unit_millis).ok_or_else(overflow)?;
        total = total.checked_add(SignedDuration::from_millis(millis)).ok_or_else(overflow)?;
    }
    Ok(total)
}

/// Formats a duration the way Go and `kubectl` print them: `1h2m3s`, `1m30s`, `250ms`, `0s`.
/// Negative durations get a leading `-`.
pub fn format_duration(d: SignedDuration) -> String {
    let mut millis = d.as_millis();
    let mut out = String::new();
    if millis < 0 {
        out.push('-');
        millis = -millis;
    }
    if millis == 0 {
        return "0s".into();
    }
    let hours = millis / 3_600_000;
    let minutes = (millis / 60_000) % 60;
    let seconds = (millis / 1_000) % 60;
    let rest = millis % 1_000;
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if seconds > 0 || (rest > 0 && millis >= 1_000) {
        if rest > 0 {
            out.push_str(&format!("{seconds}.{rest:03}s"));
        } else {
            out.push_str(&format!("{seconds}s"));
        }
    } else if rest > 0 {
        out.push_str(&format!("{rest}ms"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_duration_table() {
        let ms = |n| Ok(SignedDuration::from_millis(n));
        let table: [(&str, Result<SignedDuration, DurationError>); 16] = [
            ("0s", ms(0)),
            ("90s", ms(90_000)),
            ("5m", ms(300_000)),
            ("1m30s", ms(90_000)),
            ("2h", ms(7_200_000)),
            ("1h1m1s1ms", ms(3_661_001)),
            ("250ms", ms(250)),
            ("1s1s", ms(2_000)),
            ("", Err(DurationError::Empty)),
            ("5", Err(DurationError::Syntax("5".into()))),
            ("m", Err(DurationError::Syntax("m".into()))),
            ("-5m", Err(DurationError::Syntax("-5m".into()))),
            ("1.5m", Err(DurationError::Syntax("1.5m".into()))),
            ("5 m", Err(DurationError::Syntax("5 m".into()))),
            ("1d", Err(DurationError::Syntax("1d".into()))),
            ("99999999999999999999h", Err(DurationError::Overflow("99999999999999999999h".into()))),
        ];
        for (input, want) in table {
            assert_eq!(parse_duration(input), want, "input {input:?}");
        }
    }

    #[test]
    fn format_duration_table() {
        let table = [
            (0, "0s"),
            (250, "250ms"),
            (1_000, "1s"),
            (1_500, "1.500s"),
            (90_000, "1m30s"),
            (300_000, "5m"),
            (3_661_000, "1h1m1s"),
            (-30_000, "-30s"),
        ];
        for (millis, want) in table {
            assert_eq!(format_duration(SignedDuration::from_millis(millis)), want, "{millis} ms");
        }
    }

    #[test]
    fn formatted_durations_parse_back_when_whole_seconds() {
        for s in ["1s", "1m30s", "5m", "1h1m1s", "250ms"] {
            let d = parse_duration(s).expect("valid");
            assert_eq!(format_duration(d), s);
        }
    }

    #[test]
    fn add_saturates() {
        let ts = |s: &str| -> Timestamp { s.parse().expect("test timestamp") };
        assert_eq!(add(Timestamp::MAX, SignedDuration::from_secs(1)), Timestamp::MAX);
        assert_eq!(add(Timestamp::MIN, SignedDuration::from_secs(-1)), Timestamp::MIN);
        assert_eq!(
            add(ts("2026-01-01T00:00:00Z"), SignedDuration::from_secs(60)),
            ts("2026-01-01T00:01:00Z")
        );
    }
}
