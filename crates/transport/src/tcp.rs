//! The TCP path: the owner's server (one accept thread, one thread per connection, blocking
//! sockets) and the consumer's client (a small cache of authenticated connections per
//! endpoint). Data streams in frames of at most `max_frame` bytes straight from the owner's
//! mapping into the consumer's destination buffer, so neither side holds more than one chunk.
//! The server counts what it serves in the owner's metrics (path `tcp`, role `serve`).
//! After the handshake a connection beyond loopback is wrapped in the AEAD record layer
//! (`secure`, through `Conn`); on loopback the owner splices segment pages with `sendfile` and
//! keeps them from recycling until the consumer confirms it received them (`Received`).
//! A `Get` may name a range: a striped fetch is one ranged `Get` per connection, each one an
//! authenticated `Conn` (encrypted beyond loopback) confirmed with its own `Received`.
//! Unauthenticated connections are bounded apart from authenticated ones: a connection gets one
//! deadline for its whole handshake (`handshake_timeout`), at most `max_handshakes` are in their
//! handshake at once (a new one drops the oldest), and only a connection that has proved the
//! secret takes one of the `max_connections` places. Sockets that trickle a byte now and then,
//! without the secret, can therefore never keep an authenticated consumer out.
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::auth::{client_handshake, server_handshake};
use crate::config::Config;
use crate::conn::Conn;
use crate::control::Control;
use crate::error::{io, Error, Result};
use crate::frame::{self, code, Kind, MAX_CONTROL};
use crate::metrics::Metrics;
use crate::path::Path;
use crate::relay::Fill;
use crate::secure::Side;
use crate::shm::Arena;

/// How long a server waits for the next request on an idle connection.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Dials a client makes for one connection whose handshake the server keeps cutting.
const HANDSHAKE_TRIES: usize = 3;
/// Payloads up to this size go out in one write with their header and trailer.
const SMALL: usize = 64 << 10;

/// The owner's listener. Dropping it stops accepting; open connections finish their request.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

struct Shared {
    secret: Vec<u8>,
    owner: String,
    arena: Arc<Arena>,
    control: Arc<Control>,
    metrics: Arc<Metrics>,
    max_frame: u32,
    sendfile: bool,
    drain_timeout: Duration,
    encrypt_loopback: bool,
    /// Authenticated connections being served.
    connections: AtomicUsize,
    max_connections: usize,
    handshake_timeout: Duration,
    /// Connections still in their handshake, oldest first.
    handshakes: Mutex<Handshakes>,
    max_handshakes: usize,
}

/// The connections a server holds in their handshake: a ticket number and a handle to the socket
/// (a clone of it, closed in forked children like the socket itself), so the accept loop can
/// drop the oldest when a new one needs the place.
#[derive(Default)]
struct Handshakes {
    next: u64,
    /// The guard drops before the handle it covers (tuple fields drop in order).
    open: VecDeque<(u64, crate::forkguard::Guard, TcpStream)>,
}

impl Shared {
    fn handshakes(&self) -> std::sync::MutexGuard<'_, Handshakes> {
        self.handshakes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a connection that starts its handshake, dropping the oldest one still in its
    /// handshake if every place is taken (shut down, so its thread ends at once). Returns its
    /// ticket, or `None` if the socket cannot be registered (the caller closes it unserved).
    fn admit(&self, stream: &TcpStream) -> Option<u64> {
        let handle = stream.try_clone().ok()?;
        let guard = crate::forkguard::register(std::os::fd::AsRawFd::as_raw_fd(&handle));
        let mut g = self.handshakes();
        while g.open.len() >= self.max_handshakes {
            let Some((_, _, oldest)) = g.open.pop_front() else { break };
            let _ = oldest.shutdown(std::net::Shutdown::Both);
        }
        g.next += 1;
        let ticket = g.next;
        g.open.push_back((ticket, guard, handle));
        Some(ticket)
    }

    /// The connection with `ticket` has left its handshake (done, failed or dropped).
    fn leave(&self, ticket: u64) {
        let mut g = self.handshakes();
        if let Some(i) = g.open.iter().position(|(t, ..)| *t == ticket) {
            g.open.remove(i);
        }
    }

    /// Takes one of the authenticated connections' places, released when the guard drops.
    fn take_place(&self) -> Option<Place<'_>> {
        if self.connections.fetch_add(1, Ordering::AcqRel) >= self.max_connections {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Place(&self.connections))
    }
}

/// One authenticated connection's place (`max_connections`), given back on drop.
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A socket whose reads and writes share one deadline: each call waits at most for what is left
/// of it, so a peer that sends a byte now and then cannot stretch a handshake out.
struct Deadline<'a> {
    s: &'a TcpStream,
    until: Instant,
}

impl Deadline<'_> {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(ErrorKind::TimedOut, "the handshake deadline passed"));
        }
        Ok(left)
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.s.set_read_timeout(Some(self.left()?))?;
        (&mut &*self.s).read(buf)
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.s.set_write_timeout(Some(self.left()?))?;
        (&mut &*self.s).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Server {
    /// Binds `cfg.bind` and serves `arena`'s published buffers to authenticated clients,
    /// counting what it serves, and every failure, in `metrics` (path `tcp`, role `serve`);
    /// control requests (free, lease release, channel look-up) go to `control`.
    pub fn start(
        cfg: &Config,
        owner: &str,
        arena: Arc<Arena>,
        control: Arc<Control>,
        metrics: Arc<Metrics>,
    ) -> Result<Server> {
        let listener = TcpListener::bind(cfg.bind).map_err(io(format!("bind {}", cfg.bind)))?;
        let addr = listener.local_addr().map_err(io("listener address"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            secret: cfg.secret.clone(),
            owner: owner.to_string(),
            arena,
            control,
            metrics,
            max_frame: cfg.max_frame,
            sendfile: cfg.sendfile,
            drain_timeout: cfg.drain_timeout,
            encrypt_loopback: cfg.encrypt_loopback,
            connections: AtomicUsize::new(0),
            max_connections: cfg.max_connections,
            handshake_timeout: cfg.handshake_timeout,
            handshakes: Mutex::default(),
            max_handshakes: cfg.max_handshakes,
        });
        let stopping = stop.clone();
        // A forked child closes its copy of the listener, so consumers of a dead owner are
        // refused at once even while the child lives. Registered here, before the thread runs,
        // so a fork right after `start` returns cannot miss it.
        let fork_guard = crate::forkguard::register(std::os::fd::AsRawFd::as_raw_fd(&listener));
        std::thread::Builder::new()
            .name("accel-transport-accept".into())
            .spawn(move || {
                let _fork = fork_guard;
                for stream in listener.incoming() {
                    if stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    // Every connection starts unauthenticated: it takes a handshake place (the
                    // oldest such connection makes room), never an authenticated one.
                    let Some(ticket) = shared.admit(&stream) else {
                        shared.metrics.serve_error(Path::Tcp);
                        continue;
                    };
                    let conn = shared.clone();
                    let fork_guard = crate::forkguard::register(std::os::fd::AsRawFd::as_raw_fd(&stream));
                    let spawned = std::thread::Builder::new().name("accel-transport-conn".into()).spawn(move || {
                        let _fork = fork_guard;
                        // A connection that ends other than by the peer closing it between
                        // requests (a failed or dropped handshake, a malformed request, a peer
                        // that hung up mid-stream) is one serve error.
                        if serve(stream, &conn, ticket).is_err() {
                            conn.metrics.serve_error(Path::Tcp);
                        }
                    });
                    if spawned.is_err() {
                        // The closure was dropped with the failed spawn; the connection closes
                        // unserved.
                        shared.leave(ticket);
                        shared.metrics.serve_error(Path::Tcp);
                    }
                }
            })
            .map_err(io("spawn the accept thread"))?;
        Ok(Server { addr, stop })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

/// Serves one connection until the peer closes it between requests (`Ok`) or something fails
/// (`Err`). Counts each buffer it sends, and each `Get` it refuses, in `sh.metrics`. The
/// connection holds handshake place `ticket` until its handshake ends, then (authenticated) one
/// of the `max_connections` places, or is refused with `BUSY` if none is free.
fn serve(tcp: TcpStream, sh: &Shared, ticket: u64) -> Result<()> {
    let shaken = handshake(&tcp, sh);
    sh.leave(ticket);
    let nonces = shaken?;
    tcp.set_read_timeout(Some(IDLE_TIMEOUT)).map_err(io("timeout"))?;
    tcp.set_write_timeout(Some(IDLE_TIMEOUT)).map_err(io("timeout"))?;
    // Beyond loopback every later byte is encrypted. Both ends decide from the same address:
    // the one the client dialled is the one the server accepted on.
    let local = tcp.local_addr().map_err(io("local address"))?;
    let encrypt = sh.encrypt_loopback || !local.ip().is_loopback();
    let s = &mut Conn::new(tcp, encrypt, &sh.secret, &nonces, Side::Server);
    let Some(_place) = sh.take_place() else {
        let _ = frame::write(s, Kind::Err, &frame::error_payload(code::BUSY, "too many connections"));
        return Err(Error::Protocol("too many authenticated connections".into()));
    };
    while let Some((kind, payload)) = next_request(s)? {
        match kind {
            Kind::Received => {} // a confirmation the owner did not wait for (no pages spliced)
            Kind::Get => {
                let started = Instant::now();
                match serve_get(s, sh, &payload)? {
                    Some(bytes) => sh.metrics.served(Path::Tcp, bytes, started.elapsed()),
                    None => sh.metrics.serve_error(Path::Tcp),
                }
            }
            Kind::Check => {
                let buffer = frame::u64_at(&payload, 0)?;
                match sh.arena.lookup(buffer) {
                    Some(_) => frame::write(s, Kind::Ok, &[])?,
                    None => frame::write(s, Kind::Err, &frame::error_payload(code::FREED, "buffer is not published"))?,
                }
            }
            k if Control::handles(k) => {
                // Free, Release and Latest: reached only after the handshake above.
                let (kind, reply) = sh.control.answer(k, &payload, &sh.arena, &sh.owner)?;
                frame::write(s, kind, &reply)?;
            }
            other => {
                let msg = format!("unexpected {other:?} frame");
                let _ = frame::write(s, Kind::Err, &frame::error_payload(code::PROTOCOL, &msg));
                return Err(Error::Protocol(msg));
            }
        }
    }
    Ok(())
}

/// The server's side of the handshake, all of it within `handshake_timeout` of now.
fn handshake(tcp: &TcpStream, sh: &Shared) -> Result<crate::secure::Nonces> {
    tcp.set_nodelay(true).map_err(io("nodelay"))?;
    let mut s = Deadline { s: tcp, until: Instant::now() + sh.handshake_timeout };
    server_handshake(&mut s, &sh.secret, &sh.owner)
}

/// Reads the next request frame; `None` when the peer closed the connection (or left it idle
/// past the timeout) before sending a byte of it, which ends a connection normally.
fn next_request(s: &mut Conn) -> Result<Option<(Kind, Vec<u8>)>> {
    let mut first = [0u8; 1];
    loop {
        match s.read(&mut first) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if is_disconnect(&e) || matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(None)
            }
            Err(e) => return Err(io("read frame header")(e)),
        }
    }
    frame::read(&mut (&first[..]).chain(&mut *s), MAX_CONTROL).map(Some)
}

/// Answers one `Get`: streams the buffer (or the range the request names) and returns the bytes
/// sent, or answers an `Err` frame (unknown buffer, length mismatch, range outside the buffer)
/// and returns `None`. `Err` when the connection failed.
fn serve_get(s: &mut Conn, sh: &Shared, payload: &[u8]) -> Result<Option<u64>> {
    let (buffer, want) = (frame::u64_at(payload, 0)?, frame::u64_at(payload, 8)?);
    let range =
        if payload.len() >= 32 { Some((frame::u64_at(payload, 16)?, frame::u64_at(payload, 24)?)) } else { None };
    match sh.arena.lookup_file(buffer) {
        None => {
            frame::write(s, Kind::Err, &frame::error_payload(code::FREED, "buffer is not published")).map(|()| None)
        }
        Some((_, len, _)) if len != want => {
            frame::write(s, Kind::Err, &frame::error_payload(code::PROTOCOL, "length mismatch")).map(|()| None)
        }
        Some((_, len, _)) if range.is_some_and(|(at, n)| at.checked_add(n).is_none_or(|end| end > len)) => {
            frame::write(s, Kind::Err, &frame::error_payload(code::PROTOCOL, "range outside the buffer")).map(|()| None)
        }
        Some((map, len, file)) => {
            let (at, n) = range.unwrap_or((0, len));
            // SAFETY: `map` keeps the mapping alive; it is at least `len` >= `at + n` bytes.
            let data = unsafe { std::slice::from_raw_parts(map.as_ptr().add(at as usize), n as usize) };
            let splice = sh.sendfile && s.plain().is_some();
            // A relay buffer still receiving: each piece goes out once it has landed.
            let fill = sh.control.fills.get(buffer);
            let fill = fill.as_deref().map(|f| (f, sh.drain_timeout));
            if send(s, data, splice.then_some(&file), at as usize, sh.max_frame as usize, fill)? {
                // `sendfile` queued references to the segment's pages, not copies, and on
                // loopback they sit in the consumer's receive queue until it reads them: keep the
                // buffer (`map`) from being recycled until the consumer confirms it has them all
                // (a ranged request, one stream of a striped fetch, confirms its own range).
                // A consumer that stalls past the drain timeout is cut off, and the buffer is
                // retired (never recycled), so it can never read recycled bytes.
                if !await_received(s, sh.drain_timeout)? {
                    sh.arena.retire(&map);
                    abort(s.tcp());
                    return Err(Error::Protocol("a consumer stalled past the drain timeout".into()));
                }
            }
            drop(map);
            Ok(Some(n))
        }
    }
}

/// Streams `data` (the contents of `file` from offset `base`) as Ok, Data..., End: every byte a
/// server sends passes through here. Large chunks go out with `sendfile`, which hands the socket
/// the segment's pages without a user-space copy; where the file system cannot, it falls back to
/// plain writes. With a `fill` (a relay buffer still receiving) each piece waits, bounded, until
/// it has landed; a failed or stalled upstream ends the stream, and the reader goes to the owner.
/// Returns whether it spliced.
fn send(
    s: &mut Conn,
    data: &[u8],
    file: Option<&std::fs::File>,
    base: usize,
    chunk: usize,
    fill: Option<(&Fill, Duration)>,
) -> Result<bool> {
    let landed = |at: usize, len: usize| match fill {
        Some((f, timeout)) if !f.wait(at as u64, len as u64, timeout) => {
            Err(Error::Protocol("a relayed buffer's upstream failed or stalled".into()))
        }
        _ => Ok(()),
    };
    let total = (data.len() as u64).to_le_bytes();
    if data.len() <= SMALL.min(chunk) {
        landed(base, data.len())?;
        let mut out = frame::encode(Kind::Ok, &total);
        out.extend_from_slice(&frame::header(Kind::Data, data.len()));
        out.extend_from_slice(data);
        out.extend_from_slice(&frame::header(Kind::End, 0));
        return s.write_all(&out).map(|()| false).map_err(io("send"));
    }
    frame::write(s, Kind::Ok, &total)?;
    let mut zero_copy = file.is_some();
    for (i, piece) in data.chunks(chunk).enumerate() {
        let at = base + i * chunk;
        landed(at, piece.len())?;
        s.write_all(&frame::header(Kind::Data, piece.len())).map_err(io("send"))?;
        if zero_copy {
            let tcp = s.plain().expect("zero-copy only on a plain connection");
            match send_file(tcp, file.expect("zero_copy implies a file"), at, piece.len()) {
                Ok(()) => continue,
                Err(0) => zero_copy = false,
                Err(_) => {
                    return Err(Error::Io { context: "sendfile".into(), source: std::io::Error::last_os_error() })
                }
            }
        }
        s.write_all(piece).map_err(io("send"))?;
    }
    frame::write(s, Kind::End, &[])?;
    Ok(zero_copy)
}

/// Sends `len` bytes of `file` from `at` with `sendfile`. `Err(0)` when nothing went out and the
/// file cannot be spliced (the caller falls back to writes); `Err(n)` after a failure mid-way.
fn send_file(s: &TcpStream, file: &std::fs::File, at: usize, len: usize) -> std::result::Result<(), usize> {
    use std::os::fd::AsRawFd;
    let mut off = at as libc::off_t;
    let mut sent = 0usize;
    while sent < len {
        // SAFETY: both descriptors are open for the call; `off` is a valid in/out pointer.
        let n = unsafe { libc::sendfile(s.as_raw_fd(), file.as_raw_fd(), &mut off, len - sent) };
        if n > 0 {
            sent += n as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        if n < 0 && e.kind() == ErrorKind::Interrupted {
            continue;
        }
        return Err(sent.max(usize::from(n == 0 || !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)))));
    }
    Ok(())
}

/// Waits (bounded) for the consumer's `Received` after a spliced stream: only then are the
/// segment's pages out of every socket queue. `Ok(false)` when it did not come in time.
fn await_received(s: &mut Conn, timeout: Duration) -> Result<bool> {
    s.tcp().set_read_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(io("timeout"))?;
    let got = frame::read(s, MAX_CONTROL);
    s.tcp().set_read_timeout(Some(IDLE_TIMEOUT)).map_err(io("timeout"))?;
    match got {
        Ok((Kind::Received, _)) => Ok(true),
        Ok((k, _)) => Err(Error::Protocol(format!("expected Received, got {k:?}"))),
        Err(Error::Io { source, .. }) if matches!(source.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Resets a connection: with a zero linger the close sends RST and drops what is queued.
fn abort(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt reads `linger` (valid for the call) on an open socket.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// A consumer's connections to owners, authenticated once and reused.
#[derive(Debug)]
pub struct Client {
    secret: Vec<u8>,
    connect_timeout: Duration,
    io_timeout: Duration,
    encrypt_loopback: bool,
    idle: Mutex<HashMap<String, Vec<Conn>>>,
}

impl Client {
    /// A client proving `cfg.secret`.
    pub fn new(cfg: &Config) -> Client {
        Client {
            secret: cfg.secret.clone(),
            connect_timeout: cfg.connect_timeout,
            io_timeout: cfg.io_timeout,
            encrypt_loopback: cfg.encrypt_loopback,
            idle: Mutex::default(),
        }
    }

    /// Dials `owner` at `endpoint` and authenticates. A handshake the server cuts is tried again
    /// (`HANDSHAKE_TRIES` in all): under a flood of unauthenticated connections the server drops
    /// the oldest one still in its handshake, which may be ours. A server that is gone refuses
    /// the next dial, which is `OwnerGone`.
    fn connect(&self, endpoint: &str, owner: &str) -> Result<Conn> {
        let gone = || Error::OwnerGone { owner: format!("{owner} at {endpoint}") };
        let addr = endpoint
            .to_socket_addrs()
            .map_err(io(format!("resolve {endpoint}")))?
            .next()
            .ok_or_else(|| Error::Protocol(format!("{endpoint} resolves to nothing")))?;
        let mut tries = 0;
        loop {
            tries += 1;
            let mut s = match TcpStream::connect_timeout(&addr, self.connect_timeout) {
                Ok(s) => s,
                Err(e) if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::TimedOut) => return Err(gone()),
                Err(e) => return Err(io(format!("connect to {endpoint}"))(e)),
            };
            s.set_nodelay(true).map_err(io("nodelay"))?;
            s.set_read_timeout(Some(self.io_timeout)).map_err(io("timeout"))?;
            s.set_write_timeout(Some(self.io_timeout)).map_err(io("timeout"))?;
            let (found, nonces) = match client_handshake(&mut s, &self.secret) {
                Ok(done) => done,
                Err(Error::Io { source, .. }) if is_disconnect(&source) && tries < HANDSHAKE_TRIES => continue,
                Err(Error::Io { source, .. }) if is_disconnect(&source) => return Err(gone()),
                Err(e) => return Err(e),
            };
            if found != owner {
                return Err(Error::Stale { expected: owner.into(), found, endpoint: endpoint.into() });
            }
            let encrypt = self.encrypt_loopback || !addr.ip().is_loopback();
            return Ok(Conn::new(s, encrypt, &self.secret, &nonces, Side::Client));
        }
    }

    /// Runs `f` on an authenticated connection to `owner` at `endpoint`. A cached connection
    /// that turns out dead is replaced once by a fresh one.
    fn with_conn<T>(&self, endpoint: &str, owner: &str, mut f: impl FnMut(&mut Conn) -> Result<T>) -> Result<T> {
        let key = format!("{owner}@{endpoint}");
        let cached = self.idle.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&key).and_then(Vec::pop);
        let result = match cached {
            Some(mut s) => match f(&mut s) {
                Err(Error::Io { .. }) => None,
                other => Some(other.map(|v| (v, s))),
            },
            None => None,
        };
        let result = match result {
            Some(r) => r,
            None => {
                let mut s = self.connect(endpoint, owner)?;
                f(&mut s).map(|v| (v, s))
            }
        };
        let gone = |e: Error| match e {
            Error::Io { source, .. } if is_disconnect(&source) => {
                Error::OwnerGone { owner: format!("{owner} at {endpoint} (connection lost)") }
            }
            e => e,
        };
        let (value, s) = result.map_err(gone)?;
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().push(s);
        Ok(value)
    }

    /// Streams published buffer `buffer` of `owner` into `dst` (exactly its length).
    pub fn fetch(&self, endpoint: &str, owner: &str, buffer: u64, dst: &mut [u8]) -> Result<()> {
        self.fetch_range(endpoint, owner, buffer, dst.len() as u64, None, dst, &|_, _| Ok(()))
    }

    /// Like `fetch`, over `streams` connections at once, each streaming one contiguous part of
    /// the buffer (whole 4 MiB pieces) straight into its part of `dst`: on a fast link one TCP
    /// stream is bound by the one core that copies it out of the socket. Small buffers, and
    /// `streams <= 1`, take one stream.
    pub fn fetch_striped(
        &self,
        endpoint: &str,
        owner: &str,
        buffer: u64,
        dst: &mut [u8],
        streams: usize,
    ) -> Result<()> {
        self.fetch_striped_with(endpoint, owner, buffer, dst, streams, &|_, _| Ok(()))
    }

    /// Like `fetch_striped`, calling `landed(offset, len)` as each piece of `dst` arrives (a
    /// relay checks it and forwards it from there); an `Err` from it ends the fetch with it.
    pub fn fetch_striped_with(
        &self,
        endpoint: &str,
        owner: &str,
        buffer: u64,
        dst: &mut [u8],
        streams: usize,
        landed: &(dyn Fn(u64, u64) -> Result<()> + Sync),
    ) -> Result<()> {
        const PIECE: usize = 4 << 20;
        let total = dst.len();
        let streams = streams.min(total / (4 * PIECE)).max(1);
        if streams == 1 {
            return self.fetch_range(endpoint, owner, buffer, total as u64, None, dst, landed);
        }
        let part = total.div_ceil(streams).div_ceil(PIECE) * PIECE;
        std::thread::scope(|scope| {
            let handles: Vec<_> = dst
                .chunks_mut(part)
                .enumerate()
                .map(|(i, piece)| {
                    let at = (i * part) as u64;
                    scope
                        .spawn(move || self.fetch_range(endpoint, owner, buffer, total as u64, Some(at), piece, landed))
                })
                .collect();
            // Every stream is joined (so `dst` is no longer borrowed) before the first error wins.
            let results: Vec<Result<()>> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::Protocol("a stream thread panicked".into()))))
                .collect();
            results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
        })
    }

    /// Streams `dst.len()` bytes of buffer `buffer` (of `total` bytes) from offset `at` (`None`:
    /// the whole buffer, in the form owners before ranges understand) into `dst`, reporting each
    /// piece that lands to `landed` (offsets in the whole buffer).
    #[allow(clippy::too_many_arguments)]
    fn fetch_range(
        &self,
        endpoint: &str,
        owner: &str,
        buffer: u64,
        total: u64,
        at: Option<u64>,
        dst: &mut [u8],
        landed: &(dyn Fn(u64, u64) -> Result<()> + Sync),
    ) -> Result<()> {
        self.with_conn(endpoint, owner, |s| {
            let mut req = buffer.to_le_bytes().to_vec();
            req.extend_from_slice(&total.to_le_bytes());
            if let Some(at) = at {
                req.extend_from_slice(&at.to_le_bytes());
                req.extend_from_slice(&(dst.len() as u64).to_le_bytes());
            }
            frame::write(s, Kind::Get, &req)?;
            let ok = match frame::read(s, MAX_CONTROL)? {
                (Kind::Ok, p) => p,
                (Kind::Err, p) if p.first() == Some(&code::FREED) => {
                    return Err(Error::Freed { owner: owner.into(), buffer })
                }
                (Kind::Err, p) => return Err(frame::remote_error(&p)),
                (k, _) => return Err(Error::Protocol(format!("expected Ok, got {k:?}"))),
            };
            let announced = frame::u64_at(&ok, 0)?;
            if announced != dst.len() as u64 {
                return Err(Error::Protocol(format!("owner announced {announced} bytes, expected {}", dst.len())));
            }
            receive(s, dst, at.unwrap_or(0), landed)
        })
    }

    /// Sends one control request (`Release`, `Latest`, ...) to `owner` and returns its reply
    /// frame; an `Err` reply with the `FREED` code is `not_there`, other `Err` replies their error.
    pub fn request(
        &self,
        endpoint: &str,
        owner: &str,
        kind: Kind,
        payload: &[u8],
        not_there: impl Fn() -> Error,
    ) -> Result<(Kind, Vec<u8>)> {
        self.with_conn(endpoint, owner, |s| {
            frame::write(s, kind, payload)?;
            match frame::read(s, MAX_CONTROL)? {
                (Kind::Err, p) if p.first() == Some(&code::FREED) => Err(not_there()),
                (Kind::Err, p) => Err(frame::remote_error(&p)),
                reply => Ok(reply),
            }
        })
    }

    /// Asks the owner whether `buffer` is still published: `Ok` if so, `Freed` if not.
    pub fn check(&self, endpoint: &str, owner: &str, buffer: u64) -> Result<()> {
        self.ask(endpoint, owner, buffer, Kind::Check, Kind::Ok)
    }

    /// Asks the owner to free `buffer`.
    pub fn free(&self, endpoint: &str, owner: &str, buffer: u64) -> Result<()> {
        self.ask(endpoint, owner, buffer, Kind::Free, Kind::Freed)
    }

    /// Sends `request` about `buffer` and expects `reply`; `Freed` if the owner does not have it.
    fn ask(&self, endpoint: &str, owner: &str, buffer: u64, request: Kind, reply: Kind) -> Result<()> {
        let freed = || Error::Freed { owner: owner.into(), buffer };
        match self.request(endpoint, owner, request, &buffer.to_le_bytes(), freed)? {
            (k, _) if k == reply => Ok(()),
            (k, _) => Err(Error::Protocol(format!("expected {reply:?}, got {k:?}"))),
        }
    }

    /// Drops the cached connections.
    pub fn clear(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Receives a stream's `Data` frames into `dst` until its `End`: every data byte a client
/// receives passes through here. Data lands in `dst`, which the reference sized before any frame
/// arrived: a declared length is checked against the room left there before a byte is read (so
/// owners with another chunk size interoperate). After the `End` it tells the owner every byte
/// is here (`Received`): only then may the owner recycle pages it spliced into the socket. An
/// `Err` from `landed` (a relayed piece that fails its digest) ends the stream with it.
fn receive(s: &mut Conn, dst: &mut [u8], base: u64, landed: &(dyn Fn(u64, u64) -> Result<()> + Sync)) -> Result<()> {
    let mut at = 0usize;
    loop {
        let (kind, len) = frame::read_header(s, u32::MAX)?;
        match kind {
            Kind::Data if len as usize <= dst.len() - at => {
                s.read_exact(&mut dst[at..at + len as usize]).map_err(io("receive"))?;
                landed(base + at as u64, u64::from(len))?;
                at += len as usize;
            }
            Kind::Data => return Err(Error::FrameTooLarge { len: len.into(), max: (dst.len() - at) as u64 }),
            Kind::End if at == dst.len() && len == 0 => {
                // Best effort: every byte did arrive; a broken connection shows (and is
                // replaced) on its next use.
                let _ = frame::write(s, Kind::Received, &[]);
                return Ok(());
            }
            k => return Err(Error::Protocol(format!("unexpected {k:?} frame mid-stream"))),
        }
    }
}

fn is_disconnect(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
            | ErrorKind::ConnectionRefused
    )
}
