//! What to do when `nvidia-smi` fails: the one table every command reads, for the hint `bcd
//! doctor` and `bcd hardware` add to a failure and for the action of each GPU the verdict
//! finds nothing answered for ([`gpu_action`], which `bcd status`, `bcd diag`, `bcd doctor`'s
//! `gpu` lines and the node print).
//!
//! Each entry is a failure seen on real hosts, matched case-insensitively in whatever text the
//! failure carries (stderr, stdout, or the runner's own words: "did not answer within 30s and
//! was killed", "was killed by signal SIGKILL (9)", "not found", "printed more than").

/// Substrings that identify a failure, and what the operator should do about it. The first
/// match wins, so the more specific failures come first.
const HINTS: &[(&[&str], &str)] = &[
    (
        &["driver/library version mismatch"],
        "the loaded nvidia kernel module and the user-space libraries differ, usually after a driver upgrade: reboot, or unload and reload the nvidia modules",
    ),
    (
        &["couldn't communicate with the nvidia driver"],
        "the nvidia module is not loaded: run modprobe nvidia; under Secure Boot it must be signed by an enrolled key (see dmesg)",
    ),
    (
        &["no devices were found"],
        "the driver sees no GPU: compare lspci -d 10de: with dmesg (RmInitAdapter failed, Xid 79)",
    ),
    (
        &["signal sigsegv", "signal sigabrt", "signal sigbus", "signal sigill", "signal sigfpe"],
        "nvidia-smi crashed: check dmesg for NVRM errors, and that nvidia-smi comes from the loaded driver's version (a mismatch after an upgrade crashes it); a reboot loads a matching pair",
    ),
    (
        &["nvidia-smi not found"],
        "install the NVIDIA driver (it brings nvidia-smi), or name the program with --nvidia-smi PATH",
    ),
    (
        &["printed more than"],
        "this is not the nvidia-smi of an NVIDIA driver, or it is broken: check which program runs (bcd doctor names it)",
    ),
    (&["timed out", "timeout", "did not answer", "killed"], WEDGED),
];

/// The hint for a query that did not answer in time or was killed.
const WEDGED: &str = "a GPU may be wedged (Xid 79 or 119): gpu.reset or a reboot recovers it";

/// What to do when a failure matches no entry of the table.
pub(crate) const NO_HINT: &str = "run the same nvidia-smi command by hand to read the whole error";

/// Returns the hint for a failed `nvidia-smi` run, or `None` when the text matches no known
/// failure. Matching is case-insensitive; `killed` also covers `signal: killed`.
pub fn error_hint(text: &str) -> Option<&'static str> {
    let lower = text.to_ascii_lowercase();
    HINTS
        .iter()
        .find(|(needles, _)| needles.iter().any(|n| lower.contains(n)))
        .map(|(_, hint)| *hint)
}

/// [`error_hint`], or [`NO_HINT`] for a failure the table does not know.
pub(crate) fn hint_or_default(text: &str) -> &'static str {
    error_hint(text).unwrap_or(NO_HINT)
}

/// What to do for the GPU `uuid` when `nvidia-smi` gave nothing for it, failing with `text`:
/// the hint of a failure of the whole driver (its libraries and module differ, the module is
/// not loaded, ...), which no reset of the GPU mends; else, since `nvidia-smi` hangs when a
/// GPU is wedged, the wedged GPU's action naming it.
pub(crate) fn gpu_action(text: &str, uuid: &str) -> String {
    match error_hint(text) {
        Some(hint) if hint != WEDGED => hint.to_owned(),
        _ => format!("check the GPU: nvidia-smi hangs when a GPU is wedged (dmesg: Xid 79 or 119); reset it (bcd gpu reset {uuid}) or reboot the node"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_known_failure_has_its_hint() {
        let mismatch = error_hint("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.183");
        assert!(mismatch
            .unwrap()
            .starts_with("the loaded nvidia kernel module"));
        let no_module = error_hint("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.");
        assert!(no_module.unwrap().contains("modprobe nvidia"));
        assert!(error_hint("No devices were found")
            .unwrap()
            .contains("lspci -d 10de:"));
        assert!(error_hint("signal: killed")
            .unwrap()
            .contains("Xid 79 or 119"));
        assert!(error_hint("nvidia-smi timed out after 30s")
            .unwrap()
            .contains("gpu.reset"));
        assert!(error_hint("NO DEVICES WERE FOUND").is_some());
    }

    // What broke: bcd status told an operator to reset the GPU or reboot for a driver whose
    // libraries and module differ, where doctor and hardware said to reload the modules.
    #[test]
    fn a_gpu_of_a_broken_driver_gets_the_drivers_hint_and_a_wedged_one_its_reset() {
        const GPU: &str = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
        let mismatch = "nvidia-smi -q -x failed (exit status 18): Failed to initialize NVML: Driver/library version mismatch";
        assert_eq!(gpu_action(mismatch, GPU), error_hint(mismatch).unwrap());
        assert!(gpu_action(mismatch, GPU).contains("reload the nvidia modules"));
        let no_module =
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.";
        assert!(gpu_action(no_module, GPU).contains("modprobe nvidia"));
        for wedged in [
            "nvidia-smi -q -x did not answer within 30s and was killed",
            "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error",
        ] {
            assert_eq!(
                gpu_action(wedged, GPU),
                format!("check the GPU: nvidia-smi hangs when a GPU is wedged (dmesg: Xid 79 or 119); reset it (bcd gpu reset {GPU}) or reboot the node")
            );
        }
        assert_eq!(hint_or_default("garbage"), NO_HINT);
    }

    #[test]
    fn unknown_failures_have_no_hint() {
        assert_eq!(error_hint(""), None);
        assert_eq!(
            error_hint("Unable to determine the device handle for GPU0000:18:00.0: Unknown Error"),
            None
        );
    }
}
