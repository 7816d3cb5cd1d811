//! Loop-mode sampling against fake `nvidia-smi` scripts that print a batch per interval, die,
//! hang, or refuse `-lms`: batches, restarts, stalls, the one-shot fall back, no process left
//! behind, and the figure "process spawns per sample in steady state".

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bcd::smi::sampler::{Mode, Sampled, Sampler, Timing};

/// The fake's interval: short, so a test sees many intervals in a second.
const INTERVAL: Duration = Duration::from_millis(100);

/// Two GPUs' sample lines, as `--format=csv,noheader,nounits` prints them.
const LINES: &str = "GPU-aaaaaaaa-0000-0000-0000-000000000001, 81559, 1, 0, 81000, 0, 0, 31, 69.1, 700.00, 345, 2619, P0, Disabled
GPU-aaaaaaaa-0000-0000-0000-000000000002, 81559, 2, 0, 81000, 5, 0, 33, 70.2, 700.00, 345, 2619, P0, Disabled";

/// Writes a fake `nvidia-smi` into `dir` that appends its arguments to `dir/starts` at each
/// start and then runs `body` (POSIX sh; `$LMS` is non-empty for a loop-mode query, `$APPS`
/// for a compute-apps query).
fn fake(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("nvidia-smi");
    let lines = dir.join("lines");
    std::fs::write(&lines, format!("{LINES}\n")).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> '{starts}'\nLINES='{lines}'\nLMS=; APPS=\ncase \"$*\" in *-lms*) LMS=1 ;; esac\ncase \"$*\" in *compute-apps*) APPS=1 ;; esac\n{body}\n",
        starts = dir.join("starts").display(),
        lines = lines.display(),
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn starts(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("starts"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn timing() -> Timing {
    Timing {
        interval: INTERVAL,
        backoff_start: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        mig_memory_every: Duration::from_millis(500),
    }
}

/// Waits for `ok` on the sampler's latest value, up to `bound`.
async fn wait_until(
    sampler: &Sampler,
    bound: Duration,
    what: &str,
    mut ok: impl FnMut(&Sampler, Option<&Sampled>) -> bool,
) {
    let started = Instant::now();
    let rx = sampler.subscribe();
    while !ok(sampler, rx.borrow().as_ref()) {
        assert!(started.elapsed() < bound, "{what} within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a process is gone (or a zombie waiting for its reaper).
fn gone(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    stat.is_empty() || stat.contains(") Z ")
}

/// Prints a batch per interval for ever; the compute-apps child has one process on GPU 1.
const STEADY: &str = "if [ -n \"$APPS\" ]; then
  while :; do echo GPU-aaaaaaaa-0000-0000-0000-000000000001; sleep 0.1; done
fi
while :; do cat \"$LINES\"; sleep 0.1; done";

#[tokio::test]
async fn lines_per_interval_become_batches_with_no_spawn_per_sample() {
    let dir = tempfile::tempdir().unwrap();
    let sampler = Sampler::spawn(fake(dir.path(), STEADY), timing());
    wait_until(&sampler, Duration::from_secs(10), "20 batches", |s, _| {
        s.stats().batches.load(Ordering::Relaxed) >= 20
    })
    .await;
    let latest = sampler.subscribe().borrow().clone().unwrap();
    assert_eq!(latest.mode, Mode::Loop);
    assert_eq!(latest.samples.len(), 2);
    assert_eq!(latest.samples[1].utilization_gpu_pct, Some(5));
    // The figure: two children for the whole run, whatever the number of samples.
    let batches = sampler.stats().batches.load(Ordering::Relaxed);
    let spawned = starts(dir.path());
    println!("figure: {spawned} nvidia-smi starts for {batches} samples (loop mode)");
    assert_eq!(spawned, 2, "one GPU child and one compute-apps child");
    assert_eq!(sampler.stats().restarts.load(Ordering::Relaxed), 0);
    wait_until(
        &sampler,
        Duration::from_secs(5),
        "compute processes",
        |_, s| s.is_some_and(|s| s.samples[0].compute_processes == Some(1)),
    )
    .await;
}

#[tokio::test]
async fn a_child_that_dies_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let body = "if [ -n \"$APPS\" ]; then exec sleep 1000; fi
for i in 1 2 3; do cat \"$LINES\"; sleep 0.1; done
exit 1";
    let sampler = Sampler::spawn(fake(dir.path(), body), timing());
    // Counted together: the restart counter moves before the new session's two children
    // have both started, so reading the start count at that moment raced them.
    wait_until(
        &sampler,
        Duration::from_secs(15),
        "3 restarts, both children started again each time",
        |s, _| s.stats().restarts.load(Ordering::Relaxed) >= 3 && starts(dir.path()) >= 8,
    )
    .await;
    let latest = sampler.subscribe().borrow().clone().unwrap();
    assert_eq!(latest.mode, Mode::Loop, "a death is no refusal");
    assert_eq!(latest.samples.len(), 2);
}

#[tokio::test]
async fn a_silent_child_is_killed_and_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let body = format!(
        "if [ -n \"$APPS\" ]; then exec sleep 1000; fi
cat \"$LINES\"; cat \"$LINES\"
sleep 1000 &
echo $! >> '{}'
wait",
        pids.display()
    );
    let sampler = Sampler::spawn(fake(dir.path(), &body), timing());
    wait_until(&sampler, Duration::from_secs(10), "a restart", |s, _| {
        s.stats().restarts.load(Ordering::Relaxed) >= 1
    })
    .await;
    assert!(sampler.stats().batches.load(Ordering::Relaxed) >= 1);
    let first = std::fs::read_to_string(&pids).unwrap();
    let first = first.lines().next().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(gone(&first), "the stalled child's group was killed");
}

#[tokio::test]
async fn a_refused_loop_mode_falls_back_to_one_shot_samples() {
    let dir = tempfile::tempdir().unwrap();
    let body = "if [ -n \"$LMS\" ]; then echo 'Option -lms is not supported' >&2; exit 2; fi
if [ -n \"$APPS\" ]; then exit 0; fi
cat \"$LINES\"";
    let sampler = Sampler::spawn(fake(dir.path(), body), timing());
    wait_until(
        &sampler,
        Duration::from_secs(10),
        "one-shot samples",
        |_, s| s.is_some_and(|s| matches!(s.mode, Mode::OneShot(_)) && s.samples.len() == 2),
    )
    .await;
    let Some(Sampled {
        mode: Mode::OneShot(why),
        ..
    }) = sampler.subscribe().borrow().clone()
    else {
        panic!("not one-shot")
    };
    assert!(why.contains("-lms is not supported"), "{why}");
    assert_eq!(sampler.stats().restarts.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn dropping_the_sampler_leaves_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let body = format!("echo $$ >> '{}'\n{STEADY}", pids.display());
    let sampler = Sampler::spawn(fake(dir.path(), &body), timing());
    wait_until(&sampler, Duration::from_secs(10), "a batch", |s, _| {
        s.stats().batches.load(Ordering::Relaxed) >= 1
    })
    .await;
    drop(sampler);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids = std::fs::read_to_string(&pids).unwrap();
    assert_eq!(pids.lines().count(), 2);
    for pid in pids.lines() {
        assert!(gone(pid), "nvidia-smi {pid} outlived its sampler");
    }
}

// What broke: one GPU in MIG mode made the demo host lose loop mode: 2.00 nvidia-smi starts
// per sample, one of them a full -q -x every sample. Loop mode stays now, and the MIG
// devices' memory comes from a -q -x every `mig_memory_every` (12 intervals here, to keep the
// test short; the node reads it at the inventory's 10-minute cadence).
#[tokio::test]
async fn a_mig_host_keeps_loop_mode_and_reads_mig_memory_at_its_own_cadence() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts");
    let smi = dir.path().join("nvidia-smi");
    std::fs::write(
        &smi,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' '{}' \"$@\"\n",
            dir.path().join("starts").display(),
            hosts.join("replay-nvidia-smi").display(),
            hosts.join("hgx-h100/answers").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let timing = Timing {
        mig_memory_every: INTERVAL * 12,
        ..timing()
    };
    let sampler = Sampler::spawn(&smi, timing);
    wait_until(&sampler, Duration::from_secs(10), "MIG memory", |_, s| {
        s.is_some_and(|s| s.samples.iter().any(|g| !g.mig_devices.is_empty()))
    })
    .await;
    let batches0 = sampler.stats().batches.load(Ordering::Relaxed);
    let starts0 = starts(dir.path());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let batches = sampler.stats().batches.load(Ordering::Relaxed) - batches0;
    let started = starts(dir.path()) - starts0;
    let latest = sampler.subscribe().borrow().clone().unwrap();
    assert_eq!(latest.mode, Mode::Loop);
    assert!(
        latest
            .mig_memory
            .as_deref()
            .is_some_and(|m| m.contains("every")),
        "{:?}",
        latest.mig_memory
    );
    let per_sample = started as f64 / batches as f64;
    eprintln!("MIG host, loop mode: {started} nvidia-smi starts in {batches} samples ({per_sample:.3} per sample)");
    assert!(batches >= 20, "{batches} batches");
    assert!(per_sample <= 0.1, "{started} starts in {batches} samples");
    let all = std::fs::read_to_string(dir.path().join("starts")).unwrap();
    assert_eq!(sampler.stats().restarts.load(Ordering::Relaxed), 0, "{all}");
}
