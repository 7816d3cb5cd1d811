//! For tests only: a plain-HTTP stand-in of the API server on loopback, answering each
//! request as the test's function says (a whole body, or an endless one), counting what it
//! was asked and what it wrote. Enough HTTP/1.1 for kube's client: keep-alive, a request
//! body read by its `Content-Length`, answers with a length or chunked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request, as the answer function sees it.
#[derive(Debug, Clone)]
pub struct Asked {
    pub method: String,
    /// The path and query.
    pub target: String,
    /// The `Authorization` header's value.
    pub authorization: Option<String>,
}

/// One answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status and a whole JSON body.
    Full(u16, Vec<u8>),
    /// A 201 whose body is the request's (a write's answer: the object as stored).
    Echo,
    /// A `status` whose chunked body repeats `chunk` until `limit` bytes were written.
    Endless {
        status: u16,
        chunk: Vec<u8>,
        limit: usize,
    },
}

impl Reply {
    /// A status and JSON.
    pub fn json(status: u16, v: &serde_json::Value) -> Self {
        Self::Full(status, v.to_string().into_bytes())
    }

    /// The API server's 401.
    pub fn unauthorized() -> Self {
        Self::json(
            401,
            &serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}),
        )
    }
}

type Answer = dyn Fn(&Asked) -> Reply + Send + Sync;

/// The stand-in: its address, what it was asked, how many body bytes it wrote.
pub struct FakeApi {
    pub url: String,
    pub asked: Arc<Mutex<Vec<Asked>>>,
    pub written: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApi {
    /// Serves `answer` on a loopback port.
    pub async fn start(answer: impl Fn(&Asked) -> Reply + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let written = Arc::new(AtomicUsize::new(0));
        let answer: Arc<Answer> = Arc::new(answer);
        let (a, w) = (asked.clone(), written.clone());
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (answer, a, w) = (answer.clone(), a.clone(), w.clone());
                tokio::spawn(async move {
                    let _ = serve(conn, answer.as_ref(), &a, &w).await;
                });
            }
        });
        Self {
            url,
            asked,
            written,
            task,
        }
    }

    /// A kubeconfig of this server for a user with `user` (a YAML mapping's body, such as
    /// `token: abc`).
    pub fn kubeconfig(&self, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\nusers:\n- name: u\n  user:\n    {user}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            self.url
        )
    }

    /// How many requests' targets contain `part`.
    pub fn count(&self, part: &str) -> usize {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.target.contains(part))
            .count()
    }
}

async fn serve(
    mut conn: tokio::net::TcpStream,
    answer: &Answer,
    asked: &Mutex<Vec<Asked>>,
    written: &AtomicUsize,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut more = [0u8; 4096];
            let n = conn.read(&mut more).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&more[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let mut lines = head.lines();
        let mut first = lines.next().unwrap_or_default().split(' ');
        let method = first.next().unwrap_or_default().to_owned();
        let target = first.next().unwrap_or_default().to_owned();
        let mut length = 0;
        let mut authorization = None;
        for line in lines {
            if let Some((k, v)) = line.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "authorization" => authorization = Some(v.trim().to_owned()),
                    _ => {}
                }
            }
        }
        while buf.len() < end + length {
            let mut more = [0u8; 4096];
            let n = conn.read(&mut more).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&more[..n]);
        }
        let body: Vec<u8> = buf[end..end + length].to_vec();
        buf.drain(..end + length);
        let request = Asked {
            method,
            target,
            authorization,
        };
        asked.lock().unwrap().push(request.clone());
        match answer(&request) {
            Reply::Echo => {
                let head = format!(
                    "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                conn.write_all(head.as_bytes()).await?;
                conn.write_all(&body).await?;
            }
            Reply::Full(status, bytes) => {
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    bytes.len()
                );
                conn.write_all(head.as_bytes()).await?;
                conn.write_all(&bytes).await?;
                written.fetch_add(bytes.len(), Ordering::Relaxed);
            }
            Reply::Endless {
                status,
                chunk,
                limit,
            } => {
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                );
                conn.write_all(head.as_bytes()).await?;
                let mut sent = 0;
                while sent < limit {
                    conn.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                        .await?;
                    conn.write_all(&chunk).await?;
                    conn.write_all(b"\r\n").await?;
                    sent += chunk.len();
                    written.fetch_add(chunk.len(), Ordering::Relaxed);
                }
                conn.write_all(b"0\r\n\r\n").await?;
            }
        }
    }
}
