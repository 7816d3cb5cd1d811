//! The snapshot and the samples over fake hosts and fake `nvidia-smi` programs: optional
//! queries that fail, concurrency, hangs, fall backs, and (with `BCD_REAL_GPU=1`) the host's
//! real `nvidia-smi`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bcd::smi::runner::{RunError, Runner};
use bcd::smi::snapshot::{probe, samples, snapshot, snapshot_within, SampleSource, SnapshotError};

fn smi(host: &str) -> Runner {
    Runner::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/hosts")
            .join(host)
            .join("bin/nvidia-smi"),
    )
}

#[tokio::test]
async fn wsl2_optional_queries_fail_and_leave_their_fields_empty() {
    let snap = snapshot(&smi("wsl2")).await.unwrap();
    assert_eq!(snap.xml.gpus.len(), 1);
    assert!(
        snap.topology.is_empty(),
        "topo -m is not even asked with one GPU"
    );
    assert!(snap.mig_profiles.is_empty());
    assert!(snap.nvlink_status.iter().all(|g| g.links.is_empty()));
    assert!(!snap.listed.is_empty(), "-L still answered");
    assert!(snap
        .queries
        .iter()
        .any(|q| q.query == "-q -x" && q.error.is_none()));
}

#[tokio::test]
async fn r470_without_compute_cap_keeps_the_rest() {
    let snap = snapshot(&smi("r470-old")).await.unwrap();
    assert!(snap.compute_caps.is_empty());
    let failed = snap
        .queries
        .iter()
        .find(|q| q.query.starts_with("--query-gpu=uuid,compute_cap"))
        .unwrap();
    assert!(
        failed
            .error
            .as_deref()
            .is_some_and(|e| e.contains("not a valid field")),
        "{failed:?}"
    );
    assert_eq!(snap.xml.gpus.len(), 2);
    assert!(!snap.topology.is_empty());
}

#[tokio::test]
async fn a_wedged_gpu_fails_the_snapshot_at_the_bound() {
    let started = Instant::now();
    let err = snapshot(&smi("wedged").with_timeout(Duration::from_millis(500)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SnapshotError::Run(RunError::Timeout { .. })),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        bcd::smi::hint::error_hint(&err.to_string()).is_some(),
        "a timeout has a hint: {err}"
    );
}

#[tokio::test]
async fn no_driver_is_no_driver_for_snapshot_samples_and_probe() {
    let none = smi("no-driver");
    assert!(snapshot(&none).await.unwrap_err().is_no_driver());
    assert!(
        samples(&none).await.unwrap_err().is_no_driver(),
        "samples never fall back without a driver"
    );
    let err = probe(&none).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "nvml: nvidia-smi not found (no NVIDIA driver on this host)"
    );
}

#[tokio::test]
async fn samples_use_the_csv_where_they_can() {
    let (s, source) = samples(&smi("hgx-h100")).await.unwrap();
    // One GPU is in MIG mode: it is sampled from its CSV row like the others.
    assert_eq!(source, SampleSource::Csv);
    assert_eq!(s.len(), 8);
    assert!(s.iter().any(|s| s.mig_mode == Some(true)));
    let (s, source) = samples(&smi("wsl2")).await.unwrap();
    assert_eq!(source, SampleSource::Csv);
    assert_eq!(s.len(), 1);
    assert_eq!(
        s[0].compute_processes,
        Some(0),
        "Xwayland is a graphics process, no workload"
    );
    let (s, source) = samples(&smi("r470-old")).await.unwrap();
    assert!(
        matches!(source, SampleSource::Snapshot(ref why) if why.contains("memory.reserved")),
        "{source:?}"
    );
    assert_eq!(s.len(), 2);
}

#[tokio::test]
async fn both_sample_paths_agree_on_the_hgx_host() {
    let runner = smi("hgx-h100");
    let snap = snapshot(&runner).await.unwrap();
    let from_xml = bcd::smi::snapshot::samples_from_xml(&snap.xml);
    let csv = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/hosts/hgx-h100/answers/samples.out"),
    )
    .unwrap();
    let apps = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/hosts/hgx-h100/answers/compute-apps.out"),
    )
    .unwrap();
    let lines: Vec<&[u8]> = csv
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let parsed = bcd::smi::samples::parse_samples(&lines.join(&b'\n')).unwrap();
    let bcd::smi::samples::SampleParse::Samples(mut from_csv) = parsed else {
        panic!("{parsed:?}")
    };
    bcd::smi::samples::attach_compute_counts(
        &mut from_csv,
        &bcd::smi::samples::count_compute_apps(&apps),
    );
    for c in &from_csv {
        let x = from_xml.iter().find(|x| x.uuid == c.uuid).unwrap();
        assert_eq!(c.memory_total_mib, x.memory_total_mib, "{}", c.uuid);
        assert_eq!(c.compute_processes, x.compute_processes, "{}", c.uuid);
    }
}

/// A fake `nvidia-smi` that logs when each query starts and ends and takes 300 ms for each
/// optional one: the optional queries must overlap.
#[tokio::test]
async fn optional_queries_run_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let qx =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/hgx-h100/answers/q-x.out");
    let script = dir.path().join("nvidia-smi");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$*\" = '-q -x' ]; then cat '{}'; exit 0; fi\necho \"start $*\" >> '{}'\nsleep 0.3\necho \"end $*\" >> '{}'\nexit 1\n",
            qx.display(),
            log.display(),
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let snap = snapshot(&Runner::new(&script)).await.unwrap();
    assert_eq!(snap.xml.gpus.len(), 8);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Serial runs would alternate start/end; concurrent ones start several before any ends.
    let starts_before_first_end = lines.iter().take_while(|l| l.starts_with("start")).count();
    assert!(
        starts_before_first_end >= 3,
        "optional queries ran one after another:\n{text}"
    );
    assert!(
        snap.queries.iter().filter(|q| q.error.is_some()).count() >= 4,
        "every failing optional query is recorded"
    );
}

/// Writes an executable `nvidia-smi` script with `body` into `dir`.
fn script(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("nvidia-smi");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

// What broke: nvlink -s and nvlink -R ran one after the other with a bound each, so with
// both slow `bcd hardware` took 1 min 24 s against the documented minute.
#[tokio::test]
async fn nvlink_s_then_r_stay_within_the_snapshots_budget() {
    let dir = tempfile::tempdir().unwrap();
    let answers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/hgx-h100/answers");
    // -q -x answers at once; nvlink -s answers late (with links, so -R runs); -R hangs.
    let smi = script(
        dir.path(),
        &format!(
            "a='{}'\ncase \"$*\" in\n'-q -x') cat \"$a/q-x.out\" ;;\n'nvlink -s') sleep 1.2; cat \"$a/nvlink-s.out\" ;;\n'nvlink -R') exec sleep 1000 ;;\n*) exit 1 ;;\nesac",
            answers.display()
        ),
    );
    let runner = Runner::new(&smi).with_timeout(Duration::from_millis(1500));
    let started = Instant::now();
    let snap = snapshot_within(&runner, Duration::from_secs(2))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2400),
        "the snapshot took {took:?} against a 2 s budget"
    );
    assert!(!snap.nvlink_status.is_empty(), "nvlink -s answered in time");
    let remote = snap
        .queries
        .iter()
        .find(|q| q.query == "nvlink -R")
        .expect("nvlink -R ran");
    assert!(
        remote
            .error
            .as_deref()
            .is_some_and(|e| e.contains("did not answer")),
        "{remote:?}"
    );
}

// What broke: a failing --query-compute-apps failed the whole sample (and bcd status),
// although the process count is optional to the rest of the line.
#[tokio::test]
async fn a_failing_compute_apps_query_leaves_only_the_count_empty() {
    let dir = tempfile::tempdir().unwrap();
    let answers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/wsl2/answers");
    let smi = script(
        dir.path(),
        &format!(
            "case \"$*\" in\n--query-compute-apps*) echo 'Unknown Error' >&2; exit 15 ;;\n*) exec '{}' '{}' \"$@\" ;;\nesac",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../testdata/hosts/replay-nvidia-smi")
                .display(),
            answers.display()
        ),
    );
    let (s, source) = samples(&Runner::new(&smi)).await.unwrap();
    assert_eq!(source, SampleSource::Csv);
    assert_eq!(s.len(), 1);
    assert!(s[0].memory_total_mib.is_some());
    assert_eq!(s[0].compute_processes, None);
}

/// Runs only on a host with a real GPU and driver: `BCD_REAL_GPU=1`.
#[tokio::test]
async fn live_host_gpus_are_complete_and_samples_agree() {
    if std::env::var("BCD_REAL_GPU").as_deref() != Ok("1") {
        bcd_testkit::skip("set BCD_REAL_GPU=1 on a host with an NVIDIA GPU and driver to run it");
        return;
    }
    let runner = Runner::new(PathBuf::from("nvidia-smi"));
    let snap = snapshot(&runner)
        .await
        .expect("the real nvidia-smi answers");
    let gpus = bcd::inventory::merge::gpus_from_snapshot(&snap);
    assert!(!gpus.is_empty());
    for g in &gpus {
        assert!(g.uuid.as_str().starts_with("GPU-"), "{g:?}");
        assert!(
            g.name.is_some() && g.architecture.is_some() && g.memory_total_mib.is_some(),
            "{g:?}"
        );
        assert!(
            g.compute_capability.is_some() && g.bus_id.is_some(),
            "{g:?}"
        );
    }
    let (light, _) = samples(&runner).await.unwrap();
    let full = bcd::smi::snapshot::samples_from_xml(&snap.xml);
    for s in &light {
        let f = full.iter().find(|f| f.uuid == s.uuid).unwrap();
        assert_eq!(s.memory_total_mib, f.memory_total_mib);
        assert_eq!(s.mig_mode.unwrap_or(false), f.mig_mode.unwrap_or(false));
        assert_eq!(s.compute_processes, f.compute_processes);
    }
}
