//! `bcd diag` and `bcd status` on the fake hosts: each diag check failing where its host
//! breaks it, the `nvml.init` stop, and the exit statuses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hosts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
}

/// Runs `bcd` against a fake host with a fresh data folder.
fn bcd(host: &str, args: &[&str]) -> Output {
    let data = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(hosts().join(host))
        .arg("--data-dir")
        .arg(data.path())
        .args(args)
        .output()
        .unwrap()
}

/// One check of `bcd diag --json`: (check, gpu, passed).
type CheckRow = (String, Option<String>, bool);

/// The exit status, `passed` and the checks of `bcd diag --json`.
fn diag(host: &str, args: &[&str]) -> (i32, bool, Vec<CheckRow>) {
    let mut all = vec!["diag", "--json"];
    all.extend_from_slice(args);
    let out = bcd(host, &all);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let checks = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["gpu"].as_str().map(str::to_owned),
                c["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    (
        out.status.code().unwrap(),
        json["passed"].as_bool().unwrap(),
        checks,
    )
}

fn failed(checks: &[CheckRow]) -> Vec<(&str, Option<&str>)> {
    checks
        .iter()
        .filter(|c| !c.2)
        .map(|c| (c.0.as_str(), c.1.as_deref()))
        .collect()
}

#[test]
fn hgx_h100_passes_every_check() {
    let (code, passed, checks) = diag("hgx-h100", &[]);
    assert_eq!((code, passed), (0, true));
    // nvml.init, then six checks for each of the eight GPUs.
    assert_eq!(checks.len(), 1 + 8 * 6);
}

// What broke: diag passed GPUs whose driver asked for a reset or a reboot.
#[test]
fn hgx_faults_fails_recovery_action_where_the_driver_asks_for_one() {
    let (code, _, checks) = diag("hgx-faults", &[]);
    assert_eq!(code, 1);
    let failed: Vec<&str> = failed(&checks)
        .into_iter()
        .filter(|(c, _)| *c == "recovery-action")
        .filter_map(|(_, g)| g)
        .collect();
    assert_eq!(
        failed,
        [
            "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
            "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
            "GPU-de2e2aa2-202d-33bc-abdc-234d0197d1b8",
            "GPU-70823a7e-f12c-9777-a04d-fa2e9a8cf5b8",
        ]
    );
}

#[test]
fn r470_old_fails_pcie_link_for_the_narrowed_gpu_only() {
    let (code, _, checks) = diag("r470-old", &[]);
    assert_eq!(code, 1);
    assert_eq!(
        failed(&checks),
        [(
            "pcie.link",
            Some("GPU-770a8583-ddab-d174-2973-722164bb8d69")
        )]
    );
}

#[test]
fn no_driver_fails_nvml_init_and_stops() {
    let (code, _, checks) = diag("no-driver", &[]);
    assert_eq!(code, 1);
    assert_eq!(checks.len(), 1);
    assert_eq!(failed(&checks), [("nvml.init", None)]);
    let out = bcd("no-driver", &["diag"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("FAIL nvml.init") && text.contains("NVML is not available on this node"),
        "{text}"
    );
}

#[test]
fn count_and_presence_fail_on_request() {
    let (code, _, checks) = diag("hgx-h100", &["--expected-gpus", "9"]);
    assert_eq!(code, 1);
    assert_eq!(failed(&checks), [("gpu.count", None)]);
    let (code, _, checks) = diag("hgx-h100", &["--expected-gpus", "8"]);
    assert_eq!(code, 0, "{checks:?}");
    let unknown = "GPU-00000000-1111-2222-3333-444444444444";
    let (code, _, checks) = diag(
        "hgx-h100",
        &[
            "--gpu",
            unknown,
            "--gpu",
            "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(failed(&checks), [("gpu.present", Some(unknown))]);
    // Only the GPU asked for is checked: presence twice, nvml.init, six checks.
    assert_eq!(checks.len(), 1 + 2 + 6);
}

#[test]
fn wsl2_without_sysfs_link_widths_passes_pcie_link() {
    let (code, passed, _) = diag("wsl2", &[]);
    assert_eq!((code, passed), (0, true));
}

#[test]
fn status_prints_one_line_per_gpu_and_fails_without_a_driver() {
    let out = bcd("hgx-h100", &["status"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 8, "{text}");
    assert!(!text.contains("UNHEALTHY"), "{text}");
    let out = bcd("no-driver", &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("nvml: nvidia-smi not found (no NVIDIA driver on this host)"));
}

/// A copy of the demo host whose `nvidia-smi` appends each start's arguments to `runs`.
fn counting_host(dir: &Path) -> (PathBuf, PathBuf) {
    let host = dir.join("host");
    let runs = dir.join("runs");
    let status = Command::new("cp")
        .arg("-a")
        .arg(hosts().join("hgx-h100"))
        .arg(&host)
        .status()
        .unwrap();
    assert!(status.success());
    let replay = hosts().join("replay-nvidia-smi");
    std::fs::write(
        host.join("bin/nvidia-smi"),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{}' '{}' \"$@\"\n",
            runs.display(),
            replay.display(),
            host.join("answers").display()
        ),
    )
    .unwrap();
    (host, runs)
}

fn runs(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

// What broke: on the MIG demo host bcd status started -q -x twice (the health fields, then
// the sample's fall back); it reads it once now.
#[test]
fn status_reading_itself_starts_q_x_once() {
    let dir = tempfile::tempdir().unwrap();
    let (host, file) = counting_host(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(&host)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--api-socket")
        .arg(dir.path().join("no-node.sock"))
        .arg("status")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("HEALTHY").count(), 8, "{text}");
    let all = runs(&file);
    let qx = all.iter().filter(|r| *r == "-q -x").count();
    assert_eq!(qx, 1, "-q -x ran {qx} times: {all:?}");
    eprintln!(
        "bcd status, reading itself: {} nvidia-smi starts: {all:?}",
        all.len()
    );
}

/// A stand-in `bcd node` on `socket`: answers one request (head and the body its
/// Content-Length announces) with `body` as JSON, and returns what it was sent.
fn stand_in_node(socket: &Path, body: serde_json::Value) -> std::thread::JoinHandle<String> {
    use std::io::{Read, Write};
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).unwrap();
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen).into_owned();
            let whole = text.find("\r\n\r\n").is_some_and(|end| {
                let len: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_owned())
                    })
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                seen.len() >= end + 4 + len
            });
            if whole || n == 0 {
                break;
            }
        }
        let body = body.to_string();
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        String::from_utf8_lossy(&seen).into_owned()
    })
}

// What broke: bcd status never asked a running bcd node, which holds the latest inventory,
// conditions and samples, and read nvidia-smi 9 times instead.
#[test]
fn status_asks_a_running_node_and_starts_no_nvidia_smi() {
    let dir = tempfile::tempdir().unwrap();
    let (host, file) = counting_host(dir.path());
    let socket = dir.path().join("bcd.sock");
    let server = stand_in_node(
        &socket,
        serde_json::json!({
            "collections": 3,
            "inventory_age_s": 12,
            "nvidia_smi_error": null,
            "problems": ["the root helper cannot be reached"],
            "sampling": {"loop_mode": true, "restarts": 0, "mig_memory_reads": 1},
            "gpus": [{
                "index": 0, "uuid": "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
                "name": "NVIDIA H100 80GB HBM3", "utilization_gpu_pct": 97,
                "memory_used_mib": 45123, "memory_total_mib": 81559, "compute_processes": 3,
                "healthy": true, "health": "healthy"
            }]
        }),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(&host)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--api-socket")
        .arg(&socket)
        .arg("status")
        .output()
        .unwrap();
    let request = server.join().unwrap();
    assert!(request.starts_with("GET /v1/status"), "{request}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("GPU 0  NVIDIA H100 80GB HBM3  97% busy  45123/81559 MiB"),
        "{text}"
    );
    assert!(text.contains("note: from bcd node at"), "{text}");
    assert!(runs(&file).is_empty(), "nvidia-smi ran: {:?}", runs(&file));
}

// `bcd diag` always collected by itself, even beside a running node that already holds the
// GPUs' state (and shares one collection among concurrent diags); it now asks the node first.
#[test]
fn diag_asks_a_running_node_and_starts_no_nvidia_smi() {
    let dir = tempfile::tempdir().unwrap();
    let (host, file) = counting_host(dir.path());
    let socket = dir.path().join("bcd.sock");
    let server = stand_in_node(
        &socket,
        serde_json::json!({
            "passed": false,
            "checks": [
                {"check": "nvml.init", "passed": true, "message": "the driver answered"},
                {"check": "gpu.count", "passed": false, "message": "7 GPUs, 8 expected"}
            ]
        }),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(&host)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--api-socket")
        .arg(&socket)
        .args(["diag", "--expected-gpus", "8"])
        .output()
        .unwrap();
    let request = server.join().unwrap();
    assert!(request.starts_with("POST /v1/diag"), "{request}");
    assert!(request.contains("\"expected_gpus\":8"), "{request}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a failed check exits 1: {text}");
    assert!(text.contains("gpu.count"), "{text}");
    assert!(text.contains("7 GPUs, 8 expected"), "{text}");
    assert!(runs(&file).is_empty(), "nvidia-smi ran: {:?}", runs(&file));
}

// A command stuck on a wedged nvidia-smi printed nothing for up to 30 s; on a terminal it now
// says what it waits for (and never when its stderr is not a terminal).
#[test]
fn a_command_waiting_on_nvidia_smi_says_so_on_a_terminal_only() {
    let Some(script) = bcd_testkit::require(bcd_testkit::Peer::Script) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bcd = env!("CARGO_BIN_EXE_bcd");
    let command = format!(
        "{bcd} --host {} --data-dir {} --api-socket {} status",
        hosts().join("wedged").display(),
        dir.path().join("data").display(),
        dir.path().join("none.sock").display()
    );
    // script gives the command a pseudo-terminal; 4 s is past the 2 s before the line shows.
    let out = Command::new("timeout")
        .args([
            "4",
            script.to_str().unwrap(),
            "-qfec",
            &command,
            "/dev/null",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // The wedged host's first hung query is the sample's.
    assert!(
        text.contains("waiting for nvidia-smi --query-gpu --format: 2 s of 30 s")
            || text.contains("waiting for nvidia-smi --query-gpu --format: 3 s of 30 s"),
        "{text}"
    );
    // Not a terminal: nothing of the kind.
    let out = Command::new("timeout")
        .args(["4", bcd])
        .arg("--host")
        .arg(hosts().join("wedged"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--api-socket")
        .arg(dir.path().join("none.sock"))
        .arg("status")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("waiting for"));
}
