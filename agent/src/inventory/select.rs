//! `-i/--id`: picking GPUs by any of their names, as `nvidia-smi -i` does: an index, a UUID
//! or a bus id in either form (`0000:18:00.0`, `00000000:18:00.0`).

use bcd_protocol::{GpuUuid, PciAddress};

/// One `-i` value, read as whichever name it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSelector {
    /// The inventory's index.
    Index(u32),
    /// The GPU's UUID.
    Uuid(GpuUuid),
    /// Its PCI bus id.
    BusId(PciAddress),
}

/// Why an `-i` value names no GPU in any form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is no GPU index, UUID (GPU-...) or bus id (0000:18:00.0)")]
pub struct NotASelector(String);

impl std::str::FromStr for GpuSelector {
    type Err = NotASelector;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Ok(i) = t.parse::<u32>() {
            return Ok(Self::Index(i));
        }
        if let Ok(u) = t.parse::<GpuUuid>() {
            return Ok(Self::Uuid(u));
        }
        if let Ok(a) = t.parse::<PciAddress>() {
            return Ok(Self::BusId(a));
        }
        Err(NotASelector(s.to_owned()))
    }
}

impl std::fmt::Display for GpuSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Index(i) => write!(f, "{i}"),
            Self::Uuid(u) => write!(f, "{u}"),
            Self::BusId(a) => write!(f, "{a}"),
        }
    }
}

/// The names a GPU answers to.
#[derive(Debug, Clone, Copy)]
pub struct GpuNames<'a> {
    pub index: Option<u32>,
    pub uuid: &'a GpuUuid,
    pub bus_id: Option<PciAddress>,
}

impl GpuSelector {
    /// Whether the GPU named `names` is this one.
    pub fn matches(&self, names: GpuNames<'_>) -> bool {
        match self {
            Self::Index(i) => names.index == Some(*i),
            Self::Uuid(u) => names.uuid == u,
            Self::BusId(a) => names.bus_id == Some(*a),
        }
    }
}

/// Why a selection cannot be made: the operator's usage error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("-i {selector}: no GPU of this node has this {kind}")]
pub struct NoSuchGpu {
    selector: GpuSelector,
    kind: &'static str,
}

/// The positions in `gpus` of the GPUs `selectors` name, in `gpus`' order, each once; every
/// position when `selectors` is empty.
///
/// # Errors
/// [`NoSuchGpu`] for the first selector that names none of them.
pub fn pick<'a>(
    gpus: impl IntoIterator<Item = GpuNames<'a>>,
    selectors: &[GpuSelector],
) -> Result<Vec<usize>, NoSuchGpu> {
    let gpus: Vec<GpuNames<'a>> = gpus.into_iter().collect();
    if selectors.is_empty() {
        return Ok((0..gpus.len()).collect());
    }
    let mut picked = vec![false; gpus.len()];
    for s in selectors {
        let mut any = false;
        for (i, g) in gpus.iter().enumerate() {
            if s.matches(*g) {
                picked[i] = true;
                any = true;
            }
        }
        if !any {
            let kind = match s {
                GpuSelector::Index(_) => "index",
                GpuSelector::Uuid(_) => "UUID",
                GpuSelector::BusId(_) => "bus id",
            };
            return Err(NoSuchGpu {
                selector: s.clone(),
                kind,
            });
        }
    }
    Ok((0..gpus.len()).filter(|&i| picked[i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    const B: &str = "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a";

    fn sel(s: &str) -> GpuSelector {
        s.parse().unwrap()
    }

    // What broke: no command could be pointed at one GPU by the name the operator had at
    // hand (nvidia-smi's index, a UUID, the kernel's or NVML's bus id).
    #[test]
    fn a_gpu_is_picked_by_index_uuid_or_either_bus_id() {
        let (a, b): (GpuUuid, GpuUuid) = (A.parse().unwrap(), B.parse().unwrap());
        let names = [
            GpuNames {
                index: Some(0),
                uuid: &a,
                bus_id: "0000:18:00.0".parse().ok(),
            },
            GpuNames {
                index: Some(1),
                uuid: &b,
                bus_id: "0000:2a:00.0".parse().ok(),
            },
        ];
        for (given, want) in [
            ("1", vec![1]),
            (B, vec![1]),
            ("0000:2a:00.0", vec![1]),
            ("00000000:2A:00.0", vec![1]),
            ("0000:18:00.0", vec![0]),
        ] {
            assert_eq!(pick(names, &[sel(given)]).unwrap(), want, "{given}");
        }
        // Given twice, or in two forms, a GPU is picked once, in the inventory's order.
        assert_eq!(
            pick(names, &[sel("1"), sel(A), sel(B)]).unwrap(),
            vec![0, 1]
        );
        assert_eq!(pick(names, &[]).unwrap(), vec![0, 1]);
        let e = pick(names, &[sel("0"), sel("7")]).unwrap_err();
        assert_eq!(e.to_string(), "-i 7: no GPU of this node has this index");
        let e = pick(names, &[sel("0000:99:00.0")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "-i 0000:99:00.0: no GPU of this node has this bus id"
        );
    }

    #[test]
    fn what_is_no_name_of_a_gpu_is_refused_when_parsed() {
        for bad in ["", "gpu0", "-1", "GPU-1234", "18:00"] {
            assert!(bad.parse::<GpuSelector>().is_err(), "{bad}");
        }
    }
}
