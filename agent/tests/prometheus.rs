//! A real Prometheus server (Debian's `prometheus` package, started here on loopback) scrapes
//! `bcd node` on the 8-GPU fake host every second, and what it stored is read back through its
//! HTTP API: one `bcd_gpu_memory_total_bytes` series per GPU, equal to the fake `nvidia-smi`'s
//! memory total.

#[path = "common/processes.rs"]
#[allow(dead_code)]
mod processes;

use processes::{free_port, repo, Reaped};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The hgx-h100 host's memory total: 81559 MiB per GPU (`answers/samples.out`).
const MEMORY_TOTAL_BYTES: &str = "85520809984";
/// How long Prometheus may take to start, scrape and answer with every GPU.
const BOUND: Duration = Duration::from_secs(60);

/// One HTTP/1.0 GET (so the answer is never chunked), or `None` where nothing answers yet.
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

#[test]
fn prometheus_scrapes_the_node_and_reads_back_each_gpu() {
    if !Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: prometheus is not installed (Debian package prometheus)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cdi = dir.path().join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    let metrics = free_port();
    let _node = Reaped(
        Command::new(env!("CARGO_BIN_EXE_bcd"))
            .arg("--host")
            .arg(repo().join("testdata/hosts/hgx-h100"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--cdi-dir")
            .arg(&cdi)
            // No helper: the service runs on without one, and metrics do not need it.
            .arg("--helper-socket")
            .arg(dir.path().join("helper.sock"))
            .arg("--api-socket")
            .arg(dir.path().join("bcd.sock"))
            .args(["node", "--metrics-listen", &metrics, "--api-group", "root"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: bcd\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let web = free_port();
    let log = dir.path().join("prometheus.log");
    let _prometheus = Reaped(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );

    let started = Instant::now();
    let mut last = String::from("no answer");
    let series = loop {
        if let Some((200, body)) = get(&web, "/api/v1/query?query=bcd_gpu_memory_total_bytes") {
            let answer: Value = serde_json::from_str(&body).unwrap();
            let result = answer["data"]["result"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if result.len() == 8 {
                break result;
            }
            last = body;
        }
        if started.elapsed() > BOUND {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = said.lines().rev().take(15).collect();
            panic!(
                "Prometheus had not stored 8 series within {BOUND:?}; last answer: {last}\n\
                 its log, last lines first:\n{}",
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    };

    let mut uuids: Vec<&str> = series
        .iter()
        .map(|s| s["metric"]["uuid"].as_str().unwrap())
        .collect();
    uuids.sort_unstable();
    uuids.dedup();
    assert_eq!(uuids.len(), 8, "one series per GPU: {series:?}");
    for s in &series {
        assert_eq!(s["metric"]["job"], "bcd", "{s}");
        assert!(
            s["metric"]["uuid"].as_str().unwrap().starts_with("GPU-"),
            "{s}"
        );
        assert_eq!(s["value"][1], MEMORY_TOTAL_BYTES, "{s}");
    }
    // The scrape itself succeeded (up is 1), so nothing above came from a stale sample.
    let (_, up) = get(&web, "/api/v1/query?query=up").unwrap();
    let up: Value = serde_json::from_str(&up).unwrap();
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up}");
}

// What broke: on a host whose nvidia-smi hangs, the metrics said `bcd_gpu_healthy 1` and had
// no `bcd_nvidia_smi_success` series, so no alert could fire. Scraped directly, no Prometheus.
#[test]
fn a_wedged_nvidia_smi_is_never_healthy_in_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let _node = Reaped(
        Command::new(env!("CARGO_BIN_EXE_bcd"))
            .arg("--host")
            .arg(repo().join("testdata/hosts/wedged"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--cdi-dir")
            .arg(dir.path().join("cdi"))
            .arg("--helper-socket")
            .arg(dir.path().join("helper.sock"))
            .arg("--api-socket")
            .arg(dir.path().join("bcd.sock"))
            .args(["node", "--metrics-listen", &metrics, "--api-group", "root"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let uuid = "GPU-940af793-c02c-d660-3221-9bbb6e5e0bfa";
    // The first collection waits out nvidia-smi's 30 s bound; every scrape until then and
    // after must not call the GPU healthy.
    let started = Instant::now();
    let text = loop {
        if let Some((200, body)) = get(&metrics, "/metrics") {
            assert!(
                !body.contains(&format!("bcd_gpu_healthy{{uuid=\"{uuid}\"}} 1")),
                "{body}"
            );
            if body.contains("bcd_nvidia_smi_success{query=\"-q -x\"} 0") {
                break body;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no failed -q -x in the metrics within 60 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        text.contains(&format!("bcd_gpu_healthy{{uuid=\"{uuid}\"}} 0")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "bcd_gpu_health_state{{uuid=\"{uuid}\",state=\"unknown\"}} 1"
        )),
        "{text}"
    );
    assert!(
        text.contains("bcd_nvidia_smi_duration_seconds{query=\"-q -x\"}"),
        "{text}"
    );
    assert!(text.contains("# TYPE bcd_xid_total counter"), "{text}");
}
