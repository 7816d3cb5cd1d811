//! End to end on a fake host: the real `bcd-helper` (socket-activated through
//! `systemd-socket-activate` where that is installed) and `bcd node`, driven through the API
//! and the CLI: status, inventory, an XID making a GPU unhealthy and a collection follow, diag,
//! a hold whose CDI spec appears, a reset that clears the XID, metrics, and SIGTERM leaving
//! every state file parseable.

use crate::common::processes;

use processes::{api, free_port, helper_args, wait_for, NodeSandbox, Reaped};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bcd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bcd"))
}

fn scrape(addr: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn the_node_service_end_to_end() {
    let Some(helper_bin) =
        bcd_testkit::built(&PathBuf::from(env!("CARGO_BIN_EXE_bcd")).with_file_name("bcd-helper"))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let NodeSandbox {
        host,
        cdi,
        data,
        helper_sock,
        api_sock,
    } = NodeSandbox::new(dir.path(), "hgx-h100");

    let mut helper_args = helper_args(dir.path(), &host);
    helper_args.extend(["--idle-exit".into(), "30".into()]);
    // Without systemd-socket-activate (a skip of that part, a failure under CI) the helper
    // listens by itself.
    let activator = bcd_testkit::require(bcd_testkit::Peer::SystemdSocketActivate);
    let _helper = if let Some(activator) = activator {
        Reaped(
            Command::new(activator)
                .arg("-l")
                .arg(&helper_sock)
                .arg(&helper_bin)
                .args(&helper_args)
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    } else {
        Reaped(
            Command::new(&helper_bin)
                .arg("--listen")
                .arg(&helper_sock)
                .args(&helper_args)
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    wait_for("the helper socket", Duration::from_secs(10), || {
        helper_sock.exists()
    });

    let metrics_addr = free_port();
    let global = |cmd: &mut Command| {
        cmd.arg("--host")
            .arg(&host)
            .arg("--data-dir")
            .arg(&data)
            .arg("--cdi-dir")
            .arg(&cdi)
            .arg("--helper-socket")
            .arg(&helper_sock)
            .arg("--api-socket")
            .arg(&api_sock);
    };
    let mut node_cmd = bcd();
    node_cmd.args([
        "node",
        "--metrics-listen",
        &metrics_addr,
        "--api-group",
        "root",
    ]);
    global(&mut node_cmd);
    let mut node = Reaped(node_cmd.stderr(Stdio::null()).spawn().unwrap());
    wait_for("the API socket", Duration::from_secs(20), || {
        api(&api_sock, "GET", "/v1/status", None)
            .is_ok_and(|s| s["collections"].as_u64() >= Some(1))
    });

    // Status and inventory.
    let status = api(&api_sock, "GET", "/v1/status", None).unwrap();
    assert_eq!(status["capabilities"], serde_json::json!(["nvml"]));
    let inventory = api(&api_sock, "GET", "/v1/inventory", None).unwrap();
    let gpus = inventory["gpu"]["gpus"].as_array().unwrap().clone();
    assert_eq!(gpus.len(), 8);
    let mut hardware = bcd();
    hardware.args(["hardware", "--json"]);
    global(&mut hardware);
    let local: Value = serde_json::from_slice(&hardware.output().unwrap().stdout).unwrap();
    assert_eq!(
        local["hash"], inventory["hash"],
        "the service and bcd hardware agree"
    );
    let gpu0 = gpus
        .iter()
        .find(|g| g["bus_id"] == "00000000:18:00.0")
        .unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let gpu1 = gpus
        .iter()
        .find(|g| g["bus_id"] == "00000000:2A:00.0")
        .unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        data.join("gpus-seen.json").exists(),
        "the node service keeps the passthrough memory"
    );

    // An XID a reset clears (119, GSP RPC timeout) makes GPU 0 unhealthy and a collection
    // follows.
    let before = status["collections"].as_u64().unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(host.join("root/dev/kmsg"))
        .unwrap()
        .write_all(b"4,9001,9000000000,-;NVRM: Xid (PCI:0000:18:00): 119, pid=1234, name=python, Timeout after 6s of waiting for RPC response from GPU0 GSP!\n")
        .unwrap();
    wait_for("the XID condition", Duration::from_secs(10), || {
        api(&api_sock, "GET", "/v1/conditions", None).is_ok_and(|c| {
            c["conditions"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|c| c["kind"] == "Xid119" && c["device_id"] == gpu0.as_str())
            })
        })
    });
    wait_for(
        "a collection after the XID",
        Duration::from_secs(10),
        || {
            api(&api_sock, "GET", "/v1/status", None)
                .is_ok_and(|s| s["collections"].as_u64() > Some(before))
        },
    );
    let status = api(&api_sock, "GET", "/v1/status", None).unwrap();
    let line = status["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["uuid"] == gpu0.as_str())
        .unwrap()
        .clone();
    assert_eq!(line["healthy"], false, "{line}");

    // diag sees the XID.
    let report = api(&api_sock, "POST", "/v1/diag", Some(serde_json::json!({}))).unwrap();
    assert_eq!(report["passed"], false);
    assert!(report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["check"] == "xid.recent" && c["passed"] == false));

    // A hold through the CLI writes its CDI spec; another hold of the same GPU is refused.
    let mut apply = bcd();
    apply.args(["hold", "apply", "job1", &gpu1]);
    global(&mut apply);
    let out = apply.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec = cdi.join("bcd-job1.json");
    assert!(spec.exists());
    let spec_json: Value = serde_json::from_slice(&std::fs::read(&spec).unwrap()).unwrap();
    assert_eq!(spec_json["kind"], "bcd.dev/gpu");
    let mut again = bcd();
    again.args(["hold", "apply", "job2", &gpu1]);
    global(&mut again);
    let out = again.output().unwrap();
    assert_eq!(out.status.code(), Some(3), "a refusal exits 3");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("job1"),
        "the refusal names the holder"
    );

    // A reset of the held GPU is refused; a reset of GPU 0 clears its XID.
    let mut busy = bcd();
    busy.args(["gpu", "reset", &gpu1]);
    global(&mut busy);
    let out = busy.output().unwrap();
    assert_eq!(out.status.code(), Some(3), "a refused reset exits 3");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("gpu-busy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut reset = bcd();
    reset.args(["gpu", "reset", &gpu0]);
    global(&mut reset);
    let out = reset.output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let record = std::fs::read_to_string(host.join("answers/record")).unwrap();
    assert!(
        // The helper resets by PCI address: one lock per GPU, whatever it is named by.
        record.contains("--gpu-reset -i 00000000:18:00.0"),
        "the helper ran the reset: {record}"
    );
    let conditions = api(&api_sock, "GET", "/v1/conditions", None).unwrap();
    assert!(
        conditions["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["device_id"] != gpu0.as_str()),
        "{conditions}"
    );

    // Metrics.
    wait_for("a sample", Duration::from_secs(15), || {
        scrape(&metrics_addr).contains("bcd_gpu_memory_total_bytes")
    });
    let text = scrape(&metrics_addr);
    assert!(text.contains("bcd_gpu_healthy{uuid="), "{text}");
    assert!(text.contains("bcd_inventory_age_seconds"));
    // The fake host streams -lms: loop mode, kept although one GPU is in MIG mode, whose MIG
    // devices' memory comes from its own -q -x.
    assert!(text.contains("bcd_sampler_loop_mode 1"), "{text}");
    let status = api(&api_sock, "GET", "/v1/status", None).unwrap();
    assert_eq!(status["sampling"]["loop_mode"], true, "{status}");
    assert!(
        status["sampling"]["mig_memory"]
            .as_str()
            .is_some_and(|w| w.contains("MIG devices' memory")),
        "{status}"
    );

    // Release, then SIGTERM: every state file parses.
    let mut release = bcd();
    release.args(["hold", "release", "job1"]);
    global(&mut release);
    assert!(release.output().unwrap().status.success());
    assert!(!spec.exists(), "a released hold's spec is removed");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(node.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = node.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "bcd node did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    for file in ["gpus-seen.json", "faults.json", "holds.json"] {
        let bytes = std::fs::read(data.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        serde_json::from_slice::<Value>(&bytes)
            .unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
    }
}
