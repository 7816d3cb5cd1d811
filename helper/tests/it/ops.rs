//! The operations against fakes: `nvidia-smi` scripts from `testdata/helper` and a fake PCI
//! sysfs tree whose kernel side is played by a thread (see `common::FakePciKernel`).

use crate::common;

use std::time::{Duration, Instant};

use bcd_protocol::{
    ClientFrame, HelperError, Operation, Outcome, PciAddress, PersistenceNote, Request,
};
use common::{alive, fake_program, wait_gone, wait_lines, FakePciKernel, Helper};

const GPU: &str = "0000:18:00.0";
const NIC: &str = "0000:19:00.0";

fn pci(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn calls(h: &Helper) -> String {
    std::fs::read_to_string(h.path("calls")).unwrap_or_default()
}

/// A helper over a fake sysfs with one NVIDIA GPU on `nvidia` and one Intel NIC on `ixgbe`.
fn vfio_helper(unbind_timeout: &str) -> (Helper, FakePciKernel) {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let mut sysfs = FakePciKernel::new(&dir.path().join("sys"));
    sysfs.add_function(GPU, "0x10de", "0x030200", Some("nvidia"));
    sysfs.add_function(NIC, "0x8086", "0x020000", Some("ixgbe"));
    sysfs.start_kernel();
    let root = sysfs.root.display().to_string();
    let h = Helper::start_in(
        dir,
        &[
            "--sysfs-root",
            &root,
            "--nvidia-smi",
            smi.to_str().unwrap(),
            "--unbind-timeout",
            unbind_timeout,
        ],
    );
    (h, sysfs)
}

#[test]
fn bind_then_release_moves_the_gpu_and_its_persistence_mode() {
    let (h, sysfs) = vfio_helper("5");
    let mut c = h.client();
    let out = c
        .request(1, Operation::VfioBind { device: pci(GPU) })
        .unwrap();
    assert_eq!(
        out,
        Outcome::Vfio {
            device: pci(GPU),
            driver_before: Some("nvidia".into()),
            driver_after: Some("vfio-pci".into()),
            persistence: PersistenceNote::Set { enabled: false },
        }
    );
    assert_eq!(sysfs.driver(GPU).as_deref(), Some("vfio-pci"));
    assert_eq!(sysfs.driver_override(GPU), "vfio-pci");
    assert_eq!(calls(&h), "-i 00000000:18:00.0 -pm 0\n");

    // Binding again is a no-op that touches nothing.
    let again = c
        .request(2, Operation::VfioBind { device: pci(GPU) })
        .unwrap();
    assert!(
        matches!(
            again,
            Outcome::Vfio {
                persistence: PersistenceNote::NotTouched,
                ..
            }
        ),
        "{again:?}"
    );

    let out = c
        .request(3, Operation::VfioRelease { device: pci(GPU) })
        .unwrap();
    assert_eq!(
        out,
        Outcome::Vfio {
            device: pci(GPU),
            driver_before: Some("vfio-pci".into()),
            driver_after: Some("nvidia".into()),
            persistence: PersistenceNote::Set { enabled: true },
        }
    );
    assert_eq!(sysfs.driver_override(GPU).trim(), "");
    assert_eq!(
        calls(&h),
        "-i 00000000:18:00.0 -pm 0\n-i 00000000:18:00.0 -pm 1\n"
    );

    // Releasing a function that is not on vfio-pci is refused.
    let err = c
        .request(4, Operation::VfioRelease { device: pci(GPU) })
        .unwrap_err();
    assert!(matches!(err, HelperError::Invalid { .. }), "{err}");

    let audit = h.audit_lines();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("\"operation\":\"vfio.bind\"")
                && l.contains("\"device\":\"0000:18:00.0\"")
                && l.contains("\"outcome\":\"ok\"")),
        "{audit:?}"
    );
    assert!(audit
        .iter()
        .any(|l| l.contains("\"vfio.release\"") && l.contains("\"outcome\":\"invalid\"")));
}

#[test]
fn a_function_of_another_vendor_is_refused_untouched() {
    let (h, sysfs) = vfio_helper("5");
    let mut c = h.client();
    let err = c
        .request(1, Operation::VfioBind { device: pci(NIC) })
        .unwrap_err();
    assert_eq!(
        err,
        HelperError::Invalid {
            what: "0000:19:00.0 is not an NVIDIA function (vendor 0x8086)".into()
        }
    );
    assert_eq!(sysfs.driver(NIC).as_deref(), Some("ixgbe"));
    assert_eq!(sysfs.driver_override(NIC), "");
    // An address with no function behind it is refused the same way.
    let err = c
        .request(
            2,
            Operation::VfioBind {
                device: pci("0000:af:00.0"),
            },
        )
        .unwrap_err();
    assert!(matches!(err, HelperError::Invalid { .. }), "{err}");
    assert_eq!(calls(&h), "");
}

#[test]
fn a_driver_that_never_lets_go_leaves_the_gpu_on_nvidia_with_the_override_cleared() {
    let (h, sysfs) = vfio_helper("1");
    sysfs.stuck.lock().unwrap().insert(GPU.to_owned());
    let mut c = h.client();
    let started = Instant::now();
    let err = c
        .request(1, Operation::VfioBind { device: pci(GPU) })
        .unwrap_err();
    let HelperError::Failed {
        exit_code: None,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(
        message.starts_with(
            "its driver has not let go after 1s: something still has the device open \
             (nvidia-persistenced, a process on the GPU)"
        ),
        "{message}"
    );
    assert!(message.contains("driver_override was cleared"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(sysfs.driver(GPU).as_deref(), Some("nvidia"));
    assert_eq!(sysfs.driver_override(GPU).trim(), "");
    // Persistence went off for the unbind and back on since the GPU stayed.
    assert_eq!(
        calls(&h),
        "-i 00000000:18:00.0 -pm 0\n-i 00000000:18:00.0 -pm 1\n"
    );
}

#[test]
fn nvidia_smi_answers_become_typed_results() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let h = Helper::start_in(dir, &["--nvidia-smi", smi.to_str().unwrap()]);
    let mut c = h.client();
    let uuid = pci("0000:1a:00.0");
    let out = c
        .request(
            1,
            Operation::SetPersistence {
                gpu: uuid,
                enabled: true,
            },
        )
        .unwrap();
    assert_eq!(
        out,
        Outcome::Persistence {
            gpu: uuid,
            enabled: true
        }
    );
    c.request(2, Operation::ResetGpu { gpu: pci(GPU) }).unwrap();
    assert_eq!(
        calls(&h),
        "-i 00000000:1A:00.0 -pm 1\n--gpu-reset -i 00000000:18:00.0\n"
    );
    // The child's environment is the helper's fixed one, nothing inherited.
    let env = std::fs::read_to_string(h.path("env")).unwrap();
    let mut names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    names.sort();
    names.retain(|n| *n != "PWD" && *n != "SHLVL" && *n != "_" && *n != "OLDPWD");
    assert_eq!(names, ["LC_ALL", "PATH"], "{env}");

    drop(c);
    drop(h);
    let dir = tempfile::tempdir().unwrap();
    let fail = fake_program(dir.path(), "nvidia-smi-fail", "nvidia-smi");
    let h = Helper::start_in(dir, &["--nvidia-smi", fail.to_str().unwrap()]);
    let mut c = h.client();
    let err = c
        .request(
            1,
            Operation::SetPersistence {
                gpu: uuid,
                enabled: false,
            },
        )
        .unwrap_err();
    let HelperError::Failed {
        exit_code: Some(9),
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("Unable to determine the device handle"),
        "{message}"
    );
    assert!(h
        .audit_lines()
        .iter()
        .any(|l| l.contains("\"outcome\":\"failed\"") && l.contains("exit status 9")));

    let h = Helper::start(&["--nvidia-smi", "/nonexistent/nvidia-smi"]);
    let mut c = h.client();
    let err = c.request(1, Operation::ResetGpu { gpu: uuid }).unwrap_err();
    let HelperError::Failed {
        exit_code: None,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(message.contains("not found"), "{message}");
}

#[test]
fn a_hung_nvidia_smi_times_out_and_its_whole_group_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-hang", "nvidia-smi");
    let h = Helper::start_in(
        dir,
        &[
            "--nvidia-smi",
            smi.to_str().unwrap(),
            "--nvidia-smi-timeout",
            "1",
        ],
    );
    let mut c = h.client();
    let started = Instant::now();
    let err = c
        .request(
            1,
            Operation::SetPersistence {
                gpu: pci(GPU),
                enabled: false,
            },
        )
        .unwrap_err();
    assert_eq!(err, HelperError::Timeout { after_s: 1 });
    assert!(started.elapsed() < Duration::from_secs(5));
    let pids = std::fs::read_to_string(h.path("pids")).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    for pid in pids.split_whitespace() {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false);
        assert!(!alive, "process {pid} of the hung nvidia-smi survived");
    }
    // The helper is still there for the next request.
    assert!(c.request(2, Operation::Ping).is_ok());
}

#[test]
fn an_unwritable_audit_log_refuses_privileged_work_but_answers_ping() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    // The audit log is a symlink: O_NOFOLLOW refuses it, so the helper cannot audit.
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), dir.path().join("audit.log")).unwrap();
    let h = Helper::start_in(dir, &["--nvidia-smi", smi.to_str().unwrap()]);
    let mut c = h.client();
    assert!(c.request(1, Operation::Ping).is_ok());
    let err = c
        .request(
            2,
            Operation::SetPersistence {
                gpu: pci(GPU),
                enabled: true,
            },
        )
        .unwrap_err();
    let HelperError::Failed { message, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("audit log") && message.contains("cannot be written"),
        "{message}"
    );
    assert_eq!(calls(&h), "");
    assert!(
        !h.path("elsewhere").exists(),
        "the helper followed the audit log's link"
    );
}

/// One line of the slow fake's log: (start?, gpu, nanoseconds).
fn parse_log(log: &str) -> Vec<(bool, String, u128)> {
    log.lines()
        .map(|l| {
            let mut p = l.split_whitespace();
            let kind = p.next().unwrap() == "start";
            let gpu = p.next().unwrap().to_owned();
            let ns = p.next().unwrap().parse().unwrap();
            (kind, gpu, ns)
        })
        .collect()
}

#[test]
fn operations_on_one_gpu_never_overlap_and_on_different_gpus_they_do() {
    const CLIENTS: usize = 64;
    const GPUS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-slow", "nvidia-smi");
    let h = Helper::start_in(
        dir,
        &[
            "--nvidia-smi",
            smi.to_str().unwrap(),
            "--max-connections",
            "64",
            "--max-connections-per-uid",
            "64",
        ],
    );
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let sock = h.sock.clone();
            std::thread::spawn(move || {
                let mut c = common::RawClient::connect(&sock);
                c.hello();
                let gpu: PciAddress = format!("0000:{:02x}:00.0", 0x10 + i % GPUS)
                    .parse()
                    .unwrap();
                c.request(i as u64, Operation::SetPersistence { gpu, enabled: true })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let elapsed = started.elapsed();
    let log = parse_log(&std::fs::read_to_string(h.path("log")).unwrap());
    assert_eq!(log.len(), CLIENTS * 2);
    // Per GPU: start, end, start, end... in the order they were appended.
    for g in 0..GPUS {
        let id = format!("00000000:{:02X}:00.0", 0x10 + g);
        let kinds: Vec<bool> = log
            .iter()
            .filter(|(_, gpu, _)| *gpu == id)
            .map(|e| e.0)
            .collect();
        assert_eq!(kinds.len(), 2 * CLIENTS / GPUS);
        for (i, k) in kinds.iter().enumerate() {
            assert_eq!(*k, i % 2 == 0, "calls on {id} overlapped: {kinds:?}");
        }
    }
    // Across GPUs: at some moment more than one call ran.
    let mut running = 0i32;
    let mut most = 0;
    for (start, _, _) in &log {
        running += if *start { 1 } else { -1 };
        most = most.max(running);
    }
    let serial = Duration::from_millis(200) * CLIENTS as u32;
    eprintln!("{CLIENTS} calls on {GPUS} GPUs: {elapsed:?} (serial would be at least {serial:?}), at most {most} at once");
    assert!(most >= 2, "calls on different GPUs never overlapped");
    assert!(
        elapsed < serial,
        "{elapsed:?} is not below the serial {serial:?}"
    );
}

#[test]
fn sigterm_lets_a_running_operation_finish_before_exiting() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-slow", "nvidia-smi");
    let mut h = Helper::start_in(dir, &["--nvidia-smi", smi.to_str().unwrap()]);
    let mut c = h.client();
    let sock = h.sock.clone();
    let pid = nix::unistd::Pid::from_raw(h.child.id() as i32);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        sock
    });
    let out = c.request(
        1,
        Operation::SetPersistence {
            gpu: pci(GPU),
            enabled: true,
        },
    );
    assert!(out.is_ok(), "{out:?}");
    let sock = killer.join().unwrap();
    let status = h.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let log = std::fs::read_to_string(h.path("log")).unwrap();
    assert!(log.contains("end "), "{log}");
    assert!(!sock.exists(), "the --listen socket was left behind");
}

/// A helper whose `nvidia-smi` hangs (`nvidia-smi-hang`: a `sh` that waits on a `sleep 1000`
/// it started in its group), started with `extra`, and a reset of [`GPU`] sent to it and
/// running: returns the helper, the client that sent it, and the pids of the `sh` (the
/// helper's child) and of its `sleep` (a grandchild).
fn hung_reset(extra: &[&str]) -> (Helper, common::RawClient, i32, i32) {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-hang", "nvidia-smi");
    let mut args = vec!["--nvidia-smi", smi.to_str().unwrap()];
    args.extend_from_slice(extra);
    let h = Helper::start_in(dir, &args);
    let mut c = h.client();
    c.send(&ClientFrame::Request(Request {
        id: 1,
        op: Operation::ResetGpu { gpu: pci(GPU) },
    }));
    let pids = wait_lines(&h.path("pids"), 2, Duration::from_secs(10));
    let grandchild: i32 = pids[0].trim().parse().unwrap();
    let child: i32 = pids[1].trim().parse().unwrap();
    (h, c, child, grandchild)
}

/// Kills what is left of the hung fake's process group (its `sleep`), and waits for it.
fn end_group(leader: i32, member: i32) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(leader),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(
        wait_gone(member, Duration::from_secs(5)),
        "{member} survived"
    );
}

// A helper killed with SIGKILL left its nvidia-smi running: nothing tied a child to the
// helper's life (now PR_SET_PDEATHSIG, set in the child by the thread that spawns it).
#[test]
fn a_child_dies_with_a_helper_killed_by_sigkill() {
    let (mut h, _c, child, grandchild) = hung_reset(&[]);
    assert!(alive(child));
    h.kill_9();
    let gone = wait_gone(child, Duration::from_secs(5));
    end_group(child, grandchild);
    assert!(gone, "the helper's child {child} outlived the helper");
}

// An operation the helper died in left no audit line at all: lines were written only when
// an operation ended.
#[test]
fn a_helper_killed_during_an_operation_leaves_its_started_line() {
    let (mut h, _c, child, grandchild) = hung_reset(&[]);
    h.kill_9();
    end_group(child, grandchild);
    let lines = h.audit_lines();
    let started: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l.contains("\"operation\":\"gpu.reset\"")
                && l.contains("\"gpu\":\"0000:18:00.0\"")
                && l.contains("\"outcome\":\"started\"")
        })
        .collect();
    assert_eq!(started.len(), 1, "{lines:?}");
}

// An operation ran although its audit line could not be written: the line came only when it
// ended, and the failure was noticed after the fact. The helper's file size limit makes the
// append fail (EFBIG, SIGXFSZ ignored), which works as root, where an unwritable mode does not.
#[test]
fn an_operation_whose_started_line_cannot_be_written_is_refused_untouched() {
    const LIMIT: u64 = 4096;
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let audit = dir.path().join("audit.log");
    let mut full = "x".repeat(LIMIT as usize - 1);
    full.push('\n');
    std::fs::write(&audit, full).unwrap();
    std::fs::set_permissions(&audit, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let h = Helper::start_with(dir, &["--nvidia-smi", smi.to_str().unwrap()], |cmd| {
        // The limit holds for every regular file the helper writes: a stderr inherited from
        // a run whose output goes to a file past 4 KiB (run-tests > log, as CI may run it)
        // made its first log line fail, and it never listened.
        cmd.stderr(std::process::Stdio::null());
        // SAFETY: setrlimit and signal are async-signal-safe; the helper execs right after.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, || {
                let lim = libc::rlimit {
                    rlim_cur: LIMIT,
                    rlim_max: LIMIT,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Ignored signals stay ignored across exec: a write past the limit is EFBIG.
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
    });
    // No Ping first: its own line would fail, and the log would be known broken before.
    let mut c = h.client();
    let err = c
        .request(
            1,
            Operation::SetPersistence {
                gpu: pci(GPU),
                enabled: true,
            },
        )
        .unwrap_err();
    let HelperError::Failed { message, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains(&format!("the audit log {}", audit.display()))
            && message.contains("cannot be written"),
        "{message}"
    );
    assert_eq!(calls(&h), "", "nvidia-smi ran without its audit line");
    assert_eq!(std::fs::metadata(&audit).unwrap().len(), LIMIT);
}

// A restarted helper started a second reset of a GPU whose earlier nvidia-smi (here its
// grandchild, which SIGKILL of the helper does not reach, as a reset inside the driver would
// not die) still ran: the per-GPU lock lived only in the killed helper's memory.
#[test]
fn a_restarted_helper_refuses_a_gpu_an_earlier_operations_process_still_holds() {
    let locks = tempfile::tempdir().unwrap();
    let lock_dir = locks.path().join("locks");
    let lock_dir = lock_dir.to_str().unwrap();
    let (mut first, _c, child, grandchild) = hung_reset(&["--lock-dir", lock_dir]);
    first.kill_9();
    assert!(wait_gone(child, Duration::from_secs(5)));
    assert!(alive(grandchild));

    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let second = Helper::start_in(
        dir,
        &[
            "--nvidia-smi",
            smi.to_str().unwrap(),
            "--lock-dir",
            lock_dir,
        ],
    );
    let mut c = second.client();
    let reset = |gpu: &str| Operation::ResetGpu { gpu: pci(gpu) };
    let refused = c.request(1, reset(GPU));
    let still = c.request(2, reset(GPU));
    // Another GPU is not held up.
    let other = c.request(3, reset("0000:11:00.0"));
    let calls_while_held = calls(&second);
    end_group(child, grandchild);
    let served = c.request(4, reset(GPU));

    let Err(HelperError::Busy { what }) = &refused else {
        panic!("{refused:?}")
    };
    assert!(
        what.contains(GPU) && what.contains("an earlier operation on it may still be running"),
        "{what}"
    );
    assert!(matches!(still, Err(HelperError::Busy { .. })), "{still:?}");
    assert!(other.is_ok(), "{other:?}");
    assert_eq!(calls_while_held, "--gpu-reset -i 00000000:11:00.0\n");
    assert!(served.is_ok(), "{served:?}");
    assert!(
        calls(&second).ends_with("--gpu-reset -i 00000000:18:00.0\n"),
        "{}",
        calls(&second)
    );
}

// Guards the hand-over: a child holds its own device's lock file, and no other's (a lock
// file of another operation reaching a child would hold that device for as long).
#[test]
fn a_child_holds_its_own_devices_lock_file_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let h = Helper::start_in(dir, &["--nvidia-smi", smi.to_str().unwrap()]);
    let mut c = h.client();
    c.request(1, Operation::ResetGpu { gpu: pci(GPU) }).unwrap();
    let fds = std::fs::read_to_string(h.path("fds")).unwrap();
    let locks: Vec<&str> = fds.lines().filter(|l| l.contains(".lock")).collect();
    assert_eq!(locks.len(), 1, "{fds}");
    assert!(locks[0].ends_with("/0000:18:00.0.lock"), "{fds}");
}
