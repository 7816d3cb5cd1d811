//! The parser for `nvidia-smi -q -x`, the one query whose answer bcd requires.
//!
//! [`parse_query_xml`] turns the XML document into [`QueryXml`]: the driver's versions and,
//! for each `<gpu>` element in document order, the identity, memory, ECC, row remapping, MIG,
//! power, clock, fabric and process facts the inventory and the samples need. Every value
//! `nvidia-smi` reports as "no value" (see [`super::value`]) is `None`, never a placeholder.
//!
//! The document is untrusted input. It is read as a stream of events, without building a tree:
//! the declared DTD is never loaded, no entity other than XML's five predefined ones and
//! numeric character references is expanded, nesting is bounded, and no input makes the parser
//! panic. Elements it does not know are skipped wherever they appear, so a newer driver's
//! additions cost nothing.
//!
//! By concern: `table` holds the one table of element path to field (a field is
//! declared there and nowhere else), `draft` what a record is read into and what is resolved
//! when it ends, `document` the walker that keeps the records open and finishes them, `read`
//! the readers of one element's text, `gpu` the types given back.

mod document;
mod draft;
mod gpu;
mod read;
mod table;

use quick_xml::events::Event;
use quick_xml::Reader;

use document::Document;
pub(crate) use gpu::{
    ClockEvents, Counts, DriverHealth, EccCounts, Fabric, RowRemap, XmlGpu, XmlMigDevice,
    XmlProcess,
};
pub use gpu::{ComputeMode, QueryXml};

/// Deepest element nesting accepted; real documents nest at most seven levels.
pub(crate) const MAX_DEPTH: usize = 128;

/// Longest element name quoted back in an error message.
pub(crate) const MAX_QUOTED_NAME: usize = 64;

/// Why a `nvidia-smi -q -x` document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    /// The bytes are not XML, or break its rules (mismatched tags, bad attributes, text that
    /// is not UTF-8, an entity reference other than XML's predefined ones).
    #[error("nvidia-smi -q -x output is not well-formed XML at byte {position}: {reason}")]
    Malformed { position: u64, reason: String },
    /// The document holds no element at all.
    #[error("nvidia-smi -q -x output has no <nvidia_smi_log> root")]
    NoRoot,
    /// The document's first element is not `nvidia_smi_log`.
    #[error(
        "nvidia-smi -q -x output has no <nvidia_smi_log> root: its first element is <{found}>"
    )]
    WrongRoot { found: String },
    /// The document stops before its root element is closed.
    #[error("nvidia-smi -q -x output ends before </nvidia_smi_log>: it was cut short")]
    Truncated,
    /// Elements nest deeper than any `nvidia-smi` document does.
    #[error(
        "nvidia-smi -q -x output nests elements more than {MAX_DEPTH} deep at byte {position}"
    )]
    TooDeep { position: u64 },
}

/// Parses the output of `nvidia-smi -q -x`.
///
/// Pure: no I/O, no logging. Never panics, whatever the bytes; time and memory grow linearly
/// with the input. The DTD is not loaded and only XML's predefined entities are expanded.
///
/// # Errors
///
/// [`XmlError`] when the bytes are not well-formed XML up to the end of the
/// `<nvidia_smi_log>` root, when that root is missing, or when the document is cut short.
/// A root with no `<gpu>` element is not an error: it reads as an empty list. Anything after
/// the root's end tag is not read.
pub fn parse_query_xml(bytes: &[u8]) -> Result<QueryXml, XmlError> {
    let mut reader = Reader::from_reader(bytes);
    let config = reader.config_mut();
    config.trim_text(true);
    config.check_end_names = true;
    config.expand_empty_elements = false;

    let mut doc = Document::default();
    loop {
        let event = reader.read_event().map_err(|e| XmlError::Malformed {
            position: reader.error_position(),
            reason: e.to_string(),
        })?;
        match event {
            Event::Start(start) => {
                doc.open(&start, reader.buffer_position())?;
            }
            Event::Empty(start) => {
                doc.open(&start, reader.buffer_position())?;
                doc.close();
                if doc.at_end() {
                    break;
                }
            }
            Event::End(_) => {
                doc.close();
                if doc.at_end() {
                    break;
                }
            }
            Event::Text(text) => {
                if let Some(slot) = doc.text_slot() {
                    let text = text.unescape().map_err(|e| XmlError::Malformed {
                        position: reader.buffer_position(),
                        reason: e.to_string(),
                    })?;
                    doc.set(slot, &text);
                }
            }
            Event::CData(data) => {
                if let Some(slot) = doc.text_slot() {
                    let text = data.decode().map_err(|e| XmlError::Malformed {
                        position: reader.buffer_position(),
                        reason: e.to_string(),
                    })?;
                    doc.set(slot, &text);
                }
            }
            Event::Eof => {
                return Err(if doc.root_seen {
                    XmlError::Truncated
                } else {
                    XmlError::NoRoot
                });
            }
            // The DTD (external or internal) is never read, so no entity it declares exists.
            Event::Decl(_) | Event::PI(_) | Event::DocType(_) | Event::Comment(_) => {}
        }
    }
    Ok(doc.finish())
}

#[cfg(test)]
mod tests {
    use super::draft::EccRaw;
    use super::read::{compute_mode, flag};
    use super::*;

    /// Reads one of the hand-written documents of `testdata/smi/qx/`.
    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../../../testdata/smi/qx/", $name)).as_slice()
        };
    }

    /// A GPU's bus id in NVML's form, as the capture prints it.
    fn bus(gpu: &XmlGpu) -> Option<String> {
        gpu.pci_bus_id.map(|a| a.nvml_bus_id())
    }

    fn parse(bytes: &[u8]) -> QueryXml {
        parse_query_xml(bytes).expect("fixture parses")
    }

    #[test]
    fn h100_r570_reads_new_names_instant_power_split_ecc_and_fabric() {
        let doc = parse(fixture!("h100-r570-fabric.xml"));
        assert_eq!(doc.driver_version.as_deref(), Some("570.124.06-kmd"));
        assert_eq!(doc.cuda_version.as_deref(), Some("12.8.1"));
        assert_eq!(doc.attached_gpus, Some(1));
        let gpu = &doc.gpus[0];
        assert_eq!(gpu.id.as_deref(), Some("00000000:18:00.0"));
        assert_eq!(bus(gpu).as_deref(), Some("00000000:18:00.0"));
        assert_eq!(gpu.architecture.as_deref(), Some("Hopper"));
        assert_eq!(gpu.serial.as_deref(), Some("1650123456789"));
        assert_eq!(gpu.minor_number, Some(3));
        assert_eq!(gpu.board_part_number.as_deref(), Some("692-2G520-0200-000"));
        assert_eq!(gpu.memory_total_mib, Some(81559));
        assert_eq!(gpu.memory_used_mib, Some(4));
        assert_eq!(gpu.memory_reserved_mib, Some(551));
        assert_eq!(gpu.persistence_mode, Some(true));
        assert_eq!(gpu.compute_mode, Some(ComputeMode::ExclusiveProcess));
        assert_eq!(gpu.ecc_mode_current, Some(true));
        assert_eq!(gpu.ecc_mode_pending, Some(true));
        // Instant draw wins over the average; the module and memory blocks are not the GPU's.
        assert_eq!(gpu.power_draw_w, Some(121.53));
        assert_eq!(gpu.power_limit_w, Some(700.0));
        assert_eq!(gpu.utilization_gpu_pct, Some(87));
        assert_eq!(gpu.utilization_memory_pct, Some(41));
        assert_eq!(gpu.temperature_c, Some(35));
        assert_eq!(gpu.clocks_sm_mhz, Some(1980));
        assert_eq!(gpu.clocks_mem_mhz, Some(2619));
        assert_eq!(gpu.pstate.as_deref(), Some("P0"));
        assert_eq!(gpu.mig_mode_current, Some(false));
        assert_eq!(gpu.mig_devices, []);
        assert_eq!(
            gpu.ecc.volatile,
            Counts {
                correctable: Some(12),
                uncorrectable: Some(5),
            }
        );
        // Parity 3 + SEC-DED 5 + DRAM 1: the sram_uncorrectable total (8) and the per-source
        // breakdown (6 + 2) count the same errors and are not added again.
        assert_eq!(
            gpu.ecc.aggregate,
            Counts {
                correctable: Some(120),
                uncorrectable: Some(9),
            }
        );
        assert_eq!(
            gpu.row_remap,
            Some(RowRemap {
                correctable: Some(2),
                uncorrectable: Some(1),
                pending: Some(true),
                failure: Some(false),
            })
        );
        assert_eq!(
            gpu.fabric,
            Some(Fabric {
                cluster_uuid: "a1b2c3d4-0000-4000-8000-00000000beef".into(),
                clique_id: Some(32766),
            })
        );
        assert_eq!(gpu.processes.len(), 3);
        assert_eq!(gpu.compute_process_count(), 2, "C and M+C, not G");
        assert_eq!(
            gpu.processes[0],
            XmlProcess {
                pid: Some(4242),
                process_type: Some("C".into()),
                name: Some("python3".into()),
                used_memory_mib: Some(40960),
                gpu_instance_id: None,
                compute_instance_id: None,
            }
        );
    }

    #[test]
    fn r616_deprecations_read_as_absent() {
        let doc = parse(fixture!("r616-deprecated.xml"));
        assert_eq!(doc.driver_version.as_deref(), Some("616.56"));
        assert_eq!(doc.cuda_version.as_deref(), Some("13.4"));
        let gpu = &doc.gpus[0];
        assert_eq!(gpu.serial, None, "a serial of 0 is no serial");
        assert_eq!(gpu.persistence_mode, None);
        assert_eq!(gpu.minor_number, None);
        assert_eq!(gpu.board_part_number, None);
        assert_eq!(gpu.pstate, None);
        assert_eq!(gpu.memory_total_mib, Some(32607));
        assert_eq!(gpu.memory_reserved_mib, None);
        assert_eq!(gpu.utilization_memory_pct, None);
        assert_eq!(gpu.ecc_mode_current, None);
        assert_eq!(gpu.ecc, EccCounts::default());
        assert_eq!(gpu.row_remap, None);
        assert_eq!(gpu.power_draw_w, None);
        assert_eq!(
            gpu.power_limit_w,
            Some(575.0),
            "enforced limit is the fallback"
        );
        assert_eq!(gpu.clocks_sm_mhz, None);
        assert_eq!(gpu.clocks_mem_mhz, Some(14001));
        assert_eq!(gpu.mig_mode_current, None);
        assert_eq!(gpu.fabric, None);
        assert_eq!(gpu.compute_process_count(), 0, "Xwayland is graphics");
    }

    #[test]
    fn a100_in_mig_mode_keeps_its_own_memory_apart_from_the_mig_devices() {
        let doc = parse(fixture!("a100-mig.xml"));
        let gpu = &doc.gpus[0];
        assert_eq!(gpu.mig_mode_current, Some(true));
        assert_eq!(gpu.mig_mode_pending, Some(false));
        assert_eq!(gpu.memory_total_mib, Some(40960));
        assert_eq!(
            gpu.mig_devices,
            [
                XmlMigDevice {
                    index: Some(0),
                    gpu_instance_id: Some(1),
                    compute_instance_id: Some(0),
                    multiprocessor_count: Some(42),
                    memory_total_mib: Some(19968),
                    memory_used_mib: Some(19),
                },
                XmlMigDevice {
                    index: Some(1),
                    gpu_instance_id: Some(2),
                    compute_instance_id: Some(0),
                    multiprocessor_count: None,
                    memory_total_mib: Some(9856),
                    memory_used_mib: Some(7),
                },
            ]
        );
        // A MIG device's own ECC count is not the GPU's.
        assert_eq!(gpu.ecc.volatile.uncorrectable, Some(0));
        assert_eq!(gpu.ecc.aggregate.uncorrectable, Some(2));
        assert_eq!(gpu.ecc.aggregate.correctable, Some(7));
        assert_eq!(gpu.power_draw_w, Some(55.12));
        assert_eq!(
            gpu.power_limit_w,
            Some(350.0),
            "enforced before the plain limit"
        );
        assert_eq!(gpu.fabric, None, "a zero cluster UUID is no fabric");
        assert_eq!(gpu.processes[0].gpu_instance_id, Some(1));
        assert_eq!(gpu.processes[0].compute_instance_id, Some(0));
    }

    #[test]
    fn crlf_without_declaration_and_odd_shapes() {
        let doc = parse(fixture!("crlf-no-declaration.xml"));
        assert_eq!(doc.driver_version.as_deref(), Some("535.54.03"));
        assert_eq!(doc.attached_gpus, Some(2));
        assert_eq!(
            doc.gpus.len(),
            2,
            "a <gpu> inside an unknown element is not a GPU"
        );
        let first = &doc.gpus[0];
        assert_eq!(first.product_name.as_deref(), Some("Graphics Device"));
        assert_eq!(first.serial, None, "all zeros is no serial");
        assert_eq!(bus(first).as_deref(), Some("00000000:3B:00.0"));
        assert_eq!(first.id.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(
            first.memory_total_mib,
            Some(24576),
            "unknown wrappers lend no meaning"
        );
        assert_eq!(first.compute_mode, Some(ComputeMode::ExclusiveProcess));
        assert_eq!(first.processes, []);
        assert_eq!(first.mig_devices, []);
        let second = &doc.gpus[1];
        assert_eq!(second.product_name.as_deref(), Some("Tesla & Co A"));
        assert_eq!(second.compute_mode, Some(ComputeMode::Prohibited));
        assert_eq!(second.processes, []);
    }

    #[test]
    fn declared_entities_are_never_expanded() {
        match parse_query_xml(fixture!("hostile-entity.xml")) {
            Err(XmlError::Malformed { reason, .. }) => {
                assert!(reason.contains("xxe"), "{reason}");
            }
            Ok(doc) => {
                let gpu = &doc.gpus[0];
                for text in [&gpu.product_name, &gpu.uuid].into_iter().flatten() {
                    assert!(!text.contains("root:"), "file content leaked: {text}");
                    assert!(!text.contains("lollol"), "entity expanded: {text}");
                }
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn an_unknown_entity_in_a_skipped_element_costs_nothing() {
        let doc = parse(
            b"<nvidia_smi_log><gpu id=\"0000:01:00.0\"><note>&nope;</note>\
              <uuid>GPU-1</uuid></gpu></nvidia_smi_log>",
        );
        assert_eq!(doc.gpus[0].uuid.as_deref(), Some("GPU-1"));
    }

    #[test]
    fn a_root_without_gpus_is_an_empty_list() {
        let doc = parse(b"<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n</nvidia_smi_log>\n");
        assert_eq!(doc, QueryXml::default());
        assert_eq!(parse(b"<nvidia_smi_log/>"), QueryXml::default());
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(parse_query_xml(b""), Err(XmlError::NoRoot));
        assert_eq!(
            parse_query_xml(b"<?xml version=\"1.0\" ?>\n<!-- nothing -->"),
            Err(XmlError::NoRoot)
        );
        assert_eq!(
            parse_query_xml(b"<html><body/></html>"),
            Err(XmlError::WrongRoot {
                found: "html".into()
            })
        );
        assert_eq!(
            parse_query_xml(b"<nvidia_smi_log><gpu id=\"x\"><uuid>GPU-1</uuid>"),
            Err(XmlError::Truncated)
        );
        let mismatched = parse_query_xml(b"<nvidia_smi_log><gpu></uuid></nvidia_smi_log>");
        assert!(
            matches!(mismatched, Err(XmlError::Malformed { position: 21, .. })),
            "{mismatched:?}"
        );
        assert_eq!(
            XmlError::NoRoot.to_string(),
            "nvidia-smi -q -x output has no <nvidia_smi_log> root"
        );
        let message = mismatched.unwrap_err().to_string();
        assert!(
            message.starts_with("nvidia-smi -q -x output is not well-formed XML at byte 21: "),
            "{message}"
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let mut doc = b"<nvidia_smi_log>".to_vec();
        for _ in 0..MAX_DEPTH {
            doc.extend_from_slice(b"<a>");
        }
        assert!(matches!(
            parse_query_xml(&doc),
            Err(XmlError::TooDeep { .. })
        ));
    }

    #[test]
    fn the_gpu_id_stands_in_for_a_missing_pci_block() {
        let doc = parse(b"<nvidia_smi_log><gpu id=\"0000:65:00.0\"/></nvidia_smi_log>");
        assert_eq!(doc.gpus.len(), 1);
        assert_eq!(bus(&doc.gpus[0]).as_deref(), Some("00000000:65:00.0"));
    }

    #[test]
    fn bus_ids_read_in_every_printed_form() {
        let nvml = |t: &str| read::present_address(t).map(|a| a.nvml_bus_id());
        assert_eq!(nvml("0000:00:03.0").as_deref(), Some("00000000:00:03.0"));
        assert_eq!(nvml("3b:00.0").as_deref(), Some("00000000:3B:00.0"));
        for bad in ["", "N/A", "0000:18:00", "0:18:20.0", "0:18:00.8"] {
            assert_eq!(nvml(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn compute_modes_and_flags_read_every_spelling() {
        assert_eq!(compute_mode("Default"), Some(ComputeMode::Default));
        assert_eq!(
            compute_mode("Exclusive Process"),
            Some(ComputeMode::ExclusiveProcess)
        );
        assert_eq!(compute_mode("N/A"), None);
        assert_eq!(compute_mode("Shared"), None);
        assert_eq!(flag("Enabled"), Some(true));
        assert_eq!(flag("No"), Some(false));
        assert_eq!(flag("[N/A]"), None);
    }

    #[test]
    fn ecc_sums_saturate_instead_of_overflowing() {
        let raw = EccRaw {
            sram_correctable: Some(u64::MAX),
            dram_correctable: Some(1),
            ..EccRaw::default()
        };
        assert_eq!(raw.counts().correctable, Some(u64::MAX));
        assert_eq!(raw.counts().uncorrectable, None);
    }
}
