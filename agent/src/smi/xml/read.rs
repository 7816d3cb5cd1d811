//! The readers of one element's text (numbers, flags, modes, bus ids), each `None` for
//! every "no value" spelling, and the printable form of an element name for errors.

use std::borrow::Cow;

use super::{ComputeMode, MAX_QUOTED_NAME};
use crate::smi::value;

/// A present PCI address ([`value::pci_address`]).
pub(super) fn present_address(text: &str) -> Option<bcd_protocol::PciAddress> {
    value::present(text).and_then(value::pci_address)
}

pub(super) fn owned(text: &str) -> Option<String> {
    value::present(text).map(str::to_owned)
}

pub(super) fn owned_version(text: &str) -> Option<String> {
    value::version(text).map(str::to_owned)
}

pub(super) fn unsigned_u32(text: &str) -> Option<u32> {
    value::unsigned(text).and_then(|n| u32::try_from(n).ok())
}

/// A whole number that may be negative, such as `-7 C`.
pub(super) fn signed_i32(text: &str) -> Option<i32> {
    let n = value::number(text)?;
    if n.fract() != 0.0 || n < f64::from(i32::MIN) || n > f64::from(i32::MAX) {
        return None;
    }
    // In range and whole, so the conversion is exact.
    #[allow(clippy::cast_possible_truncation)]
    Some(n as i32)
}

/// `Enabled`/`Disabled` and `Yes`/`No`: [`value::flag`], the one reader of a flag.
pub(super) use value::flag;

/// `Yes`/`No`, `True`/`False` and `Active`/`Not Active` (health and clock event readings).
pub(super) use value::truth;

pub(super) fn compute_mode(text: &str) -> Option<ComputeMode> {
    let text = value::present(text)?;
    let is = |spelling: &str| {
        text.len() == spelling.len()
            && text
                .bytes()
                .zip(spelling.bytes())
                .all(|(a, b)| a.eq_ignore_ascii_case(&b) || (a == b' ' && b == b'_'))
    };
    if is("default") {
        Some(ComputeMode::Default)
    } else if is("exclusive_process") || is("exclusive_thread") {
        Some(ComputeMode::ExclusiveProcess)
    } else if is("prohibited") {
        Some(ComputeMode::Prohibited)
    } else {
        None
    }
}

/// A serial or UUID made only of zeros (and dashes): a placeholder, not an identity.
pub(super) fn is_zero_placeholder(text: &str) -> bool {
    text.bytes().any(|b| b == b'0') && text.bytes().all(|b| b == b'0' || b == b'-')
}

/// The element name for an error message, shortened and made printable.
pub(super) fn quote_name(name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    let name: Cow<'_, str> = if name.chars().count() > MAX_QUOTED_NAME {
        Cow::Owned(
            name.chars()
                .take(MAX_QUOTED_NAME)
                .chain("...".chars())
                .collect(),
        )
    } else {
        name
    };
    name.escape_debug().to_string()
}
