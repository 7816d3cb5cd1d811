//! MIG layouts end to end: `bcd node` and the real `bcd-helper` on a copy of the `a100-mig`
//! host whose `nvidia-smi` and `nvidia-ctk` are the stateful fakes (`bcd-fake-nvidia-smi`,
//! `bcd-fake-nvidia-ctk`, which keep MIG mode and instances in a state file and refuse what
//! the driver refuses). GPU 1 of that host runs a compute process (pid 4242).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bcd_testkit::fake_smi::{a100_mig_state, calls, install_fake_smi, state_path, FakeSmiState};
use serde_json::{json, Value};

use crate::common::processes::{api, helper_args, wait_for, Reaped};

const GPU0: &str = "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b";
const GPU1: &str = "GPU-563d1407-3f32-e972-769a-596d3391ac61";
/// A MIG device of GPU 0 as the host starts.
const GPU0_MIG: &str = "MIG-58866115-6175-6822-e455-1694c2bc414b";

const LAYOUTS: &str = r#"version: v1
mig-configs:
  small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 1
        "2g.20gb": 1
        "4g.40gb": 1
  gpu1-off:
    - devices: [1]
      mig-enabled: false
  halves:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
  empty:
    - devices: [0]
      mig-enabled: true
  too-big:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "7g.80gb": 2
"#;

fn bcd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bcd"))
}

/// A node and its helper on a fresh copy of `a100-mig` with the fakes installed.
struct MigNode {
    dir: tempfile::TempDir,
    host: PathBuf,
    data: PathBuf,
    cdi: PathBuf,
    api_sock: PathBuf,
    config: PathBuf,
    node_log: PathBuf,
    _helper: Reaped,
    node: Option<Reaped>,
}

impl MigNode {
    /// `None` (skipped) when the binaries are not built.
    fn start(node_args: &[&str], change: impl FnOnce(&Path, &mut FakeSmiState)) -> Option<Self> {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_bcd"));
        let bins = bin.parent().unwrap().to_path_buf();
        for name in ["bcd-helper", "bcd-fake-nvidia-smi", "bcd-fake-nvidia-ctk"] {
            bcd_testkit::built(&bins.join(name))?;
        }
        let dir = tempfile::tempdir().unwrap();
        let host = bcd_testkit::copy_host(dir.path(), "a100-mig");
        let mut state = a100_mig_state();
        change(&host, &mut state);
        install_fake_smi(&host, &state, &bins);
        let cdi = dir.path().join("cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        let config = dir.path().join("mig-config.yaml");
        std::fs::write(&config, LAYOUTS).unwrap();
        let helper_sock = dir.path().join("helper.sock");
        let mut args = helper_args(dir.path(), &host);
        args.extend([
            "--nvidia-ctk".into(),
            host.join("bin/nvidia-ctk").display().to_string(),
            "--nvidia-cdi-spec".into(),
            cdi.join("nvidia.json").display().to_string(),
            "--listen".into(),
            helper_sock.display().to_string(),
        ]);
        let helper = Reaped(
            Command::new(bins.join("bcd-helper"))
                .args(&args)
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_for("the helper socket", Duration::from_secs(10), || {
            helper_sock.exists()
        });
        let data = dir.path().join("data");
        let api_sock = dir.path().join("bcd.sock");
        let node_log = dir.path().join("node.log");
        let mut me = Self {
            host,
            data,
            cdi,
            api_sock,
            config,
            node_log,
            _helper: helper,
            node: None,
            dir,
        };
        let mut cmd = bcd();
        cmd.arg("node").args(node_args);
        me.global(&mut cmd);
        cmd.args(["--nvidia-cdi-spec"])
            .arg(me.cdi.join("nvidia.json"))
            .stderr(std::fs::File::create(&me.node_log).unwrap());
        me.node = Some(Reaped(cmd.spawn().unwrap()));
        let sock = me.api_sock.clone();
        wait_for("the node", Duration::from_secs(60), || {
            api(&sock, "GET", "/v1/status", None)
                .is_ok_and(|s| s["collections"].as_u64() >= Some(1))
        });
        Some(me)
    }

    fn global(&self, cmd: &mut Command) {
        cmd.arg("--host")
            .arg(&self.host)
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--cdi-dir")
            .arg(&self.cdi)
            .arg("--helper-socket")
            .arg(self.dir.path().join("helper.sock"))
            .arg("--api-socket")
            .arg(&self.api_sock)
            .arg("--mig-config")
            .arg(&self.config);
    }

    fn bcd(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = bcd();
        self.global(&mut cmd);
        cmd.args(args).output().unwrap()
    }

    fn state(&self) -> FakeSmiState {
        FakeSmiState::load(&state_path(&self.host))
    }

    /// The argument lines that change a GPU (everything but queries).
    fn changes(&self) -> Vec<String> {
        calls(&self.host)
            .into_iter()
            .filter(|c| {
                c.contains("-mig ")
                    || c.contains("-cgi")
                    || c.contains("-dgi")
                    || c.contains("-dci")
                    || c.contains("--gpu-reset")
            })
            .collect()
    }

    fn profiles(&self, index: usize) -> Vec<u32> {
        let state = self.state();
        let mut ids: Vec<u32> = state.gpus[index]
            .instances
            .iter()
            .map(|i| i.profile_id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// What broke: every repartition was a root shell running nvidia-smi mig by hand, racing what
// bcd had handed out, and NVIDIA's CDI spec stayed stale until someone regenerated it.
#[test]
fn a_layout_is_planned_applied_through_the_helper_and_nvidias_spec_follows() {
    let Some(node) = MigNode::start(&[], |_, _| {}) else {
        return;
    };
    // The plan reads the host itself and says the steps (exit 1: steps needed).
    let plan = node.bcd(&["mig", "plan", "small"]);
    assert_eq!(plan.status.code(), Some(1), "{}", stdout(&plan));
    let text = stdout(&plan);
    assert!(text.contains("1. destroy every MIG instance"), "{text}");
    assert!(
        text.contains("2. create 4g.40gb, 2g.20gb, 1g.10gb"),
        "largest first: {text}"
    );
    assert!(node.changes().is_empty(), "a plan changes nothing");
    // Already as wanted: exit 0.
    assert_eq!(node.bcd(&["mig", "plan", "halves"]).status.code(), Some(0));

    let started = std::time::Instant::now();
    let applied = node.bcd(&["mig", "apply", "small", "--json"]);
    let took = started.elapsed();
    let record: Value = serde_json::from_slice(&applied.stdout).unwrap();
    assert_eq!(applied.status.code(), Some(0), "{record}");
    assert_eq!(record["state"], "success", "{record}");
    assert_eq!(record["gpus"][0]["result"], "changed");
    // 4g.40gb (5), 2g.20gb (14), 1g.10gb (19), made largest first, on GPU 0 only.
    assert_eq!(node.profiles(0), [5, 14, 19]);
    assert_eq!(node.profiles(1), [5, 19], "GPU 1 untouched");
    let changes = node.changes();
    assert!(
        changes.iter().all(|c| c.contains("00000000:07:00.0")),
        "only GPU 0's bus id: {changes:?}"
    );
    assert!(
        changes.iter().any(|c| c.contains("-cgi 5,14,19 -C")),
        "{changes:?}"
    );
    eprintln!(
        "applied a 3-instance layout on the fake in {took:?}: {} steps ({changes:?})",
        changes.len()
    );

    // The node's view: status, GET /v1/mig, the plan now matching.
    let status = api(&node.api_sock, "GET", "/v1/status", None).unwrap();
    assert_eq!(status["mig_layout"]["state"], "success");
    let mig = api(&node.api_sock, "GET", "/v1/mig", None).unwrap();
    assert_eq!(mig["record"]["layout"], "small");
    assert_eq!(node.bcd(&["mig", "plan", "small"]).status.code(), Some(0));
    let shown = node.bcd(&["status"]);
    assert!(
        stdout(&shown).contains("MIG layout small: success"),
        "{}",
        stdout(&shown)
    );

    // NVIDIA's spec was regenerated through the helper and names the new MIG devices, so a
    // hold of one grants its own caps nodes.
    let inventory = api(&node.api_sock, "GET", "/v1/inventory", None).unwrap();
    let gpu0 = inventory["gpu"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["uuid"] == GPU0)
        .unwrap()
        .clone();
    let new_mig = gpu0["mig"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["profile"] == "2g.20gb")
        .unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let spec = node.cdi.join("nvidia.json");
    wait_for(
        "NVIDIA's spec naming the new MIG device",
        Duration::from_secs(20),
        || std::fs::read_to_string(&spec).is_ok_and(|t| t.contains(&new_mig)),
    );
    assert!(
        calls(&node.host)
            .iter()
            .any(|c| c.starts_with("nvidia-ctk cdi generate")),
        "generated by the helper's nvidia-ctk"
    );
    let hold = api(
        &node.api_sock,
        "POST",
        "/v1/holds",
        Some(json!({"id": "job-1", "devices": [new_mig]})),
    )
    .unwrap();
    assert_eq!(hold["id"], "job-1");
    let hold_spec = std::fs::read_to_string(node.cdi.join("bcd-job-1.json")).unwrap();
    assert!(
        hold_spec.contains("/dev/nvidia-caps/nvidia-cap"),
        "the MIG device's caps nodes: {hold_spec}"
    );
    // Each helper step is audited.
    let audit = std::fs::read_to_string(node.dir.path().join("audit.log")).unwrap();
    for op in ["mig.destroy", "mig.create", "cdi.nvidia"] {
        assert!(audit.contains(&format!("\"{op}\"")), "{op}: {audit}");
    }
}

// What broke: nvidia-ctk exits 1 on a MIG GPU with no instances (nvidia-container-toolkit
// #1828); a refresher that retried at every collection would loop on it.
#[test]
fn nvidia_ctk_failing_on_a_mig_gpu_without_instances_is_said_once_and_never_looped() {
    let Some(node) = MigNode::start(&[], |_, _| {}) else {
        return;
    };
    let ctk_runs = || {
        calls(&node.host)
            .iter()
            .filter(|c| c.starts_with("nvidia-ctk"))
            .count()
    };
    let spec = node.cdi.join("nvidia.json");
    wait_for("NVIDIA's spec at start", Duration::from_secs(20), || {
        spec.exists()
    });
    let before = std::fs::read_to_string(&spec).unwrap();
    let at_start = ctk_runs();
    let out = node.bcd(&["mig", "apply", "empty"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(node.profiles(0).is_empty());
    wait_for("the refresh's problem", Duration::from_secs(20), || {
        api(&node.api_sock, "GET", "/v1/status", None).is_ok_and(|s| {
            s["problems"]
                .to_string()
                .contains("could not be regenerated")
        })
    });
    assert_eq!(ctk_runs(), at_start + 1);
    // More collections, the same GPUs: not tried again.
    for _ in 0..3 {
        api(&node.api_sock, "POST", "/v1/inventory/refresh", None).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(ctk_runs(), at_start + 1, "{:?}", calls(&node.host));
    assert_eq!(
        std::fs::read_to_string(&spec).unwrap(),
        before,
        "the old spec is kept"
    );
    // Instances again: a new stamp, regenerated, the problem gone.
    assert_eq!(node.bcd(&["mig", "apply", "small"]).status.code(), Some(0));
    wait_for("the problem gone", Duration::from_secs(20), || {
        api(&node.api_sock, "GET", "/v1/status", None).is_ok_and(|s| {
            !s["problems"]
                .to_string()
                .contains("could not be regenerated")
        })
    });
    assert_eq!(ctk_runs(), at_start + 2);
}

// What broke: nothing stopped a repartition of a GPU whose MIG device a job held, or one
// running processes, and a refused layout could run half its steps first.
#[test]
fn a_held_or_busy_gpu_refuses_the_whole_apply_and_nothing_is_touched() {
    let Some(node) = MigNode::start(&[], |_, _| {}) else {
        return;
    };
    api(
        &node.api_sock,
        "POST",
        "/v1/holds",
        Some(json!({"id": "job-7", "devices": [GPU0_MIG]})),
    )
    .unwrap();
    let out = node.bcd(&["mig", "apply", "small", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["code"], "gpu-busy", "{doc}");
    let said = doc["error"]["message"].as_str().unwrap();
    assert!(said.contains("job-7") && said.contains("GPU 0"), "{said}");
    // GPU 1 runs a compute process: refused with its pid.
    let out = node.bcd(&["mig", "apply", "gpu1-off"]);
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("pid 4242"), "{said}");
    // A layout that does not fit: refused naming the file, line, GPU and profile.
    let out = node.bcd(&["mig", "plan", "too-big"]);
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("mig-config.yaml, line 21: layout too-big does not fit GPU 0")
            && said.contains("7g.80gb"),
        "{said}"
    );
    assert!(node.changes().is_empty(), "{:?}", node.changes());
    assert_eq!(node.profiles(0), [9, 9]);
    // The hold is as it was.
    let holds = api(&node.api_sock, "GET", "/v1/holds", None).unwrap();
    assert_eq!(holds["holds"].as_array().unwrap().len(), 1);
}

// What broke: a creation failing part way left half a layout offered, and the GPU went back
// into service as if nothing had happened.
#[test]
fn a_failure_on_the_third_instance_leaves_no_instances_and_the_gpu_withdrawn() {
    let Some(node) = MigNode::start(&[], |_, state| {
        // The host's two instances were created before; the third made from now fails.
        let created = state.gpus[0].created;
        state.set_fail_create_at(0, Some(created + 3));
    }) else {
        return;
    };
    let out = node.bcd(&["mig", "apply", "small", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    let record: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["state"], "failed", "{record}");
    assert!(
        record["failed_step"]
            .as_str()
            .unwrap()
            .starts_with("create 4g.40gb"),
        "{record}"
    );
    assert!(
        record["message"]
            .as_str()
            .unwrap()
            .contains("Unknown Error"),
        "nvidia-smi's sentence: {record}"
    );
    assert!(node.profiles(0).is_empty(), "no half layout");
    assert!(!node.state().gpus[0].pending_mig || node.state().gpus[0].mig_mode);
    assert_eq!(record["withdrawn"], json!([GPU0]));
    // Withdrawn: a hold of it is refused, status says why.
    let refused = api(
        &node.api_sock,
        "POST",
        "/v1/holds",
        Some(json!({"id": "job-8", "devices": [GPU0]})),
    )
    .unwrap_err();
    assert!(refused.contains("MIG layout change"), "{refused}");
    let status = api(&node.api_sock, "GET", "/v1/status", None).unwrap();
    let problems = status["problems"].to_string();
    assert!(problems.contains("MIG layout small failed"), "{problems}");

    // Fixed: the next apply succeeds and gives the GPU back.
    let mut state = node.state();
    state.set_fail_create_at(0, None);
    state.save(&state_path(&node.host));
    let out = node.bcd(&["mig", "apply", "small"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(node.profiles(0), [5, 14, 19]);
    api(
        &node.api_sock,
        "POST",
        "/v1/holds",
        Some(json!({"id": "job-8", "devices": [GPU0]})),
    )
    .unwrap();
}

// What broke: nothing applied a layout before the device plugins offered the old one, and
// the node labels never said which layout a node has.
#[test]
fn mig_layout_at_start_runs_before_the_plugins_and_is_labelled() {
    let plugins = tempfile::tempdir().unwrap();
    let features = tempfile::tempdir().unwrap();
    let plugin_dir = plugins.path().display().to_string();
    let features_dir = features.path().display().to_string();
    let Some(node) = MigNode::start(
        &[
            "--mig-layout",
            "small",
            "--device-plugin-dir",
            &plugin_dir,
            "--nfd-features-dir",
            &features_dir,
        ],
        |_, _| {},
    ) else {
        return;
    };
    wait_for(
        "the layout applied at start",
        Duration::from_secs(30),
        || {
            api(&node.api_sock, "GET", "/v1/status", None)
                .is_ok_and(|s| s["mig_layout"]["state"] == "success")
        },
    );
    assert_eq!(node.profiles(0), [5, 14, 19]);
    let file = features.path().join("bcd");
    wait_for("the layout's labels", Duration::from_secs(20), || {
        std::fs::read_to_string(&file).is_ok_and(|t| {
            t.contains("bcd.dev/mig.config=small")
                && t.contains("nvidia.com/mig.config.state=success")
        })
    });
    let labels = std::fs::read_to_string(&file).unwrap();
    assert!(!labels.contains("nvidia.com/mig.config="), "{labels}");
    // The log says the layout was applied before any device plugin started.
    wait_for(
        "a device plugin's log line",
        Duration::from_secs(20),
        || std::fs::read_to_string(&node.node_log).is_ok_and(|t| t.contains("bcd.dev/")),
    );
    let log = std::fs::read_to_string(&node.node_log).unwrap();
    let applied = log.find("MIG layout small applied at start").expect(&log);
    let plugin = log.find("bcd.dev/").unwrap();
    assert!(applied < plugin, "{log}");
    assert!(GPU1.starts_with("GPU-"));
}
