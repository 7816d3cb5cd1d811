//! `nvidia-smi nvlink -s` (each link's state) and `nvidia-smi nvlink -R` (each link's far end).
//!
//! Both print a `GPU <n>: <name> (UUID: ...)` line per GPU, then one indented
//! `Link <k>: ...` line per link (a tab and a space, or nine spaces, depending on the build).
//! `-s` answers `26.562 GB/s` for an active link and `<inactive>` for an idle one. A GPU
//! without NVLink gets an empty answer, or a line in place of its links:
//! `Device does not have or support Nvlink`,
//! `NVML: Unable to retrieve Nvlink information as all links are inActive`,
//! `Nvlink queries are not supported for Devices in MIG mode`. Those lines are kept as the
//! GPU's [`NvLinkGpu::unavailable`] note.
//!
//! `-R` (remote link info) names the far end of each link. No capture of it was available, so
//! this parser reads the far end from words, not positions, and the shape it was written for
//! is in `testdata/smi/nvlink/hgx-h100-8gpu-nvlink-R.txt`:
//!
//! ```text
//! GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
//!      Link 0: Remote Device SWITCH: Link 24, PCI Bus Id 00000000:05:00.0
//!      Link 1: Remote Device GPU: Link 3, PCI Bus Id 00000000:2A:00.0
//! ```
//!
//! A far end whose text says `switch` is an [`Remote::NvSwitch`] (named by its bus id when
//! one is printed); else a PCI bus id anywhere in the text makes it a [`Remote::Gpu`]; else it
//! is [`Remote::Other`] with the text as printed.

use bcd_protocol::PciAddress;
use thiserror::Error;

use super::{
    list::{gpu_header, quote},
    text, value,
};

/// One link's state, from `nvlink -s`.
#[derive(Debug, Clone, PartialEq)]
pub struct NvLinkState {
    /// The link number on its GPU.
    pub link: u32,
    /// Whether it is up, and how fast.
    pub state: LinkState,
}

/// A link's state.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkState {
    /// Up; `speed_gbps` is the printed speed in GB/s when there is one.
    Active {
        /// GB/s, as printed (`26.562`).
        speed_gbps: Option<f64>,
    },
    /// `<inactive>`.
    Inactive,
}

impl LinkState {
    /// `active` or `inactive`, the inventory's spelling.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            LinkState::Active { .. } => "active",
            LinkState::Inactive => "inactive",
        }
    }
}

/// One GPU's block of `nvlink -s`.
#[derive(Debug, Clone, PartialEq)]
pub struct NvLinkGpu {
    /// The GPU's index.
    pub index: u32,
    /// The GPU's UUID.
    pub uuid: String,
    /// Its links, in output order; empty when it has none or NVML refused.
    pub links: Vec<NvLinkState>,
    /// The line the driver printed instead of links (MIG mode, no NVLink, all inactive).
    pub unavailable: Option<String>,
}

/// The far end of a link, from `nvlink -R`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// A GPU, named by its PCI function; the caller resolves it to a GPU of this node.
    Gpu {
        /// The far GPU's function.
        bus_id: PciAddress,
    },
    /// An NVSwitch, printed as `nvswitch:<id>`; `id` is its NVML-form bus id when printed,
    /// else the text.
    NvSwitch {
        /// The switch's bus id, or the text that named it.
        id: String,
    },
    /// Anything else (an IBM NPU, `<inactive>`, an NVML error), as printed.
    Other(String),
}

impl std::fmt::Display for Remote {
    /// `<bus id>` for a GPU, `nvswitch:<id>` for a switch, the text otherwise.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Remote::Gpu { bus_id } => f.write_str(&bus_id.nvml_bus_id()),
            Remote::NvSwitch { id } => write!(f, "nvswitch:{id}"),
            Remote::Other(text) => f.write_str(text),
        }
    }
}

/// One link's far end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteLink {
    /// The link number on this GPU.
    pub link: u32,
    /// The far end.
    pub remote: Remote,
    /// The link number on the far end, when printed (`Link 24`).
    pub remote_link: Option<u32>,
}

/// One GPU's block of `nvlink -R`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvLinkRemotes {
    /// The GPU's index.
    pub index: u32,
    /// The GPU's UUID.
    pub uuid: String,
    /// Its links' far ends, in output order.
    pub links: Vec<RemoteLink>,
    /// The line the driver printed instead of links, as for `-s`.
    pub unavailable: Option<String>,
}

/// Why an `nvlink` answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NvLinkError {
    /// A `Link` line came before any GPU line.
    #[error("nvidia-smi nvlink {query}, line {line}: a link is listed before any GPU")]
    LinkBeforeGpu {
        /// `-s` or `-R`.
        query: &'static str,
        /// 1-based line number.
        line: usize,
    },
    /// A GPU or link line that cannot be read.
    #[error("nvidia-smi nvlink {query}, line {line}: {what}: {text:?}")]
    Malformed {
        /// `-s` or `-R`.
        query: &'static str,
        /// 1-based line number.
        line: usize,
        /// What is wrong, in words.
        what: &'static str,
        /// The line, cut to a readable length.
        text: String,
    },
}

/// A GPU block under construction, shared by both queries.
struct Block<T> {
    index: u32,
    uuid: String,
    links: Vec<T>,
    unavailable: Option<String>,
}

/// Walks GPU blocks, handing each `Link <k>: <rest>` line to `link`.
fn walk<T>(
    bytes: &[u8],
    query: &'static str,
    mut link: impl FnMut(u32, &str) -> Result<T, &'static str>,
) -> Result<Vec<Block<T>>, NvLinkError> {
    let text = text::decode(bytes);
    let mut blocks: Vec<Block<T>> = Vec::new();
    for (line, raw) in text::numbered_lines(&text) {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            continue;
        }
        let malformed = |what| NvLinkError::Malformed {
            query,
            line,
            what,
            text: quote(raw),
        };
        if let Some(header) = gpu_header(raw) {
            let header = header.map_err(malformed)?;
            blocks.push(Block {
                index: header.index,
                uuid: header.uuid,
                links: Vec::new(),
                unavailable: None,
            });
        } else if let Some(rest) = trimmed.strip_prefix("Link ") {
            let (number, rest) = rest
                .split_once(':')
                .ok_or_else(|| malformed("the link line has no colon"))?;
            let number = number
                .trim()
                .parse::<u32>()
                .map_err(|_| malformed("the link number is not a number"))?;
            let entry = link(number, rest.trim()).map_err(malformed)?;
            let block = blocks
                .last_mut()
                .ok_or(NvLinkError::LinkBeforeGpu { query, line })?;
            block.links.push(entry);
        } else if let Some(block) = blocks.last_mut() {
            // Keep the first refusal line; later ones repeat it.
            block.unavailable.get_or_insert_with(|| quote(raw));
        }
    }
    Ok(blocks)
}

fn link_state(rest: &str) -> Result<LinkState, &'static str> {
    let lower = rest.to_ascii_lowercase();
    if lower.contains("inactive") {
        return Ok(LinkState::Inactive);
    }
    if let Some(speed) = lower.strip_suffix("gb/s") {
        let speed = speed
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .ok_or("the link speed is not a number")?;
        return Ok(LinkState::Active {
            speed_gbps: Some(speed),
        });
    }
    if lower == "active" || lower == "<active>" {
        return Ok(LinkState::Active { speed_gbps: None });
    }
    Err("the link state is neither a speed in GB/s nor <inactive>")
}

/// Parses `nvidia-smi nvlink -s`.
///
/// Guarantees: one [`NvLinkGpu`] per GPU line, in output order, holding the `Link` lines
/// below it. Empty output (a GPU without NVLink) is an empty list.
///
/// # Errors
///
/// [`NvLinkError`] for a link before any GPU, an unreadable GPU line, or a link state that is
/// neither `<inactive>` nor a speed in GB/s.
pub fn parse_status(bytes: &[u8]) -> Result<Vec<NvLinkGpu>, NvLinkError> {
    let blocks = walk(bytes, "-s", |link, rest| {
        link_state(rest).map(|state| NvLinkState { link, state })
    })?;
    Ok(blocks
        .into_iter()
        .map(|b| NvLinkGpu {
            index: b.index,
            uuid: b.uuid,
            links: b.links,
            unavailable: b.unavailable,
        })
        .collect())
}

/// Finds the first PCI bus id in `text`.
fn find_bus_id(text: &str) -> Option<PciAddress> {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '[' | ']'))
        // `Remote Device 00000000:05:00.0: Link 2` ends the bus id with a colon.
        .find_map(|word| value::pci_address(word.trim_end_matches(':')))
}

/// Finds the number after the word `Link` in `text`.
fn find_remote_link(text: &str) -> Option<u32> {
    let mut words = text.split(|c: char| c.is_whitespace() || c == ',' || c == ':');
    while let Some(word) = words.next() {
        if word.eq_ignore_ascii_case("link") {
            return words.find(|w| !w.is_empty())?.parse().ok();
        }
    }
    None
}

fn remote_link(link: u32, rest: &str) -> RemoteLink {
    let lower = rest.to_ascii_lowercase();
    let bus = find_bus_id(rest);
    let remote = if lower.contains("switch") {
        Remote::NvSwitch {
            id: bus.map_or_else(|| quote(rest), |b| b.nvml_bus_id()),
        }
    } else if let Some(bus_id) = bus {
        Remote::Gpu { bus_id }
    } else {
        Remote::Other(quote(rest))
    };
    RemoteLink {
        link,
        remote,
        remote_link: find_remote_link(rest),
    }
}

/// Parses `nvidia-smi nvlink -R` (the format assumed is in the module doc).
///
/// Guarantees: one [`NvLinkRemotes`] per GPU line, in output order; every `Link` line gives
/// one [`RemoteLink`], never an error for an unknown far end (that is [`Remote::Other`]).
///
/// # Errors
///
/// [`NvLinkError`] for a link before any GPU, or an unreadable GPU or link number.
pub fn parse_remote(bytes: &[u8]) -> Result<Vec<NvLinkRemotes>, NvLinkError> {
    Ok(walk(bytes, "-R", |link, rest| Ok(remote_link(link, rest)))?
        .into_iter()
        .map(|b| NvLinkRemotes {
            index: b.index,
            uuid: b.uuid,
            links: b.links,
            unavailable: b.unavailable,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/smi/nvlink/");
        std::fs::read(format!("{path}{name}")).expect("fixture")
    }

    #[test]
    fn hgx_h100_status_has_18_active_links_per_gpu() {
        let gpus = parse_status(&fixture("hgx-h100-8gpu-nvlink-s.txt")).unwrap();
        assert_eq!(gpus.len(), 8);
        for gpu in &gpus {
            assert_eq!(gpu.links.len(), 18);
            assert_eq!(gpu.unavailable, None);
        }
        assert_eq!(
            gpus[3].links[17],
            NvLinkState {
                link: 17,
                state: LinkState::Active {
                    speed_gbps: Some(26.562)
                }
            }
        );
        // GPU 5 has one link down.
        assert_eq!(gpus[5].links[4].state, LinkState::Inactive);
        assert_eq!(gpus[5].links[4].state.as_str(), "inactive");
    }

    #[test]
    fn hgx_h100_remotes_are_nvswitches() {
        let gpus = parse_remote(&fixture("hgx-h100-8gpu-nvlink-R.txt")).unwrap();
        assert_eq!(gpus.len(), 8);
        assert!(gpus.iter().all(|g| g.links.len() == 18));
        let first = &gpus[0].links[0];
        assert_eq!(
            first.remote,
            Remote::NvSwitch {
                id: "00000000:05:00.0".into()
            }
        );
        assert_eq!(first.remote.to_string(), "nvswitch:00000000:05:00.0");
        assert_eq!(first.remote_link, Some(24));
        assert!(gpus
            .iter()
            .flat_map(|g| &g.links)
            .all(|l| matches!(l.remote, Remote::NvSwitch { .. })));
    }

    #[test]
    fn direct_gpu_links_widen_the_bus_id() {
        let out = b"GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-1)\n\t Link 0: Remote Device GPU: Link 2, PCI Bus Id 0000:3f:00.0\n\t Link 1: <inactive>\n";
        let gpus = parse_remote(out).unwrap();
        assert_eq!(
            gpus[0].links[0].remote,
            Remote::Gpu {
                bus_id: "0000:3f:00.0".parse().unwrap()
            }
        );
        assert_eq!(gpus[0].links[0].remote_link, Some(2));
        assert_eq!(gpus[0].links[1].remote, Remote::Other("<inactive>".into()));
    }

    #[test]
    fn a_bus_id_followed_by_a_colon_is_read() {
        let text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b)\n\t Link 0: Remote Device 00000000:05:00.0: Link 2\n";
        let gpus = parse_remote(text.as_bytes()).unwrap();
        assert_eq!(
            gpus[0].links[0].remote,
            Remote::Gpu {
                bus_id: "0000:05:00.0".parse().unwrap()
            }
        );
        assert_eq!(gpus[0].links[0].remote_link, Some(2));
    }

    #[test]
    fn refusals_become_notes_and_empty_is_empty() {
        assert_eq!(parse_status(b"").unwrap(), vec![]);
        let gpus = parse_status(
            b"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\r\nNvlink queries are not supported for Devices in MIG mode\r\n",
        )
        .unwrap();
        assert!(gpus[0].links.is_empty());
        assert_eq!(
            gpus[0].unavailable.as_deref(),
            Some("Nvlink queries are not supported for Devices in MIG mode")
        );
    }

    #[test]
    fn errors_name_query_and_line() {
        let err = parse_status(b"\t Link 0: 25 GB/s\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "nvidia-smi nvlink -s, line 1: a link is listed before any GPU"
        );
        let err = parse_status(b"GPU 0: X (UUID: GPU-0)\n Link 0: fast\n").unwrap_err();
        assert!(
            matches!(err, NvLinkError::Malformed { line: 2, .. }),
            "{err}"
        );
        let err = parse_remote(b"GPU 0: X (UUID: GPU-0)\n Link x: y\n").unwrap_err();
        assert!(
            err.to_string().starts_with("nvidia-smi nvlink -R, line 2"),
            "{err}"
        );
    }
}
