//! The passthrough journal, `<data-dir>/passthrough.json` (0600, written atomically): what a
//! bind or release meant to do and how far it got, so that a step cut off by a crash (of the
//! agent or of the helper) can be finished or rolled back at the next start.
//!
//! One entry per GPU (by the address of the GPU asked for), replaced by that GPU's next
//! operation, so the file stays as small as the node. Before any function moves, the entry
//! records every function's original driver and persistence mode; before each helper call the
//! function is marked [`Step::Moving`], and after it [`Step::Done`] or [`Step::Failed`] with
//! the driver sysfs showed then. An entry stays `open` until nothing of it is left half-done.
//!
//! An open entry is the only record of its functions' original drivers, so no new step may
//! start on any of them while it is open: [`Journal::begin`] refuses ([`Unsettled`]) until the
//! entry is settled (when `bcd-helper` answers again, or at the next start).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bcd_protocol::PciAddress;
use serde::{Deserialize, Serialize};

use crate::state::{self, StateError, PRIVATE_MODE};

/// A new step refused because an open entry still covers one of its functions: the entry
/// holds the functions' original drivers until it is settled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{device}: no new passthrough step may start on it: the {} of GPU {gpu} (IOMMU group {group}) did not finish and is still open in the passthrough journal {path}, which keeps the functions' original drivers; bcd settles it when bcd-helper answers again (systemctl start bcd-helper.socket) or at its next start, then try again",
    .intent.noun()
)]
pub struct Unsettled {
    /// The function the new step was asked about.
    pub device: PciAddress,
    /// What the open entry set out to do.
    pub intent: Intent,
    /// The open entry's GPU.
    pub gpu: PciAddress,
    /// Its IOMMU group.
    pub group: String,
    /// The journal.
    pub path: PathBuf,
}

/// Why [`Journal::begin`] did not write a new entry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BeginError {
    /// An open entry covers one of its functions.
    #[error(transparent)]
    Unsettled(#[from] Unsettled),
    /// The journal could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
}

/// The file's name in the data folder.
pub const FILE_NAME: &str = "passthrough.json";
/// The format version written; a file of another version is set aside, not misread.
const FORMAT_VERSION: u32 = 1;

/// What an entry set out to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    /// Move the group's NVIDIA functions to `vfio-pci` (an operator's `vfio bind`).
    Bind,
    /// Give them back to the kernel's driver (an operator's `vfio release`).
    Release,
    /// Undo a bind that failed part-way: the operator was told it failed, so nothing of it
    /// may stay.
    Rollback,
}

impl Intent {
    /// The intent as a noun for sentences: `bind`, `release`, `rollback of a failed bind`.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Intent::Bind => "bind",
            Intent::Release => "release",
            Intent::Rollback => "rollback of a failed bind",
        }
    }
}

/// A GPU's persistence mode before bcd touched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Persistence {
    /// On.
    On,
    /// Off.
    Off,
    /// Not known to the agent (not a GPU, or not read).
    Unknown,
}

/// How far one function got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "step")]
pub enum Step {
    /// Not asked yet.
    Untouched,
    /// Asked; no answer recorded. After a crash its state is whatever sysfs shows.
    Moving,
    /// The helper answered that it moved.
    Done,
    /// It did not move as asked.
    Failed {
        /// The error, as the operator read it.
        error: String,
        /// Whether the helper answered (then it cleaned up after itself); `false` when the
        /// answer never came and the function's state is unknown.
        answered: bool,
    },
}

/// One function of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionRecord {
    /// The function.
    pub address: PciAddress,
    /// Whether it is a GPU (display controller), whose persistence mode matters.
    pub gpu: bool,
    /// Its driver before the entry began (`None`: no driver).
    pub original_driver: Option<String>,
    /// Its persistence mode before the entry began.
    pub original_persistence: Persistence,
    /// How far it got.
    #[serde(flatten)]
    pub step: Step,
    /// Its driver when last looked at (`None`: no driver).
    pub driver: Option<String>,
}

/// One bind or release of a GPU and its group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// What it set out to do.
    pub intent: Intent,
    /// The GPU asked for.
    pub gpu: PciAddress,
    /// Its IOMMU group.
    pub group: String,
    /// The functions, in the order they move.
    pub functions: Vec<FunctionRecord>,
    /// `true` until nothing of it is half-done.
    pub open: bool,
    /// When it last changed, in Unix seconds.
    pub updated_unix_s: u64,
}

impl Entry {
    /// Its GPU and its functions' addresses.
    fn devices(&self) -> Vec<PciAddress> {
        std::iter::once(self.gpu)
            .chain(self.functions.iter().map(|f| f.address))
            .collect()
    }

    /// Whether any of `devices` is its GPU or one of its functions.
    fn covers_any(&self, devices: &[PciAddress]) -> bool {
        self.devices().iter().any(|d| devices.contains(d))
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct JournalFile {
    version: u32,
    entries: BTreeMap<PciAddress, Entry>,
}

impl state::Versioned for JournalFile {
    fn version(&self) -> u32 {
        self.version
    }
}

/// The journal in one data folder.
#[derive(Debug, Clone)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    /// The journal kept in `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(FILE_NAME),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every entry, by GPU; empty before the first write.
    ///
    /// # Errors
    /// [`StateError::SetAside`] when the file does not parse (it was renamed aside and is
    /// kept for the operator), [`StateError::Io`] or [`StateError::Symlink`].
    pub fn load(&self) -> Result<BTreeMap<PciAddress, Entry>, StateError> {
        let parsed: Option<JournalFile> = state::load_versioned(&self.path, FORMAT_VERSION)?;
        Ok(parsed.map(|f| f.entries).unwrap_or_default())
    }

    /// The first open entry that covers any of `devices` (as its GPU or as one of its
    /// functions); `None` when there is none, or when the file was torn and set aside (its
    /// entries are lost; [`Journal::load`] reported that at start).
    ///
    /// # Errors
    /// As [`Journal::load`], except [`StateError::SetAside`].
    pub(crate) fn open_entry_of(
        &self,
        devices: &[PciAddress],
    ) -> Result<Option<Entry>, StateError> {
        let entries = match self.load() {
            Ok(e) => e,
            Err(StateError::SetAside { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(entries
            .into_values()
            .find(|e| e.open && e.covers_any(devices)))
    }

    /// Refuses a new step on `device` while an open entry covers it.
    ///
    /// # Errors
    /// [`BeginError::Unsettled`] naming the open entry; [`BeginError::State`] as
    /// [`Journal::open_entry_of`].
    pub(crate) fn refuse_unsettled(&self, device: PciAddress) -> Result<(), BeginError> {
        match self.open_entry_of(&[device])? {
            Some(open) => Err(self.unsettled(device, &open).into()),
            None => Ok(()),
        }
    }

    /// Writes `entry`, a new step's, unless an open entry covers its GPU or any of its
    /// functions: an open entry is never replaced by another step's, so the original drivers
    /// it keeps are never lost.
    ///
    /// # Errors
    /// [`BeginError::Unsettled`] (nothing written), naming the first function of `entry` that
    /// the open entry covers; [`BeginError::State`] as [`Journal::put`].
    pub(crate) fn begin(&self, entry: &mut Entry) -> Result<(), BeginError> {
        let devices = entry.devices();
        if let Some(open) = self.open_entry_of(&devices)? {
            let device = devices
                .iter()
                .copied()
                .find(|d| open.covers_any(&[*d]))
                .unwrap_or(entry.gpu);
            return Err(self.unsettled(device, &open).into());
        }
        Ok(self.put(entry)?)
    }

    fn unsettled(&self, device: PciAddress, open: &Entry) -> Unsettled {
        Unsettled {
            device,
            intent: open.intent,
            gpu: open.gpu,
            group: open.group.clone(),
            path: self.path.clone(),
        }
    }

    /// Writes `entry` (stamped now) in place of the GPU's previous one: an update of a step
    /// [`Journal::begin`] started, or of an entry being settled. Callers serialise their
    /// writes (the runtime runs one passthrough step at a time).
    ///
    /// # Errors
    /// As [`Journal::load`], except that a file set aside is replaced by one holding `entry`
    /// (what it held is kept beside it), and [`StateError::Io`] when writing fails.
    pub fn put(&self, entry: &mut Entry) -> Result<(), StateError> {
        entry.updated_unix_s = crate::state::unix_now();
        let mut entries = match self.load() {
            Ok(e) => e,
            Err(StateError::SetAside { .. }) => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        entries.insert(entry.gpu, entry.clone());
        let mut bytes = serde_json::to_vec_pretty(&JournalFile {
            version: FORMAT_VERSION,
            entries,
        })
        .map_err(|e| StateError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        bytes.push(b'\n');
        state::write_atomic(&self.path, &bytes, PRIVATE_MODE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entry() -> Entry {
        Entry {
            intent: Intent::Bind,
            gpu: "0000:61:00.0".parse().unwrap(),
            group: "61".into(),
            functions: vec![FunctionRecord {
                address: "0000:61:00.0".parse().unwrap(),
                gpu: true,
                original_driver: Some("nvidia".into()),
                original_persistence: Persistence::Unknown,
                step: Step::Failed {
                    error: "its driver has not let go".into(),
                    answered: true,
                },
                driver: Some("nvidia".into()),
            }],
            open: true,
            updated_unix_s: 0,
        }
    }

    #[test]
    fn entries_round_trip_privately_and_replace_per_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::new(dir.path());
        assert!(journal.load().unwrap().is_empty());
        let mut e = entry();
        journal.put(&mut e).unwrap();
        e.open = false;
        journal.put(&mut e).unwrap();
        let loaded = journal.load().unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded.values().next().unwrap(), &e);
        let mode = std::fs::metadata(journal.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(journal.path()).unwrap();
        assert!(text.contains("\"step\": \"failed\""), "{text}");
        assert!(text.contains("\"original_driver\": \"nvidia\""), "{text}");
    }

    // What broke: a new step's entry replaced an open one, losing the original drivers it kept.
    #[test]
    fn a_new_entry_covering_a_function_of_an_open_one_is_refused_until_it_is_settled() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::new(dir.path());
        let mut open = entry();
        journal.put(&mut open).unwrap();
        // A release named by the audio function, whose group holds the open entry's GPU.
        let mut next = entry();
        next.intent = Intent::Release;
        next.gpu = "0000:61:00.1".parse().unwrap();
        next.functions[0].original_driver = Some("vfio-pci".into());
        let err = journal.begin(&mut next).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "0000:61:00.0: no new passthrough step may start on it: the bind of GPU 0000:61:00.0 \
                 (IOMMU group 61) did not finish and is still open in the passthrough journal {}, \
                 which keeps the functions' original drivers; bcd settles it when bcd-helper \
                 answers again (systemctl start bcd-helper.socket) or at its next start, then try again",
                journal.path().display()
            )
        );
        assert_eq!(journal.load().unwrap().len(), 1, "nothing was written");
        assert_eq!(journal.load().unwrap()[&open.gpu], open);
        open.open = false;
        journal.put(&mut open).unwrap();
        journal.begin(&mut next).unwrap();
        assert_eq!(journal.load().unwrap().len(), 2);
    }

    #[test]
    fn a_torn_journal_is_set_aside_and_the_next_write_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::new(dir.path());
        std::fs::write(journal.path(), b"{\"version\":1,\"entr").unwrap();
        let err = journal.load().unwrap_err();
        assert!(matches!(err, StateError::SetAside { .. }), "{err}");
        journal.put(&mut entry()).unwrap();
        assert_eq!(journal.load().unwrap().len(), 1);
        let kept = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".unreadable-"))
            .count();
        assert_eq!(kept, 1);
    }
}
