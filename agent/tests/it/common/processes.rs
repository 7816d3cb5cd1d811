//! Test helpers shared by the tests that start `bcd node` and its peers: the demo host's GPU
//! UUIDs, a call to a node's API, and (from `bcd_testkit`) the repository's root, children killed when a test ends,
//! free loopback ports, bounded waits, copies of the fake hosts a test may edit and the node
//! sandbox.

pub use bcd_testkit::{copy_host, free_port, helper_args, repo, wait_for, NodeSandbox, Reaped};

/// The 8 GPUs of `testdata/hosts/hgx-h100`; GPU 3 is in MIG mode.
pub const H100: [&str; 8] = [
    "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
    "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
    "GPU-30e15e2f-5971-0b16-04be-39a46d1071ce",
    "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd",
    "GPU-123a1421-1172-b334-14d9-b65b34232574",
    "GPU-de2e2aa2-202d-33bc-abdc-234d0197d1b8",
    "GPU-8032961a-3b38-ab58-6c00-1b9ef125ea99",
    "GPU-70823a7e-f12c-9777-a04d-fa2e9a8cf5b8",
];

/// GPU 3's MIG devices: `Device 0` (GI 1) and `Device 1` (GI 2).
pub const H100_MIG: [&str; 2] = [
    "MIG-65db3e42-f991-a575-c20e-8350d31e437c",
    "MIG-0c50056c-bc70-320a-5ed7-3d189e36173c",
];

/// One request to a node's API on `socket`, on a runtime of its own (for the tests that drive
/// `bcd node` from plain threads): its JSON answer, or the client's sentence.
pub fn api(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bcd::node::client::call(socket, method, path, body.as_ref()))
        .map_err(|e| e.to_string())
}

/// The packaged systemd unit (or drop-in) `name` of `packaging/systemd`, its `ExecStart=`
/// pointed at the `bcd` this build made.
pub fn packaged_unit(name: &str) -> String {
    std::fs::read_to_string(repo().join("packaging/systemd").join(name))
        .unwrap()
        .replace("/usr/bin/bcd ", &format!("{} ", env!("CARGO_BIN_EXE_bcd")))
}
