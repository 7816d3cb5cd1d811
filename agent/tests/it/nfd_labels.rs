//! The node labels from the command line: `bcd hardware --labels` prints each demo host's
//! snapshot and writes nothing; `bcd node --nfd-features-dir` keeps them in its feature file,
//! which outlives a stop and is in place at every moment of a restart.
//!
//! Each test works in its own temporary folder, on a copy of a fake host.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use bcd::labels::nfd::{parse, EXPIRY_AHEAD, FILE_NAME};
use bcd_testkit::{copy_host, repo, wait_for, Reaped};

fn bcd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bcd"))
}

/// Every entry under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                todo.push(path.clone());
            }
            out.push(path.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out.sort();
    out
}

#[test]
fn hardware_labels_prints_each_demo_hosts_labels_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for host in ["hgx-h100", "a100-mig", "wsl2", "r470-old"] {
        let copy = copy_host(dir.path(), host);
        let before = tree(dir.path());
        let run = |extra: &[&str]| {
            let out = bcd()
                .arg("--host")
                .arg(&copy)
                .arg("--data-dir")
                .arg(&data)
                .args(["hardware", "--labels"])
                .args(extra)
                .output()
                .unwrap();
            assert!(out.status.success(), "{host}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        let printed = run(&[]);
        let snapshot =
            std::fs::read_to_string(repo().join(format!("testdata/labels/{host}.labels"))).unwrap();
        assert_eq!(printed, snapshot, "{host}");
        let doc: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
        assert_eq!(doc["schema_version"], 1, "{host}");
        let from_json: String = doc["labels"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={}\n", v.as_str().unwrap()))
            .collect();
        assert_eq!(from_json, printed, "{host}: --json says the same");
        assert_eq!(tree(dir.path()), before, "{host}: nothing was written");
    }
    let refused = bcd()
        .args(["hardware", "--gpu-slots", "2"])
        .output()
        .unwrap();
    assert_eq!(
        refused.status.code(),
        Some(2),
        "--gpu-slots without --labels"
    );
}

/// `bcd node` on `host` with its state, sockets and the features folder in `dir`.
fn start_node(dir: &Path, host: &Path, features: &Path) -> Reaped {
    let child = bcd()
        .arg("--host")
        .arg(host)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--cdi-dir")
        .arg(dir.join("cdi"))
        .arg("--helper-socket")
        .arg(dir.join("no-helper.sock"))
        .arg("--api-socket")
        .arg(dir.join("bcd.sock"))
        .args(["node", "--api-group", "root", "--runtime-dir"])
        .arg(dir.join("run"))
        .arg("--nfd-features-dir")
        .arg(features)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Reaped(child)
}

fn stop(node: &mut Reaped) {
    let node: &mut Child = &mut node.0;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(node.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    while node.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "bcd node did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The file's labels as `name=value` lines and its expiry, read as NFD reads it.
fn read_feature_file(path: &Path) -> (String, SystemTime) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines = parse(&text).unwrap();
    let expiry = lines[0].expires.expect("an expiry directive");
    assert!(lines.iter().all(|l| l.expires == Some(expiry)), "{text}");
    let labels = lines
        .iter()
        .map(|l| format!("{}={}\n", l.name, l.value))
        .collect();
    (labels, expiry)
}

#[test]
fn the_node_keeps_the_labels_file_and_a_restart_never_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = copy_host(dir.path(), "hgx-h100");
    let features = dir.path().join("features.d");
    std::fs::create_dir(&features).unwrap();
    let path = features.join(FILE_NAME);
    let snapshot = std::fs::read_to_string(repo().join("testdata/labels/hgx-h100.labels")).unwrap();

    let mut node = start_node(dir.path(), &host, &features);
    wait_for("the feature file", Duration::from_secs(60), || {
        path.exists()
    });
    let (labels, expiry) = read_feature_file(&path);
    assert_eq!(
        labels, snapshot,
        "the node publishes what bcd hardware --labels prints"
    );
    let now = SystemTime::now();
    assert!(expiry > now && expiry <= now + EXPIRY_AHEAD, "{expiry:?}");
    let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o644, "NFD reads it");

    stop(&mut node);
    let kept = std::fs::read(&path).expect("a stopped node leaves its labels");
    let inode = std::fs::metadata(&path).unwrap().ino();

    // A restart: the file is there at every moment until the new one replaces it.
    let mut node = start_node(dir.path(), &host, &features);
    let started = Instant::now();
    loop {
        let mut file = std::fs::File::open(&path).expect("the labels vanished during a restart");
        if file.metadata().unwrap().ino() != inode {
            break;
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        assert_eq!(bytes, kept, "the old file is never changed in place");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the restarted node did not write its labels"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (labels, _) = read_feature_file(&path);
    assert_eq!(labels, snapshot);
    let names: Vec<String> = std::fs::read_dir(&features)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [FILE_NAME],
        "no temporary file is left where NFD reads"
    );
    stop(&mut node);
}

// The README's drop-in: systemd accepts bcd.service with it, and it costs the unit nothing in
// `systemd-analyze security`'s rating.
#[test]
fn the_features_folder_drop_in_verifies_and_keeps_the_units_rating() {
    let Some(analyze) = bcd_testkit::require(bcd_testkit::Peer::SystemdAnalyze) else {
        return;
    };
    let Some(_) = bcd_testkit::with_private_run(&analyze) else {
        return;
    };
    let run = |args: &[&str], unit: &Path| {
        bcd_testkit::with_private_run(&analyze)
            .expect("checked above")
            .args(args)
            .arg(unit)
            .output()
            .unwrap()
    };
    let rating = |unit: &Path| -> f64 {
        let out = run(&["security", "--offline=yes", "--no-pager"], unit);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.contains("Overall exposure level"))
            .unwrap_or_else(|| panic!("no rating: {text}"));
        line.split(':')
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let staged = crate::common::processes::packaged_unit;
    let unit = dir.path().join("bcd.service");
    std::fs::write(&unit, staged("bcd.service")).unwrap();
    let without = rating(&unit);
    let drop_ins = dir.path().join("bcd.service.d");
    std::fs::create_dir(&drop_ins).unwrap();
    std::fs::write(
        drop_ins.join("nfd-features.conf"),
        staged("nfd-features.conf"),
    )
    .unwrap();
    let out = run(&["verify"], &unit);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify with the drop-in: {said}"
    );
    let with = rating(&unit);
    assert!(
        with <= without,
        "the drop-in rates bcd.service {with}, above {without}"
    );
}
