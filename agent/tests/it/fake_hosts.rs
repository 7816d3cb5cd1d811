//! The fake hosts under `testdata/hosts/` replay what their answers say, and stay consistent.
//!
//! Every host's `bin/nvidia-smi` is run with each query bcd makes for which the host has an
//! answer, with a cleared environment and from an unrelated working directory, as the agent
//! and the helper run it. Standard library only.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Each replay key and the arguments that select it (`testdata/hosts/README.md`).
const KEYS: &[(&str, &[&str])] = &[
    ("q-x", &["-q", "-x"]),
    ("L", &["-L"]),
    ("compute-cap", &["--query-gpu=uuid,compute_cap", "--format=csv,noheader"]),
    ("topo-m", &["topo", "-m"]),
    ("nvlink-s", &["nvlink", "-s"]),
    ("nvlink-R", &["nvlink", "-R"]),
    ("mig-lgip", &["mig", "-lgip"]),
    (
        "samples",
        &[
            "--query-gpu=uuid,memory.total,memory.used,memory.reserved,memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate,mig.mode.current,clocks_throttle_reasons.hw_slowdown,clocks_throttle_reasons.hw_thermal_slowdown,clocks_throttle_reasons.hw_power_brake_slowdown,clocks_throttle_reasons.sw_thermal_slowdown",
            "--format=csv,noheader,nounits",
        ],
    ),
    (
        "samples-without-clock-reasons",
        &[
            "--query-gpu=uuid,memory.total,memory.used,memory.reserved,memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate,mig.mode.current",
            "--format=csv,noheader,nounits",
        ],
    ),
    ("compute-apps", &["--query-compute-apps=gpu_uuid", "--format=csv,noheader"]),
    ("probe", &["--query-gpu=driver_version", "--format=csv,noheader"]),
    ("privileged", &["-i", "0", "-pm", "0"]),
];

const HOSTS: &[&str] = &[
    "hgx-h100",
    "hgx-faults",
    "hgx-no-fabric-manager",
    "a100-mig",
    "wsl2",
    "r470-old",
    "no-driver",
    "passthrough",
    "wedged",
];

fn hosts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
}

fn smi(host: &str) -> PathBuf {
    hosts_dir().join(host).join("bin/nvidia-smi")
}

fn command(program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).env_clear().current_dir(std::env::temp_dir());
    cmd
}

fn run(program: &Path, args: &[&str]) -> Output {
    command(program, args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

fn read_or_empty(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_default()
}

fn expected_exit(answers: &Path, key: &str) -> i32 {
    match fs::read_to_string(answers.join(format!("{key}.exit"))) {
        Ok(s) => s.trim().parse().expect("an .exit file holds a number"),
        Err(_) => 0,
    }
}

fn has_answer(answers: &Path, key: &str) -> bool {
    ["out", "err", "exit", "hang"]
        .iter()
        .any(|ext| answers.join(format!("{key}.{ext}")).exists())
}

/// Spawns commands that should hang, all at once; checks each is still running after `wait`,
/// then kills it.
fn assert_hang(cmds: Vec<(String, Command)>, wait: Duration) {
    let mut children: Vec<_> = cmds
        .into_iter()
        .map(|(what, mut cmd)| {
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
            (what, child)
        })
        .collect();
    let start = Instant::now();
    while start.elapsed() < wait {
        for (what, child) in &mut children {
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!("{what}: expected a hang, but it exited with {status}");
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    for (what, mut child) in children {
        // The wrapper and the replay script both `exec`, so this pid is the sleep itself.
        child.kill().expect("kill");
        let status = child.wait().expect("wait");
        assert!(!status.success(), "{what}");
    }
}

#[test]
fn every_answer_replays() {
    let mut checked = 0;
    let mut hanging = Vec::new();
    for host in HOSTS {
        let answers = hosts_dir().join(host).join("answers");
        let program = smi(host);
        if !program.exists() {
            assert_eq!(*host, "no-driver", "{host} has no bin/nvidia-smi");
            continue;
        }
        for (key, args) in KEYS {
            if !has_answer(&answers, key) {
                continue;
            }
            if answers.join(format!("{key}.hang")).exists() {
                hanging.push((format!("{host} {key}"), command(&program, args)));
            } else {
                let out = run(&program, args);
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&read_or_empty(&answers.join(format!("{key}.out")))),
                    "{host} {key}: stdout"
                );
                assert_eq!(
                    String::from_utf8_lossy(&out.stderr),
                    String::from_utf8_lossy(&read_or_empty(&answers.join(format!("{key}.err")))),
                    "{host} {key}: stderr"
                );
                assert_eq!(
                    out.status.code(),
                    Some(expected_exit(&answers, key)),
                    "{host} {key}: exit"
                );
            }
            checked += 1;
        }
        // Every host with an nvidia-smi answers the inventory's required query and the probe.
        assert!(
            has_answer(&answers, "q-x") && has_answer(&answers, "probe"),
            "{host}"
        );
    }
    assert!(!hanging.is_empty());
    assert_hang(hanging, Duration::from_secs(1));
    assert!(checked > 50, "only {checked} answers checked");
}

#[test]
fn unknown_arguments_fail_with_exit_2() {
    let out = run(&smi("hgx-h100"), &["--no-such-flag", "x y"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "nvidia-smi replay: no answer for: --no-such-flag x y\n"
    );
}

/// A scratch answers folder of its own, removed on drop. It was `<tmp>/bcd-fake-hosts-<name>-
/// <pid>`, removed first if there: a name another run of the same pid could share.
struct Scratch(PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("bcd-fake-hosts-{name}-"))
            .tempdir()
            .expect("create scratch");
        Scratch(dir.path().to_path_buf(), dir)
    }
}

#[test]
fn generic_fallback_key_and_privileged_record() {
    let replay = hosts_dir().join("replay-nvidia-smi");
    let dir = Scratch::new("fallback");
    let d = dir.0.to_str().expect("utf-8 temp dir");

    fs::write(
        dir.0.join("--query-gpu=name_--format=csv_a_b_c.out"),
        "name\nX\n",
    )
    .unwrap();
    fs::write(
        dir.0.join("--query-gpu=name_--format=csv_a_b_c.exit"),
        "4\n",
    )
    .unwrap();
    fs::write(
        dir.0.join("--query-gpu=name_--format=csv_a_b_c.err"),
        "warn\n",
    )
    .unwrap();
    let out = run(&replay, &[d, "--query-gpu=name", "--format=csv", "a b/c"]);
    assert_eq!(out.stdout, b"name\nX\n");
    assert_eq!(out.stderr, b"warn\n");
    assert_eq!(out.status.code(), Some(4));

    // Privileged calls: synthesized success, appended to `record` when it exists.
    fs::write(dir.0.join("record"), "").unwrap();
    let uuid = "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d";
    let out = run(&replay, &[d, "-i", uuid, "-pm", "1"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("Enabled persistence mode for GPU {uuid}.\nAll done.\n")
    );
    let out = run(&replay, &[d, "--gpu-reset", "-i", uuid]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("GPU {uuid} was successfully reset.\nAll done.\n")
    );
    let record = fs::read_to_string(dir.0.join("record")).unwrap();
    assert_eq!(record, format!("-i {uuid} -pm 1\n--gpu-reset -i {uuid}\n"));

    // A canned privileged answer wins over the synthesized one (the WSL host refuses).
    let out = run(&smi("wsl2"), &["--gpu-reset", "-i", "0"]);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn wedged_host_hangs_but_probes() {
    assert_hang(
        vec![(
            "wedged -q -x".into(),
            command(&smi("wedged"), &["-q", "-x"]),
        )],
        Duration::from_secs(1),
    );
    let out = run(
        &smi("wedged"),
        &["--query-gpu=driver_version", "--format=csv,noheader"],
    );
    assert!(out.status.success());
    assert!(!out.stdout.is_empty());
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        let meta = fs::symlink_metadata(&path).expect("lstat");
        if meta.is_dir() {
            walk(&path, found);
        } else {
            found.push(path);
        }
    }
}

#[test]
fn symlinks_are_relative_and_resolve() {
    for host in HOSTS {
        let mut files = Vec::new();
        walk(&hosts_dir().join(host).join("root"), &mut files);
        for path in files {
            if fs::symlink_metadata(&path)
                .expect("lstat")
                .file_type()
                .is_symlink()
            {
                let target = fs::read_link(&path).expect("readlink");
                assert!(
                    target.is_relative(),
                    "{} -> {}",
                    path.display(),
                    target.display()
                );
                assert!(
                    fs::metadata(&path).is_ok(),
                    "dangling: {} -> {}",
                    path.display(),
                    target.display()
                );
            }
        }
    }
}

/// Lower-case `GPU-…` UUIDs in a text.
fn gpu_uuids(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("GPU-") {
        let cand: String = rest[i..].chars().take(40).collect();
        if cand.len() == 40 && cand[4..].chars().all(|c| c == '-' || c.is_ascii_hexdigit()) {
            out.insert(cand);
        }
        rest = &rest[i + 4..];
    }
    out
}

#[test]
fn procfs_and_nvidia_smi_agree() {
    for host in HOSTS {
        let dir = hosts_dir().join(host);
        let gpus = dir.join("root/proc/driver/nvidia/gpus");
        let Ok(entries) = fs::read_dir(&gpus) else {
            continue;
        };
        let listed =
            fs::read_to_string(dir.join("answers/L.out")).expect("a host with a driver answers -L");
        let listed = gpu_uuids(&listed);
        let mut in_proc = BTreeSet::new();
        for entry in entries {
            let entry = entry.expect("entry");
            let addr = entry.file_name().to_string_lossy().into_owned();
            let mut info = String::new();
            fs::File::open(entry.path().join("information"))
                .and_then(|mut f| f.read_to_string(&mut info))
                .expect("information");
            assert!(
                info.contains(&format!("Bus Location: \t {addr}\n")),
                "{host} {addr}"
            );
            in_proc.extend(gpu_uuids(&info));
            let sys = dir.join("root/sys/bus/pci/devices").join(&addr);
            let driver = fs::read_link(sys.join("driver")).expect("driver link");
            assert!(
                driver.ends_with("nvidia"),
                "{host} {addr} is on {}",
                driver.display()
            );
            let nvml_bus = format!("0000{}", addr.to_uppercase());
            if let Ok(xml) = fs::read_to_string(dir.join("answers/q-x.out")) {
                assert!(
                    xml.contains(&format!("<gpu id=\"{nvml_bus}\">")),
                    "{host} {nvml_bus}"
                );
            }
        }
        assert_eq!(in_proc, listed, "{host}: procfs and -L list different GPUs");
    }
}
