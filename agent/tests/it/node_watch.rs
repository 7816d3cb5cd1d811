//! `GET /v1/status?watch=true` on a running `bcd node`: the first document at once, a new
//! one when a hold changes, its own cap of watchers, and the `Allow` of a 405.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::processes::{wait_for, NodeSandbox, Reaped};

fn api(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> serde_json::Value {
    crate::common::processes::api(socket, method, path, body).unwrap()
}

/// Opens a watch; returns the reader past the head and the head's status line.
fn watch(socket: &Path) -> (BufReader<UnixStream>, String) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    stream
        .write_all(b"GET /v1/status?watch=true HTTP/1.1\r\nHost: bcd\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header == "\r\n" || header.is_empty() {
            break;
        }
    }
    (reader, status_line)
}

fn next_document(reader: &mut BufReader<UnixStream>) -> serde_json::Value {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// A `bcd node` in a sandbox in `dir` on the 8-GPU demo host, once its first collection is in:
/// the sandbox, and the node (killed when it is dropped).
fn node_collected(dir: &std::path::Path) -> (NodeSandbox, Reaped) {
    let s = NodeSandbox::new(dir, "hgx-h100");
    let node = Reaped(
        Command::new(env!("CARGO_BIN_EXE_bcd"))
            .args(s.global_args())
            .args(["node", "--api-group", "root"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the first collection", Duration::from_secs(20), || {
        UnixStream::connect(&s.api_sock).is_ok()
            && api(&s.api_sock, "GET", "/v1/status", None)["collections"].as_u64() >= Some(1)
    });
    (s, node)
}

// What broke: a control plane had to poll /v1/status; the seed's node re-sent its status at
// once on a change.
#[test]
fn the_status_watch_streams_a_document_per_change_within_its_own_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _node) = node_collected(dir.path());
    let (mut first, status_line) = watch(&s.api_sock);
    assert!(status_line.starts_with("HTTP/1.1 200"), "{status_line}");
    let doc = next_document(&mut first);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["gpus"].as_array().unwrap().len(), 8);
    let gpu = doc["gpus"][0]["uuid"].as_str().unwrap().to_owned();
    assert_eq!(doc["holds"], serde_json::json!([]));

    api(
        &s.api_sock,
        "POST",
        "/v1/holds",
        Some(serde_json::json!({"id": "job", "devices": [gpu]})),
    );
    let doc = next_document(&mut first);
    assert_eq!(doc["holds"][0]["id"], "job", "{doc}");

    // Seven more take the places; the ninth is refused, the API still answers.
    let mut others: Vec<_> = (0..7).map(|_| watch(&s.api_sock)).collect();
    for (reader, line) in &mut others {
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        next_document(reader);
    }
    let (mut refused, line) = watch(&s.api_sock);
    assert!(line.starts_with("HTTP/1.1 503"), "{line}");
    let mut body = String::new();
    refused.read_to_string(&mut body).unwrap();
    assert!(body.contains("too-many-watchers"), "{body}");
    assert_eq!(
        api(&s.api_sock, "GET", "/v1/status", None)["schema_version"],
        1
    );
    // A watcher that goes away gives its place back.
    drop(others.pop());
    wait_for("a free place", Duration::from_secs(10), || {
        watch(&s.api_sock).1.starts_with("HTTP/1.1 200")
    });

    // A 405 says what the path takes.
    let mut stream = UnixStream::connect(&s.api_sock).unwrap();
    stream
        .write_all(b"PUT /v1/holds HTTP/1.1\r\nHost: bcd\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nallow: get, post\r\n"),
        "{answer}"
    );
}

// What broke: `bcd status` showed one moment; keeping the table on screen took a loop of
// `bcd status` in a shell, which saw a change only at its next poll.
#[test]
fn status_watch_redraws_the_table_on_a_change_and_ends_at_ctrl_c() {
    use std::sync::mpsc;
    let dir = tempfile::tempdir().unwrap();
    let (s, _node) = node_collected(dir.path());
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(s.global_args())
        .args(["status", "--watch", "-i", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watcher.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let row_until = |want: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) if line.starts_with("0  ") && line.contains(want) => return line,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no row of GPU 0 with {want}");
    };
    row_until(" HEALTHY ");
    std::fs::OpenOptions::new()
        .append(true)
        .open(s.host.join("root/dev/kmsg"))
        .unwrap()
        .write_all(b"4,9001,9000000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n")
        .unwrap();
    row_until(" UNHEALTHY ");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(watcher.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = watcher.wait().unwrap();
    assert_eq!(status.code(), Some(0), "Ctrl-C ends it well");
}
