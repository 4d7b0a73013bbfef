//! `payhook::tower::axum::serve` over real loopback connections: the
//! header-read timeout cuts a trickled header block and an idle connection,
//! every request carries its peer as `ConnectInfo`, and graceful shutdown ends
//! the server.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use payhook_tower::axum::serve;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn app() -> Router {
    Router::new().route(
        "/peer",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
    )
}

/// Reads until the server closes the connection; returns what it sent.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Err(_) => panic!("the connection was held for 10 s"),
            Ok(Ok(0) | Err(_)) => return String::from_utf8_lossy(&reply).into_owned(),
            Ok(Ok(n)) => reply.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_trickled_header_block_and_an_idle_connection_are_cut_at_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = serve(listener, app()).header_read_timeout(Duration::from_secs(1));
    tokio::spawn(server.into_future());

    let trickle = async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        stream.write_all(b"GET /peer HTTP/1.1\r\n").await.unwrap();
        let mut buf = [0u8; 256];
        for line in 0..100 {
            tokio::select! {
                read = stream.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) { break },
                () = tokio::time::sleep(Duration::from_millis(300)) => {
                    if stream.write_all(format!("x-line-{line}: a\r\n").as_bytes()).await.is_err() {
                        break;
                    }
                }
            }
        }
        started.elapsed()
    };
    let idle = async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        read_to_close(&mut stream).await;
        started.elapsed()
    };
    let (trickled, idle) = tokio::join!(trickle, idle);
    for held in [trickled, idle] {
        assert!(
            held >= Duration::from_millis(900) && held < Duration::from_secs(4),
            "held {held:?} with a 1 s header timeout"
        );
    }
}

#[tokio::test]
async fn requests_carry_their_peer_and_graceful_shutdown_ends_the_server() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        serve(listener, app())
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.5:0".parse().unwrap()).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let local = stream.local_addr().unwrap();
    stream
        .write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let reply = read_to_close(&mut stream).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.ends_with(&local.to_string()), "{reply}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stops after the signal")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "no longer accepting");
}
