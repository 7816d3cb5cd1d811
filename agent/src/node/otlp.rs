//! OTLP/HTTP export of the GPU samples (`--otlp-endpoint`): every sample interval, one
//! `POST /v1/metrics` of an `ExportMetricsServiceRequest` in protobuf
//! (`application/x-protobuf`), over the node's own small HTTP layer.
//!
//! - **Plain HTTP only.** TLS, authentication and retries belong to a collector or agent on the
//!   same host (an OpenTelemetry Collector on `127.0.0.1:4318`); an `https://` endpoint is
//!   refused when the flag is read, so no one believes metrics leave the host encrypted.
//! - **Never in the way.** The export runs in its own task, reads the latest samples the
//!   sampler left, and gives up on a request after [`EXPORT_TIMEOUT`]. A collector that is
//!   down is logged once when the outage starts and once when it ends, not every interval.
//! - **Encoding.** A hand-written encoder for the handful of messages needed (varints,
//!   length-delimited fields, fixed64), each field number named after
//!   `opentelemetry-proto`'s `.proto` files (`collector/metrics/v1/metrics_service.proto`,
//!   `metrics/v1/metrics.proto`, `common/v1/common.proto`, `resource/v1/resource.proto`),
//!   which the test decodes against.
//!
//! Every metric is a gauge with one data point per GPU, attribute `gpu.uuid`, and the
//! attribution of whoever has the GPU ([`crate::node::attribution`]: `bcd.hold`, `bcd.vm`,
//! `k8s.namespace.name`, `k8s.pod.name`, `k8s.container.name`; none when nobody has it);
//! units follow OTLP's UCUM convention: bytes (`By`), ratios 0..1 (`1`), `Cel`, `W`, `Hz`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bcd_protocol::GpuUuid;

use tokio::net::TcpStream;

use super::readings::Kind;
use crate::node::attribution::Attribution;
use crate::node::http;
use crate::smi::samples::GpuSample;
use crate::sys::host::Host;

/// The bound on one export request, connection included.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of a collector's answer kept: only its status matters, and the start of its
/// body for the log line of a refusal.
pub const MAX_REPLY: usize = 4096;
/// OTLP/HTTP's default port.
pub const DEFAULT_PORT: u16 = 4318;
/// The path metrics are posted to, under the endpoint's base path.
pub const METRICS_PATH: &str = "/v1/metrics";
/// The body's media type.
pub const CONTENT_TYPE: &str = "application/x-protobuf";
/// The instrumentation scope's name, and the resource's `service.name`.
pub const SCOPE: &str = "bcd";
/// The data points' GPU attribute.
pub const GPU_ATTRIBUTE: &str = "gpu.uuid";

/// An `http://host[:port][/base]` endpoint, parsed; the only way to get one is [`FromStr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpEndpoint {
    host: String,
    port: u16,
    path: String,
}

/// Why an `--otlp-endpoint` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// TLS is not spoken here.
    #[error("{0}: bcd sends OTLP over plain HTTP only; run a collector on this host (http://127.0.0.1:4318) and let it speak TLS onwards")]
    Https(String),
    /// Another scheme, or none.
    #[error("{0}: the OTLP endpoint must be an http:// URL, e.g. http://127.0.0.1:4318")]
    Scheme(String),
    /// Something else in it cannot be used.
    #[error("{url}: {why}")]
    Malformed {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl FromStr for OtlpEndpoint {
    type Err = EndpointError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let bad = |why| EndpointError::Malformed {
            url: url.to_owned(),
            why,
        };
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(EndpointError::Https(url.to_owned()));
        }
        if !lower.starts_with("http://") {
            return Err(EndpointError::Scheme(url.to_owned()));
        }
        let rest = &url["http://".len()..];
        if rest.contains(['@', '?', '#', ' ']) {
            return Err(bad(
                "user names, queries and fragments have no place in an OTLP endpoint",
            ));
        }
        let (authority, base) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address must be closed with ]"))?;
            (addr, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("it names no host"));
        }
        let port = match port {
            Some(p) => p
                .parse()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| bad("its port is not a number from 1 to 65535"))?,
            None => DEFAULT_PORT,
        };
        // OTLP/HTTP: a base URL gets the signal's path appended; a full one is kept.
        let base = base.trim_end_matches('/');
        let path = if base.ends_with(METRICS_PATH) {
            base.to_owned()
        } else {
            format!("{base}{METRICS_PATH}")
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            path,
        })
    }
}

impl OtlpEndpoint {
    /// `host:port` as the `Host` header writes it.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path requests go to (`/v1/metrics` under the base path).
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

/// Why one export did not land.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// No connection, or it broke.
    #[error("the OTLP collector at {endpoint} cannot be reached: {source}")]
    Io {
        /// Where.
        endpoint: String,
        /// Why.
        source: std::io::Error,
    },
    /// No answer within [`EXPORT_TIMEOUT`].
    #[error("the OTLP collector at {endpoint} did not answer within {}s", EXPORT_TIMEOUT.as_secs())]
    Timeout {
        /// Where.
        endpoint: String,
    },
    /// It answered with something other than success.
    #[error("the OTLP collector at {endpoint} refused the metrics with HTTP {status}: {body}")]
    Status {
        /// Where.
        endpoint: String,
        /// The status code.
        status: u16,
        /// The start of its answer.
        body: String,
    },
}

/// The resource the metrics describe: this node.
#[derive(Debug, Clone)]
pub struct Resource {
    /// `host.name`, when the host tells it.
    pub host_name: Option<String>,
}

impl Resource {
    /// Reads the host's name from `/proc/sys/kernel/hostname` under the host's root.
    pub fn of_host(host: &Host) -> Self {
        let host_name = std::fs::read_to_string(host.path("/proc/sys/kernel/hostname"))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        Self { host_name }
    }
}

/// A data point's value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(i64),
    Double(f64),
}

/// The healthy gauge's name: 1 when the healthy rule passes, 0 when not.
pub const HEALTHY_METRIC: &str = "bcd.gpu.healthy";

/// Field numbers from opentelemetry-proto, one module per message.
mod field {
    /// `ExportMetricsServiceRequest`.
    pub const REQUEST_RESOURCE_METRICS: u32 = 1;
    /// `ResourceMetrics`.
    pub const RESOURCE_METRICS_RESOURCE: u32 = 1;
    pub const RESOURCE_METRICS_SCOPE_METRICS: u32 = 2;
    /// `Resource`.
    pub const RESOURCE_ATTRIBUTES: u32 = 1;
    /// `ScopeMetrics`.
    pub const SCOPE_METRICS_SCOPE: u32 = 1;
    pub const SCOPE_METRICS_METRICS: u32 = 2;
    /// `InstrumentationScope`.
    pub const SCOPE_NAME: u32 = 1;
    pub const SCOPE_VERSION: u32 = 2;
    /// `Metric`.
    pub const METRIC_NAME: u32 = 1;
    pub const METRIC_DESCRIPTION: u32 = 2;
    pub const METRIC_UNIT: u32 = 3;
    pub const METRIC_GAUGE: u32 = 5;
    /// `Gauge`.
    pub const GAUGE_DATA_POINTS: u32 = 1;
    /// `NumberDataPoint`: `time_unix_nano` is fixed64, `as_double` double, `as_int` sfixed64.
    pub const POINT_TIME_UNIX_NANO: u32 = 3;
    pub const POINT_AS_DOUBLE: u32 = 4;
    pub const POINT_AS_INT: u32 = 6;
    pub const POINT_ATTRIBUTES: u32 = 7;
    /// `KeyValue`.
    pub const KEY_VALUE_KEY: u32 = 1;
    pub const KEY_VALUE_VALUE: u32 = 2;
    /// `AnyValue`.
    pub const ANY_VALUE_STRING: u32 = 1;
}

/// Protobuf wire types.
const WIRE_FIXED64: u64 = 1;
const WIRE_LEN: u64 = 2;

/// A protobuf message being written.
#[derive(Debug, Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u64) {
        self.varint((u64::from(field) << 3) | wire);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, WIRE_LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn message(&mut self, field: u32, write: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        write(&mut inner);
        self.bytes(field, &inner.0);
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, WIRE_FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// A `KeyValue` with a string `AnyValue`.
    fn string_attribute(&mut self, field: u32, key: &str, value: &str) {
        self.message(field, |kv| {
            kv.string(field::KEY_VALUE_KEY, key);
            kv.message(field::KEY_VALUE_VALUE, |v| {
                v.string(field::ANY_VALUE_STRING, value)
            });
        });
    }
}

/// Writes one gauge with a point per GPU that has a value; a gauge without points is left out.
fn gauge(
    metrics: &mut Pb,
    (name, description, unit): (&str, &str, &str),
    points: &[(&str, Value)],
    attribution: &Attribution,
    time_unix_nano: u64,
) {
    if points.is_empty() {
        return;
    }
    metrics.message(field::SCOPE_METRICS_METRICS, |m| {
        m.string(field::METRIC_NAME, name);
        m.string(field::METRIC_DESCRIPTION, description);
        m.string(field::METRIC_UNIT, unit);
        m.message(field::METRIC_GAUGE, |g| {
            for (uuid, value) in points {
                g.message(field::GAUGE_DATA_POINTS, |p| {
                    p.fixed64(field::POINT_TIME_UNIX_NANO, time_unix_nano);
                    match *value {
                        Value::Double(d) => p.fixed64(field::POINT_AS_DOUBLE, d.to_bits()),
                        // sfixed64: the two's complement bits, little-endian.
                        Value::Int(i) => p.fixed64(field::POINT_AS_INT, i as u64),
                    }
                    p.string_attribute(field::POINT_ATTRIBUTES, GPU_ATTRIBUTE, uuid);
                    for (key, value) in attribution.gpu(uuid).otlp() {
                        p.string_attribute(field::POINT_ATTRIBUTES, key, value);
                    }
                });
            }
        });
    });
}

/// Encodes one `ExportMetricsServiceRequest` for `samples`, stamped `at`.
///
/// Guarantees: pure; each metric of the table is a gauge with one point per GPU whose sample
/// has the reading (none when no GPU has it), then `bcd.gpu.healthy` for the GPUs in `healthy`;
/// each point carries the attribution of its GPU.
pub fn encode_request(
    resource: &Resource,
    samples: &[GpuSample],
    healthy: &BTreeMap<GpuUuid, bool>,
    attribution: &Attribution,
    at: SystemTime,
) -> Vec<u8> {
    let nanos = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let mut request = Pb::default();
    request.message(field::REQUEST_RESOURCE_METRICS, |rm| {
        rm.message(field::RESOURCE_METRICS_RESOURCE, |r| {
            r.string_attribute(field::RESOURCE_ATTRIBUTES, "service.name", SCOPE);
            if let Some(name) = &resource.host_name {
                r.string_attribute(field::RESOURCE_ATTRIBUTES, "host.name", name);
            }
        });
        rm.message(field::RESOURCE_METRICS_SCOPE_METRICS, |sm| {
            sm.message(field::SCOPE_METRICS_SCOPE, |s| {
                s.string(field::SCOPE_NAME, SCOPE);
                s.string(field::SCOPE_VERSION, env!("CARGO_PKG_VERSION"));
            });
            for def in super::readings::READINGS {
                let points: Vec<(&str, Value)> = samples
                    .iter()
                    .filter_map(|s| {
                        let v = (def.read)(s)?;
                        let v = match def.kind {
                            // Whole numbers in SI units (bytes, Hz, °C, a count): exact in f64.
                            Kind::Int => Value::Int(v as i64),
                            Kind::Double => Value::Double(v),
                        };
                        Some((s.uuid.as_str(), v))
                    })
                    .collect();
                gauge(
                    sm,
                    (def.otlp.0, def.otlp.1, def.unit),
                    &points,
                    attribution,
                    nanos,
                );
            }
            let points: Vec<(&str, Value)> = healthy
                .iter()
                .map(|(uuid, ok)| (uuid.as_str(), Value::Int(i64::from(*ok))))
                .collect();
            gauge(
                sm,
                (
                    HEALTHY_METRIC,
                    "1 when the GPU passes the healthy rule, 0 when not",
                    "1",
                ),
                &points,
                attribution,
                nanos,
            );
        });
    });
    request.0
}

/// Posts one encoded request within [`EXPORT_TIMEOUT`].
///
/// # Errors
/// [`ExportError`] when the collector cannot be reached, is slow, or answers other than 2xx.
pub async fn send(endpoint: &OtlpEndpoint, body: &[u8]) -> Result<(), ExportError> {
    let name = endpoint.to_string();
    let exchange = async {
        let stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port)).await?;
        http::exchange_with(
            stream,
            "POST",
            &endpoint.authority(),
            &endpoint.path,
            CONTENT_TYPE,
            Some(body),
            MAX_REPLY,
        )
        .await
    };
    let response = tokio::time::timeout(EXPORT_TIMEOUT, exchange)
        .await
        .map_err(|_| ExportError::Timeout {
            endpoint: name.clone(),
        })?
        .map_err(|source| ExportError::Io {
            endpoint: name.clone(),
            source,
        })?;
    if (200..300).contains(&response.status) {
        Ok(())
    } else {
        Err(ExportError::Status {
            endpoint: name,
            status: response.status,
            body: String::from_utf8_lossy(&response.body)
                .chars()
                .take(200)
                .collect(),
        })
    }
}

/// Whether the collector is down, so an outage is logged when it starts and when it ends.
#[derive(Debug, Default)]
struct Outage {
    down: bool,
}

/// What to log after one export.
#[derive(Debug, PartialEq, Eq)]
enum Transition {
    Down,
    Up,
}

impl Outage {
    fn record(&mut self, ok: bool) -> Option<Transition> {
        let was_down = std::mem::replace(&mut self.down, !ok);
        match (was_down, ok) {
            (false, false) => Some(Transition::Down),
            (true, true) => Some(Transition::Up),
            _ => None,
        }
    }
}

/// Exports the samples `read` gives (with each GPU's verdict of the healthy rule and who has
/// each device) every `interval`, for as long as it runs; an interval without samples sends
/// nothing.
pub async fn export_loop<R, RF>(
    resource: Resource,
    read: R,
    endpoint: OtlpEndpoint,
    interval: Duration,
) where
    R: Fn() -> RF,
    RF: std::future::Future<Output = (Vec<GpuSample>, BTreeMap<GpuUuid, bool>, Attribution)>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outage = Outage::default();
    tracing::info!(
        "OTLP: sending GPU metrics to {endpoint} every {}s",
        interval.as_secs()
    );
    loop {
        tick.tick().await;
        let (samples, healthy, attribution) = read().await;
        if samples.is_empty() {
            continue;
        }
        let body = encode_request(
            &resource,
            &samples,
            &healthy,
            &attribution,
            SystemTime::now(),
        );
        let result = send(&endpoint, &body).await;
        match (outage.record(result.is_ok()), result) {
            (Some(Transition::Down), Err(e)) => tracing::warn!(
                "OTLP: {e}; metrics are dropped until it answers (said once per outage)"
            ),
            (Some(Transition::Up), _) => tracing::info!("OTLP: {endpoint} takes metrics again"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_https_is_refused() {
        let e: OtlpEndpoint = "http://127.0.0.1:4318".parse().unwrap();
        assert_eq!(e.to_string(), "http://127.0.0.1:4318/v1/metrics");
        let e: OtlpEndpoint = "http://collector/otlp/".parse().unwrap();
        assert_eq!(e.to_string(), "http://collector:4318/otlp/v1/metrics");
        let e: OtlpEndpoint = "http://[::1]:9000/v1/metrics".parse().unwrap();
        assert_eq!(e.to_string(), "http://[::1]:9000/v1/metrics");
        let err = "https://otel.example:4318"
            .parse::<OtlpEndpoint>()
            .unwrap_err();
        assert!(err.to_string().contains("plain HTTP only"), "{err}");
        assert!(matches!(
            "grpc://x".parse::<OtlpEndpoint>(),
            Err(EndpointError::Scheme(_))
        ));
        assert!("http://x:0".parse::<OtlpEndpoint>().is_err());
        assert!("http://u:p@x".parse::<OtlpEndpoint>().is_err());
    }

    #[test]
    fn an_outage_is_said_once_when_it_starts_and_once_when_it_ends() {
        let mut o = Outage::default();
        assert_eq!(o.record(true), None);
        assert_eq!(o.record(false), Some(Transition::Down));
        assert_eq!(o.record(false), None);
        assert_eq!(o.record(false), None);
        assert_eq!(o.record(true), Some(Transition::Up));
        assert_eq!(o.record(true), None);
    }

    #[tokio::test]
    async fn a_collector_that_is_down_fails_within_the_bound() {
        // A port nobody listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let endpoint: OtlpEndpoint = format!("http://127.0.0.1:{port}").parse().unwrap();
        let err = send(&endpoint, b"").await.unwrap_err();
        assert!(matches!(err, ExportError::Io { .. }), "{err}");
        assert!(err.to_string().contains("cannot be reached"));
    }

    /// A collector on loopback that reads one request's head and answers `reply`, then keeps
    /// the connection open for `hold`; returns the endpoint.
    fn collector(reply: &'static [u8], hold: Duration) -> OtlpEndpoint {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(reply);
            std::thread::sleep(hold);
        });
        format!("http://127.0.0.1:{port}").parse().unwrap()
    }

    // The exporter read the collector's reply to EOF: a collector that keeps the connection
    // open after a complete answer made every export time out.
    #[tokio::test]
    async fn a_reply_with_content_length_is_taken_without_waiting_for_the_close() {
        let endpoint = collector(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/x-protobuf\r\n\r\n\x0a\x00",
            Duration::from_secs(30),
        );
        let started = std::time::Instant::now();
        send(&endpoint, b"x").await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    // The status line was split on spaces and its second word taken: a line that is not
    // HTTP at all passed as a status.
    #[tokio::test]
    async fn a_reply_that_is_not_an_http_status_line_is_refused() {
        let endpoint = collector(b"SSH-2.0 200 hello\r\n\r\n", Duration::ZERO);
        let err = send(&endpoint, b"x").await.unwrap_err();
        assert!(err.to_string().contains("status line"), "{err}");
    }

    // The exporter buffered up to 64 MiB of a reply: a collector's endless answer is cut at
    // a small bound, read only as far as the status needs.
    #[tokio::test]
    async fn a_huge_refusal_is_cut_at_the_small_reply_bound() {
        let mut reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 10000000\r\n\r\n".to_vec();
        reply.extend(std::iter::repeat_n(b'a', 100_000));
        let endpoint = collector(reply.leak(), Duration::from_secs(30));
        let started = std::time::Instant::now();
        let err = send(&endpoint, b"x").await.unwrap_err();
        let ExportError::Status { status, .. } = err else {
            panic!("{err}")
        };
        assert_eq!(status, 400);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn varints_and_fixed64_are_little_endian_protobuf() {
        let mut pb = Pb::default();
        pb.varint(300);
        assert_eq!(pb.0, [0xac, 0x02]);
        let mut pb = Pb::default();
        pb.fixed64(3, 1);
        assert_eq!(pb.0, [0x19, 1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_gpu_without_a_reading_has_no_point() {
        let sample = GpuSample {
            uuid: "GPU-00000061-0000-0000-0000-000000000000".parse().unwrap(),
            memory_total_mib: Some(1),
            memory_used_mib: None,
            memory_reserved_mib: None,
            memory_free_mib: None,
            utilization_gpu_pct: None,
            utilization_memory_pct: None,
            temperature_c: None,
            power_draw_w: None,
            power_limit_w: None,
            clocks_sm_mhz: None,
            clocks_mem_mhz: None,
            pstate: None,
            mig_mode: None,
            clock_events: Default::default(),
            compute_processes: Some(0),
            mig_devices: Vec::new(),
        };
        let body = encode_request(
            &Resource { host_name: None },
            &[sample],
            &BTreeMap::new(),
            &Attribution::new(),
            UNIX_EPOCH,
        );
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("bcd.gpu.memory.total"));
        assert!(text.contains("bcd.gpu.processes"));
        assert!(!text.contains("bcd.gpu.memory.used"));
        assert!(!text.contains(HEALTHY_METRIC));
    }
}
