//! A load generator for the node service's API, used by `packaging/measure-api`:
//!
//! ```text
//! api_load SOCKET CLIENTS SECONDS [PATH]     # CLIENTS threads asking PATH for SECONDS
//! api_load SOCKET CLIENTS -N [PATH]          # ... until N requests in all have answered
//! ```
//!
//! Each client opens a connection per request (the API serves one request per connection),
//! sends `GET PATH`, reads the answer to its end and notes the latency. Prints one line:
//! `requests=N errors=E seconds=S rps=R p50_ms=A p99_ms=B`. Only std: the figure is the
//! service's, not a client library's.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: api_load SOCKET CLIENTS SECONDS|-COUNT [PATH]");
        std::process::exit(2);
    }
    let socket = PathBuf::from(&args[1]);
    let clients: usize = args[2].parse().unwrap_or(64);
    let (duration, total) = match args[3].strip_prefix('-') {
        Some(n) => (None, n.parse::<u64>().unwrap_or(50_000)),
        None => (
            Some(Duration::from_secs(args[3].parse().unwrap_or(20))),
            u64::MAX,
        ),
    };
    let path = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| "/v1/status".to_owned());
    let request = format!("GET {path} HTTP/1.1\r\nHost: bcd\r\n\r\n").into_bytes();
    let issued = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (socket, request) = (socket.clone(), request.clone());
            let (issued, errors) = (issued.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut answer = Vec::with_capacity(64 * 1024);
                loop {
                    if duration.is_some_and(|d| started.elapsed() >= d)
                        || issued.fetch_add(1, Ordering::Relaxed) >= total
                    {
                        return latencies;
                    }
                    let t = Instant::now();
                    answer.clear();
                    let ok = UnixStream::connect(&socket)
                        .and_then(|mut s| {
                            s.write_all(&request)?;
                            s.read_to_end(&mut answer)
                        })
                        .is_ok_and(|_| answer.starts_with(b"HTTP/1.1 200"));
                    if ok {
                        latencies.push(t.elapsed());
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut all: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap_or_default())
        .collect();
    let seconds = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "requests={} errors={} seconds={seconds:.1} rps={:.0} p50_ms={:.2} p99_ms={:.2}",
        all.len(),
        errors.load(Ordering::Relaxed),
        all.len() as f64 / seconds,
        pct(0.50),
        pct(0.99)
    );
}
