//! The node service's API: versioned paths, JSON in and out, errors as
//! `{"code": "<kind>", "message": "<sentence>"}` (the HTTP layer's own errors too). A known
//! path asked with another method is answered 405, an unknown one 404. Every request and
//! answer body is a typed value (the types of [`schema`], plus the inventory document and
//! `DiagReport`), and the CLI's client reads the same types; no handler spells a key by hand.
//!
//! | method and path | does |
//! | --- | --- |
//! | `GET /v1/status` | [`schema::NodeStatus`]: capabilities, inventory hash and age, collections, `nvidia-smi`'s error, one line per GPU with health, conditions, sampling, problems, the Kubernetes holds (`kubernetes.holds`) |
//! | `GET /v1/inventory` | the inventory document |
//! | `GET /v1/conditions` | this boot's conditions, each with its class and action |
//! | `POST /v1/inventory/refresh` | asks for a collection |
//! | `POST /v1/diag` | `diag.nvml` on a fresh collection (concurrent requests share the one in flight): `{"gpus": [...], "expected_gpus": N}` |
//! | `POST /v1/gpus/reset` | `gpu.reset`: `{"gpus": [UUID...]}` |
//! | `GET /v1/holds` | the holds |
//! | `POST /v1/holds` | applies a hold: `{"id", "devices": [...], "kubernetes": bool}` |
//! | `DELETE /v1/holds/<id>` | releases a hold |
//! | `POST /v1/vfio/bind` | `{"device": ADDR or UUID}`: the GPU and its IOMMU group to `vfio-pci` |
//! | `POST /v1/vfio/release` | `{"device": ADDR}`: back to the kernel's driver |
//! | `POST /v1/vm/start`, `/v1/vm/destroy` | `{"domain": NAME}` through libvirt |
//! | `POST /v1/vm/restore` | `{"file": PATH}` through libvirt |

use serde::{Deserialize, Serialize};

use bcd_protocol::{GpuRef, GpuUuid};

use crate::cdi::{ConvergeError, DeviceId, HoldError, HoldId, HoldOwner};
use crate::health::diag::{diag_nvml, link_widths, DiagRequest, NvmlState};
use crate::health::reset::reset_gpus;
use crate::inventory::scheduler::Trigger;
use crate::node::http::Request;
use crate::node::schema::{self, HoldList, HoldView, Summary};
use crate::node::shared::{ApplyHoldError, Node};
use crate::state::StateError;

/// An answer: status code and JSON body.
pub type Answer = (u16, Vec<u8>);

/// A typed answer: `status` and the body as JSON. The schema's types are plain data, so
/// encoding them cannot fail; if it ever did, the answer is a 500 that says so.
fn typed<T: Serialize>(status: u16, body: &T) -> Answer {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, bytes),
        Err(e) => error(
            500,
            "internal",
            format!("the answer could not be encoded: {e}"),
        ),
    }
}

fn error(status: u16, code: &str, sentence: impl std::fmt::Display) -> Answer {
    (
        status,
        crate::node::http::error_body(code, &sentence.to_string()),
    )
}

fn body<T: for<'de> Deserialize<'de>>(request: &Request) -> Result<T, Answer> {
    let bytes: &[u8] = if request.body.is_empty() {
        b"{}"
    } else {
        &request.body
    };
    serde_json::from_slice(bytes).map_err(|e| {
        error(
            400,
            "invalid-argument",
            format!(
                "the request body is not what {} {} takes: {e}",
                request.method, request.path
            ),
        )
    })
}

/// What a method and path ask for: the router's decision, made without the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET /v1/status`
    Status,
    /// `GET /v1/inventory`
    Inventory,
    /// `GET /v1/conditions`
    Conditions,
    /// `POST /v1/inventory/refresh`
    Refresh,
    /// `POST /v1/diag`
    Diag,
    /// `POST /v1/gpus/reset`
    Reset,
    /// `GET /v1/holds`
    ListHolds,
    /// `POST /v1/holds`
    ApplyHold,
    /// `DELETE /v1/holds/<id>`, with the id as given.
    ReleaseHold(&'a str),
    /// `POST` on a `/v1/vfio/...` or `/v1/vm/...` path, which it carries.
    Passthrough(&'a str),
}

/// Routes a request: its [`Route`], or the 405 (a known path, another method) or 404 answer.
///
/// # Errors
/// The answer for a path the API does not serve with `method`.
pub fn route<'a>(method: &str, path: &'a str) -> Result<Route<'a>, Answer> {
    let path = path.trim_end_matches('/');
    match (method, path) {
        ("GET", "/v1/status") => Ok(Route::Status),
        ("GET", "/v1/inventory") => Ok(Route::Inventory),
        ("GET", "/v1/conditions") => Ok(Route::Conditions),
        ("POST", "/v1/inventory/refresh") => Ok(Route::Refresh),
        ("POST", "/v1/diag") => Ok(Route::Diag),
        ("POST", "/v1/gpus/reset") => Ok(Route::Reset),
        ("GET", "/v1/holds") => Ok(Route::ListHolds),
        ("POST", "/v1/holds") => Ok(Route::ApplyHold),
        ("DELETE", p) if p.starts_with("/v1/holds/") => {
            Ok(Route::ReleaseHold(&p["/v1/holds/".len()..]))
        }
        (
            "POST",
            p @ ("/v1/vfio/bind" | "/v1/vfio/release" | "/v1/vm/start" | "/v1/vm/restore"
            | "/v1/vm/destroy"),
        ) => Ok(Route::Passthrough(p)),
        (_, p) if is_known_path(p) => Err(error(
            405,
            "method-not-allowed",
            format!("{method} is not allowed on {path}"),
        )),
        _ => Err(error(
            404,
            "not-found",
            format!("no such API path: {path} (see GET /v1/status)"),
        )),
    }
}

/// Answers one request.
pub async fn handle(node: &Node, request: &Request) -> Answer {
    let result = match route(&request.method, &request.path) {
        Ok(Route::Status) => Ok(status(node).await),
        Ok(Route::Inventory) => Ok(typed(200, &node.inventory().await)),
        Ok(Route::Conditions) => Ok(typed(
            200,
            &schema::ConditionList {
                conditions: described(&node.health().conditions(), &node.config().xid_policy),
            },
        )),
        Ok(Route::Refresh) => {
            node.request_collection(Trigger::Refresh);
            Ok(typed(202, &schema::RefreshAnswer { requested: true }))
        }
        Ok(Route::Diag) => diag(node, request).await,
        Ok(Route::Reset) => reset(node, request).await,
        Ok(Route::ListHolds) => Ok(list_holds(node).await),
        Ok(Route::ApplyHold) => apply_hold(node, request).await,
        Ok(Route::ReleaseHold(id)) => release_hold(node, id, request).await,
        Ok(Route::Passthrough(path)) => passthrough(node, path, request).await,
        Err(answer) => Err(answer),
    };
    result.unwrap_or_else(|answer| answer)
}

/// Whether `path` is one the API serves (with some method).
fn is_known_path(path: &str) -> bool {
    matches!(
        path,
        "/v1/status"
            | "/v1/inventory"
            | "/v1/conditions"
            | "/v1/inventory/refresh"
            | "/v1/diag"
            | "/v1/gpus/reset"
            | "/v1/holds"
            | "/v1/vfio/bind"
            | "/v1/vfio/release"
            | "/v1/vm/start"
            | "/v1/vm/restore"
            | "/v1/vm/destroy"
    ) || path
        .strip_prefix("/v1/holds/")
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// The conditions with each one's `class` and `action` (from the XID catalog).
fn described(
    conditions: &[crate::health::Condition],
    policy: &crate::health::xid::XidPolicy,
) -> Vec<schema::DescribedCondition> {
    conditions
        .iter()
        .map(|c| {
            let (class, action) = crate::health::describe(c, policy);
            schema::DescribedCondition {
                condition: c.clone(),
                class: class.to_owned(),
                action,
            }
        })
        .collect()
}

async fn status(node: &Node) -> Answer {
    let inventory = node.inventory().await;
    let conditions = node.health().conditions();
    let gpus = node.gpu_statuses().await;
    let (inventory_age_s, nvidia_smi_error) = node.latest_age_and_error().await;
    // The seed's Hello rule: nvml only when nvidia-smi answered (a CUDA driver version).
    let capabilities = if inventory.gpu.cuda_driver_version.is_some() {
        vec!["nvml".to_owned()]
    } else {
        Vec::new()
    };
    typed(
        200,
        &schema::NodeStatus {
            capabilities,
            inventory_hash: inventory.hash,
            inventory_age_s,
            collections: node.collections(),
            nvidia_smi_error,
            gpus,
            conditions: described(&conditions, &node.config().xid_policy),
            sampling: node.sampling(),
            problems: node.problems_now(),
            kubernetes: kubernetes_holds(node).await,
        },
    )
}

/// Which devices Kubernetes has: its holds, and whether each one's release is pending.
async fn kubernetes_holds(node: &Node) -> schema::KubernetesHolds {
    let holds = node
        .holds_now()
        .await
        .into_iter()
        .filter(|h| h.kubernetes)
        .map(|h| schema::KubernetesHold {
            hold: h.id.as_str().to_owned(),
            devices: h.devices.iter().map(|d| d.as_str().to_owned()).collect(),
            release_pending_since: h.unassigned_since,
        })
        .collect();
    schema::KubernetesHolds { holds }
}

async fn diag(node: &Node, request: &Request) -> Result<Answer, Answer> {
    let asked: schema::DiagRequest = body(request)?;
    let inventory = node.collect_shared().await;
    let (error, driver) = node.latest_driver_readings().await;
    let no_driver = error
        .as_deref()
        .is_some_and(|e| e.contains("nvidia-smi not found"));
    let nvml = if no_driver {
        NvmlState::Unavailable
    } else {
        NvmlState::Collected(&inventory)
    };
    let links = link_widths(&node.config().host, &inventory);
    let report = diag_nvml(
        nvml,
        error.as_deref().filter(|_| !no_driver),
        &links,
        &driver,
        &node.health().conditions(),
        &DiagRequest {
            gpu_uuids: asked.gpus,
            expected_gpu_count: asked.expected_gpus,
        },
    );
    Ok(typed(200, &report))
}

async fn reset(node: &Node, request: &Request) -> Result<Answer, Answer> {
    let asked: schema::ResetRequest = body(request)?;
    // The GPUs are claimed from the busy check until after the collection that follows the
    // reset (the claim drops with this function, also on an error or a dropped request): no
    // hold or Allocate takes one meanwhile, and the device plugins stream it Unhealthy.
    let gpus: Vec<DeviceId> = asked.gpus.iter().map(DeviceId::from).collect();
    let _claim = node
        .claim(&gpus, crate::device::policy::ClaimKind::Reset)
        .await
        .map_err(|(gpu, busy)| {
            let e = crate::health::reset::ResetError::Busy {
                uuid: gpu
                    .as_str()
                    .parse()
                    .unwrap_or_else(|_| asked.gpus[0].clone()),
                holder: busy.to_string(),
            };
            error(409, e.code(), e)
        })?;
    let inventory = node.inventory().await;
    let holds = node.holds_now().await;
    let result = reset_gpus(
        &asked.gpus,
        &inventory,
        &holds,
        node.helper(),
        || node.collect_now(),
        node.health(),
    )
    .await;
    match result {
        Ok(report) => Ok(typed(200, &report)),
        Err(e) => {
            let status = if e.code() == "gpu-busy" { 409 } else { 422 };
            Err(error(status, e.code(), e))
        }
    }
}

/// The refusal while `holds.json` is unreadable: nothing may change holds until it is fixed.
fn holds_unavailable() -> Answer {
    error(
        503,
        "holds-unavailable",
        "holds.json could not be read when bcd node started; see bcd status",
    )
}

async fn list_holds(node: &Node) -> Answer {
    let list = node
        .with_holds(|h| HoldList {
            holds: h.list().map(HoldView::from).collect(),
        })
        .await;
    match list {
        Some(list) => typed(200, &list),
        None => holds_unavailable(),
    }
}

async fn apply_hold(node: &Node, request: &Request) -> Result<Answer, Answer> {
    let asked: schema::HoldRequest = body(request)?;
    let id: HoldId = asked
        .id
        .parse()
        .map_err(|e| error(400, "invalid-argument", e))?;
    let devices = asked
        .devices
        .iter()
        .map(|d| d.parse::<DeviceId>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(400, "invalid-argument", e))?;
    if asked.kubernetes {
        return Err(error(
            403,
            "reserved",
            "only the kubelet's device plugins (and DRA claims) make Kubernetes holds; apply the hold without \"kubernetes\"",
        ));
    }
    let topology = node.topology().await;
    let placed = devices
        .iter()
        .map(|d| topology.place(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| policy_refusal(&e))?;
    let spec = node.config().cdi_dir.join(id.spec_file_name());
    // 201 only once the hold and its spec are on disk; a spec that cannot be written undoes
    // the hold (it was acknowledged before, and appeared only at some later change).
    match node
        .apply_hold(id, placed, HoldOwner::Operator, &topology)
        .await
    {
        Ok(hold) => Ok(typed(
            201,
            &HoldView {
                spec: Some(spec.to_string_lossy().into_owned()),
                ..HoldView::from(&hold)
            },
        )),
        Err(ApplyHoldError::Unavailable) => Err(holds_unavailable()),
        Err(ApplyHoldError::Hold(HoldError::Policy(e))) => Err(policy_refusal(&e)),
        Err(ApplyHoldError::Hold(e @ HoldError::NoDevices(_))) => {
            Err(error(400, "invalid-argument", e))
        }
        Err(ApplyHoldError::Hold(e @ HoldError::Frozen(_))) => {
            Err(error(503, "holds-unavailable", e))
        }
        Err(ApplyHoldError::Hold(
            e @ (HoldError::OtherOwner { .. } | HoldError::ReservedId { .. }),
        )) => Err(error(403, "reserved", e)),
        Err(ApplyHoldError::Hold(HoldError::State(e))) => {
            Err(state_refusal(&e, format!("the hold store: {e}")))
        }
        Err(e @ ApplyHoldError::Spec { .. }) => {
            let sentence = e.to_string();
            match e {
                ApplyHoldError::Spec {
                    source: ConvergeError::Write { source, .. },
                    ..
                } => Err(state_refusal(&source, sentence)),
                _ => Err(error(500, "state", sentence)),
            }
        }
    }
}

/// A state file that could not be written, as the API answers it: 507 `insufficient-storage`
/// when its disk or quota is full (the sentence names the file), else 500 `state`.
fn state_refusal(e: &StateError, sentence: String) -> Answer {
    let full = matches!(
        e,
        StateError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
    );
    if full {
        error(507, "insufficient-storage", sentence)
    } else {
        error(500, "state", sentence)
    }
}

/// A policy refusal as the API answers it.
fn policy_refusal(e: &crate::device::policy::PolicyError) -> Answer {
    use crate::device::policy::PolicyError as P;
    match e {
        P::Conflict { .. } | P::Invariant { .. } => error(409, "device-held", e),
        P::PassedThrough(_) | P::Claimed { .. } => error(409, "gpu-busy", e),
        P::UnknownDevice(_) => error(422, "unknown-device", e),
        P::NoSuchSlot { .. } | P::SlotInMigMode { .. } => error(422, "refused", e),
    }
}

/// `DELETE /v1/holds/ID[?force=1]`. A Kubernetes hold a pod still has (its release is not
/// pending) is refused, naming the pod, unless `force` is given.
async fn release_hold(node: &Node, id: &str, request: &Request) -> Result<Answer, Answer> {
    let id: HoldId = id.parse().map_err(|e| error(400, "invalid-argument", e))?;
    let force = request
        .query
        .split('&')
        .any(|p| matches!(p, "force" | "force=1" | "force=true"));
    let pods = node.pods_now();
    let released = node
        .with_holds(|holds| match holds.get(&id) {
            Some(hold)
                if !force && hold.owner().is_kubernetes() && hold.unassigned_since.is_none() =>
            {
                let mut who: Vec<String> = pods
                    .iter()
                    .filter(|p| p.devices.iter().any(|d| hold.devices.contains(d)))
                    .map(|p| format!("{}/{} (container {})", p.pod.namespace, p.pod.pod, p.pod.container))
                    .collect();
                who.dedup();
                let who = if who.is_empty() {
                    "a pod the kubelet allocated it to (PodResources has not said otherwise yet)".to_owned()
                } else {
                    format!("pod {}", who.join(", "))
                };
                Err(error(
                    409,
                    "hold-in-use",
                    format!(
                        "hold {id} is {}'s and {who} still has its devices; it is released once no pod has them, or now with bcd hold release --force {id}",
                        hold.owner().words()
                    ),
                ))
            }
            _ => Ok(holds.release(&id)),
        })
        .await
        .ok_or_else(holds_unavailable)??
        .map_err(|e| match e {
            HoldError::Frozen(_) => error(503, "holds-unavailable", e),
            HoldError::State(s) => state_refusal(&s, format!("the hold store: {s}")),
            e => error(500, "state", e),
        })?;
    node.converge_holds().await;
    match released {
        Some(hold) => Ok(typed(200, &HoldView::from(&hold))),
        None => Err(error(
            404,
            "unknown-hold",
            format!("there is no hold {}", id.as_str()),
        )),
    }
}

fn field<T: std::str::FromStr>(value: Option<String>, name: &str) -> Result<T, Answer>
where
    T::Err: std::fmt::Display,
{
    let raw = value.ok_or_else(|| {
        error(
            400,
            "invalid-argument",
            format!("the request needs \"{name}\""),
        )
    })?;
    raw.parse().map_err(|e| error(400, "invalid-argument", e))
}

async fn passthrough(node: &Node, path: &str, request: &Request) -> Result<Answer, Answer> {
    use crate::runtime::RuntimeError;
    let asked: schema::PassthroughRequest = body(request)?;
    // For the metrics' `vm` label, once the step has run.
    let domain = asked.domain.clone();
    let topology = node.topology().await;
    let kind = if path.starts_with("/v1/vfio/") {
        crate::device::policy::ClaimKind::Vfio
    } else {
        crate::device::policy::ClaimKind::VmStart
    };
    // Each GPU the step will touch is claimed as the runtime asks about it (under the holds
    // lock) and stays claimed until the step is done: no hold, Allocate or other step takes
    // it meanwhile. The claims drop with this function.
    let claims = std::sync::Mutex::new(Vec::new());
    // The policy's busy rule, asked by address (the inventory's) or by UUID.
    let held = |address: &bcd_protocol::PciAddress, uuid: Option<&GpuUuid>| -> Option<String> {
        let gpu = topology
            .gpu_at(address)
            .map(|g| g.uuid.clone())
            .or_else(|| uuid.and_then(|u| u.as_str().parse().ok()))?;
        let busy = match node.claim_now(&gpu, kind, &topology) {
            Ok(claim) => {
                claims
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(claim);
                return None;
            }
            Err(busy) => busy,
        };
        match busy {
            crate::device::policy::Busy::Held { hold, device } if device == gpu => {
                Some(hold.to_string())
            }
            crate::device::policy::Busy::Held { hold, device } => {
                Some(format!("{hold} ({device})"))
            }
            crate::device::policy::Busy::PendingRelease { hold, device, .. } => Some(format!(
                "{hold} ({device}; its Kubernetes release is pending)"
            )),
            b @ (crate::device::policy::Busy::Claimed(_)
            | crate::device::policy::Busy::Changing) => Some(b.to_string()),
            // Already on vfio-pci: the runtime itself says what is wrong with that.
            crate::device::policy::Busy::PassedThrough => None,
        }
    };
    let result = match path {
        "/v1/vfio/bind" => {
            node.passthrough()
                .bind(&field::<GpuRef>(asked.device, "device")?, &held)
                .await
        }
        "/v1/vfio/release" => {
            node.passthrough()
                .release(&field(asked.device, "device")?)
                .await
        }
        "/v1/vm/start" => {
            node.passthrough()
                .start(&field(asked.domain, "domain")?, &held)
                .await
        }
        "/v1/vm/restore" => {
            node.passthrough()
                .restore(&field(asked.file, "file")?, &held)
                .await
        }
        _ => {
            node.passthrough()
                .destroy(&field(asked.domain, "domain")?)
                .await
        }
    };
    if let Ok(report) = &result {
        // A restore names its domain only in the helper's answer (the save image's XML).
        node.record_passthrough(report, report.domain.as_deref().or(domain.as_deref()));
        // The claims go only once the inventory knows where the GPUs are now (on vfio-pci,
        // or back), as a reset's go after the collection that follows it.
        node.collect_now().await;
    }
    match result {
        Ok(report) => Ok(typed(
            200,
            &Summary {
                summary: report.to_string(),
            },
        )),
        Err(e) => {
            // A journal that cannot be written: 507 when its disk is full, naming the file.
            if let RuntimeError::State(s) = &e {
                return Err(state_refusal(s, e.to_string()));
            }
            let (status, code) = match &e {
                RuntimeError::Held { .. } => (409, "gpu-busy"),
                RuntimeError::Unsettled(_) => (409, "unsettled"),
                RuntimeError::UnknownGpu { .. } => (422, "unknown-gpu"),
                RuntimeError::NotAGpu { .. }
                | RuntimeError::Group(_)
                | RuntimeError::NotPassedThrough { .. }
                | RuntimeError::Invalid(_) => (422, "refused"),
                RuntimeError::Helper { .. } => (502, "helper"),
                RuntimeError::State(_) => (500, "state"),
            };
            Err(error(status, code, e))
        }
    }
}

#[cfg(test)]
mod tests;
