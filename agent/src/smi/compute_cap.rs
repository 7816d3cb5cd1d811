//! `nvidia-smi --query-gpu=uuid,compute_cap --format=csv,noheader`: each GPU's CUDA compute
//! capability (`9.0` for Hopper), which `-q -x` does not carry.
//!
//! A header line (`uuid, compute_cap`), as a query without `noheader` prints, is skipped;
//! `[N/A]` and the other "no value" spellings read as no capability.

use thiserror::Error;

use super::{list::quote, text, value};

/// One GPU's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeCap {
    /// The GPU's UUID.
    pub uuid: String,
    /// `major.minor` (`9.0`, `12.0`), or `None` when the driver gave no value.
    pub compute_cap: Option<String>,
}

/// Why the compute-capability answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ComputeCapError {
    /// A line does not have the two columns asked for.
    #[error(
        "nvidia-smi --query-gpu=uuid,compute_cap, line {line}: expected 2 columns, found {found}: {text:?}"
    )]
    Columns {
        /// 1-based line number.
        line: usize,
        /// How many columns the line has.
        found: usize,
        /// The line, cut to a readable length.
        text: String,
    },
    /// The UUID column is empty or not a GPU UUID.
    #[error("nvidia-smi --query-gpu=uuid,compute_cap, line {line}: {text:?} is not a GPU UUID")]
    Uuid {
        /// 1-based line number.
        line: usize,
        /// The column as printed.
        text: String,
    },
    /// The capability column has a value that is not `major.minor`.
    #[error(
        "nvidia-smi --query-gpu=uuid,compute_cap, line {line}: {text:?} is not a compute capability (major.minor)"
    )]
    Capability {
        /// 1-based line number.
        line: usize,
        /// The column as printed.
        text: String,
    },
}

fn is_major_minor(cap: &str) -> bool {
    let Some((major, minor)) = cap.split_once('.') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
    digits(major) && digits(minor)
}

/// Parses the compute-capability query, one GPU a line, in output order.
///
/// # Errors
///
/// [`ComputeCapError`] for a line without exactly two columns, an empty or non-`GPU-` UUID,
/// or a capability that is present but not `major.minor`.
pub fn parse_compute_cap(bytes: &[u8]) -> Result<Vec<ComputeCap>, ComputeCapError> {
    let text = text::decode(bytes);
    let mut out = Vec::new();
    for (line, raw) in text::numbered_lines(&text) {
        if raw.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = raw.split(',').map(str::trim).collect();
        if cols.len() != 2 {
            return Err(ComputeCapError::Columns {
                line,
                found: cols.len(),
                text: quote(raw),
            });
        }
        if cols[0].eq_ignore_ascii_case("uuid") {
            continue;
        }
        if !cols[0].starts_with("GPU-") || cols[0].contains(char::is_whitespace) {
            return Err(ComputeCapError::Uuid {
                line,
                text: quote(cols[0]),
            });
        }
        let compute_cap = match value::present(cols[1]) {
            None => None,
            Some(cap) if is_major_minor(cap) => Some(cap.to_owned()),
            Some(cap) => {
                return Err(ComputeCapError::Capability {
                    line,
                    text: quote(cap),
                })
            }
        };
        out.push(ComputeCap {
            uuid: cols[0].to_owned(),
            compute_cap,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_caps_and_no_value() {
        let got = parse_compute_cap(
            b"uuid, compute_cap\r\nGPU-aaaa, 9.0\nGPU-bbbb, [N/A]\n\nGPU-cccc, 12.0\n",
        )
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].compute_cap.as_deref(), Some("9.0"));
        assert_eq!(got[1].compute_cap, None);
        assert_eq!(got[2].uuid, "GPU-cccc");
        assert_eq!(got[2].compute_cap.as_deref(), Some("12.0"));
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse_compute_cap(b"GPU-a, 9.0\nGPU-b\n").unwrap_err();
        assert_eq!(
            err,
            ComputeCapError::Columns {
                line: 2,
                found: 1,
                text: "GPU-b".into()
            }
        );
        let err = parse_compute_cap(b"GPU-a, nine\n").unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = parse_compute_cap(b"No devices were found, x\n").unwrap_err();
        assert!(matches!(err, ComputeCapError::Uuid { line: 1, .. }));
    }
}
