//! Conformance of `parse_query_xml` with real `nvidia-smi -q -x` captures.
//!
//! The captures live outside the repository, in `../shared/fixtures/real/qx/` next to the
//! checkout, and are listed in that folder's MANIFEST.md. Where the folder is absent the tests
//! say so and pass.

use std::fs;
use std::path::PathBuf;

use bcd::smi::xml::{parse_query_xml, ComputeMode, QueryXml};

/// The folder of real captures, or `None` (a recorded skip, also under CI) when this checkout
/// has none.
fn captures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real/qx");
    if dir.is_dir() {
        Some(dir)
    } else {
        bcd_testkit::skip(
            "the real captures (../shared/fixtures/real/qx) are not beside this checkout",
        );
        None
    }
}

/// Every capture as (file name, raw text), sorted by name.
fn captures() -> Vec<(String, String)> {
    let Some(dir) = captures_dir() else {
        return Vec::new();
    };
    let mut files: Vec<(String, String)> = fs::read_dir(&dir)
        .expect("captures folder is readable")
        .map(|entry| entry.expect("captures folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "xml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = fs::read_to_string(&path).expect("capture is UTF-8 text");
            (name, text)
        })
        .collect();
    files.sort();
    files
}

/// Parses one named capture; `None` when the captures folder is absent.
fn parse_capture(name: &str) -> Option<QueryXml> {
    let dir = captures_dir()?;
    let bytes = fs::read(dir.join(name)).expect("named capture exists");
    Some(parse_query_xml(&bytes).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// The raw text of each `<gpu ...>` element, in document order.
fn gpu_sections(text: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = text
        .match_indices("<gpu")
        .filter(|(i, _)| matches!(text.as_bytes().get(i + 4), Some(b' ' | b'>')))
        .map(|(i, _)| i)
        .collect();
    starts.push(text.len());
    starts.windows(2).map(|w| &text[w[0]..w[1]]).collect()
}

/// The text of the first `<name>` element directly in `section` (no nesting awareness needed
/// for the leaves checked here).
fn leaf<'a>(section: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = section.find(&open)? + open.len();
    let end = start + section[start..].find(&close)?;
    Some(section[start..end].trim())
}

fn is_na(value: &str) -> bool {
    bcd::smi::value::present(value).is_none()
}

#[test]
fn every_capture_parses_with_one_entry_per_gpu_element() {
    let files = captures();
    for (name, text) in &files {
        let doc = parse_query_xml(text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let sections = gpu_sections(text);
        assert_eq!(doc.gpus.len(), sections.len(), "{name}: GPU count");
        for (i, (gpu, section)) in doc.gpus.iter().zip(&sections).enumerate() {
            if let Some(uuid) = leaf(section, "uuid").filter(|v| !is_na(v)) {
                assert_eq!(gpu.uuid.as_deref(), Some(uuid), "{name} gpu {i}: uuid");
            }
            if let Some(product) = leaf(section, "product_name").filter(|v| !is_na(v)) {
                assert_eq!(
                    gpu.product_name.as_deref(),
                    Some(product),
                    "{name} gpu {i}: name"
                );
            }
            if let Some(fb) = leaf(section, "fb_memory_usage") {
                // The GPU's own block comes before any MIG device's in every capture.
                let mig_first = section
                    .find("<mig_device>")
                    .is_some_and(|m| m < section.find("<fb_memory_usage>").unwrap());
                if let (false, Some(total)) = (mig_first, leaf(fb, "total").filter(|v| !is_na(v))) {
                    let mib: u64 = total.split_whitespace().next().unwrap().parse().unwrap();
                    assert_eq!(gpu.memory_total_mib, Some(mib), "{name} gpu {i}: memory");
                }
            }
            assert!(gpu.id.is_some(), "{name} gpu {i}: id attribute");
            assert!(gpu.pci_bus_id.is_some(), "{name} gpu {i}: bus id");
        }
    }
    if !files.is_empty() {
        eprintln!("checked {} captures", files.len());
    }
}

#[test]
fn eight_v100s_of_32_gib() {
    let Some(doc) = parse_capture("datakit-8x-v100s-pcie-32gb-r460.xml") else {
        return;
    };
    assert_eq!(doc.attached_gpus, Some(8));
    assert_eq!(doc.gpus.len(), 8);
    assert_eq!(doc.driver_version.as_deref(), Some("460.73.01"));
    for gpu in &doc.gpus {
        assert_eq!(gpu.product_name.as_deref(), Some("Tesla V100S-PCIE-32GB"));
        let total = gpu.memory_total_mib.unwrap();
        assert!((32_000..=32_768).contains(&total), "{total} MiB");
        assert_eq!(gpu.ecc_mode_current, Some(true));
        assert!(gpu.ecc.volatile.correctable.is_some());
        assert!(gpu.ecc.aggregate.uncorrectable.is_some());
        assert!(gpu
            .pci_bus_id
            .map(|a| a.nvml_bus_id())
            .as_deref()
            .unwrap()
            .starts_with("00000000:00:"));
    }
}

#[test]
fn azure_k80s_keep_hyper_v_domains_and_document_order() {
    let Some(doc) = parse_capture("pai-4x-k80-azure-r430-out-of-order.xml") else {
        return;
    };
    let bus_ids: Vec<_> = doc
        .gpus
        .iter()
        .map(|g| g.pci_bus_id.map(|a| a.nvml_bus_id()))
        .collect();
    assert_eq!(
        bus_ids,
        [
            "00001580:00:00.0",
            "00002DF7:00:00.0",
            "00004968:00:00.0",
            "0000F8D6:00:00.0",
        ]
        .map(|b| Some(b.to_owned()))
    );
    let minors: Vec<_> = doc.gpus.iter().map(|g| g.minor_number).collect();
    assert_eq!(minors, [Some(1), Some(2), Some(3), Some(0)]);
    assert_eq!(doc.cuda_version, None, "`Not Found` is no version");
    assert_eq!(doc.gpus[0].serial.as_deref(), Some("0322416026235"));
}

#[test]
fn a100_in_mig_mode_lists_its_two_mig_devices() {
    let Some(doc) = parse_capture("netdata-a100-sxm4-40gb-mig-r510.xml") else {
        return;
    };
    let gpu = &doc.gpus[0];
    assert_eq!(gpu.mig_mode_current, Some(true));
    assert_eq!(gpu.mig_devices.len(), 2);
    assert_eq!(gpu.mig_devices[0].gpu_instance_id, Some(1));
    assert_eq!(gpu.mig_devices[1].gpu_instance_id, Some(2));
    assert_eq!(gpu.mig_devices[0].memory_total_mib, Some(19968));
    assert_eq!(gpu.mig_devices[0].multiprocessor_count, Some(42));
    // The MIG devices' framebuffer blocks must not overwrite the GPU's own.
    assert!(gpu.memory_total_mib.unwrap() > 40_000);
}

#[test]
fn windows_rtx2080_has_26_graphics_and_compute_processes() {
    let Some(doc) = parse_capture("netdata-rtx2080-win-r516.xml") else {
        return;
    };
    let gpu = &doc.gpus[0];
    assert_eq!(gpu.processes.len(), 26);
    assert!(gpu
        .processes
        .iter()
        .all(|p| p.process_type.as_deref() == Some("C+G") && p.used_memory_mib.is_none()));
    assert_eq!(gpu.compute_process_count(), 26);
    assert!(
        gpu.processes.iter().any(|p| p.name.is_none()),
        "empty names"
    );
    assert_eq!(gpu.persistence_mode, None, "WDDM has no persistence mode");
}

#[test]
fn r575_laptop_reads_instant_power_and_split_sram_counters() {
    let Some(doc) = parse_capture("llamaland-rtx-a5000-laptop-r575.xml") else {
        return;
    };
    let gpu = &doc.gpus[0];
    assert_eq!(gpu.power_draw_w, Some(30.92));
    assert_eq!(gpu.power_limit_w, Some(90.0));
    assert_eq!(gpu.ecc.volatile.correctable, None);
    assert_eq!(gpu.ecc.aggregate.uncorrectable, None);
    assert_eq!(gpu.fabric, None);
    assert_eq!(gpu.row_remap, None);
    assert_eq!(gpu.mig_devices, []);
    assert_eq!(gpu.serial, None);
    assert_eq!(gpu.board_part_number, None);
    assert_eq!(gpu.architecture.as_deref(), Some("Ampere"));
    assert_eq!(gpu.compute_mode, Some(ComputeMode::Default));
}

#[test]
fn a100_80gb_capture_of_one_gpu_out_of_four() {
    let Some(doc) = parse_capture("telegraf-a100-sxm4-80gb-r535.xml") else {
        return;
    };
    assert_eq!(doc.attached_gpus, Some(4));
    assert_eq!(doc.gpus.len(), 1);
    assert_eq!(doc.gpus[0].mig_mode_current, Some(true));
    assert_eq!(doc.gpus[0].mig_devices.len(), 4);
    assert!(doc.gpus[0].power_draw_w.is_some());
}

#[test]
fn r352_grid_k520_widens_the_four_digit_domain() {
    let Some(doc) = parse_capture("raiproject-grid-k520-r352-a.xml") else {
        return;
    };
    assert_eq!(
        doc.gpus[0].pci_bus_id.map(|a| a.nvml_bus_id()).as_deref(),
        Some("00000000:00:03.0")
    );
    assert_eq!(doc.gpus[0].id.as_deref(), Some("0000:00:03.0"));
    assert_eq!(doc.gpus[0].power_draw_w, Some(17.97));
    assert_eq!(doc.gpus[0].power_limit_w, Some(125.0));
    assert_eq!(doc.cuda_version, None);
}

#[test]
fn structured_row_remapper_reads_on_ampere() {
    let Some(doc) = parse_capture("telegraf-a10g-r515.xml") else {
        return;
    };
    let remap = doc.gpus[0].row_remap.as_ref().expect("row remapper");
    assert_eq!(remap.correctable, Some(0));
    assert_eq!(remap.uncorrectable, Some(0));
    assert_eq!(remap.pending, Some(false));
    assert_eq!(remap.failure, Some(false));
}

#[test]
fn v100_retired_pages_capture_sums_ecc_totals_once() {
    let Some(doc) = parse_capture("pai-v100-sxm3-32gb-r410-retired-pages.xml") else {
        return;
    };
    assert_eq!(doc.attached_gpus, Some(16));
    assert_eq!(doc.gpus.len(), 1);
    // single_bit/double_bit totals of the volatile block are 1 and 1.
    assert_eq!(doc.gpus[0].ecc.volatile.correctable, Some(1));
    assert_eq!(doc.gpus[0].ecc.volatile.uncorrectable, Some(1));
}

#[test]
fn trimmed_captures_read_what_they_have() {
    let Some(doc) = parse_capture("telegraf-gtx1070ti-trimmed-v10.xml") else {
        return;
    };
    assert_eq!(doc.driver_version, None);
    assert_eq!(doc.attached_gpus, None);
    let gpu = &doc.gpus[0];
    assert_eq!(gpu.memory_total_mib, Some(4096));
    assert_eq!(gpu.temperature_c, Some(39));
    assert_eq!(gpu.power_draw_w, None);
    assert_eq!(
        gpu.pci_bus_id.map(|a| a.nvml_bus_id()).as_deref(),
        Some("00000000:01:00.0")
    );
}

/// The driver's own health readings of every real capture: `gpu_recovery_action` (all say
/// `None`), `gpu_reset_status`, the fabric block (all `N/A`) and the slowdown reasons read as
/// each `<gpu>` element writes them.
#[test]
fn driver_health_readings_match_every_capture() {
    let truth = |v: Option<&str>| -> Option<bool> {
        let v = v?;
        if is_na(v) {
            return None;
        }
        Some(matches!(v, "Yes" | "True" | "Active"))
    };
    let mut with_reset_status = 0;
    let mut with_clock_reasons = 0;
    for (name, text) in captures() {
        let doc = parse_query_xml(text.as_bytes()).unwrap();
        for (gpu, section) in doc.gpus.iter().zip(gpu_sections(&text)) {
            let d = &gpu.driver_health;
            assert_eq!(d.recovery_action, None, "{name}");
            assert_eq!(
                d.reset_required,
                truth(leaf(section, "reset_required")),
                "{name}"
            );
            assert_eq!(
                d.drain_and_reset_recommended,
                truth(leaf(section, "drain_and_reset_recommended")),
                "{name}"
            );
            with_reset_status += usize::from(d.reset_required.is_some());
            for v in [
                &d.fabric_state,
                &d.fabric_status,
                &d.fabric_summary,
                &d.fabric_bandwidth,
            ] {
                assert_eq!(*v, None, "{name}: every capture's fabric is N/A");
            }
            let reason = |short: &str| {
                leaf(section, &format!("clocks_event_reason_{short}"))
                    .or_else(|| leaf(section, &format!("clocks_throttle_reason_{short}")))
            };
            let c = d.clock_events;
            assert_eq!(c.hw_slowdown, truth(reason("hw_slowdown")), "{name}");
            assert_eq!(
                c.hw_thermal_slowdown,
                truth(reason("hw_thermal_slowdown")),
                "{name}"
            );
            assert_eq!(
                c.sw_thermal_slowdown,
                truth(reason("sw_thermal_slowdown")),
                "{name}"
            );
            assert_eq!(
                c.hw_power_brake_slowdown,
                truth(reason("hw_power_brake_slowdown")),
                "{name}"
            );
            assert!(c.active().is_empty(), "{name}: no capture is slowed down");
            with_clock_reasons += usize::from(c.hw_slowdown.is_some());
        }
    }
    if captures_dir().is_some() {
        assert!(with_reset_status >= 3, "{with_reset_status}");
        assert!(with_clock_reasons >= 30, "{with_clock_reasons}");
    }
}
