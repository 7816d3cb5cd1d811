//! The API server's client, as the DRA driver uses it: made from a kubeconfig file or the
//! pod's service account (chosen explicitly), made anew when its credentials change, and
//! reading nothing from the server without a bound.
//!
//! - Credentials: the kubeconfig (or the service account's files) is read again every
//!   [`RENEW_EVERY`] and after any 401; a new client replaces the old one when what it would
//!   send or trust changed (the file, the token a `tokenFile` holds, a client certificate or
//!   key named by path, the CA). A token read
//!   from a file is trimmed of the white space around it (`kubectl create token ... > file`
//!   ends it with a newline, which kube would send); the file itself is never written.
//! - Bounds: no answer of the server, and no line of a watch (a watch's error answer: none
//!   of it), is read past [`MAX_READ`] bytes; a longer one ends that call (or that watch) with [`TooLong`]'s sentence, so a
//!   broken or hostile server costs at most that much memory per call.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};

/// The most bcd reads of one answer of the API server, or of one line of a watch: far more
/// than a ResourceClaim or the node's slice list takes.
pub const MAX_READ: usize = 4 << 20;
/// How often the credentials are read again when nothing failed.
pub const RENEW_EVERY: Duration = Duration::from_secs(60);
/// How long after a 401 the credentials are read again (401s in a burst are one reading).
pub const RENEW_AFTER_401: Duration = Duration::from_secs(1);

/// Why the API server's client could not be made. `Display` is the operator's sentence.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig file could not be read or used.
    #[error("the kubeconfig {} cannot be used: {why}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// No kubeconfig was given and the process has no in-cluster service account.
    #[error("no --kubeconfig was given and there is no in-cluster service account ({why}); give bcd node --kubeconfig FILE")]
    InCluster {
        /// Why.
        why: String,
    },
    /// The token file the configuration names could not be read.
    #[error("the API server's token file {} cannot be read: {why}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The client could not be built from the configuration.
    #[error("the API server's client cannot be made: {0}")]
    Client(String),
}

/// An answer, or a line of a watch, longer than [`MAX_READ`]. `Display` is the sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TooLong {
    /// A whole answer.
    #[error("the API server's answer is longer than {} MiB, more than bcd reads of one answer", MAX_READ >> 20)]
    Answer,
    /// One line (one event) of a watch.
    #[error("an event of the API server's watch is longer than {} MiB without a line end, more than bcd reads of one event", MAX_READ >> 20)]
    Line,
}

/// The API server's client; clones share it, and [`ApiClient::renew`] replaces it for all.
#[derive(Clone)]
pub struct ApiClient {
    inner: Arc<Inner>,
}

struct Inner {
    kubeconfig: Option<PathBuf>,
    current: Mutex<(kube::Client, [u8; 32])>,
    renewing: tokio::sync::Mutex<()>,
    /// Told of every 401 the server answers, by the client's own layer.
    unauthorized: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("kubeconfig", &self.inner.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl ApiClient {
    /// A client from `kubeconfig` when given (its current context), else the in-cluster
    /// service account. `$KUBECONFIG` and `~/.kube/config` are never read.
    ///
    /// # Errors
    /// [`ConnectError`].
    pub async fn connect(kubeconfig: Option<&Path>) -> Result<Self, ConnectError> {
        let unauthorized = Arc::new(tokio::sync::Notify::new());
        let (client, print) = make(kubeconfig, &unauthorized).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                kubeconfig: kubeconfig.map(Path::to_path_buf),
                current: Mutex::new((client, print)),
                renewing: tokio::sync::Mutex::new(()),
                unauthorized,
            }),
        })
    }

    /// The client now (cheap: clients share their connections).
    pub fn client(&self) -> kube::Client {
        match self.inner.current.lock() {
            Ok(c) => c.0.clone(),
            Err(poisoned) => poisoned.into_inner().0.clone(),
        }
    }

    /// Reads the credentials again and replaces the client when they changed: `Ok(true)`
    /// then, `Ok(false)` when they are as they were. Renewals that meet wait for each other.
    ///
    /// # Errors
    /// [`ConnectError`]: the client in use stays.
    pub async fn renew(&self) -> Result<bool, ConnectError> {
        let _one = self.inner.renewing.lock().await;
        let (client, print) =
            make(self.inner.kubeconfig.as_deref(), &self.inner.unauthorized).await?;
        let mut current = match self.inner.current.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if current.1 == print {
            return Ok(false);
        }
        *current = (client, print);
        tracing::info!("the API server's credentials changed; bcd uses the new ones from now on");
        Ok(true)
    }

    /// Renews the credentials every `every` and at once after the server answered 401 (at
    /// most once a [`RENEW_AFTER_401`]), for ever (until its task is aborted); a failed
    /// renewal is logged once per change of its sentence and the client in use stays.
    pub async fn renew_every(self, every: Duration) {
        let mut said: Option<String> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = self.inner.unauthorized.notified() => {
                    tokio::time::sleep(RENEW_AFTER_401).await;
                }
            }
            match self.renew().await {
                Ok(_) => said = None,
                Err(e) => {
                    let e = format!("{e}; bcd keeps the credentials it has");
                    if said.as_ref() != Some(&e) {
                        tracing::warn!("{e}");
                        said = Some(e);
                    }
                }
            }
        }
    }
}

/// Whether `e` is the server's 401: the credentials are worth reading again.
pub fn unauthorized(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401)
}

/// The configuration from `kubeconfig` or the service account, with a token file's token
/// read (trimmed) into it, and the fingerprint of what it sends and trusts.
async fn load(kubeconfig: Option<&Path>) -> Result<(kube::Config, [u8; 32]), ConnectError> {
    let mut print = Sha256::new();
    let mut config = match kubeconfig {
        Some(path) => {
            let bad = |why: String| ConnectError::Kubeconfig {
                path: path.to_path_buf(),
                why,
            };
            let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
            print.update(&bytes);
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| bad(e.to_string()))?
        }
        None => {
            kube::Config::incluster().map_err(|e| ConnectError::InCluster { why: e.to_string() })?
        }
    };
    if let Some(file) = config.auth_info.token_file.take() {
        let path = PathBuf::from(file);
        let text = std::fs::read_to_string(&path).map_err(|e| ConnectError::TokenFile {
            path: path.clone(),
            why: e.to_string(),
        })?;
        config.auth_info.token = Some(secrecy::SecretString::from(text.trim().to_owned()));
    }
    if let Some(token) = &config.auth_info.token {
        use secrecy::ExposeSecret;
        print.update(b"\0token\0");
        print.update(token.expose_secret().as_bytes());
    }
    // A client certificate and key named by path are read by kube from their files: their
    // contents count, so a rotated pair is used.
    for file in [
        &config.auth_info.client_certificate,
        &config.auth_info.client_key,
    ]
    .into_iter()
    .flatten()
    {
        print.update(b"\0file\0");
        print.update(std::fs::read(file).unwrap_or_default());
    }
    for cert in config.root_cert.iter().flatten() {
        print.update(b"\0ca\0");
        print.update(cert);
    }
    print.update(b"\0url\0");
    print.update(config.cluster_url.to_string().as_bytes());
    // The work loop's own backoff (capped at 10 s) decides when to try again; kube's retry
    // of 503s would hold one call past the loop's timeout and say nothing meanwhile.
    config.default_retry = false;
    Ok((config, print.finalize().into()))
}

/// A client of the configuration [`load`] reads, every answer bounded ([`Bounded`]).
/// A 401 is told to `unauthorized`.
async fn make(
    kubeconfig: Option<&Path>,
    unauthorized: &Arc<tokio::sync::Notify>,
) -> Result<(kube::Client, [u8; 32]), ConnectError> {
    let (config, print) = load(kubeconfig).await?;
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| ConnectError::Client(e.to_string()))?;
    let client = builder
        .with_layer(&BoundLayer(unauthorized.clone()))
        .build();
    Ok((client, print))
}

/// Wraps every answer's body in [`Bounded`] (a watch's by line, any other whole), and tells
/// its `Notify` of every 401.
#[derive(Debug, Clone)]
struct BoundLayer(Arc<tokio::sync::Notify>);

impl<S> tower::Layer<S> for BoundLayer {
    type Service = BoundService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BoundService(inner, self.0.clone())
    }
}

#[derive(Debug)]
struct BoundService<S>(S, Arc<tokio::sync::Notify>);

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<kube::client::Body>> for BoundService<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<tower::BoxError>,
{
    type Response = http::Response<Bounded<B>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let watch = req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let answer = self.0.call(req);
        let unauthorized = self.1.clone();
        Box::pin(async move {
            let res = answer.await?;
            if res.status() == http::StatusCode::UNAUTHORIZED {
                unauthorized.notify_one();
            }
            // A watch's answer is read by line only when it is one: an error's body is read
            // whole by kube, so it is bounded whole.
            let by_line = watch && res.status().is_success();
            Ok(res.map(|body| Bounded::new(body, by_line)))
        })
    }
}

/// A body that ends with [`TooLong`] once it is longer than [`MAX_READ`] bytes (a watch's:
/// once a line is). Pure bookkeeping over the bytes that pass.
#[derive(Debug)]
pub struct Bounded<B> {
    inner: B,
    watch: bool,
    /// Bytes of the whole answer, or, of a watch, since its last line end.
    run: usize,
}

impl<B> Bounded<B> {
    fn new(inner: B, watch: bool) -> Self {
        Self {
            inner,
            watch,
            run: 0,
        }
    }

    /// Counts `data`: the error once the bound is passed.
    fn count(&mut self, data: &[u8]) -> Result<(), TooLong> {
        if !self.watch {
            self.run += data.len();
            return if self.run > MAX_READ {
                Err(TooLong::Answer)
            } else {
                Ok(())
            };
        }
        // The first piece continues the line before; each later one starts a line.
        for (i, piece) in data.split(|b| *b == b'\n').enumerate() {
            self.run = if i == 0 {
                self.run + piece.len()
            } else {
                piece.len()
            };
            if self.run > MAX_READ {
                return Err(TooLong::Line);
            }
        }
        Ok(())
    }
}

impl<B> http_body::Body for Bounded<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<tower::BoxError>,
{
    type Data = Bytes;
    type Error = tower::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.clone();
                    if let Err(e) = self.count(&data) {
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
