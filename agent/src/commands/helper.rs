//! `bcd helper ping`: whether the root helper answers, and what it offers.

use std::process::ExitCode;

use super::output::{code, fail, print, PROBLEM};
use crate::cli::Global;
use crate::helper_client::{Helper, SocketHelper};

/// `bcd helper ping`: the helper's version and operations, from its `Hello` and a `Ping`;
/// exit 3 when the helper does not answer, 1 when it answers but offers no operation on a
/// device (its lock folder is unusable, or it serves only `Ping`): every reset would be
/// refused, and this is where the operator learns it.
pub async fn ping(global: &Global) -> ExitCode {
    match SocketHelper::new(&global.helper_socket).ping().await {
        Ok(pong) => {
            let operations: Vec<&str> = pong.operations.iter().map(|o| o.name()).collect();
            let problem = pong.no_device_operations().map(|why| {
                format!(
                    "bcd-helper cannot run operations on devices, so gpu.reset, persistence changes and VFIO passthrough are refused; its Ping says: {why}"
                )
            });
            if global.json {
                let mut doc = serde_json::json!({
                    "schema_version": crate::document::SCHEMA_VERSION,
                    "socket": global.helper_socket,
                    "helper_version": pong.helper_version,
                    "protocol_version": pong.protocol_version,
                    "operations": operations,
                    "sandbox": pong.sandbox,
                    "device_operations": problem.is_none(),
                });
                if let Some(p) = &problem {
                    doc["problem"] = serde_json::Value::from(p.as_str());
                }
                print(&format!("{doc}\n"));
            } else {
                print(&format!(
                    "bcd-helper {} at {} (protocol {}): {}\nsandbox: {}\n",
                    pong.helper_version,
                    global.helper_socket.display(),
                    pong.protocol_version,
                    operations.join(", "),
                    pong.sandbox
                ));
                if let Some(p) = &problem {
                    print(&format!("{p}\n"));
                }
            }
            if problem.is_some() {
                ExitCode::from(PROBLEM)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => fail(global.json, code::HELPER_FAILED, &e.to_string()),
    }
}
