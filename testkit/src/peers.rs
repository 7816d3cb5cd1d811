//! Real peers and skips: one rule for every test of the workspace.
//!
//! A test that runs a real peer asks for it with [`require`] (a program or library that
//! `run-tests` installs: a [`Peer`]) or [`built`] (a binary of this workspace). When it is
//! missing:
//! - without `CI`, the test is skipped: it prints `skipped: <sentence>` and returns early;
//! - with `CI` set (to anything but empty, `0` or `false`; CI sets `CI=true`), the test fails
//!   with the sentence, which names the peer and the package that brings it, so a CI run
//!   proves that every real peer ran.
//!
//! A condition no install can give (a real GPU, the `../shared` captures, a kernel without
//! Landlock, `dmesg_restrict`, not being root) goes through [`skip`], which skips also under
//! CI.
//!
//! Every skip is recorded as one line, `<reason>\t<test>`, appended to [`skip_log`]
//! (`<target>/tmp/bcd-skips.log`, in the folder cargo names `CARGO_TARGET_TMPDIR`);
//! `run-tests` clears it before the tests and prints a summary from it after them, one line
//! per reason.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The name of the skip record under the target folder's `tmp`.
const SKIP_LOG: &str = "bcd-skips.log";
/// The folder under the target folder where `run-tests` installs the peers that are not
/// system packages (a Python virtual environment, an unpacked Debian package).
const PEERS_DIR: &str = "peers";

/// A real peer that `run-tests` installs. Missing under `CI`, it fails the test that needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// `podman`, a real CDI consumer.
    Podman,
    /// `runc`, podman's OCI runtime.
    Runc,
    /// `/bin/busybox`, the containers' only program.
    Busybox,
    /// `unshare`, for a private mount namespace.
    Unshare,
    /// `mount`, inside that namespace.
    Mount,
    /// `prometheus`, a real server scraping `bcd node`.
    Prometheus,
    /// `promtool`, Prometheus's linter of the text format.
    Promtool,
    /// A `python3` that imports `grpc` and `grpc_tools`: the stand-in kubelet.
    Grpcio,
    /// The OTLP receiver's `python`, which imports `opentelemetry-proto`.
    OtlpProto,
    /// The DRA stand-ins' `python`, which imports `grpc`, `grpc_tools` and
    /// `kubernetes_validate`.
    DraStandIn,
    /// `openssl`, which makes the stand-in API server's certificate.
    Openssl,
    /// `systemd-analyze` (`verify`, `security --offline`).
    SystemdAnalyze,
    /// `systemd-socket-activate`, socket activation as systemd does it.
    SystemdSocketActivate,
    /// `virsh`, with libvirt's test driver.
    Virsh,
    /// `setpriv`, to run as a second uid.
    Setpriv,
    /// `script`, a terminal for a command.
    Script,
    /// `dpkg-deb`, to unpack the Debian package.
    DpkgDeb,
    /// `cargo deb`, to build it.
    CargoDeb,
    /// Debian's real `nvidia-smi` (non-free) with its `libnvidia-ml1`, unpacked, as a wrapper
    /// that sets the library path.
    DebianNvidiaSmi,
}

impl Peer {
    /// What the peer is called in a sentence.
    pub fn name(self) -> &'static str {
        match self {
            Self::Podman => "podman",
            Self::Runc => "runc",
            Self::Busybox => "/bin/busybox",
            Self::Unshare => "unshare",
            Self::Mount => "mount",
            Self::Prometheus => "prometheus",
            Self::Promtool => "promtool",
            Self::Grpcio => "python3 with grpcio and grpcio-tools",
            Self::OtlpProto => "the OTLP receiver's python with opentelemetry-proto",
            Self::DraStandIn => {
                "the DRA stand-ins' python with grpcio, grpcio-tools and kubernetes-validate"
            }
            Self::Openssl => "openssl",
            Self::SystemdAnalyze => "systemd-analyze",
            Self::SystemdSocketActivate => "systemd-socket-activate",
            Self::Virsh => "virsh",
            Self::Setpriv => "setpriv",
            Self::Script => "script",
            Self::DpkgDeb => "dpkg-deb",
            Self::CargoDeb => "cargo deb",
            Self::DebianNvidiaSmi => "Debian's nvidia-smi",
        }
    }

    /// Where the peer comes from: the package `run-tests` installs it from.
    pub fn package(self) -> &'static str {
        match self {
            Self::Podman => "Debian package podman",
            Self::Runc => "Debian package runc",
            Self::Busybox => "Debian package busybox-static",
            Self::Unshare | Self::Setpriv => "Debian package util-linux",
            Self::Mount => "Debian package mount",
            Self::Prometheus | Self::Promtool => "Debian package prometheus",
            Self::Grpcio => "PyPI packages grpcio and grpcio-tools",
            Self::OtlpProto => {
                "PyPI package opentelemetry-proto, in the virtual environment target/peers/otlp-venv"
            }
            Self::DraStandIn => {
                "PyPI packages grpcio, grpcio-tools and kubernetes-validate, in the virtual environment target/peers/dra-venv"
            }
            Self::Openssl => "Debian package openssl",
            Self::SystemdAnalyze | Self::SystemdSocketActivate => "Debian package systemd",
            Self::Virsh => "Debian package libvirt-clients",
            Self::Script => "Debian package bsdutils",
            Self::DpkgDeb => "Debian package dpkg",
            Self::CargoDeb => "crates.io package cargo-deb",
            Self::DebianNvidiaSmi => {
                "Debian non-free packages nvidia-smi and libnvidia-ml1, unpacked in target/peers/nvidia-smi"
            }
        }
    }

    /// The program to run for this peer, when it is there: the program itself, the `python3`
    /// that imports the library, or the wrapper `run-tests` made.
    pub fn find(self) -> Option<PathBuf> {
        match self {
            Self::Podman => on_path("podman"),
            Self::Runc => on_path("runc"),
            Self::Busybox => executable(Path::new("/bin/busybox")),
            Self::Unshare => on_path("unshare"),
            Self::Mount => on_path("mount"),
            Self::Prometheus => on_path("prometheus"),
            Self::Promtool => on_path("promtool"),
            Self::Grpcio => {
                let python = on_path("python3")?;
                imports(&python, "import grpc, grpc_tools").then_some(python)
            }
            Self::OtlpProto => {
                let python = peers_dir()?.join("otlp-venv/bin/python");
                imports(
                    &python,
                    "import opentelemetry.proto.collector.metrics.v1.metrics_service_pb2",
                )
                .then_some(python)
            }
            Self::DraStandIn => {
                let python = peers_dir()?.join("dra-venv/bin/python");
                imports(&python, "import grpc, grpc_tools, kubernetes_validate").then_some(python)
            }
            Self::Openssl => on_path("openssl"),
            Self::SystemdAnalyze => on_path("systemd-analyze"),
            Self::SystemdSocketActivate => on_path("systemd-socket-activate"),
            Self::Virsh => on_path("virsh"),
            Self::Setpriv => on_path("setpriv"),
            Self::Script => on_path("script"),
            Self::DpkgDeb => on_path("dpkg-deb"),
            Self::CargoDeb => {
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let ran = Command::new(&cargo)
                    .args(["deb", "--version"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                ran.then(|| PathBuf::from(cargo))
            }
            Self::DebianNvidiaSmi => executable(&peers_dir()?.join("nvidia-smi/nvidia-smi")),
        }
    }

    /// The sentence a test says when this peer is missing.
    pub fn missing(self) -> String {
        format!(
            "{} is missing ({}; run-tests installs it)",
            self.name(),
            self.package()
        )
    }
}

/// The peer's program, or `None` after skipping (see the module header); under `CI` a missing
/// peer panics with [`Peer::missing`].
///
/// ```no_run
/// let Some(podman) = bcd_testkit::require(bcd_testkit::Peer::Podman) else { return };
/// ```
pub fn require(peer: Peer) -> Option<PathBuf> {
    let found = peer.find();
    if found.is_none() {
        missing_peer(&peer.missing());
    }
    found
}

/// A binary this workspace builds (`bcd-helper` beside `bcd`), or `None` after skipping;
/// under `CI` a missing one fails the test: `cargo test --workspace` builds every binary.
pub fn built(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    missing_peer(&format!(
        "{name} is not built at {} (cargo test --workspace builds it)",
        path.display()
    ));
    None
}

/// A command running `program` with a fresh tmpfs of its own on `/run`, so that what it writes
/// there ends with it: `systemd-analyze` records `/run/systemd/systemd-units-load` on the host
/// otherwise. Only root can write `/run` and make a mount namespace, so for another user it is
/// the plain command; as root it needs `unshare` ([`require`]: `None` after skipping).
pub fn with_private_run(program: &Path) -> Option<Command> {
    // SAFETY-free check of the effective uid: /proc/self/status's Uid line, field 2.
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_owned))
        });
    if euid.as_deref() != Some("0") {
        return Some(Command::new(program));
    }
    let unshare = require(Peer::Unshare)?;
    let mut cmd = Command::new(unshare);
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs -o mode=0755 bcd-private-run /run && exec \"$@\"")
        .arg("sh")
        .arg(program);
    Some(cmd)
}

/// Skips for a condition no install can give (a real GPU, the shared captures, Landlock,
/// root): prints `skipped: <reason>` and records it, also under `CI`. The caller returns.
/// Keep `reason` the same from run to run (no temporary paths), so the summary counts alike
/// skips together.
pub fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
    record(reason);
}

/// Whether this run is CI's: `CI` is set to something other than empty, `0` or `false`.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

/// The target folder this test binary was built in: the folder above the profile's `deps`
/// (`<target>/debug/deps/<test binary>`). Cargo's `CACHEDIR.TAG` is no guide: cargo writes it
/// only into a target folder it made itself.
pub fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe
        .ancestors()
        .find(|dir| dir.file_name().is_some_and(|n| n == "deps"))?;
    deps.parent()?.parent().map(Path::to_path_buf)
}

/// Where `run-tests` puts the peers that are not system packages: the folder `BCD_TEST_PEERS`
/// names (`run-tests` sets it), else `<target>/peers`.
pub fn peers_dir() -> Option<PathBuf> {
    std::env::var_os("BCD_TEST_PEERS")
        .map(PathBuf::from)
        .or_else(|| target_dir().map(|t| t.join(PEERS_DIR)))
}

/// The skip record: the file `BCD_SKIP_LOG` names (`run-tests` sets it; the tests of this
/// module record their children's skips apart), else `<target>/tmp/bcd-skips.log`.
pub fn skip_log() -> Option<PathBuf> {
    std::env::var_os("BCD_SKIP_LOG")
        .map(PathBuf::from)
        .or_else(|| target_dir().map(|t| t.join("tmp").join(SKIP_LOG)))
}

fn missing_peer(sentence: &str) {
    if ci() {
        panic!("{sentence}; under CI every real peer that run-tests installs must run");
    }
    skip(sentence);
}

/// Appends `<reason>\t<test>` to the skip record. One `write` of a short line to a file opened
/// with `O_APPEND`, so tests that skip at once never interleave their lines.
fn record(reason: &str) {
    let Some(log) = skip_log() else {
        eprintln!("note: no target folder above this test binary; the skip is not recorded");
        return;
    };
    let reason = reason.replace(['\t', '\n'], " ");
    let line = format!("{reason}\t{}\n", test_name());
    let written = log
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
        })
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "note: the skip could not be recorded in {}: {e}",
            log.display()
        );
    }
}

/// `<test binary>::<test>`: libtest names each test's thread after the test.
fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
        .unwrap_or_default();
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}

/// `name` in a folder of `PATH`, as an executable file.
fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).find_map(|dir| executable(&dir.join(name)))
}

fn executable(path: &Path) -> Option<PathBuf> {
    std::fs::metadata(path)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .then(|| path.to_path_buf())
}

/// Whether `python` runs `statement` without an error.
fn imports(python: &Path, statement: &str) -> bool {
    Command::new(python)
        .args(["-c", statement])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_missing_sentence_names_the_peer_and_its_package() {
        for peer in [
            Peer::Podman,
            Peer::Grpcio,
            Peer::Script,
            Peer::DebianNvidiaSmi,
        ] {
            let sentence = peer.missing();
            assert!(sentence.starts_with(peer.name()), "{sentence}");
            assert!(sentence.contains(peer.package()), "{sentence}");
        }
    }

    // The target folder was found by cargo's CACHEDIR.TAG, which cargo does not write into a
    // target folder it did not make (run-tests made target/peers first): every peer of
    // target/peers was then "missing".
    #[test]
    fn a_test_binary_finds_its_target_folder_without_cargos_tag() {
        let target = target_dir().expect("a test binary lives in <target>/<profile>/deps");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            exe.parent().unwrap().parent().unwrap().parent(),
            Some(&*target)
        );
        assert!(target.join("debug").is_dir() || target.join("release").is_dir());
    }

    /// Run by [`a_missing_peer_fails_under_ci_and_is_a_recorded_skip_otherwise`] in a child
    /// whose `PATH` has no podman; does nothing in a plain run.
    #[test]
    fn child_requires_podman() {
        if std::env::var_os("BCD_TESTKIT_CHILD").is_some() {
            assert_eq!(require(Peer::Podman), None);
        }
    }

    // A test whose peer was missing printed "skipped" and passed, also in CI, so the tests
    // against real peers could vanish from CI without a trace.
    #[test]
    fn a_missing_peer_fails_under_ci_and_is_a_recorded_skip_otherwise() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let log = dir.join("skips.log");
        let child = |ci: Option<&str>| {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args([
                "--exact",
                "peers::tests::child_requires_podman",
                "--nocapture",
            ])
            .env("BCD_TESTKIT_CHILD", "1")
            .env("BCD_SKIP_LOG", &log)
            .env("PATH", dir)
            .env_remove("CI");
            if let Some(ci) = ci {
                cmd.env("CI", ci);
            }
            cmd.output().unwrap()
        };
        let failed = child(Some("true"));
        let said = String::from_utf8_lossy(&failed.stdout).into_owned()
            + &String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{said}");
        assert!(
            said.contains(
                "podman is missing (Debian package podman; run-tests installs it); under CI"
            ),
            "{said}"
        );
        assert!(!log.exists(), "a failure is not a skip");
        for ci in [None, Some("false"), Some("")] {
            let skipped = child(ci);
            let said = String::from_utf8_lossy(&skipped.stderr);
            assert!(skipped.status.success(), "CI={ci:?}: {said}");
            assert!(said.contains("skipped: podman is missing"), "{said}");
        }
        let records = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = records.lines().collect();
        assert_eq!(lines.len(), 3, "{records}");
        for line in lines {
            assert_eq!(
                line,
                format!(
                    "{}\tbcd_testkit::peers::tests::child_requires_podman",
                    Peer::Podman.missing()
                )
            );
        }
    }

    #[test]
    fn a_private_run_runs_the_program_with_its_arguments() {
        let Some(mut cmd) = with_private_run(Path::new("/bin/sh")) else {
            return;
        };
        let out = cmd
            .args(["-c", "echo \"$1\"", "sh", "two words"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "two words\n");
    }

    #[test]
    fn a_program_that_is_not_there_is_not_found() {
        assert_eq!(on_path("bcd-no-such-program"), None);
        assert_eq!(executable(Path::new("/")), None);
        assert!(on_path("sh").is_some());
    }

    #[test]
    fn the_test_name_is_the_binary_and_the_test() {
        let name = test_name();
        assert!(
            name.ends_with("::peers::tests::the_test_name_is_the_binary_and_the_test"),
            "{name}"
        );
        assert!(name.starts_with("bcd_testkit::"), "{name}");
    }
}
