//! Preparing and unpreparing claims: what `NodePrepareResources` and
//! `NodeUnprepareResources` do, without the gRPC around them.
//!
//! Prepare, per claim (one claim's refusal never touches another's answer):
//! - a claim already prepared (its hold `dra-<uid>` records it) gets the same answer again,
//!   its spec written anew if it is gone (the kubelet asks again after its restarts, and
//!   `/var/run/cdi` does not outlive a reboot);
//! - else the ResourceClaim is read from the API server (before the lock, all at once, each
//!   within [`CLAIM_READ_TIMEOUT`]) and refused when its uid is not the one the kubelet named
//!   (the claim was replaced), when it is not allocated, when one of its devices for this
//!   driver and node has admin access or an opaque config is for this driver (bcd supports
//!   neither yet), when a device is not one the driver publishes, or its GPU takes no work,
//!   is under a step of the node's, passed through, or held by anyone else;
//! - its devices become one Kubernetes hold through the policy ([`crate::cdi::Holds::apply_claim`]),
//!   and its own CDI spec (kind `k8s.gpu.bcd.dev/claim`, one device `<uid>-<device>` per
//!   allocated device with NVIDIA's edits, `NVIDIA_VISIBLE_DEVICES=void` in the common edits)
//!   is written atomically in the CDI runtime folder before the answer; a spec that cannot be
//!   written undoes the hold.
//!
//! Unprepare releases the claim's hold and removes its spec; a claim bcd does not know
//! succeeds (the claim object may be gone already: bcd's record is the hold).
//!
//! Calls are serialized by one lock, taken after the claims were read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bcd_protocol::GpuUuid;

use super::claims::{ClaimReader, ReadError, ResourceClaim};
use super::devices::{self, DraDevice};
use super::slices::{quantity_value, SLOTS_CAPACITY};
use super::{DraConfig, DraState, DRIVER};
use crate::cdi::render::{render, HoldRequest, VISIBLE_DEVICES};
use crate::cdi::spec::{version_needs, CdiVersion, Spec};
use crate::cdi::{DeviceCatalog, DeviceId, HoldError, HoldId, VendorSpec};
use crate::device::id::SlotIndex;
use crate::device::policy::{conflict, Topology};
use crate::device::{DraClaim, Hold, HoldOwner, PoolDevice, Share};
use crate::source::DeviceSource;
use crate::state::{self, StateError, PUBLIC_MODE};

/// The CDI kind of the claims' specs: vendor `k8s.gpu.bcd.dev`, class `claim` (a class
/// without dots, which podman 4.3 requires).
pub const CDI_KIND: &str = "k8s.gpu.bcd.dev/claim";
/// How long reading one ResourceClaim may take: well inside the kubelet's 45 s per call.
pub const CLAIM_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The prefix of the claims' hold ids.
pub const HOLD_PREFIX: &str = "dra-";

/// A claim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// Its namespace.
    pub namespace: String,
    /// Its uid.
    pub uid: String,
    /// Its name.
    pub name: String,
}

/// One device of a prepared claim, as the kubelet is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedDevice {
    /// The claim's requests it is for.
    pub requests: Vec<String>,
    /// The pool.
    pub pool: String,
    /// The device's name in the pool.
    pub device: String,
    /// Its CDI device id (`k8s.gpu.bcd.dev/claim=<uid>-<device>`).
    pub cdi_ids: Vec<String>,
    /// The allocation's share, for a shared device.
    pub share_id: Option<String>,
}

/// Why one claim was not prepared or unprepared. `Display` is the sentence the kubelet
/// shows in the pod's events.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The kubelet's uid is not one bcd can name a hold after.
    #[error("the kubelet named claim {namespace}/{name} with uid {uid:?}, which is not a Kubernetes uid")]
    BadUid {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// The uid given.
        uid: String,
    },
    /// A name longer than Kubernetes allows, or more devices than a claim may be allocated.
    #[error("ResourceClaim {namespace}/{name} is refused: {what}; Kubernetes allows no such claim, so bcd keeps nothing of it")]
    Oversized {
        /// The namespace (cut).
        namespace: String,
        /// The name (cut).
        name: String,
        /// What is too long or too many.
        what: String,
    },
    /// The claim could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The claim was replaced under its name.
    #[error("ResourceClaim {namespace}/{name} has uid {found}, not {asked} as the kubelet asked: the claim was deleted and made anew, and the kubelet asks again for the new one")]
    Replaced {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// The uid the kubelet named.
        asked: String,
        /// The uid the API server has.
        found: String,
    },
    /// The scheduler has not allocated it.
    #[error("ResourceClaim {namespace}/{name} is not allocated: the scheduler has not given it devices yet")]
    NotAllocated {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
    },
    /// Admin access, which bcd does not support yet.
    #[error("ResourceClaim {namespace}/{name} asks for admin access to {device}: bcd does not support adminAccess yet; request the device without it")]
    AdminAccess {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// `pool/device`.
        device: String,
    },
    /// An opaque configuration for this driver, which bcd does not take yet.
    #[error("ResourceClaim {namespace}/{name} carries an opaque configuration for {DRIVER} (from {origin}): bcd takes no driver configuration yet; remove it from the claim or its DeviceClass")]
    OpaqueConfig {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// `FromClaim` or `FromClass`.
        origin: String,
    },
    /// A device the driver does not publish (now).
    #[error("{device} is not a device this node's {DRIVER} driver publishes now (the GPU is gone, or its MIG layout or --gpu-slots changed since the claim was allocated)")]
    UnknownDevice {
        /// `pool/device`.
        device: String,
    },
    /// A share of a shared device that asks for more than one slot.
    #[error("{device} was allocated {asked} slots for one share; bcd gives each share of a shared GPU exactly one slot (its capacity's request policy says so), so ask for one slot per request")]
    ShareSize {
        /// `pool/device`.
        device: String,
        /// The consumed capacity.
        asked: String,
    },
    /// Every slot of a shared device's GPU is held.
    #[error("{device} was allocated a share of GPU {gpu}, but every slot of it is held now; the kubelet asks again")]
    NoFreeSlot {
        /// `pool/device`.
        device: String,
        /// The GPU.
        gpu: GpuUuid,
    },
    /// Its GPU takes no work.
    #[error("{device} ({id}) is on GPU {gpu}, which takes no work now: {why}")]
    NotSchedulable {
        /// `pool/device`.
        device: String,
        /// bcd's device.
        id: DeviceId,
        /// The GPU.
        gpu: GpuUuid,
        /// The verdict's reasons.
        why: String,
    },
    /// A step of the node's runs on its GPU.
    #[error("{device} is on GPU {gpu}, on which a step of the node's (a reset, a vfio-pci step, a VM start) runs now; the kubelet asks again")]
    Claimed {
        /// `pool/device`.
        device: String,
        /// The GPU.
        gpu: GpuUuid,
    },
    /// The policy refused the hold (held elsewhere, passed through, under a step).
    #[error("{0}")]
    Hold(#[from] HoldError),
    /// The hold store could not be read at start.
    #[error("holds.json could not be read when bcd node started, so no claim is prepared; see bcd status")]
    HoldsUnavailable,
    /// The claim's spec could not be written or removed.
    #[error("the claim's CDI spec {}: {source}", path.display())]
    Spec {
        /// The spec.
        path: PathBuf,
        /// Why.
        source: StateError,
    },
}

/// The most devices of one claim: Kubernetes allocates at most 32 results a claim.
pub const MAX_CLAIM_DEVICES: usize = 32;
/// The longest namespace (a DNS label), claim name and pool name (DNS subdomains), request
/// (`request/subrequest`, two DNS labels), device name (a DNS label) and share id (a UUID)
/// Kubernetes accepts, in bytes.
const MAX_NAMESPACE: usize = 63;
const MAX_NAME: usize = 253;
const MAX_REQUEST: usize = 127;
const MAX_DEVICE: usize = 63;
const MAX_SHARE: usize = 64;

/// What in `c` and the claim's devices of this driver `ours` is larger than Kubernetes
/// allows, in words; `None` when nothing is. Checked before anything is kept, so a hostile
/// claim can make neither `holds.json` nor the kubelet's answer large. Pure.
fn oversized(c: &ClaimRef, ours: &[&super::claims::AllocationResult]) -> Option<String> {
    let long = |what: &str, value: &str, max: usize| {
        (value.len() > max)
            .then(|| format!("its {what} is {} bytes long (at most {max})", value.len()))
    };
    if ours.len() > MAX_CLAIM_DEVICES {
        return Some(format!(
            "it is allocated {} devices of {DRIVER} (at most {MAX_CLAIM_DEVICES})",
            ours.len()
        ));
    }
    long("namespace", &c.namespace, MAX_NAMESPACE)
        .or_else(|| long("name", &c.name, MAX_NAME))
        .or_else(|| {
            ours.iter().find_map(|r| {
                long("request name", &r.request, MAX_REQUEST)
                    .or_else(|| long("device name", &r.device, MAX_DEVICE))
                    .or_else(|| long("pool name", &r.pool, MAX_NAME))
                    .or_else(|| {
                        long(
                            "share id",
                            r.share_id.as_deref().unwrap_or_default(),
                            MAX_SHARE,
                        )
                    })
            })
        })
}

/// `s` cut to at most `max` characters, for a sentence.
fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// The hold id of the claim with `uid`: `dra-<uid>`, when the uid is a safe name.
pub fn hold_id(uid: &str) -> Option<HoldId> {
    format!("{HOLD_PREFIX}{uid}").parse().ok()
}

/// The claim's spec file in `dir`: `k8s.gpu.bcd.dev-claim_<uid>.json`, the CDI library's
/// name for a transient spec.
pub fn spec_path(dir: &Path, uid: &str) -> PathBuf {
    dir.join(format!("k8s.gpu.bcd.dev-claim_{uid}.json"))
}

/// The CDI device id of a claim's device.
pub fn cdi_id(uid: &str, device: &str) -> String {
    format!("{CDI_KIND}={uid}-{device}")
}

/// The spec of a claim whose hold is `hold`: for each `(device, name)`, a CDI device
/// `<uid>-<name>` with the edits of the NVIDIA device it stands for (as a hold's spec has
/// them), `NVIDIA_VISIBLE_DEVICES=void` in the common edits, and the lowest `cdiVersion` its
/// fields need (0.5.0 where a name starts with a digit). Pure.
pub fn claim_spec(
    uid: &str,
    hold: &HoldId,
    devices: &[(DeviceId, String)],
    vendor: &[VendorSpec],
    catalog: &DeviceCatalog,
) -> Spec {
    let ids: Vec<DeviceId> = devices.iter().map(|(d, _)| d.clone()).collect();
    let rendered = render(
        HoldRequest {
            hold,
            devices: &ids,
            kubernetes: false,
        },
        vendor,
        catalog,
    );
    let mut spec = rendered.spec;
    spec.kind = CDI_KIND.to_owned();
    spec.devices = devices
        .iter()
        .filter_map(|(id, name)| {
            let mut d = spec
                .devices
                .iter()
                .find(|d| d.name == id.cdi_name())?
                .clone();
            d.name = format!("{uid}-{name}");
            Some(d)
        })
        .collect();
    debug_assert!(spec
        .container_edits
        .env
        .iter()
        .any(|e| e.starts_with(VISIBLE_DEVICES)));
    let needed = version_needs(&spec)
        .into_iter()
        .map(|(v, _)| v)
        .fold(CdiVersion::EARLIEST, CdiVersion::max);
    let rendered_version = spec.cdi_version.parse().unwrap_or(CdiVersion::EARLIEST);
    spec.cdi_version = needed.max(rendered_version).to_string();
    spec
}

/// The GPUs' device minors, from the NVIDIA module's procfs on `host`.
pub fn minors(host: &crate::sys::host::Host) -> BTreeMap<GpuUuid, u32> {
    crate::inventory::procfs::collect(host)
        .gpus
        .into_iter()
        .filter_map(|g| Some((g.uuid?.parse().ok()?, g.minor?)))
        .collect()
}

/// Every device the driver publishes for the node's latest inventory (before health and
/// holds are looked at), and every device a prepared claim holds that the inventory lacks
/// now ([`devices::kept_for_claims`]).
pub async fn all_devices<S: DeviceSource>(node: &S, config: &DraConfig) -> Vec<DraDevice> {
    let inventory = node.inventory().await;
    let mut all = devices::devices(&inventory, &minors(&config.host), node.gpu_slots());
    let kept = devices::kept_for_claims(&all, &node.holds_now().await, &config.node_name);
    all.extend(kept);
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

/// The driver's claims side: prepares and unprepares claims on the node `S`, reading them
/// through `R`.
#[derive(Debug)]
pub struct Driver<S, R> {
    node: Arc<S>,
    reader: Arc<R>,
    config: DraConfig,
    state: Arc<DraState>,
    lock: tokio::sync::Mutex<()>,
}

impl<S: DeviceSource, R: ClaimReader> Driver<S, R> {
    /// The driver on `node`, reading claims with `reader`.
    pub fn new(node: Arc<S>, reader: Arc<R>, config: DraConfig, state: Arc<DraState>) -> Self {
        Self {
            node,
            reader,
            config,
            state,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The node.
    pub fn node(&self) -> &Arc<S> {
        &self.node
    }

    /// What `bcd node` was told.
    pub fn config(&self) -> &DraConfig {
        &self.config
    }

    /// The claims' reader.
    pub fn reader(&self) -> &Arc<R> {
        &self.reader
    }

    /// The driver's counters and problems.
    pub fn state(&self) -> &Arc<DraState> {
        &self.state
    }

    /// Prepares each of `claims`: one answer per claim, in their order, keyed by uid.
    pub async fn prepare(
        &self,
        claims: Vec<ClaimRef>,
    ) -> Vec<(String, Result<Vec<PreparedDevice>, Refusal>)> {
        let known: Vec<String> = self
            .node
            .holds_now()
            .await
            .into_iter()
            .filter_map(|h| h.claim.map(|c| c.uid))
            .collect();
        // Read every claim not prepared yet, at once, before the lock.
        let mut reads = tokio::task::JoinSet::new();
        for (i, c) in claims.iter().enumerate() {
            if known.contains(&c.uid) {
                continue;
            }
            let reader = self.reader.clone();
            let (ns, name) = (c.namespace.clone(), c.name.clone());
            reads.spawn(async move { (i, read_claim(reader.as_ref(), &ns, &name).await) });
        }
        let mut read: BTreeMap<usize, Result<ResourceClaim, ReadError>> = BTreeMap::new();
        while let Some(done) = reads.join_next().await {
            if let Ok((i, r)) = done {
                read.insert(i, r);
            }
        }
        let _serial = self.lock.lock().await;
        let mut out = Vec::with_capacity(claims.len());
        let mut changed = false;
        for (i, c) in claims.into_iter().enumerate() {
            let answer = self.prepare_one(&c, read.remove(&i), &mut changed).await;
            match &answer {
                Ok(devices) => {
                    tracing::info!(
                        "prepared DRA claim {}/{} ({}): {} device(s)",
                        c.namespace,
                        c.name,
                        c.uid,
                        devices.len()
                    );
                    self.state.count(|n| n.prepared += 1);
                }
                Err(e) => {
                    tracing::warn!(
                        "DRA claim {}/{} ({}) not prepared: {e}",
                        c.namespace,
                        c.name,
                        c.uid
                    );
                    self.state.count(|n| n.refused += 1);
                }
            }
            out.push((c.uid, answer));
        }
        if changed {
            self.node.touch();
            self.node.converge_holds().await;
        }
        out
    }

    async fn prepare_one(
        &self,
        c: &ClaimRef,
        read: Option<Result<ResourceClaim, ReadError>>,
        changed: &mut bool,
    ) -> Result<Vec<PreparedDevice>, Refusal> {
        let id = hold_id(&c.uid)
            .filter(|_| !c.uid.is_empty())
            .ok_or_else(|| Refusal::BadUid {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                uid: c.uid.chars().take(80).collect(),
            })?;
        let holds = self.node.holds_now().await;
        if let Some(done) = holds
            .iter()
            .find(|h| h.id == id && h.claim.as_ref().is_some_and(|k| k.uid == c.uid))
        {
            return self.again(done).await;
        }
        let claim = match read {
            Some(r) => r?,
            // Prepared by a call that ran meanwhile, then unprepared: read it now.
            None => read_claim(self.reader.as_ref(), &c.namespace, &c.name).await?,
        };
        if claim.metadata.uid != c.uid {
            return Err(Refusal::Replaced {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                asked: c.uid.clone(),
                found: claim.metadata.uid,
            });
        }
        let Some(allocation) = claim.status.allocation else {
            return Err(Refusal::NotAllocated {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
            });
        };
        if let Some(config) = allocation
            .devices
            .config
            .iter()
            .find(|k| k.opaque.as_ref().is_some_and(|o| o.driver == DRIVER))
        {
            return Err(Refusal::OpaqueConfig {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                origin: config.source.clone(),
            });
        }
        let pool = &self.config.node_name;
        let mut ours: Vec<_> = allocation
            .devices
            .results
            .iter()
            .filter(|r| r.driver == DRIVER && &r.pool == pool)
            .collect();
        if let Some(what) = oversized(c, &ours) {
            return Err(Refusal::Oversized {
                namespace: cut(&c.namespace, MAX_NAMESPACE),
                name: cut(&c.name, MAX_NAME),
                what,
            });
        }
        let table = all_devices(self.node.as_ref(), &self.config).await;
        // Every plain device first, then the shares: a share then takes a slot none of the
        // claim's own slot devices is, whatever order the results came in (a slot device
        // after a share of its GPU was once taken for that share).
        let shared = |r: &&super::claims::AllocationResult| {
            table
                .iter()
                .find(|d| d.name == r.device)
                .is_some_and(DraDevice::is_shared)
        };
        ours.sort_by_key(|r| shared(r));
        if let Some(r) = ours.iter().find(|r| r.admin_access == Some(true)) {
            return Err(Refusal::AdminAccess {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                device: format!("{}/{}", r.pool, r.device),
            });
        }
        let verdicts = self.node.verdicts().await;
        let topology = self.node.topology().await;
        let claimed = self.node.claimed();
        // Per device of the claim: bcd's device, its pool name, its requests.
        let mut chosen: Vec<(DeviceId, PoolDevice)> = Vec::new();
        let mut placed = Vec::new();
        for r in &ours {
            let named = format!("{}/{}", r.pool, r.device);
            let Some(d) = table.iter().find(|d| d.name == r.device && !d.missing) else {
                return Err(Refusal::UnknownDevice { device: named });
            };
            let same_share = |p: &PoolDevice| {
                p.device == r.device && p.share.as_ref().map(|s| &s.id) == Some(&r.share_id)
            };
            if let Some((_, seen)) = chosen.iter_mut().find(|(_, p)| {
                (!d.is_shared() && p.device == r.device) || (d.is_shared() && same_share(p))
            }) {
                let base = r.base_request().to_owned();
                if !seen.requests.contains(&base) {
                    seen.requests.push(base);
                }
                continue;
            }
            let verdict = verdicts.get(&d.gpu);
            let gpu_id = DeviceId::from(&d.gpu);
            if claimed.contains(&gpu_id) {
                return Err(Refusal::Claimed {
                    device: named,
                    gpu: d.gpu.clone(),
                });
            }
            if !verdict.is_some_and(|v| v.healthy()) {
                let why = verdict
                    .map(|v| {
                        v.reasons
                            .iter()
                            .map(|r| r.message.clone())
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .filter(|w| !w.is_empty())
                    .unwrap_or_else(|| "nvidia-smi has said nothing of it".to_owned());
                return Err(Refusal::NotSchedulable {
                    device: named,
                    id: d.id.clone(),
                    gpu: d.gpu.clone(),
                    why,
                });
            }
            let mut share = None;
            let mut id = d.id.clone();
            if d.is_shared() {
                if let Some(asked) = r.consumed_capacity.get(SLOTS_CAPACITY) {
                    if quantity_value(asked) != Some(1) {
                        return Err(Refusal::ShareSize {
                            device: named,
                            asked: asked.clone(),
                        });
                    }
                }
                let taken: Vec<&DeviceId> = chosen.iter().map(|(id, _)| id).collect();
                let (slot, index) =
                    free_slot(d, &topology, &holds, &taken).ok_or_else(|| Refusal::NoFreeSlot {
                        device: named.clone(),
                        gpu: d.gpu.clone(),
                    })?;
                share = Some(Share {
                    id: r.share_id.clone(),
                    slot: index,
                });
                id = slot;
            }
            placed.push(
                topology
                    .place(&id)
                    .map_err(|e| Refusal::Hold(HoldError::Policy(e)))?,
            );
            chosen.push((
                id,
                PoolDevice {
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                    requests: vec![r.base_request().to_owned()],
                    share,
                },
            ));
        }
        let spec = spec_path(&self.config.cdi_runtime_dir, &c.uid);
        let record = DraClaim {
            uid: c.uid.clone(),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            devices: chosen.iter().map(|(_, p)| p.clone()).collect(),
            spec: Some(spec.clone()),
        };
        if chosen.is_empty() {
            // Nothing of this driver on this node: nothing to hold or write.
            return Ok(Vec::new());
        }
        let (before, applied) = self
            .node
            .with_holds({
                let (id, record) = (id.clone(), record.clone());
                move |h| {
                    let before = h.before(&id);
                    h.apply_claim(id, placed, record, &topology)
                        .cloned()
                        .map(|applied| (before, applied))
                }
            })
            .await
            .ok_or(Refusal::HoldsUnavailable)??;
        *changed = true;
        if let Err(e) = self.write_spec(&applied).await {
            // Undone to what it was: a hold that was there before (rebuilt without its
            // claim's record) stays, one made now is released.
            if let Some(Err(undo)) = self.node.with_holds(move |h| h.restore(before)).await {
                tracing::error!("the hold of a claim whose spec failed stays: {undo}");
            }
            return Err(e);
        }
        Ok(answer(&record))
    }

    /// The answer to a claim already prepared, its spec written anew if it is gone.
    async fn again(&self, hold: &Hold) -> Result<Vec<PreparedDevice>, Refusal> {
        let Some(record) = &hold.claim else {
            return Ok(Vec::new());
        };
        if record.spec.as_deref().is_some_and(|p| !p.exists()) {
            self.write_spec(hold).await?;
        }
        Ok(answer(record))
    }

    /// Writes the spec of the claim `hold` records.
    async fn write_spec(&self, hold: &Hold) -> Result<(), Refusal> {
        let Some(record) = &hold.claim else {
            return Ok(());
        };
        let path = record
            .spec
            .clone()
            .unwrap_or_else(|| spec_path(&self.config.cdi_runtime_dir, &record.uid));
        let names: Vec<(DeviceId, String)> = hold
            .devices
            .iter()
            .cloned()
            .zip(record.devices.iter().map(PoolDevice::cdi_name))
            .collect();
        let (vendor, catalog) = self.node.cdi_context().await;
        let spec = claim_spec(&record.uid, &hold.id, &names, &vendor.specs, &catalog);
        // Serialising plain data to a Vec cannot fail.
        let mut bytes = serde_json::to_vec_pretty(&spec).unwrap_or_default();
        bytes.push(b'\n');
        let dir = self.config.cdi_runtime_dir.clone();
        // File I/O off the async workers: a slow or hostile folder never stalls the others.
        let written = tokio::task::spawn_blocking(move || {
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return Err(Refusal::Spec {
                    path,
                    source: StateError::Io {
                        path: dir,
                        source: e,
                    },
                });
            }
            state::write_atomic(&path, &bytes, PUBLIC_MODE)
                .map_err(|source| Refusal::Spec { path, source })
        })
        .await;
        written.unwrap_or_else(|e| {
            Err(Refusal::Spec {
                path: self.config.cdi_runtime_dir.clone(),
                source: StateError::Io {
                    path: self.config.cdi_runtime_dir.clone(),
                    source: std::io::Error::other(e.to_string()),
                },
            })
        })
    }

    /// Unprepares each of `claims`: one answer per claim, keyed by uid. A claim bcd does not
    /// know succeeds.
    pub async fn unprepare(&self, claims: Vec<ClaimRef>) -> Vec<(String, Result<(), Refusal>)> {
        let _serial = self.lock.lock().await;
        let mut out = Vec::with_capacity(claims.len());
        let mut changed = false;
        for c in claims {
            let answer = self.unprepare_one(&c, &mut changed).await;
            match &answer {
                Ok(()) => self.state.count(|n| n.unprepared += 1),
                Err(e) => tracing::warn!(
                    "DRA claim {}/{} ({}) not unprepared: {e}",
                    c.namespace,
                    c.name,
                    c.uid
                ),
            }
            out.push((c.uid, answer));
        }
        if changed {
            self.node.touch();
            self.node.converge_holds().await;
        }
        out
    }

    /// Unprepares the held `claim` as [`Driver::unprepare`] does when, read again from the API
    /// server under the driver's lock, `still` says it is still to go: a claim prepared again
    /// meanwhile keeps its hold. `None` when it was kept.
    pub(super) async fn unprepare_if(
        &self,
        claim: &DraClaim,
        still: impl FnOnce(&Result<ResourceClaim, ReadError>) -> bool,
    ) -> Option<Result<(), Refusal>> {
        let _serial = self.lock.lock().await;
        let answer = read_claim(self.reader.as_ref(), &claim.namespace, &claim.name).await;
        if !still(&answer) {
            return None;
        }
        let c = ClaimRef {
            namespace: claim.namespace.clone(),
            uid: claim.uid.clone(),
            name: claim.name.clone(),
        };
        let mut changed = false;
        let out = self.unprepare_one(&c, &mut changed).await;
        if out.is_ok() {
            self.state.count(|n| n.unprepared += 1);
        }
        if changed {
            self.node.touch();
            self.node.converge_holds().await;
        }
        Some(out)
    }

    /// Removes the claims' specs in the CDI runtime folder whose claim has no hold (its hold
    /// was released by `bcd hold release --force`, or lost): a container restarted from such a
    /// spec would get a GPU nobody holds. Under the driver's lock, so a spec being written for
    /// a hold being made is never taken for one. Returns the specs removed.
    pub(super) async fn remove_orphan_specs(&self) -> Vec<PathBuf> {
        let _serial = self.lock.lock().await;
        // Without a store there is no knowing which claims are held: nothing is removed.
        let Some(holds) = self
            .node
            .with_holds(|h| h.list().cloned().collect::<Vec<_>>())
            .await
        else {
            return Vec::new();
        };
        let held: Vec<String> = holds
            .into_iter()
            .filter(|h| h.owner() == HoldOwner::Dra)
            .filter_map(|h| h.id.as_str().strip_prefix(HOLD_PREFIX).map(str::to_owned))
            .collect();
        let dir = self.config.cdi_runtime_dir.clone();
        tokio::task::spawn_blocking(move || {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                return Vec::new();
            };
            let mut removed = Vec::new();
            for entry in entries.filter_map(Result::ok) {
                let name = entry.file_name();
                let Some(uid) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("k8s.gpu.bcd.dev-claim_"))
                    .and_then(|n| n.strip_suffix(".json"))
                else {
                    continue;
                };
                let regular = entry.file_type().is_ok_and(|t| t.is_file());
                if regular && !held.iter().any(|h| h == uid) {
                    let path = entry.path();
                    if std::fs::remove_file(&path).is_ok() {
                        removed.push(path);
                    }
                }
            }
            removed
        })
        .await
        .unwrap_or_default()
    }

    async fn unprepare_one(&self, c: &ClaimRef, changed: &mut bool) -> Result<(), Refusal> {
        // The uid names a file below: checked as prepare checks it, whether bcd knows the
        // claim or not.
        let id = hold_id(&c.uid)
            .filter(|_| !c.uid.is_empty())
            .ok_or_else(|| Refusal::BadUid {
                namespace: c.namespace.chars().take(80).collect(),
                name: c.name.chars().take(80).collect(),
                uid: c.uid.chars().take(80).collect(),
            })?;
        let id = Some(id);
        let hold = self.node.holds_now().await.into_iter().find(|h| {
            h.owner() == HoldOwner::Dra
                && (h.claim.as_ref().is_some_and(|k| k.uid == c.uid) || Some(&h.id) == id.as_ref())
        });
        let spec = hold
            .as_ref()
            .and_then(|h| h.claim.as_ref())
            .and_then(|k| k.spec.clone())
            .unwrap_or_else(|| spec_path(&self.config.cdi_runtime_dir, &c.uid));
        if let Some(hold) = hold {
            let id = hold.id.clone();
            self.node
                .with_holds(move |h| h.release(&id))
                .await
                .ok_or(Refusal::HoldsUnavailable)??;
            *changed = true;
            tracing::info!(
                "unprepared DRA claim {}/{} ({}): hold {} released",
                c.namespace,
                c.name,
                c.uid,
                hold.id
            );
        }
        match std::fs::remove_file(&spec) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Refusal::Spec {
                path: spec.clone(),
                source: StateError::Io {
                    path: spec,
                    source: e,
                },
            }),
        }
    }
}

/// The claim `namespace/name`, read within [`CLAIM_READ_TIMEOUT`].
pub(super) async fn read_claim<R: ClaimReader>(
    reader: &R,
    namespace: &str,
    name: &str,
) -> Result<ResourceClaim, ReadError> {
    tokio::time::timeout(CLAIM_READ_TIMEOUT, reader.get(namespace, name))
        .await
        .unwrap_or_else(|_| {
            Err(ReadError::Failed {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                why: format!("no answer within {}s", CLAIM_READ_TIMEOUT.as_secs()),
            })
        })
}

fn answer(record: &DraClaim) -> Vec<PreparedDevice> {
    record
        .devices
        .iter()
        .map(|p| PreparedDevice {
            requests: p.requests.clone(),
            pool: p.pool.clone(),
            device: p.device.clone(),
            cdi_ids: vec![cdi_id(&record.uid, &p.cdi_name())],
            share_id: p.share.as_ref().and_then(|s| s.id.clone()),
        })
        .collect()
}

/// The first slot of the GPU of the shared device `d` that no hold in `holds` and nothing
/// in `taken` has: its id and number.
fn free_slot(
    d: &DraDevice,
    topology: &Topology,
    holds: &[Hold],
    taken: &[&DeviceId],
) -> Option<(DeviceId, u32)> {
    (0..d.shares.unwrap_or(0)).find_map(|n| {
        let index = SlotIndex::new(n)?;
        let slot = DeviceId::Slot {
            gpu: d.gpu.clone(),
            index,
        };
        let me = topology.place(&slot).ok()?;
        let held = taken.contains(&&slot)
            || holds.iter().any(|h| {
                topology
                    .placed(h)
                    .iter()
                    .any(|theirs| conflict(&me, theirs))
            });
        (!held).then_some((slot, n))
    })
}
