//! IOMMU groups, as the agent reads them before a bind: which functions must move to
//! `vfio-pci` with a GPU, and which groups cannot be passed through at all.
//!
//! A VM can only take a whole IOMMU group: vfio refuses a group while any of its endpoints is
//! on a host driver. So a GPU's other functions (its audio function, a USB-C controller; vendor
//! `0x10de`) move with it, and a group holding another vendor's endpoint is refused before
//! anything is unbound. PCI bridges (class `0x0604`) are the exception: they often share a
//! group with the devices behind them, vfio tolerates them on their host driver
//! (`pcieport`), and unbinding one would cut the GPU off the bus, so they are never moved and
//! never cause a refusal. Most real groups of a data-centre GPU hold only the GPU and its audio
//! function.
//!
//! Reading is split from judging: [`read_group`] reads sysfs, [`plan_bind`] is pure.

use std::fmt;

use bcd_protocol::PciAddress;

use crate::sys::host::Host;

/// The driver a passed-through function sits on.
pub const VFIO_DRIVER: &str = "vfio-pci";
/// NVIDIA's kernel driver.
pub const NVIDIA_DRIVER: &str = "nvidia";

/// The function's driver now.
pub use crate::sys::pci::driver_of;
/// Reads one function; `None` when sysfs has no folder for it.
pub use crate::sys::pci::function as read_function;
/// One PCI function as sysfs shows it now (the one reader, [`crate::sys::pci`]).
pub use crate::sys::pci::PciFunction as Function;

/// A function's driver as a word: its name, or `no driver`.
pub fn driver_word(driver: Option<&str>) -> &str {
    driver.unwrap_or("no driver")
}

/// An IOMMU group: its number and its functions in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The group's name in `/sys/kernel/iommu_groups` (a number).
    pub id: String,
    /// Every function in it.
    pub functions: Vec<Function>,
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IOMMU group {}", self.id)
    }
}

/// Why a group cannot be read or passed through. `Display` is the operator's sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The function has no `iommu_group` link.
    #[error("{address} is in no IOMMU group: is the IOMMU on (intel_iommu=on or amd_iommu=on on the kernel command line, VT-d or AMD-Vi in the firmware)?")]
    NoGroup {
        /// The function.
        address: PciAddress,
    },
    /// Another vendor's endpoint shares the group.
    #[error("IOMMU group {group} of {gpu} also holds {device} (vendor {vendor}, class {class}), which is not an NVIDIA function: a VM can only take a whole group, so {gpu} cannot be passed through alone; nothing was unbound")]
    Foreign {
        /// The group.
        group: String,
        /// The GPU asked for.
        gpu: PciAddress,
        /// The other device.
        device: PciAddress,
        /// Its vendor id.
        vendor: String,
        /// Its class.
        class: String,
    },
}

/// Reads the IOMMU group of `address` (`<dev>/iommu_group`, then the group's `devices/`).
///
/// # Errors
/// [`GroupError::NoGroup`] when the function has no group link.
pub fn read_group(host: &Host, address: &PciAddress) -> Result<Group, GroupError> {
    let (id, members) = crate::sys::pci::iommu_group(host, address)
        .ok_or(GroupError::NoGroup { address: *address })?;
    let functions = members
        .into_iter()
        .map(|a| {
            // A member whose folder cannot be read is judged as unknown, hence foreign.
            read_function(host, &a).unwrap_or(Function {
                address: a,
                vendor: None,
                class: None,
                driver: None,
                numa_node: None,
            })
        })
        .collect();
    Ok(Group { id, functions })
}

/// The functions a bind of `gpu` moves, in the order they move: the GPU first, then its other
/// NVIDIA functions in address order. The GPU goes first because its driver is the one that
/// may refuse to let go (`nvidia-persistenced`, a process on the GPU); when it does, nothing
/// else has moved yet and there is nothing to undo. Bridges stay where they are.
///
/// # Errors
/// [`GroupError::Foreign`] naming the first endpoint that is not NVIDIA's.
pub fn plan_bind(group: &Group, gpu: &PciAddress) -> Result<Vec<Function>, GroupError> {
    if let Some(other) = group
        .functions
        .iter()
        .find(|f| !f.is_nvidia() && !f.is_bridge())
    {
        return Err(GroupError::Foreign {
            group: group.id.clone(),
            gpu: *gpu,
            device: other.address,
            vendor: other.vendor_word(),
            class: other.class_word(),
        });
    }
    let mut plan: Vec<Function> = group
        .functions
        .iter()
        .filter(|f| f.is_nvidia())
        .cloned()
        .collect();
    plan.sort_by_key(|f| (f.address != *gpu, f.address));
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(addr: &str, vendor: u16, class: u32, driver: Option<&str>) -> Function {
        Function {
            address: addr.parse().unwrap(),
            vendor: Some(vendor),
            class: Some(class),
            driver: driver.map(Into::into),
            numa_node: None,
        }
    }

    #[test]
    fn the_gpu_moves_first_and_bridges_stay() {
        let group = Group {
            id: "61".into(),
            functions: vec![
                f("0000:60:01.0", 0x8086, 0x060400, Some("pcieport")),
                f("0000:61:00.0", 0x10de, 0x030200, Some("nvidia")),
                f("0000:61:00.1", 0x10de, 0x040300, Some("snd_hda_intel")),
            ],
        };
        let gpu = "0000:61:00.0".parse().unwrap();
        let plan: Vec<String> = plan_bind(&group, &gpu)
            .unwrap()
            .iter()
            .map(|f| f.address.to_string())
            .collect();
        assert_eq!(plan, ["0000:61:00.0", "0000:61:00.1"]);
        // Named by a higher function, the GPU still goes first.
        let group = Group {
            id: "7".into(),
            functions: vec![
                f("0000:18:00.0", 0x10de, 0x0c0330, Some("xhci_hcd")),
                f("0000:18:00.1", 0x10de, 0x030000, Some("nvidia")),
            ],
        };
        let plan = plan_bind(&group, &"0000:18:00.1".parse().unwrap()).unwrap();
        assert_eq!(plan[0].address.to_string(), "0000:18:00.1");
    }

    #[test]
    fn a_foreign_endpoint_is_named_with_its_group() {
        let group = Group {
            id: "12".into(),
            functions: vec![
                f("0000:18:00.0", 0x10de, 0x030200, Some("nvidia")),
                f("0000:19:00.0", 0x8086, 0x020000, Some("ixgbe")),
            ],
        };
        let err = plan_bind(&group, &"0000:18:00.0".parse().unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "IOMMU group 12 of 0000:18:00.0 also holds 0000:19:00.0 (vendor 0x8086, class \
             0x020000), which is not an NVIDIA function: a VM can only take a whole group, so \
             0000:18:00.0 cannot be passed through alone; nothing was unbound"
        );
    }

    #[test]
    fn the_passthrough_host_groups_the_gpu_with_its_audio_function() {
        let host = Host::fake(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/hosts/passthrough"
        ));
        let gpu: PciAddress = "0000:61:00.0".parse().unwrap();
        let group = read_group(&host, &gpu).unwrap();
        assert_eq!(group.id, "61");
        let plan = plan_bind(&group, &gpu).unwrap();
        assert_eq!(plan.len(), 2);
        assert!(plan
            .iter()
            .all(|f| f.driver.as_deref() == Some(VFIO_DRIVER)));
        let missing = read_group(&host, &"0000:99:00.0".parse().unwrap()).unwrap_err();
        assert!(missing.to_string().contains("is in no IOMMU group"));
    }
}
