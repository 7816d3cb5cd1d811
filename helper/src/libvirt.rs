//! The libvirt operations: `virsh start`, `restore` and `destroy`, and the one read the helper
//! makes of libvirt's XML, the PCI addresses of a domain's (or save image's) `<hostdev>`s.
//!
//! Every call runs the configured `virsh` through [`crate::child`] (no shell, cleared
//! environment, bounded), with the connection URI first and the domain after `--domain`, so a
//! name can never be read as an option. A save file reaches `virsh` only as a checked copy in a
//! root-only folder (see [`crate::savefile`]).
//!
//! The XML is read by [`domain_xml`], a file of its own that needs only `bcd-protocol` and
//! `quick-xml`, so a fuzz target (`helper/fuzz`) drives the same code.
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

use domain_xml::{domain_name, pci_hostdevs};

use crate::child::{self, ChildError};
use crate::savefile::{SavePolicy, Staged};

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

pub mod domain_xml;

#[cfg(test)]
mod tests;
