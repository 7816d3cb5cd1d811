//! The socket side against real peers: `--listen`, socket activation through the real
//! `systemd-socket-activate`, a peer of another uid, the connection cap and usage errors.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bcd_protocol::frame::{decode_frame, encode};
use bcd_protocol::{
    ClientFrame, GpuRef, HelperError, Operation, OperationKind, Outcome, Request, ServerFrame,
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
    assert_eq!(answer.operations, OperationKind::ALL.to_vec());
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
    let activate = Path::new("/usr/bin/systemd-socket-activate");
    if !activate.exists() {
        eprintln!("skipped: {} is not installed", activate.display());
        return;
    }
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
        .env("BCD_HELPER_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_listening(&sock, Duration::from_secs(10));
    let mut c = RawClient::connect(&sock);
    c.hello();
    let gpu: GpuRef = "0000:18:00.0".parse().unwrap();
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
        eprintln!("skipped: changing to another uid needs root");
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

#[test]
fn connections_beyond_the_cap_are_told_busy() {
    let h = Helper::start(&["--max-connections", "2"]);
    let mut a = h.client();
    let mut b = h.client();
    let mut c = h.connect();
    match c.recv() {
        Some(ServerFrame::Closing(HelperError::Busy { what })) => {
            assert!(what.contains('2'), "{what}")
        }
        other => panic!("{other:?}"),
    }
    assert!(c.closed());
    a.request(1, Operation::Ping).unwrap();
    b.request(1, Operation::Ping).unwrap();
    drop(a);
    // A freed slot serves again.
    let start = Instant::now();
    loop {
        let mut d = h.connect();
        d.send(&ClientFrame::Hello {
            version: PROTOCOL_VERSION,
        });
        if let Some(ServerFrame::Hello(Ok(_))) = d.recv() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
}
