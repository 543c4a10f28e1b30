//! The accept loop: hyper's HTTP/1 driven directly, so that every resource a client can hold is
//! bounded. A request head must arrive within [`Limits::header_timeout`] of connecting or of the
//! previous response (so this is also the keep-alive idle timeout) and fit in
//! [`Limits::max_head_bytes`]; a connection on which no byte moves for [`Limits::stall_timeout`]
//! is closed; at most [`Limits::max_connections`] are open, and when one more arrives the one
//! that has waited longest for its next request is closed to make room (so idle sockets cannot
//! crowd out a client that has something to ask). On shutdown the listener closes at once, open
//! connections get [`Limits::shutdown_grace`] to finish, and the rest are dropped. Over TLS the
//! handshake must finish within the head deadline too (then the head has its own), and a
//! connection in its handshake is evicted like one waiting for its head.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How much a client may hold, and for how long.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once. The agent also keeps this under half its open-file limit.
    pub max_connections: usize,
    /// From connecting, or from the previous response, to a complete request head.
    pub header_timeout: Duration,
    /// Longest time with no byte read or written while a connection is open (a handler that
    /// hangs, a client that stops reading its response).
    pub stall_timeout: Duration,
    /// Largest request head (hyper's read buffer); a larger one is refused with 431.
    pub max_head_bytes: usize,
    /// How long open connections may finish after SIGTERM before they are dropped.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            header_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(10),
            max_head_bytes: 16 * 1024,
            shutdown_grace: Duration::from_secs(1),
        }
    }
}

/// hyper's smallest read buffer.
const MIN_HEAD_BYTES: usize = 8192;

/// The connection cap: the configured one, but never more than half the open-file limit (the
/// rest is for the readers, plugins and transport files), and at least 1.
pub fn connection_cap(limits: &Limits) -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let by_fds = soft.map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX));
    limits.max_connections.min(by_fds).max(1)
}

/// One open connection, as the accept loop sees it.
#[derive(Debug)]
struct Conn {
    /// A request is in the handler.
    busy: AtomicBool,
    /// Milliseconds since the server's epoch when the connection last began waiting for a
    /// request (it connected, or a response was handed to hyper).
    waiting_since: AtomicU64,
    /// Milliseconds since the epoch when a byte last moved.
    last_io: AtomicU64,
    evict: Notify,
}

#[derive(Debug)]
struct Table {
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Table {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes room for one more connection under `cap`: closes the one that has waited longest
    /// for a request. `None` when every open connection is in a handler.
    fn admit(&self, id: u64, cap: usize) -> Option<Arc<Conn>> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.len() >= cap {
            let victim = conns
                .iter()
                .filter(|(_, c)| !c.busy.load(Ordering::Relaxed))
                .min_by_key(|(_, c)| c.waiting_since.load(Ordering::Relaxed))
                .map(|(id, _)| *id)?;
            if let Some(c) = conns.remove(&victim) {
                c.evict.notify_one();
            }
        }
        let now = self.now_ms();
        let conn = Arc::new(Conn {
            busy: AtomicBool::new(false),
            waiting_since: AtomicU64::new(now),
            last_io: AtomicU64::new(now),
            evict: Notify::new(),
        });
        conns.insert(id, conn.clone());
        Some(conn)
    }

    fn remove(&self, id: u64) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` completes, then
/// closes within the grace period.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
) {
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let cap = connection_cap(&limits);
    let table = Arc::new(Table { epoch: Instant::now(), conns: Mutex::new(HashMap::new()) });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut next_id = 0u64;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        while tasks.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors or a connection reset before accept: the evicted connections
            // close meanwhile; never spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        next_id += 1;
        let Some(conn) = table.admit(next_id, cap) else {
            // A TLS client could not read a plain answer: it is just closed.
            if tls.is_none() {
                refuse(stream);
            }
            continue;
        };
        let (table, app, limits, stop, tls) =
            (table.clone(), app.clone(), limits.clone(), stop_rx.clone(), tls.clone());
        let id = next_id;
        tasks.spawn(async move {
            serve_conn(stream, tls, &conn, &table, app, &limits, stop).await;
            table.remove(id);
        });
        // Let an evicted connection close before the next accept, so descriptors stay in bound.
        tokio::task::yield_now().await;
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = async { while tasks.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(limits.shutdown_grace, drained).await;
    tasks.abort_all();
}

/// Every slot holds a request in progress: say so and close.
fn refuse(stream: TcpStream) {
    let _ = stream.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
}

/// One connection: the TLS handshake first when serving TLS (within the head deadline, and
/// evictable like a connection waiting for its head), then HTTP.
async fn serve_conn(
    stream: TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    conn: &Arc<Conn>,
    table: &Arc<Table>,
    app: Router,
    limits: &Limits,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let tracked = Tracked { inner: stream, conn: conn.clone(), table: table.clone() };
    let Some(acceptor) = tls else {
        return serve_http(TokioIo::new(tracked), conn, table, app, limits, stop).await;
    };
    let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(tracked));
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            // A failed or slow handshake: closed, nothing answered.
            _ => return,
        },
        _ = conn.evict.notified() => return,
        _ = stop.changed() => return,
    };
    serve_http(TokioIo::new(stream), conn, table, app, limits, stop).await;
}

async fn serve_http<I>(
    io: TokioIo<I>,
    conn: &Arc<Conn>,
    table: &Arc<Table>,
    app: Router,
    limits: &Limits,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let router = TowerToHyperService::new(app);
    let service = {
        let (conn, table) = (conn.clone(), table.clone());
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            conn.busy.store(true, Ordering::Relaxed);
            let call = hyper::service::Service::call(&router, req);
            let (conn, table) = (conn.clone(), table.clone());
            async move {
                let resp = call.await;
                conn.waiting_since.store(table.now_ms(), Ordering::Relaxed);
                conn.busy.store(false, Ordering::Relaxed);
                resp
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_head_bytes.max(MIN_HEAD_BYTES))
        .keep_alive(true);
    let http = builder.serve_connection(io, service);
    tokio::pin!(http);
    let mut draining = false;
    loop {
        let stalled_at =
            table.epoch + Duration::from_millis(conn.last_io.load(Ordering::Relaxed)) + limits.stall_timeout;
        tokio::select! {
            _ = http.as_mut() => return,
            _ = conn.evict.notified() => return,
            _ = stop.changed(), if !draining => {
                draining = true;
                http.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(stalled_at) => {
                let idle = table.now_ms().saturating_sub(conn.last_io.load(Ordering::Relaxed));
                if idle >= u64::try_from(limits.stall_timeout.as_millis()).unwrap_or(u64::MAX) {
                    return;
                }
            }
        }
    }
}

/// A socket that records when a byte last moved.
#[derive(Debug)]
struct Tracked {
    inner: TcpStream,
    conn: Arc<Conn>,
    table: Arc<Table>,
}

impl Tracked {
    fn moved(&self) {
        self.conn.last_io.store(self.table.now_ms(), Ordering::Relaxed);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.moved();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table { epoch: Instant::now(), conns: Mutex::new(HashMap::new()) }
    }

    #[test]
    fn a_full_table_closes_the_connection_that_waited_longest() {
        let t = table();
        let a = t.admit(1, 2).unwrap();
        let b = t.admit(2, 2).unwrap();
        a.waiting_since.store(50, Ordering::Relaxed);
        b.waiting_since.store(10, Ordering::Relaxed);
        let _c = t.admit(3, 2).unwrap();
        let open: Vec<u64> = {
            let mut v: Vec<u64> = t.conns.lock().unwrap().keys().copied().collect();
            v.sort();
            v
        };
        assert_eq!(open, [1, 3], "the one waiting since 10 ms goes");
    }

    #[test]
    fn connections_in_a_handler_are_never_evicted() {
        let t = table();
        let a = t.admit(1, 1).unwrap();
        a.busy.store(true, Ordering::Relaxed);
        assert!(t.admit(2, 1).is_none(), "no room: the newcomer is refused");
        a.busy.store(false, Ordering::Relaxed);
        assert!(t.admit(3, 1).is_some());
    }

    #[test]
    fn the_cap_stays_under_half_the_descriptor_limit() {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let cap = connection_cap(&Limits { max_connections: usize::MAX, ..Limits::default() });
        if let Some(n) = soft {
            assert_eq!(cap as u64, (n / 2).max(1));
        }
        assert_eq!(connection_cap(&Limits { max_connections: 3, ..Limits::default() }), 3);
    }
}
