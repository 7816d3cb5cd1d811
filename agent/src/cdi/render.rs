//! A hold's CDI spec, `bcd-<hold>.json` of kind `bcd.dev/gpu`: one device per held device,
//! named by its id, carrying the edits of the NVIDIA device it stands for, and one device
//! named after the hold that stands for all of them.
//!
//! How `NVIDIA_VISIBLE_DEVICES` is carried, and why: a container must get exactly the
//! devices it asked for, through whichever runtime reads the spec.
//! - The common edits (applied whenever any device of the spec is asked for) set
//!   `NVIDIA_VISIBLE_DEVICES=void`, as NVIDIA's own spec does. They can name no device: a
//!   container that asked for two of a hold's three devices would be told all three, and
//!   NVIDIA's runtime in legacy mode (or in CDI mode, which turns the variable into
//!   `nvidia.com/gpu=` devices) would hand them over. `void` also overrides an image's
//!   `NVIDIA_VISIBLE_DEVICES=all` (CUDA images set it), which would otherwise give a
//!   legacy-mode runtime every GPU of the host.
//! - A held device's own edits never set it: CDI applies devices one after another and a
//!   variable set by each is overwritten by the last, so a container asking for two devices
//!   would be told one.
//! - The device named after the hold (`bcd.dev/gpu=<hold>`) carries every held device's
//!   edits and `NVIDIA_VISIBLE_DEVICES=<every held id>`: asking for the whole hold is the one
//!   request where naming every device is exactly right, and it is how a legacy-mode runtime
//!   or a Kubernetes binding gets the hold.

use std::collections::BTreeMap;

use super::spec::{
    has_unknown_fields, version_needs, CdiVersion, ContainerEdits, Device, Extra, Spec,
};
use super::vendor::{find_device, DeviceCatalog, VendorSpec};
use crate::device::id::{DeviceId, HoldId};

/// The kind of bcd's hold specs: a container asks for `bcd.dev/gpu=<uuid>`.
pub const HOLD_KIND: &str = "bcd.dev/gpu";

/// The latest `cdiVersion` that the runtimes still common on hosts read: podman 4.3
/// (Debian 12) and containerd before 1.7.2 refuse anything later as "unresolvable CDI
/// devices". A hold spec goes above it only when a field it copies needs it.
pub const COMMON_RUNTIMES_CDI_VERSION: CdiVersion = CdiVersion::V0_5_0;

/// The variable that tells NVIDIA's runtime and libraries which GPUs a container has.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// The value of [`VISIBLE_DEVICES`] in the common edits: no device.
pub const VISIBLE_NONE: &str = "void";

/// Set on a device that would otherwise carry no edit (no vendor spec, a device the vendor
/// spec does not name, a Kubernetes binding): CDI refuses a device with empty edits. The same
/// value on every device of a hold, so which one a runtime applies last does not matter.
pub const HOLD_ENV: &str = "BCD_HOLD";

/// Set, on the device named after a DRA claim's hold, to the claim's record (its uid,
/// namespace, name and pool devices, as compact JSON): the second record of the claim, from
/// which a hold rebuilt after `holds.json` was lost is the claim's again. An environment
/// variable, not an annotation, so the spec keeps the `cdiVersion` common runtimes read; no
/// container is given the hold's own device of a DRA hold (it gets the claim's spec).
pub const CLAIM_ENV: &str = "BCD_DRA_CLAIM";

/// Records `claim` in the hold spec `spec` of `hold` ([`CLAIM_ENV`] on the hold's device).
pub fn record_claim(spec: &mut Spec, hold: &HoldId, claim: &crate::device::DraClaim) {
    // Serialising plain data cannot fail.
    let json = serde_json::to_string(claim).unwrap_or_default();
    if let Some(d) = spec.devices.iter_mut().find(|d| d.name == hold.as_str()) {
        d.container_edits.env.retain(|e| env_key(e) != CLAIM_ENV);
        d.container_edits.env.push(format!("{CLAIM_ENV}={json}"));
    }
}

/// The DRA claim a hold spec of `hold` records ([`record_claim`]), when it records one whose
/// uid is the one the hold's id names. Pure.
pub fn recorded_claim(spec: &Spec, hold: &HoldId) -> Option<crate::device::DraClaim> {
    let device = spec.devices.iter().find(|d| d.name == hold.as_str())?;
    let json = device
        .container_edits
        .env
        .iter()
        .find_map(|e| e.strip_prefix(CLAIM_ENV)?.strip_prefix('='))?;
    let claim: crate::device::DraClaim = serde_json::from_str(json).ok()?;
    let uid = hold
        .as_str()
        .strip_prefix(crate::device::HoldOwner::Dra.id_prefix()?)?;
    (claim.uid == uid).then_some(claim)
}

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
    /// The field that raised `cdiVersion` above [`COMMON_RUNTIMES_CDI_VERSION`], when one did.
    pub version_forced_by: Option<&'static str>,
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

fn env_key(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(k, _)| k)
}

/// Adds `more` to `into`, leaving out what `into` already has (the hold device's edits are
/// the union of its devices', which share their GPU's node when they are slots or MIG
/// devices of one GPU).
fn union(into: &mut ContainerEdits, more: &ContainerEdits) {
    fn add<T: PartialEq + Clone>(into: &mut Vec<T>, more: &[T]) {
        for m in more {
            if !into.contains(m) {
                into.push(m.clone());
            }
        }
    }
    add(&mut into.env, &more.env);
    add(&mut into.device_nodes, &more.device_nodes);
    add(&mut into.hooks, &more.hooks);
    add(&mut into.mounts, &more.mounts);
    add(&mut into.additional_gids, &more.additional_gids);
    add(&mut into.net_devices, &more.net_devices);
    if into.intel_rdt.is_none() {
        into.intel_rdt.clone_from(&more.intel_rdt);
    }
    for (k, v) in &more.extra {
        into.extra.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// Renders the spec of a hold. Pure: no I/O, no logging; the caller logs `unnamed` and
/// `version_forced_by`.
///
/// Guarantees:
/// - one device per distinct held device, in the order given, named [`DeviceId::cdi_name`],
///   carrying exactly the edits of the vendor device it stands for (a slot: its GPU's; never
///   another GPU's), or a single `BCD_HOLD=<hold>` when there is none;
/// - then one device named after the hold: the union of those edits, `BCD_HOLD=<hold>` and
///   `NVIDIA_VISIBLE_DEVICES=<held ids, comma-separated>`;
/// - the common edits are the vendor spec's, with `NVIDIA_VISIBLE_DEVICES=void` in place of
///   the vendor's; a Kubernetes binding has none (its plugin sets the variable itself);
/// - `cdiVersion` is the lowest that the fields used need ([`version_needs`]); where the
///   copied edits carry a field bcd does not know, the vendor's version when that is later.
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
    let mut unknown_fields = false;
    if let Some(v) = chosen {
        common = v.spec.container_edits.clone();
        common.env.retain(|e| env_key(e) != VISIBLE_DEVICES);
        unknown_fields |= has_unknown_fields(&common);
    }
    if !request.kubernetes {
        common.env.push(format!("{VISIBLE_DEVICES}={VISIBLE_NONE}"));
    }

    let mut unnamed = Vec::new();
    let mut whole = ContainerEdits::default();
    let mut spec_devices: Vec<Device> = devices
        .iter()
        .map(|&id| {
            let found = chosen.and_then(|v| find_device(&v.spec, id, catalog));
            if chosen.is_some() && found.is_none() {
                unnamed.push(id.clone());
            }
            let mut edits = found.map(|d| d.container_edits.clone()).unwrap_or_default();
            // A vendor device never decides which devices a container was given.
            edits.env.retain(|e| env_key(e) != VISIBLE_DEVICES);
            unknown_fields |= has_unknown_fields(&edits);
            if edits.is_empty() {
                edits.env.push(format!("{HOLD_ENV}={}", request.hold));
            }
            union(&mut whole, &edits);
            Device {
                name: id.cdi_name(),
                annotations: BTreeMap::new(),
                container_edits: edits,
                extra: Extra::new(),
            }
        })
        .collect();
    let visible: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
    let hold_env = format!("{HOLD_ENV}={}", request.hold);
    if !whole.env.contains(&hold_env) {
        whole.env.push(hold_env);
    }
    whole
        .env
        .push(format!("{VISIBLE_DEVICES}={}", visible.join(",")));
    spec_devices.push(Device {
        name: request.hold.as_str().to_owned(),
        annotations: BTreeMap::new(),
        container_edits: whole,
        extra: Extra::new(),
    });

    let mut spec = Spec {
        cdi_version: String::new(),
        kind: HOLD_KIND.to_owned(),
        annotations: BTreeMap::new(),
        devices: spec_devices,
        container_edits: common,
        extra: Extra::new(),
    };
    let needs = version_needs(&spec);
    let mut version = needs
        .iter()
        .map(|(v, _)| *v)
        .fold(CdiVersion::EARLIEST, CdiVersion::max);
    let mut forced_by = needs
        .iter()
        .filter(|(v, _)| *v > COMMON_RUNTIMES_CDI_VERSION)
        .max_by_key(|(v, _)| *v)
        .map(|(_, f)| *f);
    if unknown_fields {
        // parse_spec checked the version; a spec built by hand adds nothing.
        let theirs = chosen
            .and_then(|v| v.spec.cdi_version.parse().ok())
            .unwrap_or(CdiVersion::EARLIEST);
        if theirs > version {
            version = theirs;
            if theirs > COMMON_RUNTIMES_CDI_VERSION {
                forced_by = Some("a field bcd does not know (the vendor's version is kept)");
            }
        }
    }
    spec.cdi_version = version.to_string();
    Rendered {
        spec,
        vendor: chosen.map(|v| v.path.clone()),
        unnamed,
        version_forced_by: forced_by,
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
