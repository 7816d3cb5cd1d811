//! `bcd helper ping`: whether the root helper answers, and what it offers.

use std::process::ExitCode;

use super::output::{code, fail, print};
use crate::cli::Global;
use crate::helper_client::{Helper, SocketHelper};

/// `bcd helper ping`: the helper's version and operations, from its `Hello` and a `Ping`;
/// exit 3 when the helper does not answer.
pub async fn ping(global: &Global) -> ExitCode {
    match SocketHelper::new(&global.helper_socket).ping().await {
        Ok(pong) => {
            let operations: Vec<&str> = pong.operations.iter().map(|o| o.name()).collect();
            if global.json {
                let doc = serde_json::json!({
                    "schema_version": crate::document::SCHEMA_VERSION,
                    "socket": global.helper_socket,
                    "helper_version": pong.helper_version,
                    "protocol_version": pong.protocol_version,
                    "operations": operations,
                    "sandbox": pong.sandbox,
                });
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
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(global.json, code::HELPER_FAILED, &e.to_string()),
    }
}
