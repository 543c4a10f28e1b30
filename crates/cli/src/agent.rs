//! `accel agent`: the long-running node agent (HTTP API, metrics, dashboard). Argument parsing
//! and wiring only; the agent itself is the `accel-agent` crate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use accel_agent::readers::Readers;
use anyhow::{Context, Result};
use clap::Args;

use crate::source::SourceArgs;

/// `accel agent` arguments.
#[derive(Debug, Args)]
#[command(
    after_help = "Endpoints (GET only, but the lab's sign-in form):\n  /             the dashboard (assets built in; works offline)\n  /v1/node      the node's model (docs/schema.md)\n  /v1/health    readers, sample age; 503 when the sampler is stuck\n  /v1/env       the environment fingerprint (`accel env --json`)\n  /v1/readings  the latest readings, vendor-neutral (plugin protocol v1 shape)\n  /v1/cluster   the Ray cluster view (--cluster-file), or this node alone; with age_s and stale\n  /metrics      Prometheus/OpenMetrics (names in docs/metrics.md)\n  /metrics/transport  transport metrics of this node's processes (--transport-dir)\n  /lab/         the lab's pages (--lab-pages DIR, rendered by `accel lab pages`)\n\nSecurity: on a loopback address no token is needed. Any other address requires\n--token-file (owned by this user, mode 600) and TLS (--tls-cert, --tls-key); requests\nthen carry `Authorization: Bearer <token>` (the lab's pages also take a sign-in cookie).\nEvery request must name the agent in its Host header: localhost, a loopback address, the listen address (any address when listening on a\nwildcard one) or a name given with --allow-host; others get 421, which keeps web pages\nout through DNS rebinding. A request head must arrive within 5 s (also the keep-alive\nidle time) and fit in 16 KiB; at most 256 connections are open (the longest idle one\nmakes room for a new one); SIGTERM stops the agent within about a second.\n\nExamples:\n  accel agent                                   this machine, on 127.0.0.1:9477\n  accel agent --sample gb200-nvl72-tray         a captured machine with recorded readings\n  accel agent --listen 0.0.0.0:9477 --token-file /etc/accel/token --tls-cert node.pem \\\n      --tls-key node.key --allow-host node-1.example\n  accel agent --lab-pages /srv/lab/pages        the lab's pages at http://127.0.0.1:9477/lab/\n\nEnvironment:\n  ACCEL_PLUGIN_DIR  directory of accel-plugin-<name> executables whose `metrics` verb is read"
)]
pub struct AgentArgs {
    /// Address to listen on. Anything but loopback needs --token-file and --tls-cert/--tls-key.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9477")]
    listen: SocketAddr,
    #[command(flatten)]
    source: SourceArgs,
    /// File holding the bearer token (first line, at least 16 characters); it must belong to
    /// this user and be unreadable by others (chmod 600).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Serve TLS with this PEM certificate chain (with --tls-key). Required on any address but
    /// loopback, so the token never crosses the network in the clear.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key; it must belong to this user and be unreadable by others
    /// (chmod 600).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve the lab's pages, rendered into DIR by `accel lab pages`, under /lab/ (docs/lab.md).
    #[arg(long, value_name = "DIR")]
    lab_pages: Option<PathBuf>,
    /// How long a lab sign-in session lasts (with a token), in hours.
    #[arg(long, value_name = "HOURS", default_value_t = 8.0, requires = "lab_pages")]
    session_hours: f64,
    /// Also serve requests whose Host header is NAME (a DNS name or an address, no port), e.g.
    /// the name Prometheus or a browser uses to reach this node. Repeatable.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// Serve this cluster document (written by `python -m accel.ray start`'s sidecar) at /v1/cluster.
    #[arg(long, value_name = "FILE")]
    cluster_file: Option<PathBuf>,
    /// Directory where processes write `accel-transport-<pid>.prom` (accel.transport.write_metrics).
    #[arg(long, value_name = "DIR")]
    transport_dir: Option<PathBuf>,
    /// Replay this readings document (plugin protocol v1 `metrics` JSON) on every sample.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Seconds between samples of the readers.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    interval: f64,
    /// Name of this node in the cluster view (default: the hostname discovery found).
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
}

/// Runs the agent until SIGINT/SIGTERM. Invalid usage (a network listener without a token, a
/// bad token file, a bad --allow-host) prints one line and exits with status 2.
pub fn run(args: AgentArgs) -> Result<()> {
    let usage = |msg: String| -> ! {
        eprintln!("accel agent: error: {msg}");
        std::process::exit(2);
    };
    if !(args.interval.is_finite() && (0.05..=3600.0).contains(&args.interval)) {
        usage(format!("--interval {} is not between 0.05 and 3600 seconds", args.interval));
    }
    let token =
        args.token_file.as_ref().map(|p| accel_agent::auth::read_token(p).unwrap_or_else(|e| usage(e.to_string())));
    if let Err(e) = accel_agent::auth::check_listener(args.listen, token.as_deref(), args.tls_cert.is_some()) {
        usage(e.to_string());
    }
    let tls =
        args.tls_cert.clone().zip(args.tls_key.clone()).map(|(cert, key)| accel_agent::tls::TlsFiles { cert, key });
    if let Some(files) = &tls {
        if let Err(e) = accel_agent::tls::server_config(files) {
            usage(e.to_string());
        }
    }
    if !(args.session_hours.is_finite() && (0.001..=720.0).contains(&args.session_hours)) {
        usage(format!("--session-hours {} is not between 0.001 and 720", args.session_hours));
    }
    if let Some(dir) = &args.lab_pages {
        if let Err(e) = accel_agent::lab::check_dir(dir) {
            usage(e);
        }
    }
    if let Err(e) = accel_agent::auth::HostPolicy::new(args.listen, &args.allow_hosts) {
        usage(e.to_string());
    }
    let replay = match &args.replay {
        Some(p) => {
            let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
            Some(serde_json::from_slice(&bytes).with_context(|| format!("{} is not a metrics document", p.display()))?)
        }
        None => None,
    };
    let host = crate::source::make_host(&args.source)?;
    // The same plugins as every other command (built-in and external): discovery, the
    // fingerprint and the readings all use this one list.
    let (plugins, plugin_warnings) = accel_discover::plugins_with_external(&crate::source::exec_options());
    let mut machine = accel_discover::discover(&host, &plugins);
    machine.warnings.extend(plugin_warnings);
    let env = serde_json::to_string(&accel_discover::fingerprint::collect_with(&host, &machine, &plugins))
        .context("cannot serialise the environment fingerprint")?;
    let node_name = args
        .node_name
        .clone()
        .or_else(|| args.source.sample.clone())
        .or_else(|| machine.host.hostname.clone())
        .unwrap_or_else(|| "node".into());
    // The same families discovery ran, asked for their `metrics`.
    let readers = Readers { replay, ..Readers::new(host, plugins) };
    let config = accel_agent::Config {
        listen: args.listen,
        node_name,
        machine,
        env,
        readers,
        token,
        cluster_file: args.cluster_file,
        transport_dir: args.transport_dir,
        interval: Duration::from_secs_f64(args.interval),
        allow_hosts: args.allow_hosts,
        limits: accel_agent::Limits::default(),
        lab: args.lab_pages.map(|dir| accel_agent::lab::LabPages {
            dir,
            session_ttl: Duration::from_secs_f64(args.session_hours * 3600.0),
        }),
        tls,
    };
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    // `python -m accel.ray start --agent` waits for this line (AGENT_SERVING in
    // python/accel/ray/_start.py): it proves the agent answering is the one just started.
    accel_agent::serve(config, |addr| eprintln!("accel agent: serving {scheme}://{addr}/")).map_err(anyhow::Error::from)
}
