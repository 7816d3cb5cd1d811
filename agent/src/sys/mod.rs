//! The ground floor: the host's facts as the kernel and systemd give them, read by one module
//! each, importing nothing of bcd above them. [`host`] is where the host is (its root, its
//! `nvidia-smi`, its `systemctl`); [`child`] runs a program bounded and kills its process
//! group; [`pci`] reads the PCI bus (functions, IOMMU groups, link widths, what a function
//! is); [`systemd`] asks systemd about units and holds the fabric manager fact; [`kmsg`]
//! reads the kernel log's records.

pub(crate) mod child;
pub mod host;
pub(crate) mod kmsg;
pub(crate) mod pci;
pub(crate) mod systemd;
