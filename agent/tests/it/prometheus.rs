//! A real Prometheus server (Debian's `prometheus` package, started here on loopback) scrapes
//! `bcd node` on the 8-GPU fake host every second, and what it stored is read back through its
//! HTTP API: one `bcd_gpu_memory_total_bytes` series per GPU, equal to the fake `nvidia-smi`'s
//! memory total.

use crate::common::processes;

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
    if prometheus_missing() {
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

/// `bcd node` on the 8-GPU demo host with its state in `dir`, metrics on `metrics`, and
/// `extra` node flags.
fn demo_node(dir: &std::path::Path, metrics: &str, extra: &[&str]) -> Reaped {
    Reaped(
        Command::new(env!("CARGO_BIN_EXE_bcd"))
            .arg("--host")
            .arg(repo().join("testdata/hosts/hgx-h100"))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--cdi-dir")
            .arg(dir.join("cdi"))
            .arg("--helper-socket")
            .arg(dir.join("helper.sock"))
            .arg("--api-socket")
            .arg(dir.join("bcd.sock"))
            .args(["node", "--metrics-listen", metrics, "--api-group", "root"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Prometheus scraping `target` every second, its web API on the returned address.
fn prometheus(dir: &std::path::Path, target: &str) -> (Reaped, String) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: bcd\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let web = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .unwrap();
    (Reaped(child), web)
}

/// The series an instant PromQL query returns now (empty while nothing answers).
fn query(web: &str, promql: &str) -> Vec<Value> {
    let mut encoded = String::new();
    for b in promql.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    get(web, &format!("/api/v1/query?query={encoded}"))
        .filter(|(status, _)| *status == 200)
        .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
}

/// Waits until `promql` returns something `done` accepts, and returns that.
fn until(web: &str, promql: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let result = query(web, promql);
        if done(&result) {
            return result;
        }
        assert!(
            started.elapsed() < BOUND,
            "{promql} did not settle within {BOUND:?}; last answer: {result:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Whether the test must return: prometheus is missing (skipped, or failed under CI).
fn prometheus_missing() -> bool {
    bcd_testkit::require(bcd_testkit::Peer::Prometheus).is_none()
}

/// One GPU's readings on the demo host, as its fake `nvidia-smi` gives them
/// (`answers/samples.out`), in dcgm-exporter's units.
struct Demo {
    temperature: &'static str,
    power: &'static str,
    sm_clock: &'static str,
    /// None for GPU 3, in MIG mode (`[N/A]`).
    utilization: Option<&'static str>,
    fb_used: &'static str,
}

const fn demo(
    temperature: &'static str,
    power: &'static str,
    sm_clock: &'static str,
    utilization: Option<&'static str>,
    fb_used: &'static str,
) -> Demo {
    Demo {
        temperature,
        power,
        sm_clock,
        utilization,
        fb_used,
    }
}

/// The demo host's GPUs, by index.
const DEMO: [Demo; 8] = [
    demo("58", "611.27", "1980", Some("97"), "45123"),
    demo("32", "72.6", "345", Some("0"), "0"),
    demo("33", "75.7", "345", Some("0"), "0"),
    demo("34", "78.8", "345", None, "26"),
    demo("35", "81.9", "345", Some("0"), "0"),
    demo("36", "85", "345", Some("0"), "0"),
    demo("37", "88.1", "345", Some("0"), "0"),
    demo("38", "91.2", "345", Some("0"), "0"),
];

/// Which reading of a GPU a panel shows.
type Pick = fn(&Demo) -> Option<&'static str>;

// Fleets' dashboards query dcgm-exporter's names: bcd served none of them, so NVIDIA's
// dashboard 12239 showed nothing. Its five GPU panels' queries now answer one series per GPU,
// labelled as dcgm-exporter labels them, with the fake nvidia-smi's values.
#[test]
fn the_queries_of_dashboard_12239_answer_one_series_per_gpu_with_dcgm_exporters_labels() {
    if prometheus_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let _node = demo_node(dir.path(), &metrics, &["--metrics-compat", "dcgm-legacy"]);
    let (_prometheus, web) = prometheus(dir.path(), &metrics);
    let panels: [(&str, Pick); 5] = [
        ("DCGM_FI_DEV_GPU_TEMP", |d| Some(d.temperature)),
        ("DCGM_FI_DEV_POWER_USAGE", |d| Some(d.power)),
        ("DCGM_FI_DEV_SM_CLOCK", |d| Some(d.sm_clock)),
        ("DCGM_FI_DEV_GPU_UTIL", |d| d.utilization),
        ("DCGM_FI_DEV_FB_USED", |d| Some(d.fb_used)),
    ];
    for (name, want) in panels {
        let expected = DEMO.iter().filter(|d| want(d).is_some()).count();
        let promql = format!("{name}{{instance=~\"{metrics}\", gpu=~\"0|1|2|3|4|5|6|7\"}}");
        let series = until(&web, &promql, |r| r.len() == expected);
        let mut gpus: Vec<u32> = Vec::new();
        for s in &series {
            let m = &s["metric"];
            let gpu: u32 = m["gpu"].as_str().unwrap().parse().unwrap();
            gpus.push(gpu);
            let reading = want(&DEMO[gpu as usize]);
            assert_eq!(s["value"][1].as_str(), reading, "{name} of GPU {gpu}: {s}");
            assert!(m["UUID"].as_str().unwrap().starts_with("GPU-"), "{s}");
            assert_eq!(m["device"], format!("nvidia{gpu}"), "{s}");
            assert_eq!(m["modelName"], "NVIDIA H100 80GB HBM3", "{s}");
            assert_eq!(m["Hostname"], "hgx-h100-demo", "{s}");
            assert!(
                m["pci_bus_id"].as_str().unwrap().starts_with("00000000:"),
                "{s}"
            );
            assert!(m.get("hold").is_none(), "nobody has GPU {gpu}: {s}");
        }
        gpus.sort_unstable();
        gpus.dedup();
        assert_eq!(gpus.len(), expected, "one series per GPU: {series:?}");
    }
}

/// Runs `bcd hold ARGS...` against the node's API socket in `dir`.
fn hold(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--api-socket")
        .arg(dir.join("bcd.sock"))
        .arg("hold")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bcd hold {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// Nothing in the metrics said who had a GPU. A hold's id now shows on its GPU's series, in
// both naming schemes, and goes when the hold is released; other GPUs never carry it.
#[test]
fn a_hold_shows_on_its_gpus_series_in_prometheus_and_goes_with_its_release() {
    if prometheus_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let _node = demo_node(dir.path(), &metrics, &["--metrics-compat", "dcgm"]);
    let (_prometheus, web) = prometheus(dir.path(), &metrics);
    let gpu0 = "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b";
    until(&web, "DCGM_FI_DEV_GPU_TEMP", |r| r.len() == 8);
    hold(dir.path(), &["apply", "train-7", gpu0]);
    for promql in [
        "DCGM_FI_DEV_GPU_TEMP{hold=\"train-7\"}",
        "bcd_gpu_temperature_celsius{hold=\"train-7\"}",
        "bcd_gpu_health_state{hold=\"train-7\",state=\"healthy\"}",
    ] {
        let held = until(&web, promql, |r| r.len() == 1);
        let m = &held[0]["metric"];
        let uuid = m.get("UUID").or_else(|| m.get("uuid")).unwrap();
        assert_eq!(uuid, gpu0, "{promql}: {held:?}");
    }
    // The other seven carry no hold.
    until(
        &web,
        "count(DCGM_FI_DEV_GPU_TEMP unless DCGM_FI_DEV_GPU_TEMP{hold!=\"\"})",
        |r| r.first().is_some_and(|s| s["value"][1] == "7"),
    );
    hold(dir.path(), &["release", "train-7"]);
    until(
        &web,
        "DCGM_FI_DEV_GPU_TEMP{hold!=\"\"}",
        <[Value]>::is_empty,
    );
    until(
        &web,
        "bcd_gpu_temperature_celsius{hold!=\"\"}",
        <[Value]>::is_empty,
    );
    let all = until(&web, "DCGM_FI_DEV_GPU_TEMP", |r| r.len() == 8);
    assert!(
        all.iter()
            .all(|s| s["metric"]["hostname"] == "hgx-h100-demo"),
        "{all:?}"
    );
}

/// One scrape of `bcd node` on the demo host with `extra` flags, once it has samples.
fn scrape(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let _node = demo_node(dir.path(), &metrics, extra);
    let started = Instant::now();
    loop {
        if let Some((200, body)) = get(&metrics, "/metrics") {
            if body.contains("bcd_gpu_temperature_celsius") {
                return body;
            }
        }
        assert!(
            started.elapsed() < BOUND,
            "no samples in the metrics within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What `promtool check metrics` says of `text`: its exit status and its findings.
fn promtool(text: &str) -> Option<(i32, String)> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.code().unwrap_or(-1), said))
}

// The text format is checked by Prometheus's own linter: bcd's names pass clean; with
// dcgm-exporter's names on, the only findings are dcgm-exporter's own spellings (camelCase
// labels such as modelName, counters without _total), which dashboards depend on.
#[test]
fn promtool_passes_the_metrics_and_finds_only_dcgm_exporters_own_spellings() {
    if bcd_testkit::require(bcd_testkit::Peer::Promtool).is_none() {
        return;
    }
    let (code, said) = promtool(&scrape(&[])).unwrap();
    assert_eq!(code, 0, "{said}");
    let (code, said) = promtool(&scrape(&["--metrics-compat", "dcgm"])).unwrap();
    assert!(
        code == 0 || code == 3,
        "not a lint finding but an error ({code}): {said}"
    );
    for line in said.lines().filter(|l| !l.trim().is_empty()) {
        let dcgm_spelling = line
            .ends_with("label names should be written in 'snake_case' not 'camelCase'")
            || (line.starts_with("DCGM_FI_")
                && line.ends_with("counter metrics should have \"_total\" suffix"));
        assert!(dcgm_spelling, "{line}\nall findings:\n{said}");
    }
}
