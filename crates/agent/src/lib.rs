//! The accel node agent (`accel agent`): serves a node's model (`/v1/node`), its health, live
//! accelerator and link metrics in Prometheus form (`/metrics`), the Ray cluster view
//! (`/v1/cluster`) and a dashboard (`/`) whose assets are compiled into the binary.
//!
//! Readers ([`readers`]) ask every family's `metrics` (built-in readers and external plugins'
//! `metrics` verb, through the plugin contract) for one vendor-neutral [`readings::Readings`]; a
//! background task samples them every interval and [`metrics`] renders the exposition once
//! per sample, so a scrape only copies the latest text. [`listener`] bounds what clients can
//! hold (timeouts, a connection cap, a shutdown that does not wait on them), over TLS ([`tls`])
//! beyond loopback; [`lab`] serves the lab's rendered pages under `/lab/`.

pub mod assets;
pub mod auth;
pub mod files;
pub mod lab;
pub mod listener;
pub mod metrics;
pub mod readers;
/// The readings document, owned by discovery (the plugin contract's `metrics`).
pub use accel_discover::readings;
pub mod server;
pub mod tls;
pub mod transport;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use auth::AuthError;
pub use listener::Limits;
use readers::Readers;
pub use server::State;

/// Everything `accel agent` was asked for.
#[derive(Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub node_name: String,
    pub machine: accel_model::Machine,
    /// `GET /v1/env`: the environment fingerprint, serialised (`accel env --json`).
    pub env: String,
    pub readers: Readers,
    pub token: Option<String>,
    pub cluster_file: Option<PathBuf>,
    pub transport_dir: Option<PathBuf>,
    pub interval: Duration,
    /// Host names and addresses served besides localhost, loopback and the listen address
    /// (`--allow-host`); see [`auth::HostPolicy`].
    pub allow_hosts: Vec<String>,
    pub limits: Limits,
    /// Serve TLS with this certificate and key (`--tls-cert`, `--tls-key`); required beyond
    /// loopback.
    pub tls: Option<tls::TlsFiles>,
    /// Serve the lab's rendered pages under `/lab/` (`--lab-pages`).
    pub lab: Option<lab::LabPages>,
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("{0}")]
    Lab(String),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// Blocking threads: the sampler and the file reads of requests (transport files, the cluster
/// document). More requests queue rather than start threads.
const BLOCKING_THREADS: usize = 4;

/// How long the runtime waits for a blocking task at exit (a plugin past its deadline, a slow
/// disk) before the process leaves it behind.
const EXIT_WAIT: Duration = Duration::from_millis(250);

/// Serves until SIGINT or SIGTERM. Checks the listener against the token and the allowed hosts
/// before binding. `ready` is called with the bound address (port 0 picks one).
pub fn serve(config: Config, ready: impl FnOnce(SocketAddr)) -> Result<(), Error> {
    auth::check_listener(config.listen, config.token.as_deref(), config.tls.is_some())?;
    let hosts = auth::HostPolicy::new(config.listen, &config.allow_hosts)?;
    let tls = config.tls.as_ref().map(tls::server_config).transpose()?;
    if let Some(pages) = &config.lab {
        lab::check_dir(&pages.dir).map_err(Error::Lab)?;
    }
    // One worker thread: serving a cached text is cheap, and the machine may have 2 cores;
    // readers run on the blocking pool.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
        .map_err(Error::Runtime)?;
    let result = rt.block_on(async move {
        let listener = bind(config.listen).map_err(|e| Error::Bind(config.listen, e))?;
        let addr = listener.local_addr().map_err(|e| Error::Bind(config.listen, e))?;
        let mut state = State::new(config.node_name, config.machine, config.token);
        state.env_json = config.env;
        state.cluster_file = config.cluster_file;
        state.transport_dir = config.transport_dir;
        state.interval = config.interval;
        state.hosts = hosts;
        state.lab = config.lab.map(|p| {
            Arc::new(lab::Lab {
                dir: p.dir,
                sessions: lab::Sessions::new(p.session_ttl),
                secure: tls.is_some(),
                token: state.token.clone(),
            })
        });
        let state = Arc::new(state);
        let readers = Arc::new(config.readers);
        // The first sample before serving, so /metrics is never empty.
        {
            let (s, r) = (state.clone(), readers.clone());
            let _ = tokio::task::spawn_blocking(move || s.refresh(&r)).await;
        }
        let sampler = {
            let (s, r) = (state.clone(), readers.clone());
            let interval = config.interval;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let (s, r) = (s.clone(), r.clone());
                    let _ = tokio::task::spawn_blocking(move || s.refresh(&r)).await;
                }
            })
        };
        ready(addr);
        let app = server::router(state);
        listener::serve(listener, app, config.limits, tls, shutdown()).await;
        sampler.abort();
        Ok(())
    });
    // Not the runtime's drop, which waits for every blocking task however long it takes.
    rt.shutdown_timeout(EXIT_WAIT);
    result
}

/// Connections the kernel may hold for the agent to accept (capped by `net.core.somaxconn`):
/// a flood of reconnecting clients overflows a short queue, and a dropped SYN costs a
/// legitimate client a one-second retransmission.
const BACKLOG: u32 = 4096;

fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}
