//! One formatter per unit, so that the same GPU reads the same in `bcd status`, `bcd doctor`,
//! `bcd diag`, `bcd hardware` and an error sentence: `58 °C`, `611 W / 700 W`,
//! `45123 MiB / 81559 MiB`, `12 %`, and a bus id in the kernel's form, `0000:18:00.0`.

use std::fmt::Display;
use std::time::Duration;

use bcd_protocol::{GpuUuid, PciAddress};

/// What a reading that is not there shows as, in every column and sentence.
pub const MISSING: &str = "-";

/// A temperature: `58 °C`.
pub fn temperature(celsius: i32) -> String {
    format!("{celsius} °C")
}

/// A power draw, rounded to whole watts: `611 W`.
pub fn power(watts: f64) -> String {
    format!("{watts:.0} W")
}

/// A power draw of a limit: `611 W / 700 W`; the draw alone when the limit is unknown, and
/// `- / 700 W` when only the limit is known.
pub fn power_of(draw: Option<f64>, limit: Option<f64>) -> Option<String> {
    match (draw, limit) {
        (Some(d), Some(l)) => Some(format!("{} / {}", power(d), power(l))),
        (Some(d), None) => Some(power(d)),
        (None, Some(l)) => Some(format!("{MISSING} / {}", power(l))),
        (None, None) => None,
    }
}

/// An amount of memory: `81559 MiB`.
pub fn memory(mib: u64) -> String {
    format!("{mib} MiB")
}

/// Memory used of a total: `45123 MiB / 81559 MiB`; the total alone when the use is unknown.
pub fn memory_of(used: Option<u64>, total: Option<u64>) -> Option<String> {
    match (used, total) {
        (Some(u), Some(t)) => Some(format!("{} / {}", memory(u), memory(t))),
        (Some(u), None) => Some(format!("{} / {MISSING}", memory(u))),
        (None, Some(t)) => Some(format!("{MISSING} / {}", memory(t))),
        (None, None) => None,
    }
}

/// A percentage: `12 %`.
pub fn percent(pct: u32) -> String {
    format!("{pct} %")
}

/// A bus id in the kernel's form, `0000:18:00.0`, whatever form it was read in.
pub fn bus_id(address: &PciAddress) -> String {
    address.to_string()
}

/// A GPU as a sentence names it: `GPU 0 (GPU-8f4c…)`, or its UUID alone when its index is
/// unknown.
pub fn gpu(index: Option<u32>, uuid: &GpuUuid) -> String {
    match index {
        Some(i) => format!("GPU {i} ({uuid})"),
        None => uuid.to_string(),
    }
}

/// An age in its largest whole unit: `12s`, `3m`, `2h`, `5d`.
pub fn age(elapsed: Duration) -> String {
    let s = elapsed.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `v` formatted by `f`, or [`MISSING`].
pub fn or_missing<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| MISSING.to_owned(), f)
}

/// `v` as it displays, or [`MISSING`].
pub fn shown_or_missing<T: Display>(v: Option<T>) -> String {
    or_missing(v, |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // What broke: status wrote `58°C 611/700 W 45123/81559 MiB` and doctor `58 C, 611 W of
    // 700 W, 45123 of 81559 MiB used`: one GPU read two ways.
    #[test]
    fn each_unit_has_one_form() {
        assert_eq!(temperature(58), "58 °C");
        assert_eq!(temperature(-3), "-3 °C");
        assert_eq!(power_of(Some(611.4), Some(700.0)).unwrap(), "611 W / 700 W");
        assert_eq!(power_of(Some(71.0), None).unwrap(), "71 W");
        assert_eq!(power_of(None, Some(700.0)).unwrap(), "- / 700 W");
        assert_eq!(power_of(None, None), None);
        assert_eq!(
            memory_of(Some(45123), Some(81559)).unwrap(),
            "45123 MiB / 81559 MiB"
        );
        assert_eq!(memory_of(None, Some(81559)).unwrap(), "- / 81559 MiB");
        assert_eq!(percent(12), "12 %");
    }

    // What broke: bus ids appeared as `00000000:2A:00.0` in one command and `0000:4a:00.0`
    // in another.
    #[test]
    fn a_bus_id_reads_in_the_kernels_form_whatever_it_was_read_in() {
        for raw in ["00000000:2A:00.0", "0000:2a:00.0", "0000:2A:00.0"] {
            assert_eq!(bus_id(&raw.parse().unwrap()), "0000:2a:00.0", "{raw}");
        }
    }

    #[test]
    fn a_gpu_is_named_by_index_and_uuid() {
        let uuid: GpuUuid = "GPU-8f4c6a52-1b2e-4d3a-9c7f-0123456789ab".parse().unwrap();
        assert_eq!(
            gpu(Some(0), &uuid),
            "GPU 0 (GPU-8f4c6a52-1b2e-4d3a-9c7f-0123456789ab)"
        );
        assert_eq!(gpu(None, &uuid), uuid.as_str());
    }

    #[test]
    fn an_age_is_its_largest_whole_unit() {
        let cases = [
            (0, "0s"),
            (12, "12s"),
            (59, "59s"),
            (60, "1m"),
            (200, "3m"),
            (3599, "59m"),
            (3600, "1h"),
            (7300, "2h"),
            (86_400, "1d"),
            (200_000, "2d"),
        ];
        for (s, want) in cases {
            assert_eq!(age(Duration::from_secs(s)), want, "{s}");
        }
    }
}
