//! The accel node agent (`accel agent`): serves a node's model (`/v1/node`), its health, live
//! accelerator and link metrics in Prometheus form (`/metrics`), the Ray cluster view
//! (`/v1/cluster`) and a dashboard (`/`) whose assets are compiled into the binary.
//!
//! Readers ([`readers`]) turn each vendor interface (NVML, amdgpu sysfs, habanalabs sysfs,
//! external plugins' `metrics` verb) into one vendor-neutral [`readings::Readings`]; a
//! background task samples them every interval and [`metrics`] renders the exposition once
//! per sample, so a scrape only copies the latest text.

pub mod assets;
pub mod auth;
pub mod metrics;
pub mod readers;
pub mod readings;
pub mod recordings;
pub mod server;
pub mod transport;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use auth::AuthError;
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
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("server: {0}")]
    Serve(std::io::Error),
}

/// Serves until SIGINT or SIGTERM. Checks the listener against the token before binding.
/// `ready` is called with the bound address (port 0 picks one).
pub fn serve(config: Config, ready: impl FnOnce(SocketAddr)) -> Result<(), Error> {
    auth::check_listener(config.listen, config.token.as_deref())?;
    // One worker thread: serving a cached text is cheap, and the machine may have 2 cores;
    // readers run on the blocking pool.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Error::Runtime)?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.listen).await.map_err(|e| Error::Bind(config.listen, e))?;
        let addr = listener.local_addr().map_err(|e| Error::Bind(config.listen, e))?;
        let mut state = State::new(config.node_name, config.machine, config.token);
        state.env_json = config.env;
        state.cluster_file = config.cluster_file;
        state.transport_dir = config.transport_dir;
        state.interval = config.interval;
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
        let result = axum::serve(listener, app).with_graceful_shutdown(shutdown()).await.map_err(Error::Serve);
        sampler.abort();
        result
    })
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
