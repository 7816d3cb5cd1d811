//! `nvidia-smi topo -m`: how each pair of GPUs is connected (NVLink, or which PCIe path).
//!
//! The matrix is tab-separated. Its header row names the columns (`GPU0 ... GPUn`, then NICs
//! as `NIC0` or, on older drivers, `mlx5_0`, then `CPU Affinity`, `NUMA Affinity`,
//! `GPU NUMA ID`), and recent drivers wrap it in ANSI underline escapes. Each `GPU<n>` row
//! gives one cell per column: `X` for itself, `NV<k>` for `k` bonded NVLinks, or the PCIe
//! path (`PIX`, `PXB`, `PHB`, `NODE`, `SYS`, and `SOC`, the pre-R396 name for `SYS`). The
//! legend follows after a blank line. NIC rows and columns are skipped. Rows carry an extra
//! empty cell before `GPU NUMA ID` (a real quirk of R5xx), so cells are read by position only
//! up to the NUMA affinity.

use std::collections::BTreeMap;
use std::fmt;

use thiserror::Error;

use super::{list::quote, text, value};

/// How two GPUs are connected, as one cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// A bonded set of this many NVLinks (`NV18`).
    NvLink(u32),
    /// At most one PCIe bridge (`PIX`).
    Pix,
    /// Several PCIe bridges, no host bridge (`PXB`).
    Pxb,
    /// A PCIe host bridge, typically the CPU (`PHB`).
    Phb,
    /// Host bridges within one NUMA node (`NODE`).
    Node,
    /// The SMP interconnect between NUMA nodes (`SYS`; older drivers print `SOC`, which reads
    /// as this variant and prints as `SYS`).
    Sys,
}

impl fmt::Display for Link {
    /// Prints the cell as current drivers do: `NV18`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::NvLink(n) => write!(f, "NV{n}"),
            Link::Pix => f.write_str("PIX"),
            Link::Pxb => f.write_str("PXB"),
            Link::Phb => f.write_str("PHB"),
            Link::Node => f.write_str("NODE"),
            Link::Sys => f.write_str("SYS"),
        }
    }
}

impl Link {
    /// Reads one matrix cell; `None` for `X` and anything unknown.
    pub(crate) fn from_cell(cell: &str) -> Option<Link> {
        match cell.trim() {
            "PIX" => Some(Link::Pix),
            "PXB" => Some(Link::Pxb),
            "PHB" => Some(Link::Phb),
            "NODE" => Some(Link::Node),
            "SYS" | "SOC" => Some(Link::Sys),
            other => other
                .strip_prefix("NV")
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse().ok())
                .map(Link::NvLink),
        }
    }
}

/// One `GPU<n>` row of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct TopoRow {
    /// The row's GPU index (`GPU3` is 3).
    pub gpu: u32,
    /// Every other GPU column of the row, by peer index. The row's own `X` cell is left out.
    pub peers: BTreeMap<u32, Link>,
    /// The `CPU Affinity` cell (`0-55,112-167`), `None` when empty or no value.
    pub cpu_affinity: Option<String>,
    /// The `NUMA Affinity` cell (`0`), `None` when empty or no value.
    pub numa_affinity: Option<String>,
}

/// Why a `topo -m` answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopoError {
    /// No header row with `GPU<n>` columns: the answer is not a matrix (WSL's driver and some
    /// Windows drivers print an error instead).
    #[error("nvidia-smi topo -m: no matrix header (a row naming GPU0...) in the answer{}", first_line.as_ref().map(|l| format!("; it says {l:?}")).unwrap_or_default())]
    NoMatrix {
        /// The first non-blank line of the answer, if any.
        first_line: Option<String>,
    },
    /// A GPU row has fewer cells than the header has GPU and NIC columns.
    #[error("nvidia-smi topo -m, line {line}: the row has {found} link cells, the header names {expected}")]
    ShortRow {
        /// 1-based line number.
        line: usize,
        /// Link cells found.
        found: usize,
        /// Link columns in the header.
        expected: usize,
    },
    /// A GPU-to-GPU cell that is none of `X`, `NV<k>`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`,
    /// `SOC`.
    #[error("nvidia-smi topo -m, line {line}: {cell:?} is not a known connection type")]
    UnknownCell {
        /// 1-based line number.
        line: usize,
        /// The cell as printed.
        cell: String,
    },
    /// The same GPU row appears twice.
    #[error("nvidia-smi topo -m, line {line}: GPU{gpu} has a second row")]
    DuplicateRow {
        /// 1-based line number.
        line: usize,
        /// The GPU index.
        gpu: u32,
    },
}

/// Reads `GPU<n>` as `n`.
fn gpu_label(cell: &str) -> Option<u32> {
    let n = cell.trim().strip_prefix("GPU")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Splits a row into cells: by tab, as `nvidia-smi` prints it; by whitespace when a copy lost
/// its tabs (then an empty affinity cell cannot be told apart, which only costs affinities).
fn cells(line: &str) -> Vec<&str> {
    if line.contains('\t') {
        line.split('\t').map(str::trim).collect()
    } else {
        let mut cells = vec![""];
        cells.extend(line.split_whitespace());
        if !line.starts_with(char::is_whitespace) {
            cells.remove(0);
        }
        cells
    }
}

/// A header cell that ends the link columns.
fn is_affinity_header(cell: &str) -> bool {
    let lower = cell.to_ascii_lowercase();
    lower.starts_with("cpu") || lower.starts_with("numa") || lower.starts_with("gpu numa")
}

/// Parses `nvidia-smi topo -m`.
///
/// Guarantees: one [`TopoRow`] per `GPU<n>` row, in output order; each row's `peers` holds
/// exactly the GPU columns other than its own. A single-GPU matrix gives one row with no
/// peers. NIC rows and columns and the legend are ignored.
///
/// # Errors
///
/// [`TopoError`] when there is no header row with GPU columns, a GPU row is short, a GPU cell
/// is an unknown connection type, or a GPU row repeats.
pub fn parse_topo(bytes: &[u8]) -> Result<Vec<TopoRow>, TopoError> {
    let text = text::decode(bytes);
    let mut lines = text::numbered_lines(&text).map(|(n, l)| (n, text::strip_ansi(l)));

    // The link columns: their header labels, in order; `Some(i)` for GPU i.
    let mut columns: Option<Vec<Option<u32>>> = None;
    let mut first_line = None;
    for (_, line) in lines.by_ref() {
        if first_line.is_none() && !line.trim().is_empty() {
            first_line = Some(quote(&line));
        }
        let header = cells(&line);
        let labels: Vec<&str> = header
            .iter()
            .skip(1)
            .copied()
            .take_while(|c| !is_affinity_header(c))
            .collect();
        if header.first().is_some_and(|c| c.is_empty())
            && labels.iter().any(|c| gpu_label(c).is_some())
        {
            columns = Some(labels.into_iter().map(gpu_label).collect());
            break;
        }
    }
    let Some(columns) = columns else {
        return Err(TopoError::NoMatrix { first_line });
    };

    let mut rows: Vec<TopoRow> = Vec::new();
    for (line_no, line) in lines {
        if line.trim().is_empty() || line.trim_start().starts_with("Legend") {
            break;
        }
        let row = cells(&line);
        let Some(gpu) = row.first().and_then(|c| gpu_label(c)) else {
            continue; // a NIC row
        };
        let links = row.get(1..).unwrap_or_default();
        if links.len() < columns.len() {
            return Err(TopoError::ShortRow {
                line: line_no,
                found: links.len(),
                expected: columns.len(),
            });
        }
        let mut peers = BTreeMap::new();
        for (cell, column) in links.iter().zip(&columns) {
            let Some(peer) = *column else { continue };
            if cell.eq_ignore_ascii_case("X") {
                continue;
            }
            let link = Link::from_cell(cell).ok_or_else(|| TopoError::UnknownCell {
                line: line_no,
                cell: quote(cell),
            })?;
            peers.insert(peer, link);
        }
        if rows.iter().any(|r| r.gpu == gpu) {
            return Err(TopoError::DuplicateRow { line: line_no, gpu });
        }
        let affinity = |i: usize| {
            links
                .get(columns.len() + i)
                .and_then(|c| value::present(c))
                .map(str::to_owned)
        };
        rows.push(TopoRow {
            gpu,
            peers,
            cpu_affinity: affinity(0),
            numa_affinity: affinity(1),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/smi/topo/");
        std::fs::read(format!("{path}{name}")).expect("fixture")
    }

    #[test]
    fn hgx_h100_is_nv18_everywhere_and_skips_nics() {
        let rows = parse_topo(&fixture("hgx-h100-8gpu-nics.txt")).unwrap();
        assert_eq!(rows.len(), 8);
        for row in &rows {
            assert_eq!(row.peers.len(), 7, "GPU{}", row.gpu);
            assert!(!row.peers.contains_key(&row.gpu));
            assert!(row.peers.values().all(|l| *l == Link::NvLink(18)));
        }
        assert_eq!(rows[0].cpu_affinity.as_deref(), Some("0-55,112-167"));
        assert_eq!(rows[0].numa_affinity.as_deref(), Some("0"));
        assert_eq!(rows[7].cpu_affinity.as_deref(), Some("56-111,168-223"));
        assert_eq!(rows[7].numa_affinity.as_deref(), Some("1"));
    }

    #[test]
    fn pcie_box_with_old_soc_and_mlx_columns() {
        let rows = parse_topo(&fixture("pcie-4gpu-soc-mlx.txt")).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].peers[&1], Link::Pix);
        assert_eq!(rows[0].peers[&2], Link::Sys);
        assert_eq!(rows[0].peers[&2].to_string(), "SYS");
        assert_eq!(rows[2].peers[&3], Link::Phb);
        assert_eq!(rows[1].peers[&3], Link::Sys);
    }

    #[test]
    fn single_gpu_matrix_has_one_row_without_peers() {
        let rows = parse_topo(b"\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-19\t0\t\tN/A\n\nLegend:\n").unwrap();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].peers.is_empty());
        assert_eq!(rows[0].cpu_affinity.as_deref(), Some("0-19"));
    }

    #[test]
    fn display_round_trips() {
        for cell in ["NV18", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"] {
            assert_eq!(Link::from_cell(cell).unwrap().to_string(), cell);
        }
        assert_eq!(Link::from_cell("X"), None);
        assert_eq!(Link::from_cell("NV"), None);
    }

    #[test]
    fn errors() {
        let err = parse_topo(b"ERROR: Option -m is missing its value.\n").unwrap_err();
        assert!(
            matches!(
                err,
                TopoError::NoMatrix {
                    first_line: Some(_)
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("Option -m"));
        let err = parse_topo(b"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tQQQ\t0\n").unwrap_err();
        assert_eq!(
            err,
            TopoError::UnknownCell {
                line: 2,
                cell: "QQQ".into()
            }
        );
        let err = parse_topo(b"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n").unwrap_err();
        assert!(matches!(
            err,
            TopoError::ShortRow {
                line: 2,
                found: 1,
                expected: 2
            }
        ));
        assert!(parse_topo(b"").is_err());
    }
}
