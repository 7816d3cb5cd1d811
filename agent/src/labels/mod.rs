//! Node labels a scheduler already understands: NVIDIA GPU Feature Discovery's label set
//! (its `nvidia.com/` names and value rules, release [`GFD_RELEASE`]) and a few of bcd's own
//! (`bcd.dev/`), as one pure function of the inventory, the health verdicts, two host facts
//! and the node's configuration ([`node_labels`]); the facts are read by [`host`], the labels
//! kept in a Node Feature Discovery feature file ([`nfd`]) by `bcd node`'s [`publish`] task.
//!
//! Where GFD's own choice is arbitrary, bcd's is fixed:
//! - **Mixed GPU models**: GFD labels one model per pass, whichever its map yields last, so
//!   its labels flap. bcd labels the model with the most GPUs (MIG mode included, as GFD
//!   counts), ties going to the model of the lowest-index GPU: the same inventory always
//!   gives the same labels.
//! - **MIG strategy**: bcd offers each MIG profile as its own resource
//!   (`bcd.dev/mig-<profile>`), which is GFD's `mixed` strategy; so the labels are mixed's:
//!   `nvidia.com/mig.strategy=mixed` wherever a GPU can do MIG (`mig.capable=true`), and the
//!   per-profile `nvidia.com/mig-<profile>.*` labels for the MIG devices that exist.
//! - **Slots** (`bcd node --gpu-slots N`) are GFD's time-slicing replicas
//!   (`gpu.replicas=N`, `gpu.sharing-strategy=time-slicing` for N > 1); they are offered
//!   under their own name (`bcd.dev/gpu-slot`), which GFD calls a renamed resource, so the
//!   product carries no `-SHARED` suffix.
//! - Not emitted: `gfd.timestamp` (it changes every pass, so every pass would rewrite the
//!   file and update the Node object; the file's expiry says how fresh the labels are), the
//!   vGPU labels (bcd has no vGPU support) and the MIG profiles' `engines.*` counts (the
//!   inventory does not keep them).

pub(crate) mod host;
pub mod nfd;
pub(crate) mod publish;

use std::collections::{BTreeMap, BTreeSet};

use bcd_protocol::{GpuUuid, PciAddress};

use crate::health::verdict::{kind, HealthState, ReasonKind, Verdict};
use crate::inventory::document::{Gpu, GpuSection, Inventory, MigDevice, NvLinkRemote};

/// The GPU Feature Discovery release whose label names and value rules these follow
/// (NVIDIA/k8s-device-plugin, `internal/lm`, `tests/expected-output*.txt`).
pub(crate) const GFD_RELEASE: &str = "v0.20.0";

/// The longest label value Kubernetes accepts (and the longest name after its prefix).
pub(crate) const MAX_VALUE: usize = 63;

/// The GPU Feature Discovery label names bcd emits, in one place.
pub(crate) mod name {
    /// The prefix of the whole-GPU resource labels.
    pub const GPU: &str = "nvidia.com/gpu";
    /// The prefix of a MIG profile's labels (`nvidia.com/mig-1g.10gb.count`).
    pub(crate) const MIG_PREFIX: &str = "nvidia.com/mig-";
    /// The driver version's parts (GFD's deprecated spelling).
    pub(crate) const DRIVER_MAJOR: &str = "nvidia.com/cuda.driver.major";
    /// See [`DRIVER_MAJOR`].
    pub(crate) const DRIVER_MINOR: &str = "nvidia.com/cuda.driver.minor";
    /// See [`DRIVER_MAJOR`].
    pub(crate) const DRIVER_REV: &str = "nvidia.com/cuda.driver.rev";
    /// The driver version's parts and the whole.
    pub(crate) const DRIVER_VERSION_MAJOR: &str = "nvidia.com/cuda.driver-version.major";
    /// See [`DRIVER_VERSION_MAJOR`].
    pub(crate) const DRIVER_VERSION_MINOR: &str = "nvidia.com/cuda.driver-version.minor";
    /// See [`DRIVER_VERSION_MAJOR`].
    pub(crate) const DRIVER_VERSION_REVISION: &str = "nvidia.com/cuda.driver-version.revision";
    /// See [`DRIVER_VERSION_MAJOR`].
    pub(crate) const DRIVER_VERSION_FULL: &str = "nvidia.com/cuda.driver-version.full";
    /// The CUDA version the driver supports (GFD's deprecated spelling).
    pub(crate) const RUNTIME_MAJOR: &str = "nvidia.com/cuda.runtime.major";
    /// See [`RUNTIME_MAJOR`].
    pub(crate) const RUNTIME_MINOR: &str = "nvidia.com/cuda.runtime.minor";
    /// The CUDA version the driver supports, and `<major>.<minor>`.
    pub(crate) const RUNTIME_VERSION_MAJOR: &str = "nvidia.com/cuda.runtime-version.major";
    /// See [`RUNTIME_VERSION_MAJOR`].
    pub(crate) const RUNTIME_VERSION_MINOR: &str = "nvidia.com/cuda.runtime-version.minor";
    /// See [`RUNTIME_VERSION_MAJOR`].
    pub(crate) const RUNTIME_VERSION_FULL: &str = "nvidia.com/cuda.runtime-version.full";
    /// The machine's DMI product name.
    pub(crate) const MACHINE: &str = "nvidia.com/gpu.machine";
    /// `compute`, `graphics` or `unknown`.
    pub(crate) const MODE: &str = "nvidia.com/gpu.mode";
    /// Whether any GPU can do MIG.
    pub(crate) const MIG_CAPABLE: &str = "nvidia.com/mig.capable";
    /// `mixed`, where a GPU can do MIG.
    pub(crate) const MIG_STRATEGY: &str = "nvidia.com/mig.strategy";
    /// Always `false`: bcd offers no MPS sharing.
    pub(crate) const MPS_CAPABLE: &str = "nvidia.com/mps.capable";
    /// `<cluster uuid>.<clique id>` of the NVLink fabric every fabric-attached GPU shares.
    pub(crate) const CLIQUE: &str = "nvidia.com/gpu.clique";
    /// bcd's: GPUs that may take work now.
    pub(crate) const HEALTHY: &str = "bcd.dev/gpu.healthy";
    /// bcd's: `ok` or `down`, on a node with an NVLink fabric.
    pub(crate) const FABRIC: &str = "bcd.dev/fabric";
    /// bcd's: the MIG layout the node applied last (`nvidia.com/mig.config` is the admin's
    /// key, which mig-manager watches: bcd never writes it).
    pub(crate) const MIG_CONFIG: &str = "bcd.dev/mig.config";
    /// bcd's: `true` while a GPU needs a reboot (for a fleet's drain or reboot controller).
    pub(crate) const REBOOT_REQUIRED: &str = "bcd.dev/reboot-required";
    /// mig-manager's state of the layout: `pending`, `success` or `failed`.
    pub(crate) const MIG_CONFIG_STATE: &str = "nvidia.com/mig.config.state";
}

/// A set of node labels: every name a Kubernetes label key with a prefix
/// (`nvidia.com/gpu.count`), every value a Kubernetes label value (empty, or at most 63 of
/// `A-Z a-z 0-9 - _ .` with a letter or digit at both ends), each name once, in name order.
/// [`Labels::insert`] is the only way in, and it checks both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(BTreeMap<String, String>);

/// Why a label was refused. `Display` names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LabelError {
    /// The name is no prefixed Kubernetes label key.
    #[error("{0:?} is not a Kubernetes label name (a DNS subdomain prefix, '/', then at most 63 of A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends)")]
    Name(String),
    /// The value is no Kubernetes label value.
    #[error("label {name}: {value:?} is not a Kubernetes label value (at most 63 of A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends)")]
    Value {
        /// The label.
        name: String,
        /// The refused value.
        value: String,
    },
}

impl Labels {
    /// Adds (or replaces) `name=value`.
    ///
    /// # Errors
    /// [`LabelError`] when the name or the value is not valid; nothing changes then.
    pub(crate) fn insert(
        &mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<(), LabelError> {
        let (name, value) = (name.into(), value.into());
        if !is_label_name(&name) {
            return Err(LabelError::Name(name));
        }
        if !is_label_value(&value) {
            return Err(LabelError::Value { name, value });
        }
        self.0.insert(name, value);
        Ok(())
    }

    /// Adds a label bcd composed; one that is not valid is left out, never published
    /// half-right (the names are constants and the free-text values pass [`fit_value`]).
    fn put(&mut self, name: impl Into<String>, value: impl ToString) {
        let _ = self.insert(name, value.to_string());
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The labels, in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `name=value` lines in name order, each ending in a newline: what `bcd hardware
    /// --labels` prints and the feature file holds after its directive.
    pub(crate) fn lines(&self) -> String {
        self.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
}

impl serde::Serialize for Labels {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Whether `name` is a Kubernetes label key with a prefix: a DNS subdomain, `/`, then at
/// most 63 of `A-Z a-z 0-9 - _ .` with a letter or digit at both ends.
pub(crate) fn is_label_name(name: &str) -> bool {
    name.split_once('/').is_some_and(|(prefix, rest)| {
        crate::kubelet::names::is_subdomain(prefix) && !rest.is_empty() && is_label_value(rest)
    })
}

/// Whether `value` is a Kubernetes label value: empty, or at most 63 of `A-Z a-z 0-9 - _ .`
/// with a letter or digit at both ends.
pub(crate) fn is_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    b.is_empty()
        || (b.len() <= MAX_VALUE
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(inner))
}

/// GFD's `sanitise`: every character outside `A-Z a-z 0-9 - _ .` and space dropped, then the
/// words joined with `-` (`NVIDIA H100 80GB HBM3` → `NVIDIA-H100-80GB-HBM3`).
pub(crate) fn sanitise(text: &str) -> String {
    let kept: String = text
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' '))
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join("-")
}

/// `text` made a label value: [`sanitise`]d, cut to 63 characters, and trimmed to a letter or
/// digit at both ends; `None` when nothing is left. (GFD publishes the sanitised text as it
/// is, and Node Feature Discovery's master drops a value that is too long.)
pub(crate) fn fit_value(text: &str) -> Option<String> {
    let mut value = sanitise(text);
    value.truncate(MAX_VALUE);
    let value = value.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!value.is_empty()).then(|| value.to_owned())
}

/// Every architecture family GFD names, for an architecture known without a compute
/// capability (R470's `nvidia-smi` refuses `compute_cap`).
pub(crate) const FAMILIES: [&str; 12] = [
    "tesla",
    "fermi",
    "kepler",
    "maxwell",
    "pascal",
    "volta",
    "turing",
    "ampere",
    "ada-lovelace",
    "hopper",
    "blackwell",
    "rubin",
];

/// GFD's `getArchFamily`: the family of a compute capability, `undefined` for one it does not
/// know.
pub(crate) fn family(major: u32, minor: u32) -> &'static str {
    match (major, minor) {
        (1, _) => "tesla",
        (2, _) => "fermi",
        (3, _) => "kepler",
        (5, _) => "maxwell",
        (6, _) => "pascal",
        (7, m) if m < 5 => "volta",
        (7, _) => "turing",
        (8, m) if m < 9 => "ampere",
        (8, _) => "ada-lovelace",
        (9, _) => "hopper",
        (10 | 12, _) => "blackwell",
        (13, _) => "rubin",
        _ => "undefined",
    }
}

/// What the labels depend on besides the inventory, the verdicts and the host: the node's
/// configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelConfig {
    /// Slots per GPU (`bcd node --gpu-slots`): GFD's time-slicing replicas.
    pub gpu_slots: u32,
    /// The MIG layout applied last and its state word, when one was.
    pub mig_layout: Option<(String, &'static str)>,
    /// A GPU needs a reboot (`bcd node --remediate`).
    pub reboot_required: bool,
}

/// The host facts GFD labels that the inventory does not hold, read by
/// [`host::HostFacts::read`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostFacts {
    /// The DMI product name (`/sys/class/dmi/id/product_name`), `None` when unreadable.
    pub machine: Option<String>,
    /// The NVIDIA GPU functions' PCI classes (`0x030200`), by address.
    pub pci_classes: BTreeMap<PciAddress, u32>,
}

/// The node's labels (sorted, each valid) for `inventory` judged by `verdicts` (a GPU
/// missing from them is not healthy), on a host with `facts`, configured by `config`. A node
/// without a GPU the driver lists has none. Pure: the same arguments give the same labels.
///
/// The `nvidia.com/` labels follow GFD [`GFD_RELEASE`] (see the module's documentation for
/// bcd's fixed choices); `bcd.dev/gpu.healthy` counts the GPUs whose verdict lets them take
/// work (healthy or degraded), and `bcd.dev/fabric`, on a node whose GPUs are in an NVLink
/// fabric (NVSwitches, a fabric cluster), is `down` while any GPU is unhealthy for the
/// fabric's sake (the fabric manager, a fabric state or route, a fatal NVSwitch error), else
/// `ok`.
pub(crate) fn node_labels(
    inventory: &Inventory,
    verdicts: &BTreeMap<GpuUuid, Verdict>,
    facts: &HostFacts,
    config: &LabelConfig,
) -> Labels {
    let mut gpus: Vec<&Gpu> = inventory
        .gpu
        .gpus
        .iter()
        .filter(|g| !g.passed_through)
        .collect();
    gpus.sort_by_key(|g| g.index);
    let mut out = Labels::default();
    if gpus.is_empty() {
        return out;
    }
    versions(&inventory.gpu, &mut out);
    out.put(
        name::MACHINE,
        facts
            .machine
            .as_deref()
            .and_then(fit_value)
            .unwrap_or_else(|| "unknown".into()),
    );
    let mig_capable = gpus.iter().any(|g| is_mig_capable(g));
    out.put(name::MIG_CAPABLE, mig_capable);
    out.put(name::MPS_CAPABLE, false);
    out.put(name::MODE, gpu_mode(&gpus, facts));
    whole_gpus(&gpus, config, &mut out);
    if mig_capable {
        out.put(name::MIG_STRATEGY, "mixed");
    }
    mig_profiles(&gpus, &mut out);
    clique(&gpus, &mut out);
    bcd_labels(&gpus, verdicts, &mut out);
    if config.reboot_required {
        out.put(name::REBOOT_REQUIRED, true);
    }
    if let Some((layout, state)) = &config.mig_layout {
        out.put(
            name::MIG_CONFIG,
            fit_value(layout).unwrap_or_else(|| "unnamed".into()),
        );
        out.put(name::MIG_CONFIG_STATE, state);
    }
    out
}

/// Whether `inventory` holds `nvidia-smi`'s answer (only `nvidia-smi` gives the CUDA
/// version): see [`hold_while_silent`].
pub(crate) fn nvidia_smi_answered(inventory: &Inventory) -> bool {
    inventory.gpu.cuda_driver_version.is_some()
}

/// What to publish after a collection: `fresh`, except while `nvidia-smi` does not answer
/// (`answered` false: it hangs on a wedged GPU, or the driver is not loaded yet) and labels
/// of an earlier answer are known (`last_answer`, from this run or the file a previous one
/// left): then those, with only `bcd.dev/gpu.healthy` taken from `fresh` (0 when nothing
/// answered). So labels never go missing because `nvidia-smi` is silent, and the count of
/// usable GPUs still says that it is.
pub(crate) fn hold_while_silent(
    fresh: Labels,
    answered: bool,
    last_answer: Option<&Labels>,
) -> Labels {
    match last_answer {
        Some(kept) if !answered && !kept.is_empty() => {
            let mut out = kept.clone();
            out.put(name::HEALTHY, fresh.get(name::HEALTHY).unwrap_or("0"));
            out
        }
        _ => fresh,
    }
}

/// The driver version's parts (when it has two or three, all digits, as GFD requires) and
/// the CUDA version's (when known).
fn versions(section: &GpuSection, out: &mut Labels) {
    if let Some(version) = section.driver_version.as_deref() {
        let parts: Vec<&str> = version.split('.').collect();
        let numeric = parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if (2..=3).contains(&parts.len()) && numeric {
            // GFD leaves the revision empty for a two-part version (WSL's 616.56).
            let revision = parts.get(2).copied().unwrap_or("");
            out.put(name::DRIVER_MAJOR, parts[0]);
            out.put(name::DRIVER_MINOR, parts[1]);
            out.put(name::DRIVER_REV, revision);
            out.put(name::DRIVER_VERSION_MAJOR, parts[0]);
            out.put(name::DRIVER_VERSION_MINOR, parts[1]);
            out.put(name::DRIVER_VERSION_REVISION, revision);
            out.put(name::DRIVER_VERSION_FULL, version);
        }
    }
    if let Some((major, minor)) = section.cuda_driver_version.as_deref().and_then(major_minor) {
        out.put(name::RUNTIME_MAJOR, major);
        out.put(name::RUNTIME_MINOR, minor);
        out.put(name::RUNTIME_VERSION_MAJOR, major);
        out.put(name::RUNTIME_VERSION_MINOR, minor);
        out.put(name::RUNTIME_VERSION_FULL, format!("{major}.{minor}"));
    }
}

/// `12.8` → (12, 8).
fn major_minor(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// MIG mode is reported for a GPU that can do MIG (on or off), and not for one that cannot.
fn is_mig_capable(gpu: &Gpu) -> bool {
    gpu.mig
        .as_ref()
        .is_some_and(|m| m.mode.is_some() || m.pending_mode.is_some())
}

fn is_mig_enabled(gpu: &Gpu) -> bool {
    gpu.mig.as_ref().and_then(|m| m.mode) == Some(true)
}

/// GFD's rule on the GPUs' PCI classes: all 3D controllers (`0x0302`) `compute`, all VGA
/// (`0x0300`) `graphics`, anything else (mixed, a GPU without a PCI function, as on WSL 2)
/// `unknown`.
fn gpu_mode(gpus: &[&Gpu], facts: &HostFacts) -> &'static str {
    use crate::sys::pci::{CLASS_3D, CLASS_VGA};
    let classes: BTreeSet<Option<u32>> = gpus
        .iter()
        .map(|g| {
            g.bus_id
                .and_then(|a| facts.pci_classes.get(&a))
                .map(|c| c >> 8)
        })
        .collect();
    match classes.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(CLASS_3D)] => "compute",
        [Some(CLASS_VGA)] => "graphics",
        _ => "unknown",
    }
}

/// The model labelled: the one with the most GPUs, ties to the model of the lowest-index GPU
/// (`gpus` are in index order). Its GPUs, in index order.
fn labelled_model<'a>(gpus: &[&'a Gpu]) -> Vec<&'a Gpu> {
    let mut models: Vec<(Option<&str>, Vec<&'a Gpu>)> = Vec::new();
    for gpu in gpus {
        match models.iter_mut().find(|(m, _)| *m == gpu.name.as_deref()) {
            Some((_, of)) => of.push(gpu),
            None => models.push((gpu.name.as_deref(), vec![gpu])),
        }
    }
    // In order of each model's lowest index: the first of the largest wins.
    let most = models.iter().map(|(_, of)| of.len()).max().unwrap_or(0);
    models
        .into_iter()
        .find(|(_, of)| of.len() == most)
        .map(|(_, of)| of)
        .unwrap_or_default()
}

/// GFD's whole-GPU labels (`nvidia.com/gpu.*`) for the labelled model: its GPUs counted with
/// those in MIG mode, the other facts from its first GPU not in MIG mode (GFD's full-GPU
/// labels override the MIG-enabled ones), else its first GPU. Replicas are the slots while
/// one of its GPUs is not in MIG mode (1 without slots), 0 when all are (GFD labels
/// MIG-enabled GPUs without sharing).
fn whole_gpus(gpus: &[&Gpu], config: &LabelConfig, out: &mut Labels) {
    let of_model = labelled_model(gpus);
    let Some(&first) = of_model.first() else {
        return;
    };
    let whole = of_model.iter().copied().find(|g| !is_mig_enabled(g));
    let representative = whole.unwrap_or(first);
    let replicas = if whole.is_some() {
        config.gpu_slots.max(1)
    } else {
        0
    };
    let key = |suffix: &str| format!("{}.{suffix}", name::GPU);
    if let Some(product) = first.name.as_deref().and_then(fit_value) {
        out.put(key("product"), product);
    }
    out.put(key("count"), of_model.len());
    out.put(key("replicas"), replicas);
    out.put(
        key("sharing-strategy"),
        if replicas > 1 { "time-slicing" } else { "none" },
    );
    if let Some(mib) = representative.memory_total_mib.filter(|&m| m > 0) {
        out.put(key("memory"), mib);
    }
    match representative
        .compute_capability
        .as_deref()
        .and_then(major_minor)
    {
        Some((0, _)) => {}
        Some((major, minor)) => {
            out.put(key("family"), family(major, minor));
            out.put(key("compute.major"), major);
            out.put(key("compute.minor"), minor);
        }
        None => {
            let arch = representative
                .architecture
                .as_deref()
                .map(|a| a.trim().to_ascii_lowercase().replace(' ', "-"));
            if let Some(arch) = arch.filter(|a| FAMILIES.contains(&a.as_str())) {
                out.put(key("family"), arch);
            }
        }
    }
}

/// GFD's mixed-strategy labels of each MIG profile present, counted over every GPU; the
/// product, memory and multiprocessors from its first device (by GPU index, then GPU
/// instance). A profile bcd offers no resource for (a name outside `[a-z0-9.]`, such as
/// `1g.10gb+me`) gets none: its label names would not be valid either.
fn mig_profiles(gpus: &[&Gpu], out: &mut Labels) {
    let mut profiles: BTreeMap<String, (usize, &Gpu, &MigDevice)> = BTreeMap::new();
    for gpu in gpus.iter().copied().filter(|g| is_mig_enabled(g)) {
        let Some(mig) = &gpu.mig else { continue };
        for device in &mig.devices {
            let Some(profile) = device.profile.as_deref() else {
                continue;
            };
            profiles
                .entry(profile.to_ascii_lowercase())
                .or_insert((0, gpu, device))
                .0 += 1;
        }
    }
    for (profile, (count, gpu, device)) in profiles {
        if crate::kubelet::devices::Resource::of_mig_profile(&profile).is_none() {
            continue;
        }
        let key = |suffix: &str| format!("{}{profile}.{suffix}", name::MIG_PREFIX);
        let parts: Vec<String> = [gpu.name.as_deref().unwrap_or(""), "MIG", &profile]
            .iter()
            .map(|p| sanitise(p))
            .filter(|p| !p.is_empty())
            .collect();
        if let Some(product) = fit_value(&parts.join("-")) {
            out.put(key("product"), product);
        }
        out.put(key("count"), count);
        // bcd shares no MIG device: GFD's replicas for a resource without sharing.
        out.put(key("replicas"), 1);
        out.put(key("sharing-strategy"), "none");
        if let Some(mib) = device.memory_total_mib.filter(|&m| m > 0) {
            out.put(key("memory"), mib);
        }
        let listed = gpu.mig.as_ref().and_then(|m| {
            m.profiles
                .iter()
                .find(|p| p.name.eq_ignore_ascii_case(&profile))
        });
        if let Some(sm) = listed.and_then(|p| p.sm) {
            out.put(key("multiprocessors"), sm);
        }
        if let Some((gi, ci)) = slices(&profile) {
            out.put(key("slices.gi"), gi);
            out.put(key("slices.ci"), ci);
        }
    }
}

/// The GPU instance's and the compute instance's slices from a profile's name: `3g.40gb` is
/// (3, 3) (one compute instance over the whole GPU instance), `1c.3g.40gb` (3, 1).
fn slices(profile: &str) -> Option<(u32, u32)> {
    let mut parts = profile.split('.');
    let first = parts.next()?;
    if let Some(ci) = first.strip_suffix('c') {
        let gi = parts.next()?.strip_suffix('g')?.parse().ok()?;
        Some((gi, ci.parse().ok()?))
    } else {
        let gi = first.strip_suffix('g')?.parse().ok()?;
        Some((gi, gi))
    }
}

/// GFD's `gpu.clique`: the NVLink fabric's cluster UUID and clique id, when every GPU in a
/// fabric names the same.
fn clique(gpus: &[&Gpu], out: &mut Labels) {
    let ids: BTreeSet<(&str, Option<u32>)> = gpus
        .iter()
        .filter_map(|g| g.fabric.as_ref())
        .map(|f| (f.cluster_uuid.as_str(), f.clique_id))
        .collect();
    if let [(cluster, Some(clique))] = ids.into_iter().collect::<Vec<_>>().as_slice() {
        if !cluster.is_empty() {
            out.put(name::CLIQUE, format!("{cluster}.{clique}"));
        }
    }
}

/// The reason kinds that mean the NVLink fabric is down for a GPU.
const FABRIC_DOWN: [ReasonKind; 3] = [kind::FABRIC, kind::FABRIC_MANAGER, kind::SWITCH_FATAL];

fn bcd_labels(gpus: &[&Gpu], verdicts: &BTreeMap<GpuUuid, Verdict>, out: &mut Labels) {
    let judged = || gpus.iter().filter_map(|g| verdicts.get(&g.uuid));
    out.put(name::HEALTHY, judged().filter(|v| v.healthy()).count());
    let fabric_reason = |v: &Verdict, unhealthy: bool| {
        v.reasons.iter().any(|r| {
            FABRIC_DOWN.contains(&r.kind) && (!unhealthy || r.state == HealthState::Unhealthy)
        })
    };
    let in_fabric = gpus.iter().any(|g| {
        g.fabric.is_some()
            || g.nvlinks
                .iter()
                .any(|l| matches!(l.remote, Some(NvLinkRemote::NvSwitch(_))))
    }) || judged().any(|v| fabric_reason(v, false));
    if in_fabric {
        let down = judged().any(|v| fabric_reason(v, true));
        out.put(name::FABRIC, if down { "down" } else { "ok" });
    }
}

#[cfg(test)]
mod tests;
