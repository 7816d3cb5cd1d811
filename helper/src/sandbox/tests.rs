//! Tests of the sandbox against the running kernel. [`enforce`] is irreversible, so each test
//! re-executes this test binary to run [`sandboxed_child`] alone in a fresh process, which
//! applies the sandbox, probes it, prints what it saw and exits; the parent judges.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use super::*;
use crate::child;

/// Set in the re-executed child: the folder it may write.
const ENV_ALLOWED: &str = "BCD_SANDBOX_TEST_ALLOWED_DIR";
/// Set in the re-executed child: a file it must not be able to read.
const ENV_DENIED: &str = "BCD_SANDBOX_TEST_DENIED_FILE";
/// Set in the re-executed child: an `nvidia-smi` to run under the sandbox (read-only queries).
const ENV_NVIDIA_SMI: &str = "BCD_SANDBOX_TEST_NVIDIA_SMI";
/// Set in the re-executed child: a fake PCI tree with an NVIDIA GPU and an Intel NIC.
const ENV_SYSFS: &str = "BCD_SANDBOX_TEST_SYSFS";
/// The fake tree's GPU and NIC.
const GPU: &str = "0000:18:00.0";
const NIC: &str = "0000:19:00.0";
/// The child's exit status when the kernel enforced no Landlock.
const EXIT_NO_LANDLOCK: i32 = 77;

/// `name` on `PATH`, if there.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// Runs [`sandboxed_child`] in a new process of this test binary and returns its output.
/// The denied file lives in a folder of its own, outside every rule.
fn run_sandboxed_child() -> (Output, String) {
    run_sandboxed_child_with(None)
}

/// As [`run_sandboxed_child`], also running `nvidia_smi` (read-only) under the sandbox.
fn run_sandboxed_child_with(nvidia_smi: Option<&Path>) -> (Output, String) {
    let allowed = tempfile::tempdir().unwrap();
    std::fs::write(allowed.path().join("inside.txt"), "inside").unwrap();
    let denied_dir = tempfile::tempdir().unwrap();
    let denied = denied_dir.path().join("outside.txt");
    std::fs::write(&denied, "outside").unwrap();
    let sysfs = tempfile::tempdir().unwrap();
    let pci = sysfs.path().join("bus/pci");
    for (addr, vendor, class, driver) in [
        (GPU, "0x10de", "0x030200", "nvidia"),
        (NIC, "0x8086", "0x020000", "ixgbe"),
    ] {
        let drv = pci.join("drivers").join(driver);
        std::fs::create_dir_all(&drv).unwrap();
        std::fs::write(drv.join("bind"), "").unwrap();
        std::fs::write(drv.join("unbind"), "").unwrap();
        let dev = pci.join("devices").join(addr);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), vendor).unwrap();
        std::fs::write(dev.join("class"), class).unwrap();
        std::fs::write(dev.join("driver_override"), "").unwrap();
        std::os::unix::fs::symlink(format!("../../drivers/{driver}"), dev.join("driver")).unwrap();
    }
    std::fs::write(pci.join("drivers_probe"), "").unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.env(ENV_SYSFS, sysfs.path());
    if let Some(smi) = nvidia_smi {
        cmd.env(ENV_NVIDIA_SMI, smi);
    }
    let out = cmd
        .args([
            "sandbox::tests::sandboxed_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_ALLOWED, allowed.path())
        .env(ENV_DENIED, &denied)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// The child's side: a no-op in a normal test run; with [`ENV_ALLOWED`] set, it applies the
/// sandbox with that folder as the only writable tree and asserts what must and must not work,
/// in this process and in the programs it runs.
#[test]
fn sandboxed_child() {
    let (Some(allowed), Some(denied)) =
        (std::env::var_os(ENV_ALLOWED), std::env::var_os(ENV_DENIED))
    else {
        return;
    };
    let allowed = PathBuf::from(allowed);
    let denied = PathBuf::from(denied);
    let cat = on_path("cat").expect("cat is on PATH");
    let virsh = on_path("virsh");
    let nvidia_smi = std::env::var_os(ENV_NVIDIA_SMI).map(PathBuf::from);
    let sysfs_root = PathBuf::from(std::env::var_os(ENV_SYSFS).expect("the fake sysfs is set"));
    let sysfs = crate::sysfs::Sysfs::new(&sysfs_root);
    // Like the audit log: opened before the sandbox, in a folder no rule names.
    let log_path = denied.with_file_name("audit.log");
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log_path)
        .unwrap();
    let paths = SandboxPaths {
        exec: [Some(cat.clone()), virsh.clone(), nvidia_smi.clone()]
            .into_iter()
            .flatten()
            .collect(),
        write_files: sysfs_write_files(&sysfs),
        read_write: vec![allowed.clone()],
        lock_dirs: vec![],
        read: vec![],
        devices: nvidia_device_nodes(Path::new("/dev")),
    };
    let report = enforce(&paths);
    println!("report: {report:?}");
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    for line in status
        .lines()
        .filter(|l| l.starts_with("Cap") || l.starts_with("NoNewPrivs"))
    {
        println!("{line}");
    }
    if report.landlock.starts_with("none") {
        println!("no Landlock: {}", report.landlock);
        std::process::exit(EXIT_NO_LANDLOCK);
    }
    // Observation for the audit log's "executable": another process's /proc/PID/exe.
    let parent_exe =
        std::fs::read_link(format!("/proc/{}/exe", std::os::unix::process::parent_id()));
    println!(
        "parent exe readable under the sandbox: {:?}",
        parent_exe.map_err(|e| e.kind())
    );

    // In this process.
    assert_eq!(
        std::fs::read_to_string(allowed.join("inside.txt")).unwrap(),
        "inside"
    );
    std::fs::write(allowed.join("new.txt"), "new").unwrap();
    let err = std::fs::read_to_string(&denied).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    let err = std::fs::write(denied.with_file_name("created.txt"), "x").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    assert_eq!(
        enforce(&paths).landlock,
        "none: enforce was already called in this process; the first call's rules stand"
    );

    // sysfs: the GPU's driver_override and its driver's unbind may be written; the NIC's
    // may not (the rules once allowed every PCI device's files).
    let devices = sysfs_root.join("bus/pci/devices");
    std::fs::write(devices.join(GPU).join("driver_override"), "vfio-pci").unwrap();
    std::fs::write(devices.join(GPU).join("driver/unbind"), GPU).unwrap();
    std::fs::write(sysfs_root.join("bus/pci/drivers_probe"), GPU).unwrap();
    for file in [
        devices.join(NIC).join("driver_override"),
        devices.join(NIC).join("driver/unbind"),
    ] {
        let err = std::fs::write(&file, "x").unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::PermissionDenied,
            "{}",
            file.display()
        );
    }
    println!("sysfs: only the GPU's files are writable");

    // The audit log: appending to the open file works; truncating, replacing or removing it
    // does not (a child once could).
    use std::io::Write as _;
    log.write_all(b"line\n").unwrap();
    let err = std::fs::remove_file(&log_path).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    let err = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&log_path)
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    println!("audit log: appended, not removable");

    // In the programs it runs: the rules and the loader lines carry over.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let run = |program: &Path, args: &[&str]| {
        rt.block_on(child::run(&child::Command::new(
            program,
            args,
            Duration::from_secs(20),
        )))
        .unwrap()
    };
    let inside = allowed.join("inside.txt");
    let out = run(&cat, &[inside.to_str().unwrap()]);
    assert!(
        out.success(),
        "cat of an allowed file: {}",
        out.failure_message()
    );
    assert_eq!(out.stdout, b"inside");
    let out = run(&cat, &[denied.to_str().unwrap()]);
    assert!(!out.success());
    assert!(
        out.stderr_tail.contains("Permission denied"),
        "{}",
        out.stderr_tail
    );
    // A program not in `exec` cannot be run at all.
    let sh = std::fs::canonicalize(on_path("sh").expect("sh is on PATH")).unwrap();
    if !sh.starts_with("/usr/lib") && !sh.starts_with("/lib") {
        let err = rt
            .block_on(child::run(&child::Command::new(
                &sh,
                &["-c", "true"],
                Duration::from_secs(5),
            )))
            .unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
    }
    match virsh {
        Some(virsh) => {
            let out = run(&virsh, &["-c", "test:///default", "list", "--all"]);
            assert!(
                out.success(),
                "virsh under the sandbox: {}",
                out.failure_message()
            );
            println!("virsh ran under the sandbox");
        }
        None => println!("virsh not installed: its run under the sandbox was not tried"),
    }
    if let Some(smi) = nvidia_smi {
        // Only queries: a test never changes a GPU's state.
        for args in [
            &["-L"][..],
            &[
                "--query-gpu=pci.bus_id,persistence_mode",
                "--format=csv,noheader",
            ][..],
        ] {
            let out = run(&smi, args);
            assert!(
                out.success(),
                "nvidia-smi {args:?} under the sandbox: {}",
                out.failure_message()
            );
            println!(
                "nvidia-smi {args:?}: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        println!("nvidia-smi ran under the sandbox");
    }
    println!("sandboxed child: all checks passed");
}

#[test]
fn landlock_confines_the_helper_and_the_programs_it_runs() {
    let (out, text) = run_sandboxed_child();
    if out.status.code() == Some(EXIT_NO_LANDLOCK) {
        println!("{text}");
        bcd_testkit::skip("this kernel does not enforce Landlock");
        return;
    }
    assert!(out.status.success(), "the sandboxed child failed:\n{text}");
    assert!(
        text.contains("sandboxed child: all checks passed"),
        "{text}"
    );
    assert!(
        text.contains("landlock: \"full\"") || text.contains("landlock: \"partial\""),
        "{text}"
    );
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(
        text.contains("sysfs: only the GPU's files are writable"),
        "{text}"
    );
    assert!(
        text.contains("audit log: appended, not removable"),
        "{text}"
    );
}

// Without Landlock the helper once served every operation as unconfined root.
#[test]
fn without_landlock_only_ping_is_served_unless_root_allows_it() {
    let none = SandboxReport {
        landlock: "none: this kernel was built without Landlock".to_owned(),
        ..SandboxReport::default()
    };
    let why = ping_only(&none, false).expect("only Ping without Landlock");
    assert!(why.contains("serves only Ping"), "{why}");
    assert!(why.contains("built without Landlock"), "{why}");
    assert!(why.contains("--allow-unconfined"), "{why}");
    assert_eq!(ping_only(&none, true), None);
    for enforced in ["full", "partial"] {
        let report = SandboxReport {
            landlock: enforced.to_owned(),
            ..SandboxReport::default()
        };
        assert_eq!(ping_only(&report, false), None);
    }
}

#[test]
fn a_programs_loader_and_a_scripts_interpreter_are_the_only_executables_added() {
    let sh = std::fs::canonicalize(on_path("sh").expect("sh is on PATH")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fake-nvidia-smi");
    std::fs::write(&script, format!("#!{} -e\nexit 0\n", sh.display())).unwrap();
    let found = interpreters(&[script, sh.clone()]);
    assert!(found.contains(&sh), "{found:?}");
    assert!(
        found.iter().any(|p| p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("ld-linux"))),
        "the dynamic loader is found from PT_INTERP: {found:?}"
    );
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn nvidia_smi_runs_under_the_sandbox() {
    let Some(smi) = on_path("nvidia-smi") else {
        bcd_testkit::skip("no real GPU here: nvidia-smi is not installed");
        return;
    };
    if !Path::new("/dev/nvidiactl").exists() {
        bcd_testkit::skip("no real GPU here: no NVIDIA driver loaded (/dev/nvidiactl is missing)");
        return;
    }
    let (out, text) = run_sandboxed_child_with(Some(&smi));
    if out.status.code() == Some(EXIT_NO_LANDLOCK) {
        println!("{text}");
        bcd_testkit::skip("this kernel does not enforce Landlock");
        return;
    }
    assert!(out.status.success(), "the sandboxed child failed:\n{text}");
    assert!(text.contains("nvidia-smi ran under the sandbox"), "{text}");
}

#[test]
fn only_the_kept_capabilities_remain() {
    if !nix::unistd::geteuid().is_root() {
        bcd_testkit::skip("capabilities can only be dropped, and so checked, as root");
        return;
    }
    let (out, text) = run_sandboxed_child();
    if out.status.code() == Some(EXIT_NO_LANDLOCK) {
        println!("note: no Landlock on this kernel; capabilities are still checked");
    } else {
        assert!(out.status.success(), "the sandboxed child failed:\n{text}");
    }
    let kept_mask: u64 = KEPT_CAPABILITIES.iter().map(|(c, _)| c.bitmask()).sum();
    let mask_of = |name: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(mask_of("CapEff:"), kept_mask, "{text}");
    assert_eq!(mask_of("CapPrm:"), kept_mask, "{text}");
    assert_eq!(mask_of("CapBnd:"), kept_mask, "{text}");
    assert_eq!(mask_of("CapInh:"), 0, "{text}");
    assert_eq!(mask_of("CapAmb:"), 0, "{text}");
    assert!(
        text.contains("capabilities: [\"CAP_DAC_OVERRIDE\", \"CAP_SYS_ADMIN\"]"),
        "{text}"
    );
}

#[test]
fn every_rule_maps_to_rights_of_the_pinned_abi() {
    for allow in [Allow::Exec, Allow::Read, Allow::ReadWrite, Allow::Device] {
        let access = allow.access(PINNED_ABI);
        assert!(!access.is_empty(), "{allow:?}");
        assert!(access.contains(AccessFs::ReadFile), "{allow:?}");
    }
    assert!(Allow::Device
        .access(PINNED_ABI)
        .contains(AccessFs::IoctlDev));
    assert!(!Allow::ReadWrite
        .access(PINNED_ABI)
        .contains(AccessFs::Execute));
    assert!(!Allow::ReadWrite
        .access(PINNED_ABI)
        .contains(AccessFs::IoctlDev));
    // Older ABIs lose what they do not know rather than fail.
    assert!(!Allow::Device.access(ABI::V1).contains(AccessFs::IoctlDev));
}

#[test]
fn nvidia_device_nodes_lists_only_nvidia_entries() {
    let dev = tempfile::tempdir().unwrap();
    for name in ["nvidia0", "nvidiactl", "nvidia-uvm", "null", "vfio"] {
        std::fs::write(dev.path().join(name), "").unwrap();
    }
    std::fs::create_dir(dev.path().join("nvidia-caps")).unwrap();
    let names: Vec<String> = nvidia_device_nodes(dev.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["nvidia-caps", "nvidia-uvm", "nvidia0", "nvidiactl"]);
    assert!(nvidia_device_nodes(&dev.path().join("missing")).is_empty());
}

// What broke: a helper started with its sandbox on a demo host's replaying nvidia-smi failed
// every query with "Permission denied", and nothing said to use --no-sandbox there.
#[test]
fn a_script_as_nvidia_smi_is_named_with_the_no_sandbox_advice() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("nvidia-smi");
    std::fs::write(
        &script,
        "#!/bin/sh\nexec \"$(dirname \"$0\")/../replay\" \"$@\"\n",
    )
    .unwrap();
    let warning = script_warning(&script).unwrap();
    assert!(warning.contains("is a script (/bin/sh)"), "{warning}");
    assert!(
        warning.ends_with("for a demo host, start bcd-helper with --no-sandbox"),
        "{warning}"
    );
    let elf = std::env::current_exe().unwrap();
    assert_eq!(script_warning(&elf), None);
    assert_eq!(script_warning(&dir.path().join("missing")), None);
}
