//! The driver's kubelet side against the kubelet device plugins' fake [`DeviceSource`] (two
//! healthy GPUs with device minors 0 and 1 in a fake procfs) and a fake [`ClaimReader`]
//! whose ResourceClaims the test sets, spoken to over real Unix sockets with tonic's clients
//! of the same `.proto` files (the Python stand-in kubelet speaks them with another gRPC
//! implementation in the integration tests).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::claims::{
    AllocatedDevices, Allocation, AllocationConfig, AllocationResult, ClaimMeta, ClaimReader,
    ClaimStatus, OpaqueConfig, ReadError, ResourceClaim,
};
use super::prepare::{spec_path, Driver};
use super::proto::health as hpb;
use super::proto::registration as rpb;
use super::proto::{v1, v1beta1};
use super::{plugin, DraConfig, DraState, DRIVER};
use crate::cdi::spec::{parse_spec, Format};
use crate::device::HoldOwner;
use crate::kubelet::fake_source::{unhealthy, FakeSource, GPU0, GPU1};
use crate::source::DeviceSource;

const NODE: &str = "node-a";
const UID: &str = "3f0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5f";

/// ResourceClaims by namespace and name.
#[derive(Debug, Default)]
struct Claims(Mutex<BTreeMap<(String, String), ResourceClaim>>);

impl Claims {
    fn put(&self, claim: ResourceClaim) {
        let key = (
            claim.metadata.namespace.clone(),
            claim.metadata.name.clone(),
        );
        self.0.lock().unwrap().insert(key, claim);
    }
}

impl ClaimReader for Claims {
    async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ReadError> {
        self.0
            .lock()
            .unwrap()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| ReadError::NotFound {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
    }
}

/// A claim `ml/<name>` with `uid`, allocated the devices of `results` (request, device).
fn allocated(uid: &str, name: &str, results: &[(&str, &str)]) -> ResourceClaim {
    ResourceClaim {
        metadata: ClaimMeta {
            uid: uid.into(),
            name: name.into(),
            namespace: "ml".into(),
        },
        status: ClaimStatus {
            allocation: Some(Allocation {
                devices: AllocatedDevices {
                    results: results
                        .iter()
                        .map(|(request, device)| AllocationResult {
                            request: (*request).into(),
                            driver: DRIVER.into(),
                            pool: NODE.into(),
                            device: (*device).into(),
                            admin_access: None,
                            ..AllocationResult::default()
                        })
                        .collect(),
                    config: Vec::new(),
                },
            }),
        },
    }
}

fn claim(uid: &str, name: &str) -> v1::Claim {
    v1::Claim {
        namespace: "ml".into(),
        uid: uid.into(),
        name: name.into(),
    }
}

/// The fake node, its GPUs' minors in a fake procfs, the driver and its folders.
struct Rig {
    source: Arc<FakeSource>,
    claims: Arc<Claims>,
    driver: Arc<Driver<FakeSource, Claims>>,
    state: Arc<DraState>,
    config: DraConfig,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Self {
        Self::with_source(FakeSource::new())
    }

    fn with_source(source: FakeSource) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (minor, (uuid, address)) in [(GPU0, "0000:18:00.0"), (GPU1, "0000:2a:00.0")]
            .into_iter()
            .enumerate()
        {
            let info = dir
                .path()
                .join("host/root/proc/driver/nvidia/gpus")
                .join(address);
            std::fs::create_dir_all(&info).unwrap();
            std::fs::write(
                info.join("information"),
                format!(
                    "GPU UUID: \t {uuid}\nBus Location: \t {address}\nDevice Minor: \t {minor}\n"
                ),
            )
            .unwrap();
        }
        let config = DraConfig {
            kubelet_dir: dir.path().join("kubelet"),
            cdi_runtime_dir: dir.path().join("run-cdi"),
            node_name: NODE.into(),
            host: crate::sys::host::Host::fake(dir.path().join("host")),
            stale_pass: super::stale::STALE_PASS,
        };
        let source = Arc::new(source);
        let claims = Arc::new(Claims::default());
        let state = Arc::new(DraState::default());
        let driver = Arc::new(Driver::new(
            source.clone(),
            claims.clone(),
            config.clone(),
            state.clone(),
        ));
        Self {
            source,
            claims,
            driver,
            state,
            config,
            _dir: dir,
        }
    }

    async fn prepare(&self, claims: Vec<v1::Claim>) -> v1::NodePrepareResourcesResponse {
        use v1::dra_plugin_server::DraPlugin;
        plugin::Service::new(self.driver.clone())
            .node_prepare_resources(tonic::Request::new(v1::NodePrepareResourcesRequest {
                claims,
            }))
            .await
            .unwrap()
            .into_inner()
    }

    async fn unprepare(&self, claims: Vec<v1::Claim>) -> v1::NodeUnprepareResourcesResponse {
        use v1::dra_plugin_server::DraPlugin;
        plugin::Service::new(self.driver.clone())
            .node_unprepare_resources(tonic::Request::new(v1::NodeUnprepareResourcesRequest {
                claims,
            }))
            .await
            .unwrap()
            .into_inner()
    }

    async fn holds(&self) -> Vec<crate::cdi::Hold> {
        self.source.holds_now().await
    }
}

fn error_of(answer: &v1::NodePrepareResourcesResponse, uid: &str) -> String {
    answer.claims[uid].error.clone()
}

#[tokio::test]
async fn a_claim_is_held_through_the_policy_and_gets_its_own_cdi_spec_before_the_answer() {
    let rig = Rig::new();
    rig.claims
        .put(allocated(UID, "trainer", &[("gpu/h100", "gpu-0")]));
    let answer = rig.prepare(vec![claim(UID, "trainer")]).await;
    let one = &answer.claims[UID];
    assert_eq!(one.error, "");
    assert_eq!(one.devices.len(), 1);
    let d = &one.devices[0];
    assert_eq!(
        (d.pool_name.as_str(), d.device_name.as_str()),
        (NODE, "gpu-0")
    );
    assert_eq!(d.request_names, ["gpu"], "the subrequest's base request");
    assert_eq!(
        d.cdi_device_ids,
        [format!("k8s.gpu.bcd.dev/claim={UID}-gpu-0")]
    );

    let holds = rig.holds().await;
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].id.as_str(), format!("dra-{UID}"));
    assert_eq!(holds[0].owner(), HoldOwner::Dra);
    assert_eq!(holds[0].devices[0].to_string(), GPU0);
    let record = holds[0].claim.as_ref().unwrap();
    assert_eq!(
        (record.namespace.as_str(), record.name.as_str()),
        ("ml", "trainer")
    );

    let path = spec_path(&rig.config.cdi_runtime_dir, UID);
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("k8s.gpu.bcd.dev-claim_{UID}.json")
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let spec = parse_spec(&std::fs::read(&path).unwrap(), Format::Json).unwrap();
    assert_eq!(spec.kind, "k8s.gpu.bcd.dev/claim");
    // The uid starts with a digit: CDI reads such a device name from 0.5.0 on, and bcd
    // stays at 0.5.0 for podman 4.3.
    assert_eq!(spec.cdi_version, "0.5.0");
    let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, [format!("{UID}-gpu-0")]);
    assert!(
        spec.container_edits
            .env
            .contains(&"NVIDIA_VISIBLE_DEVICES=void".to_owned()),
        "{:?}",
        spec.container_edits
    );
    assert_eq!(rig.state.counters().prepared, 1);
}

#[tokio::test]
async fn preparing_again_gives_the_same_answer_and_writes_a_lost_spec_anew() {
    let rig = Rig::new();
    rig.claims
        .put(allocated(UID, "trainer", &[("gpu", "gpu-1")]));
    let first = rig.prepare(vec![claim(UID, "trainer")]).await;
    // The kubelet restarted, the claim object is gone, and /var/run/cdi was emptied (a
    // reboot): the record answers, and the spec is back.
    rig.claims.0.lock().unwrap().clear();
    let path = spec_path(&rig.config.cdi_runtime_dir, UID);
    std::fs::remove_file(&path).unwrap();
    let again = rig.prepare(vec![claim(UID, "trainer")]).await;
    assert_eq!(first, again);
    assert!(path.exists());
    assert_eq!(rig.holds().await.len(), 1);
}

#[tokio::test]
async fn a_claim_whose_uid_differs_is_refused_per_claim() {
    let rig = Rig::new();
    rig.claims
        .put(allocated("new-uid", "trainer", &[("gpu", "gpu-0")]));
    rig.claims.put(allocated(UID, "other", &[("gpu", "gpu-1")]));
    let answer = rig
        .prepare(vec![claim("old-uid", "trainer"), claim(UID, "other")])
        .await;
    assert_eq!(
        error_of(&answer, "old-uid"),
        "ResourceClaim ml/trainer has uid new-uid, not old-uid as the kubelet asked: the claim was deleted and made anew, and the kubelet asks again for the new one"
    );
    assert_eq!(error_of(&answer, UID), "", "the other claim is prepared");
    assert_eq!(rig.holds().await.len(), 1);
}

#[tokio::test]
async fn claims_bcd_cannot_prepare_are_refused_each_with_its_sentence_changing_nothing() {
    let rig = Rig::new();
    let mut unallocated = allocated("u-1", "a", &[]);
    unallocated.status.allocation = None;
    rig.claims.put(unallocated);
    let mut admin = allocated("u-2", "b", &[("gpu", "gpu-0")]);
    admin.status.allocation.as_mut().unwrap().devices.results[0].admin_access = Some(true);
    rig.claims.put(admin);
    let mut opaque = allocated("u-3", "c", &[("gpu", "gpu-0")]);
    opaque.status.allocation.as_mut().unwrap().devices.config = vec![AllocationConfig {
        source: "FromClass".into(),
        requests: Vec::new(),
        opaque: Some(OpaqueConfig {
            driver: DRIVER.into(),
        }),
    }];
    rig.claims.put(opaque);
    rig.claims.put(allocated("u-4", "d", &[("gpu", "gpu-7")]));
    let answer = rig
        .prepare(vec![
            claim("u-1", "a"),
            claim("u-2", "b"),
            claim("u-3", "c"),
            claim("u-4", "d"),
            claim("u-5", "gone"),
        ])
        .await;
    assert_eq!(answer.claims.len(), 5, "one answer per claim");
    assert!(error_of(&answer, "u-1").contains("is not allocated"));
    assert!(error_of(&answer, "u-2").contains("bcd does not support adminAccess yet"));
    assert!(
        error_of(&answer, "u-3").contains("opaque configuration for gpu.bcd.dev (from FromClass)")
    );
    assert!(error_of(&answer, "u-4")
        .starts_with("node-a/gpu-7 is not a device this node's gpu.bcd.dev driver publishes"));
    assert_eq!(
        error_of(&answer, "u-5"),
        "the API server has no ResourceClaim ml/gone"
    );
    assert!(rig.holds().await.is_empty());
    assert!(
        !rig.config.cdi_runtime_dir.exists()
            || std::fs::read_dir(&rig.config.cdi_runtime_dir)
                .unwrap()
                .next()
                .is_none()
    );
    assert_eq!(rig.state.counters().refused, 5);
}

// A uid that cannot name a hold (upper case, a path, too long) is refused for its claim
// alone, before the API server is asked.
#[tokio::test]
async fn a_uid_that_cannot_name_a_hold_is_refused_per_claim() {
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "ok", &[("gpu", "gpu-0")]));
    let long = "a".repeat(60);
    let answer = rig
        .prepare(vec![
            claim("Upper-Case", "x"),
            claim("../etc", "y"),
            claim(&long, "z"),
            claim(UID, "ok"),
        ])
        .await;
    for bad in ["Upper-Case", "../etc", long.as_str()] {
        assert!(
            error_of(&answer, bad).contains("which is not a Kubernetes uid"),
            "{bad}: {}",
            error_of(&answer, bad)
        );
    }
    assert_eq!(error_of(&answer, UID), "");
}

// A ResourceClaim read that never answers is refused for its claim within the read's bound
// (the kubelet's call has 45 s in all).
#[tokio::test(start_paused = true)]
async fn a_claim_read_that_never_answers_is_refused_within_its_bound() {
    #[derive(Debug)]
    struct Silent;
    impl ClaimReader for Silent {
        async fn get(&self, _: &str, _: &str) -> Result<ResourceClaim, ReadError> {
            std::future::pending().await
        }
    }
    let rig = Rig::new();
    let driver = Driver::new(
        rig.source.clone(),
        Arc::new(Silent),
        rig.config.clone(),
        rig.state.clone(),
    );
    let answer = driver
        .prepare(vec![super::prepare::ClaimRef {
            namespace: "ml".into(),
            uid: UID.into(),
            name: "slow".into(),
        }])
        .await;
    let why = answer[0].1.as_ref().unwrap_err().to_string();
    assert_eq!(
        why,
        "the ResourceClaim ml/slow cannot be read from the API server: no answer within 10s"
    );
}

#[tokio::test]
async fn a_device_held_elsewhere_unhealthy_or_under_a_reset_is_refused_changing_nothing() {
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.claims.put(allocated("u-b", "b", &[("gpu", "gpu-0")]));
    assert_eq!(error_of(&rig.prepare(vec![claim(UID, "a")]).await, UID), "");
    // Another claim allocated the same GPU (the scheduler and the device plugins may race).
    let answer = rig.prepare(vec![claim("u-b", "b")]).await;
    assert!(
        error_of(&answer, "u-b").contains(&format!("already held by hold dra-{UID}")),
        "{}",
        error_of(&answer, "u-b")
    );
    rig.source.judge(GPU1, unhealthy());
    rig.claims.put(allocated("u-c", "c", &[("gpu", "gpu-1")]));
    let answer = rig.prepare(vec![claim("u-c", "c")]).await;
    assert!(
        error_of(&answer, "u-c").starts_with(&format!(
            "node-a/gpu-1 ({GPU1}) is on GPU {GPU1}, which takes no work now: XID 79"
        )),
        "{}",
        error_of(&answer, "u-c")
    );
    rig.source
        .judge(GPU1, crate::kubelet::fake_source::healthy());
    rig.source
        .claimed
        .lock()
        .unwrap()
        .push(GPU1.parse().unwrap());
    let answer = rig.prepare(vec![claim("u-c", "c")]).await;
    assert!(
        error_of(&answer, "u-c").contains("a reset"),
        "{}",
        error_of(&answer, "u-c")
    );
    assert_eq!(rig.holds().await.len(), 1, "only the first claim's");
}

#[tokio::test]
async fn unprepare_releases_the_hold_and_removes_the_spec_and_an_unknown_claim_succeeds() {
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.prepare(vec![claim(UID, "a")]).await;
    let path = spec_path(&rig.config.cdi_runtime_dir, UID);
    assert!(path.exists());
    // The claim object is gone by now: bcd's own record is enough.
    rig.claims.0.lock().unwrap().clear();
    let answer = rig
        .unprepare(vec![claim(UID, "a"), claim("never-seen", "x")])
        .await;
    assert_eq!(answer.claims[UID].error, "");
    assert_eq!(answer.claims["never-seen"].error, "");
    assert!(rig.holds().await.is_empty());
    assert!(!path.exists());
    let twice = rig.unprepare(vec![claim(UID, "a")]).await;
    assert_eq!(twice.claims[UID].error, "", "unprepare is idempotent");
}

#[tokio::test]
async fn v1beta1_answers_as_v1_does() {
    use v1beta1::dra_plugin_server::DraPlugin;
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-1")]));
    let answer = plugin::Service::new(rig.driver.clone())
        .node_prepare_resources(tonic::Request::new(v1beta1::NodePrepareResourcesRequest {
            claims: vec![v1beta1::Claim {
                namespace: "ml".into(),
                uid: UID.into(),
                name: "a".into(),
            }],
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.claims[UID].devices[0].cdi_device_ids,
        [format!("k8s.gpu.bcd.dev/claim={UID}-gpu-1")]
    );
}

async fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    for _ in 0..200 {
        if ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what} did not happen within 5 s");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn registration_follows_the_dra_socket_says_what_the_kubelet_needs_and_comes_back() {
    let rig = Rig::new();
    let task = tokio::spawn(plugin::run(rig.driver.clone(), rig.state.clone()));
    let reg = rig.config.registration_socket();
    wait_for("the registration socket", || reg.exists()).await;
    // Creating the registration socket is the registration: the DRA socket listens by then.
    let dra = rig.config.dra_socket();
    assert!(dra.exists());
    assert_eq!((mode(&reg), mode(&dra)), (0o600, 0o600));

    let channel = crate::kubelet::grpc::dial(&reg).await.unwrap();
    let mut client = rpb::registration_client::RegistrationClient::new(channel);
    let info = client
        .get_info(rpb::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, "gpu.bcd.dev");
    assert_eq!(Path::new(&info.endpoint), dra.as_path());
    assert!(Path::new(&info.endpoint).is_absolute());
    assert_eq!(
        info.supported_versions,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1alpha1.DRAResourceHealth"
        ]
    );
    client
        .notify_registration_status(rpb::RegistrationStatus {
            plugin_registered: false,
            error: "version not supported".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        crate::source::Report::problem(rig.state.as_ref()).as_deref(),
        Some("the kubelet did not register the DRA driver gpu.bcd.dev: version not supported")
    );

    // The DRA socket serves the plugin API on the wire.
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    let channel = crate::kubelet::grpc::dial(&dra).await.unwrap();
    let mut dra_client = v1::dra_plugin_client::DraPluginClient::new(channel);
    let answer = dra_client
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: vec![claim(UID, "a")],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.claims[UID].error, "");

    // The registration socket removed (its folder too): made anew, the DRA socket kept.
    let dra_inode = crate::plugin_socket::identity(&dra);
    std::fs::remove_dir_all(rig.config.registry_dir()).unwrap();
    wait_for("the registration socket again", || reg.exists()).await;
    assert_eq!(crate::plugin_socket::identity(&dra), dra_inode);
    // The DRA socket removed: both anew.
    let reg_inode = crate::plugin_socket::identity(&reg);
    std::fs::remove_file(&dra).unwrap();
    wait_for("both sockets anew", || {
        dra.exists() && reg.exists() && crate::plugin_socket::identity(&reg) != reg_inode
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn the_health_stream_sends_every_device_and_turns_unhealthy_with_the_verdicts_reason() {
    let rig = Rig::new();
    let task = tokio::spawn(plugin::run(rig.driver.clone(), rig.state.clone()));
    let dra = rig.config.dra_socket();
    wait_for("the DRA socket", || {
        rig.config.registration_socket().exists()
    })
    .await;
    let channel = crate::kubelet::grpc::dial(&dra).await.unwrap();
    let mut client = hpb::dra_resource_health_client::DraResourceHealthClient::new(channel);
    let mut stream = client
        .node_watch_resources(hpb::NodeWatchResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let seen: Vec<(String, i32)> = first
        .devices
        .iter()
        .map(|d| (d.device.as_ref().unwrap().device_name.clone(), d.health))
        .collect();
    let healthy = hpb::HealthStatus::Healthy as i32;
    assert_eq!(seen, [("gpu-0".into(), healthy), ("gpu-1".into(), healthy)]);
    assert_eq!(first.devices[0].device.as_ref().unwrap().pool_name, NODE);
    assert_eq!(first.devices[0].health_check_timeout_seconds, 60);
    assert!(first.devices[0].last_updated_time > 1_700_000_000);

    rig.source.judge(GPU1, unhealthy());
    rig.source.touch();
    let next = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let gpu1 = &next.devices[1];
    assert_eq!(gpu1.health, hpb::HealthStatus::Unhealthy as i32);
    assert_eq!(
        gpu1.message,
        "XID 79: the GPU fell off the bus (reset the GPU)"
    );
    assert_eq!(next.devices[0].health, healthy);
    task.abort();
}

#[tokio::test]
async fn a_claim_deleted_without_unprepare_is_released_after_the_grace() {
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.claims.put(allocated("u-b", "b", &[("gpu", "gpu-1")]));
    rig.prepare(vec![claim(UID, "a"), claim("u-b", "b")]).await;
    let path = spec_path(&rig.config.cdi_runtime_dir, UID);
    assert!(path.exists());
    // The kubelet never unprepares `a`; its claim is deleted on the API server.
    rig.claims
        .0
        .lock()
        .unwrap()
        .remove(&("ml".to_owned(), "a".to_owned()));
    let t0 = std::time::Instant::now();
    let seen = rig.driver.stale_pass(&BTreeMap::new(), t0).await;
    assert_eq!(rig.holds().await.len(), 2, "not at the first sighting");
    assert!(path.exists());
    let seen = rig
        .driver
        .stale_pass(&seen, t0 + rig.config.stale_pass)
        .await;
    assert!(seen.is_empty());
    let holds = rig.holds().await;
    assert_eq!(holds.len(), 1, "the claim still allocated here stays");
    assert_eq!(holds[0].claim.as_ref().unwrap().uid, "u-b");
    assert!(!path.exists(), "its spec goes as unprepare removes it");
    assert!(spec_path(&rig.config.cdi_runtime_dir, "u-b").exists());
    assert_eq!(rig.state.counters().unprepared, 1);
    use crate::source::Report;
    assert_eq!(rig.state.problem(), None);
}

#[tokio::test]
async fn a_claim_the_api_server_cannot_be_asked_about_keeps_its_hold_and_is_said_in_the_report() {
    #[derive(Debug)]
    struct Away;
    impl ClaimReader for Away {
        async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ReadError> {
            Err(ReadError::Failed {
                namespace: namespace.into(),
                name: name.into(),
                why: "connection refused".into(),
            })
        }
    }
    use crate::source::Report;
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.prepare(vec![claim(UID, "a")]).await;
    let away = Driver::new(
        rig.source.clone(),
        Arc::new(Away),
        rig.config.clone(),
        rig.state.clone(),
    );
    let t0 = std::time::Instant::now();
    let mut seen = BTreeMap::new();
    for pass in 0..3 {
        seen = away
            .stale_pass(&seen, t0 + rig.config.stale_pass * pass)
            .await;
    }
    assert_eq!(rig.holds().await.len(), 1);
    assert!(spec_path(&rig.config.cdi_runtime_dir, UID).exists());
    assert_eq!(
        rig.state.problem().as_deref(),
        Some(
            "1 DRA claim(s) held on this node could not be checked against the API server, so \
             their holds stay until it answers: the ResourceClaim ml/a cannot be read from the \
             API server: connection refused"
        )
    );
    // The API server answers again: the problem goes.
    rig.driver
        .stale_pass(&seen, t0 + rig.config.stale_pass * 3)
        .await;
    assert_eq!(rig.state.problem(), None);
    assert_eq!(rig.holds().await.len(), 1, "still allocated here");
}

#[tokio::test]
async fn the_stale_pass_runs_at_start_and_every_configured_interval() {
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.prepare(vec![claim(UID, "a")]).await;
    rig.claims.0.lock().unwrap().clear();
    let config = DraConfig {
        stale_pass: Duration::from_millis(50),
        ..rig.config.clone()
    };
    let driver = Arc::new(Driver::new(
        rig.source.clone(),
        rig.claims.clone(),
        config,
        rig.state.clone(),
    ));
    let task = tokio::spawn(super::stale::run(driver));
    let mut released = false;
    for _ in 0..200 {
        if rig.holds().await.is_empty() {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    task.abort();
    assert!(
        released,
        "the hold of the deleted claim was not released within 5 s"
    );
    assert!(!spec_path(&rig.config.cdi_runtime_dir, UID).exists());
}

/// A claim `ml/<name>` with `uid`, allocated one share of `gpu-0-shared` per share id, each
/// consuming `slots`.
fn shared_claim(uid: &str, name: &str, shares: &[&str], slots: Option<&str>) -> ResourceClaim {
    let mut claim = allocated(uid, name, &[]);
    let results = &mut claim.status.allocation.as_mut().unwrap().devices.results;
    for (i, share) in shares.iter().enumerate() {
        results.push(AllocationResult {
            request: format!("slot{i}"),
            driver: DRIVER.into(),
            pool: NODE.into(),
            device: "gpu-0-shared".into(),
            share_id: Some((*share).into()),
            consumed_capacity: slots
                .map(|s| [("slots".to_owned(), s.to_owned())].into_iter().collect())
                .unwrap_or_default(),
            ..AllocationResult::default()
        });
    }
    claim
}

// With consumable capacity the scheduler allocates shares of one device; bcd gives each
// share a free slot of the GPU through the policy, answers its shareID, and refuses what it
// cannot give, changing nothing.
#[tokio::test]
async fn each_share_of_a_shared_gpu_gets_its_own_slot_and_its_own_cdi_device() {
    let rig = Rig::with_source(FakeSource::with_slots(2));
    let (a, b, c) = (
        "0a0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5a",
        "0b0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5b",
        "0c0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5c",
    );
    rig.claims
        .put(shared_claim(a, "a", &["share-a"], Some("1")));
    rig.claims.put(shared_claim(b, "b", &["share-b"], None));
    let answer = rig.prepare(vec![claim(a, "a"), claim(b, "b")]).await;
    for (uid, slot, share) in [(a, 0, "share-a"), (b, 1, "share-b")] {
        let one = &answer.claims[uid];
        assert_eq!(one.error, "", "{uid}");
        let d = &one.devices[0];
        assert_eq!(d.device_name, "gpu-0-shared");
        assert_eq!(d.share_id.as_deref(), Some(share));
        assert_eq!(
            d.cdi_device_ids,
            [format!("k8s.gpu.bcd.dev/claim={uid}-gpu-0-shared-{slot}")]
        );
        let spec = std::fs::read_to_string(spec_path(&rig.config.cdi_runtime_dir, uid)).unwrap();
        let spec = parse_spec(spec.as_bytes(), Format::Json).unwrap();
        assert_eq!(spec.devices[0].name, format!("{uid}-gpu-0-shared-{slot}"));
    }
    let holds = rig.holds().await;
    let slots: Vec<String> = holds
        .iter()
        .flat_map(|h| h.devices.iter().map(ToString::to_string))
        .collect();
    assert_eq!(slots, [format!("{GPU0}::0"), format!("{GPU0}::1")]);
    // The same answer again (the kubelet's restart): the same slot.
    let again = rig.prepare(vec![claim(b, "b")]).await;
    assert_eq!(again.claims[b], answer.claims[b]);
    // A third share: no slot is free.
    rig.claims.put(shared_claim(c, "c", &["share-c"], None));
    let refused = rig.prepare(vec![claim(c, "c")]).await;
    assert!(
        error_of(&refused, c).contains("every slot of it is held"),
        "{}",
        error_of(&refused, c)
    );
    // A share of two slots: refused, one slot a share.
    rig.unprepare(vec![claim(a, "a")]).await;
    rig.claims
        .put(shared_claim(c, "c", &["share-c"], Some("2")));
    let refused = rig.prepare(vec![claim(c, "c")]).await;
    assert!(
        error_of(&refused, c).contains("exactly one slot"),
        "{}",
        error_of(&refused, c)
    );
    assert_eq!(rig.holds().await.len(), 1, "a refusal changes nothing");
    // Two shares in one claim: two slots, two CDI devices.
    rig.claims.put(shared_claim(c, "c", &["s1", "s2"], None));
    rig.unprepare(vec![claim(b, "b")]).await;
    let two = rig.prepare(vec![claim(c, "c")]).await;
    let ids: Vec<String> = two.claims[c]
        .devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();
    assert_eq!(
        ids,
        [
            format!("k8s.gpu.bcd.dev/claim={c}-gpu-0-shared-0"),
            format!("k8s.gpu.bcd.dev/claim={c}-gpu-0-shared-1")
        ]
    );
}

// What the kubelet said of the registration and which newer slice fields are in use are in
// the metrics, not only a refusal in status.
#[test]
fn the_registration_and_the_slices_features_are_in_the_metrics() {
    use crate::source::Report;
    let state = DraState::default();
    let text = state.metrics_text();
    assert!(text.contains("bcd_dra_registered 0\n"), "{text}");
    assert!(
        text.contains("bcd_dra_slice_feature{feature=\"taints\"} 0\n"),
        "{text}"
    );
    state.registered(Ok(()));
    state.set_features(super::devices::Features {
        taints: true,
        shares: false,
    });
    let text = state.metrics_text();
    assert!(text.contains("bcd_dra_registered 1\n"), "{text}");
    assert!(
        text.contains("bcd_dra_slice_feature{feature=\"taints\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("bcd_dra_slice_feature{feature=\"shares\"} 0\n"),
        "{text}"
    );
    assert_eq!(state.problem(), None);
}

// What broke: bcd restarted with another --node-name (a renamed host) released every prepared
// claim a minute later, judging them against the new pool, while their pods ran; and the pass
// released claims while the API server did not give bcd its own Node.
#[tokio::test]
async fn a_renamed_node_releases_no_claim_and_nothing_is_released_without_the_node() {
    #[derive(Debug)]
    struct NoNode(Arc<Claims>);
    impl ClaimReader for NoNode {
        async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ReadError> {
            self.0.get(namespace, name).await
        }
        async fn node_exists(&self, _: &str) -> Result<bool, String> {
            Ok(false)
        }
    }
    use crate::source::Report;
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.prepare(vec![claim(UID, "a")]).await;
    let renamed = Driver::new(
        rig.source.clone(),
        rig.claims.clone(),
        DraConfig {
            node_name: "node-b".into(),
            ..rig.config.clone()
        },
        rig.state.clone(),
    );
    let t0 = std::time::Instant::now();
    let mut seen = BTreeMap::new();
    for pass in 0..3 {
        seen = renamed
            .stale_pass(&seen, t0 + rig.config.stale_pass * pass)
            .await;
    }
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(rig.holds().await.len(), 1, "still allocated in pool node-a");
    // The claim is deleted, but the API server has no Node of bcd's name: nothing goes.
    rig.claims.0.lock().unwrap().clear();
    let blind = Driver::new(
        rig.source.clone(),
        Arc::new(NoNode(rig.claims.clone())),
        rig.config.clone(),
        rig.state.clone(),
    );
    for pass in 0..3 {
        seen = blind
            .stale_pass(&seen, t0 + rig.config.stale_pass * pass)
            .await;
    }
    assert_eq!(rig.holds().await.len(), 1);
    assert!(spec_path(&rig.config.cdi_runtime_dir, UID).exists());
    let problem = rig.state.problem().unwrap();
    assert!(
        problem.contains("while the API server does not give the Node node-a")
            && problem.contains("no hold is released meanwhile"),
        "{problem}"
    );
}

// What broke: a claim of 32 results with 1 MiB request names made a 33.6 MB holds.json and a
// 33.5 MB answer the kubelet refused for ever. Names and the number of devices are bounded
// as Kubernetes bounds them, and an oversized claim is refused alone, keeping nothing.
#[tokio::test]
async fn an_oversized_claim_is_refused_alone_keeping_nothing() {
    let rig = Rig::new();
    let huge = "r".repeat(1 << 20);
    let mut big = allocated(UID, "big", &[("gpu", "gpu-0")]);
    big.status.allocation.as_mut().unwrap().devices.results[0].request = huge;
    rig.claims.put(big);
    let many: Vec<(String, String)> = (0..33)
        .map(|i| (format!("r{i}"), "gpu-1".to_owned()))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(r, d)| (r.as_str(), d.as_str())).collect();
    rig.claims.put(allocated("u-many", "many", &many));
    rig.claims.put(allocated("u-ok", "ok", &[("gpu", "gpu-1")]));
    let answer = rig
        .prepare(vec![
            claim(UID, "big"),
            claim("u-many", "many"),
            claim("u-ok", "ok"),
        ])
        .await;
    let big = error_of(&answer, UID);
    assert!(
        big.contains("its request name is 1048576 bytes long (at most 127)") && big.len() < 400,
        "{}",
        &big[..big.len().min(400)]
    );
    assert!(
        error_of(&answer, "u-many").contains("allocated 33 devices of gpu.bcd.dev (at most 32)"),
        "{}",
        error_of(&answer, "u-many")
    );
    assert_eq!(error_of(&answer, "u-ok"), "", "the other claim is prepared");
    let holds = rig.holds().await;
    assert_eq!(holds.len(), 1);
    assert!(!spec_path(&rig.config.cdi_runtime_dir, UID).exists());
}

// What broke: a share of gpu-0-shared and the slot device gpu-0-slot-0 in one claim became
// one device carrying both requests when the share came first. They are two devices, on two
// slots, in either order.
#[tokio::test]
async fn a_share_and_a_slot_device_of_one_gpu_in_one_claim_are_two_devices() {
    for share_first in [true, false] {
        let rig = Rig::with_source(FakeSource::with_slots(2));
        let mut c = shared_claim(UID, "mixed", &["share-a"], None);
        let results = &mut c.status.allocation.as_mut().unwrap().devices.results;
        let slot = AllocationResult {
            request: "plain".into(),
            driver: DRIVER.into(),
            pool: NODE.into(),
            device: "gpu-0-slot-0".into(),
            ..AllocationResult::default()
        };
        if share_first {
            results.push(slot);
        } else {
            results.insert(0, slot);
        }
        rig.claims.put(c);
        let answer = rig.prepare(vec![claim(UID, "mixed")]).await;
        let one = &answer.claims[UID];
        assert_eq!(one.error, "", "share first: {share_first}");
        let mut got: Vec<(String, Vec<String>)> = one
            .devices
            .iter()
            .map(|d| (d.device_name.clone(), d.cdi_device_ids.clone()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                (
                    "gpu-0-shared".to_owned(),
                    vec![format!("k8s.gpu.bcd.dev/claim={UID}-gpu-0-shared-1")]
                ),
                (
                    "gpu-0-slot-0".to_owned(),
                    vec![format!("k8s.gpu.bcd.dev/claim={UID}-gpu-0-slot-0")]
                ),
            ],
            "share first: {share_first}"
        );
        let holds = rig.holds().await;
        assert_eq!(holds[0].devices.len(), 2, "share first: {share_first}");
    }
}

// What broke: unpreparing a claim bcd did not know joined the kubelet's uid into a path
// unchecked (`../` included). It is checked as prepare checks it.
#[tokio::test]
async fn unprepare_of_an_unknown_claim_checks_its_uid_before_any_path() {
    let rig = Rig::new();
    let outside = rig
        .config
        .cdi_runtime_dir
        .parent()
        .unwrap()
        .join("victim.json");
    std::fs::write(&outside, "{}").unwrap();
    // The folder the uid's path would walk through is there, so `../` resolves.
    std::fs::create_dir_all(rig.config.cdi_runtime_dir.join("k8s.gpu.bcd.dev-claim_x")).unwrap();
    let answer = rig.unprepare(vec![claim("x/../../victim", "a")]).await;
    let error = &answer.claims["x/../../victim"].error;
    assert!(error.contains("which is not a Kubernetes uid"), "{error}");
    assert!(outside.exists());
}

// What broke: when `nvidia-smi -q -x` failed, a prepared MIG device vanished from the
// inventory, so from the slice and the health stream, while its claim's pod ran on it. A
// claimed device is kept in both, and the health stream reports it UNHEALTHY.
#[tokio::test]
async fn a_claimed_mig_device_the_inventory_lost_stays_in_the_slice_and_is_unhealthy() {
    use crate::inventory::document::{Mig, MigDevice};
    const MIG: &str = "MIG-65db3e42-f991-a575-c20e-8350d31e437c";
    let rig = Rig::new();
    let mig_of = |on: bool| {
        move |inventory: &mut crate::inventory::document::Inventory| {
            inventory.gpu.gpus[1].mig = on.then(|| Mig {
                mode: Some(true),
                devices: vec![MigDevice {
                    uuid: Some(MIG.parse().unwrap()),
                    profile: Some("3g.40gb".into()),
                    gi: Some(2),
                    ci: Some(0),
                    memory_total_mib: Some(40192),
                }],
                ..Mig::default()
            });
        }
    };
    rig.source.reshape(mig_of(true));
    rig.claims
        .put(allocated(UID, "a", &[("gpu", "gpu-1-mig-2-0")]));
    let answer = rig.prepare(vec![claim(UID, "a")]).await;
    assert_eq!(error_of(&answer, UID), "");
    // The next collection's -q -x fails: the GPU shows without its MIG section.
    rig.source.reshape(mig_of(false));
    let health = plugin::health_now(
        rig.source.as_ref(),
        &rig.config,
        super::devices::Features::default(),
    )
    .await;
    let mig = health
        .iter()
        .find(|h| h.device.as_ref().unwrap().device_name == "gpu-1-mig-2-0")
        .expect("the claimed device is still in the health stream");
    assert_eq!(mig.health, hpb::HealthStatus::Unhealthy as i32);
    assert!(
        mig.message.contains("does not show this device now"),
        "{}",
        mig.message
    );
    for taints in [false, true] {
        let features = super::devices::Features {
            taints,
            shares: false,
        };
        let slices =
            super::controller::desired_now(rig.source.as_ref(), &rig.config, features).await;
        let kept: Vec<_> = slices
            .iter()
            .flatten()
            .filter(|d| d.name == "gpu-1-mig-2-0")
            .collect();
        assert_eq!(kept.len(), 1, "taints: {taints}: {slices:?}");
    }
    // Another claim of it is refused: it is not a device the node shows.
    rig.claims
        .put(allocated("u-b", "b", &[("gpu", "gpu-1-mig-2-0")]));
    let refused = rig.prepare(vec![claim("u-b", "b")]).await;
    assert!(
        error_of(&refused, "u-b").contains("is not a device"),
        "{}",
        error_of(&refused, "u-b")
    );
}

// What broke (a review): the stale pass judged a claim from reads made without the driver's
// lock; a claim allocated here again and prepared in between was released under its pod. The
// claim is read again under the lock before its release.
#[tokio::test]
async fn a_claim_allocated_here_again_before_its_release_keeps_its_hold() {
    #[derive(Debug)]
    struct Flipping(Arc<Claims>, std::sync::atomic::AtomicUsize);
    impl ClaimReader for Flipping {
        async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ReadError> {
            let n = self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut claim = self.0.get(namespace, name).await?;
            if n < 2 {
                // The first two reads (one a pass) find it deallocated.
                claim.status.allocation = None;
            }
            Ok(claim)
        }
    }
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.prepare(vec![claim(UID, "a")]).await;
    let flipping = Driver::new(
        rig.source.clone(),
        Arc::new(Flipping(rig.claims.clone(), 0.into())),
        rig.config.clone(),
        rig.state.clone(),
    );
    let t0 = std::time::Instant::now();
    let seen = flipping.stale_pass(&BTreeMap::new(), t0).await;
    assert_eq!(seen.len(), 1, "stale at the first pass");
    let seen = flipping.stale_pass(&seen, t0 + rig.config.stale_pass).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(rig.holds().await.len(), 1, "allocated here again: kept");
    assert!(spec_path(&rig.config.cdi_runtime_dir, UID).exists());
}

// What broke (a review): a DRA hold released with --force (it had lost its claim's record) left
// the claim's spec in the CDI runtime folder, from which a restarted container would get a GPU
// nobody holds. The stale pass removes a claim's spec that no hold has.
#[tokio::test]
async fn a_claim_spec_no_hold_has_is_removed_by_the_pass() {
    let rig = Rig::new();
    rig.claims.put(allocated(UID, "a", &[("gpu", "gpu-0")]));
    rig.prepare(vec![claim(UID, "a")]).await;
    let orphan = spec_path(&rig.config.cdi_runtime_dir, "u-gone");
    std::fs::write(&orphan, "{}").unwrap();
    let other = rig.config.cdi_runtime_dir.join("nvidia.yaml");
    std::fs::write(&other, "x").unwrap();
    rig.driver
        .stale_pass(&BTreeMap::new(), std::time::Instant::now())
        .await;
    assert!(!orphan.exists(), "the spec no hold has is gone");
    assert!(
        spec_path(&rig.config.cdi_runtime_dir, UID).exists(),
        "the held claim's stays"
    );
    assert!(other.exists(), "nothing else is touched");
}

// What broke: a GPU only a reboot brings back was tainted with its last XID, which reads as
// "a reset may help"; the taint's value says reboot-required.
#[tokio::test]
async fn a_gpu_that_needs_a_reboot_is_tainted_reboot_required() {
    let rig = Rig::new();
    rig.source.judge(GPU0, unhealthy());
    rig.source
        .reboot
        .lock()
        .unwrap()
        .push(GPU0.parse().unwrap());
    let features = super::devices::Features {
        taints: true,
        shares: false,
    };
    let slices = super::controller::desired_now(rig.source.as_ref(), &rig.config, features).await;
    let values: Vec<String> = slices
        .iter()
        .flatten()
        .flat_map(|d| d.taints.iter())
        .filter(|t| t.key == "gpu.bcd.dev/unhealthy")
        .filter_map(|t| t.value.clone())
        .collect();
    assert!(values.contains(&"reboot-required".to_owned()), "{slices:?}");
}
