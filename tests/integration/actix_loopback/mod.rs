//! Serves an actix-web app over real HTTP on a free loopback port, for tests.

use std::net::{SocketAddr, TcpListener};

use actix_web::{App, HttpServer};

/// Serves `app` on a fresh loopback port with one worker and actix-web's default
/// timeouts, configured as payhook-actix's docs advise (a client that closes its
/// connection cancels its request); the server stops when the test's runtime
/// drops the spawned server future.
pub fn serve<F, T, B>(app: F) -> SocketAddr
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    B: actix_web::body::MessageBody + 'static,
    T: actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let server = HttpServer::new(app)
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .h1_allow_half_closed(false)
        .listen(listener)
        .expect("listen on the loopback port")
        .run();
    tokio::spawn(server);
    addr
}
