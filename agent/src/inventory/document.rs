//! The inventory document (`bcd hardware --json`) and its canonical hash.
//!
//! Units are in the keys' names; absent values are omitted, never `"N/A"` or `0` standing for
//! unknown. Samples (usage) never enter this document. The hash is SHA-256 over the canonical
//! form of the `gpu` section: GPUs and every list inside them sorted by a stable key, so the
//! same facts give the same hash whatever order `nvidia-smi` printed them in.

use std::collections::BTreeMap;

use bcd_protocol::{GpuUuid, PciAddress};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::smi::xml::ComputeMode;

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// `sha256:` and the hex digest of [`GpuSection::canonical_bytes`].
    pub hash: String,
    /// The GPUs.
    pub gpu: GpuSection,
}

impl Inventory {
    /// The document for `section`, canonicalised and hashed.
    pub fn new(mut section: GpuSection) -> Self {
        section.canonicalize();
        let hash = section.hash();
        Self { hash, gpu: section }
    }
}

/// The node's GPUs and the driver that serves them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSection {
    /// The driver's version (`nvidia-smi`'s when it answered, else the kernel module's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// The CUDA driver version; only `nvidia-smi` gives it, so its presence tells that
    /// `nvidia-smi` answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_driver_version: Option<String>,
    /// NVML's version, when `nvidia-smi` reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_version: Option<String>,
    /// The GPUs: the driver's in index order, then those passed through to VMs.
    #[serde(default)]
    pub gpus: Vec<Gpu>,
}

/// One GPU. Its identifiers are validated types: the UUID in its normal form (lower case), so
/// two spellings of one GPU compare equal with `==`, and the PCI function parsed once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// Bus order among the driver's GPUs; passed-through GPUs follow.
    pub index: u32,
    /// `GPU-...`.
    pub uuid: GpuUuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Lower case: `hopper`, `ampere`, `ada-lovelace`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// The GPU's PCI function, written in NVML's form, `00000000:18:00.0`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nvml_bus_id")]
    pub bus_id: Option<PciAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vbios: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_part_number: Option<String>,
    /// `9.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_mode: Option<bool>,
    /// `default`, `exclusive-process` or `prohibited`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_mode: Option<ComputeMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc: Option<Ecc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_remap: Option<RowRemap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<Mig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<Fabric>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlinks: Vec<NvLink>,
    /// Peer GPU UUID to the link between them as `nvidia-smi topo -m` names it (`NV18`, `SYS`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<GpuUuid, String>,
    /// Only for a GPU remembered from `gpus-seen.json` while a VM holds it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passed_through: bool,
}

impl Gpu {
    /// The GPU `uuid` at `index` with no other fact known.
    pub fn new(index: u32, uuid: GpuUuid) -> Self {
        Self {
            index,
            uuid,
            name: None,
            architecture: None,
            bus_id: None,
            numa_node: None,
            serial: None,
            vbios: None,
            board_part_number: None,
            compute_capability: None,
            memory_total_mib: None,
            persistence_mode: None,
            compute_mode: None,
            ecc: None,
            row_remap: None,
            power_limit_w: None,
            mig: None,
            fabric: None,
            nvlinks: Vec::new(),
            topology: BTreeMap::new(),
            passed_through: false,
        }
    }

    /// The GPU's PCI function; `None` without a bus id (WSL 2).
    pub(crate) fn address(&self) -> Option<PciAddress> {
        self.bus_id
    }
}

/// `bus_id` as the document writes it: NVML's form, `00000000:18:00.0` (every form of a PCI
/// address reads back).
pub(crate) mod nvml_bus_id {
    use bcd_protocol::PciAddress;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        v: &Option<PciAddress>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(a) => s.serialize_str(&a.nvml_bus_id()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<PciAddress>, D::Error> {
        let raw: Option<String> = Option::deserialize(d)?;
        raw.map(|r| {
            crate::smi::value::pci_address(&r).ok_or_else(|| {
                serde::de::Error::custom(format!("bus_id {r:?} is not a PCI address"))
            })
        })
        .transpose()
    }
}

/// ECC mode and counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ecc {
    /// ECC enabled now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<bool>,
    /// Since the driver loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volatile: Option<EccCounts>,
    /// Over the GPU's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<EccCounts>,
}

/// Corrected and uncorrected error counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EccCounts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correctable: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrectable: Option<u64>,
}

/// Row remapping (Ampere and later).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowRemap {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correctable: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrectable: Option<u64>,
    /// A remap waits for a GPU reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<bool>,
    /// Remapping failed: the GPU needs replacing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<bool>,
}

/// MIG mode, instances and the profiles the GPU offers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mig {
    /// MIG enabled now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<bool>,
    /// MIG mode after the next reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_mode: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<MigDevice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<MigProfile>,
}

/// A MIG instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDevice {
    /// `MIG-...`, from `nvidia-smi -L` (one that names no MIG device is left out, and the
    /// collection says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<crate::device::id::MigUuid>,
    /// `3g.40gb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// GPU instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gi: Option<u32>,
    /// Compute instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mib: Option<u64>,
}

/// A GPU instance profile (`nvidia-smi mig -lgip`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MigProfile {
    /// `1g.10gb`.
    pub name: String,
    /// The profile id.
    pub id: u32,
    /// How many instances of it the GPU can hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances_total: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm: Option<u32>,
}

/// NVLink fabric membership (NVSwitch systems).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fabric {
    pub cluster_uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clique_id: Option<u32>,
}

/// One NVLink.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvLink {
    pub link: u32,
    /// `active` or `inactive`.
    pub state: String,
    /// The far end, when `nvidia-smi nvlink -R` named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<NvLinkRemote>,
}

/// What the inventory writes in front of an NVSwitch's id.
const NVSWITCH_PREFIX: &str = "nvswitch:";

/// The far end of one NVLink.
///
/// Its JSON is one string: a GPU of this node by its UUID (`GPU-...`); an NVSwitch as
/// `nvswitch:<id>`; anything else `nvidia-smi` printed, as printed. Every string reads back
/// into the value that writes the same string, so a document read and written again keeps
/// its bytes (and its hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum NvLinkRemote {
    /// A GPU of this node.
    Gpu(GpuUuid),
    /// An NVSwitch port, named by its NVML-form bus id when `nvidia-smi` printed one, else by
    /// the text that named it. A far end at a bus id that is no GPU of this node is one too:
    /// NVLink joins GPUs to GPUs or to NVSwitches only.
    NvSwitch(String),
    /// A far end present but not understood (an IBM NPU, `<inactive>`, an NVML error), as
    /// printed.
    Unknown(String),
}

impl From<String> for NvLinkRemote {
    fn from(s: String) -> Self {
        if let Some(id) = s.strip_prefix(NVSWITCH_PREFIX) {
            return Self::NvSwitch(id.to_owned());
        }
        // Only a UUID already in normal form is a GPU: any other spelling stays as written.
        match s.parse::<GpuUuid>() {
            Ok(uuid) if uuid == s.as_str() => Self::Gpu(uuid),
            _ => Self::Unknown(s),
        }
    }
}

impl From<NvLinkRemote> for String {
    fn from(r: NvLinkRemote) -> Self {
        r.to_string()
    }
}

impl std::fmt::Display for NvLinkRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gpu(uuid) => f.write_str(uuid.as_str()),
            Self::NvSwitch(id) => write!(f, "{NVSWITCH_PREFIX}{id}"),
            Self::Unknown(text) => f.write_str(text),
        }
    }
}

impl GpuSection {
    /// Sorts every list by a key that does not depend on output order.
    pub(crate) fn canonicalize(&mut self) {
        self.gpus.sort_by(|a, b| {
            (a.passed_through, a.index, &a.uuid).cmp(&(b.passed_through, b.index, &b.uuid))
        });
        for gpu in &mut self.gpus {
            gpu.nvlinks.sort_by_key(|l| l.link);
            if let Some(mig) = &mut gpu.mig {
                mig.devices
                    .sort_by(|a, b| (a.gi, a.ci, &a.uuid).cmp(&(b.gi, b.ci, &b.uuid)));
                mig.profiles
                    .sort_by(|a, b| (a.id, &a.name).cmp(&(b.id, &b.name)));
            }
        }
    }

    /// The canonical bytes: compact JSON of the canonicalised section, fields in declaration
    /// order, maps in key order.
    pub(crate) fn canonical_bytes(&self) -> Vec<u8> {
        let mut section = self.clone();
        section.canonicalize();
        // Serialising plain data to a Vec cannot fail.
        serde_json::to_vec(&section).unwrap_or_default()
    }

    /// `sha256:` and the hex digest of the canonical bytes.
    pub(crate) fn hash(&self) -> String {
        let digest = Sha256::digest(self.canonical_bytes());
        let mut out = String::with_capacity(7 + 64);
        out.push_str("sha256:");
        for byte in digest {
            out.push_str(&format!("{byte:02x}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "GPU-0000000a-0000-0000-0000-000000000000";
    const B: &str = "GPU-0000000b-0000-0000-0000-000000000000";

    fn gpu(index: u32, uuid: &str) -> Gpu {
        Gpu {
            name: Some("NVIDIA H100 80GB HBM3".into()),
            ..Gpu::new(index, uuid.parse().unwrap())
        }
    }

    #[test]
    fn an_nvlink_remote_writes_back_the_string_it_was_read_from() {
        let cases = [
            ("\"GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b\"", "gpu"),
            ("\"nvswitch:00000000:05:00.0\"", "switch"),
            ("\"nvswitch:\"", "switch"),
            ("\"<inactive>\"", "unknown"),
            ("\"GPU-5AE30E40-78BA-E5DF-4B1A-D79C2D43241B\"", "unknown"),
            ("\"\"", "unknown"),
        ];
        for (json, kind) in cases {
            let remote: NvLinkRemote = serde_json::from_str(json).unwrap();
            let read = match remote {
                NvLinkRemote::Gpu(_) => "gpu",
                NvLinkRemote::NvSwitch(_) => "switch",
                NvLinkRemote::Unknown(_) => "unknown",
            };
            assert_eq!(read, kind, "{json}");
            assert_eq!(serde_json::to_string(&remote).unwrap(), json);
        }
    }

    #[test]
    fn the_hash_ignores_output_order() {
        let mut a = GpuSection {
            driver_version: Some("570.86.15".into()),
            ..GpuSection::default()
        };
        let mut g0 = gpu(0, A);
        g0.nvlinks = vec![
            NvLink {
                link: 1,
                state: "active".into(),
                remote: Some(NvLinkRemote::NvSwitch("1".into())),
            },
            NvLink {
                link: 0,
                state: "active".into(),
                remote: Some(NvLinkRemote::NvSwitch("0".into())),
            },
        ];
        a.gpus = vec![g0.clone(), gpu(1, B)];
        let mut b = a.clone();
        b.gpus.reverse();
        b.gpus[1].nvlinks.reverse();
        assert_eq!(a.hash(), b.hash());
        assert!(a.hash().starts_with("sha256:") && a.hash().len() == 71);
        a.gpus[0].memory_total_mib = Some(81559);
        assert_ne!(a.hash(), b.hash(), "a changed fact must change the hash");
    }

    #[test]
    fn absent_values_are_omitted() {
        let json = serde_json::to_string(&gpu(0, A)).unwrap();
        assert_eq!(
            json,
            format!(r#"{{"index":0,"uuid":"{A}","name":"NVIDIA H100 80GB HBM3"}}"#)
        );
    }

    #[test]
    fn typed_ids_keep_the_documents_spelling() {
        // nvidia-smi's spelling is lower case; an upper-case one reads into the same UUID.
        let mut g = gpu(0, &A.to_uppercase());
        g.bus_id = Some("0000:1a:00.0".parse().unwrap());
        g.compute_mode = Some(ComputeMode::ExclusiveProcess);
        g.topology.insert(B.parse().unwrap(), "NV18".into());
        let json = serde_json::to_string(&g).unwrap();
        assert!(json.contains(&format!(r#""uuid":"{A}""#)), "{json}");
        assert!(json.contains(r#""bus_id":"00000000:1A:00.0""#), "{json}");
        assert!(
            json.contains(r#""compute_mode":"exclusive-process""#),
            "{json}"
        );
        assert!(
            json.contains(&format!(r#""topology":{{"{B}":"NV18"}}"#)),
            "{json}"
        );
        let back: Gpu = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back, g,
            "the document reads back into the same typed record"
        );
        let bad = json.replace("00000000:1A:00.0", "not-a-bus");
        let err = serde_json::from_str::<Gpu>(&bad).unwrap_err().to_string();
        assert!(
            err.contains("bus_id \"not-a-bus\" is not a PCI address"),
            "{err}"
        );
    }
}
