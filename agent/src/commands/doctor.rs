//! `bcd doctor [--json]`: the node's checks, one line each.

use std::process::ExitCode;

use super::output::{print, print_json, saying_what_it_waits_for, FAILED, PROBLEM};
use crate::cli::Global;
use crate::doctor::{checks, run, Check, DoctorEnv, Status};

/// `bcd doctor [--json]`: prints the report; exit status 1 when any check failed.
pub async fn doctor(global: &Global) -> ExitCode {
    let mut env = DoctorEnv::new(global.host(), &global.helper_socket);
    env.data_dir = Some(global.data_dir.clone());
    env.xid_policy = global.xid_policy();
    let mut report = saying_what_it_waits_for(global.json, run(&env)).await;
    // The node's XID overrides are configuration, not a fact of the host: always `ok`.
    report.checks.push(Check::new(
        Status::Ok,
        checks::name::XID_POLICY,
        global.xid_policy().describe(),
    ));
    if global.json {
        if !print_json(&report, "doctor's report") {
            return ExitCode::from(FAILED);
        }
    } else {
        print(&report.render_text());
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(PROBLEM)
    }
}
