//! `bcd node` when its resources run out or its inputs misbehave, each started on a copy of a
//! fake host without a helper: half-open connections under a lowered file descriptor limit,
//! large bodies, malformed requests, a second node on the same data folder, state files that
//! are not files, degraded inputs in `status`, and nvidia-smi children of a killed node.
//! Floods are bounded and stay on Unix sockets and loopback.

use crate::common::processes;

use processes::{copy_host, free_port, wait_for, Reaped};
use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One node's folders.
struct Rig {
    _dir: tempfile::TempDir,
    host: PathBuf,
    data: PathBuf,
    cdi: PathBuf,
    api: PathBuf,
    log: PathBuf,
}

impl Rig {
    fn new(host: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let copy = copy_host(dir.path(), host);
        let cdi = dir.path().join("cdi");
        std::fs::create_dir_all(&cdi).unwrap();
        Self {
            host: copy,
            data: dir.path().join("data"),
            cdi,
            api: dir.path().join("bcd.sock"),
            log: dir.path().join("node.log"),
            _dir: dir,
        }
    }

    /// `bcd node` on this rig with `extra` arguments, its stderr in `self.log`, its file
    /// descriptor limit lowered to `nofile` when given (set in the child before it runs).
    fn node(&self, extra: &[&str], nofile: Option<u64>) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bcd"));
        cmd.arg("--host")
            .arg(&self.host)
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--cdi-dir")
            .arg(&self.cdi)
            .arg("--helper-socket")
            .arg(self.host.join("no-helper.sock"))
            .arg("--api-socket")
            .arg(&self.api)
            .args(["node", "--api-group", "root"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap());
        if let Some(limit) = nofile {
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: setrlimit is async-signal-safe, allocates nothing and touches only the
            // child.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        cmd
    }

    fn start(&self, extra: &[&str], nofile: Option<u64>) -> Reaped {
        let node = Reaped(self.node(extra, nofile).spawn().unwrap());
        wait_for("the first collection", Duration::from_secs(30), || {
            status(&self.api).is_some_and(|s| s["collections"].as_u64() >= Some(1))
        });
        node
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// One raw exchange on the API socket: the status code and the body.
fn raw(socket: &Path, request: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(request).ok()?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).ok()?;
    parse_answer(&answer)
}

fn parse_answer(answer: &[u8]) -> Option<(u16, Vec<u8>)> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..split]).ok()?;
    let code = head.get(9..12)?.parse().ok()?;
    Some((code, answer[split + 4..].to_vec()))
}

fn status(socket: &Path) -> Option<Value> {
    let (code, body) = raw(socket, b"GET /v1/status HTTP/1.1\r\nHost: bcd\r\n\r\n")?;
    (code == 200).then(|| serde_json::from_slice(&body).ok())?
}

fn proc_field(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// The process's own CPU time (utime + stime), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

const XID_48: &[u8] = b"4,9001,9000000000,-;NVRM: Xid (PCI:0000:18:00): 48, pid=1234, name=python, An uncorrectable double bit error.\n";

// With the fd limit reached by half-open connections, the accept loops spun (91k accept4 in
// 3 s, a core and more) and an Xid 48 was never saved to faults.json.
#[test]
fn half_open_connections_under_a_low_fd_limit_neither_spin_nor_lose_an_xid() {
    let rig = Rig::new("hgx-h100");
    let metrics = free_port();
    let node = rig.start(&["--metrics-listen", &metrics], Some(64));
    let pid = node.0.id();

    // More than the limit leaves: the API's and the metrics' caps together exceed it.
    let mut held = Vec::new();
    for _ in 0..120 {
        if let Ok(s) = UnixStream::connect(&rig.api) {
            held.push(Box::new(s) as Box<dyn Send>);
        }
    }
    for _ in 0..40 {
        if let Ok(s) = std::net::TcpStream::connect(&metrics) {
            held.push(Box::new(s) as Box<dyn Send>);
        }
    }
    // Long enough for the node to take what it can and run out.
    std::thread::sleep(Duration::from_millis(500));
    let ticks0 = cpu_ticks(pid);
    let t0 = Instant::now();
    std::fs::OpenOptions::new()
        .append(true)
        .open(rig.host.join("root/dev/kmsg"))
        .unwrap()
        .write_all(XID_48)
        .unwrap();
    // Within the request deadline, so the held connections still hold their descriptors.
    wait_for("the XID in faults.json", Duration::from_secs(4), || {
        std::fs::read_to_string(rig.data.join("faults.json")).is_ok_and(|t| t.contains("Xid48"))
    });
    std::thread::sleep(Duration::from_secs(2).saturating_sub(t0.elapsed()));
    let hz = 100.0; // USER_HZ on Linux
    let busy = (cpu_ticks(pid) - ticks0) as f64 / hz / t0.elapsed().as_secs_f64();
    assert!(
        busy < 0.3,
        "the starved node used {:.0} % of a core",
        busy * 100.0
    );
    let log = rig.log_text();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("the API socket") && l.contains("cannot accept"))
            .count(),
        1,
        "one log line per episode: {log}"
    );

    // Once the flood goes, the node answers again and the XID is in status.
    drop(held);
    wait_for("status after the flood", Duration::from_secs(15), || {
        status(&rig.api).is_some_and(|s| s.to_string().contains("Xid48"))
    });
    // The episode is over once accepting has worked for a while (a moment's free descriptor
    // under a flood does not end it).
    wait_for(
        "the end of the episode in the log",
        Duration::from_secs(15),
        || {
            let _ = status(&rig.api);
            rig.log_text().contains("accepting connections again")
        },
    );
}

// 200 connections sending 1 MiB bodies took the node's RSS from 8.5 MB to 215 MB: each body
// was accepted and read into a buffer of its declared size.
#[test]
fn two_hundred_one_mib_bodies_leave_the_node_small() {
    let rig = Rig::new("hgx-h100");
    let node = rig.start(&[], None);
    let pid = node.0.id();
    let before = proc_field(pid, "VmRSS:");
    let body = std::sync::Arc::new(vec![b'x'; 1 << 20]);
    let go = std::sync::Arc::new(std::sync::Barrier::new(200));
    let threads: Vec<_> = (0..200)
        .map(|_| {
            let (api, body, go) = (rig.api.clone(), body.clone(), go.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let conn = UnixStream::connect(&api);
                    go.wait();
                    let Ok(mut s) = conn else { return };
                    let head = format!(
                        "POST /v1/holds HTTP/1.1\r\nHost: bcd\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(head.as_bytes());
                    let _ = s.write_all(&body);
                    let mut answer = Vec::new();
                    let _ = s.read_to_end(&mut answer);
                })
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let peak = proc_field(pid, "VmHWM:");
    assert!(
        peak < before + 24 * 1024,
        "RSS went from {before} kB to a peak of {peak} kB"
    );
    let (code, body) = raw(
        &rig.api,
        b"POST /v1/holds HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n",
    )
    .unwrap();
    assert_eq!(code, 413);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "body-too-large");
}

// Errors of the HTTP layer had no "code" (and the metrics listener's were text); a duplicate
// Content-Length was accepted; the vfio and vm paths answered 404 to a wrong method where the
// others answered 405.
#[test]
fn every_error_is_json_with_code_and_message_and_wrong_methods_are_405() {
    let rig = Rig::new("hgx-h100");
    let metrics = free_port();
    let _node = rig.start(&["--metrics-listen", &metrics], None);
    let cases: [(&[u8], u16, &str); 7] = [
        (b"GARBAGE\r\n\r\n", 400, "bad-request"),
        (
            b"POST /v1/holds HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
            400,
            "bad-request",
        ),
        (
            b"GET /v1/vfio/bind HTTP/1.1\r\n\r\n",
            405,
            "method-not-allowed",
        ),
        (
            b"GET /v1/vm/start HTTP/1.1\r\n\r\n",
            405,
            "method-not-allowed",
        ),
        (
            b"PUT /v1/holds/job1 HTTP/1.1\r\n\r\n",
            405,
            "method-not-allowed",
        ),
        (b"GET /v1/nothing HTTP/1.1\r\n\r\n", 404, "not-found"),
        (
            b"DELETE /v1/status HTTP/1.1\r\n\r\n",
            405,
            "method-not-allowed",
        ),
    ];
    for (request, want, code) in cases {
        let (got, body) = raw(&rig.api, request).unwrap();
        let shown = String::from_utf8_lossy(request);
        assert_eq!(got, want, "{shown}");
        let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{shown}: {e}"));
        assert_eq!(v["code"], code, "{shown}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    for (request, want) in [
        (&b"POST /metrics HTTP/1.1\r\n\r\n"[..], 405),
        (b"GET /nothing HTTP/1.1\r\n\r\n", 404),
        (b"junk\r\n\r\n", 400),
    ] {
        let mut s = std::net::TcpStream::connect(&metrics).unwrap();
        s.write_all(request).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        let (got, body) = parse_answer(&answer).unwrap();
        assert_eq!(got, want);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v["code"].is_string() && v["message"].is_string(), "{v}");
    }
}

fn wait_exit(child: &mut std::process::Child, bound: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            started.elapsed() < bound,
            "the process did not end within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// A second node on the same socket and data folder started silently: the stale one deleted
// a fresh hold's spec, and stopping it removed the live node's socket.
#[test]
fn a_second_node_on_the_same_data_folder_is_refused_naming_the_first() {
    let rig = Rig::new("hgx-h100");
    let first = rig.start(&[], None);
    let mut second = rig.node(&[], None).stderr(Stdio::piped()).spawn().unwrap();
    let status = wait_exit(&mut second, Duration::from_secs(10));
    let mut stderr = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("another bcd node (pid {})", first.0.id())),
        "{stderr}"
    );
    assert!(status_ok(&rig.api), "the first node's socket is untouched");

    // Another data folder, the same socket: the live socket is not taken over.
    let (status, stderr) = node_on_the_same_socket(&rig);
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("another process listens on it"), "{stderr}");
    assert!(status_ok(&rig.api), "the first node's socket is untouched");

    // Its own socket, the node removes when it stops.
    let mut first = first;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_exit(&mut first.0, Duration::from_secs(25)).success());
    assert!(!rig.api.exists(), "a node removes the socket it made");
}

// What broke: a second node with its own data folder but the first's CDI folder rebuilt the
// first node's holds into its own holds.json before it failed on the taken API socket.
#[test]
fn a_node_refused_for_a_taken_socket_changes_no_state_first() {
    let rig = Rig::new("hgx-h100");
    let _first = rig.start(&[], None);
    let apply = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--api-socket")
        .arg(&rig.api)
        .args([
            "hold",
            "apply",
            "job1",
            "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b",
        ])
        .output()
        .unwrap();
    assert!(apply.status.success(), "{apply:?}");
    let specs_before: Vec<_> = std::fs::read_dir(&rig.cdi)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!specs_before.is_empty());

    let other_data = rig.data.with_file_name("other-data");
    let (status, stderr) = node_on_the_same_socket(&rig);
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("another process listens on it"), "{stderr}");
    // Nothing but its instance lock was made.
    let kept: Vec<String> = std::fs::read_dir(&other_data)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(kept.iter().all(|n| n == ".lock"), "{kept:?}");
    let specs_after: Vec<_> = std::fs::read_dir(&rig.cdi)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(specs_after, specs_before);
    assert!(status_ok(&rig.api), "the first node's socket is untouched");
}

/// A second `bcd node` on `rig`'s host, CDI folder and API socket with a data folder of its
/// own (`other-data` beside the rig's): how it exited (within 30 s) and what it said.
fn node_on_the_same_socket(rig: &Rig) -> (std::process::ExitStatus, String) {
    let mut node = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--host")
        .arg(&rig.host)
        .arg("--data-dir")
        .arg(rig.data.with_file_name("other-data"))
        .arg("--cdi-dir")
        .arg(&rig.cdi)
        .arg("--api-socket")
        .arg(&rig.api)
        .arg("--helper-socket")
        .arg(rig.host.join("no-helper.sock"))
        .args(["node", "--api-group", "root"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut node, Duration::from_secs(30));
    let mut stderr = String::new();
    node.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

fn status_ok(socket: &Path) -> bool {
    status(socket).is_some()
}

// Stopping a node removed whatever socket was at its path, even one another node had made.
#[test]
fn stopping_a_node_leaves_a_socket_it_did_not_create() {
    let rig = Rig::new("hgx-h100");
    let mut node = rig.start(&[], None);
    std::fs::remove_file(&rig.api).unwrap();
    let _other = std::os::unix::net::UnixListener::bind(&rig.api).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(node.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_exit(&mut node.0, Duration::from_secs(25)).success());
    assert!(
        std::fs::symlink_metadata(&rig.api).is_ok(),
        "the other socket was removed"
    );
    assert!(rig
        .log_text()
        .contains("no longer the socket this node created"));
}

// A FIFO in place of holds.json, faults.json or gpus-seen.json hung the node at start with
// no log line; it starts, says what is wrong in status, and leaves the FIFOs where they are.
#[test]
fn fifos_in_place_of_the_state_files_do_not_hang_the_start() {
    let rig = Rig::new("hgx-h100");
    std::fs::create_dir_all(&rig.data).unwrap();
    let names = ["holds.json", "faults.json", "gpus-seen.json"];
    for name in names {
        nix::unistd::mkfifo(
            &rig.data.join(name),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
    }
    let _node = rig.start(&[], None);
    let status = status(&rig.api).unwrap();
    let problems = status["problems"].to_string();
    for name in names {
        assert!(
            problems.contains(&format!("{name} is a FIFO")),
            "{name}: {problems}"
        );
        assert!(std::fs::symlink_metadata(rig.data.join(name))
            .unwrap()
            .file_type()
            .is_fifo());
    }
}

/// The pids of `pid`'s children and their children, from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let mut table = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields[0] != "Z" {
            table.push((p, fields[1].parse::<u32>().unwrap_or(0)));
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            table
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rfind(')').is_some_and(|i| !s[i + 2..].starts_with('Z')))
}

// A node killed with SIGKILL on a wedged host left its hung nvidia-smi children running
// (2 per kill): nothing bounded them any more.
#[test]
fn a_node_killed_on_a_wedged_host_leaves_no_nvidia_smi_running() {
    let rig = Rig::new("wedged");
    let mut node = Reaped(rig.node(&[], None).spawn().unwrap());
    let pid = node.0.id();
    let mut children = Vec::new();
    wait_for("hung nvidia-smi children", Duration::from_secs(15), || {
        children = descendants(pid);
        children.len() >= 2
    });
    // They hang: a second later they are still there.
    std::thread::sleep(Duration::from_secs(1));
    children.retain(|c| running(*c));
    assert!(
        !children.is_empty(),
        "the wedged host's queries did not hang"
    );
    node.0.kill().unwrap();
    node.0.wait().unwrap();
    let started = Instant::now();
    while children.iter().any(|c| running(*c)) {
        if started.elapsed() > Duration::from_secs(5) {
            for c in &children {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*c as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            panic!("children of the killed node still run: {children:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// An unreadable /dev/kmsg showed only as a warning in the log every second, never in
// status.problems; nor did an unreachable helper, an unusable data folder, an unreadable
// vendor CDI spec or sampling fallen back to one-shot queries.
#[test]
fn status_lists_every_degraded_input() {
    let rig = Rig::new("hgx-h100");
    let kmsg = rig.host.join("root/dev/kmsg");
    std::fs::remove_file(&kmsg).unwrap();
    std::fs::create_dir(&kmsg).unwrap();
    std::fs::write(&rig.data, b"not a folder").unwrap();
    std::fs::write(rig.cdi.join("nvidia.json"), b"{ torn").unwrap();
    // A driver that refuses nvidia-smi's loop mode: sampling falls back to one-shot queries.
    std::fs::write(rig.host.join("answers/loop.exit"), b"2\n").unwrap();
    let _node = Reaped(rig.node(&[], None).spawn().unwrap());
    let wanted = [
        "reading XIDs from",
        "the root helper cannot be reached",
        "the data folder",
        "vendor CDI spec",
        "sampling fell back to one-shot",
    ];
    let mut problems = String::new();
    wait_for(
        "every degraded input in status",
        Duration::from_secs(30),
        || {
            problems = status(&rig.api).map_or_else(String::new, |s| s["problems"].to_string());
            wanted.iter().all(|w| problems.contains(w))
        },
    );
    let log = rig.log_text();
    assert!(
        log.matches("reading XIDs from").count() <= 1,
        "the kernel log's failure is logged once, not every second: {log}"
    );
}

// The watchdog is pinged once the node is ready, from the loop that serves (each ping after
// the state locks were taken); READY=1 comes first.
#[test]
fn the_watchdog_is_pinged_from_the_serving_loop_after_ready() {
    let rig = Rig::new("hgx-h100");
    let notify = rig.data.with_file_name("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let _node = Reaped(
        rig.node(&[], None)
            .env("NOTIFY_SOCKET", &notify)
            .env("WATCHDOG_USEC", "400000")
            .spawn()
            .unwrap(),
    );
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while seen
        .iter()
        .filter(|m: &&String| m.contains("WATCHDOG=1"))
        .count()
        < 3
    {
        let n = socket.recv(&mut buf).expect("no notification within 20 s");
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(
        seen[0].starts_with("READY=1"),
        "the first message is READY=1: {seen:?}"
    );
}
