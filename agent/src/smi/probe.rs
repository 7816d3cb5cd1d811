//! The probe behind doctor's `nvml` check: `nvidia-smi --query-gpu=driver_version
//! --format=csv,noheader`, which answers the driver version once per GPU.

use thiserror::Error;

use super::{list::quote, text, value};

/// What the probe learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The driver version (`590.48.01`), any `[Deprecated ...]` suffix removed.
    pub driver_version: String,
    /// How many GPUs answered (one line each).
    pub gpu_count: usize,
}

/// Why the probe's answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProbeError {
    /// No line at all: the driver listed no GPU.
    #[error("nvidia-smi --query-gpu=driver_version: the answer lists no GPU")]
    NoGpus,
    /// A line that is not a driver version (an error message, usually).
    #[error(
        "nvidia-smi --query-gpu=driver_version, line {line}: {text:?} is not a driver version"
    )]
    NotAVersion {
        /// 1-based line number.
        line: usize,
        /// The line, cut to a readable length.
        text: String,
    },
}

fn is_version(v: &str) -> bool {
    v.split('.')
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Parses the probe's answer.
///
/// Guarantees: `gpu_count` is the number of non-blank lines, all of them driver versions; the
/// version is the first line's (all GPUs of a host share one driver). A header line
/// (`driver_version`) is skipped.
///
/// # Errors
///
/// [`ProbeError::NoGpus`] for an answer without lines, [`ProbeError::NotAVersion`] for a line
/// that is not `digits(.digits)*`.
pub fn parse_probe(bytes: &[u8]) -> Result<Probe, ProbeError> {
    let text = text::decode(bytes);
    let mut driver_version = None;
    let mut gpu_count = 0usize;
    for (line, raw) in text::numbered_lines(&text) {
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.eq_ignore_ascii_case("driver_version") {
            continue;
        }
        let version = value::version(trimmed)
            .filter(|v| is_version(v))
            .ok_or_else(|| ProbeError::NotAVersion {
                line,
                text: quote(raw),
            })?;
        driver_version.get_or_insert_with(|| version.to_owned());
        gpu_count += 1;
    }
    let driver_version = driver_version.ok_or(ProbeError::NoGpus)?;
    Ok(Probe {
        driver_version,
        gpu_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_gpus_and_reads_the_version() {
        let probe = parse_probe(b"590.48.01\n590.48.01\r\n\n").unwrap();
        assert_eq!(
            probe,
            Probe {
                driver_version: "590.48.01".into(),
                gpu_count: 2
            }
        );
        let probe = parse_probe(b"616.56 [Deprecated; use kmd_version]\n").unwrap();
        assert_eq!(probe.driver_version, "616.56");
    }

    #[test]
    fn errors() {
        assert_eq!(parse_probe(b""), Err(ProbeError::NoGpus));
        let err = parse_probe(b"No devices were found\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "nvidia-smi --query-gpu=driver_version, line 1: \"No devices were found\" is not a driver version"
        );
    }
}
