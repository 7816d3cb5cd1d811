//! The libvirt runtime: `virsh start`, `restore` and `destroy` through the helper, which reads
//! the domain's hostdevs and turns persistence off (before a start or restore) and on again
//! (after a destroy, once a GPU is back on `nvidia`) for exactly its NVIDIA GPUs. The agent
//! reads each GPU's driver before and after, to say what happened to it.

use std::collections::BTreeMap;

use bcd_protocol::{DomainName, PciAddress, PersistenceNote, SaveFile};

use super::iommu::driver_of;
use super::{Action, FunctionChange, HoldLookup, Passthrough, Report, RuntimeError};
use crate::helper_client::{BoxFuture, ClientError, LibvirtRun};

/// The helper's reading of which GPUs a domain or image has, not yet asked.
type Inspect<'a> = BoxFuture<'a, Result<Vec<PciAddress>, ClientError>>;
/// A libvirt step through the helper, not yet asked.
type Step<'a> = BoxFuture<'a, Result<LibvirtRun, ClientError>>;

impl Passthrough {
    /// Starts a defined domain (`libvirt.start`): persistence off for its GPUs, then
    /// `virsh start`. A domain with a held GPU is refused before anything moves.
    ///
    /// # Errors
    /// [`RuntimeError::Held`] naming the GPU and its hold; [`RuntimeError::Helper`] with the
    /// helper's sentence (`virsh`'s own words included).
    pub async fn start(
        &self,
        domain: &DomainName,
        held: HoldLookup<'_>,
    ) -> Result<Report, RuntimeError> {
        let inspect = self.helper.domain_gpus(domain.clone());
        let op = self.helper.libvirt_start(domain.clone());
        self.libvirt(
            Action::VmStart,
            format!("domain {domain}"),
            Some((inspect, held)),
            op,
        )
        .await
    }

    /// Restores a saved domain (`libvirt.restore`, the file checked by the helper against its
    /// save folder): persistence off for the image's GPUs, then `virsh restore`.
    ///
    /// # Errors
    /// As [`Passthrough::start`].
    pub async fn restore(
        &self,
        file: &SaveFile,
        held: HoldLookup<'_>,
    ) -> Result<Report, RuntimeError> {
        let inspect = self.helper.image_gpus(file.clone());
        let op = self.helper.libvirt_restore(file.clone());
        self.libvirt(
            Action::VmRestore,
            format!("save image {file}"),
            Some((inspect, held)),
            op,
        )
        .await
    }

    /// Stops a running domain at once (`libvirt.destroy`): `virsh destroy`, then persistence
    /// on for its GPUs that are back on `nvidia`.
    ///
    /// # Errors
    /// As [`Passthrough::start`].
    pub async fn destroy(&self, domain: &DomainName) -> Result<Report, RuntimeError> {
        let op = self.helper.libvirt_destroy(domain.clone());
        self.libvirt(Action::VmDestroy, format!("domain {domain}"), None, op)
            .await
    }

    async fn libvirt(
        &self,
        action: Action,
        subject: String,
        check: Option<(Inspect<'_>, HoldLookup<'_>)>,
        op: Step<'_>,
    ) -> Result<Report, RuntimeError> {
        let _one = self.one_at_a_time.lock().await;
        // Policy first: the helper only says which GPUs the domain has; whether one may go to a
        // VM is the agent's decision, taken before the helper touches anything.
        if let Some((inspect, held)) = check {
            let gpus = inspect.await.map_err(|source| RuntimeError::Helper {
                device: subject.clone(),
                source,
                aftermath: String::new(),
            })?;
            if let Some((gpu, hold)) = gpus
                .iter()
                .find_map(|gpu| held(gpu, None).map(|hold| (gpu, hold)))
            {
                return Err(RuntimeError::Held {
                    gpu: format!("GPU {gpu} of {subject}"),
                    hold,
                });
            }
        }
        // Which GPUs the domain has is the helper's reading of its XML; read every NVIDIA
        // function's driver now so that each can be shown before and after.
        let before: BTreeMap<PciAddress, Option<String>> = crate::sys::pci::functions(&self.host)
            .into_iter()
            .filter(crate::sys::pci::PciFunction::is_nvidia)
            .map(|f| (f.address, f.driver))
            .collect();
        let answer = op.await;
        self.changed();
        let LibvirtRun {
            gpus,
            persistence,
            domain,
        } = answer.map_err(|source| RuntimeError::Helper {
            device: subject.clone(),
            source,
            aftermath: String::new(),
        })?;
        let functions = gpus
            .iter()
            .map(|gpu| FunctionChange {
                address: *gpu,
                gpu: true,
                driver_before: before.get(gpu).cloned().flatten(),
                driver_after: driver_of(&self.host, gpu),
                persistence: persistence
                    .iter()
                    .find(|(a, _)| a == gpu)
                    .map_or(PersistenceNote::NotTouched, |(_, n)| n.clone()),
            })
            .collect();
        Ok(Report {
            action,
            subject,
            functions,
            domain: domain.map(|d| d.to_string()),
        })
    }
}
