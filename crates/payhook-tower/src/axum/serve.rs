//! [`serve`]: axum's `serve` with the timeouts a public webhook endpoint needs.

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::time::Duration;

use ::axum::body::Body;
use ::axum::extract::ConnectInfo;
use ::axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tower_service::Service;

/// How long a client may take to send a request's header block, and how long
/// a kept-alive connection may sit idle before its next request, unless
/// [`Serve::header_read_timeout`] says otherwise: 5 seconds, as actix-web's
/// default `client_request_timeout`. The payment service sends its headers at
/// once; a peer that trickles them is holding a connection open.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` over HTTP/1.1, like `axum::serve`, with:
///
/// * a **header-read timeout** ([`DEFAULT_HEADER_READ_TIMEOUT`], hyper's
///   `http1::Builder::header_read_timeout`): a connection whose request header
///   block has not arrived in full within it is closed. It also bounds how
///   long an idle kept-alive connection is held, as the timer starts whenever
///   the server waits for a request. `axum::serve` sets no such timer, so a
///   client sending one header line every few seconds holds a connection (and
///   a file descriptor) for as long as it likes;
/// * the **peer address** of each connection in the request extensions as
///   `ConnectInfo<SocketAddr>`, which the source-IP allowlist reads (see
///   [`PeerAddr`](crate::PeerAddr)), so no `into_make_service_with_connect_info`
///   is needed;
/// * **graceful shutdown** with [`Serve::with_graceful_shutdown`]: stop
///   accepting, let requests in progress finish, close idle connections.
///
/// The body of a request is bounded separately, by the receiver's
/// [body timeout](payhook_core::ReceiverBuilder::body_timeout). HTTP/2 is not
/// served: the payment service delivers over HTTP/1.1, and TLS, if any, ends in
/// front of the app.
///
/// ```no_run
/// use axum::{routing::post, Router};
/// use payhook::tower::axum::{Received, Webhook};
/// use payhook::tower::WebhookLayer;
/// use payhook::Receiver;
///
/// async fn webhook(Webhook(event): Webhook) -> Received {
///     println!("{}", event.id());
///     Received
/// }
///
/// #[tokio::main]
/// async fn main() -> std::io::Result<()> {
///     let receiver = Receiver::builder().secret("whsec_test_secret").build().expect("valid configuration");
///     let app = Router::new()
///         .route("/webhooks", post(webhook))
///         .route_layer(WebhookLayer::new(receiver));
///     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
///     payhook::tower::axum::serve(listener, app)
///         .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.ok(); })
///         .await
/// }
/// ```
pub fn serve(listener: TcpListener, app: Router) -> Serve {
    Serve {
        listener,
        app,
        header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
        shutdown: None,
    }
}

/// The server [`serve`] returns; `.await` it to run.
#[must_use = "a server does nothing until it is awaited"]
pub struct Serve {
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Serve {
    /// How long a request's header block may take to arrive, and an idle
    /// kept-alive connection may wait for its next request (default
    /// [`DEFAULT_HEADER_READ_TIMEOUT`]). A zero duration is taken as the
    /// default rather than closing every connection at once.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = if timeout.is_zero() {
            DEFAULT_HEADER_READ_TIMEOUT
        } else {
            timeout
        };
        self
    }

    /// Stops accepting when `signal` completes, then waits for the
    /// connections' requests in progress to finish.
    pub fn with_graceful_shutdown(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// The address the listener is bound to.
    ///
    /// # Errors
    /// The listener's error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    async fn run(self) -> io::Result<()> {
        let Self {
            listener,
            app,
            header_read_timeout,
            shutdown,
        } = self;
        let mut shutdown = shutdown.unwrap_or_else(|| Box::pin(std::future::pending()));
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        let (stop, stopped) = watch::channel(());
        // Each connection task holds a sender; `recv` answers `None` once all are gone.
        let (open, mut all_closed) = mpsc::channel::<()>(1);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        accept_failed(&error).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let app = app.clone();
            let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                // A `Router` is always ready; a clone per request, as axum does.
                app.clone().call(request.map(Body::new))
            });
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut stopped = stopped.clone();
            let open = open.clone();
            tokio::spawn(async move {
                let mut connection = pin!(connection);
                tokio::select! {
                    _ = connection.as_mut() => {}
                    _ = stopped.changed() => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.await;
                    }
                }
                drop(open);
            });
        }
        drop(listener);
        drop(stop);
        drop(open);
        let _ = all_closed.recv().await;
        Ok(())
    }
}

/// An accept error is the listener's, not the server's end: a connection reset
/// before it was accepted is skipped; running out of file descriptors is
/// logged and retried after a pause, so the loop does not spin.
async fn accept_failed(error: &io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(target: "payhook", %error, "accepting a connection failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

impl IntoFuture for Serve {
    type Output = io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("listener", &self.listener)
            .field("header_read_timeout", &self.header_read_timeout)
            .finish_non_exhaustive()
    }
}
