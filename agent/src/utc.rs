//! Times as an operator reads them in a sentence: Unix seconds in UTC, `2026-12-01 20:05:09
//! UTC`. The JSON documents keep Unix seconds; only text meant to be read uses this.

/// `unix_s` (seconds since 1970-01-01 UTC) as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn format_utc(unix_s: u64) -> String {
    let days = i64::try_from(unix_s / 86_400).unwrap_or(i64::MAX / 2);
    let rem = unix_s % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), by 400-year eras
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468; // the epoch shifted to 0000-03-01
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_read_as_utc() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(951_825_600), "2000-02-29 12:00:00 UTC");
        assert_eq!(format_utc(1_796_155_509), "2026-12-01 20:05:09 UTC");
        assert_eq!(format_utc(4_102_444_799), "2099-12-31 23:59:59 UTC");
    }
}
