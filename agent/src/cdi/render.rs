//! A hold's CDI spec, `bcd-<hold>.json` of kind `bcd.dev/gpu`: one device per held device,
//! named by its UUID, carrying the edits of the NVIDIA device it stands for.

use std::collections::BTreeMap;

use super::ids::{DeviceId, HoldId};
use super::spec::{minimum_version, CdiVersion, ContainerEdits, Device, Extra, Spec};
use super::vendor::{find_device, DeviceCatalog, VendorSpec};

/// The kind of bcd's hold specs: a container asks for `bcd.dev/gpu=<uuid>`.
pub const HOLD_KIND: &str = "bcd.dev/gpu";

/// bcd's own `cdiVersion`: 0.5.0, the lowest that every current runtime reads and that
/// `nvidia-ctk` itself writes when nothing newer is needed. A spec is written at the later of
/// this, the vendor spec's, and what its fields require.
pub const BCD_CDI_VERSION: CdiVersion = CdiVersion::V0_5_0;

/// The variable that tells NVIDIA's runtime and libraries which GPUs a container has.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// Set on a device that would otherwise carry no edit (no vendor spec, a device the vendor
/// spec does not name, a Kubernetes binding): CDI refuses a device with empty edits. The same
/// value on every device of a hold, so which one a runtime applies last does not matter.
pub const HOLD_ENV: &str = "BCD_HOLD";

/// What a hold is, as rendering needs it.
#[derive(Debug, Clone, Copy)]
pub struct HoldRequest<'a> {
    pub hold: &'a HoldId,
    pub devices: &'a [DeviceId],
    /// A Kubernetes binding: the kubelet's device plugin names NVIDIA's devices itself, so
    /// the spec carries no vendor edit.
    pub kubernetes: bool,
}

/// A rendered hold spec, and what it could not include.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub spec: Spec,
    /// The vendor spec it was built from, if any.
    pub vendor: Option<std::path::PathBuf>,
    /// Held devices the vendor spec does not name (its edits are missing from the spec until
    /// the toolkit regenerates NVIDIA's spec). Empty for a Kubernetes binding or with no
    /// vendor spec at all.
    pub unnamed: Vec<DeviceId>,
}

impl Rendered {
    /// The spec as written to disk: pretty JSON and a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain data to a Vec cannot fail.
        let mut bytes = serde_json::to_vec_pretty(&self.spec).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Renders the spec of a hold. Pure: no I/O, no logging; the caller logs `unnamed`.
///
/// Guarantees:
/// - one device per distinct held device, in the order given, named [`DeviceId::cdi_name`];
/// - each device carries exactly the edits of the vendor device it stands for (never another
///   GPU's), or a single `BCD_HOLD=<hold>` when there is none;
/// - the common edits are the vendor spec's, without its `NVIDIA_VISIBLE_DEVICES`, plus
///   `NVIDIA_VISIBLE_DEVICES=<held ids, comma-separated>`; a Kubernetes binding or no vendor
///   spec gives only that variable;
/// - `cdiVersion` is the latest of [`BCD_CDI_VERSION`], the vendor spec's and
///   [`minimum_version`] of the result.
///
/// With several vendor specs, the one that names the most held devices is used (the first in
/// reading order on a tie): edits of two generations of NVIDIA's spec are never mixed.
pub fn render(
    request: HoldRequest<'_>,
    vendor: &[VendorSpec],
    catalog: &DeviceCatalog,
) -> Rendered {
    let mut devices: Vec<&DeviceId> = Vec::with_capacity(request.devices.len());
    for d in request.devices {
        if !devices.contains(&d) {
            devices.push(d);
        }
    }
    let chosen = if request.kubernetes {
        None
    } else {
        choose_vendor(vendor, &devices, catalog)
    };

    let mut common = ContainerEdits::default();
    let mut version = BCD_CDI_VERSION;
    if let Some(v) = chosen {
        common = v.spec.container_edits.clone();
        common
            .env
            .retain(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) != VISIBLE_DEVICES);
        // parse_spec checked the version; a spec built by hand falls back to bcd's.
        version = version.max(v.spec.cdi_version.parse().unwrap_or(BCD_CDI_VERSION));
    }
    let visible: Vec<&str> = devices.iter().map(|d| d.as_str()).collect();
    common
        .env
        .push(format!("{VISIBLE_DEVICES}={}", visible.join(",")));

    let mut unnamed = Vec::new();
    let spec_devices = devices
        .iter()
        .map(|&id| {
            let found = chosen.and_then(|v| find_device(&v.spec, id, catalog));
            if chosen.is_some() && found.is_none() {
                unnamed.push(id.clone());
            }
            let mut edits = found.map(|d| d.container_edits.clone()).unwrap_or_default();
            if edits.is_empty() {
                edits.env.push(format!("{HOLD_ENV}={}", request.hold));
            }
            Device {
                name: id.cdi_name(),
                annotations: BTreeMap::new(),
                container_edits: edits,
                extra: Extra::new(),
            }
        })
        .collect();

    let mut spec = Spec {
        cdi_version: String::new(),
        kind: HOLD_KIND.to_owned(),
        annotations: BTreeMap::new(),
        devices: spec_devices,
        container_edits: common,
        extra: Extra::new(),
    };
    spec.cdi_version = version.max(minimum_version(&spec)).to_string();
    Rendered {
        spec,
        vendor: chosen.map(|v| v.path.clone()),
        unnamed,
    }
}

fn choose_vendor<'v>(
    vendor: &'v [VendorSpec],
    devices: &[&DeviceId],
    catalog: &DeviceCatalog,
) -> Option<&'v VendorSpec> {
    let mut best: Option<(&VendorSpec, usize)> = None;
    for v in vendor {
        let named = devices
            .iter()
            .filter(|id| find_device(&v.spec, id, catalog).is_some())
            .count();
        if best.is_none_or(|(_, n)| named > n) {
            best = Some((v, named));
        }
    }
    best.map(|(v, _)| v)
}
