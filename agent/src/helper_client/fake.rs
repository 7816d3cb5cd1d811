//! A recording stand-in for `bcd-helper`: it keeps every operation it is asked, in order, and
//! answers each from a script, touching nothing. Tests hand it in wherever a [`Helper`] goes.
//!
//! Its answers go through the same typed decoding as [`super::SocketHelper`]'s, so a script
//! that answers with the wrong kind of outcome fails the way a confused helper would.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bcd_protocol::{
    HelloAnswer, Operation, OperationKind, Outcome, PersistenceNote, PROTOCOL_VERSION,
};

use super::{pong, BoxFuture, ClientError, Helper, Pong};

/// The version a fake helper gives in its `Hello` and `Pong`.
pub(crate) const FAKE_VERSION: &str = "0.0.0-recording";

/// How the fake answers one operation.
type Script = Box<dyn Fn(&Operation) -> Result<Outcome, ClientError> + Send + Sync>;

/// A helper that records each operation and answers from a script.
pub struct RecordingHelper {
    socket: PathBuf,
    calls: Mutex<Vec<Operation>>,
    script: Script,
}

impl fmt::Debug for RecordingHelper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingHelper")
            .field("socket", &self.socket)
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl Default for RecordingHelper {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordingHelper {
    /// A fake whose every operation succeeds as the real helper's would on a healthy host
    /// (see [`succeeded`]).
    pub fn new() -> Self {
        Self::answering(|op| Ok(succeeded(op)))
    }

    /// A fake that answers each operation with `script`'s result.
    pub(crate) fn answering(
        script: impl Fn(&Operation) -> Result<Outcome, ClientError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            socket: PathBuf::from("/nonexistent/bcd-helper-fake.sock"),
            calls: Mutex::new(Vec::new()),
            script: Box::new(script),
        }
    }

    /// Every operation asked so far, in order (`Ping` included).
    pub fn calls(&self) -> Vec<Operation> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn answer(&self, op: Operation) -> Result<Outcome, ClientError> {
        let result = (self.script)(&op);
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(op);
        result
    }
}

/// What a healthy helper answers: `Pong`, the persistence mode as asked, a reset, a bind
/// from `nvidia` (persistence off), a release to `nvidia` (persistence on), and no GPU among
/// a domain's devices.
pub(crate) fn succeeded(op: &Operation) -> Outcome {
    match op {
        Operation::Ping => Outcome::Pong {
            helper_version: FAKE_VERSION.to_owned(),
            sandbox: "none (a recording fake)".to_owned(),
        },
        Operation::SetPersistence { gpu, enabled } => Outcome::Persistence {
            gpu: *gpu,
            enabled: *enabled,
        },
        Operation::ResetGpu { gpu } => Outcome::Reset { gpu: *gpu },
        Operation::VfioBind { device } => Outcome::Vfio {
            device: *device,
            driver_before: Some("nvidia".to_owned()),
            driver_after: Some("vfio-pci".to_owned()),
            persistence: PersistenceNote::Set { enabled: false },
        },
        Operation::VfioRelease { device } => Outcome::Vfio {
            device: *device,
            driver_before: Some("vfio-pci".to_owned()),
            driver_after: Some("nvidia".to_owned()),
            persistence: PersistenceNote::Set { enabled: true },
        },
        Operation::LibvirtStart { .. }
        | Operation::LibvirtRestore { .. }
        | Operation::LibvirtDestroy { .. }
        | Operation::LibvirtDomainGpus { .. }
        | Operation::LibvirtImageGpus { .. } => Outcome::Libvirt {
            gpus: Vec::new(),
            persistence: Vec::new(),
            domain: None,
        },
        Operation::SetMigMode { gpu, .. }
        | Operation::DestroyMigInstances { gpu }
        | Operation::CreateMigInstances { gpu, .. } => Outcome::Mig {
            gpu: *gpu,
            said: "All done.".to_owned(),
        },
        Operation::RefreshNvidiaCdiSpec => Outcome::NvidiaCdiSpec {
            file: "/var/run/cdi/nvidia.yaml".to_owned(),
        },
    }
}

impl Helper for RecordingHelper {
    fn socket(&self) -> &Path {
        &self.socket
    }

    fn ping(&self) -> BoxFuture<'_, Result<Pong, ClientError>> {
        Box::pin(async move {
            let outcome = self.answer(Operation::Ping)?;
            let hello = HelloAnswer {
                version: PROTOCOL_VERSION,
                helper_version: FAKE_VERSION.to_owned(),
                operations: OperationKind::ALL.to_vec(),
            };
            pong(&self.socket, &hello, outcome)
        })
    }

    fn run(&self, op: Operation) -> BoxFuture<'_, Result<Outcome, ClientError>> {
        Box::pin(async move { self.answer(op) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bcd_protocol::{HelperError, PciAddress};

    fn gpu() -> PciAddress {
        "0000:18:00.0".parse().unwrap()
    }

    #[tokio::test]
    async fn it_records_every_call_in_order_and_answers_as_a_healthy_helper() {
        let fake = RecordingHelper::new();
        assert_eq!(fake.ping().await.unwrap().helper_version, FAKE_VERSION);
        fake.reset_gpu(gpu()).await.unwrap();
        let moved = fake.vfio_release(gpu()).await.unwrap();
        assert_eq!(moved.driver_after.as_deref(), Some("nvidia"));
        assert_eq!(
            fake.calls(),
            [
                Operation::Ping,
                Operation::ResetGpu { gpu: gpu() },
                Operation::VfioRelease { device: gpu() },
            ]
        );
    }

    #[tokio::test]
    async fn a_scripted_refusal_passes_through_and_a_wrong_answer_is_a_protocol_error() {
        let fake = RecordingHelper::answering(|op| match op {
            Operation::ResetGpu { .. } => Err(HelperError::Busy {
                what: "a reset".into(),
            }
            .into()),
            _ => Ok(Outcome::Reset { gpu: gpu() }),
        });
        let err = fake.reset_gpu(gpu()).await.unwrap_err();
        assert!(matches!(err, ClientError::Helper(HelperError::Busy { .. })));
        let err = fake.vfio_bind(gpu()).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("bcd-helper at /nonexistent/bcd-helper-fake.sock broke off the conversation: it answered a vfio request with Reset"),
            "{err}"
        );
        assert_eq!(fake.calls().len(), 2);
    }
}
