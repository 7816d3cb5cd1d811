//! bcd's DRA driver end to end: `bcd node --dra` on the 8-GPU demo host against a stand-in API
//! server and a stand-in kubelet (`tests/it/dra/stand_in.py`). No kube-apiserver or kubelet
//! binary can be installed here: the API server is a small HTTPS server of the script's own
//! (a certificate for 127.0.0.1 made with openssl, a bearer token) that validates every
//! ResourceSlice bcd writes against the resource.k8s.io/v1 schema of the Kubernetes version it
//! plays (PyPI kubernetes-validate; 1.34 unless a scenario says), and the kubelet is Python's grpcio speaking the real wire API from
//! stubs generated from bcd's .proto files at test time.
//!
//! It checks the registration (sockets, GetInfo, the version the kubelet takes), the first
//! slices and their attributes, a claim prepared (its hold, its CDI spec, the same answer
//! again) and unprepared, a replaced claim and a claim of a held GPU refused per claim, a
//! device dropped and offered again around an operator hold with one write, slices published
//! again after the kubelet's restart (its wipe, a new registration on the socket that stayed, the
//! same answer to the claim), a 409 storm, the API server away and back, a 422 not tried
//! again until the content changes, the health stream turning an XID's GPU UNHEALTHY, bcd node
//! restarted between prepare and unprepare (the same answer, the claim object gone), the
//! registration socket made anew, and, 1.34 keeping no taints by default, one dry run a start
//! and no real write with a taint.
//!
//! A second scenario plays Kubernetes 1.36: GPU slots offered as shared devices (consumable
//! capacity) with two shares of one GPU prepared on two slots and a third refused, an operator
//! hold and an XID tainting their devices instead of dropping them (one write, the server's
//! timeAdded kept), then the same server with DRADeviceTaints and DRAConsumableCapacity off:
//! bcd's dry run sees the fields dropped and it falls back to slot devices and to leaving out
//! what it does not offer; then a server that fails every dry run, which gets neither field.
//!
//! Needs the DRA stand-ins' Python (run-tests installs it) and openssl; skipped, saying so,
//! without them (a failure under `CI`).

use crate::common::processes;

use processes::{repo, NodeSandbox};
use std::process::Command;

#[test]
fn the_dra_driver_against_a_stand_in_api_server_and_kubelet() {
    stand_in(&[]);
}

// Kubernetes 1.36: GPU slots as shared devices (consumable capacity), shares prepared on
// their own slots, devices not offered kept with a taint; then the same server with both
// feature gates off, which bcd learns from the objects it returns and falls back from.
#[test]
fn on_kubernetes_1_36_slots_are_shared_devices_and_what_is_not_offered_is_tainted() {
    stand_in(&[("SCENARIO", "shares"), ("SERVER_VERSION", "1.36")]);
}

/// Runs the stand-ins' scenario with `env` on the 8-GPU demo host; panics when it fails.
fn stand_in(env: &[(&str, &str)]) {
    let Some(python) = bcd_testkit::require(bcd_testkit::Peer::DraStandIn) else {
        return;
    };
    if bcd_testkit::require(bcd_testkit::Peer::Openssl).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sandbox = NodeSandbox::new(dir.path(), "hgx-h100");
    let global = sandbox.global_args();
    let NodeSandbox { host, .. } = sandbox;
    let work = dir.path().join("dra");
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new("timeout")
        .arg("300")
        .arg(&python)
        .arg(repo().join("agent/tests/it/dra/stand_in.py"))
        .env("BCD", env!("CARGO_BIN_EXE_bcd"))
        .env("BCD_GLOBAL", serde_json::to_string(&global).unwrap())
        .env("WORK", &work)
        .env("PROTO_DIR", repo().join("agent/proto"))
        .env("KMSG", host.join("root/dev/kmsg"))
        .env("PACKAGING", repo().join("packaging"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(work.join("node.log")).unwrap_or_default();
    eprintln!(
        "{stdout}{}\n--- bcd node's log ---\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the DRA stand-ins' scenario failed");
    assert!(stdout.contains("all passed"));
}

/// `systemd-analyze security --offline`'s overall exposure of `unit`.
fn exposure(analyze: &std::path::Path, unit: &std::path::Path) -> f64 {
    let out = bcd_testkit::with_private_run(analyze)
        .expect("checked by the caller")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| {
            l.split_once("Overall exposure level for ")
                .map(|(_, r)| r.to_owned())
        })
        .and_then(|r| r.split(':').nth(1)?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no rating: {text}"))
}

// The DRA drop-in (the kubelet's folders, /run/cdi, the API server's address) must verify
// with the packaged unit and rate it worse by the API server's address alone.
#[test]
fn the_dra_drop_in_verifies_and_keeps_the_units_rating() {
    let Some(analyze) = bcd_testkit::require(bcd_testkit::Peer::SystemdAnalyze) else {
        return;
    };
    if bcd_testkit::with_private_run(&analyze).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let staged = crate::common::processes::packaged_unit;
    let unit = dir.path().join("bcd.service");
    std::fs::write(&unit, staged("bcd.service")).unwrap();
    let without = exposure(&analyze, &unit);
    let drop_ins = dir.path().join("bcd.service.d");
    std::fs::create_dir(&drop_ins).unwrap();
    std::fs::write(drop_ins.join("dra.conf"), staged("dra.conf")).unwrap();
    let out = bcd_testkit::with_private_run(&analyze)
        .unwrap()
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify with the drop-in: {said}"
    );
    let with = exposure(&analyze, &unit);
    // The one widening is IPAddressAllow= for the API server (systemd counts an address
    // beyond localhost as 0.1); everything else stays as narrow as the packaged unit.
    assert!(
        with <= without + 0.1 + 1e-9,
        "the drop-in rates bcd.service {with}, more than the API server's address above {without}"
    );
}
