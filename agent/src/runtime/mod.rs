//! Passthrough: GPUs to VMs and back, through `bcd-helper`, without ever stranding one.
//!
//! The agent decides (is the GPU held? which functions share its IOMMU group? what was cut
//! off by a crash?) and the helper acts (persistence, sysfs unbind/probe, `virsh`). Two
//! runtimes, as the seed names them:
//!
//! - VFIO ([`Passthrough::bind`], [`Passthrough::release`]): a GPU and the other NVIDIA
//!   functions of its IOMMU group move to `vfio-pci` and back, one helper call per function,
//!   each step written to the [`journal`] first.
//! - libvirt ([`Passthrough::start`], [`Passthrough::restore`], [`Passthrough::destroy`]):
//!   the helper reads the domain's hostdevs and turns persistence off and on around `virsh`.
//!
//! Guarantees:
//! - A held GPU, a function that is not an NVIDIA GPU, and a group with another vendor's
//!   device are refused before the helper is asked anything.
//! - No function is left on no driver by a failure the agent sees: a bind that fails part-way
//!   is rolled back at once; a step whose answer never came (helper killed) stays open in the
//!   journal and [`Passthrough::reconcile`] settles it at the next start, or, in a running
//!   node, when the helper answers again ([`helper_watch`]).
//! - While a journal entry is open, no new step starts on any of its functions
//!   ([`RuntimeError::Unsettled`]), so the original drivers it keeps are never lost; and
//!   [`Passthrough::unsettled`] names each such GPU for the node's status.
//! - The operator's last answer is the truth: a bind the operator was told failed is rolled
//!   back; a bind or release the operator got no answer for (the agent died) is finished when
//!   a function of it was left on no driver, and otherwise left as it stands.
//! - After every bind, release, start, restore and destroy (failed or not) the inventory is
//!   asked to collect again ([`Trigger::HostChange`]).
//! - One passthrough step runs at a time on a node.

pub mod helper_watch;
pub(crate) mod iommu;
pub mod journal;
mod libvirt;
mod vfio;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bcd_protocol::{GpuUuid, InvalidArgument, PciAddress, PersistenceNote};

use crate::helper_client::{ClientError, Helper};
use crate::inventory::memory::GpuMemory;
use crate::inventory::scheduler::{SchedulerHandle, Trigger};
use crate::state::StateError;
use crate::sys::host::Host;

pub(crate) use iommu::GroupError;
pub use journal::Journal;
pub use vfio::reconcile;

/// Answers "is this GPU held, and by which hold?" for the GPU's address and, when the
/// passthrough memory knows it, its UUID. The node service plugs its hold store in here.
pub(crate) type HoldLookup<'a> =
    &'a (dyn Fn(&PciAddress, Option<&GpuUuid>) -> Option<String> + Sync);

/// Why a passthrough step was refused or failed. `Display` is the operator's sentence; the
/// helper's own sentence is carried verbatim.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A UUID the passthrough memory does not know.
    #[error("GPU {uuid} is not in the passthrough memory ({path}): bcd learns a GPU's PCI address when the driver lists it; name it by its PCI address instead")]
    UnknownGpu {
        /// The UUID.
        uuid: GpuUuid,
        /// The memory file.
        path: PathBuf,
    },
    /// The address is not an NVIDIA GPU here.
    #[error(
        "{address} {why}: only an NVIDIA GPU can be passed through (its other functions follow it)"
    )]
    NotAGpu {
        /// The address.
        address: PciAddress,
        /// What it is instead.
        why: String,
    },
    /// The GPU has a live hold.
    #[error("{gpu} is held by {hold}: release the hold before passing the GPU to a VM")]
    Held {
        /// The GPU (its address, and UUID where known).
        gpu: String,
        /// The hold's id.
        hold: String,
    },
    /// The IOMMU group cannot be passed through.
    #[error(transparent)]
    Group(#[from] GroupError),
    /// Release of a function that is not on `vfio-pci`.
    #[error("{address} is not passed through (its driver is {driver}): nothing to release")]
    NotPassedThrough {
        /// The address.
        address: PciAddress,
        /// Its driver, as a word.
        driver: String,
    },
    /// A helper call failed. The helper's sentence comes first, verbatim; `aftermath` says
    /// what the agent did about it.
    #[error("{device}: {source}{aftermath}")]
    Helper {
        /// The function or domain the call was about.
        device: String,
        /// The helper's (or the connection's) error.
        source: ClientError,
        /// What was undone or kept for later, starting with `; `, or empty.
        aftermath: String,
    },
    /// A step on a function that an open journal entry still covers (nothing touched).
    #[error(transparent)]
    Unsettled(#[from] journal::Unsettled),
    /// The passthrough memory or journal could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// An argument from the operator that does not parse.
    #[error(transparent)]
    Invalid(#[from] InvalidArgument),
}

impl From<journal::BeginError> for RuntimeError {
    fn from(e: journal::BeginError) -> Self {
        match e {
            journal::BeginError::Unsettled(u) => Self::Unsettled(u),
            journal::BeginError::State(s) => Self::State(s),
        }
    }
}

/// What kind of function a change is about.
fn kind_word(gpu: bool) -> &'static str {
    if gpu {
        "GPU"
    } else {
        "function"
    }
}

/// What happened to one PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionChange {
    /// The function.
    pub address: PciAddress,
    /// Whether it is a GPU (rather than its audio or other function).
    pub gpu: bool,
    /// Its driver before (`None`: no driver).
    pub driver_before: Option<String>,
    /// Its driver after (`None`: no driver).
    pub driver_after: Option<String>,
    /// What happened to its persistence mode.
    pub persistence: PersistenceNote,
}

impl fmt::Display for FunctionChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {} -> {}, {}",
            kind_word(self.gpu),
            self.address,
            iommu::driver_word(self.driver_before.as_deref()),
            iommu::driver_word(self.driver_after.as_deref()),
            self.persistence
        )
    }
}

/// Which passthrough step a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `vfio bind`.
    VfioBind,
    /// `vfio release`.
    VfioRelease,
    /// `vm start`.
    VmStart,
    /// `vm restore`.
    VmRestore,
    /// `vm destroy`.
    VmDestroy,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::VfioBind => "bound to vfio-pci",
            Action::VfioRelease => "released from vfio-pci",
            Action::VmStart => "started",
            Action::VmRestore => "restored",
            Action::VmDestroy => "destroyed",
        })
    }
}

/// What a passthrough step did: one line for the step, then one per function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The step.
    pub action: Action,
    /// What it was about: a GPU and its IOMMU group, a domain, a save image.
    pub subject: String,
    /// Each function touched, in the order it moved.
    pub functions: Vec<FunctionChange>,
    /// The libvirt domain of a VM step: the one named, or for a restore the one its save
    /// image names; `None` for vfio steps.
    pub domain: Option<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.subject, self.action)?;
        if self.functions.is_empty() {
            write!(f, " (no NVIDIA GPU among its devices)")?;
        }
        for c in &self.functions {
            write!(f, "\n  {c}")?;
        }
        Ok(())
    }
}

/// What [`Passthrough::reconcile`] did, in sentences for the operator. Empty when the
/// journal had nothing cut off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// One sentence each.
    pub sentences: Vec<String>,
    /// Whether every entry was settled (`false`: some stay in the journal for next time).
    pub settled: bool,
}

impl fmt::Display for ReconcileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.sentences.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(s)?;
        }
        Ok(())
    }
}

/// The passthrough runtimes of one node.
pub struct Passthrough {
    host: Host,
    helper: Arc<dyn Helper>,
    journal: Journal,
    memory: GpuMemory,
    on_change: Box<dyn Fn() + Send + Sync>,
    one_at_a_time: tokio::sync::Mutex<()>,
    /// The journal's open entries when the last step or settling ended (taken under
    /// `one_at_a_time`, read by status without waiting for a step in flight).
    open: std::sync::Mutex<Vec<journal::Entry>>,
    /// What the helper watch last learned.
    seen: std::sync::Mutex<helper_watch::HelperSeen>,
    /// The open entries a settling tried while the helper answered, as they were left: not
    /// tried again until the helper has been away (see [`helper_watch`]).
    tried: std::sync::Mutex<Vec<journal::Entry>>,
    /// Woken when a step or settling leaves entries open, so the watch pings at once rather
    /// than at the end of an idle pause.
    opened: tokio::sync::Notify,
}

impl fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Passthrough")
            .field("host", &self.host)
            .field("helper", &self.helper)
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
}

impl Passthrough {
    /// The runtimes for `host`, keeping the journal and reading the passthrough memory in
    /// `data_dir`, acting through `helper`. Nothing is asked of the inventory until
    /// [`Passthrough::with_scheduler`] or [`Passthrough::on_host_change`] says how.
    pub fn new(host: Host, data_dir: &Path, helper: Arc<dyn Helper>) -> Self {
        Self {
            host,
            helper,
            journal: Journal::new(data_dir),
            memory: GpuMemory::new(data_dir),
            on_change: Box::new(|| {}),
            one_at_a_time: tokio::sync::Mutex::new(()),
            open: std::sync::Mutex::new(Vec::new()),
            seen: std::sync::Mutex::new(helper_watch::HelperSeen::NotYet),
            tried: std::sync::Mutex::new(Vec::new()),
            opened: tokio::sync::Notify::new(),
        }
    }

    /// Asks `scheduler` for a collection ([`Trigger::HostChange`]) after every step.
    pub(crate) fn with_scheduler(self, scheduler: SchedulerHandle) -> Self {
        self.on_host_change(move || scheduler.request(Trigger::HostChange))
    }

    /// Calls `f` after every step instead.
    pub fn on_host_change(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_change = Box::new(f);
        self
    }

    fn changed(&self) {
        (self.on_change)();
    }

    /// Notes the journal's open entries; called under `one_at_a_time` as each step or
    /// settling ends. A journal that cannot be read counts as holding none (start-up reported
    /// why).
    fn note_open(&self) {
        let open: Vec<journal::Entry> = self
            .journal
            .load()
            .map(|entries| entries.into_values().filter(|e| e.open).collect())
            .unwrap_or_default();
        let any = !open.is_empty();
        if let Ok(mut kept) = self.open.lock() {
            *kept = open;
        }
        if any {
            self.opened.notify_one();
        }
    }

    /// The open entries [`Passthrough::note_open`] last noted.
    fn open_entries(&self) -> Vec<journal::Entry> {
        self.open.lock().map(|o| o.clone()).unwrap_or_default()
    }
}

/// Whether the helper answered (it then either did nothing or cleaned up after itself),
/// rather than the answer never coming (connection refused or broken, no answer in time).
fn answered(e: &ClientError) -> bool {
    matches!(e, ClientError::Helper(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::helper_client::fake::RecordingHelper;
    use bcd_protocol::{GpuRef, HelperError, Operation, Outcome};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A helper that answers a release as if the function moved, without touching any file
    /// (the fake host stays as it is), and refuses everything else.
    fn releasing() -> RecordingHelper {
        RecordingHelper::answering(|op| match op {
            Operation::VfioRelease { device } => Ok(Outcome::Vfio {
                device: *device,
                driver_before: Some(iommu::VFIO_DRIVER.into()),
                driver_after: Some("nvidia".into()),
                persistence: PersistenceNote::Set { enabled: true },
            }),
            _ => Err(ClientError::Helper(HelperError::Unsupported)),
        })
    }

    fn passthrough_host() -> Host {
        Host::fake(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/hosts/passthrough"
        ))
    }

    fn not_held(_: &PciAddress, _: Option<&GpuUuid>) -> Option<String> {
        None
    }

    /// A helper that cannot be reached while `down` is set (as when bcd-helper is stopped or
    /// killed) and answers as a healthy one otherwise.
    fn helper_down_while(down: Arc<std::sync::atomic::AtomicBool>) -> RecordingHelper {
        RecordingHelper::answering(move |op| {
            if down.load(Ordering::SeqCst) {
                Err(ClientError::Connect {
                    path: "/run/bcd-helper/helper.sock".into(),
                    reason: "connection refused".into(),
                    kind: std::io::ErrorKind::ConnectionRefused,
                })
            } else {
                Ok(crate::helper_client::fake::succeeded(op))
            }
        })
    }

    /// The open entry a bind leaves when its helper went away: the GPU's unbind was asked
    /// and never answered, and the rollback could not reach the helper either.
    fn open_rollback(gpu: &str, functions: &[&str]) -> journal::Entry {
        journal::Entry {
            intent: journal::Intent::Rollback,
            gpu: gpu.parse().unwrap(),
            group: "61".into(),
            functions: functions
                .iter()
                .map(|f| journal::FunctionRecord {
                    address: f.parse().unwrap(),
                    gpu: *f == gpu,
                    original_driver: Some("nvidia".into()),
                    original_persistence: journal::Persistence::Unknown,
                    step: journal::Step::Failed {
                        error: "bcd-helper broke off the conversation".into(),
                        answered: false,
                    },
                    driver: None,
                })
                .collect(),
            open: true,
            updated_unix_s: 0,
        }
    }

    // What broke: a release (or bind) of a GPU with an open journal entry went ahead and its
    // entry replaced the open one, so the GPU's original driver was lost.
    #[tokio::test]
    async fn a_step_on_a_gpu_with_an_open_entry_is_refused_and_keeps_its_original_driver() {
        let data = tempfile::tempdir().unwrap();
        let helper = Arc::new(releasing());
        let runtime = Passthrough::new(passthrough_host(), data.path(), helper.clone());
        let mut open = open_rollback("0000:61:00.0", &["0000:61:00.0", "0000:61:00.1"]);
        runtime.journal.put(&mut open).unwrap();
        let before = runtime.journal.load().unwrap();
        for device in ["0000:61:00.0", "0000:61:00.1"] {
            let err = runtime.release(&device.parse().unwrap()).await.unwrap_err();
            assert!(matches!(err, RuntimeError::Unsettled(_)), "{err}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!(
                    "{device}: no new passthrough step may start on it: the rollback of a failed \
                     bind of GPU 0000:61:00.0 (IOMMU group 61) did not finish"
                )),
                "{text}"
            );
            assert!(
                text.contains("bcd settles it when bcd-helper answers again"),
                "{text}"
            );
        }
        let err = runtime
            .bind(&GpuRef::Pci("0000:61:00.0".parse().unwrap()), &not_held)
            .await
            .unwrap_err();
        assert!(matches!(err, RuntimeError::Unsettled(_)), "{err}");
        assert_eq!(helper.calls(), [], "the helper was asked nothing");
        let after = runtime.journal.load().unwrap();
        assert_eq!(after, before, "the open entry is kept as it was");
        assert_eq!(
            after[&"0000:61:00.0".parse().unwrap()].functions[0]
                .original_driver
                .as_deref(),
            Some("nvidia")
        );
    }

    // What broke: a bind the helper could not finish (it went away) left its GPU's entry open
    // in the journal, and the node's status problems said nothing of it.
    #[tokio::test]
    async fn status_names_a_gpu_whose_journal_entry_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let node = crate::node::shared::test_node_on(dir.path(), passthrough_host())
            .with_helper(Arc::new(helper_down_while(down.clone())));
        let gpu = "0000:4a:00.0";
        let err = node
            .passthrough()
            .bind(&GpuRef::Pci(gpu.parse().unwrap()), &not_held)
            .await
            .unwrap_err();
        assert!(matches!(err, RuntimeError::Helper { .. }), "{err}");
        let named: Vec<String> = node
            .problems_now()
            .into_iter()
            .filter(|p| p.contains("passthrough journal"))
            .collect();
        assert_eq!(
            named,
            [format!(
                "GPU {gpu} (IOMMU group 60): its rollback of a failed bind did not finish and is \
                 open in the passthrough journal ({gpu} on nvidia); bcd settles it when bcd-helper \
                 answers again, and refuses vfio steps on these functions until then"
            )]
        );
        // Settled, it is no longer named.
        down.store(false, Ordering::SeqCst);
        node.passthrough().reconcile().await.unwrap();
        assert!(
            !node.problems_now().iter().any(|p| p.contains(gpu)),
            "{:?}",
            node.problems_now()
        );
    }

    // What broke: the running node did not notice the helper coming back, so an entry left
    // open while it was away stayed open (its GPU possibly on no driver) until the next start.
    #[tokio::test]
    async fn an_open_entry_is_settled_when_the_helper_answers_again() {
        let dir = tempfile::tempdir().unwrap();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let helper = Arc::new(helper_down_while(down.clone()));
        let node = crate::node::shared::test_node_on(dir.path(), passthrough_host())
            .with_helper(helper.clone());
        let gpu: PciAddress = "0000:4a:00.0".parse().unwrap();
        let runtime = node.passthrough();
        runtime
            .bind(&GpuRef::Pci(gpu), &not_held)
            .await
            .unwrap_err();
        assert!(runtime.journal.load().unwrap()[&gpu].open);
        // Away: noticed, nothing settled.
        assert_eq!(runtime.check_helper().await, None);
        assert!(matches!(
            runtime.helper_seen(),
            helper_watch::HelperSeen::Failing(why) if why.contains("connection refused")
        ));
        assert!(node.problems_now().iter().any(|p| p.starts_with(
            "the root helper cannot be reached (its last ping: cannot reach bcd-helper at"
        )));
        assert!(runtime.journal.load().unwrap()[&gpu].open);
        // Back: the open entry is settled as at start-up.
        down.store(false, Ordering::SeqCst);
        let calls_before = helper.calls().len();
        let report = runtime.check_helper().await.expect("settled");
        assert!(report.settled, "{report}");
        assert_eq!(
            report.to_string(),
            "the rollback of a failed bind of GPU 0000:4a:00.0 (IOMMU group 60) was cut off: \
             GPU 0000:4a:00.0: persistence mode on again"
        );
        assert_eq!(
            helper.calls()[calls_before..],
            [
                bcd_protocol::Operation::Ping,
                bcd_protocol::Operation::SetPersistence { gpu, enabled: true }
            ]
        );
        assert!(!runtime.journal.load().unwrap()[&gpu].open);
        assert_eq!(runtime.helper_seen(), helper_watch::HelperSeen::Answering);
        assert!(runtime.unsettled().is_empty());
        // Answering still: nothing more is asked than the ping.
        assert_eq!(runtime.check_helper().await, None);
        assert_eq!(helper.calls().len(), calls_before + 3);
        // A new bind is no longer refused.
        runtime.bind(&GpuRef::Pci(gpu), &not_held).await.unwrap();
    }

    // What broke: an entry left open while the helper was down, between two pings that both
    // found it answering (a socket-activated helper is back at the next connection), was
    // never settled by the running node, only by its next start.
    #[tokio::test]
    async fn an_entry_left_open_between_two_answered_pings_is_settled_at_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let helper = Arc::new(helper_down_while(down.clone()));
        let node = crate::node::shared::test_node_on(dir.path(), passthrough_host())
            .with_helper(helper.clone());
        let gpu: PciAddress = "0000:4a:00.0".parse().unwrap();
        let runtime = node.passthrough();
        assert_eq!(runtime.check_helper().await, None, "nothing open");
        assert_eq!(runtime.helper_seen(), helper_watch::HelperSeen::Answering);
        // The helper goes away during a bind and is back before the watch pings again.
        down.store(true, Ordering::SeqCst);
        runtime
            .bind(&GpuRef::Pci(gpu), &not_held)
            .await
            .unwrap_err();
        down.store(false, Ordering::SeqCst);
        assert!(runtime.journal.load().unwrap()[&gpu].open);
        let report = runtime.check_helper().await.expect("settled");
        assert!(report.settled, "{report}");
        assert!(!runtime.journal.load().unwrap()[&gpu].open);
        assert!(runtime.unsettled().is_empty());
    }

    // An entry the helper answered for but could not settle is not asked about at every
    // ping while the helper keeps answering; it is at its next return.
    #[tokio::test]
    async fn an_entry_that_could_not_be_settled_waits_for_the_helpers_next_return() {
        let data = tempfile::tempdir().unwrap();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refuse = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (d, r) = (down.clone(), refuse.clone());
        let helper = Arc::new(RecordingHelper::answering(move |op| {
            if d.load(Ordering::SeqCst) {
                Err(ClientError::Connect {
                    path: "/run/bcd-helper/helper.sock".into(),
                    reason: "connection refused".into(),
                    kind: std::io::ErrorKind::ConnectionRefused,
                })
            } else if r.load(Ordering::SeqCst) && !matches!(op, Operation::Ping) {
                Err(ClientError::Helper(HelperError::Failed {
                    exit_code: Some(1),
                    message: "the kernel will not probe it".into(),
                }))
            } else {
                Ok(crate::helper_client::fake::succeeded(op))
            }
        }));
        // A GPU left on no driver, which the helper answers for but cannot give back.
        let host = Host::fake(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/hosts/no-driver"
        ));
        let runtime = Passthrough::new(host, data.path(), helper.clone());
        runtime.check_helper().await;
        let mut open = open_rollback("0000:41:00.0", &["0000:41:00.0"]);
        runtime.journal.put(&mut open).unwrap();
        runtime.note_open();
        let report = runtime.check_helper().await.expect("tried");
        assert!(!report.settled, "{report}");
        let asked = helper.calls().len();
        assert_eq!(runtime.check_helper().await, None);
        assert_eq!(helper.calls().len(), asked + 1, "only the ping");
        // Away and back: tried again.
        down.store(true, Ordering::SeqCst);
        assert_eq!(runtime.check_helper().await, None);
        down.store(false, Ordering::SeqCst);
        refuse.store(false, Ordering::SeqCst);
        let again = runtime.check_helper().await.expect("tried again");
        assert!(helper.calls().len() > asked + 3, "{again}");
    }

    #[tokio::test]
    async fn release_asks_for_the_other_functions_first_and_the_gpu_last() {
        let host = Host::fake(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/hosts/passthrough"
        ));
        let data = tempfile::tempdir().unwrap();
        let helper = Arc::new(releasing());
        let changes = Arc::new(AtomicUsize::new(0));
        let counted = changes.clone();
        let runtime =
            Passthrough::new(host, data.path(), helper.clone()).on_host_change(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            });
        let gpu: PciAddress = "0000:61:00.0".parse().unwrap();
        let report = runtime.release(&gpu).await.unwrap();
        let asked: Vec<String> = helper
            .calls()
            .iter()
            .map(|op| match op {
                Operation::VfioRelease { device } => device.to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(asked, ["0000:61:00.1", "0000:61:00.0"]);
        assert_eq!(report.functions.len(), 2);
        assert_eq!(changes.load(Ordering::SeqCst), 1);
        // A GPU on nvidia is not passed through: refused before the helper is asked.
        let err = runtime
            .release(&"0000:4a:00.0".parse().unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(err, RuntimeError::NotPassedThrough { .. }),
            "{err}"
        );
        assert_eq!(helper.calls().len(), 2);
    }
}
