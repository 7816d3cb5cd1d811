//! The PCI bus as sysfs shows it (`<root>/sys/bus/pci/devices`): one reader of a function's
//! vendor, class, driver and NUMA node, its IOMMU group's members and its PCIe link width, and
//! the one rule of what a function is (an NVIDIA GPU, an NVSwitch, a bridge). Vendor and class
//! are numbers, parsed once; what cannot be read is `None`, never a guess.

use bcd_protocol::PciAddress;

use super::host::Host;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;
/// The class (base and sub-class) of a VGA display controller.
pub const CLASS_VGA: u32 = 0x0300;
/// The class of a 3D controller (a data-centre GPU).
pub const CLASS_3D: u32 = 0x0302;
/// The class of "bridge, other": an NVIDIA function of it is an NVSwitch.
pub const CLASS_BRIDGE_OTHER: u32 = 0x0680;
/// The class of a PCI-to-PCI bridge.
pub const CLASS_PCI_BRIDGE: u32 = 0x0604;

/// One PCI function as sysfs shows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address.
    pub address: PciAddress,
    /// `vendor` (`0x10de`); `None` when unreadable.
    pub vendor: Option<u16>,
    /// `class`, all three bytes (`0x030200`); `None` when unreadable.
    pub class: Option<u32>,
    /// The bound driver's name, `None` for none.
    pub driver: Option<String>,
    /// `numa_node`; `None` when unreadable or `-1` (no NUMA).
    pub numa_node: Option<u32>,
}

impl PciFunction {
    /// Its class without the programming interface (`0x0302` of `0x030200`).
    fn base_class(&self) -> Option<u32> {
        self.class.map(|c| c >> 8)
    }

    /// Whether it is NVIDIA's.
    pub fn is_nvidia(&self) -> bool {
        self.vendor == Some(NVIDIA_VENDOR)
    }

    /// An NVIDIA display function (VGA `0x0300xx` or 3D controller `0x0302xx`): a GPU, not
    /// one of its other functions.
    pub fn is_nvidia_gpu(&self) -> bool {
        self.is_nvidia() && matches!(self.base_class(), Some(CLASS_VGA | CLASS_3D))
    }

    /// An NVIDIA function of class `0x0680xx` (bridge, other): an NVSwitch of an HGX board.
    pub fn is_nvswitch(&self) -> bool {
        self.is_nvidia() && self.base_class() == Some(CLASS_BRIDGE_OTHER)
    }

    /// Whether it is a PCI-to-PCI bridge (`0x0604xx`).
    pub fn is_bridge(&self) -> bool {
        self.base_class() == Some(CLASS_PCI_BRIDGE)
    }

    /// The vendor as sysfs writes it (`0x10de`), or `unreadable`.
    pub fn vendor_word(&self) -> String {
        self.vendor
            .map_or_else(|| "unreadable".to_owned(), |v| format!("{v:#06x}"))
    }

    /// The class as sysfs writes it (`0x030200`), or `unreadable`.
    pub fn class_word(&self) -> String {
        self.class
            .map_or_else(|| "unreadable".to_owned(), |c| format!("{c:#08x}"))
    }
}

/// A number as sysfs writes it: `0x` and hex digits.
fn hex(text: &str) -> Option<u32> {
    u32::from_str_radix(text.trim().strip_prefix("0x")?, 16).ok()
}

/// `numa_node`'s text: a node number, or `None` for `-1` (no NUMA) and anything else.
pub fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// The function at `address`; `None` when sysfs has no folder for it.
pub fn function(host: &Host, address: &PciAddress) -> Option<PciFunction> {
    let dir = host.path(format!("/sys/bus/pci/devices/{address}"));
    if !dir.is_dir() {
        return None;
    }
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    Some(PciFunction {
        address: *address,
        vendor: read("vendor")
            .as_deref()
            .and_then(hex)
            .and_then(|v| u16::try_from(v).ok()),
        class: read("class").as_deref().and_then(hex),
        driver: driver_of(host, address),
        numa_node: read("numa_node").as_deref().and_then(parse_numa_node),
    })
}

/// Every function whose vendor and class can be read, in address order.
pub fn functions(host: &Host) -> Vec<PciFunction> {
    let mut out: Vec<PciFunction> = std::fs::read_dir(host.path("/sys/bus/pci/devices"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<PciAddress>().ok())
        .filter_map(|a| function(host, &a))
        .filter(|f| f.vendor.is_some() && f.class.is_some())
        .collect();
    out.sort_by_key(|f| f.address);
    out
}

/// The NVSwitches on `host`'s bus.
pub fn nvswitch_count(host: &Host) -> usize {
    functions(host).iter().filter(|f| f.is_nvswitch()).count()
}

/// The function's driver now: the `driver` link's last component, `None` without one.
pub fn driver_of(host: &Host, address: &PciAddress) -> Option<String> {
    let link = host.path(format!("/sys/bus/pci/devices/{address}/driver"));
    let target = std::fs::read_link(link).ok()?;
    target.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// The IOMMU group of `address`: its name (a number) and its members' addresses, in address
/// order; `None` when the function has no group link or the group cannot be listed.
pub fn iommu_group(host: &Host, address: &PciAddress) -> Option<(String, Vec<PciAddress>)> {
    let link = host.path(format!("/sys/bus/pci/devices/{address}/iommu_group"));
    let target = std::fs::read_link(&link).ok()?;
    let id = target.file_name()?.to_string_lossy().into_owned();
    let mut members: Vec<PciAddress> = std::fs::read_dir(link.join("devices"))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    members.sort();
    Some((id, members))
}

/// A PCIe link's negotiated and maximum width, from sysfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkWidth {
    /// `current_link_width`.
    pub current: u32,
    /// `max_link_width`.
    pub max: u32,
}

impl LinkWidth {
    /// Whether the link trained below its maximum width.
    pub fn narrowed(self) -> bool {
        self.current < self.max
    }
}

/// The function's `current_link_width` and `max_link_width`; `None` without both (WSL,
/// passthrough without sysfs).
pub fn link_width(host: &Host, address: &PciAddress) -> Option<LinkWidth> {
    let dir = host.path(format!("/sys/bus/pci/devices/{}", address.sysfs_name()));
    let read = |name: &str| -> Option<u32> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(LinkWidth {
        current: read("current_link_width")?,
        max: read("max_link_width")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(vendor: Option<u16>, class: Option<u32>) -> PciFunction {
        PciFunction {
            address: "0000:18:00.0".parse().unwrap(),
            vendor,
            class,
            driver: None,
            numa_node: None,
        }
    }

    #[test]
    fn what_a_function_is_follows_its_vendor_and_class_numbers() {
        assert!(at(Some(NVIDIA_VENDOR), Some(0x030200)).is_nvidia_gpu());
        assert!(at(Some(NVIDIA_VENDOR), Some(0x030000)).is_nvidia_gpu());
        assert!(!at(Some(NVIDIA_VENDOR), Some(0x040300)).is_nvidia_gpu());
        assert!(at(Some(NVIDIA_VENDOR), Some(0x068000)).is_nvswitch());
        assert!(!at(Some(0x8086), Some(0x068000)).is_nvswitch());
        assert!(at(Some(0x8086), Some(0x060400)).is_bridge());
        assert!(!at(None, None).is_nvidia());
        assert_eq!(
            at(Some(NVIDIA_VENDOR), Some(0x030200)).vendor_word(),
            "0x10de"
        );
        assert_eq!(
            at(Some(NVIDIA_VENDOR), Some(0x030200)).class_word(),
            "0x030200"
        );
        assert_eq!(at(None, None).class_word(), "unreadable");
    }

    #[test]
    fn sysfs_numbers_are_read_as_written() {
        assert_eq!(hex("0x10de\n"), Some(0x10de));
        assert_eq!(hex("0X10de"), None);
        assert_eq!(hex("10de"), None);
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node("1\n"), Some(1));
    }

    #[test]
    fn a_function_of_the_demo_host_reads_whole() {
        let host = Host::fake(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/hgx-h100"),
        );
        let all = functions(&host);
        assert!(
            all.iter().filter(|f| f.is_nvidia_gpu()).count() >= 8,
            "{all:?}"
        );
        let gpu = all.iter().find(|f| f.is_nvidia_gpu()).unwrap();
        assert_eq!(gpu.driver.as_deref(), Some("nvidia"));
    }
}
