//! A deliberately small HTTP/1.1 layer for the node service's API on a Unix socket (and the
//! metrics listener): one request per connection, bounded head and body, a deadline on
//! reading, JSON in and out. Enough for `curl --unix-socket` and bcd's own client; nothing
//! else is needed on a socket only the `bcd` group can reach.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request body. The largest the API takes is a hold naming a node's devices, a few
/// KiB; with [`MAX_CONNECTIONS`] connections at once this bounds what requests can make the
/// service hold to a few MiB.
pub const MAX_BODY: usize = 64 * 1024;
/// The whole request must arrive within this.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// The whole answer must be taken within this: a client that does not read cannot keep a
/// connection (and its file descriptor) for longer.
pub const RESPONSE_DEADLINE: Duration = Duration::from_secs(10);
/// Longest answer the CLI's client reads (an inventory of a large node is a few hundred KiB).
pub const MAX_RESPONSE: usize = 16 * 1024 * 1024;
/// Connections one listener serves at once; the rest wait in the kernel's backlog, costing
/// the service nothing.
pub const MAX_CONNECTIONS: usize = 64;

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
    /// The head is too long.
    #[error("the request head is longer than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// The declared body is too long; it was not read.
    #[error("the request body ({declared} bytes) is longer than the {MAX_BODY} bytes this service takes")]
    BodyTooLarge {
        /// What `Content-Length` said.
        declared: u64,
    },
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
            HttpError::HeadTooLarge => 431,
            HttpError::BodyTooLarge { .. } => 413,
            HttpError::Timeout => 408,
        }
    }

    /// The error body's `code`.
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::Bad(_) | HttpError::Io(_) => "bad-request",
            HttpError::HeadTooLarge => "head-too-large",
            HttpError::BodyTooLarge { .. } => "body-too-large",
            HttpError::Timeout => "request-timeout",
        }
    }
}

/// An error body: `{"code": "<kind>", "message": "<sentence>"}`, the one shape every error of
/// the API and the metrics listener has.
pub fn error_body(code: &str, message: &str) -> Vec<u8> {
    serde_json::json!({ "code": code, "message": message })
        .to_string()
        .into_bytes()
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

/// Reads one line of the head into `line`, at most `left` bytes of it; the caller refuses a
/// line that did not end there.
async fn next_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    left: usize,
) -> Result<usize, HttpError> {
    line.clear();
    let mut limited = reader.take(left as u64 + 1);
    Ok(limited.read_until(b'\n', line).await?)
}

/// The head's line as text, without its line end.
fn header_text(line: &[u8]) -> Result<&str, HttpError> {
    std::str::from_utf8(line)
        .map(|l| l.trim_end_matches(['\r', '\n']))
        .map_err(|_| HttpError::Bad("the request head is not UTF-8".into()))
}

/// The request line `METHOD TARGET HTTP/1.x`, split on single spaces as RFC 9112 writes it.
fn request_line(line: &str) -> Result<(&str, &str), HttpError> {
    let bad = || HttpError::Bad("the request line is not METHOD PATH HTTP/1.1".into());
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_uppercase());
    if !token(method) || !target.starts_with('/') || !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(bad());
    }
    Ok((method, target))
}

async fn read_request_inner<R: AsyncRead + Unpin>(reader: R) -> Result<Request, HttpError> {
    let mut reader = BufReader::with_capacity(4096, reader);
    let mut head_len = 0usize;
    let mut line = Vec::new();
    let n = next_line(&mut reader, &mut line, MAX_HEAD).await?;
    head_len += n;
    if head_len > MAX_HEAD {
        return Err(HttpError::HeadTooLarge);
    }
    let (method, target) = request_line(header_text(&line)?)?;
    let (method, target) = (method.to_owned(), target.to_owned());
    let mut content_length: Option<u64> = None;
    loop {
        let n = next_line(&mut reader, &mut line, MAX_HEAD - head_len).await?;
        head_len += n;
        if head_len > MAX_HEAD {
            return Err(HttpError::HeadTooLarge);
        }
        if n == 0 {
            return Err(HttpError::Bad("the headers did not end".into()));
        }
        let header = header_text(&line)?;
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
            if content_length.is_some() {
                // Two lengths are how requests are smuggled past a proxy: never pick one.
                return Err(HttpError::Bad(
                    "Content-Length is given more than once".into(),
                ));
            }
            let value = value.trim();
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HttpError::Bad("Content-Length is not a number".into()));
            }
            content_length = Some(value.parse().unwrap_or(u64::MAX));
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::Bad(
                "chunked bodies are not accepted; send Content-Length".into(),
            ));
        }
    }
    let declared = content_length.unwrap_or(0);
    // Refused on what it declares, before a byte of it is read or a buffer is made for it.
    if declared > MAX_BODY as u64 {
        return Err(HttpError::BodyTooLarge { declared });
    }
    let mut body = Vec::with_capacity(declared as usize);
    (&mut reader).take(declared).read_to_end(&mut body).await?;
    if body.len() as u64 != declared {
        return Err(HttpError::Bad(format!(
            "the body ended after {} of the {declared} bytes Content-Length declared",
            body.len()
        )));
    }
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
        431 => "Request Header Fields Too Large",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Writes a whole response within [`RESPONSE_DEADLINE`] and closes the exchange.
///
/// # Errors
/// The socket's errors; `TimedOut` past the deadline.
pub async fn write_response<W: AsyncWrite + Unpin>(
    writer: W,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    tokio::time::timeout(
        RESPONSE_DEADLINE,
        write_response_inner(writer, status, content_type, body),
    )
    .await
    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

async fn write_response_inner<W: AsyncWrite + Unpin>(
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

/// Sends one request and reads the response, at most [`MAX_RESPONSE`] bytes of body.
///
/// # Errors
/// The socket's errors, and a malformed or oversized response as `InvalidData`.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    exchange_with(
        stream,
        method,
        "bcd",
        path,
        "application/json",
        body,
        MAX_RESPONSE,
    )
    .await
}

/// [`exchange`] with a `Host` header, a body type and a bound on the answer's body of the
/// caller's: the OTLP exporter's request to a collector, which routes on neither but should
/// see honest headers, and whose answer matters only for its status.
///
/// The answer's head is read up to [`MAX_HEAD`] bytes; its body up to its `Content-Length`
/// (never waiting for the peer to close after it), or, without one, until the peer closes;
/// a body longer than `max_body` is cut there.
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
    max_body: usize,
) -> std::io::Result<Response> {
    let body = body.unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await?;
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut reader = BufReader::with_capacity(4096, stream);
    let mut line = Vec::new();
    let mut head_len = 0usize;
    let mut status: Option<u16> = None;
    let mut content_length: Option<u64> = None;
    loop {
        line.clear();
        let n = (&mut reader)
            .take((MAX_HEAD - head_len) as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        head_len += n;
        if head_len > MAX_HEAD {
            return Err(invalid(format!(
                "the answer's head is longer than {MAX_HEAD} bytes"
            )));
        }
        if n == 0 {
            return Err(invalid("the answer ended before its head did".into()));
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| invalid("the answer's head is not UTF-8".into()))?
            .trim_end_matches(['\r', '\n']);
        if status.is_none() {
            status = Some(status_line(text).ok_or_else(|| {
                invalid(format!(
                    "the answer does not start with an HTTP/1.x status line: {:?}",
                    text.chars().take(64).collect::<String>()
                ))
            })?);
            continue;
        }
        if text.is_empty() {
            break;
        }
        if let Some((name, value)) = text.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                let value: u64 = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid("the answer's Content-Length is not a number".into()))?;
                if content_length.is_some_and(|c| c != value) {
                    return Err(invalid("the answer gives two Content-Lengths".into()));
                }
                content_length = Some(value);
            }
        }
    }
    let status = status.unwrap_or_default();
    let wanted = content_length.map_or(max_body as u64, |c| c.min(max_body as u64));
    let mut body = Vec::with_capacity(wanted.min(64 * 1024) as usize);
    (&mut reader).take(wanted).read_to_end(&mut body).await?;
    if content_length.is_some_and(|c| c <= max_body as u64 && body.len() as u64 != c) {
        return Err(invalid(format!(
            "the answer's body ended after {} of its {} bytes",
            body.len(),
            content_length.unwrap_or_default()
        )));
    }
    Ok(Response { status, body })
}

/// The status code of `HTTP/1.x SSS[ reason]`, or `None` when the line is not one.
fn status_line(line: &str) -> Option<u16> {
    let rest = line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))?;
    let (code, reason) = rest.split_at_checked(3)?;
    if !code.bytes().all(|b| b.is_ascii_digit()) || !(reason.is_empty() || reason.starts_with(' '))
    {
        return None;
    }
    code.parse().ok().filter(|c| (100..600).contains(c))
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
            Err(HttpError::BodyTooLarge { .. })
        ));
        let long_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(
            read_request(long_head.as_bytes()).await,
            Err(HttpError::HeadTooLarge)
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

    // A second Content-Length was accepted (the last one won): how a request is smuggled
    // past a proxy that believed the first.
    #[tokio::test]
    async fn a_duplicate_content_length_is_refused() {
        let twice = "POST /v1/holds HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n{}";
        let err = read_request(twice.as_bytes()).await.unwrap_err();
        assert!(matches!(err, HttpError::Bad(_)), "{err}");
        assert_eq!(err.status(), 400);
        assert!(err.to_string().contains("more than once"), "{err}");
    }

    // A body declared at 1 MiB was accepted and read into a buffer of its declared size: a
    // declared body over the bound is refused on its head, before a byte of it is read.
    #[tokio::test(start_paused = true)]
    async fn a_declared_body_over_the_bound_is_refused_without_reading_it() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        client
            .write_all(b"POST /v1/holds HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n")
            .await
            .unwrap();
        // No body is sent and the client stays: the refusal must not wait for it.
        let err = read_request(server).await.unwrap_err();
        assert!(
            matches!(
                err,
                HttpError::BodyTooLarge {
                    declared: 1_048_576
                }
            ),
            "{err}"
        );
        assert_eq!(err.status(), 413);
        drop(client);
    }

    // A body shorter than its Content-Length was read as a short read error without a
    // sentence; it is a bad request naming the lengths.
    #[tokio::test]
    async fn a_body_shorter_than_declared_is_a_bad_request() {
        let short = "POST /v1/holds HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}";
        let err = read_request(short.as_bytes()).await.unwrap_err();
        assert!(err.to_string().contains("2 of the 10"), "{err}");
    }

    #[test]
    fn status_lines_are_parsed_strictly() {
        assert_eq!(status_line("HTTP/1.1 200 OK"), Some(200));
        assert_eq!(status_line("HTTP/1.0 404"), Some(404));
        assert_eq!(status_line("HTTP/1.1  200 OK"), None);
        assert_eq!(status_line("HTTP/1.1 2000 OK"), None);
        assert_eq!(status_line("HTTP/2 200"), None);
        assert_eq!(status_line("junk 200 OK"), None);
    }

    proptest::proptest! {
        /// No bytes make the request decoder panic or allocate past its bounds: a request it
        /// accepts has a body no longer than [`MAX_BODY`].
        #[test]
        fn no_input_makes_request_decoding_panic(
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            length in proptest::option::of(0u64..200_000),
            twice in proptest::prelude::any::<bool>(),
        ) {
            let mut bytes = b"POST /v1/holds HTTP/1.1\r\n".to_vec();
            if let Some(n) = length {
                bytes.extend(format!("Content-Length: {n}\r\n").as_bytes());
                if twice {
                    bytes.extend(format!("Content-Length: {n}\r\n").as_bytes());
                }
            }
            bytes.extend(&head);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            for input in [&head[..], &bytes[..]] {
                if let Ok(r) = rt.block_on(read_request(input)) {
                    proptest::prop_assert!(r.body.len() <= MAX_BODY);
                }
            }
        }
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
