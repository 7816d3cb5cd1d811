//! The socket side against real peers: `--listen`, socket activation through the real
//! `systemd-socket-activate`, a peer of another uid, the connection cap and usage errors.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bcd_protocol::frame::{decode_frame, encode};
use bcd_protocol::{
    ClientFrame, HelperError, Operation, OperationKind, Outcome, Request, ServerFrame,
    PROTOCOL_VERSION,
};
use common::{fake_program, Helper, RawClient, HELPER};

#[test]
fn listen_creates_a_0660_socket_and_answers_hello_and_ping() {
    let h = Helper::start(&[]);
    let meta = std::fs::symlink_metadata(&h.sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    let mut c = h.connect();
    c.send(&ClientFrame::Hello {
        version: PROTOCOL_VERSION,
    });
    let Some(ServerFrame::Hello(Ok(answer))) = c.recv() else {
        panic!("no hello")
    };
    // Every operation but NVIDIA's CDI spec, which needs --nvidia-cdi-spec.
    let mut all = OperationKind::ALL.to_vec();
    all.retain(|k| *k != OperationKind::NvidiaCdiSpec);
    assert_eq!(answer.operations, all);
    assert_eq!(answer.helper_version, env!("CARGO_PKG_VERSION"));
    let pong = c.request(41, Operation::Ping).unwrap();
    assert!(matches!(pong, Outcome::Pong { .. }));
    // Ids are echoed, whatever they are.
    c.request(u64::MAX, Operation::Ping).unwrap();
    let audit = h.audit_lines();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("\"operation\":\"ping\"") && l.contains("\"outcome\":\"ok\"")),
        "{audit:?}"
    );
    let mode = std::fs::metadata(&h.audit).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

// What broke: with its lock folder unusable the helper listed every operation in its Hello and
// said nothing in its Ping, and the first reset was where the operator found out.
#[test]
fn an_unusable_lock_folder_leaves_the_device_operations_out_of_hello_and_says_why_in_ping() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the folder should be.
    let locks = dir.path().join("locks-file");
    std::fs::write(&locks, "").unwrap();
    let locks = locks.display().to_string();
    let h = Helper::start_in(dir, &["--lock-dir", &locks]);
    let mut c = h.connect();
    c.send(&ClientFrame::Hello {
        version: PROTOCOL_VERSION,
    });
    let Some(ServerFrame::Hello(Ok(answer))) = c.recv() else {
        panic!("no hello")
    };
    assert_eq!(
        answer.operations,
        [OperationKind::Ping, OperationKind::LibvirtGpus],
        "only what acts on no device"
    );
    let Ok(Outcome::Pong { sandbox, .. }) = c.request(1, Operation::Ping) else {
        panic!("no pong")
    };
    assert!(
        sandbox.contains(&format!(
            "no operation on a device runs: the lock folder {locks} cannot be used: it is not a folder"
        )),
        "{sandbox}"
    );
    // What it leaves out it refuses, naming the folder.
    let refused = c
        .request(
            2,
            Operation::ResetGpu {
                gpu: "0000:18:00.0".parse().unwrap(),
            },
        )
        .unwrap_err();
    assert!(refused.to_string().contains(&locks), "{refused}");
}

#[test]
fn a_stale_socket_is_replaced_but_another_file_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("helper.sock");
    // A socket inode nobody listens on, made without a file descriptor: a listener bound and
    // dropped here could linger in a child another test thread forks meanwhile.
    nix::sys::stat::mknod(
        &stale,
        nix::sys::stat::SFlag::S_IFSOCK,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        0,
    )
    .unwrap();
    let h = Helper::start_in(dir, &[]);
    h.client().request(1, Operation::Ping).unwrap();
    drop(h);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.sock");
    std::fs::write(&file, "keep me").unwrap();
    let out = Command::new(HELPER)
        .arg("--listen")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

#[test]
fn version_prints_the_name_and_version_and_exits_0() {
    let out = Command::new(HELPER).arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("bcd-helper {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn usage_errors_are_one_sentence_and_exit_2() {
    for args in [
        &["--nvidia-smi", "nvidia-smi"][..],
        &["--bogus"],
        &["--idle-exit", "soon"],
    ] {
        let out = Command::new(HELPER).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("bcd-helper: "), "{err}");
    }
    let out = Command::new(HELPER).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("--unbind-timeout"));
    // Neither --listen nor activation: a clear refusal.
    let out = Command::new(HELPER)
        .env_remove("LISTEN_FDS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bcd-helper.socket"));
}

#[test]
fn socket_activation_serves_hides_the_listen_variables_and_exits_when_idle() {
    let Some(activate) = bcd_testkit::require(bcd_testkit::Peer::SystemdSocketActivate) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let sock = dir.path().join("activated.sock");
    let audit = dir.path().join("audit.log");
    let mut child = Command::new(activate)
        .arg("-l")
        .arg(&sock)
        .arg("--")
        .arg(HELPER)
        .args(["--idle-exit", "2", "--no-sandbox", "--nvidia-smi"])
        .arg(&smi)
        .arg("--audit-log")
        .arg(&audit)
        .arg("--sysfs-root")
        .arg(common::fake_gpus(dir.path()))
        .arg("--staging-dir")
        .arg(dir.path().join("staging"))
        .arg("--lock-dir")
        .arg(dir.path().join("locks"))
        .env("BCD_HELPER_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    bcd_testkit::wait_listening(&sock, Duration::from_secs(10));
    let mut c = RawClient::connect(&sock);
    c.hello();
    let gpu: bcd_protocol::PciAddress = "0000:18:00.0".parse().unwrap();
    c.request(1, Operation::SetPersistence { gpu, enabled: true })
        .unwrap();
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    assert!(!env.contains("LISTEN_"), "{env}");
    // The child holds no socket: the listening fd is close-on-exec.
    let fds = std::fs::read_to_string(dir.path().join("fds")).unwrap();
    assert!(!fds.contains("socket:"), "{fds}");
    drop(c);

    let closed = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            closed.elapsed() < Duration::from_secs(15),
            "the helper did not exit when idle"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        closed.elapsed() >= Duration::from_secs(2),
        "it exited before its idle time"
    );
}

/// Runs a client as `uid`/`gid` in a forked child: it says `Hello` and, if answered, pings.
/// Exit codes: 10 = `Closing(Denied)`, 11 = served (`Pong`), others = something else.
fn client_as(sock: &Path, uid: u32, gid: u32) -> i32 {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, setgid, setgroups, setuid, ForkResult, Gid, Uid};
    let hello = encode(&ClientFrame::Hello {
        version: PROTOCOL_VERSION,
    })
    .unwrap();
    let ping = encode(&ClientFrame::Request(Request {
        id: 5,
        op: Operation::Ping,
    }))
    .unwrap();
    // SAFETY: the child only drops its ids, talks over one socket and calls _exit.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            let code = (|| -> i32 {
                if setgroups(&[]).is_err()
                    || setgid(Gid::from_raw(gid)).is_err()
                    || setuid(Uid::from_raw(uid)).is_err()
                {
                    return 2;
                }
                let Ok(mut s) = UnixStream::connect(sock) else {
                    return 3;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let read_one = |s: &mut UnixStream| -> Option<ServerFrame> {
                    let mut h = [0u8; 4];
                    s.read_exact(&mut h).ok()?;
                    let mut b = h.to_vec();
                    b.resize(4 + u32::from_be_bytes(h) as usize, 0);
                    s.read_exact(&mut b[4..]).ok()?;
                    decode_frame(&b).ok()
                };
                let _ = s.write_all(&hello);
                match read_one(&mut s) {
                    Some(ServerFrame::Closing(HelperError::Denied)) => 10,
                    Some(ServerFrame::Hello(Ok(_))) => {
                        let _ = s.write_all(&ping);
                        match read_one(&mut s) {
                            Some(ServerFrame::Response(r))
                                if matches!(r.result, Ok(Outcome::Pong { .. })) =>
                            {
                                11
                            }
                            _ => 5,
                        }
                    }
                    _ => 4,
                }
            })();
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => match waitpid(child, None).unwrap() {
            WaitStatus::Exited(_, code) => code,
            other => panic!("client ended as {other:?}"),
        },
    }
}

fn open_to_everyone(h: &Helper) {
    std::fs::set_permissions(h.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&h.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
}

#[test]
fn a_peer_of_another_uid_is_denied_and_audited_unless_allowed() {
    if !nix::unistd::Uid::effective().is_root() {
        bcd_testkit::skip("changing to another uid needs root");
        return;
    }
    const NOBODY: u32 = 65534;
    let h = Helper::start(&[]);
    open_to_everyone(&h);
    assert_eq!(client_as(&h.sock, NOBODY, NOBODY), 10);
    let audit = h.audit_lines();
    assert!(
        audit.iter().any(|l| l.contains("\"operation\":\"connect\"")
            && l.contains("\"outcome\":\"denied\"")
            && l.contains("\"uid\":65534")),
        "{audit:?}"
    );
    drop(h);

    let h = Helper::start(&["--allow-uid", "65534"]);
    open_to_everyone(&h);
    assert_eq!(client_as(&h.sock, NOBODY, NOBODY), 11);
    drop(h);

    let h = Helper::start(&["--allow-group", "65534"]);
    open_to_everyone(&h);
    assert_eq!(client_as(&h.sock, NOBODY, NOBODY), 11);
    // Another uid whose primary group is not listed is still refused.
    assert_eq!(client_as(&h.sock, NOBODY, 65533), 10);
}

// Every connection once counted against one cap, so idle connections of one peer locked
// everyone else out; now an idle one gives way, and only running operations hold slots.
#[test]
fn an_idle_connection_gives_way_and_only_running_operations_make_others_busy() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-hang", "nvidia-smi");
    let h = Helper::start_in(
        dir,
        &[
            "--max-connections",
            "2",
            "--nvidia-smi",
            smi.to_str().unwrap(),
            "--nvidia-smi-timeout",
            "3",
        ],
    );
    let mut a = h.client();
    let mut b = h.client();
    // A third peer: the oldest idle connection (a) is closed to make room.
    let mut c = h.client();
    match a.recv() {
        Some(ServerFrame::Closing(HelperError::Busy { what })) => {
            assert!(what.contains("make room"), "{what}")
        }
        other => panic!("{other:?}"),
    }
    b.request(1, Operation::Ping).unwrap();
    c.request(1, Operation::Ping).unwrap();
    // b and c now run operations (nvidia-smi hangs until its 3 s bound): nobody gives way.
    for (client, bus) in [(&mut b, 0x10), (&mut c, 0x11)] {
        let op = Operation::SetPersistence {
            gpu: format!("0000:{bus:02x}:00.0").parse().unwrap(),
            enabled: true,
        };
        client.send(&ClientFrame::Request(Request { id: 7, op }));
    }
    std::thread::sleep(Duration::from_millis(300));
    // A fourth peer waits in the kernel's backlog (not as a task or a descriptor of the
    // helper) until a slot can be had, and is then served.
    let asked = Instant::now();
    let mut d = h.client();
    assert!(
        asked.elapsed() >= Duration::from_secs(2),
        "served while every slot ran an operation"
    );
    d.request(2, Operation::Ping).unwrap();
    for client in [&mut b, &mut c] {
        assert!(matches!(client.recv(), Some(ServerFrame::Response(_))));
    }
}

#[test]
fn one_uid_cannot_take_every_slot() {
    let h = Helper::start(&["--max-connections", "4", "--max-connections-per-uid", "2"]);
    let mut a = h.client();
    let _b = h.client();
    // Root's third connection makes room among root's own: a goes.
    let mut c = h.client();
    assert!(matches!(
        a.recv(),
        Some(ServerFrame::Closing(HelperError::Busy { .. }))
    ));
    c.request(1, Operation::Ping).unwrap();
}
