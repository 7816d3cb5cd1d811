//! The one place that knows how `nvidia-smi` spells "no value".
//!
//! Every driver branch has its own way of saying a field has no reading: `N/A`, `[N/A]`,
//! `Not Supported`, R616's `Requested functionality has been deprecated`, and more. All
//! parsers go through [`present`] so that such a field is absent in bcd's documents, never
//! a string that looks like a value.

/// Spellings that mean "no value", compared case-insensitively after trimming and after
/// removing one pair of surrounding brackets (`[N/A]`, `[Not Supported]`, ...).
const NO_VALUE: &[&str] = &[
    "",
    "n/a",
    "na",
    "not supported",
    "unknown error",
    "none",
    "not found",
    "function not found",
    "requested functionality has been deprecated",
    "insufficient permissions",
    "gpu requires reset",
    "not available",
];

/// Returns the trimmed value, or `None` when `nvidia-smi` said there is no value.
pub fn present(raw: &str) -> Option<&str> {
    let value = raw.trim();
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(value)
        .trim();
    if NO_VALUE.iter().any(|nv| inner.eq_ignore_ascii_case(nv)) {
        None
    } else {
        Some(value)
    }
}

/// A version string with any `[Deprecated; ...]`-style suffix removed, or `None` when absent.
pub fn version(raw: &str) -> Option<&str> {
    let value = present(raw)?;
    let cut = value.find('[').map_or(value, |i| &value[..i]).trim();
    present(cut)
}

/// Parses the leading number of a reading such as `81559 MiB`, `250.00 W` or `-7 C`.
pub fn number(raw: &str) -> Option<f64> {
    let value = present(raw)?;
    let token = value.split_whitespace().next()?;
    token.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// Parses the leading unsigned integer of a reading such as `81559 MiB` or `3`.
pub fn unsigned(raw: &str) -> Option<u64> {
    let value = present(raw)?;
    value.split_whitespace().next()?.parse::<u64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_no_value_spelling_is_absent() {
        for raw in [
            "N/A",
            "[N/A]",
            "Not Supported",
            "[Not Supported]",
            "Unknown Error",
            "None",
            "Not Found",
            "Requested functionality has been deprecated",
            "[Requested functionality has been deprecated]",
            "[Function Not Found]",
            "",
            "   ",
        ] {
            assert_eq!(present(raw), None, "{raw:?} must read as no value");
        }
        assert_eq!(present(" 535.54.03 "), Some("535.54.03"));
    }

    #[test]
    fn version_drops_deprecation_suffix() {
        assert_eq!(
            version("616.56 [Deprecated; use kmd_version]"),
            Some("616.56")
        );
        assert_eq!(version("[Deprecated]"), None);
        assert_eq!(version("12.2"), Some("12.2"));
    }

    #[test]
    fn numbers_read_their_leading_token() {
        assert_eq!(unsigned("81559 MiB"), Some(81559));
        assert_eq!(number("250.00 W"), Some(250.0));
        assert_eq!(number("-7 C"), Some(-7.0));
        assert_eq!(number("N/A"), None);
        assert_eq!(unsigned("[N/A]"), None);
        assert_eq!(number("NaN W"), None);
    }
}
