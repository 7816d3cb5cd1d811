//! `bcd hardware`: the inventory, as lines for an operator or as the JSON document.

use std::process::ExitCode;

use super::output::{code, fail, print, print_json, saying_what_it_waits_for, FAILED};
use crate::cli::{no_such_gpu, Global};
use crate::doctor::checks::{gpu_bus, SmiView};
use crate::doctor::Status;
use crate::inventory::collect::collect;
use crate::inventory::document::{Gpu, Inventory};
use crate::inventory::select::{pick, GpuNames, GpuSelector};

/// `bcd hardware`: exit 0 with the inventory; 3 when `nvidia-smi` failed or timed out (what
/// procfs and sysfs show is printed all the same), and 3 when there is no NVIDIA driver but
/// NVIDIA GPUs on the PCI bus that want one (doctor's `gpu-bus` judge says which and what to
/// do): bcd cannot inventory them. A host without the driver and without such GPUs (none on
/// the bus, or all on `vfio-pci` for VMs) is no failure: its inventory is what it is.
/// `ids` (`-i`) keeps the GPUs they name in what is printed (the inventory's hash stays the
/// whole node's); an id that names none is a usage error.
pub async fn hardware(global: &Global, ids: &[GpuSelector]) -> ExitCode {
    let host = global.host();
    let mut collection = saying_what_it_waits_for(global.json, collect(&host, None)).await;
    let gpus = &mut collection.inventory.gpu.gpus;
    match pick(
        gpus.iter().map(|g| GpuNames {
            index: Some(g.index),
            uuid: &g.uuid,
            bus_id: g.bus_id,
        }),
        ids,
    ) {
        Ok(keep) => {
            let mut i = 0;
            gpus.retain(|_| {
                i += 1;
                keep.contains(&(i - 1))
            });
        }
        Err(e) => no_such_gpu(&e, global.json, "hardware").exit(),
    }
    // What the PCI bus holds, judged as doctor judges it: the line shown for an empty
    // inventory, and the failure when the driver is missing for GPUs that are there.
    let view = SmiView::of(&collection);
    let bus = gpu_bus(&crate::sys::pci::functions(&host), view);
    let mut status = ExitCode::SUCCESS;
    if let Some(e) = &collection.snapshot_error {
        if e.is_no_driver() && bus.status != Status::Ok {
            eprintln!("bcd: {e}; showing what procfs and sysfs show");
            if global.json && collection.inventory.gpu.gpus.is_empty() {
                return fail(global.json, code::NO_DRIVER, &bus.message);
            }
            status = ExitCode::from(FAILED);
        } else if e.is_no_driver() {
            eprintln!("bcd: {e}; showing what procfs and sysfs show");
        } else {
            // The error names nvidia-smi and what it did; the hint says what to do.
            let hint = crate::smi::hint::error_hint(&e.to_string())
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            eprintln!("bcd: {e}{hint}; showing what procfs and sysfs show");
            status = ExitCode::from(FAILED);
        }
    }
    for sentence in &collection.left_out {
        eprintln!("bcd: {sentence}");
    }
    if global.json {
        if !print_json(&collection.inventory, "the inventory") {
            return ExitCode::from(FAILED);
        }
    } else {
        print(&render_inventory(
            &collection.inventory,
            collection.snapshot.is_some(),
            if view == SmiView::Failed {
                // The failure is said above; the judge's advice names doctor's checks.
                "no NVIDIA GPU found in procfs"
            } else {
                &bus.message
            },
        ));
    }
    status
}

/// The inventory as an operator reads it: one header line, then one line per GPU, each with
/// its control characters escaped (names and versions are what `nvidia-smi` printed), as
/// `bcd status` and `bcd doctor` show them. `answered`: whether `nvidia-smi` answered the
/// collection (a driver before R410 answers without a CUDA version). `bus`: what the PCI bus
/// holds, said when the inventory has no GPU (`no NVIDIA GPU on the PCI bus`, or GPUs there
/// with no driver and what to do).
pub(crate) fn render_inventory(inv: &Inventory, answered: bool, bus: &str) -> String {
    let s = &inv.gpu;
    let mut lines = vec![format!(
        "driver {}, CUDA {}, {} GPU(s), inventory {}",
        s.driver_version.as_deref().unwrap_or("unknown"),
        s.cuda_driver_version.as_deref().unwrap_or(if answered {
            crate::health::diag::NO_CUDA_VERSION
        } else {
            "unknown (nvidia-smi did not answer)"
        }),
        s.gpus.len(),
        inv.hash
    )];
    if s.gpus.is_empty() {
        lines.push(bus.to_owned());
    }
    lines.extend(s.gpus.iter().map(render_gpu));
    lines
        .iter()
        .map(|l| format!("{}\n", crate::smi::escape_line(l)))
        .collect()
}

fn render_gpu(g: &Gpu) -> String {
    let mut parts = vec![
        format!("GPU {}", g.index),
        g.name.clone().unwrap_or_else(|| "unknown model".into()),
        g.uuid.to_string(),
    ];
    if let Some(bus) = &g.bus_id {
        parts.push(crate::term::units::bus_id(bus));
    }
    if let Some(arch) = &g.architecture {
        parts.push(arch.clone());
    }
    if let Some(mib) = g.memory_total_mib {
        parts.push(crate::term::units::memory(mib));
    }
    if let Some(cc) = &g.compute_capability {
        parts.push(format!("cc {cc}"));
    }
    if let Some(numa) = g.numa_node {
        parts.push(format!("NUMA {numa}"));
    }
    if let Some(mig) = &g.mig {
        if mig.mode == Some(true) {
            parts.push(format!("MIG on ({} instance(s))", mig.devices.len()));
        }
    }
    if !g.nvlinks.is_empty() {
        let active = g.nvlinks.iter().filter(|l| l.state == "active").count();
        parts.push(format!("{active}/{} NVLinks active", g.nvlinks.len()));
    }
    if g.passed_through {
        parts.push("passed through to a VM".into());
    }
    parts.join(", ")
}
