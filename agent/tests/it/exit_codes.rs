//! The exit statuses every command shares (0 all well, 1 a problem found, 3 bcd could not do
//! its job, 2 usage), `--json` meaning one JSON document on stdout whatever happened, and the
//! `schema_version` every document carries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hosts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
}

/// `bcd ARGS` against the demo host `host`, with `data` as its data folder and no node.
fn bcd_in(data: &Path, host: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(hosts().join(host))
        .arg("--data-dir")
        .arg(data)
        .arg("--api-socket")
        .arg(data.join("no-node.sock"))
        .args(args)
        .output()
        .unwrap()
}

fn bcd(host: &str, args: &[&str]) -> Output {
    let data = tempfile::tempdir().unwrap();
    bcd_in(data.path(), host, args)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}, stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A host whose nvidia-smi fails at once (the GPUs are in procfs and sysfs).
fn failing_nvidia_smi(dir: &Path) -> [String; 4] {
    use std::os::unix::fs::PermissionsExt;
    let smi = dir.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho 'Failed to initialize NVML: Unknown Error' >&2\nexit 255\n",
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    [
        "--host-root".into(),
        hosts().join("hgx-h100/root").display().to_string(),
        "--nvidia-smi".into(),
        smi.display().to_string(),
    ]
}

fn bcd_args(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(failing_nvidia_smi(dir))
        .arg("--data-dir")
        .arg(dir)
        .arg("--api-socket")
        .arg(dir.join("no-node.sock"))
        .args(args)
        .output()
        .unwrap()
}

// What broke: bcd status exited 0 with UNHEALTHY GPUs, so a script could not tell a sick
// board from a healthy one.
#[test]
fn status_exits_1_when_a_gpu_is_unhealthy_and_0_when_all_take_work() {
    assert_eq!(bcd("hgx-h100", &["status"]).status.code(), Some(0));
    let out = bcd("hgx-faults", &["status"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("UNHEALTHY"));
    // A degraded GPU takes work: r470-old has one, and no unhealthy one.
    assert_eq!(bcd("r470-old", &["status"]).status.code(), Some(0));
}

// What broke: bcd hardware exited 0 when nvidia-smi failed, and status 1 (a problem found)
// where bcd could not do its job at all.
#[test]
fn hardware_and_status_exit_3_when_nvidia_smi_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out = bcd_args(dir.path(), &["hardware"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("GPU(s)"));
    let out = bcd_args(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = bcd_args(dir.path(), &["status", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(json(&out)["nvidia_smi_error"].is_string(), "{out:?}");
    let out = bcd("no-driver", &["status", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let doc = json(&out);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["error"]["code"], "no-driver", "{doc}");
    assert!(doc["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no NVIDIA driver"));
}

// What broke: bcd hardware on a host with two NVIDIA GPUs on the bus and no driver said "no
// NVIDIA GPU found on this host" and exited 0.
#[test]
fn hardware_without_a_driver_names_the_gpus_on_the_bus_and_exits_3() {
    let out = bcd("no-driver", &["hardware"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("no NVIDIA GPU"), "{text}");
    assert!(
        text.contains("2 NVIDIA GPUs on the PCI bus (2 with no driver bound) but no NVIDIA driver answers: install the NVIDIA driver"),
        "{text}"
    );
    let out = bcd("no-driver", &["hardware", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let doc = json(&out);
    assert_eq!(doc["error"]["code"], "no-driver", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("2 NVIDIA GPUs on the PCI bus"),
        "{doc}"
    );
}

// What broke: with --json a refusal or an unreachable node came as plain text on stderr, and
// scripts reading stdout got nothing to parse.
#[test]
fn json_failures_are_an_error_document_on_stdout_with_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["hold", "list", "--json"][..],
        &[
            "gpu",
            "reset",
            "--json",
            "GPU-8f4c6a52-1b2e-4d3a-9c7f-0123456789ab",
        ][..],
        &["vfio", "bind", "--json", "0000:18:00.0"][..],
    ] {
        let out = bcd_in(dir.path(), "hgx-h100", args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        let doc = json(&out);
        assert_eq!(doc["schema_version"], 1, "{doc}");
        assert_eq!(doc["error"]["code"], "node-unreachable", "{doc}");
        assert!(
            doc["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("cannot reach the bcd node service at "),
            "{doc}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args([
            "--helper-socket",
            &dir.path().join("none").display().to_string(),
        ])
        .args(["helper", "ping", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(json(&out)["error"]["code"], "helper-failed");
    // Usage stays clap's 2.
    let out = bcd("hgx-h100", &["status", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

// What broke: bcd gpu reset --json exited 0 when the reset failed (the exit status came from
// the text renderer, which --json skipped).
#[test]
fn gpu_reset_exits_3_when_a_reset_failed_and_1_when_a_gpu_stays_unhealthy_json_or_not() {
    let uuid = "GPU-8f4c6a52-1b2e-4d3a-9c7f-0123456789ab";
    let cases = [
        (
            serde_json::json!({"gpus": [{"uuid": uuid, "error": "the helper said no", "healthy": false, "conditions_cleared": 0}]}),
            3,
        ),
        (
            serde_json::json!({"gpus": [{"uuid": uuid, "healthy": false, "reasons": ["row remap pending"], "conditions_cleared": 0}]}),
            1,
        ),
        (
            serde_json::json!({"gpus": [{"uuid": uuid, "healthy": true, "conditions_cleared": 2}]}),
            0,
        ),
    ];
    for (answer, expected) in cases {
        for json_flag in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("bcd.sock");
            let node = super::health_cli::stand_in_node(&socket, answer.clone());
            let mut args = vec!["--api-socket".to_owned(), socket.display().to_string()];
            if json_flag {
                args.push("--json".into());
            }
            args.extend(["gpu".into(), "reset".into(), uuid.into()]);
            let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
                .args(&args)
                .output()
                .unwrap();
            node.join().unwrap();
            assert_eq!(
                out.status.code(),
                Some(expected),
                "{answer} --json {json_flag}: {out:?}"
            );
            if json_flag {
                assert_eq!(json(&out)["gpus"][0]["uuid"], uuid);
            }
        }
    }
}

// What broke: no JSON document said which version of its keys it carries.
#[test]
fn every_json_document_carries_a_schema_version() {
    for args in [
        &["hardware", "--json"][..],
        &["hardware", "--labels", "--json"][..],
        &["status", "--json"][..],
        &["doctor", "--json"][..],
        &["diag", "--json"][..],
    ] {
        let out = bcd("hgx-h100", args);
        let doc = json(&out);
        assert_eq!(doc["schema_version"], 1, "{args:?}: {doc}");
    }
    let out = bcd("hgx-h100", &["hardware", "--labels", "--json"]);
    assert_eq!(
        json(&out)["labels"]["nvidia.com/gpu.count"],
        "8",
        "the labels are under their own key"
    );
}

// What broke: GPUs passed through to a VM were missing from bcd status (and /v1/status), so an
// operator could not see that a VM had a GPU.
#[test]
fn status_lists_the_gpus_passed_through_to_a_vm() {
    let data = tempfile::tempdir().unwrap();
    let host = bcd::sys::host::Host::fake(hosts().join("passthrough"));
    let plain = futures_lite(bcd::inventory::collect::collect(&host, None)).inventory;
    let mut remembered = plain.gpu.gpus[0].clone();
    remembered.uuid = "GPU-0badc0de-0000-4000-8000-000000000061".parse().unwrap();
    remembered.bus_id = Some("00000000:61:00.0".parse().unwrap());
    let memory = bcd::inventory::memory::GpuMemory::new(data.path());
    memory
        .remember(&[plain.gpu.gpus[0].clone(), remembered])
        .unwrap();
    let out = bcd_in(data.path(), "passthrough", &["status"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a VM's GPU is no problem: {out:?}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let row = lines
        .iter()
        .position(|l| l.starts_with("1  "))
        .expect("GPU 1's row");
    assert!(lines[row].contains("  UNKNOWN  "), "{text}");
    assert!(lines[row + 1].contains("passed through to a VM"), "{text}");
    let out = bcd_in(data.path(), "passthrough", &["status", "--json"]);
    let doc = json(&out);
    let gpus = doc["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "{doc}");
    assert_eq!(gpus[1]["passed_through"], true);
    assert_eq!(gpus[1]["uuid"], "GPU-0badc0de-0000-4000-8000-000000000061");
    assert!(gpus[0].get("passed_through").is_none());
}

fn futures_lite<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

// What broke: a usage error bcd finds itself (an XID in both XID lists) printed nothing on
// stdout under --json, although a script reads one JSON document whatever happened. clap's
// own parse errors, found before --json is known, print none (exit 2 all the same).
#[test]
fn a_usage_error_bcd_finds_is_an_error_document_under_json_with_exit_2() {
    let out = bcd(
        "hgx-h100",
        &[
            "--json",
            "--xid-ignore",
            "13",
            "--xid-unhealthy",
            "13",
            "status",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let doc = json(&out);
    assert_eq!(doc["error"]["code"], "usage", "{doc}");
    assert!(
        doc["error"]["message"].as_str().unwrap().contains("13"),
        "{doc}"
    );
    assert!(doc["schema_version"].is_u64());
    assert!(!out.stderr.is_empty(), "clap's text stays on stderr");
    let without = bcd(
        "hgx-h100",
        &["--xid-ignore", "13", "--xid-unhealthy", "13", "status"],
    );
    assert_eq!(
        (without.status.code(), without.stdout.is_empty()),
        (Some(2), true)
    );
    let clap_own = bcd("hgx-h100", &["--json", "status", "--no-such-flag"]);
    assert_eq!(
        (clap_own.status.code(), clap_own.stdout.is_empty()),
        (Some(2), true)
    );
}

/// A node service on `socket` that answers every request, after `delay`, with `body` (200).
fn slow_node(socket: &Path, delay: std::time::Duration, body: &'static str) {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                std::thread::sleep(delay);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
}

// What broke: a vfio bind (or a reset, a VM step) waited up to 30 s in silence. On a terminal
// it shows what it waits for and for how long, in place, replaced by the result; through a
// pipe or with --json nothing of the kind.
#[test]
fn a_long_step_shows_its_progress_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("bcd.sock");
    slow_node(
        &socket,
        std::time::Duration::from_millis(1200),
        r#"{"schema_version": 1, "summary": "0000:18:00.0 is on vfio-pci"}"#,
    );
    let args = |json: bool| {
        let mut a = vec![
            env!("CARGO_BIN_EXE_bcd").to_owned(),
            "--api-socket".to_owned(),
            socket.display().to_string(),
        ];
        if json {
            a.push("--json".to_owned());
        }
        a.extend(["vfio", "bind", "0000:18:00.0"].map(str::to_owned));
        a
    };
    let on_terminal = |json: bool| {
        let quoted: Vec<String> = args(json).iter().map(|a| format!("'{a}'")).collect();
        let out = Command::new("script")
            .args(["-q", "-e", "-c", &quoted.join(" "), "/dev/null"])
            .stdin(std::process::Stdio::null())
            .output();
        out.ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let Some(shown) = on_terminal(false) else {
        assert!(std::env::var_os("CI").is_none(), "script(1) is missing");
        return;
    };
    assert!(
        shown.contains("| binding 0000:18:00.0 to vfio-pci (its driver has 30 s to let go): 0.")
            && shown.contains(" s\r\u{1b}[K"),
        "{shown:?}"
    );
    assert!(
        shown.ends_with("\r\u{1b}[K0000:18:00.0 is on vfio-pci\r\n"),
        "the result replaces the line: {shown:?}"
    );
    let json = on_terminal(true).unwrap();
    assert!(!json.contains("binding"), "{json:?}");
    let piped = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(&args(false)[1..])
        .output()
        .unwrap();
    assert_eq!(piped.status.code(), Some(0));
    assert!(
        !String::from_utf8_lossy(&piped.stderr).contains("binding"),
        "{piped:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&piped.stdout),
        "0000:18:00.0 is on vfio-pci\n"
    );
}
