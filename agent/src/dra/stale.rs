//! Claims the kubelet never unprepared (it crashed, or the node was drained while bcd was
//! down): a periodic pass asks the API server for each DRA hold's claim and releases the hold
//! (with its spec, as `NodeUnprepareResources` does) once the claim has been gone, replaced
//! or no longer allocated to the pool its hold recorded for a grace. A claim the API server
//! says is still allocated there is never released (a node renamed since, or started with
//! another `--node-name`, keeps its claims); a read that fails changes nothing, and while
//! the API server does not give bcd its own Node the pass releases nothing at all.
//!
//! Each pass also removes the claims' specs whose claim has no hold any more (an operator
//! forced the release of a hold that lost its claim's record).
//!
//! [`decide`] is the pure decision; [`Driver::stale_pass`] and [`run`] wire it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::claims::{ClaimReader, ReadError, ResourceClaim};
use super::prepare::Driver;
use super::DRIVER;
use crate::device::DraClaim;
use crate::source::DeviceSource;

/// How often the pass runs, and the grace a claim must have been stale for: a stale claim is
/// released at the second pass that finds it so, at least this long after the first.
pub const STALE_PASS: Duration = Duration::from_secs(60);

/// Why a held claim is no longer the kubelet's to unprepare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stale {
    /// The API server has no such claim.
    #[error("the API server has no such ResourceClaim any more")]
    Gone,
    /// A claim of another uid has the name now.
    #[error("the ResourceClaim of that name has uid {found} now: it was deleted and made anew")]
    Replaced {
        /// The uid the API server has.
        found: String,
    },
    /// The claim is no longer allocated any device of this driver in the pool its hold
    /// recorded.
    #[error("the ResourceClaim is no longer allocated a device of {DRIVER} in pool {pool}")]
    NotHere {
        /// The pool (or pools, joined by a comma) the hold recorded.
        pool: String,
    },
}

/// What the pass could not find out. `Display` is the sentence of the DRA report's problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The API server does not give the node's own Node: nothing is released.
    #[error("the DRA claims held on this node are not checked for release while the API server does not give the Node {node} ({why}); no hold is released meanwhile")]
    NoNode {
        /// The node's name.
        node: String,
        /// What the server said.
        why: String,
    },
    /// Some claims could not be read, so their holds stay as they are.
    #[error("{count} DRA claim(s) held on this node could not be checked against the API server, so their holds stay until it answers: {first}")]
    Unread {
        /// How many claims could not be read.
        count: usize,
        /// The first read's error.
        first: ReadError,
    },
}

/// A claim found stale at a pass: since when, and why (as last seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    /// When the first pass of this run of stale sightings found it.
    pub since: Instant,
    /// Why, as the latest pass found it.
    pub why: Stale,
}

/// What one pass decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The claims to release now, with why.
    pub release: Vec<(DraClaim, Stale)>,
    /// The claims stale but within their grace (by uid), for the next pass.
    pub seen: BTreeMap<String, Sighting>,
    /// What could not be read.
    pub unread: Option<CheckError>,
}

/// The pools `claim`'s hold recorded (each device's), or `pool` (the node's now) for a
/// record that names none.
fn pools_of<'a>(claim: &'a DraClaim, pool: &'a str) -> Vec<&'a str> {
    let mut pools: Vec<&str> = claim.devices.iter().map(|d| d.pool.as_str()).collect();
    pools.sort_unstable();
    pools.dedup();
    if pools.is_empty() {
        pools.push(pool);
    }
    pools
}

/// How `claim` stands by the API server's `answer`: `Ok(None)` still allocated in the pool
/// its hold recorded (`pool`, the node's now, only for a record that names none),
/// `Ok(Some(why))` stale, `Err` not known. Pure.
pub fn judge(
    claim: &DraClaim,
    answer: &Result<ResourceClaim, ReadError>,
    pool: &str,
) -> Result<Option<Stale>, ReadError> {
    let found = match answer {
        Ok(found) => found,
        Err(ReadError::NotFound { .. }) => return Ok(Some(Stale::Gone)),
        Err(e) => return Err(e.clone()),
    };
    if found.metadata.uid != claim.uid {
        return Ok(Some(Stale::Replaced {
            found: found.metadata.uid.clone(),
        }));
    }
    let pools = pools_of(claim, pool);
    let here = found.status.allocation.as_ref().is_some_and(|a| {
        a.devices
            .results
            .iter()
            .any(|r| r.driver == DRIVER && pools.contains(&r.pool.as_str()))
    });
    Ok((!here).then(|| Stale::NotHere {
        pool: pools.join(","),
    }))
}

/// Which of the held `claims` to release now, given what the API server `answers` (by uid;
/// a claim without an answer counts as unread), what the `last` pass saw, and the time.
/// A stale claim is released when the previous pass saw it stale too and its first sighting
/// is at least `grace` old; a claim still allocated here forgets its sighting; a read that
/// failed keeps the sighting as it was, neither starting nor ending the grace. Pure.
pub fn decide(
    claims: &[DraClaim],
    answers: &BTreeMap<String, Result<ResourceClaim, ReadError>>,
    last: &BTreeMap<String, Sighting>,
    pool: &str,
    now: Instant,
    grace: Duration,
) -> Decision {
    let mut out = Decision::default();
    let mut unread: Vec<ReadError> = Vec::new();
    for claim in claims {
        let answer = answers.get(&claim.uid).cloned().unwrap_or_else(|| {
            Err(ReadError::Failed {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                why: "the pass got no answer".to_owned(),
            })
        });
        match judge(claim, &answer, pool) {
            Ok(None) => {}
            Ok(Some(why)) => match last.get(&claim.uid) {
                Some(seen) if now.saturating_duration_since(seen.since) >= grace => {
                    out.release.push((claim.clone(), why));
                }
                Some(seen) => {
                    out.seen.insert(
                        claim.uid.clone(),
                        Sighting {
                            since: seen.since,
                            why,
                        },
                    );
                }
                None => {
                    out.seen
                        .insert(claim.uid.clone(), Sighting { since: now, why });
                }
            },
            Err(e) => {
                if let Some(seen) = last.get(&claim.uid) {
                    out.seen.insert(claim.uid.clone(), seen.clone());
                }
                unread.push(e);
            }
        }
    }
    let count = unread.len();
    out.unread = unread
        .into_iter()
        .next()
        .map(|first| CheckError::Unread { count, first });
    out
}

impl<S: DeviceSource, R: ClaimReader> Driver<S, R> {
    /// One pass: asks for the node's own Node (without it nothing is released, and the
    /// sightings stay as they were), reads every DRA hold's claim, releases those [`decide`]
    /// says (through [`Driver::unprepare`]), says what could not be read in the report's
    /// problem, and returns what the next pass needs.
    pub async fn stale_pass(
        &self,
        last: &BTreeMap<String, Sighting>,
        now: Instant,
    ) -> BTreeMap<String, Sighting> {
        let node = &self.config().node_name;
        let found = tokio::time::timeout(
            super::prepare::CLAIM_READ_TIMEOUT,
            self.reader().node_exists(node),
        )
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer within {}s",
                super::prepare::CLAIM_READ_TIMEOUT.as_secs()
            ))
        });
        let missing = match found {
            Ok(true) => None,
            Ok(false) => Some(
                "it has no Node of that name: is --node-name the kubelet's node name?".to_owned(),
            ),
            Err(why) => Some(why),
        };
        if let Some(why) = missing {
            let problem = CheckError::NoNode {
                node: node.clone(),
                why,
            };
            self.state().set_stale_problem(Some(problem.to_string()));
            return last.clone();
        }
        let claims: Vec<DraClaim> = self
            .node()
            .holds_now()
            .await
            .into_iter()
            .filter_map(|h| h.claim)
            .collect();
        let mut reads = tokio::task::JoinSet::new();
        for c in &claims {
            let reader = self.reader().clone();
            let (uid, ns, name) = (c.uid.clone(), c.namespace.clone(), c.name.clone());
            reads.spawn(async move {
                (
                    uid,
                    super::prepare::read_claim(reader.as_ref(), &ns, &name).await,
                )
            });
        }
        let mut answers = BTreeMap::new();
        while let Some(done) = reads.join_next().await {
            if let Ok((uid, r)) = done {
                answers.insert(uid, r);
            }
        }
        let grace = self.config().stale_pass;
        let decision = decide(
            &claims,
            &answers,
            last,
            &self.config().node_name,
            now,
            grace,
        );
        let mut problem = decision.unread.as_ref().map(ToString::to_string);
        let mut seen = decision.seen;
        for (claim, why) in decision.release {
            // Read again under the driver's lock, so a claim prepared again since the reads
            // above (allocated here anew) is never released.
            let pool = node.clone();
            let still = |answer: &Result<ResourceClaim, ReadError>| {
                matches!(judge(&claim, answer, &pool), Ok(Some(_)))
            };
            match self.unprepare_if(&claim, still).await {
                None => {}
                Some(Ok(())) => tracing::info!(
                    "released DRA claim {}/{} ({}) the kubelet never unprepared: {why}",
                    claim.namespace,
                    claim.name,
                    claim.uid
                ),
                Some(Err(e)) => {
                    // The hold stays, past its grace, for the next pass; said in the problem.
                    problem.get_or_insert_with(|| {
                        format!(
                            "DRA claim {}/{} ({}) the kubelet never unprepared is not released: {e}",
                            claim.namespace, claim.name, claim.uid
                        )
                    });
                    if let Some(first) = last.get(&claim.uid) {
                        seen.insert(
                            claim.uid.clone(),
                            Sighting {
                                since: first.since,
                                why,
                            },
                        );
                    }
                }
            }
        }
        self.state().set_stale_problem(problem);
        for spec in self.remove_orphan_specs().await {
            tracing::info!(
                "removed the claim spec {}: no hold has its claim any more",
                spec.display()
            );
        }
        seen
    }
}

/// The pass on `driver`, once now and then every [`super::DraConfig::stale_pass`], until the
/// node stops.
pub async fn run<S: DeviceSource, R: ClaimReader>(driver: Arc<Driver<S, R>>) {
    let every = driver.config().stale_pass;
    let mut seen = BTreeMap::new();
    loop {
        seen = driver.stale_pass(&seen, Instant::now()).await;
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::claims::{AllocatedDevices, Allocation, AllocationResult, ClaimMeta};

    const POOL: &str = "node-a";
    const GRACE: Duration = Duration::from_secs(60);

    fn held(uid: &str) -> DraClaim {
        DraClaim {
            uid: uid.into(),
            namespace: "ml".into(),
            name: format!("claim-{uid}"),
            devices: Vec::new(),
            spec: None,
        }
    }

    /// A claim held with its device recorded in `pool`.
    fn held_in(uid: &str, pool: &str) -> DraClaim {
        DraClaim {
            devices: vec![crate::device::PoolDevice {
                pool: pool.into(),
                device: "gpu-0".into(),
                ..crate::device::PoolDevice::default()
            }],
            ..held(uid)
        }
    }

    // What broke: bcd restarted with another --node-name (a renamed host) judged every held
    // claim against the new pool and released them all while their pods ran.
    #[test]
    fn a_claim_is_judged_against_the_pool_its_hold_recorded_not_the_nodes_name_now() {
        let claims = [held_in("u", "node-a")];
        let answers =
            BTreeMap::from([("u".to_owned(), Ok(on_api("u", "claim-u", DRIVER, "node-a")))]);
        let t0 = Instant::now();
        let first = decide(&claims, &answers, &BTreeMap::new(), "node-b", t0, GRACE);
        assert!(first.seen.is_empty(), "{:?}", first.seen);
        let moved =
            BTreeMap::from([("u".to_owned(), Ok(on_api("u", "claim-u", DRIVER, "node-c")))]);
        let first = decide(&claims, &moved, &BTreeMap::new(), "node-b", t0, GRACE);
        assert_eq!(
            first.seen["u"].why,
            Stale::NotHere {
                pool: "node-a".into()
            }
        );
    }

    fn on_api(uid: &str, name: &str, driver: &str, pool: &str) -> ResourceClaim {
        ResourceClaim {
            metadata: ClaimMeta {
                uid: uid.into(),
                name: name.into(),
                namespace: "ml".into(),
            },
            status: crate::dra::claims::ClaimStatus {
                allocation: Some(Allocation {
                    devices: AllocatedDevices {
                        results: vec![AllocationResult {
                            request: "gpu".into(),
                            driver: driver.into(),
                            pool: pool.into(),
                            device: "gpu-0".into(),
                            admin_access: None,
                            ..AllocationResult::default()
                        }],
                        config: Vec::new(),
                    },
                }),
            },
        }
    }

    fn not_found(uid: &str) -> Result<ResourceClaim, ReadError> {
        Err(ReadError::NotFound {
            namespace: "ml".into(),
            name: format!("claim-{uid}"),
        })
    }

    fn failed(uid: &str) -> Result<ResourceClaim, ReadError> {
        Err(ReadError::Failed {
            namespace: "ml".into(),
            name: format!("claim-{uid}"),
            why: "connection refused".into(),
        })
    }

    /// Each case's answer, and its outcome at the first pass and at a second pass a grace later.
    #[test]
    fn each_answer_is_judged_at_the_first_sighting_and_released_only_at_the_second() {
        let mut unallocated = on_api("u", "claim-u", DRIVER, POOL);
        unallocated.status.allocation = None;
        let cases: Vec<(&str, Result<ResourceClaim, ReadError>, Option<Stale>)> = vec![
            ("a 404", not_found("u"), Some(Stale::Gone)),
            (
                "a uid that differs",
                Ok(on_api("u-new", "claim-u", DRIVER, POOL)),
                Some(Stale::Replaced {
                    found: "u-new".into(),
                }),
            ),
            (
                "another node's pool",
                Ok(on_api("u", "claim-u", DRIVER, "node-b")),
                Some(Stale::NotHere { pool: POOL.into() }),
            ),
            (
                "another driver",
                Ok(on_api("u", "claim-u", "gpu.nvidia.com", POOL)),
                Some(Stale::NotHere { pool: POOL.into() }),
            ),
            (
                "no allocation",
                Ok(unallocated),
                Some(Stale::NotHere { pool: POOL.into() }),
            ),
            (
                "still allocated here",
                Ok(on_api("u", "claim-u", DRIVER, POOL)),
                None,
            ),
        ];
        let t0 = Instant::now();
        for (case, answer, stale) in cases {
            let claims = [held("u")];
            let answers = BTreeMap::from([("u".to_owned(), answer)]);
            let first = decide(&claims, &answers, &BTreeMap::new(), POOL, t0, GRACE);
            assert!(
                first.release.is_empty(),
                "{case}: never at the first sighting"
            );
            assert_eq!(first.unread, None, "{case}");
            assert_eq!(
                first.seen.get("u").map(|s| s.why.clone()),
                stale.clone(),
                "{case}"
            );
            let second = decide(&claims, &answers, &first.seen, POOL, t0 + GRACE, GRACE);
            let released: Vec<_> = second
                .release
                .iter()
                .map(|(c, w)| (c.uid.as_str(), w))
                .collect();
            match &stale {
                Some(why) => assert_eq!(released, [("u", why)], "{case}"),
                None => assert!(released.is_empty(), "{case}: never released"),
            }
            assert!(second.seen.is_empty(), "{case}");
        }
    }

    #[test]
    fn a_second_sighting_within_the_grace_waits_and_keeps_the_first_sightings_time() {
        let t0 = Instant::now();
        let claims = [held("u")];
        let answers = BTreeMap::from([("u".to_owned(), not_found("u"))]);
        let first = decide(&claims, &answers, &BTreeMap::new(), POOL, t0, GRACE);
        let early = decide(&claims, &answers, &first.seen, POOL, t0 + GRACE / 2, GRACE);
        assert!(early.release.is_empty());
        assert_eq!(early.seen["u"].since, t0);
        let late = decide(&claims, &answers, &early.seen, POOL, t0 + GRACE, GRACE);
        assert_eq!(late.release.len(), 1);
    }

    #[test]
    fn a_read_error_releases_nothing_keeps_the_grace_as_it_was_and_is_said_once() {
        let t0 = Instant::now();
        let claims = [held("u"), held("v"), held("w")];
        let answers =
            BTreeMap::from([("u".to_owned(), failed("u")), ("v".to_owned(), failed("v"))]);
        let last = BTreeMap::from([(
            "u".to_owned(),
            Sighting {
                since: t0,
                why: Stale::Gone,
            },
        )]);
        let d = decide(&claims, &answers, &last, POOL, t0 + GRACE * 2, GRACE);
        assert!(d.release.is_empty(), "a failed read never releases");
        assert_eq!(d.seen, last, "the sighting neither starts nor ends");
        assert_eq!(
            d.unread.unwrap().to_string(),
            "3 DRA claim(s) held on this node could not be checked against the API server, \
             so their holds stay until it answers: the ResourceClaim ml/claim-u cannot be read \
             from the API server: connection refused"
        );
    }

    #[test]
    fn a_claim_allocated_here_again_forgets_its_sighting() {
        let t0 = Instant::now();
        let claims = [held("u")];
        let gone = BTreeMap::from([("u".to_owned(), not_found("u"))]);
        let back = BTreeMap::from([("u".to_owned(), Ok(on_api("u", "claim-u", DRIVER, POOL)))]);
        let first = decide(&claims, &gone, &BTreeMap::new(), POOL, t0, GRACE);
        let between = decide(&claims, &back, &first.seen, POOL, t0 + GRACE, GRACE);
        assert!(between.release.is_empty() && between.seen.is_empty());
        let again = decide(&claims, &gone, &between.seen, POOL, t0 + GRACE * 2, GRACE);
        assert!(again.release.is_empty(), "the grace starts anew");
    }
}
