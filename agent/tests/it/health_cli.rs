//! `bcd diag` and `bcd status` on the fake hosts: each diag check failing where its host
//! breaks it, the `nvml.init` stop, the exit statuses, and the one verdict that status, doctor,
//! diag and the node's `/v1/status` lines give every GPU of every demo host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

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

/// The GPUs with a failed check in `checks`, in order, each once.
fn failed_gpus(checks: &[CheckRow]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, gpu, passed) in checks {
        if let (Some(g), false) = (gpu, passed) {
            if !out.contains(g) {
                out.push(g.clone());
            }
        }
    }
    out
}

// What broke: diag passed the two GPUs of hgx-faults whose NVLink fabric bcd status calls
// unhealthy (a route, a fabric the manager has not finished), and every GPU of a board whose
// fabric manager is down: it fails each GPU whose verdict is unhealthy, with the reason as a
// check of its own, and warns on the degraded one.
#[test]
fn diag_fails_the_gpus_whose_verdict_is_unhealthy_and_warns_on_the_degraded_one() {
    let out = bcd("hgx-faults", &["diag", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = json["checks"].as_array().unwrap();
    let rows: Vec<CheckRow> = checks
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["gpu"].as_str().map(str::to_owned),
                c["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    let fabric: Vec<(&str, Option<&str>)> = failed(&rows)
        .into_iter()
        .filter(|(c, _)| *c == "fabric")
        .collect();
    assert_eq!(
        fabric,
        [
            ("fabric", Some("GPU-30e15e2f-5971-0b16-04be-39a46d1071ce")),
            ("fabric", Some("GPU-8032961a-3b38-ab58-6c00-1b9ef125ea99")),
        ]
    );
    // GPUs 0, 1, 2, 5, 6, 7: unhealthy in bcd status too.
    assert_eq!(failed_gpus(&rows).len(), 6, "{rows:?}");
    let warned: Vec<&serde_json::Value> = checks
        .iter()
        .filter(|c| c.get("severity").is_some())
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(
        (
            warned[0]["check"].as_str(),
            warned[0]["gpu"].as_str(),
            warned[0]["passed"].as_bool(),
            warned[0]["severity"].as_str()
        ),
        (
            Some("throttling"),
            Some("GPU-123a1421-1172-b334-14d9-b65b34232574"),
            Some(true),
            Some("warn")
        )
    );
    let (code, _, rows) = diag("hgx-no-fabric-manager", &[]);
    assert_eq!(code, 1);
    let down: Vec<(&str, Option<&str>)> = failed(&rows);
    assert_eq!(down.len(), 8, "{down:?}");
    assert!(down.iter().all(|(c, _)| *c == "fabric-manager"), "{down:?}");
}

// What broke: diag failed the GPU whose PCIe link trained at x8 while bcd status called it
// healthy; the narrowed link is the verdict's (degraded) now, and diag passes it with a warning.
#[test]
fn r470_old_warns_pcie_link_for_the_narrowed_gpu_only() {
    let (code, passed, checks) = diag("r470-old", &[]);
    assert_eq!((code, passed), (0, true), "{checks:?}");
    let out = bcd("r470-old", &["diag", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let warned: Vec<(&str, &str)> = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["severity"] == "warn")
        .map(|c| (c["check"].as_str().unwrap(), c["gpu"].as_str().unwrap()))
        .collect();
    assert_eq!(
        warned,
        [("pcie.link", "GPU-770a8583-ddab-d174-2973-722164bb8d69")]
    );
}

// What broke: on a driver before R410 (whose -q -x has no cuda_version) diag failed nvml.init
// with "nvidia-smi did not answer" although it answered and both GPUs parsed.
#[test]
fn a_driver_before_r410_passes_nvml_init() {
    let dir = tempfile::tempdir().unwrap();
    for what in ["r470-old", "replay-nvidia-smi"] {
        let copied = Command::new("cp")
            .arg("-a")
            .arg(hosts().join(what))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(copied.success());
    }
    let host = dir.path().join("r470-old");
    let qx = host.join("answers/q-x.out");
    let xml = std::fs::read_to_string(&qx)
        .unwrap()
        .replace("\t<cuda_version>11.4</cuda_version>\n", "");
    std::fs::write(&qx, xml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(&host)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--api-socket")
        .arg(dir.path().join("no-node.sock"))
        .args(["diag", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let init = &json["checks"][0];
    assert_eq!(init["check"], "nvml.init");
    assert_eq!(init["passed"], true, "{init}");
    assert_eq!(
        init["message"],
        "driver 470.256.02, CUDA unknown (nvidia-smi reports it from driver R410 on)"
    );
    assert_eq!(json["checks"].as_array().unwrap().len(), 1 + 2 * 6);
    assert_eq!(out.status.code(), Some(0), "the narrowed link only warns");
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
    // A header, eight GPUs, and the note that the fresh data folder holds no XID record.
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("note: no XID record: "),
        "{text}"
    );
    assert!(!text.contains("UNHEALTHY"), "{text}");
    let out = bcd("no-driver", &["status"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "no sample: bcd could not do its job"
    );
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("nvml: nvidia-smi not found (no NVIDIA driver on this host)"));
}

/// `bcd ARGS` on the demo host with `data` as its data folder and no node.
fn bcd_with_data(data: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(hosts().join("hgx-h100"))
        .arg("--data-dir")
        .arg(data)
        .arg("--api-socket")
        .arg(data.with_file_name("no-node.sock"))
        .args(args)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

// What broke: without a node and a data folder holding faults.json, diag's xid.recent said
// "no XIDs this boot" and status judged as if there were none, although nothing had been
// read: both say there is no record now, and where it would be.
#[test]
fn diag_and_status_without_a_record_say_there_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let text = bcd_with_data(&missing, &["diag"]);
    let expected = format!(
        "no XID record: {} does not exist, so no bcd node kept one there",
        missing.display()
    );
    // The same sentence for all eight GPUs is one line.
    let xid_lines: Vec<&str> = text.lines().filter(|l| l.contains("xid.recent")).collect();
    assert_eq!(xid_lines.len(), 1, "{text}");
    assert!(xid_lines[0].contains(" every GPU "), "{text}");
    assert!(
        xid_lines
            .iter()
            .all(|l| l.starts_with("ok ") && l.contains(&expected)),
        "{text}"
    );
    assert!(!text.contains("no XIDs this boot"), "{text}");
    let text = bcd_with_data(&missing, &["status"]);
    assert!(text.contains(&format!("note: {expected}")), "{text}");

    // The folder is there, without the file.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let file = empty.join("faults.json");
    let said = format!("no XID record: there is no {}", file.display());
    assert!(bcd_with_data(&empty, &["diag"]).contains(&said));
    assert!(bcd_with_data(&empty, &["status"]).contains(&format!("note: {said}")));

    // A record of this boot without XIDs: no XIDs, and no note.
    let boot =
        std::fs::read_to_string(hosts().join("hgx-h100/root/proc/sys/kernel/random/boot_id"))
            .unwrap();
    std::fs::write(
        &file,
        format!("{{\"boot_id\": \"{}\", \"conditions\": []}}", boot.trim()),
    )
    .unwrap();
    let text = bcd_with_data(&empty, &["diag"]);
    assert_eq!(text.matches("no XIDs this boot").count(), 1, "{text}");
    assert!(!bcd_with_data(&empty, &["status"]).contains("note: "));
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
pub(crate) fn stand_in_node(
    socket: &Path,
    body: serde_json::Value,
) -> std::thread::JoinHandle<String> {
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
                "name": "NVIDIA H100 80GB HBM3", "bus_id": "00000000:18:00.0",
                "utilization_gpu_pct": 97,
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
    let row = text.lines().nth(1).unwrap();
    assert!(
        row.starts_with(
            "0    NVIDIA H100 80GB HBM3  0000:18:00.0  HEALTHY  97 %  45123 MiB / 81559 MiB"
        ),
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

/// Every demo host: the folders of `testdata/hosts` with a `root/`.
fn demo_hosts() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(hosts())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("root").is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// A state as a check word: `ok` healthy, `warn` degraded, `fail` unhealthy or unknown.
fn word(state: bcd::health::verdict::HealthState) -> &'static str {
    use bcd::health::verdict::HealthState;
    match state {
        HealthState::Healthy => "ok",
        HealthState::Degraded => "warn",
        HealthState::Unhealthy | HealthState::Unknown => "fail",
    }
}

/// Per GPU UUID, the word each reader gives it.
type Judged = BTreeMap<String, &'static str>;

/// A node on `host`, its state in `dir`, after one collection: what `/v1/status` lists.
async fn node_statuses(host: bcd::sys::host::Host, dir: &Path) -> Judged {
    use bcd::node::shared::{Node, NodeConfig};
    let data = dir.join("node-data");
    std::fs::create_dir_all(&data).unwrap();
    let config = NodeConfig {
        host,
        data_dir: data.clone(),
        runtime_dir: dir.join("node-run"),
        cdi_dir: dir.join("node-cdi"),
        helper_socket: dir.join("no-helper.sock"),
        api_socket: dir.join("bcd.sock"),
        api_group: None,
        metrics_listen: None,
        sample_interval: Duration::from_secs(5),
        otlp_endpoint: None,
        gpu_slots: 0,
        xid_policy: bcd::health::xid::XidPolicy::default(),
        metrics_compat: None,
        mig_config: dir.join("mig-config.yaml"),
        mig_layout: None,
        nvidia_cdi_spec: None,
        remediate: None,
    };
    let helper = std::sync::Arc::new(bcd::helper_client::SocketHelper::new(
        dir.join("no-helper.sock"),
    ));
    let node = Node::open(config, helper).node;
    node.collect_now().await;
    node.gpu_statuses()
        .await
        .into_iter()
        .map(|g| (g.uuid.to_string(), word(g.health)))
        .collect()
}

/// What status, doctor, diag and (but on `wedged`) the node say of each GPU of `name`.
async fn every_reader(name: &str) -> [(&'static str, Judged); 4] {
    use bcd::health::xid::XidPolicy;
    const BOUND: Duration = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let host = bcd::sys::host::Host::fake(hosts().join(name));
    let policy = XidPolicy::default();
    let status: Judged =
        match bcd::health::status::status_within(&host, dir.path(), &policy, BOUND).await {
            Ok(r) => r
                .gpus
                .iter()
                .map(|g| (g.uuid.to_string(), word(g.health)))
                .collect(),
            Err(e) => {
                assert!(
                    matches!(e, bcd::health::status::StatusError::NoDriver),
                    "{name}: {e}"
                );
                Judged::new()
            }
        };
    let mut env = bcd::doctor::DoctorEnv::new(host.clone(), dir.path().join("no-helper.sock"));
    // `--host` means the host's own systemctl, for doctor as for status.
    env.query_timeout = BOUND;
    env.data_dir = Some(dir.path().to_path_buf());
    let doctor: Judged = bcd::doctor::run(&env)
        .await
        .named(bcd::doctor::checks::name::GPU)
        .map(|c| {
            // `GPU 0 (GPU-...), <model>, ...`: the UUID in the brackets.
            let named = c.message.split(',').next().unwrap();
            let uuid = named
                .split_once('(')
                .and_then(|(_, r)| r.strip_suffix(')'))
                .unwrap_or(named)
                .to_owned();
            (uuid, c.status.word())
        })
        .collect();
    let runner = bcd::smi::runner::Runner::new(host.nvidia_smi()).with_timeout(BOUND);
    let report = bcd::health::diag::diag_host(
        &host,
        &runner,
        dir.path(),
        &policy,
        &bcd::health::diag::DiagRequest::default(),
    )
    .await;
    let mut diag = Judged::new();
    for c in &report.checks {
        let Some(gpu) = &c.gpu else { continue };
        let w = match (c.passed, c.severity) {
            (false, _) => "fail",
            (true, Some(_)) => "warn",
            (true, None) => "ok",
        };
        let seen = diag.entry(gpu.to_string()).or_insert("ok");
        if (w == "fail") || (w == "warn" && *seen == "ok") {
            *seen = w;
        }
    }
    if diag.is_empty() && !report.passed {
        // nvml.init failed and stopped the rest: every GPU's diag failed.
        diag = status.keys().map(|u| (u.clone(), "fail")).collect();
    }
    // The node's collection waits out nvidia-smi's whole 30 s bound on the wedged host; its
    // silent GPUs' verdict is the node's unit test's (a_silent_nvidia_smi_keeps_...).
    let node = if name == "wedged" {
        status.clone()
    } else {
        node_statuses(host, dir.path()).await
    };
    [
        ("status", status),
        ("doctor", doctor),
        ("diag", diag),
        ("/v1/status", node),
    ]
}

// What broke: three health answers. On hgx-faults bcd status called 6 GPUs unhealthy and one
// degraded while doctor printed `ok gpu` for all 8 and diag passed the fabric faults; on
// hgx-no-fabric-manager status failed all 8 while diag passed. Every reader gives each GPU of
// every demo host the same verdict now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_doctor_diag_and_the_node_agree_on_every_gpu_of_every_demo_host() {
    let names = demo_hosts();
    assert!(names.len() >= 9, "{names:?}");
    let judged = futures_join_all(&names).await;
    let mut counts = BTreeMap::new();
    for (name, readers) in names.iter().zip(judged) {
        let (_, status) = &readers[0];
        for (reader, seen) in &readers[1..] {
            assert_eq!(seen, status, "{name}: {reader} against bcd status");
        }
        let mut n = [0; 3];
        for w in status.values() {
            n[["ok", "warn", "fail"].iter().position(|x| x == w).unwrap()] += 1;
        }
        counts.insert(name.as_str(), n);
    }
    // [ok, warn, fail] per host, as its README documents it.
    let expected = BTreeMap::from([
        ("a100-mig", [2, 0, 0]),
        ("hgx-faults", [1, 1, 6]),
        ("hgx-h100", [8, 0, 0]),
        ("hgx-no-fabric-manager", [0, 0, 8]),
        ("no-driver", [0, 0, 0]),
        ("passthrough", [1, 0, 0]),
        ("r470-old", [1, 1, 0]),
        ("wedged", [0, 0, 1]),
        ("wsl2", [1, 0, 0]),
    ]);
    assert_eq!(counts, expected);
}

/// [`every_reader`] for each host, all at once (the wedged host's bounds run meanwhile).
async fn futures_join_all(names: &[String]) -> Vec<[(&'static str, Judged); 4]> {
    let tasks: Vec<_> = names
        .iter()
        .map(|n| {
            let n = n.clone();
            tokio::spawn(async move { every_reader(&n).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// `bcd status` on the hgx-h100 demo host with `args`, and `NO_COLOR` as `no_color` says;
/// no node answers.
fn status_on_hgx(args: &[&str], no_color: Option<&str>) -> Output {
    let data = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bcd"));
    cmd.arg("--host")
        .arg(hosts().join("hgx-h100"))
        .arg("--data-dir")
        .arg(data.path())
        .arg("--api-socket")
        .arg(data.path().join("no-node.sock"))
        .arg("status")
        .args(args)
        .env_remove("NO_COLOR");
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    cmd.output().unwrap()
}

// What broke: `bcd status` could not be pointed at one GPU, and gave a script no shape but
// free-form lines or the whole JSON.
#[test]
fn status_picks_gpus_by_any_name_and_speaks_csv() {
    let out = status_on_hgx(
        &[
            "--format",
            "csv",
            "-i",
            "0",
            "--id",
            "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a,00000000:3A:00.0",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let first: Vec<&str> = text.lines().map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(first, ["index", "0", "1", "2"], "{text}");
    let out = status_on_hgx(&["--format", "json", "-i", "0000:db:00.0"], None);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["gpus"].as_array().unwrap().len(), 1);
    assert_eq!(doc["gpus"][0]["index"], 7);
    assert_eq!(doc["gpus"][0]["bus_id"], "00000000:DB:00.0");
    // An id of no GPU here is a usage error, in the error document under --json.
    let out = status_on_hgx(&["-i", "8"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("-i 8: no GPU of this node has this index")
    );
    let out = status_on_hgx(
        &["--json", "-i", "GPU-00000000-0000-0000-0000-000000000000"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["code"], "usage");
    let out = status_on_hgx(&["-i", "gpu0"], None);
    assert_eq!(
        out.status.code(),
        Some(2),
        "not a name of a GPU in any form"
    );
}

// What broke: nothing marked a GPU's state; colour must reach a terminal only, the state
// word only, and never past NO_COLOR or --color never.
#[test]
fn status_colours_the_state_words_on_a_terminal_only() {
    let piped = status_on_hgx(&[], None);
    assert!(!piped.stdout.contains(&0x1b), "a pipe gets no colour");
    let forced = status_on_hgx(&["--color", "always"], Some("1"));
    let text = String::from_utf8_lossy(&forced.stdout);
    assert_eq!(text.matches("\x1b[32mHEALTHY\x1b[0m").count(), 8, "{text}");
    // The same table, less the colour: the columns do not move.
    let table = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("note: "))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        table(&text.replace("\x1b[32m", "").replace("\x1b[0m", "")),
        table(&String::from_utf8_lossy(&piped.stdout))
    );
    // On a terminal (script(1) gives it one), colour unless NO_COLOR or --color never.
    let Some(on_tty) = through_a_terminal(&[]) else {
        eprintln!("skipped: script(1) is not here");
        return;
    };
    assert!(on_tty.contains("\x1b[32mHEALTHY\x1b[0m"), "{on_tty:?}");
    assert!(
        on_tty.contains("GPU  NAME "),
        "the header on a terminal too: {on_tty:?}"
    );
    let never = through_a_terminal(&["--color", "never"]).unwrap();
    assert!(!never.contains('\x1b'), "{never:?}");
    let no_color = through_a_terminal_with(&[], Some("1")).unwrap();
    assert!(!no_color.contains('\x1b'), "{no_color:?}");
}

/// `bcd status args` on hgx-h100 with a terminal for stdout, through `script -q -c`; `None`
/// when script(1) is missing.
fn through_a_terminal(args: &[&str]) -> Option<String> {
    through_a_terminal_with(args, None)
}

fn through_a_terminal_with(args: &[&str], no_color: Option<&str>) -> Option<String> {
    let data = tempfile::tempdir().unwrap();
    let mut line = vec![
        env!("CARGO_BIN_EXE_bcd").to_owned(),
        "--host".into(),
        hosts().join("hgx-h100").display().to_string(),
        "--data-dir".into(),
        data.path().display().to_string(),
        "--api-socket".into(),
        data.path().join("no.sock").display().to_string(),
        "status".into(),
    ];
    line.extend(args.iter().map(|a| (*a).to_owned()));
    let quoted: Vec<String> = line.iter().map(|a| format!("'{a}'")).collect();
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &quoted.join(" "), "/dev/null"])
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null());
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let out = cmd.output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

// What broke: diag and hardware could be pointed at a GPU by its UUID alone (diag) or not
// at all (hardware); `-i` takes an index, a UUID or a bus id in either form.
#[test]
fn diag_and_hardware_pick_gpus_by_any_name() {
    let out = bcd("hgx-h100", &["diag", "--json", "-i", "1,00000000:DB:00.0"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut gpus: Vec<&str> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["gpu"].as_str())
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    assert_eq!(
        gpus,
        [
            "GPU-70823a7e-f12c-9777-a04d-fa2e9a8cf5b8",
            "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
        ],
        "{doc:#}"
    );
    let out = bcd("hgx-h100", &["hardware", "-i", "0000:2a:00.0"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let gpus: Vec<&str> = text.lines().filter(|l| l.starts_with("GPU ")).collect();
    assert_eq!(gpus.len(), 1, "{text}");
    assert!(
        gpus[0].starts_with("GPU 1, ") && gpus[0].contains(", 0000:2a:00.0, "),
        "{text}"
    );
    for command in ["diag", "hardware"] {
        let out = bcd("hgx-h100", &[command, "-i", "0000:99:00.0"]);
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("-i 0000:99:00.0: no GPU of this node has this bus id"),
            "{command}"
        );
    }
}
