//! `bcd doctor` with NVIDIA's real `nvidia-smi` on a machine without the NVIDIA kernel module:
//! it prints `NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver...`
//! and exits 9, and doctor must show the `gpus` fail line with the `modprobe nvidia` hint.
//!
//! The binary is Debian's `nvidia-smi` package (non-free) with its `libnvidia-ml1`, which
//! `run-tests` downloads through a private apt configuration and unpacks under
//! `target/peers/nvidia-smi` (the test downloads nothing). With `BCD_REAL_NVIDIA_SMI=PATH` that
//! `nvidia-smi` (or a wrapper setting its library path) is used instead. The test skips when
//! the machine has the NVIDIA module loaded (also under CI), and when the unpacked package is
//! missing (a failure under CI).

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn real_nvidia_smi_without_the_module_fails_gpus_with_the_modprobe_hint() {
    if Path::new("/proc/driver/nvidia").exists() {
        bcd_testkit::skip(
            "this machine has the NVIDIA kernel module loaded; the test needs one without it",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let smi = match std::env::var_os("BCD_REAL_NVIDIA_SMI") {
        Some(path) => PathBuf::from(path),
        None => match bcd_testkit::require(bcd_testkit::Peer::DebianNvidiaSmi) {
            Some(path) => path,
            None => return,
        },
    };
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("doctor")
        .arg("--host-root")
        .arg("/")
        .arg("--nvidia-smi")
        .arg(&smi)
        .arg("--helper-socket")
        .arg(dir.path().join("no-helper.sock"))
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
            .to_owned()
    };
    let gpus = line("gpus");
    assert!(gpus.starts_with("fail "), "{gpus}");
    assert!(gpus.contains("exit status 9"), "{gpus}");
    assert!(
        gpus.contains("couldn't communicate with the NVIDIA driver"),
        "{gpus}"
    );
    assert!(gpus.contains("modprobe nvidia"), "{gpus}");
    let nvml = line("nvml");
    assert!(
        nvml.starts_with("fail ") && nvml.contains("modprobe nvidia"),
        "{nvml}"
    );
}
