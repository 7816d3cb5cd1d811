//! CDI specs as data: the types of a spec (`cdiVersion`, `kind`, `devices`, `containerEdits`),
//! reading one from JSON or YAML with a size bound, and the CDI version rules (which field
//! needs which `cdiVersion`).
//!
//! Fields bcd does not know (a later CDI's, or a vendor's extension) are carried through
//! unchanged in `extra`, so copying a vendor's edits never drops one; where edits carrying
//! such a field are copied, the version written is never lower than the vendor's, so the
//! field stays valid where it is copied to.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The largest spec bcd reads: 4 MiB. NVIDIA's largest real spec (DGX A100 with every MIG
/// layout) is under 200 KiB; a larger file is a mistake or an attack.
pub(crate) const MAX_SPEC_BYTES: usize = 4 << 20;

/// Unknown keys of an object, kept as they were.
pub(crate) type Extra = BTreeMap<String, serde_json::Value>;

/// A CDI spec file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// `cdiVersion`: kept as the text the file had; see [`CdiVersion`].
    #[serde(rename = "cdiVersion")]
    pub cdi_version: String,
    /// `vendor.com/class`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub devices: Vec<Device>,
    /// The edits made once when any device of the spec is used.
    #[serde(
        rename = "containerEdits",
        default,
        skip_serializing_if = "ContainerEdits::is_empty"
    )]
    pub container_edits: ContainerEdits,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One device of a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Always written: the CDI schema requires it on every device.
    #[serde(rename = "containerEdits", default)]
    pub container_edits: ContainerEdits,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The edits to a container's OCI spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// CDI 0.7.0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
    /// CDI 0.7.0 (its `schemata` and `enableMonitoring`: 1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intel_rdt: Option<serde_json::Map<String, serde_json::Value>>,
    /// CDI 1.1.0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net_devices: Vec<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ContainerEdits {
    /// No edit at all (CDI refuses a device whose edits are empty).
    pub(crate) fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
            && self.additional_gids.is_empty()
            && self.intel_rdt.is_none()
            && self.net_devices.is_empty()
            && self.extra.is_empty()
    }
}

/// A device node to create in the container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    pub path: String,
    /// CDI 0.5.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A mount.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// CDI 0.4.0.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An OCI hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    pub hook_name: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The format of a spec file, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    /// `.json`, or `.yaml`/`.yml`; `None` for any other name (CDI reads only these).
    pub fn of_file_name(name: &str) -> Option<Self> {
        if name.ends_with(".json") {
            Some(Self::Json)
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            Some(Self::Yaml)
        } else {
            None
        }
    }
}

/// Why a spec's bytes were refused. `Display` completes "the spec ...": the caller names the
/// file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("is {size} bytes, over bcd's limit of {MAX_SPEC_BYTES} bytes for a CDI spec")]
    TooLarge { size: usize },
    #[error("is not valid JSON for a CDI spec: {0}")]
    Json(String),
    #[error("is not valid YAML for a CDI spec: {0}")]
    Yaml(String),
    #[error("has cdiVersion {0:?}, which is not a version (major.minor.patch)")]
    Version(String),
}

/// Parses a spec. Pure: no I/O. A YAML alias bomb is refused by the YAML reader's repetition
/// limit (an alias expanded more than 100 times the document's own events), never expanded.
///
/// # Errors
/// [`SpecError`] when the bytes are over [`MAX_SPEC_BYTES`], do not parse, or carry a
/// `cdiVersion` that is not `major.minor.patch`.
pub fn parse_spec(bytes: &[u8], format: Format) -> Result<Spec, SpecError> {
    if bytes.len() > MAX_SPEC_BYTES {
        return Err(SpecError::TooLarge { size: bytes.len() });
    }
    let spec: Spec = match format {
        Format::Json => {
            serde_json::from_slice(bytes).map_err(|e| SpecError::Json(e.to_string()))?
        }
        Format::Yaml => {
            serde_yaml_ng::from_slice(bytes).map_err(|e| SpecError::Yaml(e.to_string()))?
        }
    };
    spec.cdi_version
        .parse::<CdiVersion>()
        .map_err(|_| SpecError::Version(spec.cdi_version.chars().take(40).collect()))?;
    Ok(spec)
}

/// A CDI version, `major.minor.patch` (a leading `v` is accepted, as CDI's own reader does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CdiVersion(pub u32, pub u32, pub u32);

impl CdiVersion {
    /// Mount `type`.
    pub(crate) const V0_4_0: Self = Self(0, 4, 0);
    /// Device node `hostPath`; device names starting with a digit.
    pub(crate) const V0_5_0: Self = Self(0, 5, 0);
    /// Annotations; a `.` in the kind's class.
    pub(crate) const V0_6_0: Self = Self(0, 6, 0);
    /// `additionalGids`; `intelRdt`.
    pub(crate) const V0_7_0: Self = Self(0, 7, 0);
    /// `netDevices`; `intelRdt`'s `schemata` and `enableMonitoring`.
    pub(crate) const V1_1_0: Self = Self(1, 1, 0);
    /// The earliest version CDI still reads.
    pub(crate) const EARLIEST: Self = Self(0, 3, 0);
}

impl FromStr for CdiVersion {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts = s.split('.');
        let mut next = || -> Result<u32, ()> {
            let p = parts.next().ok_or(())?;
            if p.is_empty() || p.len() > 9 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            p.parse().map_err(|_| ())
        };
        let v = Self(next()?, next()?, next()?);
        match parts.next() {
            None => Ok(v),
            Some(_) => Err(()),
        }
    }
}

impl fmt::Display for CdiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The lowest `cdiVersion` the fields `spec` uses require, by CDI's rules (its
/// `MinimumRequiredVersion`); [`CdiVersion::EARLIEST`] when it uses none of them.
pub fn minimum_version(spec: &Spec) -> CdiVersion {
    version_needs(spec)
        .into_iter()
        .map(|(v, _)| v)
        .fold(CdiVersion::EARLIEST, CdiVersion::max)
}

/// Each field `spec` uses that needs a `cdiVersion` above the earliest, with that version:
/// CDI's version table (`mounts[].type` 0.4.0; `deviceNodes[].hostPath` and a device name
/// starting with a digit 0.5.0; annotations and a `.` in the kind's class 0.6.0;
/// `additionalGids` and `intelRdt` 0.7.0; `netDevices` and `intelRdt`'s `schemata` or
/// `enableMonitoring` 1.1.0).
pub(crate) fn version_needs(spec: &Spec) -> Vec<(CdiVersion, &'static str)> {
    let mut needs = Vec::new();
    let mut need = |v: CdiVersion, field: &'static str| {
        if !needs.contains(&(v, field)) {
            needs.push((v, field));
        }
    };
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    for e in edits {
        if e.mounts.iter().any(|m| m.kind.is_some()) {
            need(CdiVersion::V0_4_0, "mounts[].type");
        }
        if e.device_nodes.iter().any(|n| n.host_path.is_some()) {
            need(CdiVersion::V0_5_0, "deviceNodes[].hostPath");
        }
        if !e.additional_gids.is_empty() {
            need(CdiVersion::V0_7_0, "additionalGids");
        }
        if e.intel_rdt.is_some() {
            need(CdiVersion::V0_7_0, "intelRdt");
        }
        let rdt_new = e.intel_rdt.as_ref().is_some_and(|r| {
            r.contains_key("schemata")
                || r.get("enableMonitoring")
                    .is_some_and(|v| v.as_bool() == Some(true))
        });
        if rdt_new {
            need(CdiVersion::V1_1_0, "intelRdt.schemata");
        }
        if !e.net_devices.is_empty() {
            need(CdiVersion::V1_1_0, "netDevices");
        }
    }
    if spec
        .devices
        .iter()
        .any(|d| d.name.as_bytes().first().is_some_and(u8::is_ascii_digit))
    {
        need(CdiVersion::V0_5_0, "a device name starting with a digit");
    }
    if !spec.annotations.is_empty() || spec.devices.iter().any(|d| !d.annotations.is_empty()) {
        need(CdiVersion::V0_6_0, "annotations");
    }
    if spec
        .kind
        .split_once('/')
        .is_some_and(|(_, class)| class.contains('.'))
    {
        need(CdiVersion::V0_6_0, "a '.' in the kind's class");
    }
    needs
}

/// Whether any edits of `spec` (or a device node, mount or hook in them) carry a field bcd
/// does not know: which version such a field needs is then unknown.
pub(crate) fn has_unknown_fields(edits: &ContainerEdits) -> bool {
    !edits.extra.is_empty()
        || edits.device_nodes.iter().any(|n| !n.extra.is_empty())
        || edits.mounts.iter().any(|m| !m.extra.is_empty())
        || edits.hooks.iter().any(|h| !h.extra.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str) -> Spec {
        Spec {
            cdi_version: "0.3.0".into(),
            kind: kind.into(),
            annotations: BTreeMap::new(),
            devices: vec![Device {
                name: "gpu0".into(),
                annotations: BTreeMap::new(),
                container_edits: ContainerEdits {
                    env: vec!["A=1".into()],
                    ..ContainerEdits::default()
                },
                extra: Extra::new(),
            }],
            container_edits: ContainerEdits::default(),
            extra: Extra::new(),
        }
    }

    fn node(path: &str) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            host_path: None,
            kind: None,
            major: None,
            minor: None,
            file_mode: None,
            permissions: None,
            uid: None,
            gid: None,
            extra: Extra::new(),
        }
    }

    #[test]
    fn versions_parse_compare_and_print() {
        let v: CdiVersion = "0.7.0".parse().unwrap();
        assert_eq!(v, CdiVersion::V0_7_0);
        assert_eq!("v1.1.0".parse::<CdiVersion>().unwrap(), CdiVersion::V1_1_0);
        assert!(CdiVersion(0, 10, 0) > CdiVersion::V0_7_0);
        assert_eq!(CdiVersion(0, 10, 0).to_string(), "0.10.0");
        for bad in ["", "0.7", "0.7.0.1", "0.7.x", "-1.0.0", "0..0"] {
            assert!(bad.parse::<CdiVersion>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_field_raises_the_minimum_version_as_cdi_says() {
        assert_eq!(minimum_version(&spec("bcd.dev/gpu")), CdiVersion::EARLIEST);
        let mut s = spec("bcd.dev/gpu");
        s.container_edits.mounts.push(Mount {
            host_path: "/a".into(),
            container_path: "/a".into(),
            options: vec![],
            kind: Some("bind".into()),
            extra: Extra::new(),
        });
        assert_eq!(minimum_version(&s), CdiVersion::V0_4_0);
        let mut n = node("/dev/nvidia0");
        n.host_path = Some("/dev/nvidia0".into());
        s.devices[0].container_edits.device_nodes.push(n);
        assert_eq!(minimum_version(&s), CdiVersion::V0_5_0);
        s.devices[0].annotations.insert("a".into(), "b".into());
        assert_eq!(minimum_version(&s), CdiVersion::V0_6_0);
        s.devices[0].container_edits.additional_gids.push(39);
        assert_eq!(minimum_version(&s), CdiVersion::V0_7_0);
        s.container_edits
            .net_devices
            .push(serde_json::json!({"hostInterfaceName": "eth1", "name": "net1"}));
        assert_eq!(minimum_version(&s), CdiVersion::V1_1_0);

        let mut digit = spec("nvidia.com/gpu");
        digit.devices[0].name = "0".into();
        assert_eq!(minimum_version(&digit), CdiVersion::V0_5_0);
        assert_eq!(minimum_version(&spec("a.com/b.c")), CdiVersion::V0_6_0);
    }

    #[test]
    fn unknown_fields_are_carried_through() {
        let json = br#"{"cdiVersion":"0.7.0","kind":"nvidia.com/gpu","devices":[{"name":"all",
            "containerEdits":{"deviceNodes":[{"path":"/dev/dxg","future":{"x":1}}],"newEdit":[1]}}],
            "topLevel":true}"#;
        let s = parse_spec(json, Format::Json).unwrap();
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(
            back["devices"][0]["containerEdits"]["deviceNodes"][0]["future"]["x"],
            1
        );
        assert_eq!(back["devices"][0]["containerEdits"]["newEdit"][0], 1);
        assert_eq!(back["topLevel"], true);
    }

    #[test]
    fn oversized_and_versionless_specs_are_refused() {
        let big = vec![b' '; MAX_SPEC_BYTES + 1];
        assert!(matches!(
            parse_spec(&big, Format::Json),
            Err(SpecError::TooLarge { .. })
        ));
        let bad = br#"{"cdiVersion":"latest","kind":"nvidia.com/gpu","devices":[]}"#;
        assert!(matches!(
            parse_spec(bad, Format::Json),
            Err(SpecError::Version(_))
        ));
    }

    #[test]
    fn a_yaml_alias_bomb_is_refused_quickly() {
        let mut doc = String::from(
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
        );
        for i in 1..10 {
            let prev = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        doc.push_str("devices: []\n");
        let started = std::time::Instant::now();
        let err = parse_spec(doc.as_bytes(), Format::Yaml).unwrap_err();
        assert!(matches!(err, SpecError::Yaml(_)), "{err}");
        assert!(err.to_string().contains("repetition limit"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
