//! The layout file, in mig-parted's own format, so an operator's existing file works:
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   all-disabled:
//!     - devices: all
//!       mig-enabled: false
//!   two-halves:
//!     - devices: [0, 1]
//!       device-filter: ["0x20B210DE"]
//!       mig-enabled: true
//!       mig-devices:
//!         "3g.40gb": 2
//! ```
//!
//! Each layout is a list of blocks; a block names GPUs by nvidia-smi index (`all` or a list),
//! optionally only those whose PCI device id (device and vendor, as `-q` prints it) is in
//! `device-filter`, and says whether MIG is on and which GPU instances (by `-lgip` profile
//! name, each with its default compute instance) the GPU holds. Parsing is pure: bytes in, a
//! [`LayoutFile`] or an error naming the file and line out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Where `bcd mig` and `bcd node` read layouts unless told otherwise (`--mig-config`).
pub const DEFAULT_MIG_CONFIG: &str = "/etc/bcd/mig-config.yaml";
/// The largest layout file read.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// A layout file that cannot be used. `Display` is the operator's sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read the MIG layout file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// The file is not a mig-parted layout file.
    #[error("the MIG layout file {path}, line {line}: {what}")]
    Malformed {
        path: PathBuf,
        line: usize,
        what: String,
    },
    /// The layout asked for is not in the file.
    #[error("the MIG layout file {path} has no layout {name:?} (it has: {known})")]
    UnknownLayout {
        path: PathBuf,
        name: String,
        known: String,
    },
}

/// Which GPUs a block names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// Every GPU (that passes the filter).
    All,
    /// These nvidia-smi indices, as they are at the time of the plan or apply.
    Indices(Vec<u32>),
}

/// One block of a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The GPUs it names.
    pub devices: Devices,
    /// PCI device ids (`0x20B210DE`: device, then vendor) a GPU must have; empty: any.
    pub device_filter: Vec<u32>,
    /// MIG mode on.
    pub mig_enabled: bool,
    /// GPU instances per profile name.
    pub mig_devices: BTreeMap<String, u32>,
}

/// One named layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Its name.
    pub name: String,
    /// The line its name is on (1-based), for messages.
    pub line: usize,
    /// Its blocks, in file order.
    pub blocks: Vec<Block>,
}

/// A read layout file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutFile {
    /// Where it was read.
    pub path: PathBuf,
    /// Its layouts by name.
    pub layouts: BTreeMap<String, Layout>,
}

impl LayoutFile {
    /// The layout `name`.
    ///
    /// # Errors
    /// [`ConfigError::UnknownLayout`], listing the file's layouts.
    pub fn layout(&self, name: &str) -> Result<&Layout, ConfigError> {
        self.layouts
            .get(name)
            .ok_or_else(|| ConfigError::UnknownLayout {
                path: self.path.clone(),
                name: name.to_owned(),
                known: if self.layouts.is_empty() {
                    "none".to_owned()
                } else {
                    self.layouts.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: String,
    #[serde(rename = "mig-configs")]
    mig_configs: BTreeMap<String, Vec<RawBlock>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBlock {
    devices: RawDevices,
    #[serde(rename = "device-filter", default)]
    device_filter: Option<serde_yaml_ng::Value>,
    #[serde(rename = "mig-enabled")]
    mig_enabled: bool,
    #[serde(rename = "mig-devices", default)]
    mig_devices: BTreeMap<String, u32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawDevices {
    Word(String),
    List(Vec<u32>),
}

/// Reads and parses the file at `path` (at most [`MAX_CONFIG_BYTES`]).
///
/// # Errors
/// [`ConfigError::Read`] or [`ConfigError::Malformed`].
pub fn read(path: &Path) -> Result<LayoutFile, ConfigError> {
    use std::io::Read;
    let unreadable = |reason: String| ConfigError::Read {
        path: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(unreadable(format!(
            "it is larger than {MAX_CONFIG_BYTES} bytes"
        )));
    }
    parse(path, &bytes)
}

/// Parses a layout file's bytes; `path` only names it in errors.
///
/// # Errors
/// [`ConfigError::Malformed`] naming the line: YAML that does not parse, a key mig-parted does
/// not know, a version other than `v1`, `devices` neither `all` nor a list of indices, a
/// device filter that is not a hex id, a count of 0, instances asked with `mig-enabled:
/// false`.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<LayoutFile, ConfigError> {
    let malformed = |line: usize, what: String| ConfigError::Malformed {
        path: path.to_path_buf(),
        line,
        what,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        malformed(line, "it is not UTF-8 text".to_owned())
    })?;
    let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let line = e.location().map_or(1, |l| l.line());
        malformed(line, e.to_string())
    })?;
    if raw.version != "v1" {
        return Err(malformed(
            line_of(text, "version").unwrap_or(1),
            format!(
                "version {:?} is not v1, the one mig-parted format bcd reads",
                raw.version
            ),
        ));
    }
    let mut layouts = BTreeMap::new();
    for (name, blocks) in raw.mig_configs {
        let line = line_of(text, &name).unwrap_or(1);
        let mut out = Vec::with_capacity(blocks.len());
        for (n, b) in blocks.into_iter().enumerate() {
            let at =
                |what: String| malformed(line, format!("layout {name}, block {}: {what}", n + 1));
            let devices = match b.devices {
                RawDevices::Word(w) if w == "all" => Devices::All,
                RawDevices::Word(w) => {
                    return Err(at(format!(
                        "devices is {w:?}; it takes `all` or a list of GPU indices"
                    )))
                }
                RawDevices::List(list) if list.is_empty() => {
                    return Err(at("devices is an empty list".to_owned()))
                }
                RawDevices::List(list) => Devices::Indices(list),
            };
            let as_text = |v: &serde_yaml_ng::Value| -> Result<String, ConfigError> {
                v.as_str().map(str::to_owned).ok_or_else(|| {
                    at(format!(
                        "device-filter {} is not a quoted PCI device id such as \"0x20B210DE\"",
                        serde_yaml_ng::to_string(v).unwrap_or_default().trim()
                    ))
                })
            };
            let filters = match &b.device_filter {
                None => Vec::new(),
                Some(serde_yaml_ng::Value::Sequence(list)) => {
                    list.iter().map(as_text).collect::<Result<Vec<_>, _>>()?
                }
                Some(one) => vec![as_text(one)?],
            };
            let mut device_filter = Vec::with_capacity(filters.len());
            for f in filters {
                let hex = f.strip_prefix("0x").or_else(|| f.strip_prefix("0X"));
                let id = hex
                    .filter(|h| h.len() == 8)
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .ok_or_else(|| {
                        at(format!(
                            "device-filter {f:?} is not a PCI device id such as \"0x20B210DE\""
                        ))
                    })?;
                device_filter.push(id);
            }
            if let Some((profile, _)) = b.mig_devices.iter().find(|(_, n)| **n == 0) {
                return Err(at(format!(
                    "mig-devices asks for 0 of {profile}; leave the profile out instead"
                )));
            }
            if !b.mig_enabled && !b.mig_devices.is_empty() {
                return Err(at(
                    "mig-devices are asked for with mig-enabled: false".to_owned()
                ));
            }
            out.push(Block {
                devices,
                device_filter,
                mig_enabled: b.mig_enabled,
                mig_devices: b.mig_devices,
            });
        }
        layouts.insert(
            name.clone(),
            Layout {
                name,
                line,
                blocks: out,
            },
        );
    }
    Ok(LayoutFile {
        path: path.to_path_buf(),
        layouts,
    })
}

/// The 1-based line on which `key:` first starts a mapping entry (quoted or not).
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            [key.to_owned(), format!("\"{key}\""), format!("'{key}'")]
                .iter()
                .any(|k| {
                    t.strip_prefix(k.as_str())
                        .is_some_and(|r| r.trim_start().starts_with(':'))
                })
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2

  mixed:
    - device-filter: ["0x20B210DE", "0x20B510de"]
      devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
    - devices: [1]
      mig-enabled: false
"#;

    fn parsed(text: &str) -> Result<LayoutFile, ConfigError> {
        parse(Path::new("/etc/bcd/mig-config.yaml"), text.as_bytes())
    }

    #[test]
    fn mig_parted_files_read_with_their_lines() {
        let f = parsed(FILE).unwrap();
        assert_eq!(f.layouts.len(), 3);
        let mixed = f.layout("mixed").unwrap();
        assert_eq!(mixed.line, 13);
        assert_eq!(mixed.blocks[0].device_filter, [0x20B2_10DE, 0x20B5_10DE]);
        assert_eq!(mixed.blocks[0].devices, Devices::Indices(vec![0]));
        assert_eq!(mixed.blocks[0].mig_devices["1g.10gb"], 2);
        assert!(!mixed.blocks[1].mig_enabled);
        assert_eq!(
            f.layout("all-disabled").unwrap().blocks[0].devices,
            Devices::All
        );
        let e = f.layout("nope").unwrap_err().to_string();
        assert!(e.contains("has no layout \"nope\""), "{e}");
        assert!(e.contains("all-3g.40gb, all-disabled, mixed"), "{e}");
    }

    #[test]
    fn malformed_files_name_the_file_and_line() {
        for (text, line, words) in [
            ("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: maybe\n", 5, "mig-enabled"),
            ("version: v2\nmig-configs: {}\n", 1, "is not v1"),
            ("version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: true\n", 3, "devices is \"some\""),
            ("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      device-filter: 0x20B2\n", 3, "device-filter"),
            ("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}\n", 3, "mig-enabled: false"),
            ("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 0}\n", 3, "0 of 1g.10gb"),
            ("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      extra: 1\n", 6, "extra"),
            ("version: v1\nmig-configs: [\n", 3, ""),
        ] {
            let e = parsed(text).unwrap_err();
            let ConfigError::Malformed { line: got, .. } = &e else {
                panic!("{text:?}: {e}");
            };
            let said = e.to_string();
            assert!(said.starts_with("the MIG layout file /etc/bcd/mig-config.yaml, line"), "{said}");
            assert!(said.contains(words), "{text:?}: {said}");
            assert!(got.abs_diff(line) <= 1, "{text:?}: line {got}, wanted {line}: {said}");
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = read(Path::new("/nonexistent/mig.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot read the MIG layout file /nonexistent/mig.yaml:"),
            "{e}"
        );
    }
}
