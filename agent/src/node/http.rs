//! A deliberately small HTTP/1.1 layer for the node service's API on a Unix socket (and the
//! metrics listener): one request per connection, bounded head and body, a deadline on
//! reading, JSON in and out. Enough for `curl --unix-socket` and bcd's own client; nothing
//! else is needed on a socket only the `bcd` group can reach.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request body.
pub const MAX_BODY: usize = 1024 * 1024;
/// The whole request must arrive within this.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, `DELETE`, ...
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The query string, without `?`.
    pub query: String,
    /// The body (empty without `Content-Length`).
    pub body: Vec<u8>,
}

/// Why a request could not be read; each maps to a status code.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The head or body is malformed.
    #[error("bad request: {0}")]
    Bad(String),
    /// The head or body is too long.
    #[error("request too large")]
    TooLarge,
    /// It did not arrive in time.
    #[error("request not received within {}s", REQUEST_DEADLINE.as_secs())]
    Timeout,
    /// The peer went away.
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
}

impl HttpError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Bad(_) | HttpError::Io(_) => 400,
            HttpError::TooLarge => 413,
            HttpError::Timeout => 408,
        }
    }
}

/// Reads one request within [`REQUEST_DEADLINE`].
///
/// # Errors
/// [`HttpError`] for anything that is not a small, well-formed HTTP/1.x request.
pub async fn read_request<R: AsyncRead + Unpin>(reader: R) -> Result<Request, HttpError> {
    tokio::time::timeout(REQUEST_DEADLINE, read_request_inner(reader))
        .await
        .map_err(|_| HttpError::Timeout)?
}

async fn next_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    line: &mut String,
) -> Result<usize, HttpError> {
    line.clear();
    // A line longer than the head limit is cut there and refused by the caller.
    let mut limited = reader.take(MAX_HEAD as u64 + 1);
    Ok(limited.read_line(line).await?)
}

async fn read_request_inner<R: AsyncRead + Unpin>(reader: R) -> Result<Request, HttpError> {
    let mut reader = BufReader::new(reader.take((MAX_HEAD + MAX_BODY) as u64));
    let mut head_len = 0usize;
    let mut line = String::new();
    let n = next_line(&mut reader, &mut line).await?;
    head_len += n;
    let mut parts = line.trim_end().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Bad(
            "the request line is not METHOD PATH HTTP/1.1".into(),
        ));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(HttpError::Bad(
            "the request line is not METHOD PATH HTTP/1.1".into(),
        ));
    }
    let (method, target) = (method.to_owned(), target.to_owned());
    let mut content_length = 0usize;
    loop {
        let n = next_line(&mut reader, &mut line).await?;
        head_len += n;
        if head_len > MAX_HEAD {
            return Err(HttpError::TooLarge);
        }
        if n == 0 {
            return Err(HttpError::Bad("the headers did not end".into()));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(HttpError::Bad(format!(
                "malformed header {:?}",
                header.chars().take(64).collect::<String>()
            )));
        };
        if name.eq_ignore_ascii_case("content-length") {
            content_length = value
                .trim()
                .parse()
                .map_err(|_| HttpError::Bad("Content-Length is not a number".into()))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::Bad(
                "chunked bodies are not accepted; send Content-Length".into(),
            ));
        }
    }
    if content_length > MAX_BODY {
        return Err(HttpError::TooLarge);
    }
    let mut body = vec![0u8; content_length];
    reader.read_exact(&mut body).await?;
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (target, String::new()),
    };
    Ok(Request {
        method,
        path,
        query,
        body,
    })
}

/// The reason phrase of the status codes bcd answers with.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Writes a whole response and closes the exchange.
///
/// # Errors
/// The socket's errors.
pub async fn write_response<W: AsyncWrite + Unpin>(
    mut writer: W,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    writer.write_all(head.as_bytes()).await?;
    writer.write_all(body).await?;
    writer.flush().await?;
    writer.shutdown().await
}

/// A response read by the client.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

/// Sends one request and reads the whole response (the server closes after it).
///
/// # Errors
/// The socket's errors, and a malformed response as `InvalidData`.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    exchange_with(stream, method, "bcd", path, "application/json", body).await
}

/// [`exchange`] with a `Host` header and a body type of the caller's: the OTLP exporter's
/// request to a collector, which routes on neither but should see honest headers.
///
/// # Errors
/// The socket's errors, and a malformed response as `InvalidData`.
pub async fn exchange_with<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    method: &str,
    host: &str,
    path: &str,
    content_type: &str,
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    let body = body.unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await?;
    let mut raw = Vec::new();
    stream
        .take((MAX_HEAD + 64 * MAX_BODY) as u64)
        .read_to_end(&mut raw)
        .await?;
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| invalid("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| invalid("headers are not UTF-8"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("no status code"))?;
    Ok(Response {
        status,
        body: raw[split + 4..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_round_trips() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let serve = tokio::spawn(async move {
            let (r, w) = tokio::io::split(server);
            let req = read_request(r).await.unwrap();
            assert_eq!(req.method, "POST");
            assert_eq!(req.path, "/v1/holds");
            assert_eq!(req.query, "x=1");
            assert_eq!(req.body, b"{\"id\":\"a\"}");
            write_response(w, 201, "application/json", b"{}")
                .await
                .unwrap();
        });
        let resp = exchange(client, "POST", "/v1/holds?x=1", Some(b"{\"id\":\"a\"}"))
            .await
            .unwrap();
        assert_eq!(resp.status, 201);
        assert_eq!(resp.body, b"{}");
        serve.await.unwrap();
    }

    #[tokio::test]
    async fn oversized_and_malformed_requests_are_refused() {
        let big = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert!(matches!(
            read_request(big.as_bytes()).await,
            Err(HttpError::TooLarge)
        ));
        let long_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(
            read_request(long_head.as_bytes()).await,
            Err(HttpError::TooLarge)
        ));
        assert!(matches!(
            read_request(&b"GARBAGE\r\n\r\n"[..]).await,
            Err(HttpError::Bad(_))
        ));
        let chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(matches!(
            read_request(chunked.as_bytes()).await,
            Err(HttpError::Bad(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_request_times_out() {
        let (_client, server) = tokio::io::duplex(1024);
        assert!(matches!(
            read_request(server).await,
            Err(HttpError::Timeout)
        ));
    }
}
