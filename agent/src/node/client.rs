//! The CLI's side of the API: one request to the node service's socket, its errors as the
//! sentences the service wrote, its answers as the types of [`crate::node::schema`].

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::net::UnixStream;

use crate::node::http::exchange;

/// The longest a CLI waits for the service (a reset or a bind may take a minute).
pub(crate) const API_TIMEOUT: Duration = Duration::from_secs(180);

/// Why a call to the node service failed. `Display` is the sentence to print.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Nothing answers on the socket.
    #[error("cannot reach the bcd node service at {path}: {reason} (is bcd.service running? systemctl start bcd)")]
    Connect {
        /// The socket.
        path: String,
        /// Why.
        reason: String,
    },
    /// The service answered with an error.
    #[error("{message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The service's `code`.
        code: String,
        /// The service's sentence.
        message: String,
    },
    /// The answer was not JSON, or did not come in time.
    #[error("the bcd node service at {path} answered badly: {what}")]
    Bad {
        /// The socket.
        path: String,
        /// What was wrong.
        what: String,
    },
}

/// Connects to the service's socket.
///
/// # Errors
/// [`ApiError::Connect`] saying why in words.
async fn connect(socket: &Path) -> Result<UnixStream, ApiError> {
    UnixStream::connect(socket)
        .await
        .map_err(|e| ApiError::Connect {
            path: socket.display().to_string(),
            reason: match e.kind() {
                std::io::ErrorKind::NotFound => "no socket there".to_owned(),
                std::io::ErrorKind::ConnectionRefused => "nothing listens there".to_owned(),
                std::io::ErrorKind::PermissionDenied => {
                    "permission denied (is this user in the bcd group?)".to_owned()
                }
                _ => e.to_string(),
            },
        })
}

/// The lines of a status watch (`GET /v1/status?watch=true`), one status document each.
pub type StatusLines = tokio::io::Lines<tokio::io::BufReader<UnixStream>>;

/// How long the service may take to answer a watch with its headers.
const WATCH_HEADERS_WITHIN: Duration = Duration::from_secs(10);

/// Opens the status watch: its lines once a 200's headers are read.
///
/// # Errors
/// [`ApiError::Connect`] when nothing answers; [`ApiError::Bad`] naming the status line when
/// the service answers otherwise (a `503` when all its watchers' places are taken), or not
/// in time.
pub async fn watch_status(socket: &Path) -> Result<StatusLines, ApiError> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let bad = |what: String| ApiError::Bad {
        path: socket.display().to_string(),
        what,
    };
    let mut stream = connect(socket).await?;
    let opened = async {
        stream
            .write_all(b"GET /v1/status?watch=true HTTP/1.1\r\nHost: bcd\r\n\r\n")
            .await?;
        let mut lines = tokio::io::BufReader::new(stream).lines();
        let status = lines.next_line().await?.unwrap_or_default();
        while let Some(header) = lines.next_line().await? {
            if header.trim().is_empty() {
                break;
            }
        }
        Ok::<_, std::io::Error>((status, lines))
    };
    let (status, lines) = tokio::time::timeout(WATCH_HEADERS_WITHIN, opened)
        .await
        .map_err(|_| {
            bad(format!(
                "no answer to the status watch within {}s",
                WATCH_HEADERS_WITHIN.as_secs()
            ))
        })?
        .map_err(|e| bad(e.to_string()))?;
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(bad(format!(
            "the status watch was answered {:?}",
            status.trim()
        )));
    }
    Ok(lines)
}

/// Sends one request and returns the JSON answer of a 2xx status.
///
/// # Errors
/// [`ApiError`], with the service's own sentence for a refusal.
pub async fn call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, ApiError> {
    let shown = socket.display().to_string();
    let stream = connect(socket).await?;
    let payload = body.map(|b| b.to_string().into_bytes());
    let response = tokio::time::timeout(
        API_TIMEOUT,
        exchange(stream, method, path, payload.as_deref()),
    )
    .await
    .map_err(|_| ApiError::Bad {
        path: shown.clone(),
        what: format!("no answer within {}s", API_TIMEOUT.as_secs()),
    })?
    .map_err(|e| ApiError::Bad {
        path: shown.clone(),
        what: e.to_string(),
    })?;
    let value: Value = serde_json::from_slice(&response.body).map_err(|e| ApiError::Bad {
        path: shown.clone(),
        what: format!("not JSON ({e})"),
    })?;
    if (200..300).contains(&response.status) {
        Ok(value)
    } else {
        let refusal = serde_json::from_value::<crate::node::schema::ErrorBody>(value)
            .unwrap_or_else(|_| crate::node::schema::ErrorBody {
                code: String::new(),
                message: "the service refused without saying why".to_owned(),
            });
        Err(ApiError::Refused {
            status: response.status,
            code: refusal.code,
            message: refusal.message,
        })
    }
}

/// Reads a 2xx answer as the type the handlers wrote it with ([`crate::node::schema`]).
///
/// # Errors
/// [`ApiError::Bad`] naming the socket when the answer does not have that shape.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    socket: &Path,
    value: Value,
) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::Bad {
        path: socket.display().to_string(),
        what: format!(
            "the answer is not what bcd expects ({e}); are bcd and bcd node the same version?"
        ),
    })
}

/// [`call`] with a typed body and a typed answer.
///
/// # Errors
/// As [`call`] and [`decode`].
pub(crate) async fn call_as<B: serde::Serialize, T: serde::de::DeserializeOwned>(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&B>,
) -> Result<T, ApiError> {
    let body = body.map(|b| serde_json::to_value(b).unwrap_or(Value::Null));
    decode(socket, call(socket, method, path, body.as_ref()).await?)
}
