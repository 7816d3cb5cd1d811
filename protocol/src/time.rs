//! The one UTC calendar of both binaries: RFC 3339 date-times written from a `SystemTime`
//! (the helper's audit log, the agent's node feature file) and read back into one. Pure: no
//! clock is read here, nothing is written.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// RFC 3339 in UTC with milliseconds: `2025-01-31T12:34:56.789Z`. A time before 1970 is
/// written as the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!(
        "{}.{:03}Z",
        date_time(since.as_secs()),
        since.subsec_millis()
    )
}

/// RFC 3339 in UTC to the second: `2025-01-31T12:34:56Z`. A time before 1970 is written as
/// the epoch.
pub fn rfc3339_seconds(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}Z", date_time(since.as_secs()))
}

/// `YYYY-MM-DDThh:mm:ss` of `secs` after the epoch.
fn date_time(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Reads an RFC 3339 date-time as Go's `time.RFC3339` layout parses it: `2025-01-31T12:34:56Z`
/// or with an offset (`+02:00`), optionally with a fraction of a second after the seconds;
/// `T` and `Z` may be in lower case. `None` for anything else, for a field out of range (a
/// 31 February, second 60) and for a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let digits = |from: usize, n: usize| -> Option<u32> {
        let part = b.get(from..from + n)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0u32, |acc, &c| acc * 10 + u32::from(c - b'0'))
        })
    };
    let at = |i: usize, c: u8| b.get(i).is_some_and(|&x| x.eq_ignore_ascii_case(&c));
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':')) {
        return None;
    }
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if at(i, b'.') || at(i, b',') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let fraction = &text[start..i.min(start + 9)];
        nanos = fraction.parse::<u32>().ok()? * 10u32.pow(9 - fraction.len() as u32);
    }
    let offset: i64 = if at(i, b'Z') {
        i += 1;
        0
    } else {
        let sign = match b.get(i) {
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => return None,
        };
        let (h, m) = (digits(i + 1, 2)?, digits(i + 4, 2)?);
        if !at(i + 3, b':') || h > 23 || m > 59 {
            return None;
        }
        i += 6;
        sign * (i64::from(h) * 3600 + i64::from(m) * 60)
    };
    if i != b.len() {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second)
        - offset;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), by 400-year eras.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468; // shift the epoch to 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year, March-based
    let mp = (5 * doy + 2) / 153; // month, March = 0
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The inverse of [`civil_from_days`]: days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400); // year of era, 0..=399
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 }); // month, March = 0
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1; // day of year, March-based
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // day of era
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day in a century leap year) 12:00:00.5
        let t = UNIX_EPOCH + Duration::from_millis(951_825_600_500);
        assert_eq!(rfc3339(t), "2000-02-29T12:00:00.500Z");
        assert_eq!(rfc3339_seconds(t), "2000-02-29T12:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_735_689_599);
        assert_eq!(rfc3339(t), "2024-12-31T23:59:59.000Z");
    }

    #[test]
    fn written_dates_read_back() {
        for secs in [
            0,
            951_825_600,
            1_735_689_599,
            4_102_444_800,
            253_402_300_799,
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_rfc3339(&rfc3339_seconds(t)), Some(t), "{secs}");
            let t = t + Duration::from_millis(250);
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t), "{secs}");
        }
        for day in 0..(366 * 5) {
            let t = UNIX_EPOCH + Duration::from_secs(day * 86_400 + 11_000_000_000 % 86_400);
            assert_eq!(parse_rfc3339(&rfc3339_seconds(t)), Some(t));
        }
    }

    #[test]
    fn offsets_fractions_and_bad_fields_read_as_rfc3339_says() {
        let noon = parse_rfc3339("2024-06-01T12:00:00Z").unwrap();
        assert_eq!(parse_rfc3339("2024-06-01T14:00:00+02:00"), Some(noon));
        assert_eq!(parse_rfc3339("2024-06-01t07:30:00-04:30"), Some(noon));
        assert_eq!(parse_rfc3339("2024-06-01T12:00:00z"), Some(noon));
        assert_eq!(
            parse_rfc3339("2024-06-01T12:00:00.123456789Z"),
            Some(noon + Duration::from_nanos(123_456_789))
        );
        for bad in [
            "",
            "2024-06-01",
            "2024-06-01 12:00:00Z",
            "2024-06-01T12:00:00",
            "2024-02-30T12:00:00Z",
            "2023-02-29T12:00:00Z",
            "2024-13-01T12:00:00Z",
            "2024-06-01T24:00:00Z",
            "2024-06-01T12:00:60Z",
            "2024-06-01T12:00:00.Z",
            "2024-06-01T12:00:00+0200",
            "2024-06-01T12:00:00Z ",
            "1969-12-31T23:59:59Z",
            "２０２４-06-01T12:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
        assert!(parse_rfc3339("2000-02-29T00:00:00Z").is_some());
    }
}
