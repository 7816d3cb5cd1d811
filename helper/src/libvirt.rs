//! PLACEHOLDER, replaced at merge by the real module (written in another branch): `virsh`
//! through the bounded child runner. Only the agreed interface is here; every call answers
//! `Unsupported` so nothing acts on a domain until the real module lands.
#![allow(dead_code)] // the placeholder ignores what the real module uses

use std::path::PathBuf;
use std::time::Duration;

use bcd_protocol::{DomainName, HelperError, PciAddress, SaveFile};

/// How to reach libvirt.
#[derive(Debug, Clone)]
pub struct Libvirt {
    /// The `virsh` to run (absolute).
    pub virsh: PathBuf,
    /// The connection URI.
    pub uri: String,
    /// The bound on one `virsh` call.
    pub timeout: Duration,
    /// The only folder save images are restored from.
    pub save_dir: PathBuf,
}

impl Libvirt {
    /// Every PCI hostdev address of the domain's XML.
    ///
    /// # Errors
    /// Placeholder: always [`HelperError::Unsupported`].
    pub async fn domain_hostdevs(
        &self,
        _domain: &DomainName,
    ) -> Result<Vec<PciAddress>, HelperError> {
        Err(HelperError::Unsupported)
    }

    /// Every PCI hostdev address of a save image's XML.
    ///
    /// # Errors
    /// Placeholder: always [`HelperError::Unsupported`].
    pub async fn save_image_hostdevs(
        &self,
        _file: &SaveFile,
    ) -> Result<Vec<PciAddress>, HelperError> {
        Err(HelperError::Unsupported)
    }

    /// `virsh -c URI start --domain NAME`.
    ///
    /// # Errors
    /// Placeholder: always [`HelperError::Unsupported`].
    pub async fn start(&self, _domain: &DomainName) -> Result<(), HelperError> {
        Err(HelperError::Unsupported)
    }

    /// `virsh -c URI restore FILE`.
    ///
    /// # Errors
    /// Placeholder: always [`HelperError::Unsupported`].
    pub async fn restore(&self, _file: &SaveFile) -> Result<(), HelperError> {
        Err(HelperError::Unsupported)
    }

    /// `virsh -c URI destroy --domain NAME`.
    ///
    /// # Errors
    /// Placeholder: always [`HelperError::Unsupported`].
    pub async fn destroy(&self, _domain: &DomainName) -> Result<(), HelperError> {
        Err(HelperError::Unsupported)
    }
}
