//! `bcd cdi render`: the spec a hold would get, printed, nothing written.

use std::process::ExitCode;

use crate::cdi::{self, DeviceCatalog, DeviceId, HoldId, HoldRequest};
use crate::cli::Global;
use crate::inventory::collect::collect;

/// `bcd cdi render HOLD DEVICE... [--kubernetes]`: collects the inventory (to match specs
/// that name devices by index), reads NVIDIA's specs, and prints the hold's spec as it would
/// be written. Problems with NVIDIA's specs and devices they do not name are said on stderr
/// (`bcd: warning: …`, one sentence each, no log line); the spec is printed all the same, as
/// the converger would write it.
pub async fn render(
    global: &Global,
    hold: &HoldId,
    devices: &[DeviceId],
    kubernetes: bool,
) -> ExitCode {
    let host = global.host();
    let collection = collect(&host, None).await;
    let mut catalog = DeviceCatalog::from_inventory(&collection.inventory);
    if let Some(snapshot) = &collection.snapshot {
        catalog.add_mig_numbers(&snapshot.listed);
    }
    for d in devices {
        if catalog.get(d).is_none() {
            eprintln!(
                "bcd: warning: {d} is not in this node's inventory; it can only be matched by UUID"
            );
        }
    }
    let vendor = cdi::read_vendor_specs(&cdi::vendor_dirs(&global.cdi_dir, &host));
    for problem in &vendor.problems {
        eprintln!("bcd: warning: {problem}");
    }
    let rendered = cdi::render(
        HoldRequest {
            hold,
            devices,
            kubernetes,
        },
        &vendor.specs,
        &catalog,
    );
    if !kubernetes && rendered.vendor.is_none() {
        // No NVIDIA spec: the hold's spec grants no device node at all.
        eprintln!(
            "bcd: warning: {}",
            cdi::converge::unnamed_sentence(hold, devices, None)
        );
    } else if !rendered.unnamed.is_empty() {
        eprintln!(
            "bcd: warning: {}",
            cdi::converge::unnamed_sentence(hold, &rendered.unnamed, rendered.vendor.as_deref())
        );
    }
    super::output::print(&String::from_utf8_lossy(&rendered.to_json()));
    ExitCode::SUCCESS
}
