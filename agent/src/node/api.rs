//! The node service's API: versioned paths, JSON in and out, errors as
//! `{"code": "<kind>", "message": "<sentence>"}` (the HTTP layer's own errors too). A known
//! path asked with another method is answered 405, an unknown one 404. Every request and
//! answer body is a typed value (the types of [`schema`], plus the inventory document and
//! `DiagReport`), and the CLI's client reads the same types; no handler spells a key by hand.
//!
//! A request is parsed once into an [`ApiRequest`] (route, body and query, every refusal that
//! needs no node made there), then answered by one handler; every refusal is an [`ApiError`],
//! whose [`ApiError::kind`] is the one table of status and code, with `From` for the domain
//! errors (policy, holds, reset, passthrough runtime, state files).
//!
//! | method and path | does |
//! | --- | --- |
//! | `GET /v1/status` | [`schema::NodeStatus`]: capabilities, inventory hash and age, collections, `nvidia-smi`'s error, one line per GPU with health, conditions, sampling, problems, the Kubernetes holds (`kubernetes.holds`), the MIG layout applied last (`mig_layout`) |
//! | `GET /v1/mig` | [`schema::MigStatus`]: the layout file and the layout applied last |
//! | `POST /v1/mig` | `{"layout"}`: applies it ([`crate::node::mig_step`]); the [`crate::mig::LayoutRecord`], or 409 `gpu-busy`/`mig-running`, 422 `mig-refused` |
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

use bcd_protocol::{DomainName, GpuRef, GpuUuid, PciAddress, SaveFile};

use crate::cdi::{ConvergeError, DeviceId, HoldError, HoldId, HoldOwner, IdError};
use crate::device::policy::PolicyError;
use crate::health::diag::{
    diag_with_verdicts, link_widths, nvidia_smi_answered, DiagInput, DiagRequest, NvmlState,
};
use crate::health::reset::{reset_gpus, ResetError};
use crate::inventory::scheduler::Trigger;
use crate::node::http::Request;
use crate::node::schema::{self, HoldList, HoldView, Summary};
use crate::node::shared::{ApplyHoldError, Node};
use crate::runtime::RuntimeError;
use crate::state::StateError;

/// An answer: status code and JSON body.
pub type Answer = (u16, Vec<u8>);

/// Why a request was not done, as the API answers it. [`ApiError::kind`] is the one table of
/// HTTP status and error code; `Display` is the message (the domain error's sentence).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `invalid-argument`: the request is malformed.
    #[error("{0}")]
    InvalidArgument(String),
    /// 403 `reserved`: another owner's hold, or an id or kind only another owner makes.
    #[error("{0}")]
    Reserved(String),
    /// 404 `not-found`: no such API path.
    #[error("no such API path: {0} (see GET /v1/status)")]
    NotFound(String),
    /// 404 `unknown-hold`.
    #[error("there is no hold {0}")]
    UnknownHold(HoldId),
    /// 405 `method-not-allowed`: a known path asked with another method.
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed {
        /// The method asked.
        method: String,
        /// The path, without a trailing slash.
        path: String,
    },
    /// 409 `device-held`: a device another hold has.
    #[error("{0}")]
    DeviceHeld(String),
    /// 409 `gpu-busy`: a GPU under a step, passed through, or held for the step asked.
    #[error("{0}")]
    GpuBusy(String),
    /// 409 `hold-in-use`: a Kubernetes hold a pod still has.
    #[error("{0}")]
    HoldInUse(String),
    /// 409 `unsettled`: a passthrough step cut off earlier is not settled yet.
    #[error("{0}")]
    Unsettled(String),
    /// 422 `unknown-device`.
    #[error("{0}")]
    UnknownDevice(String),
    /// 422 `unknown-gpu`.
    #[error("{0}")]
    UnknownGpu(String),
    /// 409 `mig-running`: another MIG layout is being applied.
    #[error("{0}")]
    MigRunning(String),
    /// 422 `mig-refused`: the MIG layout file, the layout or its fit refused before anything ran.
    #[error("{0}")]
    MigRefused(String),
    /// 503 `host-unreadable`: nvidia-smi gives no GPU to plan against.
    #[error("{0}")]
    HostUnreadable(String),
    /// 422 `refused`: the request is well formed but the policy or the runtime refuses it.
    #[error("{0}")]
    Refused(String),
    /// 500 `state`: a state file could not be written.
    #[error("{0}")]
    State(String),
    /// 500 `internal`.
    #[error("{0}")]
    Internal(String),
    /// 502 `helper`: the root helper failed or could not be reached.
    #[error("{0}")]
    Helper(String),
    /// 503 `holds-unavailable`: `holds.json` could not be read at start.
    #[error("holds.json could not be read when bcd node started; see bcd status")]
    HoldsUnavailable,
    /// 503 `holds-unavailable`: the hold store is used read-only until it is fixed.
    #[error("{0}")]
    Frozen(String),
    /// 507 `insufficient-storage`: a state file's disk or quota is full (the message names
    /// the file).
    #[error("{0}")]
    InsufficientStorage(String),
}

impl ApiError {
    /// The HTTP status and error code: the API's one table of them.
    pub(crate) fn kind(&self) -> (u16, &'static str) {
        match self {
            Self::InvalidArgument(_) => (400, "invalid-argument"),
            Self::Reserved(_) => (403, "reserved"),
            Self::NotFound(_) => (404, "not-found"),
            Self::UnknownHold(_) => (404, "unknown-hold"),
            Self::MethodNotAllowed { .. } => (405, "method-not-allowed"),
            Self::DeviceHeld(_) => (409, "device-held"),
            Self::GpuBusy(_) => (409, "gpu-busy"),
            Self::HoldInUse(_) => (409, "hold-in-use"),
            Self::Unsettled(_) => (409, "unsettled"),
            Self::UnknownDevice(_) => (422, "unknown-device"),
            Self::UnknownGpu(_) => (422, "unknown-gpu"),
            Self::Refused(_) => (422, "refused"),
            Self::MigRunning(_) => (409, "mig-running"),
            Self::MigRefused(_) => (422, "mig-refused"),
            Self::HostUnreadable(_) => (503, "host-unreadable"),
            Self::State(_) => (500, "state"),
            Self::Internal(_) => (500, "internal"),
            Self::Helper(_) => (502, "helper"),
            Self::HoldsUnavailable | Self::Frozen(_) => (503, "holds-unavailable"),
            Self::InsufficientStorage(_) => (507, "insufficient-storage"),
        }
    }

    /// The answer: the status and `{"code", "message"}`.
    pub fn answer(&self) -> Answer {
        let (status, code) = self.kind();
        (
            status,
            crate::node::http::error_body(code, &self.to_string()),
        )
    }

    /// A state file that could not be written: 507 when its disk or quota is full, else 500.
    fn state(e: &StateError, sentence: String) -> Self {
        let full = matches!(
            e,
            StateError::Io { source, .. }
                if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        );
        if full {
            Self::InsufficientStorage(sentence)
        } else {
            Self::State(sentence)
        }
    }
}

impl From<IdError> for ApiError {
    fn from(e: IdError) -> Self {
        Self::InvalidArgument(e.to_string())
    }
}

impl From<PolicyError> for ApiError {
    fn from(e: PolicyError) -> Self {
        use PolicyError as P;
        let sentence = e.to_string();
        match e {
            P::Conflict { .. } | P::Invariant(_) => Self::DeviceHeld(sentence),
            P::PassedThrough(_) | P::Claimed { .. } => Self::GpuBusy(sentence),
            P::UnknownDevice(_) => Self::UnknownDevice(sentence),
            P::NoSuchSlot { .. } | P::SlotInMigMode { .. } => Self::Refused(sentence),
        }
    }
}

impl From<HoldError> for ApiError {
    fn from(e: HoldError) -> Self {
        let sentence = e.to_string();
        match e {
            HoldError::Policy(p) => p.into(),
            HoldError::NoDevices(_) => Self::InvalidArgument(sentence),
            HoldError::Frozen(_) => Self::Frozen(sentence),
            HoldError::OtherOwner { .. } | HoldError::ReservedId { .. } => Self::Reserved(sentence),
            HoldError::State(s) => Self::state(&s, sentence),
        }
    }
}

impl From<ApplyHoldError> for ApiError {
    fn from(e: ApplyHoldError) -> Self {
        match e {
            ApplyHoldError::Unavailable => Self::HoldsUnavailable,
            ApplyHoldError::Hold(h) => h.into(),
            ApplyHoldError::Spec { .. } => {
                let sentence = e.to_string();
                match e {
                    ApplyHoldError::Spec {
                        source: ConvergeError::Write { source, .. },
                        ..
                    } => Self::state(&source, sentence),
                    _ => Self::State(sentence),
                }
            }
        }
    }
}

impl From<crate::mig::MigError> for ApiError {
    fn from(e: crate::mig::MigError) -> Self {
        use crate::mig::MigError;
        let sentence = e.to_string();
        match e {
            MigError::Busy { .. } => Self::GpuBusy(sentence),
            MigError::Running => Self::MigRunning(sentence),
            MigError::Config(_) | MigError::Plan(_) => Self::MigRefused(sentence),
            MigError::Host(_) => Self::HostUnreadable(sentence),
            MigError::Unsupported => Self::Helper(sentence),
        }
    }
}

impl From<ResetError> for ApiError {
    fn from(e: ResetError) -> Self {
        let sentence = e.to_string();
        match e {
            ResetError::Busy { .. } => Self::GpuBusy(sentence),
            ResetError::UnknownGpu { .. } | ResetError::NoAddress { .. } => {
                Self::UnknownGpu(sentence)
            }
            ResetError::NoGpu => Self::InvalidArgument(sentence),
        }
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let sentence = e.to_string();
        match e {
            // A journal that cannot be written: 507 when its disk is full, naming the file.
            RuntimeError::State(s) => Self::state(&s, sentence),
            RuntimeError::Held { .. } => Self::GpuBusy(sentence),
            RuntimeError::Unsettled(_) => Self::Unsettled(sentence),
            RuntimeError::UnknownGpu { .. } => Self::UnknownGpu(sentence),
            RuntimeError::NotAGpu { .. }
            | RuntimeError::Group(_)
            | RuntimeError::NotPassedThrough { .. }
            | RuntimeError::Invalid(_) => Self::Refused(sentence),
            RuntimeError::Helper { .. } => Self::Helper(sentence),
        }
    }
}

/// A typed answer: `status` and the body as JSON, its `schema_version` first
/// ([`crate::document`]). The schema's types are plain data, so encoding them cannot fail; if
/// it ever did, the answer is a 500 that says so.
fn typed<T: Serialize>(status: u16, body: &T) -> Answer {
    match serde_json::to_vec(&crate::document::versioned(body)) {
        Ok(bytes) => (status, bytes),
        Err(e) => ApiError::Internal(format!("the answer could not be encoded: {e}")).answer(),
    }
}

fn body<T: for<'de> Deserialize<'de>>(request: &Request) -> Result<T, ApiError> {
    let bytes: &[u8] = if request.body.is_empty() {
        b"{}"
    } else {
        &request.body
    };
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::InvalidArgument(format!(
            "the request body is not what {} {} takes: {e}",
            request.method, request.path
        ))
    })
}

/// What a method and path ask for: the router's decision, made without the node or the body.
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
    /// `POST /v1/vfio/bind`
    VfioBind,
    /// `POST /v1/vfio/release`
    VfioRelease,
    /// `POST /v1/vm/start`
    VmStart,
    /// `POST /v1/vm/restore`
    VmRestore,
    /// `POST /v1/vm/destroy`
    VmDestroy,
    /// `GET /v1/mig`
    MigStatus,
    /// `POST /v1/mig`
    MigApply,
    /// `GET /v1/remediations`
    Remediations,
}

/// Routes a request: its [`Route`], or why not (a known path asked with another method, an
/// unknown path).
///
/// # Errors
/// [`ApiError::MethodNotAllowed`] or [`ApiError::NotFound`].
pub fn route<'a>(method: &str, path: &'a str) -> Result<Route<'a>, ApiError> {
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
        ("POST", "/v1/vfio/bind") => Ok(Route::VfioBind),
        ("POST", "/v1/vfio/release") => Ok(Route::VfioRelease),
        ("POST", "/v1/vm/start") => Ok(Route::VmStart),
        ("POST", "/v1/vm/restore") => Ok(Route::VmRestore),
        ("POST", "/v1/vm/destroy") => Ok(Route::VmDestroy),
        ("GET", "/v1/mig") => Ok(Route::MigStatus),
        ("POST", "/v1/mig") => Ok(Route::MigApply),
        ("GET", "/v1/remediations") => Ok(Route::Remediations),
        (_, p) if is_known_path(p) => Err(ApiError::MethodNotAllowed {
            method: method.to_owned(),
            path: path.to_owned(),
        }),
        _ => Err(ApiError::NotFound(path.to_owned())),
    }
}

/// A request the API serves, with its arguments parsed and validated: everything that can be
/// refused without the node is refused here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiRequest {
    /// `GET /v1/status`
    Status,
    /// `GET /v1/inventory`
    Inventory,
    /// `GET /v1/conditions`
    Conditions,
    /// `POST /v1/inventory/refresh`
    Refresh,
    /// `POST /v1/diag`
    Diag(schema::DiagRequest),
    /// `POST /v1/gpus/reset`
    Reset(Vec<GpuUuid>),
    /// `GET /v1/holds`
    ListHolds,
    /// `POST /v1/holds`: an operator's hold.
    ApplyHold {
        /// The hold's id.
        id: HoldId,
        /// Its devices, in the order asked.
        devices: Vec<DeviceId>,
    },
    /// `DELETE /v1/holds/<id>[?force=1]`
    ReleaseHold {
        /// The hold.
        id: HoldId,
        /// Release a Kubernetes hold a pod still has.
        force: bool,
    },
    /// `POST /v1/vfio/bind`
    VfioBind(GpuRef),
    /// `POST /v1/vfio/release`
    VfioRelease(PciAddress),
    /// `POST /v1/vm/start`
    VmStart(DomainName),
    /// `POST /v1/vm/restore`
    VmRestore(SaveFile),
    /// `POST /v1/vm/destroy`
    VmDestroy(DomainName),
    /// `GET /v1/mig`: the layout applied last and its state.
    MigStatus,
    /// `POST /v1/mig`: apply a layout of the node's layout file.
    MigApply(String),
    /// `GET /v1/remediations`: the recovery loop's record.
    Remediations,
}

impl ApiRequest {
    /// Parses a request: its route, then its body and query.
    ///
    /// # Errors
    /// [`ApiError`]: an unknown path, another method, or arguments that are malformed or
    /// refused on their face (a Kubernetes hold asked through the API).
    pub fn parse(request: &Request) -> Result<Self, ApiError> {
        let passthrough = || body::<schema::PassthroughRequest>(request);
        Ok(match route(&request.method, &request.path)? {
            Route::Status => Self::Status,
            Route::Inventory => Self::Inventory,
            Route::Conditions => Self::Conditions,
            Route::Refresh => Self::Refresh,
            Route::Diag => Self::Diag(body(request)?),
            Route::Reset => Self::Reset(body::<schema::ResetRequest>(request)?.gpus),
            Route::ListHolds => Self::ListHolds,
            Route::ApplyHold => {
                let asked: schema::HoldRequest = body(request)?;
                let id: HoldId = asked.id.parse()?;
                let devices = asked
                    .devices
                    .iter()
                    .map(|d| d.parse::<DeviceId>())
                    .collect::<Result<Vec<_>, _>>()?;
                if asked.kubernetes {
                    return Err(ApiError::Reserved(
                        "only the kubelet's device plugins (and DRA claims) make Kubernetes holds; apply the hold without \"kubernetes\"".to_owned(),
                    ));
                }
                Self::ApplyHold { id, devices }
            }
            Route::ReleaseHold(id) => Self::ReleaseHold {
                id: id.parse()?,
                force: request
                    .query
                    .split('&')
                    .any(|p| matches!(p, "force" | "force=1" | "force=true")),
            },
            Route::VfioBind => Self::VfioBind(field(passthrough()?.device, "device")?),
            Route::VfioRelease => Self::VfioRelease(field(passthrough()?.device, "device")?),
            Route::VmStart => Self::VmStart(field(passthrough()?.domain, "domain")?),
            Route::VmRestore => Self::VmRestore(field(passthrough()?.file, "file")?),
            Route::VmDestroy => Self::VmDestroy(field(passthrough()?.domain, "domain")?),
            Route::MigStatus => Self::MigStatus,
            Route::Remediations => Self::Remediations,
            Route::MigApply => {
                let asked: schema::MigRequest = body(request)?;
                if asked.layout.is_empty() || asked.layout.len() > 256 {
                    return Err(ApiError::InvalidArgument(
                        "layout: a layout's name, 1 to 256 characters".to_owned(),
                    ));
                }
                Self::MigApply(asked.layout)
            }
        })
    }
}

/// The methods `path` takes, for a 405's `Allow`; `None` for a path the API does not serve.
pub fn allowed_methods(path: &str) -> Option<&'static str> {
    let path = path.trim_end_matches('/');
    match path {
        "/v1/status" | "/v1/inventory" | "/v1/conditions" | "/v1/remediations" => Some("GET"),
        "/v1/holds" | "/v1/mig" => Some("GET, POST"),
        p if is_known_path(p) && p.starts_with("/v1/holds/") => Some("DELETE"),
        p if is_known_path(p) => Some("POST"),
        _ => None,
    }
}

/// Answers one request as the HTTP layer sends it: [`handle`]'s answer, a 405 with `Allow`.
pub async fn reply(node: &Node, request: &Request) -> crate::node::http::Reply {
    let (status, body) = handle(node, request).await;
    let allow = if status == 405 {
        allowed_methods(&request.path)
    } else {
        None
    };
    crate::node::http::Reply::json(status, body).with_allow(allow)
}

/// Answers one request.
pub(crate) async fn handle(node: &Node, request: &Request) -> Answer {
    match ApiRequest::parse(request) {
        Ok(asked) => answer(node, asked).await.unwrap_or_else(|e| e.answer()),
        Err(e) => e.answer(),
    }
}

/// Does what a parsed request asks.
///
/// # Errors
/// [`ApiError`]: the node refused or failed the request.
pub async fn answer(node: &Node, asked: ApiRequest) -> Result<Answer, ApiError> {
    Ok(match asked {
        ApiRequest::Status => status(node).await,
        ApiRequest::Inventory => typed(200, &node.inventory().await),
        ApiRequest::Conditions => typed(
            200,
            &schema::ConditionList {
                conditions: described(&node.health().conditions(), &node.config().xid_policy),
            },
        ),
        ApiRequest::Refresh => {
            node.request_collection(Trigger::Refresh);
            typed(202, &schema::RefreshAnswer { requested: true })
        }
        ApiRequest::Diag(asked) => diag(node, asked).await,
        ApiRequest::Reset(gpus) => typed(200, &reset(node, &gpus).await?),
        ApiRequest::ListHolds => typed(200, &list_holds(node).await?),
        ApiRequest::ApplyHold { id, devices } => typed(201, &apply_hold(node, id, &devices).await?),
        ApiRequest::ReleaseHold { id, force } => typed(200, &release_hold(node, id, force).await?),
        ApiRequest::VfioBind(target) => passthrough(node, Step::Bind(target)).await?,
        ApiRequest::VfioRelease(address) => passthrough(node, Step::Release(address)).await?,
        ApiRequest::VmStart(domain) => passthrough(node, Step::Start(domain)).await?,
        ApiRequest::VmRestore(file) => passthrough(node, Step::Restore(file)).await?,
        ApiRequest::VmDestroy(domain) => passthrough(node, Step::Destroy(domain)).await?,
        ApiRequest::MigStatus => typed(
            200,
            &schema::MigStatus {
                config: node.config().mig_config.display().to_string(),
                record: node.layouts().record(),
            },
        ),
        ApiRequest::Remediations => typed(200, &remediations(node)),
        ApiRequest::MigApply(layout) => {
            let record = crate::node::mig_step::apply(node, &layout).await?;
            typed(200, &record)
        }
    })
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
            | "/v1/mig"
            | "/v1/remediations"
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

/// The `/v1/status` document as it is now (the watch sends it too).
pub async fn status_document(node: &Node) -> schema::NodeStatus {
    let inventory = node.inventory().await;
    let conditions = node.health().conditions();
    let gpus = node.gpu_statuses().await;
    let (inventory_age_s, nvidia_smi_error) = node.latest_age_and_error().await;
    // The seed's Hello rule, by the rule diag's `nvml.init` passes on: nvml only when
    // nvidia-smi answered the latest collection (drivers before R410 give no CUDA version).
    let answered = inventory_age_s.is_some()
        && nvidia_smi_answered(
            NvmlState::Collected(&inventory),
            nvidia_smi_error.as_deref(),
        );
    let mut gpus = gpus;
    let recovery = node.recovery().view();
    for g in &mut gpus {
        if let Some(v) = recovery.get(&g.uuid) {
            g.reboot_required = v.reboot_required;
            g.remediation = Some(v.clone());
        }
    }
    let capabilities = if answered {
        vec!["nvml".to_owned()]
    } else {
        Vec::new()
    };
    schema::NodeStatus {
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
        holds: list_holds(node).await.map(|l| l.holds).unwrap_or_default(),
        mig_layout: node.layouts().record(),
    }
}

async fn status(node: &Node) -> Answer {
    typed(200, &status_document(node).await)
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
            devices: h.devices.iter().map(|d| d.to_string()).collect(),
            release_pending_since: h.unassigned_since,
        })
        .collect();
    schema::KubernetesHolds { holds }
}

async fn diag(node: &Node, asked: schema::DiagRequest) -> Answer {
    let inventory = node.collect_shared().await;
    let (error, _) = node.latest_driver_readings().await;
    let no_driver = error
        .as_deref()
        .is_some_and(|e| e.contains("nvidia-smi not found"));
    let nvml = if no_driver {
        NvmlState::Unavailable
    } else {
        NvmlState::Collected(&inventory)
    };
    let links = link_widths(&node.config().host, &inventory);
    // The node's own verdict, the one `/v1/status` gives: its XID overrides, the fabric
    // manager, the samples.
    let verdicts = node.verdicts().await;
    let conditions = node.health().conditions();
    let report = diag_with_verdicts(
        &DiagInput {
            nvml,
            nvml_detail: error.as_deref().filter(|_| !no_driver),
            links: &links,
            verdicts: &verdicts,
            conditions: Ok(&conditions),
        },
        &DiagRequest {
            gpu_uuids: asked.gpus,
            expected_gpu_count: asked.expected_gpus,
        },
    );
    typed(200, &report)
}

/// `gpu.reset` of `gpus` as the API runs it: claimed, reset through the helper, judged.
///
/// # Errors
/// [`ApiError::GpuBusy`] for a busy GPU, and the reset's other refusals.
pub(crate) async fn reset(
    node: &Node,
    gpus: &[GpuUuid],
) -> Result<crate::health::reset::ResetReport, ApiError> {
    // The GPUs are claimed from the busy check until after the collection that follows the
    // reset (the claim drops with this function, also on an error or a dropped request): no
    // hold or Allocate takes one meanwhile, and the device plugins stream it Unhealthy.
    let devices: Vec<DeviceId> = gpus.iter().map(DeviceId::from).collect();
    let _claim = node
        .claim(&devices, crate::device::policy::ClaimKind::Reset)
        .await
        .map_err(|(gpu, busy)| ResetError::Busy {
            uuid: gpu.gpu_uuid().unwrap_or(&gpus[0]).clone(),
            holder: busy.to_string(),
        })?;
    let inventory = node.inventory().await;
    let holds = node.holds_now().await;
    Ok(reset_gpus(
        gpus,
        &inventory,
        &holds,
        node.helper(),
        || node.collect_now(),
        node.health(),
        &node.config().xid_policy,
        || node.verdicts(),
    )
    .await?)
}

/// `GET /v1/remediations`.
fn remediations(node: &Node) -> schema::Remediations {
    let record = node.recovery().record().unwrap_or_default();
    schema::Remediations {
        enabled: node.config().remediate.is_some(),
        boot_id: record.boot_id,
        gpus: node.recovery().view(),
        remediations: record.history,
    }
}

async fn list_holds(node: &Node) -> Result<HoldList, ApiError> {
    node.with_holds(|h| HoldList {
        holds: h.list().map(HoldView::from).collect(),
    })
    .await
    .ok_or(ApiError::HoldsUnavailable)
}

async fn apply_hold(node: &Node, id: HoldId, devices: &[DeviceId]) -> Result<HoldView, ApiError> {
    let topology = node.topology().await;
    let placed = devices
        .iter()
        .map(|d| topology.place(d))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = node.config().cdi_dir.join(id.spec_file_name());
    // 201 only once the hold and its spec are on disk; a spec that cannot be written undoes
    // the hold (it was acknowledged before, and appeared only at some later change).
    let hold = node
        .apply_hold(id, placed, HoldOwner::Operator, &topology)
        .await?;
    Ok(HoldView {
        spec: Some(spec.to_string_lossy().into_owned()),
        ..HoldView::from(&hold)
    })
}

/// `DELETE /v1/holds/ID[?force=1]`. A Kubernetes hold a pod still has (its release is not
/// pending) is refused, naming the pod, unless `force` is given; a prepared DRA claim's hold
/// is always refused, naming the claim, but one that lost its claim's record (rebuilt from a
/// spec that recorded none) is released with `force`.
async fn release_hold(node: &Node, id: HoldId, force: bool) -> Result<HoldView, ApiError> {
    let pods = node.pods_now();
    let released = node
        .with_holds(|holds| match holds.get(&id) {
            // Only the kubelet's NodeUnprepareResources ends a prepared claim's hold: released
            // here, its devices would be handed out while the claim's pods still run.
            Some(hold) if hold.owner() == HoldOwner::Dra => match &hold.claim {
                Some(c) => Err(ApiError::HoldInUse(format!(
                    "hold {id} is DRA claim {}/{} (uid {})'s, prepared by the kubelet; it is released when the kubelet unprepares the claim (delete the pods that use it), never through the API, --force or not",
                    c.namespace, c.name, c.uid
                ))),
                // Rebuilt from a spec that recorded no claim: bcd cannot ask the API server
                // about it, so only the kubelet's unprepare or an operator who checked ends it.
                None if !force => Err(ApiError::HoldInUse(format!(
                    "hold {id} is a DRA claim's whose record was lost (it was rebuilt from its CDI spec, which names only the claim's uid {}); it is released when the kubelet unprepares that claim, or, once you have checked that no pod uses the claim (kubectl get resourceclaims -A -o wide), with bcd hold release --force {id}",
                    id.as_str().strip_prefix("dra-").unwrap_or_default()
                ))),
                None => Ok(holds.release(&id)?),
            },
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
                Err(ApiError::HoldInUse(format!(
                    "hold {id} is {}'s and {who} still has its devices; it is released once no pod has them, or now with bcd hold release --force {id}",
                    hold.owner().words()
                )))
            }
            _ => Ok(holds.release(&id)?),
        })
        .await
        .ok_or(ApiError::HoldsUnavailable)??;
    node.converge_holds().await;
    released
        .map(|hold| HoldView::from(&hold))
        .ok_or(ApiError::UnknownHold(id))
}

fn field<T: std::str::FromStr>(value: Option<String>, name: &str) -> Result<T, ApiError>
where
    T::Err: std::fmt::Display,
{
    let raw =
        value.ok_or_else(|| ApiError::InvalidArgument(format!("the request needs \"{name}\"")))?;
    raw.parse()
        .map_err(|e: T::Err| ApiError::InvalidArgument(e.to_string()))
}

/// A passthrough step, as asked.
enum Step {
    Bind(GpuRef),
    Release(PciAddress),
    Start(DomainName),
    Restore(SaveFile),
    Destroy(DomainName),
}

async fn passthrough(node: &Node, step: Step) -> Result<Answer, ApiError> {
    // For the metrics' `vm` label, once the step has run.
    let domain = match &step {
        Step::Start(d) | Step::Destroy(d) => Some(d.to_string()),
        _ => None,
    };
    let topology = node.topology().await;
    let kind = match step {
        Step::Bind(_) | Step::Release(_) => crate::device::policy::ClaimKind::Vfio,
        _ => crate::device::policy::ClaimKind::VmStart,
    };
    // Each GPU the step will touch is claimed as the runtime asks about it (under the holds
    // lock) and stays claimed until the step is done: no hold, Allocate or other step takes
    // it meanwhile. The claims drop with this function.
    let claims = std::sync::Mutex::new(Vec::new());
    // The policy's busy rule, asked by address (the inventory's) or by UUID.
    let held = |address: &bcd_protocol::PciAddress, uuid: Option<&GpuUuid>| -> Option<String> {
        use crate::device::policy::Busy;
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
            Busy::Held { hold, device } if device == gpu => Some(hold.to_string()),
            Busy::Held { hold, device } => Some(format!("{hold} ({device})")),
            Busy::PendingRelease { hold, device, .. } => Some(format!(
                "{hold} ({device}; its Kubernetes release is pending)"
            )),
            b @ (Busy::Claimed(_) | Busy::Changing) => Some(b.to_string()),
            // Already on vfio-pci: the runtime itself says what is wrong with that.
            Busy::PassedThrough => None,
        }
    };
    let runtime = node.passthrough();
    let report = match &step {
        Step::Bind(target) => runtime.bind(target, &held).await,
        Step::Release(address) => runtime.release(address).await,
        Step::Start(domain) => runtime.start(domain, &held).await,
        Step::Restore(file) => runtime.restore(file, &held).await,
        Step::Destroy(domain) => runtime.destroy(domain).await,
    }?;
    // A restore names its domain only in the helper's answer (the save image's XML).
    node.record_passthrough(&report, report.domain.as_deref().or(domain.as_deref()));
    // The claims go only once the inventory knows where the GPUs are now (on vfio-pci,
    // or back), as a reset's go after the collection that follows it.
    node.collect_now().await;
    Ok(typed(
        200,
        &Summary {
            summary: report.to_string(),
        },
    ))
}

#[cfg(test)]
mod tests;
