//! The names a hold is made of: the hold's own id, which becomes a file name, and the devices
//! it holds, which become CDI device names and `NVIDIA_VISIBLE_DEVICES` entries.
//!
//! A device is a whole GPU (`GPU-<uuid>`), a MIG device (`MIG-<uuid>`, or R450's
//! `MIG-GPU-<uuid>/<gi>/<ci>`), or a slot: a time-sliced share of one GPU, `GPU-<uuid>::<n>`
//! (`n` from 0 to the node's `--gpu-slots` less one). What may be held together is
//! [`super::policy`]'s decision, not this module's.
//!
//! Both are validated on parse and only on parse: holding a value of these types is proof that
//! it is safe to put in a path or a spec.

use std::fmt;
use std::str::FromStr;

use bcd_protocol::GpuUuid;
use serde::{Deserialize, Serialize};

/// bcd's spec files are `bcd-<hold id>.json`; vendor spec reading skips every `bcd-*` file.
pub const HOLD_SPEC_PREFIX: &str = "bcd-";
/// See [`HOLD_SPEC_PREFIX`].
pub const HOLD_SPEC_SUFFIX: &str = ".json";

/// The longest hold id: 63 characters, so `bcd-<id>.json` stays a short, ordinary file name.
pub const HOLD_ID_MAX_LEN: usize = 63;

/// Why a hold id or a device id was refused. `Display` is the operator's sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The hold id is not a safe name.
    #[error(
        "hold id {0:?} is not a safe name: use 1 to 63 of a-z, 0-9, '_', '.' and '-', starting with a letter or digit"
    )]
    HoldId(String),
    /// The device is neither a GPU UUID, a MIG device UUID nor a slot.
    #[error(
        "device {0:?} is neither a GPU UUID (GPU- and 8-4-4-4-12 hex digits), a MIG device UUID (MIG-, or R450's MIG-GPU-<uuid>/<gi>/<ci>) nor a slot (GPU-<uuid>::<n>)"
    )]
    Device(String),
}

/// A hold's id: `[a-z0-9][a-z0-9_.-]{0,62}`. It names the hold's spec file,
/// `bcd-<id>.json`, so it can hold no `/`, no upper case (file systems that fold case would
/// merge two holds) and cannot be `.` or `..`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HoldId(String);

impl HoldId {
    /// The id as given (it is already in its only form).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of this hold's CDI spec file: `bcd-<id>.json`.
    pub fn spec_file_name(&self) -> String {
        format!("{}{}{}", HOLD_SPEC_PREFIX, self.0, HOLD_SPEC_SUFFIX)
    }
}

impl FromStr for HoldId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut bytes = s.bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let rest_ok = bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        });
        if first_ok && rest_ok && s.len() <= HOLD_ID_MAX_LEN {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::HoldId(shown(s)))
        }
    }
}

impl TryFrom<String> for HoldId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HoldId> for String {
    fn from(v: HoldId) -> Self {
        v.0
    }
}

impl fmt::Display for HoldId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for HoldId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HoldId({})", self.0)
    }
}

/// The most slots one GPU may offer: slot numbers are below it.
pub const MAX_SLOTS: u32 = 64;

/// What separates a GPU's UUID from a slot number: `GPU-<uuid>::<n>`. A CDI device name may
/// hold `:`, and no NVIDIA name does, so a slot never collides with a vendor device.
pub const SLOT_SEPARATOR: &str = "::";

/// A device a hold can hold: a whole GPU (`GPU-<uuid>`), a MIG device (`MIG-<uuid>`), a
/// MIG device in R450's form (`MIG-GPU-<uuid>/<gi>/<ci>`), or a slot of a GPU
/// (`GPU-<uuid>::<n>`, `n` below [`MAX_SLOTS`], no leading zero). Hex digits are kept lower
/// case, as `nvidia-smi` prints them, so the same device always compares equal.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DeviceId(String);

/// A whole GPU's id: its UUID in normal form is always one.
impl From<&GpuUuid> for DeviceId {
    fn from(uuid: &GpuUuid) -> Self {
        Self(uuid.as_str().to_owned())
    }
}

/// What kind of device a [`DeviceId`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A whole GPU.
    Gpu,
    /// A MIG device.
    Mig,
    /// A time-sliced share of a GPU.
    Slot,
}

impl DeviceId {
    /// The id in its normal form; this is what `NVIDIA_VISIBLE_DEVICES` carries.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it is a whole GPU, a MIG device or a slot.
    pub fn kind(&self) -> DeviceKind {
        if self.0.contains(SLOT_SEPARATOR) {
            DeviceKind::Slot
        } else if self.0.starts_with("GPU-") {
            DeviceKind::Gpu
        } else {
            DeviceKind::Mig
        }
    }

    /// The GPU this device is on, when its id says so: a GPU is its own, a slot's and an
    /// R450 MIG device's GPU is in their ids. `None` for a `MIG-<uuid>` device, whose GPU
    /// only the inventory knows.
    pub fn gpu(&self) -> Option<DeviceId> {
        match self.kind() {
            DeviceKind::Gpu => Some(self.clone()),
            DeviceKind::Slot => self
                .0
                .split_once(SLOT_SEPARATOR)
                .map(|(gpu, _)| Self(gpu.to_owned())),
            DeviceKind::Mig => self
                .0
                .strip_prefix("MIG-")
                .filter(|rest| rest.starts_with("GPU-"))
                .and_then(|rest| rest.split('/').next())
                .map(|gpu| Self(gpu.to_owned())),
        }
    }

    /// A slot's number; `None` for a GPU or a MIG device.
    pub fn slot(&self) -> Option<u32> {
        self.0
            .split_once(SLOT_SEPARATOR)
            .and_then(|(_, n)| n.parse().ok())
    }

    /// Slot `n` of this GPU; `None` when this is not a whole GPU or `n` is not below
    /// [`MAX_SLOTS`].
    pub fn slot_of(&self, n: u32) -> Option<DeviceId> {
        (self.kind() == DeviceKind::Gpu && n < MAX_SLOTS)
            .then(|| Self(format!("{}{SLOT_SEPARATOR}{n}", self.0)))
    }

    /// The device a CDI device name of a hold spec stands for (the inverse of
    /// [`DeviceId::cdi_name`]); `None` for any other name.
    pub fn from_cdi_name(name: &str) -> Option<DeviceId> {
        let id: DeviceId = name.parse().ok().or_else(|| {
            let rest = name.strip_prefix("MIG-GPU-")?;
            format!("MIG-GPU-{}", rest.replace(':', "/")).parse().ok()
        })?;
        (id.cdi_name() == name).then_some(id)
    }

    /// The CDI device name: the id itself, except that R450's `/` separators become `:`,
    /// since a CDI device name may not hold a `/`.
    pub fn cdi_name(&self) -> String {
        self.0.replace('/', ":")
    }
}

/// A MIG device's UUID: `MIG-<uuid>`, or R450's `MIG-GPU-<uuid>/<gi>/<ci>`, hex in lower case
/// (a [`DeviceId`] of kind [`DeviceKind::Mig`]). Holding one is proof it names a MIG device.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MigUuid(DeviceId);

impl MigUuid {
    /// The UUID in its normal form.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The device id it is.
    pub fn device(&self) -> &DeviceId {
        &self.0
    }
}

impl FromStr for MigUuid {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let id: DeviceId = s.parse()?;
        if id.kind() == DeviceKind::Mig {
            Ok(Self(id))
        } else {
            Err(IdError::Device(shown(s)))
        }
    }
}

impl TryFrom<String> for MigUuid {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<MigUuid> for String {
    fn from(v: MigUuid) -> Self {
        v.0.into()
    }
}

impl From<&MigUuid> for DeviceId {
    fn from(m: &MigUuid) -> Self {
        m.0.clone()
    }
}

impl fmt::Display for MigUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for MigUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MigUuid({})", self.as_str())
    }
}

/// `8-4-4-4-12` hex digits, lower-cased; `None` when the shape is wrong.
fn uuid_body(s: &str) -> Option<String> {
    let mut groups = 0;
    for (group, want) in s.split('-').zip([8usize, 4, 4, 4, 12]) {
        if group.len() != want || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        groups += 1;
    }
    (groups == 5 && s.split('-').count() == 5).then(|| s.to_ascii_lowercase())
}

impl FromStr for DeviceId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = || IdError::Device(shown(s));
        if let Some((gpu, n)) = s.split_once(SLOT_SEPARATOR) {
            let number = (!n.is_empty()
                && n.len() <= 2
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0')))
            .then(|| n.parse::<u32>().ok())
            .flatten();
            let gpu: DeviceId = gpu.parse().map_err(|_| refuse())?;
            return number.and_then(|n| gpu.slot_of(n)).ok_or_else(refuse);
        }
        if let Some(body) = s.strip_prefix("GPU-") {
            return uuid_body(body)
                .map(|b| Self(format!("GPU-{b}")))
                .ok_or_else(refuse);
        }
        if let Some(legacy) = s.strip_prefix("MIG-GPU-") {
            let mut parts = legacy.split('/');
            let (Some(uuid), Some(gi), Some(ci), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(refuse());
            };
            let small = |n: &str| {
                (!n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| n.parse::<u32>().ok())
                    .flatten()
            };
            return match (uuid_body(uuid), small(gi), small(ci)) {
                (Some(u), Some(g), Some(c)) => Ok(Self(format!("MIG-GPU-{u}/{g}/{c}"))),
                _ => Err(refuse()),
            };
        }
        if let Some(body) = s.strip_prefix("MIG-") {
            return uuid_body(body)
                .map(|b| Self(format!("MIG-{b}")))
                .ok_or_else(refuse);
        }
        Err(refuse())
    }
}

impl TryFrom<String> for DeviceId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<DeviceId> for String {
    fn from(v: DeviceId) -> Self {
        v.0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceId({})", self.0)
    }
}

/// An untrusted string as an error shows it: at most 80 characters, so a hostile argument
/// cannot flood a log line.
fn shown(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_ids_are_safe_file_names() {
        for ok in ["a", "job-42", "0", "train.v2_b", &"x".repeat(63)] {
            assert_eq!(ok.parse::<HoldId>().unwrap().as_str(), ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "-a",
            "_a",
            "A",
            "a/b",
            "a b",
            "ä",
            "a\n",
            &"x".repeat(64),
        ] {
            assert!(bad.parse::<HoldId>().is_err(), "{bad:?} must be refused");
        }
        let id: HoldId = "job-1".parse().unwrap();
        assert_eq!(id.spec_file_name(), "bcd-job-1.json");
    }

    #[test]
    fn device_ids_take_gpu_mig_and_r450_forms() {
        let gpu: DeviceId = "GPU-5AE30E40-78ba-e5df-4b1a-d79c2d43241b".parse().unwrap();
        assert_eq!(gpu.as_str(), "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b");
        assert_eq!(gpu.kind(), DeviceKind::Gpu);
        let mig: DeviceId = "MIG-58866115-6175-6822-e455-1694c2bc414b".parse().unwrap();
        assert_eq!(mig.kind(), DeviceKind::Mig);
        assert_eq!(mig.cdi_name(), mig.as_str());
        let old: DeviceId = "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7/0"
            .parse()
            .unwrap();
        assert_eq!(old.kind(), DeviceKind::Mig);
        assert_eq!(
            old.cdi_name(),
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b:7:0"
        );
        for bad in [
            "",
            "GPU-",
            "gpu-5ae30e40-78ba-e5df-4b1a-d79c2d43241b",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b-",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241g",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7/0/1",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/x/0",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7/../0",
            "0",
            "all",
        ] {
            assert!(bad.parse::<DeviceId>().is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn slots_name_their_gpu_and_round_trip_through_cdi_names() {
        let slot: DeviceId = "GPU-5AE30E40-78ba-e5df-4b1a-d79c2d43241b::3"
            .parse()
            .unwrap();
        assert_eq!(slot.as_str(), "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b::3");
        assert_eq!(slot.kind(), DeviceKind::Slot);
        assert_eq!(slot.slot(), Some(3));
        assert_eq!(
            slot.gpu().unwrap().as_str(),
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b"
        );
        assert_eq!(
            DeviceId::from_cdi_name(&slot.cdi_name()),
            Some(slot.clone())
        );
        let old: DeviceId = "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7/0"
            .parse()
            .unwrap();
        assert_eq!(old.gpu(), slot.gpu());
        assert_eq!(DeviceId::from_cdi_name(&old.cdi_name()), Some(old));
        let mig: DeviceId = "MIG-58866115-6175-6822-e455-1694c2bc414b".parse().unwrap();
        assert_eq!(mig.gpu(), None);
        assert_eq!(DeviceId::from_cdi_name("job-1"), None);
        for bad in [
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b::",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b::64",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b::01",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b::-1",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b::1::2",
            "MIG-58866115-6175-6822-e455-1694c2bc414b::1",
        ] {
            assert!(bad.parse::<DeviceId>().is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn ids_round_trip_through_json_and_refuse_bad_values() {
        let id: DeviceId =
            serde_json::from_str("\"GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b\"").unwrap();
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b\""
        );
        assert!(serde_json::from_str::<HoldId>("\"../etc\"").is_err());
    }
}
