//! `bcd doctor` over the fake hosts in `testdata/hosts` and edited copies of them: every
//! check's statuses, the hints for each `nvidia-smi` failure, the WSL skip, the helper ping
//! against a fake helper, the exit status and the `--json` shape.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bcd::doctor::checks::name;
use bcd::doctor::{ping, run, DoctorEnv, PingError, Report, Status, PING_TIMEOUT};
use bcd::helper_client::fake::RecordingHelper;
use bcd::helper_client::SocketHelper;
use bcd::sys::host::Host;
use bcd_protocol::frame::{read_frame, write_frame};
use bcd_protocol::{
    ClientFrame, HelloAnswer, HelperError, OperationKind, Outcome, Response, ServerFrame,
    PROTOCOL_VERSION,
};
use tokio::net::UnixListener;

fn hosts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
}

/// A scratch copy of a fake host (with the replay script beside it, as its `bin/nvidia-smi`
/// expects), to edit.
struct Scratch {
    dir: tempfile::TempDir,
    name: &'static str,
}

impl Scratch {
    fn of(name: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for what in [name, "replay-nvidia-smi"] {
            let status = Command::new("cp")
                .arg("-a")
                .arg(hosts().join(what))
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "cp -a {what}");
        }
        Self { dir, name }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(self.name).join(rel)
    }

    fn host(&self) -> Host {
        Host::fake(self.dir.path().join(self.name))
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Makes a query fail the way a broken driver does: `text` on stdout (where
    /// `nvidia-smi` prints these) and exit `code`.
    fn fail_query(&self, key: &str, text: &str, code: i32) {
        let _ = std::fs::remove_file(self.path(&format!("answers/{key}.out")));
        self.write(&format!("answers/{key}.out"), &format!("{text}\n"));
        self.write(&format!("answers/{key}.exit"), &format!("{code}\n"));
    }

    /// A `systemctl` that prints `body`'s output, in the scratch folder.
    fn systemctl(&self, body: &str) -> PathBuf {
        let path = self.dir.path().join("systemctl");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// An environment with no helper socket and a `systemctl` saying the fabric manager runs
    /// (and no other NVIDIA unit: mig-parted's or the toolkit's would be a second owner).
    fn env(&self) -> DoctorEnv {
        DoctorEnv::new(
            self.host().with_systemctl(self.systemctl(
                "case \"$2\" in nvidia-mig-manager*|nvidia-cdi-refresh*) echo inactive; exit 3;; esac\necho active",
            )),
            self.dir.path().join("no-helper.sock"),
        )
    }
}

fn env_of(name: &'static str) -> (Scratch, DoctorEnv) {
    let s = Scratch::of(name);
    let env = s.env();
    (s, env)
}

fn statuses<'a>(report: &'a Report, name: &'a str) -> Vec<Status> {
    report.named(name).map(|c| c.status).collect()
}

fn one<'a>(report: &'a Report, name: &'a str) -> &'a bcd::doctor::Check {
    let found: Vec<_> = report.named(name).collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} line in:\n{}",
        report.render_text()
    );
    found[0]
}

/// A helper that answers the greeting and `Ping` as the real one does.
fn fake_helper(dir: &Path, answer: fn(u64) -> ServerFrame) -> PathBuf {
    let path = dir.join("helper.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let hello: ClientFrame = read_frame(&mut stream, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(
                hello,
                ClientFrame::Hello {
                    version: PROTOCOL_VERSION
                }
            );
            let greeting = ServerFrame::Hello(Ok(HelloAnswer {
                version: PROTOCOL_VERSION,
                helper_version: "9.9.9-test".into(),
                operations: OperationKind::ALL.to_vec(),
            }));
            write_frame(&mut stream, &greeting).await.unwrap();
            let Ok(ClientFrame::Request(request)) =
                read_frame::<_, ClientFrame>(&mut stream, Duration::from_secs(5)).await
            else {
                continue;
            };
            assert_eq!(request.op, bcd_protocol::Operation::Ping);
            write_frame(&mut stream, &answer(request.id)).await.unwrap();
        }
    });
    path
}

fn pong(id: u64) -> ServerFrame {
    ServerFrame::Response(Response {
        id,
        result: Ok(Outcome::Pong {
            helper_version: "9.9.9-test".into(),
            sandbox: "landlock full".into(),
        }),
    })
}

#[tokio::test]
async fn hgx_h100_passes_with_a_helper_and_the_fabric_manager() {
    let (s, mut env) = env_of("hgx-h100");
    env.helper = Arc::new(SocketHelper::new(fake_helper(s.dir.path(), pong)));
    let report = run(&env).await;
    let text = report.render_text();
    assert!(
        report.checks.iter().all(|c| c.status == Status::Ok),
        "{text}"
    );
    assert_eq!(
        one(&report, name::NVML).message,
        "driver 570.133.20, 8 GPUs"
    );
    assert!(one(&report, name::HARDWARE)
        .message
        .starts_with("8 GPUs in the inventory, hashed sha256:"));
    assert_eq!(statuses(&report, name::GPU), vec![Status::Ok; 8]);
    assert_eq!(
        one(&report, name::FABRIC_MANAGER).message,
        "4 NVSwitches on the PCI bus and nvidia-fabricmanager is active"
    );
    assert_eq!(
        one(&report, name::HELPER).message,
        format!(
            "bcd-helper 9.9.9-test answers at {}",
            s.dir.path().join("helper.sock").display()
        )
    );
    assert_eq!(one(&report, name::GPU_BINDING).status, Status::Ok);
    assert_eq!(one(&report, name::DRIVER_VERSION).status, Status::Ok);
    assert_eq!(one(&report, name::KMSG).status, Status::Ok);
    assert_eq!(report.named(name::GPUS).count(), 0);
    assert_eq!(report.named(name::GPU_HOST).count(), 0);
    let order: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
    let mut expected = vec!["nvml", "hardware"];
    expected.extend(["gpu"; 8]);
    expected.extend([
        "nouveau",
        "gpu-bus",
        "persistence",
        "fabric-manager",
        "mig-layouts",
        "nvidia-cdi",
        "driver-version",
        "kmsg",
        "helper",
        "gpu-binding",
    ]);
    assert_eq!(order, expected);
}

#[tokio::test]
async fn fabric_manager_inactive_fails_and_unknown_warns() {
    let (s, mut env) = env_of("hgx-h100");
    env.host = env
        .host
        .with_systemctl(s.systemctl("echo inactive; exit 3"));
    let report = run(&env).await;
    let c = one(&report, name::FABRIC_MANAGER);
    assert_eq!(c.status, Status::Fail, "{}", c.message);
    assert!(c.message.contains("nvidia-fabricmanager is inactive"));
    assert!(!report.passed());

    env.host = env
        .host
        .with_systemctl(s.dir.path().join("no-systemctl-here"));
    let report = run(&env).await;
    let c = one(&report, name::FABRIC_MANAGER);
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert!(c.message.contains("could not be told"), "{}", c.message);

    // Without NVSwitches there is no fabric manager to ask about.
    let (_s, env) = env_of("a100-mig");
    assert_eq!(run(&env).await.named(name::FABRIC_MANAGER).count(), 0);
}

#[tokio::test]
async fn wsl2_warns_and_skips_the_host_checks() {
    let (_s, mut env) = env_of("wsl2");
    // The helper a WSL run must never call: there is no helper to reach there.
    let probe = Arc::new(RecordingHelper::new());
    env.helper = probe.clone();
    let report = run(&env).await;
    let names: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["nvml", "hardware", "gpu", "gpu-host"]);
    let c = one(&report, name::GPU_HOST);
    assert_eq!(c.status, Status::Warn);
    assert!(c
        .message
        .contains("CUDA containers work (CDI: nvidia-ctk cdi generate --mode=wsl), but there is no VFIO passthrough, gpu.reset, MIG or DCGM here"));
    assert!(probe.calls().is_empty(), "no helper ping on WSL");
    assert!(report.passed());
    assert_eq!(one(&report, name::NVML).message, "driver 616.56, 1 GPU");

    // /dev/nvidiactl beside /dev/dxg is a Linux driver: not the paravirtual GPU.
    let (s, env) = env_of("wsl2");
    s.write("root/dev/nvidiactl", "");
    assert_eq!(run(&env).await.named(name::GPU_HOST).count(), 0);
}

#[tokio::test]
async fn no_driver_host() {
    let (_s, env) = env_of("no-driver");
    let report = run(&env).await;
    let text = report.render_text();
    assert_eq!(one(&report, name::NVML).status, Status::Warn);
    assert_eq!(
        report.named(name::GPUS).count(),
        0,
        "no driver is no failed snapshot: {text}"
    );
    assert_eq!(report.named(name::GPU).count(), 0);
    let nouveau = one(&report, name::NOUVEAU);
    assert_eq!(nouveau.status, Status::Fail);
    assert!(nouveau.message.contains("blacklist it") && nouveau.message.contains("reboot"));
    let bus = one(&report, name::GPU_BUS);
    assert_eq!(bus.status, Status::Warn);
    assert_eq!(
        bus.message,
        "2 NVIDIA GPUs on the PCI bus (2 with no driver bound) but no NVIDIA driver answers: install the NVIDIA driver (on Debian the nvidia-driver package, from non-free; elsewhere NVIDIA's packages for the GPUs' driver branch), and reboot"
    );
    assert_eq!(report.named(name::PERSISTENCE).count(), 0);
    assert_eq!(report.named(name::DRIVER_VERSION).count(), 0);
    assert_eq!(one(&report, name::GPU_BINDING).status, Status::Warn);
    assert!(!report.passed());
}

#[tokio::test]
async fn passthrough_counts_vfio_and_a_lost_gpu_fails_the_bus() {
    let (_s, env) = env_of("passthrough");
    let report = run(&env).await;
    let bus = one(&report, name::GPU_BUS);
    assert_eq!(
        (bus.status, bus.message.as_str()),
        (
            Status::Ok,
            "2 NVIDIA GPUs on the PCI bus: 1 on nvidia, 1 on vfio-pci (passthrough)"
        )
    );

    // A third GPU bound to nvidia that nvidia-smi does not list: it fell off the bus.
    let (s, env) = env_of("r470-old");
    let dev = "root/sys/bus/pci/devices/0000:ee:00.0";
    s.write(&format!("{dev}/vendor"), "0x10de\n");
    s.write(&format!("{dev}/class"), "0x030200\n");
    std::os::unix::fs::symlink("../../drivers/nvidia", s.path(&format!("{dev}/driver"))).unwrap();
    let report = run(&env).await;
    let bus = one(&report, name::GPU_BUS);
    assert_eq!(bus.status, Status::Fail, "{}", bus.message);
    assert!(bus
        .message
        .starts_with("3 GPUs are bound to nvidia but nvidia-smi lists 2: a GPU fell off the bus"));
    assert!(bus.message.contains("Xid 79"));

    // A GPU with no driver next to working ones.
    let (s, env) = env_of("r470-old");
    s.write(&format!("{dev}/vendor"), "0x10de\n");
    s.write(&format!("{dev}/class"), "0x030200\n");
    let bus = run(&env).await;
    let bus = one(&bus, name::GPU_BUS);
    assert_eq!(bus.status, Status::Warn);
    assert!(
        bus.message.contains("1 with no driver bound"),
        "{}",
        bus.message
    );
}

/// Replaces `from` by `to` once, inside the `index`th `<gpu ...>` element of `-q -x`.
fn edit_gpu(xml: &str, index: usize, from: &str, to: &str) -> String {
    let starts: Vec<usize> = xml.match_indices("<gpu id=").map(|(i, _)| i).collect();
    let start = starts[index];
    let end = starts.get(index + 1).copied().unwrap_or(xml.len());
    let section = &xml[start..end];
    assert!(section.contains(from), "GPU {index} has no {from}");
    format!(
        "{}{}{}",
        &xml[..start],
        section.replacen(from, to, 1),
        &xml[end..]
    )
}

#[tokio::test]
async fn gpu_lines_warn_and_fail_on_health() {
    let (s, env) = env_of("hgx-h100");
    let mut xml = std::fs::read_to_string(s.path("answers/q-x.out")).unwrap();
    xml = edit_gpu(
        &xml,
        0,
        "<remapped_row_pending>No",
        "<remapped_row_pending>Yes",
    );
    xml = edit_gpu(
        &xml,
        1,
        "<remapped_row_failure>No",
        "<remapped_row_failure>Yes",
    );
    xml = edit_gpu(&xml, 2, "<pending_mig>Disabled", "<pending_mig>Enabled");
    xml = edit_gpu(
        &xml,
        4,
        "<dram_uncorrectable>0</dram_uncorrectable>",
        "<dram_uncorrectable>2</dram_uncorrectable>",
    );
    xml = edit_gpu(
        &xml,
        5,
        "<persistence_mode>Enabled",
        "<persistence_mode>Disabled",
    );
    s.write("answers/q-x.out", &xml);
    let report = run(&env).await;
    use Status::{Fail, Ok, Warn};
    // The verdict: a pending row remap keeps the GPU from work until its reset, as in bcd
    // status; a MIG mode change waiting for a reset is no health matter, and has its own line.
    assert_eq!(
        statuses(&report, name::GPU),
        vec![Fail, Fail, Ok, Ok, Fail, Ok, Ok, Ok],
        "{}",
        report.render_text()
    );
    let gpus: Vec<_> = report.named(name::GPU).collect();
    assert!(gpus[0].message.contains(
        "; unhealthy: a row remap waits for a GPU reset -> reset the GPU: bcd gpu reset GPU-"
    ));
    assert!(gpus[1]
        .message
        .contains("; unhealthy: row remapping failed -> replace the GPU"));
    assert!(gpus[4].message.contains(
        "; unhealthy: 2 uncorrectable volatile ECC error(s) since the driver loaded -> reset the GPU"
    ));
    let mig = one(&report, name::MIG_MODE);
    assert_eq!(mig.status, Warn);
    assert!(
        mig.message.contains("turns on at the next GPU reset"),
        "{}",
        mig.message
    );
    let p = one(&report, name::PERSISTENCE);
    assert_eq!(p.status, Warn);
    assert!(
        p.message.starts_with("persistence mode is off on GPU-"),
        "{}",
        p.message
    );
    assert!(!report.passed());
}

// What broke: on hgx-faults doctor printed `ok gpu` for all 8 GPUs (exit 0) while bcd status
// called 6 unhealthy and one degraded, and on a board without its fabric manager every `gpu`
// line was `ok`: the preflight gave a green light to a board that cannot run CUDA. Each line
// is the GPU's verdict now.
#[tokio::test]
async fn the_gpu_lines_are_the_verdict_of_bcd_status() {
    // These two hosts link to hgx-h100's files, so they are read where they are.
    let dir = tempfile::tempdir().unwrap();
    let env_on = |name: &str| {
        let host = Host::fake(hosts().join(name));
        DoctorEnv::new(host, dir.path().join("no-helper.sock"))
    };
    let report = run(&env_on("hgx-faults")).await;
    use Status::{Fail, Ok, Warn};
    assert_eq!(
        statuses(&report, name::GPU),
        vec![Fail, Fail, Fail, Ok, Warn, Fail, Fail, Fail],
        "{}",
        report.render_text()
    );
    let gpus: Vec<_> = report.named(name::GPU).collect();
    assert!(
        gpus[0].message.ends_with(
            "; unhealthy: the driver's recovery action is \"Reset\" -> reset the GPU: bcd gpu reset GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b"
        ),
        "{}",
        gpus[0].message
    );
    assert!(
        gpus[4].message.contains(
            "; degraded: clocks slowed down: hw_thermal_slowdown -> check the GPU's cooling"
        ),
        "{}",
        gpus[4].message
    );
    assert!(!report.passed());

    // The fabric manager is down: the fabric-manager line and every GPU fail, from one answer.
    let report = run(&env_on("hgx-no-fabric-manager")).await;
    assert_eq!(one(&report, name::FABRIC_MANAGER).status, Fail);
    assert_eq!(statuses(&report, name::GPU), vec![Fail; 8]);
    assert!(report.named(name::GPU).all(|c| c
        .message
        .ends_with("-> start the fabric manager: systemctl enable --now nvidia-fabricmanager")));
}

// What broke: a GPU the driver lists under a UUID that names no GPU was left out of the
// inventory and doctor said `nvml ok ... 2 GPUs`, `hardware ok ... 1 GPU`, with no warning.
#[tokio::test]
async fn a_gpu_left_out_of_the_inventory_warns_on_the_hardware_line() {
    let (s, env) = env_of("r470-old");
    for file in [
        "answers/q-x.out",
        "answers/L.out",
        "root/proc/driver/nvidia/gpus/0000:d8:00.0/information",
    ] {
        let text = std::fs::read_to_string(s.path(file)).unwrap().replace(
            "GPU-770a8583-ddab-d174-2973-722164bb8d69",
            "GPU-????????-????-????-????-????????????",
        );
        s.write(file, &text);
    }
    let report = run(&env).await;
    let c = one(&report, name::HARDWARE);
    assert_eq!(c.status, Status::Warn, "{}", report.render_text());
    assert!(
        c.message
            .starts_with("1 GPU in the inventory, hashed sha256:"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("; but the driver lists a GPU at 0000:d8:00.0 with UUID \"GPU-????????-????-????-????-????????????\", which names no GPU"),
        "{}",
        c.message
    );
    assert_eq!(report.named(name::GPU).count(), 1);
}

#[tokio::test]
async fn module_and_nvidia_smi_versions_must_agree() {
    let (s, env) = env_of("passthrough");
    s.write(
        "root/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Thu Jan 16 2025\n",
    );
    let report = run(&env).await;
    let c = one(&report, name::DRIVER_VERSION);
    assert_eq!(c.status, Status::Fail);
    assert!(c
        .message
        .starts_with("the loaded kernel module is 570.86.15 (/proc/driver/nvidia/version) but nvidia-smi reports 570.172.08"));
    assert!(!report.passed());
}

#[tokio::test]
async fn each_nvidia_smi_failure_gets_its_hint() {
    let cases = [
        (
            "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.172",
            18,
            "unload and reload the nvidia modules",
        ),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
            9,
            "modprobe nvidia",
        ),
        ("No devices were found", 6, "lspci -d 10de:"),
    ];
    for (text, code, hint) in cases {
        let (s, env) = env_of("passthrough");
        s.fail_query("q-x", text, code);
        s.fail_query("probe", text, code);
        let report = run(&env).await;
        let gpus = one(&report, name::GPUS);
        assert_eq!(gpus.status, Status::Fail);
        assert!(
            gpus.message
                .starts_with("the GPU snapshot failed: nvidia-smi -q -x failed (exit status"),
            "{}",
            gpus.message
        );
        assert!(gpus.message.contains(hint), "{text}: {}", gpus.message);
        assert!(!gpus.message.contains('\n'));
        let nvml = one(&report, name::NVML);
        assert_eq!(nvml.status, Status::Fail);
        assert!(nvml.message.contains(hint), "{}", nvml.message);
        // The GPU the driver lists is unknown: nothing answered for it.
        let gpu = one(&report, name::GPU);
        assert_eq!(gpu.status, Status::Fail);
        assert!(
            gpu.message
                .contains("; unknown: nvidia-smi -q -x did not answer"),
            "{}",
            gpu.message
        );
        let bus = one(&report, name::GPU_BUS);
        assert_eq!(bus.status, Status::Warn);
        assert!(bus.message.contains("gpus check"), "{}", bus.message);
        assert!(!report.passed());
    }
}

#[tokio::test]
async fn a_wedged_gpu_times_out_with_its_hint() {
    let (_s, mut env) = env_of("wedged");
    env.query_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let report = run(&env).await;
    assert!(started.elapsed() < Duration::from_secs(10), "bounded");
    assert_eq!(
        one(&report, name::NVML).status,
        Status::Ok,
        "the probe answers"
    );
    let gpus = one(&report, name::GPUS);
    assert_eq!(gpus.status, Status::Fail);
    assert!(
        gpus.message.contains("did not answer within"),
        "{}",
        gpus.message
    );
    assert!(gpus.message.contains("Xid 79 or 119"), "{}", gpus.message);
}

#[tokio::test]
async fn kmsg_missing_warns() {
    let (s, env) = env_of("r470-old");
    std::fs::remove_file(s.path("root/dev/kmsg")).unwrap();
    let report = run(&env).await;
    let c = one(&report, name::KMSG);
    assert_eq!(c.status, Status::Warn);
    assert!(c
        .message
        .starts_with("there is no /dev/kmsg, so XIDs from the NVIDIA driver would be missed"));
    assert!(report.passed(), "a warning passes");
}

/// Runs `bcd doctor ARGS` as `nobody` (root only, through `setpriv`), from a copy of the
/// binary in `dir` so that nobody can reach it; `None` (skipped) when this test does not run as
/// root, or when setpriv is missing (a failure under CI).
fn doctor_as_nobody(dir: &Path, args: &[&str]) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        bcd_testkit::skip("only root can run doctor as another user");
        return None;
    }
    let setpriv = bcd_testkit::require(bcd_testkit::Peer::Setpriv)?;
    let bin = dir.join("bcd");
    std::fs::copy(env!("CARGO_BIN_EXE_bcd"), &bin).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The copy's write descriptor lives on for a moment in a child another test thread forked
    // (before its exec closes it): exec then fails with ETXTBSY, so it is tried again.
    let mut tries = 0;
    let out = loop {
        let out = Command::new(&setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .arg("doctor")
            .args(args)
            .output()
            .unwrap();
        tries += 1;
        if tries < 20 && String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        break out;
    };
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "setpriv could not run doctor as nobody: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn kmsg_line(text: &str) -> String {
    text.lines()
        .find(|l| l.split_whitespace().nth(1) == Some("kmsg"))
        .unwrap_or_else(|| panic!("no kmsg line in:\n{text}"))
        .to_owned()
}

#[test]
fn kmsg_refused_by_mode_names_the_group() {
    let s = Scratch::of("r470-old");
    std::fs::set_permissions(
        s.path("root/dev/kmsg"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    let host = s.dir.path().join(s.name);
    let sock = s.dir.path().join("none.sock");
    let Some(text) = doctor_as_nobody(
        s.dir.path(),
        &[
            "--host",
            host.to_str().unwrap(),
            "--helper-socket",
            sock.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let line = kmsg_line(&text);
    assert!(line.starts_with("warn "), "{line}");
    assert!(
        line.contains("(mode 0000, group ") && line.contains("SupplementaryGroups="),
        "{line}"
    );
}

/// With `kernel.dmesg_restrict = 1` (Debian's default) the kernel refuses `/dev/kmsg` to a
/// user without CAP_SYSLOG whatever the node's mode and groups: the fix doctor names is the
/// capability.
#[test]
fn kmsg_refused_by_dmesg_restrict_names_cap_syslog() {
    let restricted =
        std::fs::read_to_string("/proc/sys/kernel/dmesg_restrict").is_ok_and(|t| t.trim() == "1");
    if !restricted || !Path::new("/dev/kmsg").exists() {
        bcd_testkit::skip("this machine has no /dev/kmsg or kernel.dmesg_restrict is not 1");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let Some(text) = doctor_as_nobody(
        dir.path(),
        &[
            "--host-root",
            "/",
            "--nvidia-smi",
            "/nonexistent/nvidia-smi",
            "--helper-socket",
            sock.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let line = kmsg_line(&text);
    assert!(line.starts_with("warn "), "{line}");
    assert!(
        line.contains("kernel.dmesg_restrict is 1") && line.contains("CAP_SYSLOG"),
        "{line}"
    );
}

#[tokio::test]
async fn helper_ping_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let missing = SocketHelper::new(dir.path().join("none.sock"));
    let e = ping(&missing, PING_TIMEOUT).await.unwrap_err();
    assert!(matches!(e, PingError::NoSocket { .. }), "{e}");
    assert_eq!(e.status(), Status::Warn);

    // A socket file nobody listens on any more.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let e = ping(&SocketHelper::new(&stale), PING_TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(e, PingError::NotListening { .. }), "{e}");
    assert_eq!(e.status(), Status::Warn);

    let ok_dir = tempfile::tempdir().unwrap();
    let path = fake_helper(ok_dir.path(), pong);
    assert_eq!(
        ping(&SocketHelper::new(&path), PING_TIMEOUT).await.unwrap(),
        "9.9.9-test"
    );

    let denied_dir = tempfile::tempdir().unwrap();
    let path = fake_helper(denied_dir.path(), |_| {
        ServerFrame::Closing(HelperError::Denied)
    });
    let e = ping(&SocketHelper::new(&path), PING_TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Status::Fail);
    assert_eq!(e.to_string(), HelperError::Denied.to_string());

    let wrong_dir = tempfile::tempdir().unwrap();
    let path = fake_helper(wrong_dir.path(), |id| {
        ServerFrame::Response(Response {
            id: id + 1,
            result: Err(HelperError::Unsupported),
        })
    });
    let e = ping(&SocketHelper::new(&path), PING_TIMEOUT)
        .await
        .unwrap_err();
    assert!(matches!(e, PingError::Protocol { .. }), "{e}");

    // A helper that accepts and never answers.
    let mute_dir = tempfile::tempdir().unwrap();
    let mute = mute_dir.path().join("mute.sock");
    let listener = UnixListener::bind(&mute).unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let started = Instant::now();
    let e = ping(&SocketHelper::new(&mute), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(e, PingError::Timeout { .. }), "{e}");
    assert_eq!(e.status(), Status::Fail);
    assert!(e.to_string().contains("did not answer within 300ms"), "{e}");
    assert!(started.elapsed() < PING_TIMEOUT);
}

#[tokio::test]
async fn a_refusing_helper_fails_the_helper_check() {
    let (s, mut env) = env_of("a100-mig");
    env.helper = Arc::new(SocketHelper::new(fake_helper(s.dir.path(), |_| {
        ServerFrame::Closing(HelperError::Denied)
    })));
    let report = run(&env).await;
    let c = one(&report, name::HELPER);
    assert_eq!(c.status, Status::Fail);
    assert!(c.message.contains("not allowed"), "{}", c.message);
    assert_eq!(one(&report, name::GPU_BINDING).status, Status::Warn);
    assert!(!report.passed());
}

fn bcd(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn the_command_exits_1_only_when_a_check_fails() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let sock = sock.to_str().unwrap();
    let host = |name: &str| hosts().join(name).to_str().unwrap().to_owned();

    let (code, text) = bcd(&[
        "doctor",
        "--host",
        &host("no-driver"),
        "--helper-socket",
        sock,
    ]);
    assert_eq!(code, 1, "{text}");
    let nouveau = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("nouveau"))
        .unwrap();
    assert!(nouveau.starts_with("fail "), "{nouveau}");
    for line in text.lines() {
        let word = line.split_whitespace().next().unwrap();
        assert!(["ok", "warn", "fail"].contains(&word), "{line}");
    }

    let (code, text) = bcd(&[
        "doctor",
        "--host",
        &host("passthrough"),
        "--helper-socket",
        sock,
    ]);
    assert_eq!(code, 0, "warnings pass: {text}");
    assert!(
        text.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>().join(" ")
            == "ok xid-policy NVIDIA's XID catalog as it is (no --xid-ignore or --xid-unhealthy)"
        }),
        "{text}"
    );
    // What broke: the node's XID overrides were nowhere to be seen.
    let (_, text) = bcd(&[
        "doctor",
        "--host",
        &host("passthrough"),
        "--helper-socket",
        sock,
        "--xid-ignore",
        "13,31",
        "--xid-unhealthy",
        "43",
    ]);
    assert!(
        text.contains("xid-policy     XID overrides: ignored: 13,31; unhealthy until reset: 43"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("warn helper ")),
        "{text}"
    );
}

#[test]
fn json_has_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let host = hosts().join("no-driver");
    let (code, text) = bcd(&[
        "doctor",
        "--json",
        "--host",
        host.to_str().unwrap(),
        "--helper-socket",
        sock.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let top = v.as_object().unwrap();
    assert_eq!(top.keys().collect::<Vec<_>>(), ["checks", "schema_version"]);
    assert_eq!(v["schema_version"], 1);
    let checks = v["checks"].as_array().unwrap();
    assert!(!checks.is_empty());
    for c in checks {
        let o = c.as_object().unwrap();
        let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["message", "name", "status"]);
        assert!(["ok", "warn", "fail"].contains(&o["status"].as_str().unwrap()));
        assert!(!o["message"].as_str().unwrap().is_empty());
    }
    assert!(checks
        .iter()
        .any(|c| c["name"] == "nouveau" && c["status"] == "fail"));
}

// The documented demo: `bcd doctor` on hgx-no-fabric-manager fails the fabric-manager line and
// every GPU, exit 1. What broke: `bcd doctor --host X` asked this machine's systemctl (a hidden
// `--systemctl` defaulted to the one on PATH) while `bcd status --host X` asked X's; both ask
// the host's own `bin/systemctl` now, so the demo needs no hidden flag.
#[test]
fn doctor_on_the_board_without_a_fabric_manager_fails_every_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let host = hosts().join("hgx-no-fabric-manager");
    let (code, text) = bcd(&[
        "doctor",
        "--host",
        host.to_str().unwrap(),
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--helper-socket",
        dir.path().join("none.sock").to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{text}");
    let word = |name: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(name))
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(word("fabric-manager"), ["fail"], "{text}");
    assert_eq!(word("gpu"), vec!["fail"; 8], "{text}");
}
