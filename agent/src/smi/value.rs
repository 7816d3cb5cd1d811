//! The one place that knows how `nvidia-smi` spells "no value".
//!
//! Every driver branch has its own way of saying a field has no reading: `N/A`, `[N/A]`,
//! `Not Supported`, R616's `Requested functionality has been deprecated`, and more. All
//! parsers go through [`present`] so that such a field is absent in bcd's documents, never
//! a string that looks like a value.

use bcd_protocol::PciAddress;

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
pub(crate) fn version(raw: &str) -> Option<&str> {
    let value = present(raw)?;
    let cut = value.find('[').map_or(value, |i| &value[..i]).trim();
    present(cut)
}

/// Parses the leading number of a reading such as `81559 MiB`, `250.00 W` or `-7 C`.
pub(crate) fn number(raw: &str) -> Option<f64> {
    let value = present(raw)?;
    let token = value.split_whitespace().next()?;
    token.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// Parses the leading unsigned integer of a reading such as `81559 MiB` or `3`.
pub(crate) fn unsigned(raw: &str) -> Option<u64> {
    let value = present(raw)?;
    value.split_whitespace().next()?.parse::<u64>().ok()
}

/// Parses the leading signed integer of a reading such as `-7 C` or `45`.
pub(crate) fn integer(raw: &str) -> Option<i64> {
    let value = present(raw)?;
    value.split_whitespace().next()?.parse::<i64>().ok()
}

/// Reads `Enabled`/`Disabled` (and `Yes`/`No`), as `mig.mode.current` and friends answer.
pub(crate) fn flag(raw: &str) -> Option<bool> {
    let value = present(raw)?;
    if value.eq_ignore_ascii_case("enabled") || value.eq_ignore_ascii_case("yes") {
        Some(true)
    } else if value.eq_ignore_ascii_case("disabled") || value.eq_ignore_ascii_case("no") {
        Some(false)
    } else {
        None
    }
}

/// Reads `Yes`/`No`, `True`/`False` and `Active`/`Not Active`, as the driver's health
/// readings and the clock event (throttle) reasons answer.
pub(crate) fn truth(raw: &str) -> Option<bool> {
    let value = present(raw)?;
    let is = |s: &str| value.eq_ignore_ascii_case(s);
    if is("yes") || is("true") || is("active") {
        Some(true)
    } else if is("no") || is("false") || is("not active") {
        Some(false)
    } else {
        None
    }
}

/// Reads a PCI function address in any form `nvidia-smi` or the kernel prints: NVML's
/// `DDDDDDDD:BB:DD.F`, the kernel's `DDDD:BB:DD.F` or a bare `BB:DD.F` (domain 0), in either
/// case. Returns `None` for anything else, and for a domain above `ffff` (Intel VMD's
/// `10000:...`): bcd's `PciAddress`, the helper protocol's type, takes four-digit domains only,
/// so such a function cannot be handed to the helper either.
pub(crate) fn pci_address(raw: &str) -> Option<PciAddress> {
    let value = raw.trim();
    let mut parts = value.rsplitn(3, ':');
    let dev_fn = parts.next()?;
    let bus = parts.next()?;
    let domain = parts.next().unwrap_or("0");
    let (device, function) = dev_fn.split_once('.')?;
    let hex = |s: &str, max_digits: usize| -> Option<u32> {
        if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(s, 16).ok()
    };
    PciAddress::new(
        hex(domain, 8)?,
        u8::try_from(hex(bus, 2)?).ok()?,
        u8::try_from(hex(device, 2)?).ok()?,
        u8::try_from(hex(function, 1)?).ok()?,
    )
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

    #[test]
    fn pci_addresses_read_in_every_printed_form() {
        let nvml = |raw: &str| pci_address(raw).map(|a| a.nvml_bus_id());
        assert_eq!(nvml("0000:18:00.0").as_deref(), Some("00000000:18:00.0"));
        assert_eq!(
            nvml("00000000:c1:00.0").as_deref(),
            Some("00000000:C1:00.0")
        );
        assert_eq!(nvml("1a:00.1").as_deref(), Some("00000000:1A:00.1"));
        assert_eq!(nvml(" 0000:af:1f.7 ").as_deref(), Some("00000000:AF:1F.7"));
        assert_eq!(
            nvml("00001580:00:00.0").as_deref(),
            Some("00001580:00:00.0")
        );
        for bad in [
            "",
            "18:00",
            "zz:00.0",
            "0000:18:00.9",
            "0000:18:40.0",
            "000000000:18:00.0",
            "00010000:18:00.0",
        ] {
            assert_eq!(pci_address(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn flags_and_integers() {
        assert_eq!(flag("Enabled"), Some(true));
        assert_eq!(flag(" Disabled "), Some(false));
        assert_eq!(flag("[N/A]"), None);
        assert_eq!(integer("-7 C"), Some(-7));
        assert_eq!(integer("4.5"), None);
    }
}
