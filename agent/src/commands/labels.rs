//! `bcd hardware --labels`: this host's node labels, as `bcd node --nfd-features-dir` keeps
//! them, printed (`name=value` lines, or a JSON object with `--json`); nothing is written.

use std::process::ExitCode;

use super::output::{print, print_json, saying_what_it_waits_for, FAILED};
use crate::cli::Global;
use crate::labels::host::look;
use crate::labels::LabelConfig;

/// `bcd hardware --labels [--gpu-slots N]`: exit 0, or 3 when `nvidia-smi` did not answer
/// (the labels procfs and sysfs give are printed all the same). With `--json`:
/// `{"schema_version", "labels": {name: value}}`.
pub async fn labels(global: &Global, gpu_slots: u32) -> ExitCode {
    let host = global.host();
    let looked = saying_what_it_waits_for(
        global.json,
        look(
            &host,
            &global.data_dir,
            &global.xid_policy(),
            &LabelConfig {
                gpu_slots,
                ..LabelConfig::default()
            },
        ),
    )
    .await;
    let mut status = ExitCode::SUCCESS;
    if let Some(e) = &looked.nvidia_smi_error {
        eprintln!("bcd: nvidia-smi did not answer: {e}; the labels are what procfs and sysfs show");
        status = ExitCode::from(FAILED);
    }
    for note in &looked.notes {
        eprintln!("bcd: {note}");
    }
    if looked.labels.is_empty() {
        eprintln!("bcd: no NVIDIA GPU in the inventory, so no labels");
    }
    if global.json {
        if !print_json(
            &serde_json::json!({ "labels": &looked.labels }),
            "the labels",
        ) {
            return ExitCode::from(FAILED);
        }
    } else {
        print(&looked.labels.lines());
    }
    status
}
