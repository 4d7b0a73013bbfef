//! Time as payhook's own tools read and write it: the clock now, UTC dates,
//! ages and "since" times. Internal to payhook's crates (the dashboard, the
//! emulator, the CLI and the inbox); hidden from the documentation and not
//! part of the public API, so it may change in any release.
//!
//! One rule for every tool, so that `payhook inbox replay --since` and the
//! dashboard's replay form take the same text:
//!
//! * an **age** ([`parse_age`]): a whole number of at most 9 ASCII digits and
//!   a unit `s`, `m`, `h` or `d` (`90s`, `15m`, `2h`, `7d`);
//! * a **since** time ([`parse_since`]): an age back from now, Unix seconds
//!   (`1732264800`), a UTC date (`2026-11-23`, its midnight), or a UTC date
//!   and time: `2026-11-23 04:00`, `2026-11-23 04:00:00`, an optional `.fraction`
//!   of a second (ignored) and an optional `Z`; written with `T` instead of the
//!   space (RFC 3339, `2026-11-23T04:00:00Z`) it must end in `Z`, because
//!   ISO 8601 reads a `T` time without an offset as local time.
//!
//! Dates are proleptic Gregorian, counted in days from 1970-01-01 with Howard
//! Hinnant's `days_from_civil` / `civil_from_days` algorithms, which are exact
//! for every `i64` day count a Unix-milliseconds time can give.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Unix milliseconds now (0 if the system clock is before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| {
        i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    })
}

/// Unix seconds now (0 if the system clock is before 1970).
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

/// Whether `year` has a 29 February.
pub fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// The number of days of `month` (1–12) in `year`.
pub fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 as a date: (year, month 1–12, day 1–31).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Counted from 0000-03-01 so that the leap day is the last of its year.
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a date (month 1–12, day 1–31; not checked: see
/// [`days_in_month`]).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS`, UTC.
pub fn format_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// An age: a whole number of at most 9 ASCII digits and a unit, `s`, `m`,
/// `h` or `d` (`90s`, `15m`, `2h`, `7d`). `None` for anything else, a sign
/// included.
pub fn parse_age(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let number = &text[..text.len() - unit.len_utf8()];
    if number.is_empty() || number.len() > 9 || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // At most 999 999 999 days: no overflow.
    let n: u64 = number.parse().ok()?;
    let seconds = match unit {
        's' => n,
        'm' => n * 60,
        'h' => n * 3600,
        'd' => n * 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

/// Why a "since" text is not a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinceError {
    /// None of the accepted forms.
    NotATime,
    /// A date whose day its month does not have (`2026-02-31`).
    NoSuchDay {
        /// The year written.
        year: i64,
        /// The month written (1–12).
        month: i64,
        /// How many days that month has.
        days: i64,
    },
}

/// A "since" time (see the [module documentation](self) for the forms) as
/// Unix milliseconds; an age counts back from `now_ms`. Whether a time in the
/// future makes sense is the caller's to say.
pub fn parse_since(text: &str, now_ms: i64) -> Result<i64, SinceError> {
    if let Some(age) = parse_age(text) {
        return Ok(now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let seconds: i64 = text.parse().map_err(|_| SinceError::NotATime)?;
        return Ok(seconds.saturating_mul(1000));
    }
    let (date, rest) = text.split_at_checked(10).ok_or(SinceError::NotATime)?;
    let days = date_days(date)?;
    let mut seconds = 0;
    if !rest.is_empty() {
        let mut chars = rest.chars();
        let separator = chars.next();
        let clock = chars.as_str();
        let clock = match separator {
            Some(' ') => clock.strip_suffix(['Z', 'z']).unwrap_or(clock),
            Some('T' | 't') => clock.strip_suffix(['Z', 'z']).ok_or(SinceError::NotATime)?,
            _ => return Err(SinceError::NotATime),
        };
        seconds = clock_seconds(clock).ok_or(SinceError::NotATime)?;
    }
    Ok(days
        .saturating_mul(86_400)
        .saturating_add(seconds)
        .saturating_mul(1000))
}

/// `YYYY-MM-DD` as days since 1970-01-01.
fn date_days(date: &str) -> Result<i64, SinceError> {
    let bytes = date.as_bytes();
    let shape = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    if !shape {
        return Err(SinceError::NotATime);
    }
    let number = |range: std::ops::Range<usize>| date[range].parse::<i64>().map_err(|_| SinceError::NotATime);
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(SinceError::NotATime);
    }
    let days = days_in_month(year, month);
    if day > days {
        return Err(SinceError::NoSuchDay { year, month, days });
    }
    Ok(days_from_civil(year, month, day))
}

/// `HH:MM` or `HH:MM:SS[.fraction]` as seconds into the day (a leap second,
/// `:60`, counts as the next one).
fn clock_seconds(clock: &str) -> Option<i64> {
    let two_digits = |part: &str| -> Option<i64> {
        (part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit())).then(|| part.parse().ok())?
    };
    let mut parts = clock.split(':');
    let hour = two_digits(parts.next()?)?;
    let minute = two_digits(parts.next()?)?;
    let second = match parts.next() {
        None => 0,
        Some(second) => {
            let (whole, fraction) = second.split_once('.').unwrap_or((second, "0"));
            if fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            two_digits(whole)?
        }
    };
    if parts.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_dates_round_trip() {
        let mut expected = civil_from_days(-1_000_000);
        for days in -1_000_000..1_000_000 {
            let date = civil_from_days(days);
            assert_eq!(date, expected, "day {days}");
            assert_eq!(days_from_civil(date.0, date.1, date.2), days);
            // The next day, counted by hand.
            let (year, month, day) = date;
            expected = if day < days_in_month(year, month) {
                (year, month, day + 1)
            } else if month < 12 {
                (year, month + 1, 1)
            } else {
                (year + 1, 1, 1)
            };
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        // Far days do not overflow.
        let _ = civil_from_days(i64::MAX / 86_400_000);
        let _ = civil_from_days(i64::MIN / 86_400_000);
    }

    #[test]
    fn leap_years() {
        for (year, leap) in [
            (2024, true),
            (2000, true),
            (1900, false),
            (2100, false),
            (2026, false),
            (1600, true),
        ] {
            assert_eq!(is_leap_year(year), leap, "{year}");
            assert_eq!(days_in_month(year, 2), if leap { 29 } else { 28 });
        }
        assert_eq!(days_in_month(2026, 4), 30);
        assert_eq!(days_in_month(2026, 12), 31);
    }

    #[test]
    fn times_are_written_in_utc() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(1_709_210_096_000), "2024-02-29 12:34:56");
        assert_eq!(format_utc(1_709_210_096_999), "2024-02-29 12:34:56");
        assert_eq!(format_utc(-1000), "1969-12-31 23:59:59");
        assert_eq!(format_utc(-1), "1969-12-31 23:59:59");
        let _ = format_utc(i64::MIN);
        let _ = format_utc(i64::MAX);
    }

    #[test]
    fn ages_have_one_form() {
        assert_eq!(parse_age("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_age("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_age("7d"), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("0h"), Some(Duration::ZERO));
        assert_eq!(
            parse_age("999999999d"),
            Some(Duration::from_secs(999_999_999 * 86_400))
        );
        for wrong in [
            "",
            "h",
            "5",
            "5w",
            "+5h",
            "-1h",
            " 5h",
            "5 h",
            "1234567890s",
            "5é",
            "٣h",
            "²h",
            "5hh",
        ] {
            assert_eq!(parse_age(wrong), None, "{wrong:?}");
        }
    }

    #[test]
    fn since_takes_every_form() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_since("1h", now), Ok(now - 3_600_000));
        assert_eq!(parse_since("0s", now), Ok(now));
        assert_eq!(parse_since("1732264800", now), Ok(1_732_264_800_000));
        assert_eq!(parse_since("0", now), Ok(0));
        assert_eq!(parse_since("2024-11-22", now), Ok(1_732_233_600_000));
        assert_eq!(parse_since("2024-02-29", now), Ok(1_709_164_800_000));
        assert_eq!(parse_since("2024-02-29 12:34", now), Ok(1_709_210_040_000));
        assert_eq!(parse_since("2024-02-29 12:34Z", now), Ok(1_709_210_040_000));
        assert_eq!(parse_since("2024-02-29 12:34:56", now), Ok(1_709_210_096_000));
        assert_eq!(parse_since("2024-02-29T12:34:56Z", now), Ok(1_709_210_096_000));
        assert_eq!(parse_since("2024-02-29t12:34:56z", now), Ok(1_709_210_096_000));
        assert_eq!(parse_since("2024-02-29T12:34Z", now), Ok(1_709_210_040_000));
        assert_eq!(parse_since("2024-11-22T08:40:00Z", now), Ok(1_732_264_800_000));
        assert_eq!(parse_since("1970-01-01T00:00:00Z", now), Ok(0));
        assert_eq!(parse_since("2000-03-01T00:00:00.5Z", now), Ok(951_868_800_000));
        assert_eq!(parse_since("2000-02-29T00:00:00Z", now), Ok(951_782_400_000));
        assert_eq!(parse_since("2016-12-31T23:59:60Z", now), Ok(1_483_228_800_000));
        // The future is a time like any other here.
        assert_eq!(parse_since("2099-01-01", now), Ok(4_070_908_800_000));
    }

    #[test]
    fn since_refuses_the_rest() {
        let now = 1_800_000_000_000;
        for (text, year, month, days) in [
            ("2026-02-31", 2026, 2, 28),
            ("2023-02-29", 2023, 2, 28),
            ("1900-02-29T00:00:00Z", 1900, 2, 28),
            ("2026-04-31T10:00:00Z", 2026, 4, 30),
            ("2026-04-31 garbage", 2026, 4, 30),
        ] {
            assert_eq!(
                parse_since(text, now),
                Err(SinceError::NoSuchDay { year, month, days }),
                "{text}"
            );
        }
        for bad in [
            "",
            "yesterday",
            "last tuesday",
            "-5",
            "+5",
            "99999999999999999999",
            "99999999999999999999d",
            "5w",
            "2024-13-01",
            "2024-00-10",
            "2024-01-00",
            "2024-01-32",
            "2024-1-1",
            "2026-2-3",
            "02026-01-01",
            "2024-01-01 24:00",
            "2024-01-01 12:60",
            "2024-01-01 12:00:61",
            "2024-01-01 1:00",
            "2024-01-01 12",
            "2024-01-01 12:00:00:00",
            "2024-01-01 12:00:00.",
            "2024-01-01 12:00:00.x",
            "2024-01-01 12:00.5",
            "2024-11-22T08:40:00",
            "2024-11-22T08:40",
            "2024-11-22X08:40:00Z",
            "2024-11-22T",
            "2024-11-22 ",
            "2024-11-22T08:40:00+01:00",
            "２０２４-01-01",
            "2024-01-0é",
        ] {
            assert_eq!(parse_since(bad, now), Err(SinceError::NotATime), "{bad:?}");
        }
    }
}
