//! The VFIO runtime: a GPU and the other NVIDIA functions of its IOMMU group to `vfio-pci`
//! and back, one helper call per function, each step journaled; and the settling of steps a
//! crash cut off.

use bcd_protocol::{GpuRef, GpuUuid, PciAddress, PersistenceNote};

use super::iommu::{self, driver_of, driver_word, NVIDIA_DRIVER, VFIO_DRIVER};
use super::journal::{Entry, FunctionRecord, Intent, Journal, Persistence, Step};
use super::{
    answered, Action, FunctionChange, HoldLookup, Passthrough, ReconcileReport, Report,
    RuntimeError,
};
use crate::helper_client::{ClientError, Helper};
use crate::state::StateError;
use crate::sys::host::Host;

impl Passthrough {
    /// Binds a GPU, named by UUID (resolved through the passthrough memory) or PCI address,
    /// and the other NVIDIA functions of its IOMMU group to `vfio-pci`: the GPU first, then
    /// the others in address order. `held` is asked before anything is touched.
    ///
    /// Binding a GPU already on `vfio-pci` succeeds and changes nothing.
    ///
    /// # Errors
    /// Refusals, with nothing touched: [`RuntimeError::UnknownGpu`],
    /// [`RuntimeError::NotAGpu`], [`RuntimeError::Held`], [`RuntimeError::Group`], and
    /// [`RuntimeError::Unsettled`] when an open journal entry covers the GPU or any function
    /// of its group.
    /// [`RuntimeError::Helper`] when a helper call fails: the helper's sentence verbatim, and
    /// what was rolled back (every function moved so far goes back to its driver) or, when the
    /// helper could not be reached to do that, what the journal keeps until it answers again.
    /// [`RuntimeError::State`] when the journal cannot be written (then no further function is
    /// asked to move).
    pub async fn bind(
        &self,
        target: &GpuRef,
        held: HoldLookup<'_>,
    ) -> Result<Report, RuntimeError> {
        let _one = self.one_at_a_time.lock().await;
        let result = self.bind_locked(target, held).await;
        self.note_open();
        result
    }

    async fn bind_locked(
        &self,
        target: &GpuRef,
        held: HoldLookup<'_>,
    ) -> Result<Report, RuntimeError> {
        let (address, uuid) = self.resolve(target)?;
        self.journal.refuse_unsettled(address)?;
        let gpu =
            iommu::read_function(&self.host, &address).ok_or_else(|| RuntimeError::NotAGpu {
                address,
                why: "is not a PCI function on this host".into(),
            })?;
        if !gpu.is_nvidia_gpu() {
            return Err(RuntimeError::NotAGpu {
                address,
                why: format!(
                    "is not an NVIDIA GPU (vendor {}, class {})",
                    gpu.vendor_word(),
                    gpu.class_word()
                ),
            });
        }
        if let Some(hold) = held(&address, uuid.as_ref()) {
            let gpu = match &uuid {
                Some(u) => format!("GPU {address} ({u})"),
                None => format!("GPU {address}"),
            };
            return Err(RuntimeError::Held { gpu, hold });
        }
        let group = iommu::read_group(&self.host, &address)?;
        let plan = iommu::plan_bind(&group, &address)?;
        // The plan moves every NVIDIA function of the group, other GPUs included (two GPUs
        // behind one switch without ACS share a group): each is asked, not only the one named.
        for other in plan
            .iter()
            .filter(|f| f.address != address && f.is_nvidia_gpu())
        {
            if let Some(hold) = held(&other.address, None) {
                return Err(RuntimeError::Held {
                    gpu: format!(
                        "GPU {} (in IOMMU group {} with {address}, so it would move too)",
                        other.address, group.id
                    ),
                    hold,
                });
            }
        }
        let mut entry = new_entry(Intent::Bind, address, &group.id, plan.iter());
        self.journal.begin(&mut entry)?;
        let mut changes = Vec::with_capacity(plan.len());
        for i in 0..entry.functions.len() {
            let device = entry.functions[i].address;
            let answer = self.move_function(&mut entry, i, Move::Bind).await;
            match answer {
                Ok(Ok(change)) => changes.push(change),
                Ok(Err(source)) => {
                    // The operator is told the bind failed, so nothing of it may stay.
                    entry.intent = Intent::Rollback;
                    let notes = settle(&self.host, self.helper.as_ref(), &mut entry).await;
                    return Err(self.failed(&mut entry, &device, source, &notes));
                }
                Err(state) => {
                    self.changed();
                    return Err(state.into());
                }
            }
        }
        self.close(
            &mut entry,
            Action::VfioBind,
            format!("GPU {address} (IOMMU group {})", group.id),
            changes,
        )
    }

    /// Releases a function on `vfio-pci` and the other NVIDIA functions of its IOMMU group
    /// that are there, in the reverse of the bind's order (the GPU named last), to the
    /// kernel's choice of driver; the helper turns persistence on again for a GPU that lands
    /// on `nvidia`.
    ///
    /// # Errors
    /// [`RuntimeError::NotAGpu`] for an address that is not an NVIDIA function,
    /// [`RuntimeError::NotPassedThrough`] when it is not on `vfio-pci`,
    /// [`RuntimeError::Unsettled`] when an open journal entry covers it or any function to
    /// move with it, nothing touched.
    /// [`RuntimeError::Helper`] when a helper call fails (a VM still holding the device:
    /// `vfio-pci has not let go ...`); a function left on no driver is released at once, or
    /// kept in the journal until it answers again when the helper cannot be reached.
    pub async fn release(&self, address: &PciAddress) -> Result<Report, RuntimeError> {
        let _one = self.one_at_a_time.lock().await;
        let result = self.release_locked(*address).await;
        self.note_open();
        result
    }

    async fn release_locked(&self, address: PciAddress) -> Result<Report, RuntimeError> {
        self.journal.refuse_unsettled(address)?;
        let function =
            iommu::read_function(&self.host, &address).ok_or_else(|| RuntimeError::NotAGpu {
                address,
                why: "is not a PCI function on this host".into(),
            })?;
        if !function.is_nvidia() {
            return Err(RuntimeError::NotAGpu {
                address,
                why: format!(
                    "is not an NVIDIA function (vendor {})",
                    function.vendor_word()
                ),
            });
        }
        if function.driver.as_deref() != Some(VFIO_DRIVER) {
            return Err(RuntimeError::NotPassedThrough {
                address,
                driver: driver_word(function.driver.as_deref()).to_owned(),
            });
        }
        let group = iommu::read_group(&self.host, &address)?;
        let mut order: Vec<_> = group
            .functions
            .iter()
            .filter(|f| f.is_nvidia() && f.driver.as_deref().is_none_or(|d| d == VFIO_DRIVER))
            .collect();
        order.sort_by_key(|f| (f.address != address, f.address));
        let mut entry = new_entry(Intent::Release, address, &group.id, order.iter().copied());
        self.journal.begin(&mut entry)?;
        let mut changes = Vec::with_capacity(order.len());
        for i in (0..entry.functions.len()).rev() {
            let device = entry.functions[i].address;
            let answer = self.move_function(&mut entry, i, Move::Release).await;
            match answer {
                Ok(Ok(change)) => changes.push(change),
                Ok(Err(source)) => {
                    // A function still on vfio-pci is not stranded (a VM may well have it);
                    // only one left on no driver needs settling now.
                    let stranded = entry.functions.iter().any(|f| stranded(&self.host, f));
                    let notes = if stranded {
                        settle(&self.host, self.helper.as_ref(), &mut entry).await
                    } else {
                        entry.open = false;
                        Vec::new()
                    };
                    return Err(self.failed(&mut entry, &device, source, &notes));
                }
                Err(state) => {
                    self.changed();
                    return Err(state.into());
                }
            }
        }
        self.close(
            &mut entry,
            Action::VfioRelease,
            format!("{address} (IOMMU group {})", group.id),
            changes,
        )
    }

    /// Closes a finished step in the journal and reports it.
    fn close(
        &self,
        entry: &mut Entry,
        action: Action,
        subject: String,
        functions: Vec<FunctionChange>,
    ) -> Result<Report, RuntimeError> {
        entry.open = false;
        let kept = self.journal.put(entry);
        self.changed();
        kept?;
        Ok(Report {
            action,
            subject,
            functions,
            domain: None,
        })
    }

    /// Records a failed step and words its error with what was done about it.
    fn failed(
        &self,
        entry: &mut Entry,
        device: &PciAddress,
        source: ClientError,
        notes: &[String],
    ) -> RuntimeError {
        let kept = self.journal.put(entry);
        self.changed();
        RuntimeError::Helper {
            device: device.to_string(),
            source,
            aftermath: aftermath(notes, entry.open, kept.err()),
        }
    }

    /// Settles every journal entry a crash left open (see [`reconcile`]); the node service
    /// calls it at start, before serving. Asks for a collection when it did anything.
    ///
    /// # Errors
    /// As [`reconcile`].
    pub async fn reconcile(&self) -> Result<ReconcileReport, RuntimeError> {
        let _one = self.one_at_a_time.lock().await;
        let result = reconcile(&self.host, self.helper.as_ref(), &self.journal).await;
        self.note_open();
        let report = result?;
        if !report.sentences.is_empty() {
            self.changed();
        }
        Ok(report)
    }

    /// One sentence for each journal entry left open when the last step or settling ended,
    /// naming its GPU, what it set out to do, and where each function is now; empty when none
    /// is open. For the node's `status` problems.
    pub fn unsettled(&self) -> Vec<String> {
        self.open_entries()
            .iter()
            .map(|entry| {
                let functions: Vec<String> = entry
                    .functions
                    .iter()
                    .map(|f| {
                        let now = driver_of(&self.host, &f.address);
                        let mut s =
                            format!("{} on {}", f.address, driver_word(now.as_deref()));
                        if now != f.original_driver {
                            s.push_str(&format!(
                                ", before it {}",
                                driver_word(f.original_driver.as_deref())
                            ));
                        }
                        s
                    })
                    .collect();
                format!(
                    "GPU {} (IOMMU group {}): its {} did not finish and is open in the passthrough journal ({}); bcd settles it when bcd-helper answers again, and refuses vfio steps on these functions until then",
                    entry.gpu,
                    entry.group,
                    entry.intent.noun(),
                    functions.join("; ")
                )
            })
            .collect()
    }

    /// A GPU's address and, where known, its UUID.
    fn resolve(&self, target: &GpuRef) -> Result<(PciAddress, Option<GpuUuid>), RuntimeError> {
        match target {
            GpuRef::Uuid(uuid) => {
                let address =
                    self.memory
                        .gpu_address(uuid)?
                        .ok_or_else(|| RuntimeError::UnknownGpu {
                            uuid: uuid.clone(),
                            path: self.memory.path().to_path_buf(),
                        })?;
                Ok((address, Some(uuid.clone())))
            }
            GpuRef::Pci(address) => {
                // The UUID only helps the hold lookup; a memory that cannot be read must not
                // stop a bind by address.
                let uuid = self
                    .memory
                    .load()
                    .ok()
                    .and_then(|m| m.get(address).map(|g| g.uuid.clone()));
                Ok((*address, uuid))
            }
        }
    }

    /// Asks the helper to move function `i` of `entry`, journaling `Moving` before and the
    /// answer (with the driver sysfs shows then) after.
    async fn move_function(
        &self,
        entry: &mut Entry,
        i: usize,
        direction: Move,
    ) -> Result<Result<FunctionChange, ClientError>, StateError> {
        entry.functions[i].step = Step::Moving;
        self.journal.put(entry)?;
        let device = entry.functions[i].address;
        let result = vfio_call(&self.host, self.helper.as_ref(), direction, device).await;
        let record = &mut entry.functions[i];
        record.driver = driver_of(&self.host, &record.address);
        match &result {
            Ok(change) => {
                record.step = Step::Done;
                let mut change = change.clone();
                change.gpu = record.gpu;
                self.journal.put(entry)?;
                Ok(Ok(change))
            }
            Err(e) => {
                record.step = Step::Failed {
                    error: e.to_string(),
                    answered: answered(e),
                };
                self.journal.put(entry)?;
                Ok(result)
            }
        }
    }
}

/// Which way a function moves.
#[derive(Debug, Clone, Copy)]
enum Move {
    /// To `vfio-pci`.
    Bind,
    /// Back to the kernel's choice of driver.
    Release,
}

/// Runs a `VfioBind` or `VfioRelease` of `device` and reads its answer.
async fn vfio_call(
    host: &Host,
    helper: &dyn Helper,
    direction: Move,
    device: PciAddress,
) -> Result<FunctionChange, ClientError> {
    let moved = match direction {
        Move::Bind => helper.vfio_bind(device).await?,
        Move::Release => helper.vfio_release(device).await?,
    };
    Ok(FunctionChange {
        gpu: iommu::read_function(host, &moved.device).is_some_and(|f| f.is_nvidia_gpu()),
        address: moved.device,
        driver_before: moved.driver_before,
        driver_after: moved.driver_after,
        persistence: moved.persistence,
    })
}

/// Gives a function on `vfio-pci` or on no driver back to the kernel's choice of driver. The
/// helper releases only from `vfio-pci`, so a function on no driver is bound first: the
/// probe with the override set is the one step that is sure to give it a driver.
async fn give_back(
    host: &Host,
    helper: &dyn Helper,
    address: PciAddress,
) -> Result<FunctionChange, ClientError> {
    let before = driver_of(host, &address);
    if before.is_none() {
        vfio_call(host, helper, Move::Bind, address).await?;
    }
    let mut change = vfio_call(host, helper, Move::Release, address).await?;
    change.driver_before = before;
    Ok(change)
}

/// The rest of an error sentence after a failed step: what was settled, and what the journal
/// keeps.
fn aftermath(notes: &[String], open: bool, kept: Option<StateError>) -> String {
    let mut out = String::new();
    for n in notes {
        out.push_str("; ");
        out.push_str(n);
    }
    if open {
        out.push_str(
            "; the passthrough journal keeps what is unsettled and bcd settles it when bcd-helper answers again, or at its next start",
        );
    }
    if let Some(e) = kept {
        out.push_str(&format!("; and the journal could not be written: {e}"));
    }
    out
}

/// Settles an entry: brings every function of it to where its intent says, so that none is
/// left on no driver, and turns persistence on again for a GPU that ends on `nvidia` after a
/// step whose answer never came. The rules:
///
/// - `Bind` (cut off, the operator got no answer): when a function of the entry is on no
///   driver, the bind is finished for every function (the operator wanted the VM to get the
///   group); when none is, nothing is stranded and the entry is left as it stands.
/// - `Release` (cut off): finished; every function on `vfio-pci` or on no driver goes back to
///   the kernel's choice.
/// - `Rollback` (a bind the operator was told failed): every function that left its original
///   driver goes back to the kernel's choice.
///
/// Leaves `entry.open` set while a function is still on no driver or the helper could not be
/// reached. Returns one sentence per function it acted on.
async fn settle(host: &Host, helper: &dyn Helper, entry: &mut Entry) -> Vec<String> {
    let mut sentences = Vec::new();
    let mut unreachable = false;
    let stranded = |e: &Entry| e.functions.iter().any(|f| stranded(host, f));
    if entry.intent == Intent::Bind && !stranded(entry) {
        let where_: Vec<String> = entry
            .functions
            .iter()
            .map(|f| {
                format!(
                    "{} on {}",
                    f.address,
                    driver_word(driver_of(host, &f.address).as_deref())
                )
            })
            .collect();
        sentences.push(format!(
            "nothing of it was left on no driver, so it was left as it stands ({}); bind again if it is still wanted",
            where_.join(", ")
        ));
        entry.open = false;
        return sentences;
    }
    let order: Vec<usize> = match entry.intent {
        Intent::Bind => (0..entry.functions.len()).collect(),
        Intent::Release | Intent::Rollback => (0..entry.functions.len()).rev().collect(),
    };
    let done = match entry.intent {
        Intent::Bind => "bind finished",
        Intent::Release => "release finished",
        Intent::Rollback => "rolled back",
    };
    for i in order {
        let record = &mut entry.functions[i];
        let address = record.address;
        let now = driver_of(host, &address);
        let on_vfio = now.as_deref() == Some(VFIO_DRIVER);
        let todo = match entry.intent {
            Intent::Bind => !on_vfio,
            Intent::Release => now.is_none() || on_vfio,
            Intent::Rollback => {
                now.is_none() || (on_vfio && record.original_driver.as_deref() != Some(VFIO_DRIVER))
            }
        };
        let uncertain = matches!(
            record.step,
            Step::Moving
                | Step::Failed {
                    answered: false,
                    ..
                }
        );
        let kind = if record.gpu { "GPU" } else { "function" };
        let mut persistence_on = false;
        if todo {
            let result = match entry.intent {
                Intent::Bind => vfio_call(host, helper, Move::Bind, address).await,
                Intent::Release | Intent::Rollback => give_back(host, helper, address).await,
            };
            match result {
                Ok(change) => {
                    persistence_on =
                        matches!(change.persistence, PersistenceNote::Set { enabled: true });
                    record.step = Step::Done;
                    sentences.push(format!(
                        "{kind} {address}: {done}: {} -> {}, {}",
                        driver_word(now.as_deref()),
                        driver_word(change.driver_after.as_deref()),
                        change.persistence
                    ));
                }
                Err(e) => {
                    unreachable |= !answered(&e);
                    sentences.push(format!(
                        "{kind} {address} is on {} and could not be settled: {e}",
                        driver_word(driver_of(host, &address).as_deref())
                    ));
                }
            }
        }
        record.driver = driver_of(host, &address);
        // The helper turns persistence off before an unbind and on again when it undoes one;
        // a step whose answer never came may have stopped in between.
        if record.gpu
            && record.driver.as_deref() == Some(NVIDIA_DRIVER)
            && record.original_persistence != Persistence::Off
            && !persistence_on
            && (todo || uncertain)
        {
            match helper.set_persistence(address, true).await {
                Ok(_) => sentences.push(format!("GPU {address}: persistence mode on again")),
                Err(e) => {
                    unreachable |= !answered(&e);
                    sentences.push(format!(
                        "GPU {address}: persistence mode could not be turned on again: {e}"
                    ));
                }
            }
        }
    }
    entry.open = unreachable || stranded(entry);
    sentences
}

/// Whether the entry left `f` stranded: on no driver now, though it had one when the entry
/// began and its step did not finish. A function that had no driver to begin with (a GPU's
/// audio function where no sound driver is loaded), or that the helper moved as asked and the
/// kernel then gave no driver, is where it belongs.
fn stranded(host: &Host, f: &FunctionRecord) -> bool {
    driver_of(host, &f.address).is_none() && f.original_driver.is_some() && f.step != Step::Done
}

/// Settles every open entry of `journal` against sysfs (see the rules on the module's
/// guarantees and in [`Passthrough::reconcile`]) and says what was done, one sentence each.
/// A journal that does not parse is set aside and reported; nothing of it is acted on.
///
/// # Errors
/// [`RuntimeError::State`] when the journal cannot be read (other than torn) or written.
pub async fn reconcile(
    host: &Host,
    helper: &dyn Helper,
    journal: &Journal,
) -> Result<ReconcileReport, RuntimeError> {
    let mut report = ReconcileReport {
        sentences: Vec::new(),
        settled: true,
    };
    let entries = match journal.load() {
        Ok(e) => e,
        Err(e @ StateError::SetAside { .. }) => {
            report.sentences.push(format!(
                "the passthrough journal {e}; check that no GPU function is on no driver (ls /sys/bus/pci/devices/*/driver)"
            ));
            return Ok(report);
        }
        Err(e) => return Err(e.into()),
    };
    for (_, mut entry) in entries.into_iter().filter(|(_, e)| e.open) {
        let head = format!(
            "the {} of GPU {} (IOMMU group {}) was cut off",
            entry.intent.noun(),
            entry.gpu,
            entry.group
        );
        let notes = settle(host, helper, &mut entry).await;
        let tail = if entry.open {
            "; it stays open in the passthrough journal until bcd-helper answers again or the next start"
        } else {
            ""
        };
        report.sentences.push(if notes.is_empty() {
            format!("{head}; nothing needed doing{tail}")
        } else {
            format!("{head}: {}{tail}", notes.join("; "))
        });
        report.settled &= !entry.open;
        journal.put(&mut entry)?;
    }
    Ok(report)
}

/// A journal entry for a step about to move `functions`, each still untouched.
fn new_entry<'a>(
    intent: Intent,
    gpu: PciAddress,
    group: &str,
    functions: impl Iterator<Item = &'a iommu::Function>,
) -> Entry {
    Entry {
        intent,
        gpu,
        group: group.to_owned(),
        functions: functions
            .map(|f| FunctionRecord {
                address: f.address,
                gpu: f.is_nvidia_gpu(),
                original_driver: f.driver.clone(),
                // The agent does not read persistence mode here; reconcile treats unknown as
                // on, the mode a GPU host keeps (doctor warns when it is off).
                original_persistence: Persistence::Unknown,
                step: Step::Untouched,
                driver: f.driver.clone(),
            })
            .collect(),
        open: true,
        updated_unix_s: 0,
    }
}
