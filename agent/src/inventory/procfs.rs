//! The first layer of the inventory: the GPUs the NVIDIA kernel module lists in
//! `/proc/driver/nvidia/gpus/*/information`, with their NUMA node from sysfs and the module's
//! version from `/proc/driver/nvidia/version`. Reading needs no privilege and no `nvidia-smi`.

use std::path::Path;

use bcd_protocol::PciAddress;

use crate::inventory::arch::guess_architecture;
use crate::sys::host::Host;

/// A GPU as the kernel module describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcGpu {
    /// Position in bus order, as `nvidia-smi` numbers GPUs by default.
    pub index: u32,
    /// `GPU UUID`, as the driver printed it (`GPU-????????-...` for a GPU it could not
    /// initialise); the merge reads it into a UUID.
    pub uuid: Option<String>,
    /// `Model`.
    pub model: Option<String>,
    /// `Video BIOS`.
    pub vbios: Option<String>,
    /// `Bus Location`, or the folder's name.
    pub address: PciAddress,
    /// `Device Minor`.
    pub minor: Option<u32>,
    /// From `/sys/bus/pci/devices/<addr>/numa_node`; `-1` there means none.
    pub numa_node: Option<u32>,
    /// Guessed from the model name.
    pub architecture: Option<&'static str>,
}

/// What procfs and sysfs show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInventory {
    /// The kernel module's version, from `/proc/driver/nvidia/version`.
    pub driver_version: Option<String>,
    /// The GPUs, in bus order.
    pub gpus: Vec<ProcGpu>,
}

/// Reads one `information` file: `Key: value` lines.
pub(crate) fn parse_information(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|line| {
        let (key, value) = line.split_once(':')?;
        Some((key.trim(), value.trim()))
    })
}

/// The version in `/proc/driver/nvidia/version`'s first line (`NVRM version: NVIDIA UNIX
/// x86_64 Kernel Module  570.86.15  ...` or `... Open Kernel Module for x86_64  570.86.15 ...`).
pub(crate) fn parse_module_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|word| {
            let mut parts = word.split('.');
            let first = parts.next().unwrap_or_default();
            !first.is_empty()
                && first.bytes().all(|b| b.is_ascii_digit())
                && word.contains('.')
                && word
                    .split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
}

/// Collects the procfs layer of `host`. A host without the NVIDIA module gives an empty
/// inventory; an entry that cannot be read is skipped, since one bad GPU must not hide the rest.
pub fn collect(host: &Host) -> ProcInventory {
    let driver_version = std::fs::read_to_string(host.path("/proc/driver/nvidia/version"))
        .ok()
        .and_then(|t| parse_module_version(&t));
    let mut gpus: Vec<ProcGpu> = std::fs::read_dir(host.path("/proc/driver/nvidia/gpus"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| read_gpu(host, &entry.path()))
        .collect();
    gpus.sort_by_key(|g| g.address);
    for (index, gpu) in gpus.iter_mut().enumerate() {
        gpu.index = u32::try_from(index).unwrap_or(u32::MAX);
    }
    ProcInventory {
        driver_version,
        gpus,
    }
}

fn read_gpu(host: &Host, dir: &Path) -> Option<ProcGpu> {
    let text = std::fs::read_to_string(dir.join("information")).ok()?;
    let mut gpu = ProcGpu {
        index: 0,
        uuid: None,
        model: None,
        vbios: None,
        address: dir.file_name()?.to_str()?.parse().ok()?,
        minor: None,
        numa_node: None,
        architecture: None,
    };
    for (key, value) in parse_information(&text) {
        let value = crate::smi::value::present(value);
        match key {
            "GPU UUID" => gpu.uuid = value.map(str::to_owned),
            "Model" => gpu.model = value.map(str::to_owned),
            "Video BIOS" => gpu.vbios = value.map(str::to_owned),
            "Device Minor" => gpu.minor = value.and_then(|v| v.parse().ok()),
            "Bus Location" => {
                if let Some(address) = value.and_then(|v| v.parse().ok()) {
                    gpu.address = address;
                }
            }
            _ => {}
        }
    }
    gpu.architecture = gpu.model.as_deref().and_then(guess_architecture);
    gpu.numa_node = std::fs::read_to_string(
        host.path(format!("/sys/bus/pci/devices/{}/numa_node", gpu.address)),
    )
    .ok()
    .and_then(|t| crate::sys::pci::parse_numa_node(&t));
    Some(gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFORMATION: &str = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 251\nGPU UUID: \t GPU-5d2c0a4e-3f1b-4c7e-9a0d-2b6f8e1c4a7d\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n";

    #[test]
    fn information_and_version_parse() {
        let fields: Vec<_> = parse_information(INFORMATION).collect();
        assert!(fields.contains(&("GPU UUID", "GPU-5d2c0a4e-3f1b-4c7e-9a0d-2b6f8e1c4a7d")));
        assert!(fields.contains(&("Bus Location", "0000:18:00.0")));
        assert_eq!(
            parse_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Tue Jan 28 19:45:14 UTC 2025\nGCC version: gcc version 12.2.0\n").as_deref(),
            Some("570.86.15")
        );
        assert_eq!(
            parse_module_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build  (dvs-builder@U16-I3-B03-4-3)\n").as_deref(),
            Some("575.57.08")
        );
    }

    #[test]
    fn collect_reads_a_fake_tree_in_bus_order() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path(), "nvidia-smi");
        for (addr, uuid, numa) in [
            (
                "0000:9a:00.0",
                "GPU-00000000-0000-0000-0000-00000000009a",
                "1",
            ),
            (
                "0000:18:00.0",
                "GPU-00000000-0000-0000-0000-000000000018",
                "-1",
            ),
        ] {
            let gpu_dir = host.path(format!("/proc/driver/nvidia/gpus/{addr}"));
            std::fs::create_dir_all(&gpu_dir).unwrap();
            std::fs::write(
                gpu_dir.join("information"),
                INFORMATION
                    .replace("GPU-5d2c0a4e-3f1b-4c7e-9a0d-2b6f8e1c4a7d", uuid)
                    .replace("0000:18:00.0", addr),
            )
            .unwrap();
            let sys = host.path(format!("/sys/bus/pci/devices/{addr}"));
            std::fs::create_dir_all(&sys).unwrap();
            std::fs::write(sys.join("numa_node"), numa).unwrap();
        }
        let inv = collect(&host);
        assert_eq!(inv.driver_version, None);
        assert_eq!(inv.gpus.len(), 2);
        assert_eq!(inv.gpus[0].address.to_string(), "0000:18:00.0");
        assert_eq!(inv.gpus[0].index, 0);
        assert_eq!(inv.gpus[0].numa_node, None);
        assert_eq!(inv.gpus[1].numa_node, Some(1));
        assert_eq!(inv.gpus[1].architecture, Some("hopper"));
    }
}
