//! Event time: an RFC 3339 UTC timestamp, kept as the exact text that was read or written.
//!
//! The text is kept verbatim so an event read from a chunk re-serializes to identical bytes. The
//! writer formats times the way the reference does: `YYYY-MM-DDTHH:MM:SS[.fraction]Z` with the
//! fraction's trailing zeros removed (no fraction at all on a whole second).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most fractional-second digits accepted (nanoseconds).
pub const TIME_FRACTION_MAX_DIGITS: usize = 9;

/// Largest year we format or accept; keeps arithmetic well inside `u64` nanoseconds.
pub const TIME_MAX_YEAR: u32 = 2500;

/// A validated RFC 3339 UTC timestamp (`Z` offset only).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventTime {
    /// The exact text, as read or as formatted by [`EventTime::from_unix`].
    text: String,
    /// The same instant as time since the Unix epoch, for retention and ordering.
    since_epoch: Duration,
}

/// A timestamp that is not RFC 3339 UTC. Carries no part of the refused text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidTime;

impl fmt::Display for InvalidTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("time is not an RFC 3339 UTC timestamp")
    }
}

impl std::error::Error for InvalidTime {}

impl EventTime {
    /// Parses and validates `text`.
    pub fn parse(text: &str) -> Result<Self, InvalidTime> {
        let since_epoch = parse_rfc3339_utc(text).ok_or(InvalidTime)?;
        Ok(Self {
            text: text.to_owned(),
            since_epoch,
        })
    }

    /// Formats an instant given as time since the Unix epoch.
    pub fn from_unix(since_epoch: Duration) -> Result<Self, InvalidTime> {
        let secs = since_epoch.as_secs();
        let nanos = since_epoch.subsec_nanos();
        let days = secs / 86_400;
        let rem = secs % 86_400;
        let (year, month, day) = civil_from_days(days);
        if year > TIME_MAX_YEAR {
            return Err(InvalidTime);
        }
        let mut text = format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        );
        if nanos != 0 {
            let fraction = format!("{nanos:09}");
            text.push('.');
            text.push_str(fraction.trim_end_matches('0'));
        }
        text.push('Z');
        Ok(Self { text, since_epoch })
    }

    /// The exact text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The instant as time since the Unix epoch.
    pub fn since_epoch(&self) -> Duration {
        self.since_epoch
    }
}

impl fmt::Display for EventTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for EventTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for EventTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z` strictly. Years 1970..=TIME_MAX_YEAR; seconds 0..=59.
fn parse_rfc3339_utc(text: &str) -> Option<Duration> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', fraction @ ..] if (1..=TIME_FRACTION_MAX_DIGITS).contains(&fraction.len()) => {
            let value = digits(fraction)?;
            let scale = 10u32.pow((TIME_FRACTION_MAX_DIGITS - fraction.len()) as u32);
            value * scale
        }
        _ => return None,
    };
    if !(1970..=TIME_MAX_YEAR).contains(&year) || !(1..=12).contains(&month) {
        return None;
    }
    if day == 0 || day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + u64::from(hour) * 3600 + u64::from(minute) * 60 + u64::from(second);
    Some(Duration::new(secs, nanos))
}

/// The value of a run of ASCII digits (at most 9, so it fits `u32`).
fn digits(run: &[u8]) -> Option<u32> {
    if run.is_empty() || run.len() > 9 {
        return None;
    }
    run.iter().try_fold(0u32, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
    })
}

fn is_leap(year: u32) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (year >= 1970).
fn days_from_civil(year: u32, month: u32, day: u32) -> u64 {
    let mut days = 0u64;
    for y in 1970..year {
        days += if is_leap(y) { 366 } else { 365 };
    }
    for m in 1..month {
        days += u64::from(days_in_month(year, m));
    }
    days + u64::from(day - 1)
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(mut days: u64) -> (u32, u32, u32) {
    let mut year = 1970u32;
    loop {
        let len = if is_leap(year) { 366 } else { 365 };
        if days < len || year > TIME_MAX_YEAR {
            break;
        }
        days -= len;
        year += 1;
    }
    let mut month = 1u32;
    while month < 12 && days >= u64::from(days_in_month(year, month)) {
        days -= u64::from(days_in_month(year, month));
        month += 1;
    }
    (year, month, days as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_reference_times_and_keeps_text() {
        for text in [
            "2026-11-30T22:14:03.753613635Z",
            "2026-11-30T22:14:04.27124192Z",
            "2026-08-14T12:00:00Z",
            "2024-02-29T00:00:00.5Z",
        ] {
            let t = EventTime::parse(text).unwrap();
            assert_eq!(t.as_str(), text);
            // Formatting the parsed instant gives the reference's text back.
            assert_eq!(
                EventTime::from_unix(t.since_epoch()).unwrap().as_str(),
                text
            );
        }
    }

    #[test]
    fn known_instant() {
        let t = EventTime::parse("2026-11-30T22:14:03Z").unwrap();
        assert_eq!(t.since_epoch().as_secs(), 1_796_076_843);
        assert_eq!(
            EventTime::from_unix(Duration::from_secs(0))
                .unwrap()
                .as_str(),
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn rejects_non_utc_and_malformed() {
        for text in [
            "",
            "2026-11-30",
            "2026-11-30T22:14:03",
            "2026-11-30T22:14:03+00:00",
            "2026-11-30T22:14:03.Z",
            "2026-11-30T22:14:03.1234567890Z",
            "2026-11-30t22:14:03Z",
            "2026-11-30T22:14:03z",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T22:60:00Z",
            "2026-11-30T22:14:60Z",
            "1969-12-31T23:59:59Z",
            "２026-11-30T22:14:03Z",
            "2026-11-30T22:14:0aZ",
            "not a time at all!!!",
        ] {
            assert_eq!(EventTime::parse(text), Err(InvalidTime), "{text}");
        }
    }
}
