//! `bcd node --otlp-endpoint` against a receiver that decodes the requests with the
//! OpenTelemetry protobuf definitions (`testdata/otlp/receiver.py`, Python's
//! `opentelemetry-proto`): `bcd.gpu.memory.total` equals the fake host's `nvidia-smi` total,
//! and a hold's id arrives as the GPU's points' `bcd.hold` attribute.
//!
//! The receiver runs in the virtual environment `run-tests` makes under `target/peers`, with
//! the pinned `opentelemetry-proto` (the test downloads nothing); without it the test is
//! skipped, saying so (a failure under `CI`).

use crate::common::processes;

use processes::{copy_host, repo, Reaped};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The wsl2 fake host's only GPU and its `memory.total` in `answers/samples.out`, MiB.
const WSL2_GPU: &str = "GPU-47b7f1f6-b953-1755-a396-404bd55edce2";
const WSL2_MEMORY_TOTAL_MIB: u64 = 32607;

/// The decoded points the receiver wrote so far.
fn points(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn otlp_memory_total_equals_the_fake_hosts_nvidia_smi() {
    let Some(python) = bcd_testkit::require(bcd_testkit::Peer::OtlpProto) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host = copy_host(dir.path(), "wsl2");

    let received = dir.path().join("received.jsonl");
    let mut receiver = Reaped(
        Command::new(&python)
            .arg(repo().join("testdata/otlp/receiver.py"))
            .arg(&received)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut port = String::new();
    BufReader::new(receiver.0.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let port: u16 = port.trim().parse().expect("the receiver prints its port");

    let _node = Reaped(
        Command::new(env!("CARGO_BIN_EXE_bcd"))
            .arg("--host")
            .arg(&host)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--cdi-dir")
            .arg(dir.path().join("cdi"))
            .arg("--helper-socket")
            .arg(dir.path().join("helper.sock"))
            .arg("--api-socket")
            .arg(dir.path().join("bcd.sock"))
            .args(["node", "--api-group", "root", "--otlp-endpoint"])
            .arg(format!("http://127.0.0.1:{port}"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let started = Instant::now();
    let total = loop {
        let all = points(&received);
        if let Some(error) = all.iter().find(|p| p.get("error").is_some()) {
            panic!("the receiver could not decode a request: {error}");
        }
        if let Some(p) = all.iter().find(|p| p["name"] == "bcd.gpu.memory.total") {
            break p.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "no bcd.gpu.memory.total within 40s; received: {all:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(total["path"], "/v1/metrics");
    assert_eq!(total["content_type"], "application/x-protobuf");
    assert_eq!(total["resource"]["service.name"], "bcd");
    assert_eq!(total["scope"], "bcd");
    assert_eq!(total["unit"], "By");
    assert_eq!(total["attributes"]["gpu.uuid"], WSL2_GPU);
    assert_eq!(total["type"], "as_int");
    assert_eq!(
        total["value"].as_u64(),
        Some(WSL2_MEMORY_TOTAL_MIB * 1024 * 1024),
        "{total}"
    );
    assert!(total["time_unix_nano"].as_u64().unwrap_or(0) > 0);
    // The other readings of the same sample arrive beside it, in their units.
    let all = points(&received);
    let value = |name: &str| {
        all.iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))["value"]
            .clone()
    };
    assert_eq!(value("bcd.gpu.temperature"), 38);
    assert_eq!(value("bcd.gpu.power.draw"), 21.07);
    assert_eq!(value("bcd.gpu.utilization"), 0.04);
    assert_eq!(value("bcd.gpu.clock.sm"), 247_000_000u64);
    assert_eq!(value("bcd.gpu.processes"), 0);
    assert!(
        total["attributes"].get("bcd.hold").is_none(),
        "nobody has the GPU yet: {total}"
    );

    // A hold's id travels on the GPU's points (it did not: OTLP said nothing of who had it).
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--api-socket")
        .arg(dir.path().join("bcd.sock"))
        .args(["hold", "apply", "train-7", WSL2_GPU])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = Instant::now();
    let held = loop {
        if let Some(p) = points(&received)
            .into_iter()
            .find(|p| p["attributes"]["bcd.hold"] == "train-7")
        {
            break p;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "no point with bcd.hold=train-7 within 40s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(held["attributes"]["gpu.uuid"], WSL2_GPU, "{held}");
}
