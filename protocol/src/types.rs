//! Argument types that carry their own proof of validity.

use std::cell::RefCell;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a string is not a valid argument. Its `Display` names the argument kind and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind}: {reason}")]
pub struct InvalidArgument {
    /// Which kind of argument (`GPU UUID`, `PCI address`, ...).
    pub kind: &'static str,
    /// What is wrong with it, in words.
    pub reason: String,
}

impl InvalidArgument {
    fn new(kind: &'static str, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }
}

thread_local! {
    /// The last argument refused while decoding on this thread, as `field: rule`. postcard
    /// keeps only "Serde Deserialization Error" of a refusal, so the parsers leave their
    /// sentence here and [`crate::frame::decode`] reads it back (decoding is synchronous, so
    /// a thread-local cannot mix two frames' refusals).
    static REFUSED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Clears the refusal left by an earlier decode on this thread.
pub(crate) fn clear_refusal() {
    REFUSED.with(|r| *r.borrow_mut() = None);
}

/// The sentence of the argument refused during the last decode on this thread, if any.
pub(crate) fn take_refusal() -> Option<String> {
    REFUSED.with(|r| r.borrow_mut().take())
}

/// Parses a decoded string, leaving the refusal's sentence for [`take_refusal`].
fn parse_decoded<T: FromStr<Err = InvalidArgument>>(s: &str) -> Result<T, InvalidArgument> {
    s.parse::<T>().inspect_err(|e| {
        REFUSED.with(|r| *r.borrow_mut() = Some(e.to_string()));
    })
}

/// Field deserialisers that put the field's name in front of a refusal: `gpu: invalid PCI
/// address: ...`. One per field name the operations use.
pub(crate) mod named {
    use serde::{Deserialize, Deserializer};

    use super::REFUSED;

    fn named<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        field: &'static str,
        d: D,
    ) -> Result<T, D::Error> {
        T::deserialize(d).inspect_err(|_| {
            REFUSED.with(|r| {
                let mut r = r.borrow_mut();
                let rule = r
                    .take()
                    .unwrap_or_else(|| "not the expected type".to_owned());
                *r = Some(format!("{field}: {rule}"));
            });
        })
    }

    pub(crate) fn gpu<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
        named("gpu", d)
    }

    pub(crate) fn device<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        named("device", d)
    }

    pub(crate) fn domain<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        named("domain", d)
    }

    pub(crate) fn file<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        named("file", d)
    }

    pub(crate) fn profiles<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        named("profiles", d)
    }
}

/// Longest string any argument may be; well above every legal value, far below a frame.
const MAX_ARGUMENT_LEN: usize = 4096;

/// Shows a rejected input safely: at most 64 characters, control characters escaped.
fn shown(input: &str) -> String {
    let mut out: String = input
        .chars()
        .take(64)
        .flat_map(char::escape_debug)
        .collect();
    if input.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// A GPU's UUID as NVIDIA prints it: `GPU-` and 8-4-4-4-12 hex digits, kept in lower case.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GpuUuid(String);

impl GpuUuid {
    /// The UUID in its normal form (`GPU-` prefix, lower-case hex).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for GpuUuid {
    type Err = InvalidArgument;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KIND: &str = "GPU UUID";
        let hex = s.strip_prefix("GPU-").ok_or_else(|| {
            InvalidArgument::new(KIND, format!("{:?} does not start with GPU-", shown(s)))
        })?;
        let groups: Vec<&str> = hex.split('-').collect();
        let shape_ok = groups.len() == 5
            && groups
                .iter()
                .zip([8, 4, 4, 4, 12])
                .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
        if !shape_ok {
            return Err(InvalidArgument::new(
                KIND,
                format!(
                    "{:?} is not GPU- followed by 8-4-4-4-12 hex digits",
                    shown(s)
                ),
            ));
        }
        Ok(Self(format!("GPU-{}", hex.to_ascii_lowercase())))
    }
}

impl TryFrom<String> for GpuUuid {
    type Error = InvalidArgument;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        parse_decoded(&s)
    }
}

impl From<GpuUuid> for String {
    fn from(v: GpuUuid) -> Self {
        v.0
    }
}

impl AsRef<str> for GpuUuid {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A UUID compares equal to its normal form's spelling only; parse a string of unknown case
/// before comparing it.
impl PartialEq<str> for GpuUuid {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for GpuUuid {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for GpuUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for GpuUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GpuUuid({})", self.0)
    }
}

/// A PCI function address. Parses `0000:18:00.0` and NVML's `00000000:18:00.0`, in either
/// case; shows the kernel's form, `0000:18:00.0` (lower-case hex), which is what sysfs names.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PciAddress {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

impl PciAddress {
    /// The function `domain:bus:device.function`, when sysfs can name it (domain at most
    /// `ffff`, device below 32, function below 8).
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Option<Self> {
        (domain <= 0xffff && device < 32 && function < 8).then_some(Self {
            domain,
            bus,
            device,
            function,
        })
    }

    /// The kernel's form, as sysfs names the function: `0000:18:00.0`.
    pub fn sysfs_name(&self) -> String {
        self.to_string()
    }

    /// NVML's form, as `nvidia-smi` prints it: `00000000:18:00.0` (upper-case hex).
    pub fn nvml_bus_id(&self) -> String {
        format!(
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }

    /// The same slot's function 0..=7 (a GPU's audio function is usually function 1).
    pub fn with_function(&self, function: u8) -> Option<Self> {
        (function < 8).then_some(Self { function, ..*self })
    }

    /// The PCI domain.
    pub fn domain(&self) -> u32 {
        self.domain
    }

    /// The bus number.
    pub fn bus(&self) -> u8 {
        self.bus
    }

    /// The device (slot) number, below 32.
    pub fn device(&self) -> u8 {
        self.device
    }

    /// The function number, below 8.
    pub fn function(&self) -> u8 {
        self.function
    }
}

impl FromStr for PciAddress {
    type Err = InvalidArgument;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KIND: &str = "PCI address";
        let bad = || {
            InvalidArgument::new(
                KIND,
                format!(
                    "{:?} is not DDDD:BB:DD.F (for example 0000:18:00.0)",
                    shown(s)
                ),
            )
        };
        let hex = |part: &str, max_len: usize| -> Result<u32, InvalidArgument> {
            if part.is_empty()
                || part.len() > max_len
                || !part.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(bad());
            }
            u32::from_str_radix(part, 16).map_err(|_| bad())
        };
        let (domain, rest) = s.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (device, function) = rest.split_once('.').ok_or_else(bad)?;
        if !(domain.len() == 4 || domain.len() == 8)
            || bus.len() != 2
            || device.len() != 2
            || function.len() != 1
        {
            return Err(bad());
        }
        let device = hex(device, 2)?;
        let function = hex(function, 1)?;
        if device >= 32 || function >= 8 {
            return Err(InvalidArgument::new(
                KIND,
                format!("{:?} has a device above 1f or a function above 7", shown(s)),
            ));
        }
        let bus = u8::try_from(hex(bus, 2)?).map_err(|_| bad())?;
        let domain = hex(domain, 8)?;
        // The kernel's form has four digits; an eight-digit domain must still fit in them.
        if domain > 0xffff {
            return Err(InvalidArgument::new(
                KIND,
                format!("{:?} has a PCI domain above ffff", shown(s)),
            ));
        }
        Ok(Self {
            domain,
            bus,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl TryFrom<String> for PciAddress {
    type Error = InvalidArgument;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        parse_decoded(&s)
    }
}

impl From<PciAddress> for String {
    fn from(v: PciAddress) -> Self {
        v.to_string()
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl fmt::Debug for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PciAddress({self})")
    }
}

/// A GPU named the two ways `nvidia-smi -i` accepts and bcd allows: by UUID or by PCI address.
/// (Indices are refused: they change with the set of GPUs the driver sees.)
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum GpuRef {
    /// By UUID.
    Uuid(GpuUuid),
    /// By PCI address.
    Pci(PciAddress),
}

impl GpuRef {
    /// The argument to give `nvidia-smi -i`: the UUID, or NVML's bus id form.
    pub fn nvidia_smi_id(&self) -> String {
        match self {
            GpuRef::Uuid(u) => u.to_string(),
            GpuRef::Pci(p) => p.nvml_bus_id(),
        }
    }
}

impl FromStr for GpuRef {
    type Err = InvalidArgument;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("GPU-") {
            return s.parse().map(GpuRef::Uuid);
        }
        s.parse().map(GpuRef::Pci).map_err(|_| {
            InvalidArgument::new(
                "GPU",
                format!(
                    "{:?} is neither a GPU UUID (GPU-...) nor a PCI address (0000:18:00.0)",
                    shown(s)
                ),
            )
        })
    }
}

impl TryFrom<String> for GpuRef {
    type Error = InvalidArgument;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        parse_decoded(&s)
    }
}

impl From<GpuRef> for String {
    fn from(v: GpuRef) -> Self {
        v.to_string()
    }
}

impl fmt::Display for GpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuRef::Uuid(u) => u.fmt(f),
            GpuRef::Pci(p) => p.fmt(f),
        }
    }
}

impl fmt::Debug for GpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GpuRef({self})")
    }
}

/// Longest libvirt domain name bcd accepts.
pub const MAX_DOMAIN_NAME_LEN: usize = 64;

/// A libvirt domain name from a short, safe set: ASCII letters, digits, `_`, `-`, `.`, `+`,
/// 1 to 64 characters, not starting with `-` or `.` (so it can never read as an option or a
/// hidden or relative path), and never all digits or UUID-shaped: `virsh` looks those up as a
/// domain's id or UUID first, so one domain would have three names (and three locks).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DomainName(String);

impl DomainName {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for DomainName {
    type Err = InvalidArgument;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KIND: &str = "libvirt domain name";
        if s.is_empty() || s.len() > MAX_DOMAIN_NAME_LEN {
            return Err(InvalidArgument::new(
                KIND,
                format!("it must be 1 to {MAX_DOMAIN_NAME_LEN} characters long"),
            ));
        }
        if s.starts_with(['-', '.']) {
            return Err(InvalidArgument::new(
                KIND,
                format!("{:?} starts with '-' or '.'", shown(s)),
            ));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "_-.+".contains(*c)))
        {
            return Err(InvalidArgument::new(
                KIND,
                format!(
                    "{:?} contains {:?}; only letters, digits, '_', '-', '.', '+' are allowed",
                    shown(s),
                    c
                ),
            ));
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(InvalidArgument::new(
                KIND,
                format!(
                    "{:?} is all digits, which virsh reads as a running domain's id; name the domain",
                    shown(s)
                ),
            ));
        }
        if is_uuid_shaped(s) {
            return Err(InvalidArgument::new(
                KIND,
                format!(
                    "{:?} is shaped like a UUID, which virsh reads as a domain's UUID; name the domain",
                    shown(s)
                ),
            ));
        }
        Ok(Self(s.to_owned()))
    }
}

/// 32 hex digits, with or without the four dashes of 8-4-4-4-12: what libvirt's UUID parser
/// accepts (it also skips dashes elsewhere, so any 32 hex digits among dashes count).
fn is_uuid_shaped(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        && s.bytes().filter(u8::is_ascii_hexdigit).count() == 32
}

impl TryFrom<String> for DomainName {
    type Error = InvalidArgument;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        parse_decoded(&s)
    }
}

impl From<DomainName> for String {
    fn from(v: DomainName) -> Self {
        v.0
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DomainName({})", self.0)
    }
}

/// A libvirt save image's path, lexically safe: absolute, UTF-8 in a safe character set, no
/// `.` or `..` component, no empty component. Whether it lies in the helper's save folder and
/// is a regular file (not a link) is a fact of the host, checked by the helper when it acts.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SaveFile(PathBuf);

impl SaveFile {
    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Whether the path lies below `dir` (lexically; both are normal absolute paths).
    pub fn is_under(&self, dir: &Path) -> bool {
        self.0.parent().is_some_and(|p| p.starts_with(dir)) && self.0 != dir
    }
}

impl FromStr for SaveFile {
    type Err = InvalidArgument;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KIND: &str = "save file";
        if s.is_empty() || s.len() > MAX_ARGUMENT_LEN {
            return Err(InvalidArgument::new(
                KIND,
                "it must be 1 to 4096 bytes long",
            ));
        }
        if !s.starts_with('/') {
            return Err(InvalidArgument::new(
                KIND,
                format!("{:?} is not an absolute path", shown(s)),
            ));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "/_-.+".contains(*c)))
        {
            return Err(InvalidArgument::new(
                KIND,
                format!(
                    "{:?} contains {:?}; only letters, digits, '/', '_', '-', '.', '+' are allowed",
                    shown(s),
                    c
                ),
            ));
        }
        if s.contains("//") || s.ends_with('/') {
            return Err(InvalidArgument::new(
                KIND,
                format!("{:?} has an empty path component", shown(s)),
            ));
        }
        let path = PathBuf::from(s);
        if path
            .components()
            .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
            || s.split('/').any(|part| part == "." || part == "..")
        {
            return Err(InvalidArgument::new(
                KIND,
                format!("{:?} contains a '.' or '..' component", shown(s)),
            ));
        }
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('-'))
        {
            return Err(InvalidArgument::new(
                KIND,
                format!("{:?} has a file name starting with '-'", shown(s)),
            ));
        }
        Ok(Self(path))
    }
}

impl TryFrom<String> for SaveFile {
    type Error = InvalidArgument;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        parse_decoded(&s)
    }
}

impl From<SaveFile> for String {
    fn from(v: SaveFile) -> Self {
        // Built only from a validated UTF-8 string.
        v.0.to_string_lossy().into_owned()
    }
}

impl fmt::Display for SaveFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.display().fmt(f)
    }
}

impl fmt::Debug for SaveFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SaveFile({})", self.0.display())
    }
}

/// The most GPU instances one `create` asks for: a GPU has at most 8 memory slices, so no
/// layout has more instances on one GPU.
pub const MAX_MIG_PROFILES: usize = 8;
/// The highest GPU instance profile id accepted (NVML's ids are small; 63 leaves room).
pub const MAX_MIG_PROFILE_ID: u8 = 63;

/// The GPU instance profile ids of one `nvidia-smi mig -cgi` call, in the order they are
/// created: 1 to [`MAX_MIG_PROFILES`] ids, each 0 to [`MAX_MIG_PROFILE_ID`]. Whether they fit
/// the GPU is the driver's to say.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct MigProfileIds(Vec<u8>);

impl MigProfileIds {
    /// The ids, in creation order.
    pub fn ids(&self) -> &[u8] {
        &self.0
    }

    /// The ids as `-cgi` takes them: `9,9,19`.
    pub fn joined(&self) -> String {
        self.0
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl TryFrom<Vec<u8>> for MigProfileIds {
    type Error = InvalidArgument;

    fn try_from(ids: Vec<u8>) -> Result<Self, Self::Error> {
        const KIND: &str = "MIG profile id list";
        let checked = if ids.is_empty() || ids.len() > MAX_MIG_PROFILES {
            Err(InvalidArgument::new(
                KIND,
                format!(
                    "it must name 1 to {MAX_MIG_PROFILES} profiles, not {}",
                    ids.len()
                ),
            ))
        } else if let Some(id) = ids.iter().find(|id| **id > MAX_MIG_PROFILE_ID) {
            Err(InvalidArgument::new(
                KIND,
                format!("profile id {id} is above {MAX_MIG_PROFILE_ID}"),
            ))
        } else {
            Ok(Self(ids))
        };
        checked.inspect_err(|e| {
            REFUSED.with(|r| *r.borrow_mut() = Some(e.to_string()));
        })
    }
}

impl From<MigProfileIds> for Vec<u8> {
    fn from(v: MigProfileIds) -> Self {
        v.0
    }
}

impl fmt::Display for MigProfileIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.joined())
    }
}

impl fmt::Debug for MigProfileIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MigProfileIds({})", self.joined())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profile_ids_are_bounded() {
        let ok = MigProfileIds::try_from(vec![9, 9, 19]).unwrap();
        assert_eq!(ok.joined(), "9,9,19");
        assert!(MigProfileIds::try_from(vec![]).is_err());
        assert!(MigProfileIds::try_from(vec![19; 9]).is_err());
        assert!(MigProfileIds::try_from(vec![64]).is_err());
        assert!(MigProfileIds::try_from(vec![0; 8]).is_ok());
    }

    #[test]
    fn pci_address_has_one_normal_form() {
        for s in [
            "0000:18:00.0",
            "00000000:18:00.0",
            "0000:18:00.0",
            "00000000:18:00.0".to_uppercase().as_str(),
            "0000:18:00.0".to_uppercase().as_str(),
        ] {
            let a: PciAddress = s.parse().unwrap();
            assert_eq!(a.to_string(), "0000:18:00.0");
            assert_eq!(a.nvml_bus_id(), "00000000:18:00.0");
        }
        let a: PciAddress = "00001580:AB:1F.7".parse().unwrap();
        assert_eq!(a.to_string(), "1580:ab:1f.7");
    }

    #[test]
    fn pci_address_refuses_what_sysfs_cannot_name() {
        for s in [
            "",
            "18:00.0",
            "0000:18:00",
            "0000:18:20.0",
            "0000:18:00.8",
            "000:18:00.0",
            "00010000:18:00.0",
            "0000:18:00.0/..",
            "0000:1g:00.0",
            "+000:18:00.0",
            " 0000:18:00.0",
        ] {
            assert!(s.parse::<PciAddress>().is_err(), "{s:?} must be refused");
        }
    }

    #[test]
    fn gpu_uuid_is_lower_cased_and_checked() {
        let u: GpuUuid = "GPU-ABCDEF01-2345-6789-abcd-ef0123456789".parse().unwrap();
        assert_eq!(u.as_str(), "GPU-abcdef01-2345-6789-abcd-ef0123456789");
        for s in [
            "GPU-",
            "gpu-abcdef01-2345-6789-abcd-ef0123456789",
            "GPU-abcdef01-2345-6789-abcd-ef012345678",
            "MIG-abcdef01-2345-6789-abcd-ef0123456789",
            "GPU-abcdef01-2345-6789-abcd-ef012345678g",
        ] {
            assert!(s.parse::<GpuUuid>().is_err(), "{s:?} must be refused");
        }
    }

    #[test]
    fn domain_names_stay_in_the_safe_set() {
        assert!("win10-gpu_1.test+x".parse::<DomainName>().is_ok());
        for s in [
            "",
            "-c",
            ".hidden",
            "a;b",
            "$(id)",
            "a b",
            "a/b",
            "x\0y",
            "é",
            &"a".repeat(65),
            // Another name of a domain to virsh: its id or its UUID.
            "1",
            "0042",
            "0b3a6f54-9d5e-4c1e-8f0e-1f2e3d4c5b6a",
            "0b3a6f549d5e4c1e8f0e1f2e3d4c5b6a",
        ] {
            assert!(s.parse::<DomainName>().is_err(), "{s:?} must be refused");
        }
        assert!("vm1".parse::<DomainName>().is_ok());
        assert!("deadbeef".parse::<DomainName>().is_ok());
    }

    #[test]
    fn save_files_are_lexically_safe() {
        let f: SaveFile = "/var/lib/libvirt/qemu/save/vm1.save".parse().unwrap();
        assert!(f.is_under(Path::new("/var/lib/libvirt/qemu/save")));
        assert!(!f.is_under(Path::new("/var/lib/libvirt/qemu/sa")));
        for s in [
            "relative", "/a/../b", "/a/./b", "/a//b", "/a/", "/a/$(id)", "/a/b;c", "/a/-rf",
            "/a/\0",
        ] {
            assert!(s.parse::<SaveFile>().is_err(), "{s:?} must be refused");
        }
    }
}
