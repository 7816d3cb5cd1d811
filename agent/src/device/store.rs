//! The hold store, `<data>/holds.json` (0600): which devices each hold has, and whether it is
//! a Kubernetes binding. Written atomically on each change; a file that does not parse is set
//! aside for the operator, never replaced by an empty one.
//!
//! The holds' CDI specs are a second record of the holds: when `holds.json` is missing or
//! unreadable, [`Holds::open`] rebuilds the holds from the record it is handed (the specs, as
//! `cdi` reads them) and says so, so that no hold is ever forgotten (a forgotten hold's GPU
//! could be handed out again while its job runs). The store also remembers which holds were
//! released until their specs are gone: the converger removes only those.
//!
//! Every change is checked by [`super::policy`]; a file that breaks its invariant (one GPU
//! in two holds) is refused at load, naming both holds, and kept as it is. Nothing here reads
//! or writes a CDI spec.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::hold::{DraClaim, Hold, HoldOwner};
use super::id::{DeviceId, HoldId};
use super::policy::{self, ClaimSet, Placed, PolicyError, Topology};
use crate::state::{self, StateError, PRIVATE_MODE};

/// The store's file name in the data folder.
pub const HOLDS_FILE: &str = "holds.json";

/// The file's shape: a list, so the file reads in id order.
#[derive(Debug, Default, Serialize, Deserialize)]
struct HoldsFile {
    holds: Vec<Hold>,
    /// Holds released whose specs may still be in the CDI folder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    released: Vec<HoldId>,
}

/// Why a hold change was refused or not saved. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error("hold {0} names no device")]
    NoDevices(HoldId),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("the hold store: {0}")]
    State(#[from] StateError),
    /// The store could not be read as it is; it is used read-only until it is fixed.
    #[error("holds are not changed until holds.json is fixed: {0}")]
    Frozen(String),
    /// Another owner made the hold: it is theirs to change.
    #[error("hold {id} was made by {}; it is theirs to change or release: choose another id", owner.words())]
    OtherOwner { id: HoldId, owner: HoldOwner },
    /// The id is of a form only another owner's holds take.
    #[error("hold ids starting {} are reserved for {}; choose another id", owner.id_prefix().unwrap_or_default(), owner.words())]
    ReservedId { id: HoldId, owner: HoldOwner },
}

/// The holds, and the file they are kept in.
#[derive(Debug)]
pub struct Holds {
    path: PathBuf,
    holds: BTreeMap<HoldId, Hold>,
    released: BTreeSet<HoldId>,
    /// Why the store may not change (and is not converged), when it may not.
    frozen: Option<String>,
    /// The GPUs a step of the node's has claimed (never saved): no hold may take them.
    claims: ClaimSet,
}

/// A hold as it was before a change, for [`Holds::restore`]: the change is undone when what
/// must follow it (its CDI spec) could not be written.
#[derive(Debug, Clone)]
pub struct Before {
    id: HoldId,
    hold: Option<Hold>,
    released: bool,
}

/// The holds a second record keeps, for [`Holds::open`]: them, what of the record could not
/// be read, and the record in words (`the hold specs in /etc/cdi`).
#[derive(Debug, Default)]
pub struct Rebuilt {
    pub holds: Vec<Hold>,
    pub problems: Vec<String>,
    pub from: String,
}

/// What [`Holds::open`] found.
#[derive(Debug)]
pub struct Opened {
    pub holds: Holds,
    /// What the operator must hear: the file was unreadable, rebuilt, or refused.
    pub notes: Vec<String>,
}

impl Holds {
    /// Loads `<data_dir>/holds.json`; no file is no hold.
    ///
    /// # Errors
    /// [`HoldError::State`]: the file cannot be read, is a link, or does not parse. In the last
    /// case it has been set aside (`holds.json.unreadable-<time>`). [`HoldError::Policy`]
    /// when it gives one GPU to two holds; the file is left as it is.
    pub fn load(data_dir: &Path) -> Result<Self, HoldError> {
        Self::load_file(data_dir).map(|(holds, _)| holds)
    }

    /// As [`Holds::load`], and whether the file was there.
    fn load_file(data_dir: &Path) -> Result<(Self, bool), HoldError> {
        let path = data_dir.join(HOLDS_FILE);
        let file = state::load(&path, |bytes| {
            let file: HoldsFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
            let mut holds = BTreeMap::new();
            for hold in file.holds {
                if holds.insert(hold.id.clone(), hold).is_some() {
                    return Err("a hold id appears twice".to_owned());
                }
            }
            Ok((holds, file.released.into_iter().collect::<BTreeSet<_>>()))
        })?;
        let found = file.is_some();
        let (holds, released) = file.unwrap_or_default();
        let store = Self {
            path,
            holds,
            released,
            frozen: None,
            claims: ClaimSet::default(),
        };
        store.check_invariant()?;
        Ok((store, found))
    }

    fn check_invariant(&self) -> Result<(), PolicyError> {
        let all: Vec<Hold> = self.holds.values().cloned().collect();
        policy::check_invariant(&all, &Topology::default())
    }

    /// Opens the store for the node service: loads `holds.json`, and when it is missing or
    /// unreadable, rebuilds the holds from the second record `rebuild` reads (saved as the
    /// new `holds.json` where the old one was set aside or missing; kept read-only where it
    /// could not be read at all). A file that breaks the policy's invariant is kept and used
    /// read-only. Nothing is deleted in any case.
    pub fn open(data_dir: &Path, rebuild: impl FnOnce() -> Rebuilt) -> Opened {
        let path = data_dir.join(HOLDS_FILE);
        let mut notes = Vec::new();
        let (why, writable) = match Self::load_file(data_dir) {
            Ok((holds, true)) => return Opened { holds, notes },
            Ok((_, false)) => (format!("{} is missing", path.display()), true),
            Err(HoldError::State(e @ StateError::SetAside { .. })) => (e.to_string(), true),
            Err(HoldError::Policy(e)) => {
                let holds = Self::read_refused(&path).unwrap_or_else(|| Self::empty(&path));
                let sentence = e.to_string();
                notes.push(sentence.clone());
                return Opened {
                    holds: Holds {
                        frozen: Some(sentence),
                        ..holds
                    },
                    notes,
                };
            }
            Err(e) => (e.to_string(), false),
        };
        let Rebuilt {
            holds: rebuilt,
            problems,
            from,
        } = rebuild();
        notes.extend(problems);
        let mut holds = Self::empty(&path);
        if rebuilt.is_empty() && writable {
            if !why.ends_with("is missing") {
                notes.push(format!(
                    "{why}; no hold spec was found to rebuild holds from"
                ));
            }
            return Opened { holds, notes };
        }
        let ids: Vec<&str> = rebuilt.iter().map(|h| h.id.as_str()).collect();
        let mut sentence = format!(
            "{why}; rebuilt {} hold(s) from {from}: {}",
            rebuilt.len(),
            ids.join(", ")
        );
        holds.holds = rebuilt.into_iter().map(|h| (h.id.clone(), h)).collect();
        if let Err(e) = holds.check_invariant() {
            sentence.push_str(&format!("; {e}"));
            holds.frozen = Some(sentence.clone());
        } else if !writable {
            holds.frozen = Some(sentence.clone());
        } else if let Err(e) = holds.save() {
            sentence.push_str(&format!("; they could not be saved ({e})"));
            holds.frozen = Some(sentence.clone());
        }
        notes.push(sentence);
        Opened { holds, notes }
    }

    fn empty(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            holds: BTreeMap::new(),
            released: BTreeSet::new(),
            frozen: None,
            claims: ClaimSet::default(),
        }
    }

    /// The claim set the node's steps put their GPUs in, which [`Holds::apply`] respects.
    pub fn claims(&self) -> &ClaimSet {
        &self.claims
    }

    /// The store, sharing `claims` with the node that claims GPUs for its steps.
    pub fn with_claims(self, claims: ClaimSet) -> Self {
        Self { claims, ..self }
    }

    /// The holds of a file the invariant refused, to be used read-only.
    fn read_refused(path: &Path) -> Option<Self> {
        let bytes = state::read(path).ok()??;
        let file: HoldsFile = serde_json::from_slice(&bytes).ok()?;
        Some(Self {
            holds: file.holds.into_iter().map(|h| (h.id.clone(), h)).collect(),
            released: file.released.into_iter().collect(),
            ..Self::empty(path)
        })
    }

    /// Why the store may not change, when it may not.
    pub fn frozen(&self) -> Option<&str> {
        self.frozen.as_deref()
    }

    /// Creates the hold `id` for `owner`, or replaces its devices, and saves the store.
    /// `devices` come placed by [`Topology::place`]; `topology` places the other holds'
    /// devices. An owner never replaces another owner's hold, and a new hold's id must not be
    /// one reserved for another owner ([`HoldId::reserved_for`]); an operator's hold stored
    /// under such an id by an older bcd stays the operator's.
    ///
    /// # Errors
    /// [`HoldError::Policy`] naming the holder when another hold has a conflicting device
    /// (nothing changes); [`HoldError::OtherOwner`], [`HoldError::ReservedId`];
    /// [`HoldError::NoDevices`]; [`HoldError::Frozen`]; [`HoldError::State`] when the store
    /// cannot be saved (the change is then undone in memory too).
    pub fn apply(
        &mut self,
        id: HoldId,
        devices: Vec<Placed>,
        owner: HoldOwner,
        topology: &Topology,
    ) -> Result<&Hold, HoldError> {
        self.apply_owned(id, devices, owner, None, topology)
    }

    /// As [`Holds::apply`] for the DRA claim `claim`: a [`HoldOwner::Dra`] hold that records
    /// the claim (its uid, name, pool devices and spec) in `holds.json`.
    ///
    /// # Errors
    /// As [`Holds::apply`].
    pub fn apply_claim(
        &mut self,
        id: HoldId,
        devices: Vec<Placed>,
        claim: DraClaim,
        topology: &Topology,
    ) -> Result<&Hold, HoldError> {
        self.apply_owned(id, devices, HoldOwner::Dra, Some(claim), topology)
    }

    fn apply_owned(
        &mut self,
        id: HoldId,
        devices: Vec<Placed>,
        owner: HoldOwner,
        claim: Option<DraClaim>,
        topology: &Topology,
    ) -> Result<&Hold, HoldError> {
        if let Some(why) = &self.frozen {
            return Err(HoldError::Frozen(why.clone()));
        }
        match self.holds.get(&id).map(Hold::owner) {
            Some(theirs) if theirs != owner => {
                return Err(HoldError::OtherOwner { id, owner: theirs });
            }
            Some(_) => {}
            None => match id.reserved_for() {
                Some(reserved) if reserved != owner => {
                    return Err(HoldError::ReservedId {
                        id,
                        owner: reserved,
                    });
                }
                _ => {}
            },
        }
        let mut distinct: Vec<Placed> = Vec::with_capacity(devices.len());
        for d in devices {
            if !distinct.iter().any(|p| p.device == d.device) {
                distinct.push(d);
            }
        }
        if distinct.is_empty() {
            return Err(HoldError::NoDevices(id));
        }
        for placed in &distinct {
            let gpu = placed.gpu.clone().unwrap_or_else(|| placed.device.clone());
            if let Some(kind) = policy::claim_of(&self.claims, &gpu) {
                return Err(PolicyError::Claimed {
                    device: placed.device.clone(),
                    gpu,
                    kind,
                }
                .into());
            }
        }
        policy::check_free(&id, &distinct, self.holds.values(), topology)?;
        // A hold applied again (its devices changed) keeps the time it was first made.
        let created_at = match self.holds.get(&id) {
            Some(h) => h.created_at,
            None => Some(crate::state::unix_now()),
        };
        let hold = Hold {
            id: id.clone(),
            gpus: distinct
                .iter()
                .filter(|p| matches!(p.device, DeviceId::Mig(_)))
                .filter_map(|p| Some((p.device.clone(), p.gpu.clone()?)))
                .collect(),
            devices: distinct.into_iter().map(|p| p.device).collect(),
            kubernetes: owner.is_kubernetes(),
            owner: Some(owner),
            unassigned_since: None,
            created_at,
            claim,
        };
        let previous = self.holds.insert(id.clone(), hold);
        let was_released = self.released.remove(&id);
        if let Err(e) = self.save() {
            match previous {
                Some(p) => self.holds.insert(id.clone(), p),
                None => self.holds.remove(&id),
            };
            if was_released {
                self.released.insert(id);
            }
            return Err(e);
        }
        Ok(&self.holds[&id])
    }

    /// The hold `id` as it is now (absent, or its devices; released or not), for
    /// [`Holds::restore`].
    pub fn before(&self, id: &HoldId) -> Before {
        Before {
            id: id.clone(),
            hold: self.holds.get(id).cloned(),
            released: self.released.contains(id),
        }
    }

    /// Puts the hold back as `before` recorded it and saves the store. A hold that did not
    /// exist before is released, so that a spec written for it meanwhile is removed.
    ///
    /// # Errors
    /// [`HoldError::Frozen`]; [`HoldError::State`] when the store cannot be saved: the store
    /// then stays as it was before this call, in memory as on disk.
    pub fn restore(&mut self, before: Before) -> Result<(), HoldError> {
        if let Some(why) = &self.frozen {
            return Err(HoldError::Frozen(why.clone()));
        }
        let Before { id, hold, released } = before;
        let absent = hold.is_none();
        let now = match hold {
            Some(h) => self.holds.insert(id.clone(), h),
            None => self.holds.remove(&id),
        };
        // A hold made since, taken away again, is released: its spec, if the change wrote
        // one, goes with the next converge instead of staying as a stranger's.
        let released = released || (absent && now.is_some());
        let was_released = if released {
            !self.released.insert(id.clone())
        } else {
            self.released.remove(&id)
        };
        if let Err(e) = self.save() {
            match now {
                Some(h) => self.holds.insert(id.clone(), h),
                None => self.holds.remove(&id),
            };
            if was_released {
                self.released.insert(id);
            } else {
                self.released.remove(&id);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Releases the hold `id` and saves the store; `Ok(None)` when there was no such hold.
    /// Its spec goes with the next converge of the CDI specs.
    ///
    /// # Errors
    /// [`HoldError::Frozen`]; [`HoldError::State`] when the store cannot be saved (the hold
    /// is then kept).
    pub fn release(&mut self, id: &HoldId) -> Result<Option<Hold>, HoldError> {
        if let Some(why) = &self.frozen {
            return Err(HoldError::Frozen(why.clone()));
        }
        let Some(hold) = self.holds.remove(id) else {
            return Ok(None);
        };
        let newly = self.released.insert(id.clone());
        if let Err(e) = self.save() {
            self.holds.insert(id.clone(), hold);
            if newly {
                self.released.remove(id);
            }
            return Err(e);
        }
        Ok(Some(hold))
    }

    /// Holds released whose specs have not been seen removed yet.
    pub fn released(&self) -> impl Iterator<Item = &HoldId> {
        self.released.iter()
    }

    /// Forgets released holds whose specs are gone, and saves the store.
    ///
    /// # Errors
    /// [`HoldError::State`] when the store cannot be saved (they are then kept, and their
    /// specs' removal is simply tried again).
    pub fn forget_released(&mut self, gone: &[HoldId]) -> Result<(), HoldError> {
        let before = self.released.clone();
        self.released.retain(|id| !gone.contains(id));
        if self.released == before {
            return Ok(());
        }
        self.save().inspect_err(|_| self.released = before)
    }

    /// Every hold, by id.
    pub fn list(&self) -> impl Iterator<Item = &Hold> {
        self.holds.values()
    }

    /// The hold `id`.
    pub fn get(&self, id: &HoldId) -> Option<&Hold> {
        self.holds.get(id)
    }

    /// Records whether the Kubernetes hold `id`'s devices are unassigned (since when) and
    /// saves the store when that changes; `Ok(false)` when there is no such Kubernetes hold
    /// or nothing changed.
    ///
    /// # Errors
    /// [`HoldError::Frozen`]; [`HoldError::State`] when the store cannot be saved (the
    /// change is then undone).
    pub fn mark_unassigned(&mut self, id: &HoldId, since: Option<u64>) -> Result<bool, HoldError> {
        if let Some(why) = &self.frozen {
            return Err(HoldError::Frozen(why.clone()));
        }
        let Some(hold) = self.holds.get_mut(id).filter(|h| h.kubernetes) else {
            return Ok(false);
        };
        if hold.unassigned_since == since {
            return Ok(false);
        }
        let before = std::mem::replace(&mut hold.unassigned_since, since);
        if let Err(e) = self.save() {
            if let Some(hold) = self.holds.get_mut(id) {
                hold.unassigned_since = before;
            }
            return Err(e);
        }
        Ok(true)
    }

    /// Records, for every `MIG-<uuid>` device a hold has without knowing its GPU (holds
    /// rebuilt from their specs after holds.json was lost), the GPU `topology` places it on,
    /// and saves the store when anything was learnt: once recorded, the device's GPU stays
    /// busy even if the device leaves the inventory (MIG reconfigured, GPU reset). Returns
    /// how many were learnt.
    ///
    /// # Errors
    /// [`HoldError::State`] when the store cannot be saved (what was learnt is kept in
    /// memory, and saved with the next change).
    pub fn record_gpus(&mut self, topology: &Topology) -> Result<usize, HoldError> {
        if self.frozen.is_some() {
            return Ok(0);
        }
        let mut learnt = 0;
        for hold in self.holds.values_mut() {
            for device in &hold.devices {
                if !matches!(device, DeviceId::Mig(_)) || hold.gpu_of(device).is_some() {
                    continue;
                }
                if let Some(gpu) = topology.gpu_of(device) {
                    hold.gpus.insert(device.clone(), gpu);
                    learnt += 1;
                }
            }
        }
        if learnt > 0 {
            self.save()?;
        }
        Ok(learnt)
    }

    /// The hold that has `device` itself.
    pub fn holder_of(&self, device: &DeviceId) -> Option<&HoldId> {
        self.holds
            .values()
            .find(|h| h.devices.contains(device))
            .map(|h| &h.id)
    }

    fn save(&self) -> Result<(), HoldError> {
        let file = HoldsFile {
            holds: self.holds.values().cloned().collect(),
            released: self.released.iter().cloned().collect(),
        };
        // Serialising plain data to a Vec cannot fail.
        let mut bytes = serde_json::to_vec_pretty(&file).unwrap_or_default();
        bytes.push(b'\n');
        state::write_atomic(&self.path, &bytes, PRIVATE_MODE)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::cdi::holds::open_holds as open_with_specs;
    use crate::cdi::spec::{parse_spec, Format};

    // Undoing a refused change that had made a hold left its spec behind for good (the store
    // no longer knew the hold, and converge removes only released holds' specs): the hold
    // taken away again is released.
    #[test]
    fn a_hold_made_and_undone_is_released_so_its_spec_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        let id: HoldId = "job".parse().unwrap();
        let before = holds.before(&id);
        let gpu: DeviceId = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b".parse().unwrap();
        let placed = vec![Placed {
            gpu: gpu.gpu(),
            device: gpu,
        }];
        holds
            .apply(
                id.clone(),
                placed,
                HoldOwner::Operator,
                &Topology::default(),
            )
            .unwrap();
        holds.restore(before).unwrap();
        assert!(holds.get(&id).is_none());
        assert!(
            holds.released().any(|r| r == &id),
            "its spec is removed by the next converge"
        );
    }

    // What broke: `bcd hold list` could not say how old a hold is: the store kept no time.
    // A new hold records when it was made, applied again it keeps that time, and a file of
    // an older bcd (no field) still reads.
    #[test]
    fn a_hold_records_when_it_was_made_and_keeps_it_when_applied_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        let id: HoldId = "job".parse().unwrap();
        let place = |uuid: &str| {
            let gpu: DeviceId = uuid.parse().unwrap();
            vec![Placed {
                gpu: gpu.gpu(),
                device: gpu,
            }]
        };
        let t = Topology::default();
        let before = crate::state::unix_now();
        let made = holds
            .apply(id.clone(), place(GPU0), HoldOwner::Operator, &t)
            .unwrap()
            .created_at
            .expect("a new hold's time");
        assert!(made >= before && made <= crate::state::unix_now());
        let mut old = holds.get(&id).unwrap().clone();
        old.created_at = Some(made - 100);
        holds.holds.insert(id.clone(), old);
        let again = holds
            .apply(id.clone(), place(GPU1), HoldOwner::Operator, &t)
            .unwrap();
        assert_eq!(again.created_at, Some(made - 100));
        let reread = Holds::load(dir.path()).unwrap();
        assert_eq!(reread.get(&id).unwrap().created_at, Some(made - 100));
        let older: Hold = serde_json::from_str(
            r#"{"id": "job", "devices": ["GPU-11111111-1111-1111-1111-111111111111"]}"#,
        )
        .unwrap();
        assert_eq!(older.created_at, None);
    }

    const GPU0: &str = "GPU-11111111-1111-1111-1111-111111111111";
    const GPU1: &str = "GPU-22222222-2222-2222-2222-222222222222";

    fn dev(s: &str) -> DeviceId {
        s.parse().unwrap()
    }

    fn id(s: &str) -> HoldId {
        s.parse().unwrap()
    }

    /// Devices placed by their ids alone (no inventory).
    fn on(devices: &[&str]) -> Vec<Placed> {
        devices
            .iter()
            .map(|d| Placed {
                device: dev(d),
                gpu: dev(d).gpu(),
            })
            .collect()
    }

    fn none() -> Topology {
        Topology::default()
    }

    fn a_claim() -> DraClaim {
        DraClaim {
            uid: "3f0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5f".into(),
            namespace: "ml".into(),
            name: "trainer-gpu".into(),
            devices: vec![crate::device::PoolDevice {
                pool: "node-a".into(),
                device: "gpu-0".into(),
                requests: vec!["gpu".into()],
                share: None,
            }],
            spec: Some("/var/run/cdi/k8s.gpu.bcd.dev-claim_3f0c.json".into()),
        }
    }

    #[test]
    fn a_dra_hold_keeps_its_claim_in_holds_json_beside_a_plain_owner() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        holds
            .apply_claim(id("dra-3f0c"), on(&[GPU0]), a_claim(), &none())
            .unwrap();
        let reloaded = Holds::load(dir.path()).unwrap();
        let hold = reloaded.get(&id("dra-3f0c")).unwrap();
        assert_eq!(hold.owner(), HoldOwner::Dra);
        assert!(hold.kubernetes);
        assert_eq!(hold.claim.as_ref(), Some(&a_claim()));
        // The owner stays a bare string, which a bcd that knows no claim reads.
        let text = std::fs::read_to_string(dir.path().join(HOLDS_FILE)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["holds"][0]["owner"], "dra", "{text}");
        assert_eq!(v["holds"][0]["claim"]["devices"][0]["device"], "gpu-0");
    }

    // What broke: a DRA hold rebuilt from its spec after holds.json was lost came back
    // without its claim, so the claim's deletion never released it. The spec records the claim.
    #[test]
    fn a_dra_hold_rebuilt_from_its_spec_is_its_claims_again() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = dir.path().join("cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        let mut claim = a_claim();
        claim.uid = "3f0c".into();
        let mut holds = Holds::load(dir.path()).unwrap();
        holds
            .apply_claim(id("dra-3f0c"), on(&[GPU0]), claim.clone(), &none())
            .unwrap();
        let catalog = crate::cdi::DeviceCatalog::default();
        let done = crate::cdi::converge(&mut holds, &[], &catalog, &cdi);
        assert!(done.errors.is_empty(), "{:?}", done.errors);
        let text = std::fs::read_to_string(cdi.join("bcd-dra-3f0c.json")).unwrap();
        let version: crate::cdi::spec::CdiVersion = parse_spec(text.as_bytes(), Format::Json)
            .unwrap()
            .cdi_version
            .parse()
            .unwrap();
        assert!(
            version <= crate::cdi::render::COMMON_RUNTIMES_CDI_VERSION,
            "the record keeps the spec readable by common runtimes: {text}"
        );
        drop(holds);
        std::fs::remove_file(dir.path().join(HOLDS_FILE)).unwrap();
        let opened = open_with_specs(dir.path(), &cdi);
        let hold = opened.holds.get(&id("dra-3f0c")).unwrap();
        assert_eq!(hold.owner(), HoldOwner::Dra);
        assert_eq!(hold.claim.as_ref(), Some(&claim));
        // A record naming another uid than the hold's id is not believed.
        let mut spec = parse_spec(text.as_bytes(), Format::Json).unwrap();
        assert!(crate::cdi::render::recorded_claim(&spec, &id("dra-other")).is_none());
        spec.devices.retain(|d| d.name != "dra-3f0c");
        assert!(crate::cdi::render::recorded_claim(&spec, &id("dra-3f0c")).is_none());
    }

    // A holds.json written before DRA claims were recorded (no `claim`), and one written by a
    // later bcd with fields this one does not know, both still load.
    #[test]
    fn holds_json_of_the_older_form_and_of_a_later_bcd_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let old = format!(
            r#"{{"holds": [{{"id": "dra-1", "devices": ["{GPU0}"], "kubernetes": true, "owner": "dra"}},
                          {{"id": "job", "devices": ["{GPU1}"]}}]}}"#
        );
        std::fs::write(dir.path().join(HOLDS_FILE), old).unwrap();
        let holds = Holds::load(dir.path()).unwrap();
        let dra = holds.get(&id("dra-1")).unwrap();
        assert_eq!((dra.owner(), dra.claim.as_ref()), (HoldOwner::Dra, None));
        assert_eq!(holds.get(&id("job")).unwrap().owner(), HoldOwner::Operator);
        let later = format!(
            r#"{{"holds": [{{"id": "dra-1", "devices": ["{GPU0}"], "kubernetes": true, "owner": "dra",
                            "claim": {{"uid": "u", "namespace": "n", "name": "c", "future": 1}}, "future": true}}]}}"#
        );
        std::fs::write(dir.path().join(HOLDS_FILE), later).unwrap();
        let holds = Holds::load(dir.path()).unwrap();
        assert_eq!(
            holds.get(&id("dra-1")).unwrap().claim.as_ref().unwrap().uid,
            "u"
        );
    }

    #[test]
    fn holds_persist_privately_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        assert_eq!(holds.list().count(), 0);
        holds
            .apply(
                id("a"),
                on(&[GPU0, GPU0]),
                crate::cdi::HoldOwner::Operator,
                &none(),
            )
            .unwrap();
        holds
            .apply(
                id("k"),
                on(&[GPU1]),
                crate::cdi::HoldOwner::DevicePlugin,
                &none(),
            )
            .unwrap();
        let path = dir.path().join(HOLDS_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = Holds::load(dir.path()).unwrap();
        let listed: Vec<_> = again.list().cloned().collect();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].devices, vec![dev(GPU0)], "duplicates are dropped");
        assert!(listed[1].kubernetes);
    }

    #[test]
    fn a_device_held_by_another_hold_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        holds
            .apply(
                id("first"),
                on(&[GPU0]),
                crate::cdi::HoldOwner::Operator,
                &none(),
            )
            .unwrap();
        let err = holds
            .apply(
                id("second"),
                on(&[GPU1, GPU0]),
                crate::cdi::HoldOwner::Operator,
                &none(),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{GPU0} is already held by hold first (that device); release that hold first")
        );
        assert!(holds.get(&id("second")).is_none(), "nothing changed");
        // The same hold may be applied again, with other devices.
        holds
            .apply(
                id("first"),
                on(&[GPU0, GPU1]),
                crate::cdi::HoldOwner::Operator,
                &none(),
            )
            .unwrap();
        assert_eq!(holds.released_then(&id("first")), 2);
        holds
            .apply(
                id("second"),
                on(&[GPU0]),
                crate::cdi::HoldOwner::Operator,
                &none(),
            )
            .unwrap();
        assert!(matches!(
            holds.apply(id("none"), vec![], crate::cdi::HoldOwner::Operator, &none()),
            Err(HoldError::NoDevices(_))
        ));
    }

    impl Holds {
        /// Releases `id` and returns how many devices it had (test shorthand).
        fn released_then(&mut self, id: &HoldId) -> usize {
            self.release(id).unwrap().map_or(0, |h| h.devices.len())
        }
    }

    #[test]
    fn a_torn_store_is_set_aside_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HOLDS_FILE);
        std::fs::write(&path, b"{\"holds\": [{\"id\": \"a\", \"devi").unwrap();
        let err = Holds::load(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("holds.json does not parse"),
            "{err}"
        );
        let kept: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        assert!(
            kept.iter().any(|n| n.starts_with("holds.json.unreadable-")),
            "{kept:?}"
        );
        // A store with an unsafe id is as torn as a cut one.
        std::fs::write(&path, br#"{"holds":[{"id":"../x","devices":[]}]}"#).unwrap();
        assert!(Holds::load(dir.path()).is_err());
    }

    #[test]
    fn a_failed_save_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(&dir.path().join("missing-folder")).unwrap();
        assert!(matches!(
            holds.apply(
                id("a"),
                on(&[GPU0]),
                crate::cdi::HoldOwner::Operator,
                &none()
            ),
            Err(HoldError::State(_))
        ));
        assert_eq!(holds.list().count(), 0);
    }

    const GPU3: &str = "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd";
    const MIG3: &str = "MIG-65db3e42-f991-a575-c20e-8350d31e437c";

    fn mig_host() -> Topology {
        use crate::inventory::document::{Gpu, GpuSection, Inventory, Mig, MigDevice};
        let inv = Inventory::new(GpuSection {
            gpus: vec![Gpu {
                mig: Some(Mig {
                    mode: Some(true),
                    devices: vec![MigDevice {
                        uuid: Some(MIG3.parse().unwrap()),
                        ..MigDevice::default()
                    }],
                    ..Mig::default()
                }),
                ..Gpu::new(3, GPU3.parse().unwrap())
            }],
            ..GpuSection::default()
        });
        Topology::from_inventory(&inv, 2)
    }

    /// A minimal hold spec naming `devices`, as the converger writes them.
    fn spec_of(devices: &[&str]) -> String {
        let devices: Vec<String> = devices
            .iter()
            .map(|d| format!(r#"{{"name":"{d}","containerEdits":{{"env":["BCD_HOLD=x"]}}}}"#))
            .collect();
        format!(
            r#"{{"cdiVersion":"0.3.0","kind":"bcd.dev/gpu","devices":[{}],"containerEdits":{{"env":["NVIDIA_VISIBLE_DEVICES=void"]}}}}"#,
            devices.join(",")
        )
    }

    // What broke: a hold of MIG-mode GPU 3 and a hold of one of its MIG devices were both
    // accepted, and both specs granted /dev/nvidia3.
    #[test]
    fn a_gpu_and_one_of_its_mig_devices_never_go_to_two_holds() {
        let dir = tempfile::tempdir().unwrap();
        let t = mig_host();
        let mut holds = Holds::load(dir.path()).unwrap();
        let place = |d: &str| vec![t.place(&dev(d)).unwrap()];
        holds
            .apply(
                id("whole"),
                place(GPU3),
                crate::cdi::HoldOwner::Operator,
                &t,
            )
            .unwrap();
        let err = holds
            .apply(id("part"), place(MIG3), crate::cdi::HoldOwner::Operator, &t)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{MIG3} is already held by hold whole ({GPU3} on the same GPU); release that hold first")
        );
        holds.release(&id("whole")).unwrap();
        holds
            .apply(id("part"), place(MIG3), crate::cdi::HoldOwner::Operator, &t)
            .unwrap();
        assert!(holds
            .apply(
                id("whole"),
                place(GPU3),
                crate::cdi::HoldOwner::Operator,
                &t
            )
            .is_err());
        // The MIG device's GPU is recorded, so a reload checks it without an inventory.
        let again = Holds::load(dir.path()).unwrap();
        assert_eq!(
            again.get(&id("part")).unwrap().gpu_of(&dev(MIG3)),
            Some(dev(GPU3))
        );
    }

    // What broke: a holds.json that gives one GPU to two holds loaded without a word.
    #[test]
    fn a_holds_file_giving_one_gpu_to_two_holds_is_refused_naming_both_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = dir.path().join("cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        let path = dir.path().join(HOLDS_FILE);
        let bytes = format!(
            r#"{{"holds":[{{"id":"a","devices":["{GPU3}"]}},{{"id":"b","devices":["{MIG3}"],"gpus":{{"{MIG3}":"{GPU3}"}}}}]}}"#
        );
        std::fs::write(&path, &bytes).unwrap();
        let err = Holds::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("hold a has"), "{err}");
        assert!(err.to_string().contains("hold b has"), "{err}");
        let opened = open_with_specs(dir.path(), &cdi);
        assert!(
            opened.notes[0].contains("two holds have GPU"),
            "{:?}",
            opened.notes
        );
        assert_eq!(
            opened.holds.list().count(),
            2,
            "both are still seen by the busy rule"
        );
        assert!(opened.holds.frozen().is_some());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            bytes,
            "kept as it was"
        );
        let mut frozen = opened.holds;
        assert!(matches!(
            frozen.release(&id("a")),
            Err(HoldError::Frozen(_))
        ));
    }

    // What broke: after a torn holds.json was set aside, the next start listed no holds and
    // the converger deleted every hold's spec.
    #[test]
    fn a_torn_holds_file_is_not_forgotten_on_the_second_start() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = dir.path().join("cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        std::fs::write(cdi.join("bcd-train.json"), spec_of(&[GPU0, "train"])).unwrap();
        std::fs::write(cdi.join("bcd-slot.json"), spec_of(&[&format!("{GPU1}::1")])).unwrap();
        std::fs::write(dir.path().join(HOLDS_FILE), b"{\"holds\": [{\"id\": \"tr").unwrap();
        // First start: set aside, rebuilt from the specs, and said so.
        let first = open_with_specs(dir.path(), &cdi);
        assert!(
            first.notes.iter().any(|n| n.contains("does not parse")
                && n.contains("rebuilt 2 hold(s)")
                && n.contains("slot, train")),
            "{:?}",
            first.notes
        );
        let ids: Vec<_> = first.holds.list().map(|h| h.id.to_string()).collect();
        assert_eq!(ids, ["slot", "train"]);
        assert_eq!(first.holds.get(&id("train")).unwrap().devices, [dev(GPU0)]);
        drop(first);
        // Second start: the rebuilt store was saved; nothing is lost.
        let second = open_with_specs(dir.path(), &cdi);
        assert!(second.notes.is_empty(), "{:?}", second.notes);
        assert_eq!(second.holds.list().count(), 2);
        // A missing holds.json with specs there is rebuilt too.
        std::fs::remove_file(dir.path().join(HOLDS_FILE)).unwrap();
        let third = open_with_specs(dir.path(), &cdi);
        assert!(
            third.notes[0].contains("is missing; rebuilt 2 hold(s)"),
            "{:?}",
            third.notes
        );
        assert!(cdi.join("bcd-train.json").exists() && cdi.join("bcd-slot.json").exists());
    }

    // What broke: a release saved to holds.json but cut off before its spec went left the
    // spec for ever; now the store remembers the release until the spec is gone.
    #[test]
    fn a_release_is_remembered_until_its_spec_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        holds
            .apply(
                id("a"),
                on(&[GPU0]),
                crate::cdi::HoldOwner::Operator,
                &none(),
            )
            .unwrap();
        holds.release(&id("a")).unwrap();
        let reloaded = Holds::load(dir.path()).unwrap();
        assert_eq!(reloaded.released().collect::<Vec<_>>(), [&id("a")]);
        let mut reloaded = reloaded;
        reloaded.forget_released(&[id("a")]).unwrap();
        assert_eq!(Holds::load(dir.path()).unwrap().released().count(), 0);
    }

    // What broke: holds rebuilt from their specs (holds.json lost) did not know which GPU a
    // MIG-<uuid> device is on; once that device left the inventory, its GPU looked free.
    #[test]
    fn a_rebuilt_holds_mig_device_learns_its_gpu_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        holds
            .apply(
                id("rebuilt"),
                on(&[MIG3]),
                crate::cdi::HoldOwner::Operator,
                &none(),
            )
            .unwrap();
        assert_eq!(holds.get(&id("rebuilt")).unwrap().gpu_of(&dev(MIG3)), None);
        let t = mig_host();
        assert_eq!(holds.record_gpus(&t).unwrap(), 1);
        assert_eq!(holds.record_gpus(&t).unwrap(), 0, "learnt once");
        let again = Holds::load(dir.path()).unwrap();
        let hold = again.get(&id("rebuilt")).unwrap();
        assert_eq!(hold.gpu_of(&dev(MIG3)), Some(dev(GPU3)), "saved");
        // The MIG device is gone from the inventory: its GPU is still busy.
        assert!(none().busy(&dev(GPU3), [hold]).is_some());
    }
}
