//! Closed-loop recovery end to end: `bcd node --remediate` and the real `bcd-helper` on a copy
//! of `hgx-h100` (GPU 0 runs compute processes; GPUs 1 and 2, at `0000:2a:00.0` and
//! `0000:3a:00.0`, are idle). XIDs are written into the host's fake kernel log; resets land in
//! the replaying nvidia-smi's record.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::processes::{api, free_port, helper_args, wait_for, NodeSandbox, Reaped, H100};

const GPU1_BUS: &str = "0000:2a:00";
const GPU2_BUS: &str = "0000:3a:00";

struct RecoveryNode {
    dir: tempfile::TempDir,
    sandbox: NodeSandbox,
    _helper: Reaped,
    node: Option<Reaped>,
    args: Vec<String>,
}

impl RecoveryNode {
    fn start(args: &[&str], before: impl FnOnce(&Path)) -> Option<Self> {
        let helper_bin = bcd_testkit::built(
            &PathBuf::from(env!("CARGO_BIN_EXE_bcd")).with_file_name("bcd-helper"),
        )?;
        let dir = tempfile::tempdir().unwrap();
        let sandbox = NodeSandbox::new(dir.path(), "hgx-h100");
        before(&sandbox.host);
        let helper = Reaped(
            Command::new(&helper_bin)
                .arg("--listen")
                .arg(&sandbox.helper_sock)
                .args(helper_args(dir.path(), &sandbox.host))
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let sock = sandbox.helper_sock.clone();
        wait_for("the helper socket", Duration::from_secs(10), || {
            sock.exists()
        });
        let mut me = Self {
            dir,
            sandbox,
            _helper: helper,
            node: None,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        };
        me.start_node();
        Some(me)
    }

    fn start_node(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("node.log"))
            .unwrap();
        let node = Command::new(env!("CARGO_BIN_EXE_bcd"))
            .args(self.sandbox.global_args())
            .args(["node", "--api-group", "root"])
            .args(&self.args)
            .stderr(log)
            .spawn()
            .unwrap();
        self.node = Some(Reaped(node));
        let sock = self.sandbox.api_sock.clone();
        wait_for("the node", Duration::from_secs(30), || {
            api(&sock, "GET", "/v1/status", None)
                .is_ok_and(|s| s["collections"].as_u64() >= Some(1))
        });
    }

    /// Stops the node with SIGTERM and waits for it.
    fn stop_node(&mut self) {
        if let Some(mut node) = self.node.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(node.0.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = node.0.wait();
        }
    }

    /// Waits for `ready`; past `bound`, fails showing the GPUs' status and the node's log.
    fn wait(&self, what: &str, bound: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if ready() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default();
        panic!(
            "{what} did not happen within {bound:?}\nstatus: {}\nlog:\n{log}",
            self.status()["gpus"]
        );
    }

    fn xid(&self, bus: &str, n: u32) {
        let mut kmsg = std::fs::OpenOptions::new()
            .append(true)
            .open(self.sandbox.host.join("root/dev/kmsg"))
            .unwrap();
        writeln!(
            kmsg,
            "4,9{n:03},9000000000,-;NVRM: Xid (PCI:{bus}): {n}, pid=1234, name=python, test"
        )
        .unwrap();
    }

    fn status(&self) -> Value {
        api(&self.sandbox.api_sock, "GET", "/v1/status", None).unwrap()
    }

    fn gpu(&self, uuid: &str) -> Value {
        self.status()["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["uuid"] == uuid)
            .cloned()
            .unwrap()
    }

    /// The resets the helper ran on `bus` (as the replaying nvidia-smi recorded them).
    fn resets(&self, bus: &str) -> usize {
        let bus = bus.to_ascii_uppercase();
        std::fs::read_to_string(self.sandbox.host.join("answers/record"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("--gpu-reset") && l.to_ascii_uppercase().contains(&bus))
            .count()
    }
}

// What broke: nothing was ever reset without a person, and with the loop off nothing must be.
#[test]
fn with_remediate_off_an_xid_48_changes_nothing() {
    let Some(node) = RecoveryNode::start(&[], |_| {}) else {
        return;
    };
    node.xid(GPU1_BUS, 48);
    wait_for("GPU 1 unhealthy", Duration::from_secs(20), || {
        node.gpu(H100[1])["health"] == "unhealthy"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(node.resets(GPU1_BUS), 0);
    let gpu = node.gpu(H100[1]);
    assert_eq!(gpu["health"], "unhealthy");
    assert!(gpu.get("remediation").is_none(), "{gpu}");
    let r = api(&node.sandbox.api_sock, "GET", "/v1/remediations", None).unwrap();
    assert_eq!(r["enabled"], false);
}

// What broke: an Xid 48 left the GPU out of service until someone ran bcd gpu reset; a held
// GPU must never be taken from its user.
#[test]
fn an_idle_gpu_is_reset_and_offered_again_and_a_held_one_waits_for_its_hold() {
    let Some(node) = RecoveryNode::start(
        &[
            "--remediate",
            "--remediate-after",
            "1",
            "--remediate-backoff",
            "1",
        ],
        |_| {},
    ) else {
        return;
    };
    let sock = &node.sandbox.api_sock;
    api(
        sock,
        "POST",
        "/v1/holds",
        Some(json!({"id": "job-7", "devices": [H100[2]]})),
    )
    .unwrap();
    let xid_at = Instant::now();
    node.xid(GPU1_BUS, 48);
    node.xid(GPU2_BUS, 48);
    node.wait("GPU 1 reset and healthy", Duration::from_secs(30), || {
        node.resets(GPU1_BUS) == 1 && node.gpu(H100[1])["health"] == "healthy"
    });
    let took = xid_at.elapsed();
    eprintln!("Xid 48 to GPU 1 offered again: {took:?}");
    // GPU 2 waits for its hold, saying so, and is not reset.
    node.wait("GPU 2 waiting", Duration::from_secs(20), || {
        node.gpu(H100[2])["remediation"]["waiting_for"] == "hold job-7 (operator)"
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(node.resets(GPU2_BUS), 0);
    let text = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(node.sandbox.global_args())
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("waiting for hold job-7 (operator)"), "{text}");
    // The hold is released by its operator: then, and only then, the reset.
    api(sock, "DELETE", "/v1/holds/job-7", None).unwrap();
    node.wait("GPU 2 reset and healthy", Duration::from_secs(30), || {
        node.resets(GPU2_BUS) == 1 && node.gpu(H100[2])["health"] == "healthy"
    });
    let r = api(sock, "GET", "/v1/remediations", None).unwrap();
    let results: Vec<&str> = r["remediations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["result"].as_str().unwrap_or("running"))
        .collect();
    assert_eq!(results, ["recovered", "recovered"], "{r}");
    let listed = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(node.sandbox.global_args())
        .arg("remediations")
        .output()
        .unwrap();
    assert!(listed.status.success());
    assert!(String::from_utf8_lossy(&listed.stdout).contains("recovered"));
    assert!(took < Duration::from_secs(30));
}

// What broke: a GPU whose reset keeps failing would be reset forever, a restart would forget
// the count, and an Xid 79 must never be reset at all.
#[test]
fn a_failing_reset_stops_at_its_budget_and_xid_79_is_never_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let sentinel = tmp.path().join("reboot-required");
    let sentinel_arg = sentinel.display().to_string();
    let metrics = free_port();
    let Some(mut node) = RecoveryNode::start(
        &[
            "--metrics-listen",
            &metrics,
            "--remediate",
            "--remediate-after",
            "1",
            "--remediate-backoff",
            "1",
            "--remediate-max-resets",
            "2",
            "--reboot-required-file",
            &sentinel_arg,
        ],
        |host| {
            // Every reset fails, as a driver that refuses it.
            std::fs::write(
                host.join("answers/privileged.out"),
                "GPU 00000000:2A:00.0: In use by another client\n",
            )
            .unwrap();
            std::fs::write(host.join("answers/privileged.exit"), "255\n").unwrap();
        },
    ) else {
        return;
    };
    node.xid(GPU2_BUS, 79);
    node.xid(GPU1_BUS, 48);
    node.wait("the first try", Duration::from_secs(30), || {
        node.resets(GPU1_BUS) == 1
    });
    // A restart in the middle keeps the count: one more try, then reboot-required.
    node.stop_node();
    node.start_node();
    node.wait("GPU 1 reboot-required", Duration::from_secs(40), || {
        node.gpu(H100[1])["reboot_required"] == true
    });
    assert_eq!(node.resets(GPU1_BUS), 2, "the budget, across the restart");
    let gpu2 = node.gpu(H100[2]);
    assert_eq!(gpu2["reboot_required"], true, "{gpu2}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(node.resets(GPU1_BUS), 2, "never past the budget");
    assert_eq!(node.resets(GPU2_BUS), 0, "Xid 79 is never reset");
    let file = std::fs::read_to_string(&sentinel).unwrap();
    assert!(file.contains(H100[1]) && file.contains(H100[2]), "{file}");
    let r = api(&node.sandbox.api_sock, "GET", "/v1/remediations", None).unwrap();
    let steps = r["remediations"].to_string();
    assert!(steps.contains("In use by another client"), "{steps}");
    assert_eq!(node.gpu(H100[1])["health"], "unhealthy");
    let scraped = scrape(&metrics);
    assert!(
        scraped.contains(&format!(
            "bcd_gpu_reboot_required{{uuid=\"{}\"}} 1",
            H100[1]
        )),
        "{scraped}"
    );
    assert!(
        scraped.contains("bcd_remediations_total{result=\"reboot-required\"} "),
        "{scraped}"
    );
}

fn scrape(addr: &str) -> String {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}
