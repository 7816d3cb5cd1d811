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

/// The most digits of a GPU or compute instance id in R450's MIG form.
const LEGACY_INSTANCE_MAX_DIGITS: usize = 3;

/// The most digits of a slot number (slots are below [`MAX_SLOTS`]).
const SLOT_MAX_DIGITS: usize = 2;

/// A device a hold can hold: a whole GPU (`GPU-<uuid>`), a MIG device (`MIG-<uuid>`), a MIG
/// device in R450's form (`MIG-GPU-<uuid>/<gi>/<ci>`), or a slot of a GPU (`GPU-<uuid>::<n>`,
/// `n` below [`MAX_SLOTS`], no leading zero).
///
/// The string form ([`fmt::Display`], [`FromStr`], serde) is the same on disk, on the wire
/// and, but for R450's `/`, in CDI names. Every value is in normal form (hex in lower case,
/// as `nvidia-smi` prints it; numbers without leading zeros), so two ids are equal exactly
/// when their strings are.
///
/// `Ord` is the string form's order, compared without allocating: the hold store, the claim
/// set and the attribution keep devices in `BTreeMap`s whose order reaches `holds.json` and
/// the scrape, so the order is the one the string-backed id had (`GPU-<u>::10` sorts before
/// `GPU-<u>::2`, and `MIG-GPU-...` between `MIG-0...` and `MIG-a...`).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DeviceId {
    /// A whole GPU.
    Gpu(GpuUuid),
    /// A MIG device by its own UUID, `MIG-<uuid>`: which GPU it is on only the inventory
    /// knows.
    Mig(MigSerial),
    /// A MIG device in R450's form: GPU instance `gi`, compute instance `ci` of `gpu`.
    LegacyMig {
        gpu: GpuUuid,
        gi: Instance,
        ci: Instance,
    },
    /// A time-sliced share of one GPU.
    Slot { gpu: GpuUuid, index: SlotIndex },
}

/// A slot's number, below [`MAX_SLOTS`]; built only by [`SlotIndex::new`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotIndex(u8);

impl SlotIndex {
    /// Slot `n`; `None` when `n` is not below [`MAX_SLOTS`].
    pub fn new(n: u32) -> Option<Self> {
        (n < MAX_SLOTS)
            .then(|| u8::try_from(n).ok().map(Self))
            .flatten()
    }

    /// The number.
    pub fn get(self) -> u32 {
        u32::from(self.0)
    }
}

/// A GPU or compute instance id of R450's MIG form: at most three digits; built only by
/// parsing.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Instance(u16);

/// The `MIG-<uuid>` form, kept whole in normal form; built only by parsing.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct MigSerial(String);

/// A MIG device's UUID in either form, `MIG-<uuid>` or R450's `MIG-GPU-<uuid>/<gi>/<ci>`, hex
/// in lower case: a [`DeviceId`] that is [`DeviceId::Mig`] or [`DeviceId::LegacyMig`].
/// Holding one is proof it names a MIG device.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct MigUuid(DeviceId);

impl MigUuid {
    /// The device id it is (one of the two MIG variants).
    pub fn device(&self) -> &DeviceId {
        &self.0
    }
}

/// A whole GPU's id: its UUID in normal form is always one.
impl From<&GpuUuid> for DeviceId {
    fn from(uuid: &GpuUuid) -> Self {
        Self::Gpu(uuid.clone())
    }
}

impl From<&MigUuid> for DeviceId {
    fn from(m: &MigUuid) -> Self {
        m.0.clone()
    }
}

impl DeviceId {
    /// The GPU this device is on, when its id says so: a GPU is its own, a slot's and an
    /// R450 MIG device's GPU is in their ids. `None` for a `MIG-<uuid>` device, whose GPU
    /// only the inventory knows.
    pub fn gpu_uuid(&self) -> Option<&GpuUuid> {
        match self {
            Self::Gpu(gpu) | Self::LegacyMig { gpu, .. } | Self::Slot { gpu, .. } => Some(gpu),
            Self::Mig(_) => None,
        }
    }

    /// [`DeviceId::gpu_uuid`] as the whole GPU's device id.
    pub fn gpu(&self) -> Option<DeviceId> {
        self.gpu_uuid().map(DeviceId::from)
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
        match self {
            Self::LegacyMig { gpu, gi, ci } => format!("MIG-{gpu}:{}:{}", gi.0, ci.0),
            other => other.to_string(),
        }
    }
}

/// A UUID body (`8-4-4-4-12` hex digits) in lower case, checked by the one UUID validator,
/// [`GpuUuid`]'s; `None` when the shape is wrong.
fn uuid_body(body: &str) -> Option<String> {
    let gpu: GpuUuid = format!("GPU-{body}").parse().ok()?;
    gpu.as_str().strip_prefix("GPU-").map(str::to_owned)
}

/// A decimal number of 1 to `max_digits` digits; with `no_leading_zero`, `0` is the only
/// number that may start with one.
fn small_number(n: &str, max_digits: usize, no_leading_zero: bool) -> Option<u32> {
    let shape_ok = !n.is_empty()
        && n.len() <= max_digits
        && n.bytes().all(|b| b.is_ascii_digit())
        && (!no_leading_zero || n == "0" || !n.starts_with('0'));
    shape_ok.then(|| n.parse().ok()).flatten()
}

/// The MIG forms: `MIG-<uuid>` and R450's `MIG-GPU-<uuid>/<gi>/<ci>`.
fn parse_mig(s: &str) -> Result<DeviceId, IdError> {
    let refuse = || IdError::Device(shown(s));
    let rest = s.strip_prefix("MIG-").ok_or_else(refuse)?;
    if rest.starts_with("GPU-") {
        let mut parts = rest.split('/');
        let (Some(gpu), Some(gi), Some(ci), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(refuse());
        };
        let instance = |n| {
            small_number(n, LEGACY_INSTANCE_MAX_DIGITS, false)
                .and_then(|n| u16::try_from(n).ok())
                .map(Instance)
        };
        return match (gpu.parse::<GpuUuid>(), instance(gi), instance(ci)) {
            (Ok(gpu), Some(gi), Some(ci)) => Ok(DeviceId::LegacyMig { gpu, gi, ci }),
            _ => Err(refuse()),
        };
    }
    uuid_body(rest)
        .map(|body| DeviceId::Mig(MigSerial(format!("MIG-{body}"))))
        .ok_or_else(refuse)
}

impl FromStr for MigUuid {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_mig(s).map(Self)
    }
}

impl FromStr for DeviceId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = || IdError::Device(shown(s));
        if let Some((gpu, n)) = s.split_once(SLOT_SEPARATOR) {
            let gpu: GpuUuid = gpu.parse().map_err(|_| refuse())?;
            return small_number(n, SLOT_MAX_DIGITS, true)
                .and_then(SlotIndex::new)
                .map(|index| Self::Slot { gpu, index })
                .ok_or_else(refuse);
        }
        if s.starts_with("GPU-") {
            return s.parse().map(Self::Gpu).map_err(|_| refuse());
        }
        if s.starts_with("MIG-") {
            return parse_mig(s);
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
        v.to_string()
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
        v.0.to_string()
    }
}

impl fmt::Display for MigUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gpu(gpu) => f.write_str(gpu.as_str()),
            Self::Mig(MigSerial(serial)) => f.write_str(serial),
            Self::LegacyMig { gpu, gi, ci } => write!(f, "MIG-{gpu}/{}/{}", gi.0, ci.0),
            Self::Slot { gpu, index } => write!(f, "{gpu}{SLOT_SEPARATOR}{}", index.0),
        }
    }
}

impl fmt::Debug for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceId({self})")
    }
}

impl fmt::Debug for MigUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MigUuid({self})")
    }
}

impl fmt::Debug for MigSerial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MigSerial({})", self.0)
    }
}

impl fmt::Debug for SlotIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotIndex({})", self.0)
    }
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instance({})", self.0)
    }
}

/// The longest string form: R450's `MIG-GPU-<36>/<3 digits>/<3 digits>` is 52 bytes.
const FORM_MAX_LEN: usize = 64;

/// A string form written on the stack, so that ordering by it allocates nothing.
struct Form {
    bytes: [u8; FORM_MAX_LEN],
    len: usize,
}

impl Form {
    fn of(value: &impl fmt::Display) -> Self {
        use fmt::Write as _;
        let mut form = Self {
            bytes: [0; FORM_MAX_LEN],
            len: 0,
        };
        // Cannot fail: every form fits (a test checks the longest).
        let _ = write!(form, "{value}");
        form
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl fmt::Write for Form {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let to = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        to.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The string form's order (see [`DeviceId`]).
impl Ord for DeviceId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        Form::of(self).as_bytes().cmp(Form::of(other).as_bytes())
    }
}

impl PartialOrd for DeviceId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
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

    const GPU: &str = "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b";
    const MIG: &str = "MIG-58866115-6175-6822-e455-1694c2bc414b";
    const LEGACY: &str = "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7/0";

    fn id(s: &str) -> DeviceId {
        s.parse().unwrap()
    }

    #[test]
    fn device_ids_take_gpu_mig_and_r450_forms() {
        let gpu = id("GPU-5AE30E40-78ba-e5df-4b1a-d79c2d43241b");
        assert_eq!(gpu.to_string(), GPU);
        assert!(matches!(gpu, DeviceId::Gpu(_)));
        let mig = id(MIG);
        assert!(matches!(mig, DeviceId::Mig(_)));
        assert_eq!(mig.cdi_name(), MIG);
        let old = id("MIG-GPU-5AE30E40-78ba-e5df-4b1a-d79c2d43241b/007/0");
        assert_eq!(
            old.to_string(),
            LEGACY,
            "instances lose their leading zeros"
        );
        assert!(matches!(old, DeviceId::LegacyMig { .. }));
        assert_eq!(
            old.cdi_name(),
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b:7:0"
        );
    }

    #[test]
    fn every_form_round_trips_through_its_string_json_and_cdi_name() {
        for s in [
            GPU,
            MIG,
            LEGACY,
            &format!("{GPU}::0"),
            &format!("{GPU}::63"),
        ] {
            let device = id(s);
            assert_eq!(device.to_string(), s);
            assert_eq!(device.to_string().parse::<DeviceId>().unwrap(), device);
            let json = serde_json::to_string(&device).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<DeviceId>(&json).unwrap(), device);
            assert_eq!(DeviceId::from_cdi_name(&device.cdi_name()), Some(device));
        }
        for s in [MIG, LEGACY] {
            let mig: MigUuid = s.parse().unwrap();
            assert_eq!(mig.to_string(), s);
            let json = serde_json::to_string(&mig).unwrap();
            assert_eq!(serde_json::from_str::<MigUuid>(&json).unwrap(), mig);
        }
        assert!(GPU.parse::<MigUuid>().is_err(), "a GPU is no MIG device");
        assert!(
            format!("{GPU}::1").parse::<MigUuid>().is_err(),
            "nor is a slot"
        );
    }

    #[test]
    fn the_order_is_the_string_forms_order() {
        let mut strings = vec![
            format!("{GPU}::10"),
            format!("{GPU}::2"),
            format!("{GPU}::0"),
            GPU.to_owned(),
            "GPU-00000000-78ba-e5df-4b1a-d79c2d43241b".to_owned(),
            "GPU-ffffffff-78ba-e5df-4b1a-d79c2d43241b::1".to_owned(),
            MIG.to_owned(),
            LEGACY.to_owned(),
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/10/0".to_owned(),
            "MIG-a8866115-6175-6822-e455-1694c2bc414b".to_owned(),
        ];
        let mut ids: Vec<DeviceId> = strings.iter().map(|s| id(s)).collect();
        strings.sort();
        ids.sort();
        let sorted: Vec<String> = ids.iter().map(DeviceId::to_string).collect();
        assert_eq!(sorted, strings);
        let mut migs: Vec<MigUuid> = ["MIG-a8866115-6175-6822-e455-1694c2bc414b", LEGACY, MIG]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        migs.sort();
        let sorted: Vec<String> = migs.iter().map(MigUuid::to_string).collect();
        assert_eq!(
            sorted,
            [MIG, LEGACY, "MIG-a8866115-6175-6822-e455-1694c2bc414b"]
        );
    }

    #[test]
    fn an_id_stays_small() {
        // Errors carry ids; a larger id would make every policy result large.
        assert_eq!(std::mem::size_of::<DeviceId>(), 32);
    }

    #[test]
    fn the_longest_form_fits_the_order_buffer() {
        let longest = id("MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/999/999");
        let form = Form::of(&longest);
        assert_eq!(form.as_bytes(), longest.to_string().as_bytes());
        assert!(form.len < FORM_MAX_LEN);
    }

    #[test]
    fn malformed_device_ids_are_refused_with_the_operators_sentence() {
        for bad in [
            "",
            "GPU-",
            "gpu-5ae30e40-78ba-e5df-4b1a-d79c2d43241b",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b-",
            "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241g",
            "MIG-",
            "MIG-58866115-6175-6822-e455-1694c2bc414",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7/0/1",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/x/0",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/1000/0",
            "MIG-GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b/7/../0",
            "0",
            "all",
        ] {
            let e = bad.parse::<DeviceId>().unwrap_err();
            assert_eq!(e, IdError::Device(bad.to_owned()), "{bad:?}");
            assert!(
                e.to_string().starts_with(&format!(
                    "device {bad:?} is neither a GPU UUID (GPU- and 8-4-4-4-12 hex digits)"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn slots_name_their_gpu_and_round_trip_through_cdi_names() {
        let slot = id("GPU-5AE30E40-78ba-e5df-4b1a-d79c2d43241b::3");
        assert_eq!(slot.to_string(), format!("{GPU}::3"));
        let DeviceId::Slot { gpu, index } = &slot else {
            panic!("{slot:?} is a slot");
        };
        assert_eq!(index.get(), 3);
        assert_eq!(gpu.as_str(), GPU);
        assert_eq!(slot.gpu(), Some(id(GPU)));
        assert_eq!(
            DeviceId::from_cdi_name(&slot.cdi_name()),
            Some(slot.clone())
        );
        let old = id(LEGACY);
        assert_eq!(old.gpu(), slot.gpu());
        assert_eq!(DeviceId::from_cdi_name(&old.cdi_name()), Some(old));
        assert_eq!(id(MIG).gpu(), None);
        assert_eq!(DeviceId::from_cdi_name("job-1"), None);
        assert!(SlotIndex::new(MAX_SLOTS).is_none());
        assert_eq!(SlotIndex::new(MAX_SLOTS - 1).map(SlotIndex::get), Some(63));
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
        let id: DeviceId = serde_json::from_str(&format!("\"{GPU}\"")).unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{GPU}\""));
        assert!(serde_json::from_str::<HoldId>("\"../etc\"").is_err());
        assert!(serde_json::from_str::<DeviceId>("\"GPU-1\"").is_err());
    }
}
