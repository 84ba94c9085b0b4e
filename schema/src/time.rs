//! Event time: an RFC 3339 timestamp, kept as the exact text that was read or written.
//!
//! The text is kept verbatim so an event read from a chunk re-serializes to identical bytes.
//!
//! Read rules ([`EventTime::parse_lenient`], deserialization): any RFC 3339 `date-time`, as the
//! JSON Schema's `format: date-time` accepts it: `T` or `t`, `Z`, `z` or a numeric offset
//! (`+02:00`, `-05:30`), any number of fraction digits, a leap second at 23:59:60 UTC. The
//! instant must not precede the Unix epoch, because [`EventTime::since_epoch`] is unsigned (and
//! no history event predates it).
//!
//! Write rules ([`EventTime::parse`], [`EventTime::from_unix`]): the reference's own form,
//! `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, years 1970..=[`TIME_MAX_YEAR`], at most nine fraction
//! digits, no leap second. The writer also drops the fraction's trailing zeros (no fraction at
//! all on a whole second).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most fractional-second digits annal writes, and the precision of
/// [`EventTime::since_epoch`] (nanoseconds). Further digits are read but do not count.
pub const TIME_FRACTION_MAX_DIGITS: usize = 9;

/// Largest year annal writes; keeps arithmetic well inside `u64` nanoseconds. Reads accept any
/// four-digit year from 1970.
pub const TIME_MAX_YEAR: u32 = 2500;

/// First year of an instant [`EventTime::since_epoch`] can express.
const EPOCH_YEAR: u32 = 1970;

/// Seconds in a day without a leap second.
const DAY_SECS: i64 = 86_400;

/// A validated RFC 3339 timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventTime {
    /// The exact text, as read or as formatted by [`EventTime::from_unix`].
    text: String,
    /// The same instant as time since the Unix epoch, for retention and ordering.
    since_epoch: Duration,
    /// Whether `text` is in the form annal writes, decided once when the text was checked (the
    /// writer asks for every event it appends).
    write_form: bool,
}

/// A timestamp that breaks the rules it was checked against. Carries no part of the refused
/// text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidTime;

impl fmt::Display for InvalidTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("time is not an RFC 3339 timestamp annal accepts here")
    }
}

impl std::error::Error for InvalidTime {}

impl EventTime {
    /// Parses `text` under the write rules: the reference's UTC form with `Z`.
    pub fn parse(text: &str) -> Result<Self, InvalidTime> {
        match parse_rfc3339(text) {
            Some(parsed) if parsed.write_form => Ok(Self {
                text: text.to_owned(),
                since_epoch: parsed.since_epoch,
                write_form: true,
            }),
            _ => Err(InvalidTime),
        }
    }

    /// Parses `text` under the read rules: any RFC 3339 `date-time` from the Unix epoch on. The
    /// time may still break annal's write rules.
    pub fn parse_lenient(text: &str) -> Result<Self, InvalidTime> {
        let parsed = parse_rfc3339(text).ok_or(InvalidTime)?;
        Ok(Self {
            text: text.to_owned(),
            since_epoch: parsed.since_epoch,
            write_form: parsed.write_form,
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
        // The writer formats one time per event: digits are pushed directly (no `format!`).
        let mut text = String::with_capacity(WRITTEN_TIME_MAX_LEN_BYTES);
        push_digits(&mut text, year.into(), 4);
        text.push('-');
        push_digits(&mut text, month.into(), 2);
        text.push('-');
        push_digits(&mut text, day.into(), 2);
        text.push('T');
        push_digits(&mut text, rem / 3600, 2);
        text.push(':');
        push_digits(&mut text, (rem / 60) % 60, 2);
        text.push(':');
        push_digits(&mut text, rem % 60, 2);
        if nanos != 0 {
            let (mut fraction, mut width) = (nanos, 9);
            while fraction % 10 == 0 {
                fraction /= 10;
                width -= 1;
            }
            text.push('.');
            push_digits(&mut text, fraction.into(), width);
        }
        text.push('Z');
        debug_assert!(text.len() <= WRITTEN_TIME_MAX_LEN_BYTES);
        debug_assert!(
            parse_rfc3339(&text).is_some_and(|p| p.write_form && p.since_epoch == since_epoch),
            "from_unix must write the write form of the same instant"
        );
        Ok(Self {
            text,
            since_epoch,
            write_form: true,
        })
    }

    /// The exact text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The instant as time since the Unix epoch, whatever offset the text used. A leap second
    /// (23:59:60 UTC) counts as the first second of the next day, as Unix time has none.
    pub fn since_epoch(&self) -> Duration {
        self.since_epoch
    }

    /// Whether the text is in the form annal writes (a time read leniently may not be).
    pub(crate) fn meets_write_rules(&self) -> bool {
        self.write_form
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
        Self::parse_lenient(&text).map_err(serde::de::Error::custom)
    }
}

/// The longest text [`EventTime::from_unix`] writes: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const WRITTEN_TIME_MAX_LEN_BYTES: usize = 30;

/// Pushes the low `width` decimal digits of `value`, zero-padded (the callers' values fit).
fn push_digits(text: &mut String, value: u64, width: u32) {
    let mut divisor = 10u64.pow(width.saturating_sub(1));
    while divisor > 0 {
        let digit = u8::try_from((value / divisor) % 10).unwrap_or(0);
        text.push(char::from(b'0' + digit));
        divisor /= 10;
    }
}

/// A parsed RFC 3339 `date-time`.
struct Parsed {
    since_epoch: Duration,
    /// The text is in annal's write form (see the module docs).
    write_form: bool,
}

/// Parses `YYYY-MM-DD(T|t)HH:MM:SS[.f+](Z|z|(+|-)HH:MM)` (RFC 3339 section 5.6).
fn parse_rfc3339(text: &str) -> Option<Parsed> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    let (fraction, zone) = match &b[19..] {
        [b'.', rest @ ..] => {
            let len = rest.iter().take_while(|d| d.is_ascii_digit()).count();
            if len == 0 {
                return None;
            }
            rest.split_at(len)
        }
        rest => (&[][..], rest),
    };
    let offset_minutes: i64 = match zone {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), hh @ .., b':', m1, m2] if hh.len() == 2 => {
            let (hours, minutes) = (digits(hh)?, digits(&[*m1, *m2])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = i64::from(hours * 60 + minutes);
            if *sign == b'-' { -magnitude } else { magnitude }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let local_minute_of_day = i64::from(hour * 60 + minute);
    if second == 60 && (local_minute_of_day - offset_minutes).rem_euclid(24 * 60) != 24 * 60 - 1 {
        // A leap second is inserted at the end of a UTC day only.
        return None;
    }
    // Nanoseconds from the first nine fraction digits; later digits are below the precision.
    let significant = &fraction[..fraction.len().min(TIME_FRACTION_MAX_DIGITS)];
    let nanos = if significant.is_empty() {
        0
    } else {
        let scale = 10u32.pow((TIME_FRACTION_MAX_DIGITS - significant.len()) as u32);
        digits(significant)? * scale
    };
    let local_secs = days_since_epoch(year, month, day) * DAY_SECS
        + local_minute_of_day * 60
        + i64::from(second);
    let utc_secs = u64::try_from(local_secs - offset_minutes * 60).ok()?;
    let write_form = b[10] == b'T'
        && zone == b"Z"
        && (EPOCH_YEAR..=TIME_MAX_YEAR).contains(&year)
        && second < 60
        && fraction.len() <= TIME_FRACTION_MAX_DIGITS;
    Some(Parsed {
        since_epoch: Duration::new(utc_secs, nanos),
        write_form,
    })
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

/// Days from 0000-01-01 to January 1st of `year` in the proleptic Gregorian calendar: 365 a
/// year plus one for each leap year before it (every fourth, except centuries not divisible by
/// 400; year 0 is a leap year).
fn days_before_year(year: u32) -> i64 {
    let y = i64::from(year);
    let leap_years = (y + 3) / 4 - (y + 99) / 100 + (y + 399) / 400;
    365 * y + leap_years
}

/// Days since 1970-01-01 of a proleptic Gregorian date (negative before it).
fn days_since_epoch(year: u32, month: u32, day: u32) -> i64 {
    let before_month: i64 = (1..month).map(|m| i64::from(days_in_month(year, m))).sum();
    days_before_year(year) - days_before_year(EPOCH_YEAR) + before_month + i64::from(day) - 1
}

/// The date of a day count since 1970-01-01.
/// (year, month, day) of `days` after 1970-01-01, in closed form (the proleptic Gregorian
/// calendar in 400-year eras of 146,097 days, years starting in March so the leap day is last).
/// A year beyond `u32` saturates, which `from_unix` refuses as beyond `TIME_MAX_YEAR`.
fn civil_from_days(days: u64) -> (u32, u32, u32) {
    const DAYS_PER_ERA: u64 = 146_097;
    // Days from 0000-03-01 to 1970-01-01.
    const EPOCH_FROM_MARCH_0000: u64 = 719_468;
    let z = days.saturating_add(EPOCH_FROM_MARCH_0000);
    let era = z / DAYS_PER_ERA;
    let day_of_era = z % DAYS_PER_ERA;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    // month is 1..=12 and day 1..=31 by construction.
    (
        u32::try_from(year).unwrap_or(u32::MAX),
        month as u32,
        day as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{Just, Strategy};

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

    /// Refused by both rule sets.
    const MALFORMED: &[&str] = &[
        "",
        "2026-11-30",
        "2026-11-30T22:14:03",
        "2026-11-30 22:14:03Z",
        "2026-11-30T22:14:03.Z",
        "2026-11-30T22:14:03Zz",
        "2026-11-30T22:14:03+0100",
        "2026-11-30T22:14:03+1:00",
        "2026-11-30T22:14:03+01:00Z",
        "2026-11-30T22:14:03+24:00",
        "2026-11-30T22:14:03+01:60",
        "2026-11-30T22:14:03 +01:00",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-11-00T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T22:60:00Z",
        "2026-11-30T22:14:61Z",
        "2026-11-30T22:14:60Z",
        "2026-12-31T23:59:60+01:00",
        "1969-12-31T23:59:59Z",
        "1970-01-01T00:30:00+01:00",
        "0000-01-01T00:00:00Z",
        "２026-11-30T22:14:03Z",
        "2026-11-30T22:14:0aZ",
        "2026-11-30T22:14:03.12a4Z",
        "not a time at all!!!",
    ];

    #[test]
    fn both_rule_sets_refuse_malformed_times() {
        for text in MALFORMED {
            assert_eq!(EventTime::parse(text), Err(InvalidTime), "{text}");
            assert_eq!(EventTime::parse_lenient(text), Err(InvalidTime), "{text}");
        }
    }

    #[test]
    fn reads_any_rfc3339_offset_but_writes_only_z() {
        // (text, the same instant in annal's write form)
        let table = [
            ("2026-11-30T23:14:03+01:00", "2026-11-30T22:14:03Z"),
            ("2026-12-01T00:14:03.5+02:00", "2026-11-30T22:14:03.5Z"),
            ("2026-11-30T16:44:03-05:30", "2026-11-30T22:14:03Z"),
            ("2026-11-30T22:14:03-00:00", "2026-11-30T22:14:03Z"),
            ("2026-11-30T22:14:03+00:00", "2026-11-30T22:14:03Z"),
            ("2026-11-30T22:14:03z", "2026-11-30T22:14:03Z"),
            ("2026-11-30t22:14:03Z", "2026-11-30T22:14:03Z"),
            (
                "2026-11-30T22:14:03.1234567891Z",
                "2026-11-30T22:14:03.123456789Z",
            ),
            ("2026-12-31T23:59:60Z", "2027-01-01T00:00:00Z"),
            ("2027-01-01T00:59:60+01:00", "2027-01-01T00:00:00Z"),
            ("2026-12-31T20:29:60-03:30", "2027-01-01T00:00:00Z"),
            ("1969-12-31T23:30:00-01:00", "1970-01-01T00:30:00Z"),
            ("1970-01-01T01:00:00+01:00", "1970-01-01T00:00:00Z"),
            ("2000-02-29T12:00:00+12:00", "2000-02-29T00:00:00Z"),
            ("9999-12-31T23:59:59Z", "9999-12-31T23:59:59Z"),
        ];
        for (text, utc) in table {
            assert_eq!(EventTime::parse(text), Err(InvalidTime), "{text}");
            let read = EventTime::parse_lenient(text).unwrap();
            assert_eq!(read.as_str(), text, "kept verbatim");
            assert!(!read.meets_write_rules(), "{text}");
            // The instant is computed from the lenient reader's own arithmetic for the UTC form
            // too, so compare against a known anchor as well as against the UTC text.
            let expected = EventTime::parse_lenient(utc).unwrap().since_epoch();
            assert_eq!(read.since_epoch(), expected, "{text}");
        }
        let plus_two = EventTime::parse_lenient("2026-12-01T00:14:03+02:00").unwrap();
        assert_eq!(plus_two.since_epoch().as_secs(), 1_796_076_843);
        let far = EventTime::parse_lenient("9999-12-31T23:59:59Z").unwrap();
        assert_eq!(far.since_epoch().as_secs(), 253_402_300_799);
    }

    #[test]
    fn write_form_is_what_parse_accepts() {
        for text in [
            "1970-01-01T00:00:00Z",
            "2500-12-31T23:59:59.999999999Z",
            "2026-11-30T22:14:03.500Z",
        ] {
            let strict = EventTime::parse(text).unwrap();
            assert!(strict.meets_write_rules());
            assert_eq!(EventTime::parse_lenient(text).unwrap(), strict);
        }
        // Valid RFC 3339 beyond annal's write range.
        for text in ["2501-01-01T00:00:00Z", "2026-11-30T22:14:03.0000000000Z"] {
            assert_eq!(EventTime::parse(text), Err(InvalidTime), "{text}");
            assert!(!EventTime::parse_lenient(text).unwrap().meets_write_rules());
        }
    }

    proptest::proptest! {
        #[test]
        fn formatting_matches_the_format_macro(
            secs in 0u64..=days_since_epoch(TIME_MAX_YEAR, 12, 31) as u64 * 86_400 + 86_399,
            nanos in proptest::prop_oneof![Just(0u32), 0u32..1_000_000_000, (1u32..1_000).prop_map(|n| n * 1_000_000)],
        ) {
            let (year, month, day) = civil_from_days(secs / 86_400);
            let rem = secs % 86_400;
            let mut want = format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
                rem / 3600,
                (rem / 60) % 60,
                rem % 60
            );
            if nanos != 0 {
                want.push('.');
                want.push_str(format!("{nanos:09}").trim_end_matches('0'));
            }
            want.push('Z');
            let t = EventTime::from_unix(Duration::new(secs, nanos)).unwrap();
            proptest::prop_assert_eq!(t.as_str(), want.as_str());
            proptest::prop_assert!(t.meets_write_rules());
        }
    }

    /// The calendar walked a year and a month at a time: the oracle for the closed form.
    fn civil_from_days_by_walking(mut days: u64) -> (u32, u32, u32) {
        let mut year = 1970u32;
        while days >= if is_leap(year) { 366 } else { 365 } {
            days -= if is_leap(year) { 366 } else { 365 };
            year += 1;
        }
        let mut month = 1u32;
        while month < 12 && days >= u64::from(days_in_month(year, month)) {
            days -= u64::from(days_in_month(year, month));
            month += 1;
        }
        (year, month, days as u32 + 1)
    }

    #[test]
    fn the_closed_form_calendar_matches_walking_it_on_every_day() {
        let mut walked = (1970u32, 1u32, 0u32);
        let last = u64::try_from(days_since_epoch(TIME_MAX_YEAR + 1, 12, 31)).unwrap();
        for days in 0..=last {
            // Walking one day at a time from the previous date.
            walked = if walked.2 == 0 {
                (1970, 1, 1)
            } else if walked.2 < days_in_month(walked.0, walked.1) {
                (walked.0, walked.1, walked.2 + 1)
            } else if walked.1 < 12 {
                (walked.0, walked.1 + 1, 1)
            } else {
                (walked.0 + 1, 1, 1)
            };
            assert_eq!(civil_from_days(days), walked, "day {days}");
        }
        for days in [0, 59, 60, 365, 10_957, 11_016, 20_000, last] {
            assert_eq!(civil_from_days(days), civil_from_days_by_walking(days));
        }
        assert_eq!(civil_from_days(u64::MAX).0, u32::MAX);
        assert!(EventTime::from_unix(Duration::MAX).is_err());
    }

    #[test]
    fn day_counts_match_the_formatter() {
        // `from_unix` walks the calendar a day at a time; the reader counts in closed form.
        for days in (0..=days_since_epoch(TIME_MAX_YEAR, 12, 31)).step_by(97) {
            let secs = u64::try_from(days).unwrap() * 86_400;
            let t = EventTime::from_unix(Duration::from_secs(secs)).unwrap();
            assert_eq!(
                EventTime::parse(t.as_str())
                    .unwrap()
                    .since_epoch()
                    .as_secs(),
                secs
            );
        }
    }
}
