//! The node's ResourceSlices (`resource.k8s.io/v1`): the objects bcd publishes for its pool,
//! and what must change to turn the slices that exist into them. Pure: the network code
//! sends what [`plan`] says, and nothing else.
//!
//! One pool named after the node, `spec.nodeName` set, an owner reference to the Node
//! (controller), `generateName: <node>-gpu.bcd.dev-`. At most [`MAX_DEVICES_PER_SLICE`]
//! devices a slice, in name order: a pool with more is split into several slices, and a pool
//! with none still has one, empty, slice (so consumers see the pool is complete and empty).
//!
//! The pool's rules, as the upstream slice controller keeps them (written down here from its
//! documented behaviour): every slice of the pool carries the pool's `generation` and its
//! `resourceSliceCount` (how many slices the pool has); a slice of a lower generation than
//! the highest is obsolete and deleted; an existing slice is matched to a desired one when
//! the pool has one of each, or else when both hold the same device names; the generation
//! stays when no slice is created and at most one changes (a consumer then sees either the
//! old or the new slice, both complete), and rises by one otherwise, rewriting every slice.
//! Updates carry the slice's `resourceVersion`; deletions are conditional on its uid and
//! `resourceVersion`.
//!
//! Taints and shared devices ([`super::devices::Features`]) are written only where the API
//! server keeps them; [`dropped`] tells from the object a write returned whether the server
//! dropped them (a feature gate off), and the controller then stops using them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::devices::{Attribute, Features, Offered, TAINT_EFFECT};
use super::DRIVER;

/// The most devices a slice may hold without taints or shared devices.
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// The most devices a slice may hold where taints or shared devices are used (the API
/// server's limit for a slice with taints; bcd keeps to it whenever it may use either, so a
/// taint coming or going never splits the pool anew).
pub const MAX_DEVICES_PER_SLICE_WITH_TAINTS: usize = 64;
/// The capacity of a shared device: its slots.
pub const SLOTS_CAPACITY: &str = "slots";
/// The API group and version of the objects.
pub const API_VERSION: &str = "resource.k8s.io/v1";

/// A ResourceSlice, as much of it as bcd writes and reads (fields it does not know are
/// ignored when read, and never written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSlice {
    /// `resource.k8s.io/v1`.
    pub api_version: String,
    /// `ResourceSlice`.
    pub kind: String,
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// What the slice offers.
    pub spec: SliceSpec,
}

/// The metadata bcd sets and reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Set by the server on create (from `generateName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The prefix of a new slice's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    /// Set by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Set by the server; an update carries the one it read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// The Node, so the slices go with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// An owner reference (the Node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// `v1`.
    pub api_version: String,
    /// `Node`.
    pub kind: String,
    /// The node's name.
    pub name: String,
    /// The node's uid.
    pub uid: String,
    /// The Node controls the slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
}

/// `spec` of a ResourceSlice, as bcd fills it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceSpec {
    /// `gpu.bcd.dev`.
    pub driver: String,
    /// The pool and its generation.
    pub pool: Pool,
    /// The node the devices are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The devices.
    #[serde(default)]
    pub devices: Vec<Device>,
}

/// `spec.pool`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// The node's name.
    pub name: String,
    /// The pool's generation.
    pub generation: i64,
    /// How many slices the pool has at this generation.
    pub resource_slice_count: i64,
}

/// One device of a slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// A DNS label, unique in the pool.
    pub name: String,
    /// Attributes, unqualified names in the driver's domain.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Capacities.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Capacity>,
    /// Set on a shared device: it may be allocated to several claims at once.
    #[serde(
        default,
        rename = "allowMultipleAllocations",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_multiple_allocations: Option<bool>,
    /// Why it is not offered, where the server keeps taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<DeviceTaint>,
}

/// A device taint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaint {
    /// `gpu.bcd.dev/<why>`.
    pub key: String,
    /// The reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`.
    pub effect: String,
    /// Set by the server on the write that added the taint; bcd sends back what it read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

impl DeviceTaint {
    /// The same taint, whenever it was added.
    fn same(&self, other: &Self) -> bool {
        self.key == other.key && self.value == other.value && self.effect == other.effect
    }
}

/// An attribute: exactly one of its fields is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeValue {
    /// An integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    /// A boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    /// A string (at most 64 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// A semantic version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A capacity: a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// The quantity, in the API server's canonical form (see [`quantity`]).
    pub value: String,
    /// How an allocation of a shared device consumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_policy: Option<RequestPolicy>,
}

/// `requestPolicy` of a capacity: what an allocation that does not say consumes, and what it
/// may ask for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPolicy {
    /// What an allocation consumes when its request does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The amounts a request may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_range: Option<ValidRange>,
}

/// `validRange` of a request policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidRange {
    /// The least.
    pub min: String,
    /// The most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
}

impl Capacity {
    fn plain(value: u64) -> Self {
        Self {
            value: quantity(value),
            request_policy: None,
        }
    }
}

/// `n` as the API server writes a quantity it read as a plain number: the largest power of
/// 1000 that divides it as a suffix (`131072000` → `131072k`), so what bcd writes is what it
/// reads back.
pub fn quantity(n: u64) -> String {
    if n == 0 {
        return "0".to_owned();
    }
    let mut mantissa = n;
    let mut exponent = 0;
    while mantissa.is_multiple_of(1000) && exponent < 6 {
        mantissa /= 1000;
        exponent += 1;
    }
    let suffix = ["", "k", "M", "G", "T", "P", "E"][exponent];
    format!("{mantissa}{suffix}")
}

/// The value of a quantity written as an integer with an optional decimal or binary suffix;
/// `None` for any other form (a fraction, an exponent).
pub fn quantity_value(q: &str) -> Option<u128> {
    let suffixes: [(&str, u128); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (digits, factor) = suffixes
        .iter()
        .find_map(|(s, f)| q.strip_suffix(s).map(|d| (d, *f)))
        .unwrap_or((q, 1));
    if digits.is_empty() || digits.len() > 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u128>().ok()?.checked_mul(factor)
}

fn wire(offered: &Offered) -> Device {
    let device = &offered.device;
    let mut capacity: BTreeMap<String, Capacity> = device
        .capacity
        .iter()
        .map(|(k, v)| (k.clone(), Capacity::plain(*v)))
        .collect();
    if let Some(slots) = device.shares {
        capacity.insert(SLOTS_CAPACITY.to_owned(), one_a_share(slots));
    }
    Device {
        name: device.name.clone(),
        attributes: device
            .attributes
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Attribute::String(s) => AttributeValue {
                        string: Some(s.clone()),
                        ..AttributeValue::default()
                    },
                    Attribute::Version(s) => AttributeValue {
                        version: Some(s.clone()),
                        ..AttributeValue::default()
                    },
                    Attribute::Int(n) => AttributeValue {
                        int: Some(*n),
                        ..AttributeValue::default()
                    },
                };
                (k.clone(), value)
            })
            .collect(),
        capacity,
        allow_multiple_allocations: device.shares.map(|_| true),
        taints: offered
            .taint
            .iter()
            .map(|t| DeviceTaint {
                key: t.key.clone(),
                value: (!t.value.is_empty()).then(|| t.value.clone()),
                effect: TAINT_EFFECT.to_owned(),
                time_added: None,
            })
            .collect(),
    }
}

/// The pool's devices as slices' device lists: in name order, at most
/// [`MAX_DEVICES_PER_SLICE`] each ([`MAX_DEVICES_PER_SLICE_WITH_TAINTS`] where `features` has
/// taints or shares), and one empty list for no device.
pub fn desired(devices: &[Offered], features: Features) -> Vec<Vec<Device>> {
    let mut sorted: Vec<&Offered> = devices.iter().collect();
    sorted.sort_by(|a, b| a.device.name.cmp(&b.device.name));
    let all: Vec<Device> = sorted.into_iter().map(wire).collect();
    if all.is_empty() {
        return vec![Vec::new()];
    }
    let per_slice = if features.taints || features.shares {
        MAX_DEVICES_PER_SLICE_WITH_TAINTS
    } else {
        MAX_DEVICES_PER_SLICE
    };
    all.chunks(per_slice).map(<[Device]>::to_vec).collect()
}

/// A slice that uses every newer field of `features` (a tainted device, a shared one), to be
/// sent as a dry run: what the server returns says what it keeps before any real write.
pub fn probe(node: &NodeRef, features: Features) -> ResourceSlice {
    let device = |name: &str| Device {
        name: name.into(),
        attributes: BTreeMap::new(),
        capacity: BTreeMap::new(),
        allow_multiple_allocations: None,
        taints: Vec::new(),
    };
    let mut devices = Vec::new();
    if features.taints {
        devices.push(Device {
            taints: vec![DeviceTaint {
                key: format!("{DRIVER}/probe"),
                value: Some("probe".into()),
                effect: TAINT_EFFECT.into(),
                time_added: None,
            }],
            ..device("probe-taint")
        });
    }
    if features.shares {
        devices.push(Device {
            capacity: [(SLOTS_CAPACITY.to_owned(), one_a_share(1))].into(),
            allow_multiple_allocations: Some(true),
            ..device("probe-shared")
        });
    }
    ResourceSlice {
        api_version: API_VERSION.into(),
        kind: "ResourceSlice".into(),
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-{DRIVER}-", node.name)),
            owner_references: vec![node.owner()],
            ..ObjectMeta::default()
        },
        spec: node.spec(devices, 1, 1),
    }
}

/// The capacity `slots` of a shared device with `slots` slots, each allocation (each
/// shareID) consuming exactly one: bcd gives it one when it is prepared.
fn one_a_share(slots: u32) -> Capacity {
    let one = || Some("1".to_owned());
    Capacity {
        value: quantity(u64::from(slots)),
        request_policy: Some(RequestPolicy {
            default: one(),
            valid_range: Some(ValidRange {
                min: "1".to_owned(),
                max: one(),
            }),
        }),
    }
}

/// What the server dropped of what a write sent: the features to stop using.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// A device sent with taints came back without.
    pub taints: bool,
    /// A device sent with `allowMultipleAllocations` (or a capacity's request policy) came
    /// back without.
    pub shares: bool,
}

impl Dropped {
    /// Whether nothing was dropped.
    pub fn is_empty(self) -> bool {
        !self.taints && !self.shares
    }
}

/// What `returned` (the object the server answered a create or update with) lacks of `sent`.
pub fn dropped(sent: &ResourceSlice, returned: &ResourceSlice) -> Dropped {
    let mut out = Dropped::default();
    for s in &sent.spec.devices {
        let back = returned.spec.devices.iter().find(|d| d.name == s.name);
        let Some(back) = back else { continue };
        if !s.taints.is_empty() && back.taints.is_empty() {
            out.taints = true;
        }
        let policies = |d: &Device| {
            d.capacity
                .values()
                .filter(|c| c.request_policy.is_some())
                .count()
        };
        if (s.allow_multiple_allocations == Some(true)
            && back.allow_multiple_allocations != Some(true))
            || policies(s) > policies(back)
        {
            out.shares = true;
        }
    }
    out
}

/// The node a pool is on: its name (the pool's too) and its uid (the owner reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// The Node's name.
    pub name: String,
    /// The Node's uid.
    pub uid: String,
}

impl NodeRef {
    fn owner(&self) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
        }
    }

    fn spec(&self, devices: Vec<Device>, generation: i64, count: usize) -> SliceSpec {
        SliceSpec {
            driver: DRIVER.into(),
            pool: Pool {
                name: self.name.clone(),
                generation,
                resource_slice_count: i64::try_from(count).unwrap_or(i64::MAX),
            },
            node_name: Some(self.name.clone()),
            devices,
        }
    }
}

/// A slice to delete, and the preconditions of its deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// Its name.
    pub name: String,
    /// Its uid, as read.
    pub uid: Option<String>,
    /// Its resourceVersion, as read.
    pub resource_version: Option<String>,
}

/// What must change: nothing else is written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// New slices (`generateName` set, no name).
    pub create: Vec<ResourceSlice>,
    /// Replacements, each with the name and resourceVersion of the slice it replaces.
    pub update: Vec<ResourceSlice>,
    /// Slices to delete.
    pub delete: Vec<Deletion>,
}

impl Plan {
    /// Whether nothing needs writing.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }
}

fn device_names(devices: &[Device]) -> BTreeSet<&str> {
    devices.iter().map(|d| d.name.as_str()).collect()
}

/// Two device lists that say the same, reading capacities by value (the server may write a
/// quantity in another form).
fn same_devices(a: &[Device], b: &[Device]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.name == y.name
                && x.attributes == y.attributes
                && x.allow_multiple_allocations == y.allow_multiple_allocations
                && x.taints.len() == y.taints.len()
                && x.taints.iter().zip(&y.taints).all(|(a, b)| a.same(b))
                && x.capacity.len() == y.capacity.len()
                && x.capacity
                    .iter()
                    .zip(&y.capacity)
                    .all(|((kx, vx), (ky, vy))| {
                        kx == ky
                            && same_policy(vx.request_policy.as_ref(), vy.request_policy.as_ref())
                            && (vx.value == vy.value
                                || quantity_value(&vx.value)
                                    .is_some_and(|v| Some(v) == quantity_value(&vy.value)))
                    })
        })
}

fn same_quantity(a: &str, b: &str) -> bool {
    a == b || quantity_value(a).is_some_and(|v| Some(v) == quantity_value(b))
}

fn same_policy(a: Option<&RequestPolicy>, b: Option<&RequestPolicy>) -> bool {
    let same_opt = |x: Option<&String>, y: Option<&String>| match (x, y) {
        (Some(x), Some(y)) => same_quantity(x, y),
        (None, None) => true,
        _ => false,
    };
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            same_opt(a.default.as_ref(), b.default.as_ref())
                && match (&a.valid_range, &b.valid_range) {
                    (None, None) => true,
                    (Some(x), Some(y)) => {
                        same_quantity(&x.min, &y.min) && same_opt(x.max.as_ref(), y.max.as_ref())
                    }
                    _ => false,
                }
        }
        _ => false,
    }
}

/// `want`'s devices with the `timeAdded` of each taint that `existing` already has, so an
/// update does not move when a taint was added.
fn keep_taint_times(existing: &ResourceSlice, want: &mut [Device]) {
    for d in want {
        let Some(old) = existing.spec.devices.iter().find(|o| o.name == d.name) else {
            continue;
        };
        for t in &mut d.taints {
            if let Some(o) = old.taints.iter().find(|o| o.same(t)) {
                t.time_added.clone_from(&o.time_added);
            }
        }
    }
}

fn same_content(existing: &ResourceSlice, want: &SliceSpec, owner: &OwnerReference) -> bool {
    let s = &existing.spec;
    s.driver == want.driver
        && s.pool == want.pool
        && s.node_name == want.node_name
        && same_devices(&s.devices, &want.devices)
        && existing.metadata.owner_references == [owner.clone()]
}

/// What turns `existing` (the slices the API server has for this driver and node) into the
/// slices of `desired` (from [`desired`]) for the pool of `node`. Slices of another driver or
/// pool in `existing` are left alone.
pub fn plan(node: &NodeRef, existing: &[ResourceSlice], desired: Vec<Vec<Device>>) -> Plan {
    let ours: Vec<&ResourceSlice> = existing
        .iter()
        .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == node.name)
        .collect();
    let top = ours
        .iter()
        .map(|s| s.spec.pool.generation)
        .max()
        .unwrap_or(0);
    let mut out = Plan::default();
    let deletion = |s: &ResourceSlice| Deletion {
        name: s.metadata.name.clone().unwrap_or_default(),
        uid: s.metadata.uid.clone(),
        resource_version: s.metadata.resource_version.clone(),
    };
    let (current, obsolete): (Vec<&ResourceSlice>, Vec<&ResourceSlice>) = ours
        .into_iter()
        .partition(|s| s.spec.pool.generation == top);
    out.delete.extend(obsolete.into_iter().map(deletion));

    // Match each desired slice to an existing one.
    let mut matched: Vec<Option<&ResourceSlice>> = vec![None; desired.len()];
    let mut taken = vec![false; current.len()];
    if desired.len() == 1 && current.len() == 1 {
        matched[0] = Some(current[0]);
        taken[0] = true;
    } else {
        for (i, want) in desired.iter().enumerate() {
            let names = device_names(want);
            if let Some(j) = (0..current.len())
                .find(|&j| !taken[j] && device_names(&current[j].spec.devices) == names)
            {
                matched[i] = Some(current[j]);
                taken[j] = true;
            }
        }
    }
    for (j, s) in current.iter().enumerate() {
        if !taken[j] {
            out.delete.push(deletion(s));
        }
    }

    let owner = node.owner();
    let count = desired.len();
    let creates = matched.iter().filter(|m| m.is_none()).count();
    let changed = desired
        .iter()
        .zip(&matched)
        .filter(|(want, m)| {
            m.is_some_and(|s| !same_content(s, &node.spec((*want).clone(), top, count), &owner))
        })
        .count();
    let generation = if creates == 0 && changed <= 1 {
        top
    } else {
        top + 1
    };
    for (want, m) in desired.into_iter().zip(matched) {
        let mut spec = node.spec(want, generation, count);
        if let Some(s) = m {
            keep_taint_times(s, &mut spec.devices);
        }
        match m {
            Some(s) if same_content(s, &spec, &owner) => {}
            Some(s) => out.update.push(ResourceSlice {
                api_version: API_VERSION.into(),
                kind: "ResourceSlice".into(),
                metadata: ObjectMeta {
                    name: s.metadata.name.clone(),
                    uid: s.metadata.uid.clone(),
                    resource_version: s.metadata.resource_version.clone(),
                    owner_references: vec![owner.clone()],
                    generate_name: None,
                },
                spec,
            }),
            None => out.create.push(ResourceSlice {
                api_version: API_VERSION.into(),
                kind: "ResourceSlice".into(),
                metadata: ObjectMeta {
                    generate_name: Some(format!("{}-{DRIVER}-", node.name)),
                    owner_references: vec![owner.clone()],
                    ..ObjectMeta::default()
                },
                spec,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::devices::DraDevice;

    fn node() -> NodeRef {
        NodeRef {
            name: "node-a".into(),
            uid: "9a1b".into(),
        }
    }

    fn want(devices: &[Offered]) -> Vec<Vec<Device>> {
        desired(devices, Features::default())
    }

    fn dev(name: &str, memory: u64) -> Offered {
        Offered {
            device: dev_of(name, memory),
            taint: None,
        }
    }

    fn dev_of(name: &str, memory: u64) -> DraDevice {
        DraDevice {
            name: name.into(),
            id: "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b".parse().unwrap(),
            gpu: "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b".parse().unwrap(),
            attributes: [("type".to_owned(), Attribute::String("gpu".into()))]
                .into_iter()
                .collect(),
            capacity: [("memory".to_owned(), memory)].into_iter().collect(),
            shares: None,
            missing: false,
        }
    }

    /// The slices as the server would hold them after `plan` was carried out: names and
    /// versions given by the server.
    fn applied(before: &[ResourceSlice], plan: &Plan) -> Vec<ResourceSlice> {
        let mut after: Vec<ResourceSlice> = before
            .iter()
            .filter(|s| {
                !plan
                    .delete
                    .iter()
                    .any(|d| Some(&d.name) == s.metadata.name.as_ref())
            })
            .filter(|s| {
                !plan
                    .update
                    .iter()
                    .any(|u| u.metadata.name == s.metadata.name)
            })
            .cloned()
            .collect();
        for u in &plan.update {
            let mut u = u.clone();
            let rv: u64 = u
                .metadata
                .resource_version
                .as_deref()
                .unwrap()
                .parse()
                .unwrap();
            u.metadata.resource_version = Some((rv + 1).to_string());
            after.push(u);
        }
        for (i, c) in plan.create.iter().enumerate() {
            let mut c = c.clone();
            c.metadata.name = Some(format!("node-a-gpu.bcd.dev-{}-{i}", after.len()));
            c.metadata.uid = Some(format!("uid-{}", after.len()));
            c.metadata.resource_version = Some("1".into());
            c.metadata.generate_name = None;
            after.push(c);
        }
        after
    }

    fn generations(slices: &[ResourceSlice]) -> BTreeSet<(i64, i64)> {
        slices
            .iter()
            .map(|s| (s.spec.pool.generation, s.spec.pool.resource_slice_count))
            .collect()
    }

    #[test]
    fn quantities_are_written_in_the_servers_canonical_form_and_read_by_value() {
        for (n, want) in [
            (0, "0"),
            (1000, "1k"),
            (131_072_000, "131072k"),
            (85_520_809_984, "85520809984"),
            (2_000_000_000, "2G"),
        ] {
            assert_eq!(quantity(n), want);
            assert_eq!(quantity_value(want), Some(u128::from(n)));
        }
        assert_eq!(quantity_value("80Gi"), Some(80 << 30));
        assert_eq!(quantity_value("1.5Gi"), None);
        assert_eq!(quantity_value(""), None);
    }

    #[test]
    fn the_pools_slices_from_nothing_to_a_split_and_back() {
        let n = node();
        // (what exists, the devices wanted) → (creates, updates, deletes, resulting
        // generations and counts)
        let many: Vec<Offered> = (0..130)
            .map(|i| dev(&format!("gpu-{i:03}"), 1 << 30))
            .collect();
        let two = vec![dev("gpu-0", 1 << 30), dev("gpu-1", 1 << 30)];
        let mut slices = Vec::new();

        // An empty pool still has one empty slice.
        let p = plan(&n, &slices, want(&[]));
        assert_eq!((p.create.len(), p.update.len(), p.delete.len()), (1, 0, 0));
        assert!(p.create[0].spec.devices.is_empty());
        assert_eq!(
            p.create[0].metadata.generate_name.as_deref(),
            Some("node-a-gpu.bcd.dev-")
        );
        assert_eq!(p.create[0].spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(p.create[0].metadata.owner_references[0].kind, "Node");
        slices = applied(&slices, &p);
        assert_eq!(generations(&slices), [(1, 1)].into());

        // Nothing changed: nothing is written.
        assert!(plan(&n, &slices, want(&[])).is_empty());

        // Two devices into the one slice: one update, the generation stays.
        let p = plan(&n, &slices, want(&two));
        assert_eq!((p.create.len(), p.update.len(), p.delete.len()), (0, 1, 0));
        assert_eq!(p.update[0].metadata.resource_version.as_deref(), Some("1"));
        slices = applied(&slices, &p);
        assert_eq!(generations(&slices), [(1, 1)].into());

        // 130 devices: two slices of 128 and 2; a new slice raises the generation and both
        // carry it and the count.
        let p = plan(&n, &slices, want(&many));
        assert_eq!(p.create.len() + p.update.len(), 2, "{p:?}");
        slices = applied(&slices, &p);
        assert_eq!(slices.len(), 2);
        assert_eq!(generations(&slices), [(2, 2)].into());
        let mut sizes: Vec<usize> = slices.iter().map(|s| s.spec.devices.len()).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [2, 128]);
        assert!(plan(&n, &slices, want(&many)).is_empty(), "settled");

        // One device's memory changes: only its slice is updated, generation kept.
        let mut changed = many.clone();
        changed[129]
            .device
            .capacity
            .insert("memory".into(), 2 << 30);
        let p = plan(&n, &slices, want(&changed));
        assert_eq!((p.create.len(), p.update.len(), p.delete.len()), (0, 1, 0));
        slices = applied(&slices, &p);
        assert_eq!(generations(&slices), [(2, 2)].into());

        // Back to two devices: the 128-slice matches nothing and goes (with its uid and
        // version as preconditions); the pool is one slice again.
        let p = plan(&n, &slices, want(&two));
        assert!(p
            .delete
            .iter()
            .all(|d| d.uid.is_some() && d.resource_version.is_some()));
        slices = applied(&slices, &p);
        assert_eq!(slices.len(), 1, "{slices:?}");
        assert_eq!(slices[0].spec.pool.resource_slice_count, 1);
        assert!(plan(&n, &slices, want(&two)).is_empty());
    }

    #[test]
    fn slices_of_an_older_generation_are_deleted_and_others_left_alone() {
        let n = node();
        let mut slices = applied(&[], &plan(&n, &[], want(&[dev("gpu-0", 1)])));
        let mut stale = slices[0].clone();
        stale.metadata.name = Some("stale".into());
        stale.spec.pool.generation = 0;
        let mut foreign = slices[0].clone();
        foreign.metadata.name = Some("theirs".into());
        foreign.spec.driver = "gpu.nvidia.com".into();
        slices.push(stale);
        slices.push(foreign);
        let p = plan(&n, &slices, want(&[dev("gpu-0", 1)]));
        assert_eq!(
            p.delete.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["stale"]
        );
        assert!(p.create.is_empty() && p.update.is_empty());
    }

    // What the server returns may write a quantity in another form: read by value, it is no
    // change, so bcd does not rewrite a slice for ever.
    #[test]
    fn a_quantity_in_another_form_is_no_change() {
        let n = node();
        let mut slices = applied(&[], &plan(&n, &[], want(&[dev("gpu-0", 80 << 30)])));
        slices[0].spec.devices[0].capacity.insert(
            "memory".into(),
            Capacity {
                value: "80Gi".into(),
                request_policy: None,
            },
        );
        assert!(plan(&n, &slices, want(&[dev("gpu-0", 80 << 30)])).is_empty());
    }

    // Someone else's edit (devices removed, the owner reference dropped) is undone.
    #[test]
    fn a_slice_changed_by_someone_else_is_written_back() {
        let n = node();
        let want = want(&[dev("gpu-0", 1), dev("gpu-1", 1)]);
        let mut slices = applied(&[], &plan(&n, &[], want.clone()));
        slices[0].spec.devices.pop();
        let p = plan(&n, &slices, want.clone());
        assert_eq!(p.update.len(), 1);
        slices = applied(&slices, &p);
        slices[0].metadata.owner_references.clear();
        assert_eq!(plan(&n, &slices, want).update.len(), 1);
    }

    #[test]
    fn the_wire_form_is_resource_k8s_io_v1s() {
        let p = plan(&node(), &[], want(&[dev("gpu-0", 131_072_000)]));
        let v = serde_json::to_value(&p.create[0]).unwrap();
        assert_eq!(v["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(v["kind"], "ResourceSlice");
        assert_eq!(v["spec"]["pool"]["resourceSliceCount"], 1);
        assert_eq!(v["spec"]["nodeName"], "node-a");
        assert_eq!(
            v["spec"]["devices"][0]["attributes"]["type"],
            serde_json::json!({"string": "gpu"})
        );
        assert_eq!(
            v["spec"]["devices"][0]["capacity"]["memory"],
            serde_json::json!({"value": "131072k"})
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(v["metadata"].get("name").is_none());
    }

    fn tainted(name: &str) -> Offered {
        Offered {
            device: dev_of(name, 1 << 30),
            taint: Some(crate::dra::devices::Taint {
                key: "gpu.bcd.dev/held".into(),
                value: "operator".into(),
            }),
        }
    }

    fn shared(name: &str, slots: u32) -> Offered {
        let mut d = dev_of(name, 0);
        d.capacity.clear();
        d.shares = Some(slots);
        Offered {
            device: d,
            taint: None,
        }
    }

    #[test]
    fn with_taints_or_shares_a_slice_holds_at_most_64_devices() {
        let many: Vec<Offered> = (0..100).map(|i| dev(&format!("gpu-{i:03}"), 1)).collect();
        let sizes = |f: Features| desired(&many, f).iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(Features::default()), [100]);
        assert_eq!(
            sizes(Features {
                taints: true,
                shares: false
            }),
            [64, 36]
        );
        assert_eq!(
            sizes(Features {
                taints: false,
                shares: true
            }),
            [64, 36]
        );
    }

    #[test]
    fn the_wire_form_of_a_taint_and_a_shared_device() {
        let f = Features {
            taints: true,
            shares: true,
        };
        let p = plan(
            &node(),
            &[],
            desired(&[tainted("gpu-0"), shared("gpu-1-shared", 4)], f),
        );
        let v = serde_json::to_value(&p.create[0]).unwrap();
        let d = &v["spec"]["devices"];
        assert_eq!(
            d[0]["taints"],
            serde_json::json!([{"key": "gpu.bcd.dev/held", "value": "operator", "effect": "NoSchedule"}])
        );
        assert!(d[0].get("allowMultipleAllocations").is_none());
        assert_eq!(d[1]["allowMultipleAllocations"], true);
        assert_eq!(
            d[1]["capacity"]["slots"],
            serde_json::json!({"value": "4", "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "1"}}})
        );
        assert!(d[1].get("taints").is_none());
    }

    // The server sets a taint's timeAdded: reading it back is no change, an update keeps it,
    // and a taint that comes or goes is one update.
    #[test]
    fn a_taints_time_added_is_kept_and_is_no_change() {
        let n = node();
        let f = Features {
            taints: true,
            shares: false,
        };
        let mut slices = applied(
            &[],
            &plan(&n, &[], desired(&[tainted("gpu-0"), dev("gpu-1", 1)], f)),
        );
        slices[0].spec.devices[0].taints[0].time_added = Some("2026-12-02T07:00:00Z".into());
        assert!(plan(
            &n,
            &slices,
            desired(&[tainted("gpu-0"), dev("gpu-1", 1)], f)
        )
        .is_empty());
        let p = plan(
            &n,
            &slices,
            desired(&[tainted("gpu-0"), tainted("gpu-1")], f),
        );
        assert_eq!(p.update.len(), 1);
        let devices = &p.update[0].spec.devices;
        assert_eq!(
            devices[0].taints[0].time_added.as_deref(),
            Some("2026-12-02T07:00:00Z")
        );
        assert_eq!(devices[1].taints[0].time_added, None, "the server sets it");
        assert_eq!(
            plan(
                &n,
                &slices,
                desired(&[dev("gpu-0", 1 << 30), dev("gpu-1", 1)], f)
            )
            .update
            .len(),
            1
        );
    }

    // A server whose feature gate is off drops the field from what it stores and returns.
    #[test]
    fn what_the_server_dropped_is_read_from_the_object_it_returned() {
        let f = Features {
            taints: true,
            shares: true,
        };
        let sent = plan(
            &node(),
            &[],
            desired(&[tainted("gpu-0"), shared("gpu-1-shared", 2)], f),
        )
        .create
        .remove(0);
        assert!(dropped(&sent, &sent).is_empty(), "kept");
        let mut back = sent.clone();
        back.spec.devices[0].taints.clear();
        assert_eq!(
            dropped(&sent, &back),
            Dropped {
                taints: true,
                shares: false
            }
        );
        let mut back = sent.clone();
        back.spec.devices[1].allow_multiple_allocations = None;
        back.spec.devices[1]
            .capacity
            .get_mut(SLOTS_CAPACITY)
            .unwrap()
            .request_policy = None;
        assert_eq!(
            dropped(&sent, &back),
            Dropped {
                taints: false,
                shares: true
            }
        );
        // Nothing sent, nothing dropped: a plain slice says nothing of the server.
        let plain = plan(&node(), &[], want(&[dev("gpu-0", 1)]))
            .create
            .remove(0);
        assert!(dropped(&plain, &plain).is_empty());
    }
}
