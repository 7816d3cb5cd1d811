//! The hold store, `<data>/holds.json` (0600): which devices each hold has, and whether it is
//! a Kubernetes binding. Written atomically on each change; a file that does not parse is set
//! aside for the operator, never replaced by an empty one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::state::{self, StateError, PRIVATE_MODE};

use super::ids::{DeviceId, HoldId};

/// The store's file name in the data folder.
pub const HOLDS_FILE: &str = "holds.json";

/// One hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub id: HoldId,
    /// Distinct, in the order they were asked for.
    pub devices: Vec<DeviceId>,
    /// A Kubernetes binding: its spec carries no vendor edits.
    #[serde(default)]
    pub kubernetes: bool,
}

/// The file's shape: a list, so the file reads in id order.
#[derive(Debug, Default, Serialize, Deserialize)]
struct HoldsFile {
    holds: Vec<Hold>,
}

/// Why a hold change was refused or not saved. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error("{device} is already held by hold {holder}; release that hold first")]
    Held { device: DeviceId, holder: HoldId },
    #[error("hold {0} names no device")]
    NoDevices(HoldId),
    #[error("the hold store: {0}")]
    State(#[from] StateError),
}

/// The holds, and the file they are kept in.
#[derive(Debug)]
pub struct Holds {
    path: PathBuf,
    holds: BTreeMap<HoldId, Hold>,
}

impl Holds {
    /// Loads `<data_dir>/holds.json`; no file is no hold.
    ///
    /// # Errors
    /// [`HoldError::State`]: the file cannot be read, is a link, or does not parse. In the last
    /// case it has been set aside (`holds.json.unreadable-<time>`) and the next load starts
    /// empty; the caller should report it before converging, since the lost holds' specs
    /// would then be removed.
    pub fn load(data_dir: &Path) -> Result<Self, HoldError> {
        let path = data_dir.join(HOLDS_FILE);
        let file = state::load(&path, |bytes| {
            let file: HoldsFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
            let mut holds = BTreeMap::new();
            for hold in file.holds {
                if holds.insert(hold.id.clone(), hold).is_some() {
                    return Err("a hold id appears twice".to_owned());
                }
            }
            Ok(holds)
        })?;
        Ok(Self {
            path,
            holds: file.unwrap_or_default(),
        })
    }

    /// Creates the hold `id`, or replaces its devices, and saves the store.
    ///
    /// # Errors
    /// [`HoldError::Held`] naming the holder when another hold has one of `devices` (nothing
    /// changes); [`HoldError::NoDevices`]; [`HoldError::State`] when the store cannot be
    /// saved (the change is then undone in memory too).
    pub fn apply(
        &mut self,
        id: HoldId,
        devices: Vec<DeviceId>,
        kubernetes: bool,
    ) -> Result<&Hold, HoldError> {
        let mut distinct: Vec<DeviceId> = Vec::with_capacity(devices.len());
        for d in devices {
            if !distinct.contains(&d) {
                distinct.push(d);
            }
        }
        if distinct.is_empty() {
            return Err(HoldError::NoDevices(id));
        }
        for device in &distinct {
            if let Some(holder) = self.holder_of(device).filter(|h| **h != id) {
                return Err(HoldError::Held {
                    device: device.clone(),
                    holder: holder.clone(),
                });
            }
        }
        let hold = Hold {
            id: id.clone(),
            devices: distinct,
            kubernetes,
        };
        let previous = self.holds.insert(id.clone(), hold);
        if let Err(e) = self.save() {
            match previous {
                Some(p) => self.holds.insert(id, p),
                None => self.holds.remove(&id),
            };
            return Err(e);
        }
        Ok(&self.holds[&id])
    }

    /// Releases the hold `id` and saves the store; `Ok(None)` when there was no such hold.
    /// Its spec goes with the next [`super::converge`].
    ///
    /// # Errors
    /// [`HoldError::State`] when the store cannot be saved (the hold is then kept).
    pub fn release(&mut self, id: &HoldId) -> Result<Option<Hold>, HoldError> {
        let Some(hold) = self.holds.remove(id) else {
            return Ok(None);
        };
        if let Err(e) = self.save() {
            self.holds.insert(id.clone(), hold);
            return Err(e);
        }
        Ok(Some(hold))
    }

    /// Every hold, by id.
    pub fn list(&self) -> impl Iterator<Item = &Hold> {
        self.holds.values()
    }

    /// The hold `id`.
    pub fn get(&self, id: &HoldId) -> Option<&Hold> {
        self.holds.get(id)
    }

    /// The hold that has `device`.
    pub fn holder_of(&self, device: &DeviceId) -> Option<&HoldId> {
        self.holds
            .values()
            .find(|h| h.devices.contains(device))
            .map(|h| &h.id)
    }

    fn save(&self) -> Result<(), HoldError> {
        let file = HoldsFile {
            holds: self.holds.values().cloned().collect(),
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

    const GPU0: &str = "GPU-11111111-1111-1111-1111-111111111111";
    const GPU1: &str = "GPU-22222222-2222-2222-2222-222222222222";

    fn dev(s: &str) -> DeviceId {
        s.parse().unwrap()
    }

    fn id(s: &str) -> HoldId {
        s.parse().unwrap()
    }

    #[test]
    fn holds_persist_privately_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        assert_eq!(holds.list().count(), 0);
        holds
            .apply(id("a"), vec![dev(GPU0), dev(GPU0)], false)
            .unwrap();
        holds.apply(id("k"), vec![dev(GPU1)], true).unwrap();
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
        holds.apply(id("first"), vec![dev(GPU0)], false).unwrap();
        let err = holds
            .apply(id("second"), vec![dev(GPU1), dev(GPU0)], false)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{GPU0} is already held by hold first; release that hold first")
        );
        assert!(holds.get(&id("second")).is_none(), "nothing changed");
        // The same hold may be applied again, with other devices.
        holds
            .apply(id("first"), vec![dev(GPU0), dev(GPU1)], false)
            .unwrap();
        assert_eq!(holds.released_then(&id("first")), 2);
        holds.apply(id("second"), vec![dev(GPU0)], false).unwrap();
        assert!(matches!(
            holds.apply(id("none"), vec![], false),
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
            holds.apply(id("a"), vec![dev(GPU0)], false),
            Err(HoldError::State(_))
        ));
        assert_eq!(holds.list().count(), 0);
    }
}
