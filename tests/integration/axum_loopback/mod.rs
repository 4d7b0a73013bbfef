//! Serves an axum app over real HTTP on a free loopback port, for tests.

use std::net::SocketAddr;

use axum::Router;

/// Serves `app` on a free loopback port and returns its address; the server
/// stops with the test's runtime.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("test server runs") });
    addr
}
