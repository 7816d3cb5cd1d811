//! The passthrough runtimes against the real `bcd-helper` over its socket, a fake sysfs tree
//! with IOMMU groups whose kernel is a thread (`bcd_testkit::FakePciKernel`), a recording fake
//! `nvidia-smi`, and libvirt's test driver behind a recording `virsh` wrapper. One record file
//! shows persistence calls, kernel unbinds and probes, and `virsh` runs in the order they
//! happened.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bcd::helper_client::SocketHelper;
use bcd::runtime::helper_watch::HelperSeen;
use bcd::runtime::journal::{Entry, FunctionRecord, Intent, Persistence, Step};
use bcd::runtime::{Journal, Passthrough, RuntimeError};
use bcd::sys::host::Host;
use bcd_protocol::{GpuRef, GpuUuid, PciAddress};
use bcd_testkit::{recorded, FakePciKernel};
use common::{helper_binary, Helper};

const GPU: &str = "0000:61:00.0";
const AUDIO: &str = "0000:61:00.1";
const BRIDGE: &str = "0000:60:01.0";
const LONE_GPU: &str = "0000:18:00.0";
const FOREIGN: &str = "0000:18:00.2";
const UUID: &str = "GPU-6b1c0f3e-2a4d-4e8f-9c1b-5d7a3e2f1061";
/// The fake kernel's and helper's steps settle well within this.
const SETTLE: Duration = Duration::from_secs(10);

fn pci(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn not_held(_: &PciAddress, _: Option<&GpuUuid>) -> Option<String> {
    None
}

/// A fake host with its helper: GPU 0000:61:00.0 and its audio function with a bridge in IOMMU
/// group 61, and GPU 0000:18:00.0 sharing group 12 with an Intel USB controller.
struct Rig {
    dir: tempfile::TempDir,
    sysfs: FakePciKernel,
    helper: Helper,
    binary: PathBuf,
    extra: Vec<String>,
    changes: Arc<AtomicUsize>,
}

impl Rig {
    fn new(unbind_timeout_s: u32) -> Option<Self> {
        let binary = helper_binary()?;
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record");
        let sys = dir.path().join("root/sys");
        let mut sysfs = FakePciKernel::recording(&sys, &record);
        sysfs.add_function_in_group(BRIDGE, "0x8086", "0x060400", Some("pcieport"), 61);
        sysfs.add_function_in_group(GPU, "0x10de", "0x030200", Some("nvidia"), 61);
        sysfs.add_function_in_group(AUDIO, "0x10de", "0x040300", Some("snd_hda_intel"), 61);
        sysfs.add_function_in_group(LONE_GPU, "0x10de", "0x030200", Some("nvidia"), 12);
        sysfs.add_function_in_group(FOREIGN, "0x8086", "0x0c0330", Some("xhci_hcd"), 12);
        sysfs.start_kernel();
        let smi = common::recording_nvidia_smi(dir.path(), &record);
        let extra = vec![
            "--sysfs-root".to_owned(),
            sys.display().to_string(),
            "--nvidia-smi".to_owned(),
            smi.display().to_string(),
            "--unbind-timeout".to_owned(),
            unbind_timeout_s.to_string(),
        ];
        let helper = start_helper(&binary, dir.path(), &extra);
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        // The passthrough memory, as a collection that listed the GPU left it.
        std::fs::write(
            data.join("gpus-seen.json"),
            format!("{{\"version\":1,\"gpus\":{{\"{GPU}\":{{\"uuid\":\"{UUID}\"}}}}}}"),
        )
        .unwrap();
        Some(Self {
            dir,
            sysfs,
            helper,
            binary,
            extra,
            changes: Arc::default(),
        })
    }

    /// The runtimes as a (re)started agent builds them.
    fn agent(&self) -> Passthrough {
        let host = Host::new(self.dir.path().join("root"), "nvidia-smi");
        let changes = self.changes.clone();
        Passthrough::new(
            host,
            &self.dir.path().join("data"),
            Arc::new(SocketHelper::new(&self.helper.sock)),
        )
        .on_host_change(move || {
            changes.fetch_add(1, Ordering::SeqCst);
        })
    }

    fn record(&self) -> Vec<String> {
        recorded(&self.dir.path().join("record"))
    }

    fn journal(&self) -> Journal {
        Journal::new(&self.dir.path().join("data"))
    }

    fn restart_helper(&mut self) {
        self.helper.kill();
        self.helper = start_helper(&self.binary, self.dir.path(), &self.extra);
    }
}

fn start_helper(binary: &Path, dir: &Path, extra: &[String]) -> Helper {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    Helper::start(
        binary,
        &dir.join("helper.sock"),
        &dir.join("audit.log"),
        &extra,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_and_release_move_the_gpu_and_its_audio_function_with_persistence_around_them() {
    let Some(rig) = Rig::new(5) else { return };
    let agent = rig.agent();
    let target = GpuRef::Uuid(UUID.parse().unwrap());
    let report = agent.bind(&target, &not_held).await.unwrap();
    assert_eq!(
        report.to_string(),
        "GPU 0000:61:00.0 (IOMMU group 61) bound to vfio-pci\n  \
         GPU 0000:61:00.0: nvidia -> vfio-pci, persistence mode off\n  \
         function 0000:61:00.1: snd_hda_intel -> vfio-pci, persistence mode untouched"
    );
    assert_eq!(
        rig.record(),
        [
            "nvidia-smi -i 00000000:61:00.0 -pm 0",
            "kernel: unbind 0000:61:00.0 from nvidia",
            "kernel: probe 0000:61:00.0 -> vfio-pci",
            "kernel: unbind 0000:61:00.1 from snd_hda_intel",
            "kernel: probe 0000:61:00.1 -> vfio-pci",
        ]
    );
    assert_eq!(rig.sysfs.driver(BRIDGE).as_deref(), Some("pcieport"));
    let entry = rig.journal().load().unwrap()[&pci(GPU)].clone();
    assert!(!entry.open);
    assert_eq!(entry.intent, Intent::Bind);
    assert!(entry.functions.iter().all(|f| f.step == Step::Done));
    assert_eq!(
        entry.functions[1].original_driver.as_deref(),
        Some("snd_hda_intel")
    );

    let report = agent.release(&pci(GPU)).await.unwrap();
    assert_eq!(
        report.to_string(),
        "0000:61:00.0 (IOMMU group 61) released from vfio-pci\n  \
         function 0000:61:00.1: vfio-pci -> snd_hda_intel, persistence mode untouched\n  \
         GPU 0000:61:00.0: vfio-pci -> nvidia, persistence mode on"
    );
    assert_eq!(
        rig.record()[5..],
        [
            "kernel: unbind 0000:61:00.1 from vfio-pci",
            "kernel: probe 0000:61:00.1 -> snd_hda_intel",
            "kernel: unbind 0000:61:00.0 from vfio-pci",
            "kernel: probe 0000:61:00.0 -> nvidia",
            "nvidia-smi -i 00000000:61:00.0 -pm 1",
        ]
    );
    assert_eq!(rig.changes.load(Ordering::SeqCst), 2);
    // Releasing again is refused: nothing is on vfio-pci.
    let err = agent.release(&pci(GPU)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "0000:61:00.0 is not passed through (its driver is nvidia): nothing to release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_gpu_and_a_group_with_a_foreign_device_are_refused_untouched() {
    let Some(rig) = Rig::new(5) else { return };
    let agent = rig.agent();
    let held = |_: &PciAddress, uuid: Option<&GpuUuid>| {
        (uuid.map(GpuUuid::as_str) == Some(UUID)).then(|| "hold-7".to_owned())
    };
    // Named by address, the hold is still found through the memory's UUID.
    let err = agent.bind(&GpuRef::Pci(pci(GPU)), &held).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "GPU 0000:61:00.0 ({UUID}) is held by hold-7: release the hold before passing the GPU to a VM"
        )
    );
    let err = agent
        .bind(&GpuRef::Pci(pci(LONE_GPU)), &not_held)
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Group(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "IOMMU group 12 of 0000:18:00.0 also holds 0000:18:00.2 (vendor 0x8086, class 0x0c0330), \
         which is not an NVIDIA function: a VM can only take a whole group, so 0000:18:00.0 \
         cannot be passed through alone; nothing was unbound"
    );
    // The audio function is not a GPU, and an unknown UUID has no address.
    let err = agent
        .bind(&GpuRef::Pci(pci(AUDIO)), &not_held)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not an NVIDIA GPU"), "{err}");
    let unknown = GpuRef::Uuid("GPU-00000000-0000-0000-0000-000000000000".parse().unwrap());
    let err = agent.bind(&unknown, &not_held).await.unwrap_err();
    assert!(matches!(err, RuntimeError::UnknownGpu { .. }), "{err}");

    assert_eq!(rig.record(), Vec::<String>::new());
    assert!(!rig.journal().path().exists());
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("nvidia"));
    assert_eq!(rig.sysfs.driver(FOREIGN).as_deref(), Some("xhci_hcd"));
    assert_eq!(rig.changes.load(Ordering::SeqCst), 0);
}

// What broke: only the GPU named was asked; a second GPU of its IOMMU group (two GPUs behind
// one switch without ACS) moved to vfio-pci with it while a hold had it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_gpu_in_the_same_iommu_group_refuses_the_bind_untouched() {
    let Some(rig) = Rig::new(5) else { return };
    const SIBLING: &str = "0000:62:00.0";
    rig.sysfs
        .add_function_in_group(SIBLING, "0x10de", "0x030200", Some("nvidia"), 61);
    let agent = rig.agent();
    let held = |address: &PciAddress, _: Option<&GpuUuid>| {
        (address.to_string() == SIBLING).then(|| "hold-9".to_owned())
    };
    let err = agent.bind(&GpuRef::Pci(pci(GPU)), &held).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "GPU 0000:62:00.0 (in IOMMU group 61 with 0000:61:00.0, so it would move too) is held by \
         hold-9: release the hold before passing the GPU to a VM"
    );
    assert_eq!(
        rig.record(),
        Vec::<String>::new(),
        "the helper was not asked"
    );
    assert!(!rig.journal().path().exists());
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("nvidia"));
    assert_eq!(rig.sysfs.driver(SIBLING).as_deref(), Some("nvidia"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_never_lets_go_reaches_the_operator_and_the_journal_keeps_it_on_nvidia() {
    let Some(rig) = Rig::new(1) else { return };
    rig.sysfs.stuck.lock().unwrap().insert(GPU.to_owned());
    let agent = rig.agent();
    let err = agent
        .bind(&GpuRef::Pci(pci(GPU)), &not_held)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "0000:61:00.0: the privileged step failed: its driver has not let go after 1s: \
             something still has the device open (nvidia-persistenced, a process on the GPU)"
        ),
        "{text}"
    );
    assert!(!text.contains("journal keeps"), "{text}");
    let entry = rig.journal().load().unwrap()[&pci(GPU)].clone();
    assert!(!entry.open, "{entry:?}");
    let gpu = &entry.functions[0];
    assert_eq!(gpu.driver.as_deref(), Some("nvidia"));
    assert!(
        matches!(&gpu.step, Step::Failed { error, answered: true } if error.contains("has not let go")),
        "{gpu:?}"
    );
    assert_eq!(entry.functions[1].step, Step::Untouched);
    assert_eq!(rig.sysfs.driver(AUDIO).as_deref(), Some("snd_hda_intel"));
    // The helper turned persistence off for the unbind and on again when it gave up.
    assert_eq!(
        rig.record(),
        [
            "nvidia-smi -i 00000000:61:00.0 -pm 0",
            "nvidia-smi -i 00000000:61:00.0 -pm 1",
        ]
    );
    assert_eq!(rig.changes.load(Ordering::SeqCst), 1);
}

/// Waits until a function's `driver` link is gone.
fn wait_gone(link: &Path) {
    let start = Instant::now();
    while std::fs::symlink_metadata(link).is_ok() {
        assert!(start.elapsed() < SETTLE, "{} stayed", link.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_killed_between_unbind_and_probe_is_rolled_back_at_the_next_start() {
    let Some(mut rig) = Rig::new(5) else { return };
    // The kernel unbinds the GPU but never completes its probe; the helper dies meanwhile.
    rig.sysfs.no_probe.lock().unwrap().insert(GPU.to_owned());
    let agent = Arc::new(rig.agent());
    let binding = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.bind(&GpuRef::Pci(pci(GPU)), &not_held).await })
    };
    let link = rig.sysfs.device(GPU).join("driver");
    tokio::task::spawn_blocking(move || wait_gone(&link))
        .await
        .unwrap();
    rig.helper.kill();
    let err = binding.await.unwrap().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("broke off the conversation"), "{text}");
    assert!(text.contains("could not be settled"), "{text}");
    assert!(
        text.ends_with(
            "the passthrough journal keeps what is unsettled and bcd settles it when bcd-helper \
             answers again, or at its next start"
        ),
        "{text}"
    );
    assert_eq!(rig.sysfs.driver(GPU), None);
    let entry = rig.journal().load().unwrap()[&pci(GPU)].clone();
    assert!(entry.open);
    assert_eq!(entry.intent, Intent::Rollback);

    // The next start: the kernel behaves, the helper is back, the agent reconciles.
    rig.sysfs.no_probe.lock().unwrap().clear();
    rig.restart_helper();
    let report = rig.agent().reconcile().await.unwrap();
    assert!(report.settled, "{report}");
    assert_eq!(
        report.to_string(),
        "the rollback of a failed bind of GPU 0000:61:00.0 (IOMMU group 61) was cut off: \
         GPU 0000:61:00.0: rolled back: no driver -> nvidia, persistence mode on"
    );
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("nvidia"));
    assert_eq!(rig.sysfs.driver(AUDIO).as_deref(), Some("snd_hda_intel"));
    let record = rig.record();
    assert_eq!(
        record.first().unwrap(),
        "nvidia-smi -i 00000000:61:00.0 -pm 0"
    );
    assert_eq!(
        record.last().unwrap(),
        "nvidia-smi -i 00000000:61:00.0 -pm 1"
    );
    assert!(!rig.journal().load().unwrap()[&pci(GPU)].open);
    // A second start finds nothing to do.
    let again = rig.agent().reconcile().await.unwrap();
    assert!(again.sentences.is_empty() && again.settled, "{again}");
}

/// Polls `done` every 20 ms until it holds, failing after [`SETTLE`].
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < SETTLE, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// What broke: a bind cut off by the helper's death left the GPU on no driver, unnoticed: a
// new step overwrote the open entry (losing the GPU's original driver), status named
// nothing, and the running agent did not settle it when the helper came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_cut_off_by_the_helper_is_refused_named_and_settled_when_the_helper_returns() {
    let Some(mut rig) = Rig::new(5) else { return };
    rig.sysfs.no_probe.lock().unwrap().insert(GPU.to_owned());
    let agent = Arc::new(rig.agent());
    let binding = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.bind(&GpuRef::Pci(pci(GPU)), &not_held).await })
    };
    let link = rig.sysfs.device(GPU).join("driver");
    tokio::task::spawn_blocking(move || wait_gone(&link))
        .await
        .unwrap();
    rig.helper.kill();
    binding.await.unwrap().unwrap_err();
    assert_eq!(rig.sysfs.driver(GPU), None);
    let open = rig.journal().load().unwrap();
    assert!(open[&pci(GPU)].open);

    // Named while open.
    assert_eq!(
        agent.unsettled(),
        [
            "GPU 0000:61:00.0 (IOMMU group 61): its rollback of a failed bind did not finish and \
          is open in the passthrough journal (0000:61:00.0 on no driver, before it nvidia; \
          0000:61:00.1 on snd_hda_intel); bcd settles it when bcd-helper answers again, and \
          refuses vfio steps on these functions until then"
        ]
    );
    // Refused, the entry and its original drivers kept.
    let err = agent
        .bind(&GpuRef::Pci(pci(GPU)), &not_held)
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Unsettled(_)), "{err}");
    let err = agent.release(&pci(AUDIO)).await.unwrap_err();
    assert!(matches!(err, RuntimeError::Unsettled(_)), "{err}");
    assert_eq!(rig.journal().load().unwrap(), open);

    // The watch notices the helper gone, then back, and settles the entry.
    let watch = {
        let agent = agent.clone();
        let beat = Duration::from_millis(50);
        tokio::spawn(async move { agent.watch_helper(beat, beat).await })
    };
    let seen = agent.clone();
    wait_until("the watch notices the helper gone", || {
        matches!(seen.helper_seen(), HelperSeen::Failing(_))
    })
    .await;
    assert!(rig.journal().load().unwrap()[&pci(GPU)].open);
    rig.sysfs.no_probe.lock().unwrap().clear();
    rig.restart_helper();
    let journal = rig.journal();
    wait_until("the entry is settled once the helper answers again", || {
        journal.load().is_ok_and(|e| !e[&pci(GPU)].open)
    })
    .await;
    watch.abort();
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("nvidia"));
    assert_eq!(rig.sysfs.driver(AUDIO).as_deref(), Some("snd_hda_intel"));
    assert_eq!(
        rig.record().last().unwrap(),
        "nvidia-smi -i 00000000:61:00.0 -pm 1"
    );
    assert!(agent.unsettled().is_empty(), "{:?}", agent.unsettled());
    assert_eq!(agent.helper_seen(), HelperSeen::Answering);
}

/// An entry as an agent killed during its step leaves it.
fn cut_off(intent: Intent, gpu_original: &str, audio_original: &str, gpu_step: Step) -> Entry {
    let record = |addr: &str, gpu: bool, original: &str, step: Step| FunctionRecord {
        address: pci(addr),
        gpu,
        original_driver: Some(original.to_owned()),
        original_persistence: Persistence::Unknown,
        step,
        driver: Some(original.to_owned()),
    };
    Entry {
        intent,
        gpu: pci(GPU),
        group: "61".into(),
        functions: vec![
            record(GPU, true, gpu_original, gpu_step),
            record(AUDIO, false, audio_original, Step::Untouched),
        ],
        open: true,
        updated_unix_s: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_bind_has_its_bind_finished_at_the_next_start() {
    let Some(rig) = Rig::new(5) else { return };
    rig.journal()
        .put(&mut cut_off(
            Intent::Bind,
            "nvidia",
            "snd_hda_intel",
            Step::Moving,
        ))
        .unwrap();
    rig.sysfs.strand(GPU, "vfio-pci");
    let report = rig.agent().reconcile().await.unwrap();
    assert!(report.settled, "{report}");
    assert_eq!(
        report.to_string(),
        "the bind of GPU 0000:61:00.0 (IOMMU group 61) was cut off: \
         GPU 0000:61:00.0: bind finished: no driver -> vfio-pci, persistence mode untouched; \
         function 0000:61:00.1: bind finished: snd_hda_intel -> vfio-pci, persistence mode untouched"
    );
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("vfio-pci"));
    assert_eq!(rig.sysfs.driver(AUDIO).as_deref(), Some("vfio-pci"));
    assert_eq!(rig.changes.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_release_has_its_release_finished_with_persistence_on() {
    let Some(rig) = Rig::new(5) else { return };
    // Both on vfio-pci; the audio function was released, the GPU was cut off on no driver.
    rig.sysfs.strand(GPU, "");
    let mut entry = cut_off(Intent::Release, "vfio-pci", "vfio-pci", Step::Moving);
    entry.functions[1].step = Step::Done;
    rig.journal().put(&mut entry).unwrap();
    let report = rig.agent().reconcile().await.unwrap();
    assert!(report.settled, "{report}");
    assert_eq!(
        report.to_string(),
        "the release of GPU 0000:61:00.0 (IOMMU group 61) was cut off: \
         GPU 0000:61:00.0: release finished: no driver -> nvidia, persistence mode on"
    );
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("nvidia"));
    assert_eq!(rig.sysfs.driver(AUDIO).as_deref(), Some("snd_hda_intel"));
    assert_eq!(
        rig.record(),
        [
            "kernel: probe 0000:61:00.0 -> vfio-pci",
            "kernel: unbind 0000:61:00.0 from vfio-pci",
            "kernel: probe 0000:61:00.0 -> nvidia",
            "nvidia-smi -i 00000000:61:00.0 -pm 1",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_bind_that_stranded_nothing_is_left_as_it_stands() {
    let Some(rig) = Rig::new(5) else { return };
    rig.journal()
        .put(&mut cut_off(
            Intent::Bind,
            "nvidia",
            "snd_hda_intel",
            Step::Untouched,
        ))
        .unwrap();
    let report = rig.agent().reconcile().await.unwrap();
    assert!(report.settled);
    assert!(
        report.to_string().contains(
            "nothing of it was left on no driver, so it was left as it stands \
             (0000:61:00.0 on nvidia, 0000:61:00.1 on snd_hda_intel)"
        ),
        "{report}"
    );
    assert_eq!(rig.record(), Vec::<String>::new());
}

// What broke: an audio function that had no driver to begin with (no sound driver loaded)
// counted as "stranded", so a bind cut off before anything moved was finished at the next
// start: the GPU went to vfio-pci although nobody's bind had moved anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_that_never_had_a_driver_is_not_stranded() {
    let Some(rig) = Rig::new(5) else { return };
    rig.sysfs.strand(AUDIO, "");
    let mut entry = cut_off(Intent::Bind, "nvidia", "unused", Step::Untouched);
    entry.functions[1].original_driver = None;
    entry.functions[1].driver = None;
    rig.journal().put(&mut entry).unwrap();
    let report = rig.agent().reconcile().await.unwrap();
    assert!(report.settled, "{report}");
    assert!(
        report.to_string().contains(
            "nothing of it was left on no driver, so it was left as it stands \
             (0000:61:00.0 on nvidia, 0000:61:00.1 on no driver)"
        ),
        "{report}"
    );
    assert_eq!(rig.record(), Vec::<String>::new(), "nothing was moved");
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("nvidia"));
    let again = rig.agent().reconcile().await.unwrap();
    assert!(again.sentences.is_empty(), "the entry is settled: {again}");
}

/// The record's lines with `virsh` runs shortened to their subcommand (the URI carries a
/// temporary path).
fn shortened(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .map(|l| match l.strip_prefix("virsh ") {
            Some(rest) => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                // virsh -c URI SUBCOMMAND ...
                format!("virsh {}", words.get(2).copied().unwrap_or("?"))
            }
            None => l,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libvirt_start_and_destroy_turn_persistence_off_and_on_for_exactly_the_two_gpus() {
    let Some(binary) = helper_binary() else {
        return;
    };
    let Some(real_virsh) = bcd_testkit::require(bcd_testkit::Peer::Virsh) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record");
    let sys = dir.path().join("root/sys");
    let mut sysfs = FakePciKernel::recording(&sys, &record);
    sysfs.add_function_in_group("0000:18:00.0", "0x10de", "0x030200", Some("nvidia"), 1);
    sysfs.add_function_in_group(
        "0000:18:00.1",
        "0x10de",
        "0x040300",
        Some("snd_hda_intel"),
        1,
    );
    sysfs.add_function_in_group("0000:3b:00.0", "0x10de", "0x030200", Some("nvidia"), 2);
    sysfs.add_function_in_group("0000:19:00.0", "0x8086", "0x020000", Some("ixgbe"), 3);
    sysfs.start_kernel();
    let smi = common::recording_nvidia_smi(dir.path(), &record);
    let virsh = common::recording_virsh(dir.path(), &record, &real_virsh);
    let node = std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/libvirt/test-node.xml"
    ))
    .unwrap();
    let save = dir.path().join("save");
    std::fs::create_dir(&save).unwrap();
    let extra = [
        "--sysfs-root".to_owned(),
        sys.display().to_string(),
        "--nvidia-smi".to_owned(),
        smi.display().to_string(),
        "--virsh".to_owned(),
        virsh.display().to_string(),
        "--libvirt-uri".to_owned(),
        format!("test://{}", node.display()),
        "--save-dir".to_owned(),
        save.display().to_string(),
    ];
    let helper = start_helper(&binary, dir.path(), &extra);
    let changes = Arc::new(AtomicUsize::new(0));
    let counted = changes.clone();
    let agent = Passthrough::new(
        Host::new(dir.path().join("root"), "nvidia-smi"),
        dir.path(),
        Arc::new(SocketHelper::new(&helper.sock)),
    )
    .on_host_change(move || {
        counted.fetch_add(1, Ordering::SeqCst);
    });

    // A domain with a held GPU is refused after reading its XML, before anything moves.
    let held_3b = |address: &PciAddress, _: Option<&GpuUuid>| {
        (address.to_string() == "0000:3b:00.0").then(|| "training-job".to_owned())
    };
    let err = agent
        .start(&"two-gpu-vm".parse().unwrap(), &held_3b)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("training-job") && err.to_string().contains("0000:3b:00.0"),
        "{err}"
    );
    assert_eq!(
        shortened(recorded(&record)),
        ["virsh dumpxml"],
        "nothing moved"
    );
    std::fs::remove_file(&record).unwrap();

    let nothing_held = |_: &PciAddress, _: Option<&GpuUuid>| None;
    let report = agent
        .start(&"two-gpu-vm".parse().unwrap(), &nothing_held)
        .await
        .unwrap();
    assert_eq!(
        report.to_string(),
        "domain two-gpu-vm started\n  \
         GPU 0000:18:00.0: nvidia -> nvidia, persistence mode off\n  \
         GPU 0000:3b:00.0: nvidia -> nvidia, persistence mode off"
    );
    assert_eq!(
        shortened(recorded(&record)),
        [
            "virsh dumpxml",
            "virsh dumpxml",
            "nvidia-smi -i 00000000:18:00.0 -pm 0",
            "nvidia-smi -i 00000000:3B:00.0 -pm 0",
            "virsh start",
        ]
    );
    std::fs::remove_file(&record).unwrap();

    let report = agent
        .destroy(&"two-gpu-vm-running".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        report.to_string(),
        "domain two-gpu-vm-running destroyed\n  \
         GPU 0000:18:00.0: nvidia -> nvidia, persistence mode on\n  \
         GPU 0000:3b:00.0: nvidia -> nvidia, persistence mode on"
    );
    assert_eq!(
        shortened(recorded(&record)),
        [
            "virsh dumpxml",
            "virsh destroy",
            "nvidia-smi -i 00000000:18:00.0 -pm 1",
            "nvidia-smi -i 00000000:3B:00.0 -pm 1",
        ]
    );
    std::fs::remove_file(&record).unwrap();

    // virsh's refusal reaches the operator, and no persistence call follows a failed destroy.
    let err = agent
        .destroy(&"two-gpu-vm".parse().unwrap())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("domain two-gpu-vm: "), "{text}");
    assert!(text.contains("not running"), "{text}");
    assert_eq!(
        shortened(recorded(&record)),
        ["virsh dumpxml", "virsh destroy"]
    );
    assert_eq!(changes.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_that_fails_on_the_audio_function_gives_the_gpu_back_to_nvidia() {
    let Some(rig) = Rig::new(1) else { return };
    rig.sysfs.stuck.lock().unwrap().insert(AUDIO.to_owned());
    let agent = rig.agent();
    let err = agent
        .bind(&GpuRef::Pci(pci(GPU)), &not_held)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("0000:61:00.1: the privileged step failed: its driver has not let go"),
        "{text}"
    );
    assert!(
        text.ends_with("; GPU 0000:61:00.0: rolled back: vfio-pci -> nvidia, persistence mode on"),
        "{text}"
    );
    assert_eq!(rig.sysfs.driver(GPU).as_deref(), Some("nvidia"));
    assert_eq!(rig.sysfs.driver(AUDIO).as_deref(), Some("snd_hda_intel"));
    let entry = rig.journal().load().unwrap()[&pci(GPU)].clone();
    assert!(!entry.open);
    assert_eq!(entry.intent, Intent::Rollback);
    assert_eq!(
        rig.record(),
        [
            "nvidia-smi -i 00000000:61:00.0 -pm 0",
            "kernel: unbind 0000:61:00.0 from nvidia",
            "kernel: probe 0000:61:00.0 -> vfio-pci",
            "kernel: unbind 0000:61:00.0 from vfio-pci",
            "kernel: probe 0000:61:00.0 -> nvidia",
            "nvidia-smi -i 00000000:61:00.0 -pm 1",
        ]
    );
}
