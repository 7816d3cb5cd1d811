//! The libvirt operations: `virsh start`, `restore` and `destroy`, and the one read the helper
//! makes of libvirt's XML, the PCI addresses of a domain's (or save image's) `<hostdev>`s.
//!
//! Every call runs the configured `virsh` through [`crate::child`] (no shell, cleared
//! environment, bounded), with the connection URI first and the domain after `--domain`, so a
//! name can never be read as an option. A save file reaches `virsh` only as a checked copy in a
//! root-only folder (see [`crate::savefile`]).
//!
//! This module must never read more of libvirt's XML than the `<source><address>` of
//! `<hostdev type='pci'>`, never expand an entity or honour a DTD, never decide whether an
//! address is an NVIDIA GPU (its caller's business), and never take a path or a URI from the
//! agent: `virsh`, the URI and the save folder are the helper's own configuration.

use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bcd_protocol::{DomainName, HelperError, PciAddress};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use crate::child::{self, ChildError};
use crate::savefile::{SavePolicy, Staged};

/// Most bytes of domain XML read; a real domain is a few KiB.
pub const MAX_XML_BYTES: usize = 1024 * 1024;
/// Most PCI hostdevs one domain may list; more is refused rather than half-handled.
pub const MAX_HOSTDEVS: usize = 64;
/// Deepest element nesting accepted; libvirt's domain XML stays below ten.
const MAX_XML_DEPTH: usize = 64;

/// Turns a program that would not start into the answer's sentence.
pub type SpawnFailure = Arc<dyn Fn(&str, &std::io::Error) -> String + Send + Sync>;

/// The libvirt side of the helper: which `virsh`, which connection, how long, and the one
/// folder save images may be restored from. All four come from the helper's own flags.
#[derive(Clone)]
pub struct Libvirt {
    /// The `virsh` to run, an absolute path (Debian's `libvirt-clients` installs `/usr/bin/virsh`).
    pub virsh: PathBuf,
    /// The connection URI given to every call with `-c`, e.g. `qemu:///system`.
    pub uri: String,
    /// The bound on each `virsh` run; on expiry its process group is killed.
    pub timeout: Duration,
    /// Where save images come from and where their checked copies go.
    pub saves: SavePolicy,
    /// Turns a refused exec into a sentence (and a restart of the helper when confined).
    pub spawn_failure: SpawnFailure,
}

impl std::fmt::Debug for Libvirt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Libvirt")
            .field("virsh", &self.virsh)
            .field("uri", &self.uri)
            .field("timeout", &self.timeout)
            .field("saves", &self.saves)
            .finish()
    }
}

impl Libvirt {
    /// Every PCI `<hostdev>` address in the domain's XML (`virsh -c URI dumpxml --domain NAME`),
    /// normalised, in document order, each once. NVIDIA-or-not is the caller's business.
    ///
    /// # Errors
    /// [`HelperError::Failed`] when `virsh` is missing or fails (with its last words) or prints
    /// XML this reader refuses; [`HelperError::Timeout`] when it runs past [`Libvirt::timeout`].
    pub async fn domain_hostdevs(
        &self,
        domain: &DomainName,
    ) -> Result<Vec<PciAddress>, HelperError> {
        let out = self
            .virsh(&["dumpxml", "--domain", domain.as_str()])
            .await?;
        pci_hostdevs(&String::from_utf8_lossy(&out))
    }

    /// Every PCI `<hostdev>` address in a save image's XML
    /// (`virsh -c URI save-image-dumpxml FILE`), read from a checked copy
    /// ([`crate::savefile::SavePolicy::stage`]), and the domain the image restores (its XML's
    /// `<name>`, when that is a name bcd accepts).
    ///
    /// # Errors
    /// As [`Libvirt::domain_hostdevs`].
    pub async fn save_image_devices(
        &self,
        image: &Staged,
    ) -> Result<(Vec<PciAddress>, Option<DomainName>), HelperError> {
        let out = self
            .virsh_os(vec!["save-image-dumpxml".into(), image.path().into()], &[])
            .await?;
        let xml = String::from_utf8_lossy(&out);
        Ok((pci_hostdevs(&xml)?, domain_name(&xml)))
    }

    /// Starts a defined, shut-off domain: `virsh -c URI start --domain NAME`.
    ///
    /// # Errors
    /// [`HelperError::Failed`] with `virsh`'s message (an unknown domain reads
    /// `error: failed to get domain 'NAME'`), [`HelperError::Timeout`].
    pub async fn start(
        &self,
        domain: &DomainName,
        hold: &[BorrowedFd<'_>],
    ) -> Result<(), HelperError> {
        self.virsh_holding(&["start", "--domain", domain.as_str()], hold)
            .await
            .map(drop)
    }

    /// Restores a saved domain from a checked copy: `virsh -c URI restore COPY`.
    ///
    /// # Errors
    /// [`HelperError::Failed`], [`HelperError::Timeout`] as for [`Libvirt::start`].
    pub async fn restore(
        &self,
        image: &Staged,
        hold: &[BorrowedFd<'_>],
    ) -> Result<(), HelperError> {
        self.virsh_os(vec!["restore".into(), image.path().into()], hold)
            .await
            .map(drop)
    }

    /// Stops a running domain at once (power off): `virsh -c URI destroy --domain NAME`.
    ///
    /// # Errors
    /// As for [`Libvirt::start`].
    pub async fn destroy(
        &self,
        domain: &DomainName,
        hold: &[BorrowedFd<'_>],
    ) -> Result<(), HelperError> {
        self.virsh_holding(&["destroy", "--domain", domain.as_str()], hold)
            .await
            .map(drop)
    }

    async fn virsh(&self, args: &[&str]) -> Result<Vec<u8>, HelperError> {
        self.virsh_holding(args, &[]).await
    }

    async fn virsh_holding(
        &self,
        args: &[&str],
        hold: &[BorrowedFd<'_>],
    ) -> Result<Vec<u8>, HelperError> {
        self.virsh_os(args.iter().map(OsString::from).collect(), hold)
            .await
    }

    /// Runs `virsh -c URI ARGS...`, holding `hold` (the GPUs' lock files, see
    /// [`crate::child::run_holding`]), and returns its standard output when it exits 0.
    async fn virsh_os(
        &self,
        args: Vec<OsString>,
        hold: &[BorrowedFd<'_>],
    ) -> Result<Vec<u8>, HelperError> {
        let mut all: Vec<OsString> = vec!["-c".into(), self.uri.clone().into()];
        all.extend(args);
        let cmd = child::Command {
            program: self.virsh.clone(),
            args: all,
            timeout: self.timeout,
        };
        match child::run_holding(&cmd, hold).await {
            Ok(out) if out.success() => Ok(out.stdout),
            Ok(out) => Err(HelperError::Failed {
                exit_code: out.exit_code,
                message: out.failure_message(),
            }),
            Err(ChildError::Spawn { program, source }) => Err(HelperError::Failed {
                exit_code: None,
                message: if source.kind() == std::io::ErrorKind::NotFound {
                    format!("virsh not found at {program}: install libvirt-clients")
                } else {
                    (self.spawn_failure)(&program, &source)
                },
            }),
            Err(ChildError::Timeout { after, .. }) => Err(HelperError::Timeout {
                after_s: after.as_secs().max(1),
            }),
        }
    }
}

/// The source address of every `<hostdev type='pci'>` directly under `<domain><devices>`,
/// normalised, in document order, each once.
///
/// Reads only `domain/devices/hostdev[@type='pci']/source/address`: the guest-side
/// `<address type='pci'>` that is a direct child of `<hostdev>`, USB and other hostdevs, and
/// every other element are skipped. A missing `domain` attribute means PCI domain 0, as in
/// libvirt.
///
/// # Errors
/// [`HelperError::Failed`] (no exit code) when the XML is over [`MAX_XML_BYTES`], lists more
/// than [`MAX_HOSTDEVS`] PCI hostdevs, is not well-formed, has a DOCTYPE (libvirt never
/// writes one; entities are never expanded), nests too deep, or has a PCI source address
/// that does not name a PCI function.
pub fn pci_hostdevs(xml: &str) -> Result<Vec<PciAddress>, HelperError> {
    let bad = |why: String| HelperError::Failed {
        exit_code: None,
        message: format!("the domain XML virsh printed cannot be read: {why}"),
    };
    if xml.len() > MAX_XML_BYTES {
        return Err(bad(format!(
            "it is {} bytes, more than the {MAX_XML_BYTES} bcd-helper reads",
            xml.len()
        )));
    }
    let mut reader = Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    // The open elements' names, from the root down.
    let mut path: Vec<Vec<u8>> = Vec::new();
    // Whether the <hostdev> now open under domain/devices is a PCI one.
    let mut pci_hostdev_open = false;
    let mut found: Vec<PciAddress> = Vec::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| bad(format!("{e} near byte {}", reader.buffer_position())))?;
        match event {
            Event::Start(e) => {
                if path.len() >= MAX_XML_DEPTH {
                    return Err(bad(format!("elements nest deeper than {MAX_XML_DEPTH}")));
                }
                let name = e.name().as_ref().to_vec();
                visit(&path, &name, &e, &mut pci_hostdev_open, &mut found).map_err(&bad)?;
                path.push(name);
            }
            Event::Empty(e) => {
                let name = e.name().as_ref().to_vec();
                visit(&path, &name, &e, &mut pci_hostdev_open, &mut found).map_err(&bad)?;
                if path.len() == 2 && name == b"hostdev" {
                    pci_hostdev_open = false;
                }
            }
            Event::End(_) => {
                if path.len() == 3 && path[2] == b"hostdev" {
                    pci_hostdev_open = false;
                }
                path.pop();
            }
            Event::DocType(_) => {
                return Err(bad(
                    "it has a DOCTYPE, which libvirt never writes; entities are not expanded"
                        .to_owned(),
                ))
            }
            Event::Eof => break,
            Event::Text(_)
            | Event::CData(_)
            | Event::Comment(_)
            | Event::Decl(_)
            | Event::PI(_) => {}
        }
        if found.len() > MAX_HOSTDEVS {
            return Err(bad(format!(
                "it lists more than {MAX_HOSTDEVS} PCI hostdevs"
            )));
        }
    }
    if !path.is_empty() {
        return Err(bad("it ends before its elements are closed".to_owned()));
    }
    let mut unique = Vec::with_capacity(found.len());
    for a in found {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    Ok(unique)
}

/// The text of `<domain><name>` in a domain's XML, if it is a name bcd accepts (a
/// [`DomainName`]); the only other thing this module reads of libvirt's XML.
pub fn domain_name(xml: &str) -> Option<DomainName> {
    if xml.len() > MAX_XML_BYTES {
        return None;
    }
    let mut reader = Reader::from_str(xml);
    let mut depth = 0usize;
    let mut in_name = false;
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) => {
                depth += 1;
                in_name = depth == 2 && e.name().as_ref() == b"name";
                if depth == 1 && e.name().as_ref() != b"domain" {
                    return None;
                }
            }
            Event::Text(t) if in_name => {
                let text = t.unescape().ok()?;
                return text.trim().parse().ok();
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                in_name = false;
            }
            Event::DocType(_) | Event::Eof => return None,
            _ => {}
        }
        if depth > MAX_XML_DEPTH {
            return None;
        }
    }
}

/// Looks at one opening element whose ancestors are `path`.
fn visit(
    path: &[Vec<u8>],
    name: &[u8],
    e: &BytesStart<'_>,
    pci_hostdev_open: &mut bool,
    found: &mut Vec<PciAddress>,
) -> Result<(), String> {
    let under = |expected: &[&[u8]]| {
        path.len() == expected.len() && path.iter().zip(expected).all(|(a, b)| a == b)
    };
    if name == b"hostdev" && under(&[b"domain", b"devices"]) {
        *pci_hostdev_open = attribute(e, b"type")?.as_deref() == Some("pci");
    } else if name == b"address"
        && *pci_hostdev_open
        && under(&[b"domain", b"devices", b"hostdev", b"source"])
    {
        found.push(source_address(e)?);
    }
    Ok(())
}

/// The PCI function named by a `<source><address domain= bus= slot= function=/>`.
fn source_address(e: &BytesStart<'_>) -> Result<PciAddress, String> {
    let number = |key: &'static str, required: bool| -> Result<u32, String> {
        let Some(value) = attribute(e, key.as_bytes())? else {
            return if required {
                Err(format!("a PCI hostdev's source address has no {key}"))
            } else {
                Ok(0)
            };
        };
        let parsed = match value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))
        {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => value.parse::<u32>(),
        };
        parsed.map_err(|_| {
            format!(
                "a PCI hostdev's source address has {key}={:?}, not a number",
                value.chars().take(32).collect::<String>()
            )
        })
    };
    let (domain, bus, slot, function) = (
        number("domain", false)?,
        number("bus", true)?,
        number("slot", true)?,
        number("function", true)?,
    );
    if domain > 0xffff || bus > 0xff || slot > 0xff || function > 0xf {
        return Err(format!(
            "a PCI hostdev's source address {domain:#x}:{bus:#x}:{slot:#x}.{function:#x} is out of range"
        ));
    }
    format!("{domain:04x}:{bus:02x}:{slot:02x}.{function:x}")
        .parse()
        .map_err(|e: bcd_protocol::InvalidArgument| format!("a PCI hostdev's source address: {e}"))
}

/// The unescaped value of attribute `key`, if present. Only XML's five predefined entities
/// and character references are understood; anything else is an error.
fn attribute(e: &BytesStart<'_>, key: &[u8]) -> Result<Option<String>, String> {
    for attr in e.attributes() {
        let attr = attr.map_err(|err| format!("a malformed attribute: {err}"))?;
        if attr.key.as_ref() == key {
            let value = attr
                .unescape_value()
                .map_err(|err| format!("an attribute that cannot be read: {err}"))?;
            return Ok(Some(value.into_owned()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
