//! HTTP/1.1 for the node service's API on its Unix socket, the metrics listener and the OTLP
//! exporter, on hyper 1.x (`hyper::server::conn::http1` and `hyper::client::conn::http1`,
//! the stack the kubelet's gRPC already brings): one request per connection, bounded head and
//! body, deadlines on reading and on answering, JSON in and out.
//!
//! **Serving** ([`serve_connection`]): the head is read first, at most [`MAX_HEAD`] bytes
//! within [`REQUEST_DEADLINE`], and checked by [`check_head`] with `httparse` (the parser hyper
//! itself runs): a head that is malformed (400), too long (431), gives `Content-Length` twice
//! (400: hyper would keep one, which is how requests are smuggled past a proxy), uses
//! `Transfer-Encoding` (400) or declares a body over [`MAX_BODY`] (413, before a byte of it is
//! read) is answered here, because hyper's own answer to a head it refuses has an empty body
//! and every error of this service is JSON `{"code", "message"}`. A head that passes is handed
//! with the bytes read so far to hyper, which reads the body (the rest of
//! [`REQUEST_DEADLINE`]) and writes the handler's answer; the client has
//! [`RESPONSE_DEADLINE`] to take it, after which the connection is dropped.
//!
//! **Asking** ([`exchange`], [`exchange_with`]): one request with `Connection: close`; the
//! answer's body read to its `Content-Length` (never waiting for the peer to close after it)
//! and cut at the caller's bound.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use hyper::{Method, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Most header lines a request may have (hyper's own default).
pub(crate) const MAX_HEADERS: usize = 100;
/// Longest request body. The largest the API takes is a hold naming a node's devices, a few
/// KiB; with [`MAX_CONNECTIONS`] connections at once this bounds what requests can make the
/// service hold to a few MiB.
pub const MAX_BODY: usize = 64 * 1024;
/// The whole request must arrive within this.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// The whole answer must be taken within this: a client that does not read cannot keep a
/// connection (and its file descriptor) for longer.
pub(crate) const RESPONSE_DEADLINE: Duration = Duration::from_secs(10);
/// Longest answer the CLI's client reads (an inventory of a large node is a few hundred KiB).
pub(crate) const MAX_RESPONSE: usize = 16 * 1024 * 1024;
/// Connections one listener serves at once; the rest wait in the kernel's backlog, costing
/// the service nothing.
pub(crate) const MAX_CONNECTIONS: usize = 64;

/// A request as the handlers see it.
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

/// A handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The body's `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// The methods the path takes, sent as `Allow` (with a 405).
    pub allow: Option<&'static str>,
}

/// The `Content-Type` of every answer but the metrics text.
pub const JSON: &str = "application/json";

impl Reply {
    /// A JSON answer.
    pub fn json(status: u16, body: Vec<u8>) -> Self {
        Reply {
            status,
            content_type: JSON,
            body,
            allow: None,
        }
    }

    /// The same answer with `Allow: methods` (a 405 says what the path takes).
    pub fn with_allow(mut self, methods: Option<&'static str>) -> Self {
        self.allow = methods;
        self
    }

    /// An error answer: `{"code", "message"}`.
    pub fn error(status: u16, code: &str, message: &str) -> Self {
        Reply::json(status, error_body(code, message))
    }

    fn refusal(e: &HttpError) -> Self {
        Reply::error(e.status(), e.code(), &e.to_string())
    }
}

/// Why a request could not be read; each maps to a status code.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The head or body is malformed.
    #[error("bad request: {0}")]
    Bad(String),
    /// The head is too long.
    #[error(
        "the request head is longer than {MAX_HEAD} bytes or has more than {MAX_HEADERS} headers"
    )]
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
pub(crate) fn error_body(code: &str, message: &str) -> Vec<u8> {
    serde_json::to_vec(&crate::node::schema::ErrorBody {
        code: code.to_owned(),
        message: message.to_owned(),
    })
    .unwrap_or_default()
}

/// A head [`check_head`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Its length in bytes, up to and including the empty line.
    pub len: usize,
    /// What `Content-Length` declares (0 without one).
    pub declared: u64,
}

/// Checks the start of a request: `Ok(None)` while the head is incomplete and may still fit,
/// `Ok(Some(head))` once it is whole and acceptable to this service, and the refusal otherwise.
/// What it accepts, hyper parses the same way (same parser, same validity rules for the method,
/// target and header names and values).
///
/// # Errors
/// [`HttpError::Bad`], [`HttpError::HeadTooLarge`] and [`HttpError::BodyTooLarge`].
pub fn check_head(bytes: &[u8]) -> Result<Option<Head>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() >= MAX_HEAD => {
            return Err(HttpError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadTooLarge),
        Err(e) => {
            return Err(HttpError::Bad(format!(
                "the request head is not HTTP/1.1 ({e}): {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(64)])
            )))
        }
    };
    if len > MAX_HEAD {
        return Err(HttpError::HeadTooLarge);
    }
    let bad = |what: &str| Err(HttpError::Bad(what.to_owned()));
    let (Some(method), Some(target)) = (request.method, request.path) else {
        return bad("the request line is not METHOD PATH HTTP/1.1");
    };
    if Method::from_bytes(method.as_bytes()).is_err()
        || !target.starts_with('/')
        || target.parse::<Uri>().is_err()
    {
        return bad("the request line is not METHOD PATH HTTP/1.1");
    }
    let mut declared: Option<u64> = None;
    for header in request.headers.iter() {
        if HeaderName::from_bytes(header.name.as_bytes()).is_err()
            || HeaderValue::from_bytes(header.value).is_err()
        {
            return bad("a header's name or value is malformed");
        }
        if header.name.eq_ignore_ascii_case("content-length") {
            if declared.is_some() {
                // Two lengths are how requests are smuggled past a proxy: never pick one.
                return bad("Content-Length is given more than once");
            }
            let value = std::str::from_utf8(header.value).unwrap_or_default().trim();
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return bad("Content-Length is not a number");
            }
            declared = Some(value.parse().unwrap_or(u64::MAX));
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return bad("chunked bodies are not accepted; send Content-Length");
        }
    }
    let declared = declared.unwrap_or(0);
    // Refused on what it declares, before a byte of it is read or a buffer is made for it.
    if declared > MAX_BODY as u64 {
        return Err(HttpError::BodyTooLarge { declared });
    }
    Ok(Some(Head { len, declared }))
}

/// Reads until [`check_head`] decides; returns what was read (the head and whatever of the
/// body came with it).
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Vec<u8>, HttpError> {
    let mut buffer = Vec::with_capacity(4096);
    loop {
        if buffer.len() == buffer.capacity() {
            buffer.reserve(4096);
        }
        let n = stream.read_buf(&mut buffer).await?;
        match check_head(&buffer)? {
            Some(_) => return Ok(buffer),
            None if n == 0 => return Err(HttpError::Bad("the headers did not end".into())),
            None => {}
        }
    }
}

/// A stream that first yields bytes already read from it: how the checked head reaches hyper.
struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.prefix.is_empty() {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let n = self.prefix.len().min(buf.remaining());
        buf.put_slice(&self.prefix.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Answers a head [`check_head`] refused, which hyper is never given: the status line, the
/// three headers and the JSON error, within [`RESPONSE_DEADLINE`].
async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, e: &HttpError) {
    let reply = Reply::refusal(e);
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {JSON}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        reply.body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&reply.body);
    let _ = tokio::time::timeout(RESPONSE_DEADLINE, async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    })
    .await;
}

/// The request hyper parsed, its body read within what is left of [`REQUEST_DEADLINE`] and
/// at most [`MAX_BODY`] bytes of it.
async fn decode(request: hyper::Request<Incoming>, started: Instant) -> Result<Request, HttpError> {
    let (parts, body) = request.into_parts();
    if let Some(declared) = body.size_hint().exact().filter(|&n| n > MAX_BODY as u64) {
        return Err(HttpError::BodyTooLarge { declared });
    }
    let left = REQUEST_DEADLINE.saturating_sub(started.elapsed());
    let body = tokio::time::timeout(left, Limited::new(body, MAX_BODY).collect())
        .await
        .map_err(|_| HttpError::Timeout)?
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                HttpError::BodyTooLarge {
                    declared: MAX_BODY as u64 + 1,
                }
            } else {
                HttpError::Bad(format!(
                    "the body ended before the length Content-Length declared ({e})"
                ))
            }
        })?
        .to_bytes();
    Ok(Request {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        body: body.to_vec(),
    })
}

fn response(reply: Reply) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if let Some(methods) = reply.allow {
        response
            .headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static(methods));
    }
    response
}

/// Serves one request on `stream` with `handler`, as the module header says: the head checked,
/// the request read within [`REQUEST_DEADLINE`], the answer taken within
/// [`RESPONSE_DEADLINE`], then the connection closed.
pub async fn serve_connection<S, H, F>(mut stream: S, handler: H)
where
    S: AsyncRead + AsyncWrite + Unpin,
    H: Fn(Request) -> F,
    F: Future<Output = Reply>,
{
    let started = Instant::now();
    let Some(prefix) = read_checked_head(&mut stream).await else {
        return;
    };
    serve_read(stream, prefix, started, handler).await;
}

/// Reads the head of a request on `stream` within [`REQUEST_DEADLINE`] and returns what was
/// read (the head and whatever of the body came with it); a head [`check_head`] refuses is
/// answered here and `None` returned.
pub async fn read_checked_head<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
) -> Option<Vec<u8>> {
    let read = tokio::time::timeout(REQUEST_DEADLINE, read_head(stream))
        .await
        .unwrap_or(Err(HttpError::Timeout));
    match read {
        Ok(prefix) => Some(prefix),
        Err(e) => {
            refuse(stream, &e).await;
            None
        }
    }
}

/// The method and target (path and query) of a head [`read_checked_head`] returned.
pub fn request_line(prefix: &[u8]) -> Option<(String, String)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    request.parse(prefix).ok()?;
    Some((request.method?.to_owned(), request.path?.to_owned()))
}

/// Serves the request whose head [`read_checked_head`] read (`prefix`, at `started`) with
/// `handler`, as [`serve_connection`] does.
pub async fn serve_read<S, H, F>(stream: S, prefix: Vec<u8>, started: Instant, handler: H)
where
    S: AsyncRead + AsyncWrite + Unpin,
    H: Fn(Request) -> F,
    F: Future<Output = Reply>,
{
    let answered = tokio::sync::Notify::new();
    let service = hyper::service::service_fn(|request| {
        let (handler, answered) = (&handler, &answered);
        async move {
            let reply = match decode(request, started).await {
                Ok(request) => handler(request).await,
                Err(e) => Reply::refusal(&e),
            };
            answered.notify_one();
            Ok::<_, Infallible>(response(reply))
        }
    });
    let io = TokioIo::new(Prefixed {
        prefix: Bytes::from(prefix),
        inner: stream,
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        // A client that half-closes after its request (`curl`, a shell's `printf | nc -N`)
        // still gets its answer.
        .half_close(true)
        .max_headers(MAX_HEADERS)
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_DEADLINE)
        .serve_connection(io, service);
    tokio::select! {
        result = connection => {
            if let Err(e) = result {
                tracing::debug!("an HTTP connection ended with an error: {e}");
            }
        }
        () = async {
            answered.notified().await;
            tokio::time::sleep(RESPONSE_DEADLINE).await;
        } => tracing::debug!(
            "a client did not take its answer within {}s; its connection is closed",
            RESPONSE_DEADLINE.as_secs()
        ),
    }
}

/// A response read by the client.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

/// Sends one request and reads the response, at most [`MAX_RESPONSE`] bytes of body.
///
/// # Errors
/// The socket's errors, and a malformed response as `InvalidData`.
pub(crate) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    exchange_with(stream, method, "bcd", path, JSON, body, MAX_RESPONSE).await
}

/// The client's errors as `io::Error`: a malformed answer as `InvalidData`.
fn client_error(e: &hyper::Error) -> std::io::Error {
    use std::io::{Error, ErrorKind};
    if e.is_parse() || e.is_parse_too_large() || e.is_parse_status() {
        return Error::new(
            ErrorKind::InvalidData,
            format!("the answer does not start with an HTTP/1.x status line and a head of at most {MAX_HEAD} bytes ({e})"),
        );
    }
    if e.is_incomplete_message() {
        return Error::new(
            ErrorKind::InvalidData,
            format!("the answer ended early ({e})"),
        );
    }
    let source = std::error::Error::source(e).and_then(|s| s.downcast_ref::<Error>());
    match source {
        Some(io) => Error::new(io.kind(), io.to_string()),
        None => Error::other(e.to_string()),
    }
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
pub(crate) async fn exchange_with<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    method: &str,
    host: &str,
    path: &str,
    content_type: &str,
    body: Option<&[u8]>,
    max_body: usize,
) -> std::io::Result<Response> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, host)
        .header(CONTENT_TYPE, content_type)
        .header(CONNECTION, "close")
        .header(CONTENT_LENGTH, body.map_or(0, <[u8]>::len))
        .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
        .map_err(|e| invalid(format!("cannot ask {method} {path}: {e}")))?;
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| client_error(&e))?;
    let work = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| client_error(&e))?;
        drop(sender);
        let status = response.status().as_u16();
        let mut incoming = response.into_body();
        let mut body = Vec::new();
        while body.len() < max_body {
            let Some(frame) = incoming.frame().await else {
                break;
            };
            let frame = frame.map_err(|e| client_error(&e))?;
            if let Some(data) = frame.data_ref() {
                body.extend_from_slice(&data[..data.len().min(max_body - body.len())]);
            }
        }
        Ok(Response { status, body })
    };
    tokio::pin!(work, connection);
    tokio::select! {
        result = &mut work => result,
        // The connection may end with the last of the body still on its way to `work`.
        _ = &mut connection => work.await,
    }
}

#[cfg(test)]
mod tests;
