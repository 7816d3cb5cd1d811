//! `nvidia-smi -L`: the GPUs and, indented under each, its MIG devices.
//!
//! bcd reads it for each MIG device's UUID and profile, which it matches to the `-q -x`
//! instance by device number. The shapes it reads:
//!
//! ```text
//! GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a9c...)
//!   MIG 3g.40gb     Device  0: (UUID: MIG-0c4b...)
//!   MIG 1g.5gb Device 0: (UUID: MIG-GPU-5c89.../7/0)      (R450's form)
//! ```
//!
//! Blank lines and lines of any other shape are ignored; CRLF reads like LF.

use thiserror::Error;

use super::text;

/// One GPU line of `nvidia-smi -L`, with the MIG devices listed under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGpu {
    /// The index `nvidia-smi` gives the GPU.
    pub index: u32,
    /// The product name, as printed (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The GPU's UUID (`GPU-...`).
    pub uuid: String,
    /// Its MIG devices, in the order listed; empty when MIG is off.
    pub mig: Vec<ListedMig>,
}

/// One MIG device line of `nvidia-smi -L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedMig {
    /// The MIG device number (`Device  2:`), which `-q -x` calls the instance's index.
    pub device: u32,
    /// The profile without the `MIG ` prefix: `3g.40gb`, `1g.10gb+me`, `1c.3g.71gb`.
    pub profile: String,
    /// The MIG device's UUID: `MIG-...`, or R450's `MIG-GPU-.../gi/ci`.
    pub uuid: String,
}

/// Why `nvidia-smi -L` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ListError {
    /// A MIG device line came before any GPU line.
    #[error("nvidia-smi -L, line {line}: a MIG device is listed before any GPU")]
    MigBeforeGpu {
        /// 1-based line number.
        line: usize,
    },
    /// A line that starts like a GPU or MIG entry does not have its shape.
    #[error("nvidia-smi -L, line {line}: {what}: {text:?}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong, in words.
        what: &'static str,
        /// The line, cut to a readable length.
        text: String,
    },
}

/// The longest line text an error quotes.
const QUOTE_LIMIT: usize = 120;

pub(crate) fn quote(line: &str) -> String {
    line.trim().chars().take(QUOTE_LIMIT).collect()
}

/// A `GPU <n>: <name> (UUID: <uuid>)` line, as `-L` and `nvlink` print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuHeader {
    pub index: u32,
    pub name: String,
    pub uuid: String,
}

/// Reads a GPU header line. `None` when the line does not start like one (`GPU <digits>:`);
/// `Some(Err(what))` when it does but the rest is not readable.
pub(crate) fn gpu_header(line: &str) -> Option<Result<GpuHeader, &'static str>> {
    let rest = line.trim().strip_prefix("GPU ")?;
    let (index, rest) = rest.split_once(':')?;
    let index = index.trim();
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let Ok(index) = index.parse::<u32>() else {
        return Some(Err("the GPU index is out of range"));
    };
    let Some(open) = rest.rfind("(UUID:") else {
        return Some(Err("the GPU line has no (UUID: ...)"));
    };
    let name = rest[..open].trim();
    let Some(uuid) = rest[open + "(UUID:".len()..].trim().strip_suffix(')') else {
        return Some(Err("the GPU line's (UUID: ...) is not closed"));
    };
    let uuid = uuid.trim();
    if uuid.is_empty() || uuid.contains(char::is_whitespace) {
        return Some(Err("the GPU line's UUID is empty or has spaces"));
    }
    Some(Ok(GpuHeader {
        index,
        name: name.to_owned(),
        uuid: uuid.to_owned(),
    }))
}

fn mig_line(line: &str) -> Option<Result<ListedMig, &'static str>> {
    let rest = line.trim().strip_prefix("MIG ")?;
    let Some(at) = rest.find(" Device ") else {
        return Some(Err("the MIG line has no Device number"));
    };
    let profile = rest[..at].trim();
    let rest = &rest[at + " Device ".len()..];
    let Some((device, rest)) = rest.split_once(':') else {
        return Some(Err("the MIG line's Device number has no colon"));
    };
    let Ok(device) = device.trim().parse::<u32>() else {
        return Some(Err("the MIG line's Device number is not a number"));
    };
    let uuid = rest
        .trim()
        .strip_prefix("(UUID:")
        .and_then(|u| u.trim().strip_suffix(')'))
        .map(str::trim);
    let Some(uuid) = uuid.filter(|u| !u.is_empty() && !u.contains(char::is_whitespace)) else {
        return Some(Err("the MIG line has no readable (UUID: ...)"));
    };
    if profile.is_empty() {
        return Some(Err("the MIG line has no profile"));
    }
    Some(Ok(ListedMig {
        device,
        profile: profile.to_owned(),
        uuid: uuid.to_owned(),
    }))
}

/// Parses the output of `nvidia-smi -L`.
///
/// Guarantees: every GPU line yields one [`ListedGpu`] in output order, and every MIG line
/// lands under the GPU line above it. Lines of other shapes are skipped.
///
/// # Errors
///
/// [`ListError`] when a MIG line precedes every GPU line, or a line starting like a GPU
/// (`GPU <n>:`) or MIG (`MIG `) entry cannot be read.
pub fn parse_list(bytes: &[u8]) -> Result<Vec<ListedGpu>, ListError> {
    let text = text::decode(bytes);
    let mut gpus: Vec<ListedGpu> = Vec::new();
    for (line, raw) in text::numbered_lines(&text) {
        let malformed = |what| ListError::Malformed {
            line,
            what,
            text: quote(raw),
        };
        if let Some(header) = gpu_header(raw) {
            let header = header.map_err(malformed)?;
            gpus.push(ListedGpu {
                index: header.index,
                name: header.name,
                uuid: header.uuid,
                mig: Vec::new(),
            });
        } else if let Some(mig) = mig_line(raw) {
            let mig = mig.map_err(malformed)?;
            let gpu = gpus.last_mut().ok_or(ListError::MigBeforeGpu { line })?;
            gpu.mig.push(mig);
        }
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/smi/list/");
        std::fs::read(format!("{path}{name}")).expect("fixture")
    }

    #[test]
    fn a100_mig_devices_land_under_their_gpu() {
        let gpus = parse_list(&fixture("a100-mig-L.txt")).unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].name, "NVIDIA A100-SXM4-80GB");
        assert_eq!(gpus[0].mig.len(), 3);
        assert_eq!(
            gpus[0].mig[1],
            ListedMig {
                device: 1,
                profile: "2g.20gb".into(),
                uuid: "MIG-4f1f4b51-5e43-5a5f-9d2b-3f0e2cd1a7b2".into()
            }
        );
        assert_eq!(gpus[0].mig[2].profile, "1g.10gb+me");
        assert!(gpus[1].mig.is_empty());
        assert_eq!(gpus[1].index, 1);
    }

    #[test]
    fn r450_mig_uuids_with_gpu_prefix_and_crlf() {
        let gpus = parse_list(&fixture("a100-r450-mig-crlf-L.txt")).unwrap();
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].uuid, "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f");
        let uuids: Vec<_> = gpus[0].mig.iter().map(|m| m.uuid.as_str()).collect();
        assert_eq!(
            uuids,
            [
                "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0",
                "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/8/0"
            ]
        );
    }

    #[test]
    fn names_with_parentheses_keep_them() {
        let gpus = parse_list(b"GPU 3: Weird (rev 2) Board (UUID: GPU-1)\n").unwrap();
        assert_eq!(gpus[0].name, "Weird (rev 2) Board");
        assert_eq!(gpus[0].uuid, "GPU-1");
    }

    #[test]
    fn unknown_lines_are_ignored_and_empty_is_empty() {
        assert_eq!(parse_list(b"").unwrap(), vec![]);
        assert_eq!(
            parse_list(b"\nsomething else\nGPUs: none\n").unwrap(),
            vec![]
        );
    }

    #[test]
    fn mig_before_gpu_is_an_error_naming_the_line() {
        let err = parse_list(b"\n  MIG 1g.5gb Device 0: (UUID: MIG-1)\n").unwrap_err();
        assert_eq!(err, ListError::MigBeforeGpu { line: 2 });
        assert_eq!(
            err.to_string(),
            "nvidia-smi -L, line 2: a MIG device is listed before any GPU"
        );
    }

    #[test]
    fn a_gpu_line_without_uuid_is_an_error() {
        let err = parse_list(b"GPU 0: NVIDIA H100\n").unwrap_err();
        assert!(matches!(err, ListError::Malformed { line: 1, .. }), "{err}");
    }
}
