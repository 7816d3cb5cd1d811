//! The plan: for each GPU a layout names, what is there, what the layout wants and the steps
//! between them, judged before anything runs. Pure: the layout file, the GPUs as the
//! inventory and sysfs show them, and what each GPU offers (its `-lgip` answer, kept per GPU
//! model, and its `-lgipp` placements) in; the plan or the refusal out.
//!
//! Fit is judged against an empty GPU: the profile's *total* count, and whether the asked
//! instances can all be placed at once in the GPU's memory slices (a small search over the
//! placements `-lgipp` lists). Instances are created largest first: on an A100, small ones
//! made first can take the placements a large one needs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bcd_protocol::{GpuUuid, PciAddress, MAX_MIG_PROFILES, MAX_MIG_PROFILE_ID};
use serde::{Deserialize, Serialize};

use super::config::{Devices, Layout, LayoutFile};

/// One profile a GPU offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferedProfile {
    /// `3g.40gb`.
    pub name: String,
    /// Its id (`-cgi` takes it).
    pub id: u32,
    /// Instances of it an empty GPU holds at most (`-lgip`'s Free/Total, the second number).
    pub total: u32,
    /// Memory slices one instance takes (`-lgipp`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// Where an instance may start (`-lgipp`); empty when unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts: Vec<u32>,
}

/// Everything one GPU model offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub profiles: Vec<OfferedProfile>,
}

impl Offer {
    fn find(&self, name: &str) -> Option<&OfferedProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    fn names(&self) -> String {
        self.profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One GPU as it is now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuNow {
    /// nvidia-smi's index now (it shifts when a GPU goes to `vfio-pci`).
    pub index: u32,
    pub uuid: GpuUuid,
    pub address: PciAddress,
    /// The product name (`NVIDIA A100-SXM4-80GB`): what profiles are kept by.
    pub model: String,
    /// The PCI device id as `device-filter` spells it (`0x20B210DE`), when sysfs tells.
    #[serde(skip)]
    pub device_id: Option<u32>,
    /// Whether the GPU has a MIG mode at all.
    #[serde(skip)]
    pub mig_capable: bool,
    /// MIG mode now.
    pub mig_enabled: bool,
    /// MIG mode after the next reset.
    pub mig_pending: bool,
    /// Its GPU instances' profile names, in the inventory's order.
    pub instances: Vec<String>,
    /// What it offers, from its own `-lgip` or the kept answer for its model; `None` when
    /// neither is known yet (MIG off and never seen on).
    #[serde(skip)]
    pub offer: Option<Offer>,
}

/// One step of a GPU's change, in the order they run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Destroy every compute and GPU instance.
    Destroy,
    /// Set MIG mode (with the reset a pending change needs).
    MigMode(bool),
    /// Create these GPU instances (profile names, largest first), each with its default
    /// compute instance.
    Create(Vec<String>),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Destroy => f.write_str("destroy every MIG instance"),
            Step::MigMode(true) => f.write_str("turn MIG mode on"),
            Step::MigMode(false) => f.write_str("turn MIG mode off"),
            Step::Create(names) => write!(f, "create {}", names.join(", ")),
        }
    }
}

/// What a layout wants of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wanted {
    pub mig_enabled: bool,
    /// GPU instances per profile name.
    pub instances: BTreeMap<String, u32>,
}

/// One GPU's plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuPlan {
    pub gpu: GpuNow,
    pub wanted: Wanted,
    /// Empty when the GPU already matches.
    pub steps: Vec<Step>,
    /// The profiles were not known (MIG off, never seen on): they are checked right after the
    /// mode change, before any instance is created; a refusal then turns MIG mode back off.
    pub checked_after_mode_change: bool,
    /// The line of the layout's name in the file.
    #[serde(skip)]
    pub line: usize,
}

/// A layout's plan for the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub layout: String,
    pub file: PathBuf,
    /// The GPUs the layout names, by index; GPUs it does not name are left alone.
    pub gpus: Vec<GpuPlan>,
}

impl Plan {
    /// Whether the host already matches the layout.
    pub fn matches(&self) -> bool {
        self.gpus.iter().all(|g| g.steps.is_empty())
    }

    /// The GPUs that change.
    pub fn changing(&self) -> impl Iterator<Item = &GpuPlan> {
        self.gpus.iter().filter(|g| !g.steps.is_empty())
    }
}

/// Why a layout is refused before anything runs: where (the file, the layout's line and
/// name) and what. `Display` is the operator's sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}, line {line}: layout {layout} {problem}")]
pub struct PlanError {
    pub file: PathBuf,
    pub line: usize,
    pub layout: String,
    pub problem: Problem,
}

/// A GPU as a refusal names it: `0 (NVIDIA A100-SXM4-80GB, GPU-...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedGpu {
    pub index: u32,
    pub model: String,
    pub uuid: GpuUuid,
}

impl std::fmt::Display for NamedGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}, {})", self.index, self.model, self.uuid)
    }
}

/// What a layout asks that cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("names GPU index {0}, which nvidia-smi does not list now")]
    NoSuchIndex(u32),
    #[error("names GPU {0} in two blocks; name each GPU once")]
    TwoBlocks(NamedGpu),
    #[error("names GPU {0}, which has no MIG mode")]
    NoMig(NamedGpu),
    #[error(
        "asks GPU {gpu} for profile {profile}, which it does not offer (it offers: {offered})"
    )]
    UnknownProfile {
        gpu: NamedGpu,
        profile: String,
        offered: String,
    },
    #[error("does not fit GPU {gpu}: {why}")]
    DoesNotFit { gpu: NamedGpu, why: String },
}

/// Where a refusal is said: the file and the layout.
struct At<'a> {
    file: &'a PathBuf,
    layout: &'a Layout,
}

impl At<'_> {
    fn refuse(&self, problem: Problem) -> Box<PlanError> {
        Box::new(PlanError {
            file: self.file.clone(),
            line: self.layout.line,
            layout: self.layout.name.clone(),
            problem,
        })
    }
}

impl GpuNow {
    fn named(&self) -> NamedGpu {
        NamedGpu {
            index: self.index,
            model: self.model.clone(),
            uuid: self.uuid.clone(),
        }
    }
}

/// Plans layout `name` of `file` for `gpus` (every GPU nvidia-smi lists now).
///
/// # Errors
/// [`crate::mig::config::ConfigError`] for an unknown layout (as a [`PlanError`]'s sibling in
/// [`crate::mig::MigError`]); [`PlanError`] for an index nvidia-smi does not list, a GPU
/// named twice, a GPU without MIG, a profile it does not offer, counts that do not fit.
pub fn plan(file: &LayoutFile, name: &str, gpus: &[GpuNow]) -> Result<Plan, super::MigError> {
    let layout = file.layout(name)?;
    let at = At {
        file: &file.path,
        layout,
    };
    let mut named: BTreeMap<u32, (usize, Wanted)> = BTreeMap::new();
    for (n, block) in layout.blocks.iter().enumerate() {
        let picked: Vec<&GpuNow> = match &block.devices {
            Devices::All => gpus.iter().collect(),
            Devices::Indices(list) => {
                let mut out = Vec::with_capacity(list.len());
                for i in list {
                    out.push(
                        gpus.iter()
                            .find(|g| g.index == *i)
                            .ok_or_else(|| at.refuse(Problem::NoSuchIndex(*i)))?,
                    );
                }
                out
            }
        };
        for gpu in picked {
            if !block.device_filter.is_empty()
                && !gpu
                    .device_id
                    .is_some_and(|id| block.device_filter.contains(&id))
            {
                continue;
            }
            let wanted = Wanted {
                mig_enabled: block.mig_enabled,
                instances: block.mig_devices.clone(),
            };
            if named.insert(gpu.index, (n, wanted)).is_some() {
                return Err(at.refuse(Problem::TwoBlocks(gpu.named())).into());
            }
        }
    }
    let mut out = Vec::with_capacity(named.len());
    for (index, (_, wanted)) in named {
        let Some(gpu) = gpus.iter().find(|g| g.index == index) else {
            continue;
        };
        out.push(plan_gpu(&at, gpu, wanted)?);
    }
    Ok(Plan {
        layout: layout.name.clone(),
        file: file.path.clone(),
        gpus: out,
    })
}

fn plan_gpu(at: &At<'_>, gpu: &GpuNow, wanted: Wanted) -> Result<GpuPlan, Box<PlanError>> {
    if !gpu.mig_capable && (wanted.mig_enabled || gpu.mig_enabled) {
        return Err(at.refuse(Problem::NoMig(gpu.named())));
    }
    let mut steps = Vec::new();
    let mut checked_after_mode_change = false;
    if !wanted.mig_enabled {
        if !gpu.instances.is_empty() {
            steps.push(Step::Destroy);
        }
        if gpu.mig_enabled || gpu.mig_pending {
            steps.push(Step::MigMode(false));
        }
    } else {
        let order = match &gpu.offer {
            Some(offer) => Some(fit(at, gpu, offer, &wanted.instances)?),
            None => {
                checked_after_mode_change = true;
                None
            }
        };
        let mode_ok = gpu.mig_enabled && gpu.mig_pending;
        if !mode_ok {
            if !gpu.instances.is_empty() {
                steps.push(Step::Destroy);
            }
            steps.push(Step::MigMode(true));
        }
        let has = counts(&gpu.instances);
        if !mode_ok || has != wanted.instances {
            if mode_ok && !gpu.instances.is_empty() {
                steps.push(Step::Destroy);
            }
            if !wanted.instances.is_empty() {
                let names = order.unwrap_or_else(|| by_size(None, &wanted.instances));
                steps.push(Step::Create(names));
            }
        }
    }
    Ok(GpuPlan {
        gpu: gpu.clone(),
        wanted,
        steps,
        checked_after_mode_change,
        line: at.layout.line,
    })
}

fn counts(names: &[String]) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for n in names {
        *out.entry(n.clone()).or_insert(0) += 1;
    }
    out
}

/// The slices a profile takes: `-lgipp`'s size, else the `Ng` of its name.
fn slices(offer: Option<&Offer>, name: &str) -> u32 {
    offer
        .and_then(|o| o.find(name))
        .and_then(|p| p.size)
        .or_else(|| name.split_once('g').and_then(|(n, _)| n.parse().ok()))
        .unwrap_or(1)
}

/// The instances one by one, largest first (then by name, so the order is stable).
fn by_size(offer: Option<&Offer>, wanted: &BTreeMap<String, u32>) -> Vec<String> {
    let mut names: Vec<String> = wanted
        .iter()
        .flat_map(|(n, c)| std::iter::repeat_n(n.clone(), *c as usize))
        .collect();
    names.sort_by(|a, b| slices(offer, b).cmp(&slices(offer, a)).then(a.cmp(b)));
    names
}

/// Checks that `wanted` fits an empty GPU offering `offer`, and answers the creation order.
fn fit(
    at: &At<'_>,
    gpu: &GpuNow,
    offer: &Offer,
    wanted: &BTreeMap<String, u32>,
) -> Result<Vec<String>, Box<PlanError>> {
    let refuse = |why: String| {
        at.refuse(Problem::DoesNotFit {
            gpu: gpu.named(),
            why,
        })
    };
    for (name, count) in wanted {
        let Some(p) = offer.find(name) else {
            return Err(at.refuse(Problem::UnknownProfile {
                gpu: gpu.named(),
                profile: name.clone(),
                offered: offer.names(),
            }));
        };
        if p.id > u32::from(MAX_MIG_PROFILE_ID) {
            return Err(refuse(format!(
                "profile {name} has id {}, above the {MAX_MIG_PROFILE_ID} bcd-helper accepts",
                p.id
            )));
        }
        if *count > p.total {
            return Err(refuse(format!(
                "it asks for {count} {name}, and the GPU holds at most {}",
                p.total
            )));
        }
    }
    let order = by_size(Some(offer), wanted);
    if order.len() > MAX_MIG_PROFILES {
        return Err(refuse(format!(
            "it asks for {} GPU instances, more than the {MAX_MIG_PROFILES} a GPU holds",
            order.len()
        )));
    }
    // Placements: every instance at a start `-lgipp` lists, none overlapping.
    let known = order.iter().all(|n| {
        offer
            .find(n)
            .is_some_and(|p| p.size.is_some() && !p.starts.is_empty())
    });
    if known {
        let places: Vec<(u32, &[u32])> = order
            .iter()
            .filter_map(|n| offer.find(n))
            .map(|p| (p.size.unwrap_or(1), p.starts.as_slice()))
            .collect();
        if !place(&places, &mut Vec::new()) {
            return Err(refuse(format!(
                "{} cannot all be placed at once in its memory slices (mig -lgipp)",
                order.join(", ")
            )));
        }
    }
    Ok(order)
}

/// Whether `rest` can each take a start that overlaps nothing in `used` (start, size).
fn place(rest: &[(u32, &[u32])], used: &mut Vec<(u32, u32)>) -> bool {
    let Some(((size, starts), more)) = rest.split_first() else {
        return true;
    };
    for start in *starts {
        let free = used
            .iter()
            .all(|(s, z)| start + size <= *s || s + z <= *start);
        if free {
            used.push((*start, *size));
            if place(more, used) {
                return true;
            }
            used.pop();
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::config::parse;

    /// An A100's profiles and placements, as NVIDIA documents them.
    fn a100() -> Offer {
        let p = |name: &str, id, total, size, starts: &[u32]| OfferedProfile {
            name: name.into(),
            id,
            total,
            size: Some(size),
            starts: starts.to_vec(),
        };
        Offer {
            profiles: vec![
                p("1g.10gb", 19, 7, 1, &[0, 1, 2, 3, 4, 5, 6]),
                p("1g.20gb", 15, 4, 2, &[0, 2, 4, 6]),
                p("2g.20gb", 14, 3, 2, &[0, 2, 4]),
                p("3g.40gb", 9, 2, 4, &[0, 4]),
                p("4g.40gb", 5, 1, 4, &[0]),
                p("7g.80gb", 0, 1, 8, &[0]),
            ],
        }
    }

    fn gpu(index: u32, on: bool, instances: &[&str], offer: Option<Offer>) -> GpuNow {
        GpuNow {
            index,
            uuid: format!("GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241{index}")
                .parse()
                .unwrap(),
            address: format!("0000:0{index}:00.0").parse().unwrap(),
            model: "NVIDIA A100-SXM4-80GB".into(),
            device_id: Some(0x20B2_10DE),
            mig_capable: true,
            mig_enabled: on,
            mig_pending: on,
            instances: instances.iter().map(|s| (*s).to_owned()).collect(),
            offer,
        }
    }

    fn file(layouts: &str) -> LayoutFile {
        parse(
            std::path::Path::new("/etc/bcd/mig-config.yaml"),
            format!("version: v1\nmig-configs:\n{layouts}").as_bytes(),
        )
        .unwrap()
    }

    const LAYOUTS: &str = r#"  halves:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  mixed:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 3, "4g.40gb": 1}
  off:
    - devices: all
      mig-enabled: false
  too-many:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 3}
  no-room:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "2g.20gb": 2}
  unknown:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"9g.99gb": 1}
  missing:
    - devices: [5]
      mig-enabled: false
  twice:
    - devices: all
      mig-enabled: false
    - devices: [1]
      mig-enabled: false
  filtered:
    - devices: all
      device-filter: "0x233010DE"
      mig-enabled: false
"#;

    #[test]
    fn a_matching_host_has_no_steps() {
        let gpus = [gpu(0, true, &["3g.40gb", "3g.40gb"], Some(a100()))];
        let p = plan(&file(LAYOUTS), "halves", &gpus).unwrap();
        assert!(p.matches(), "{p:?}");
    }

    #[test]
    fn steps_destroy_then_create_largest_first() {
        let gpus = [gpu(0, true, &["3g.40gb", "3g.40gb"], Some(a100()))];
        let p = plan(&file(LAYOUTS), "mixed", &gpus).unwrap();
        assert_eq!(
            p.gpus[0].steps,
            [
                Step::Destroy,
                Step::Create(vec![
                    "4g.40gb".into(),
                    "1g.10gb".into(),
                    "1g.10gb".into(),
                    "1g.10gb".into()
                ])
            ]
        );
        // MIG off: the mode first, nothing to destroy.
        let gpus = [gpu(0, false, &[], Some(a100()))];
        let p = plan(&file(LAYOUTS), "halves", &gpus).unwrap();
        assert_eq!(
            p.gpus[0].steps,
            [
                Step::MigMode(true),
                Step::Create(vec!["3g.40gb".into(), "3g.40gb".into()])
            ]
        );
        // Off: destroy, then the mode.
        let gpus = [gpu(0, true, &["3g.40gb"], Some(a100()))];
        let p = plan(&file(LAYOUTS), "off", &gpus).unwrap();
        assert_eq!(p.gpus[0].steps, [Step::Destroy, Step::MigMode(false)]);
    }

    #[test]
    fn refusals_name_file_line_gpu_and_profile() {
        let gpus = [
            gpu(0, true, &[], Some(a100())),
            gpu(1, true, &[], Some(a100())),
        ];
        let f = file(LAYOUTS);
        let said = |name: &str| plan(&f, name, &gpus).unwrap_err().to_string();
        let e = said("too-many");
        assert!(e.starts_with("/etc/bcd/mig-config.yaml, line 14: layout too-many does not fit GPU 0 (NVIDIA A100-SXM4-80GB, GPU-"), "{e}");
        assert!(e.contains("3 3g.40gb, and the GPU holds at most 2"), "{e}");
        let e = said("no-room");
        assert!(e.contains("cannot all be placed at once"), "{e}");
        let e = said("unknown");
        assert!(
            e.contains("for profile 9g.99gb, which it does not offer (it offers: 1g.10gb,"),
            "{e}"
        );
        assert!(e.contains("GPU 1 (NVIDIA A100-SXM4-80GB"), "{e}");
        let e = said("missing");
        assert!(
            e.contains("names GPU index 5, which nvidia-smi does not list now"),
            "{e}"
        );
        let e = said("twice");
        assert!(
            e.contains("names GPU 1 (") && e.contains("in two blocks"),
            "{e}"
        );
        let e = said("nope");
        assert!(e.contains("has no layout \"nope\""), "{e}");
    }

    #[test]
    fn a_filter_leaves_other_models_alone_and_unknown_profiles_wait_for_the_mode() {
        let gpus = [gpu(0, true, &["3g.40gb"], Some(a100()))];
        let p = plan(&file(LAYOUTS), "filtered", &gpus).unwrap();
        assert!(p.gpus.is_empty(), "{p:?}");
        let gpus = [gpu(0, false, &[], None)];
        let p = plan(&file(LAYOUTS), "halves", &gpus).unwrap();
        assert!(p.gpus[0].checked_after_mode_change);
        assert_eq!(p.gpus[0].steps[0], Step::MigMode(true));
    }

    #[test]
    fn placement_search_finds_what_greedy_order_needs() {
        // 4g at 0 leaves 4..8: two 2g.20gb need starts 4 and 6, and 2g starts only at 0, 2, 4.
        assert!(!place(
            &[(4, &[0]), (2, &[0, 2, 4]), (2, &[0, 2, 4])],
            &mut Vec::new()
        ));
        assert!(place(
            &[(4, &[0, 4]), (2, &[0, 2, 4]), (2, &[0, 2, 4])],
            &mut Vec::new()
        ));
    }
}
