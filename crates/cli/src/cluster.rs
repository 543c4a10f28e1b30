//! `accel cluster`: a cluster file (docs/placement.md) from embedded samples (`--sample`), or
//! from real machines (`accel cluster build`): `accel capture` outputs, running node agents
//! (`--from-agent`, `/v1/node` over HTTP, or HTTPS verified against a CA file, with the agent's
//! token), and the machines
//! `python -m accel.ray start` published in a Ray cluster (`--from-ray`, through a Python
//! interpreter with accel and Ray, since this binary does not speak Ray's protocol).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accel_agent::tls::rustls;
use accel_model::Machine;
use accel_plan::{Cluster, ClusterNode, MachineRef};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use crate::plan::apply_topology;

const CLUSTER_HELP: &str = "\
Examples:
  accel cluster --sample dgx-h100:4,mi300x:2 --rack-size 2 > cluster.json
  accel cluster build node-a/ node-b/ --labels labels.txt -o cluster.json

`accel cluster --sample` builds a cluster of embedded samples; `accel cluster build` builds one
from real machines (captures, node agents, Ray): see `accel cluster build --help`.";

const BUILD_HELP: &str = "\
Sources (any mix; nodes keep this order, which --rack-size follows):
  CAPTURE              an `accel capture OUT` directory (holding capture.bundle), a capture.bundle
                       file, or a captured tree holding sys/ and proc/ (an imported hwloc XML
                       is a bundle too: `accel import hwloc`). The node is named after the
                       capture's hostname (/proc/sys/kernel/hostname), else the file or
                       directory name; `NAME=CAPTURE` names it yourself.
  --from-agent URL...  running node agents (`accel agent`): GET URL/v1/node for the machine,
                       URL/v1/health for the node's name. https:// (the agent's TLS, beyond
                       loopback) is verified against --ca-file FILE; a token is never sent
                       over plain http:// except to loopback. The token comes from
                       --token-file FILE (chmod 600) or the ACCEL_AGENT_TOKEN variable, and is
                       never printed.
  --from-ray           the machines `python -m accel.ray start` published in a running Ray
                       cluster, with their accel.io/* labels; runs `$ACCEL_PYTHON` (default
                       python3) `-m accel.ray cluster-json [--address ADDR]`, which needs accel
                       and Ray installed in that interpreter.

Labels file (--labels), one node per line, `#` comments:
  gpu-a  rack=r1 zone=z1
  gpu-b  rack=r2 zone=z1
or JSON: {\"gpu-a\": {\"rack\": \"r1\"}}. A node the cluster lacks is an error.

Examples:
  accel capture node-a/                       on each machine, then copy the directories here
  accel cluster build node-a/ node-b/ --labels labels.txt -o cluster.json
  accel cluster build --from-agent https://node-1.example:9477 https://node-2.example:9477 \\
      --token-file ~/.config/accel/token --ca-file lab-ca.pem --rack-size 8 -o cluster.json
  accel cluster build --from-ray --address 10.0.0.1:6379 -o cluster.json
  accel plan --cluster cluster.json --request request.json
  accel export slurm --cluster cluster.json --out-dir slurm/
  accel export dra --cluster cluster.json | kubectl apply -f -";

/// `accel cluster`: `--sample ...` (samples), or `build ...` (real machines).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true, after_help = CLUSTER_HELP)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: Option<ClusterCommand>,
    /// Samples and how many nodes of each: `dgx-h100:4,mi300x:2` (names as `accel samples` lists them).
    #[arg(long, value_name = "NAME:COUNT,...", required = true)]
    pub sample: Option<String>,
    /// Put every N consecutive nodes in one rack (label `rack=r<k>`).
    #[arg(long, value_name = "N")]
    pub rack_size: Option<usize>,
    /// Nodes per multi-node scale-up domain for samples whose own data does not say how many
    /// share one (an `nvlink_clique`: 18 NVL72 trays). A node-local domain (an xGMI hive, a
    /// one-host TPU slice) is always each node's own.
    #[arg(long, value_name = "N", default_value_t = 18)]
    pub clique_trays: usize,
    /// The fabric's switch tiers: a Slurm `topology.conf` (tree or block) or accel's topology
    /// JSON (`.json`, docs/placement.md). Each node gets its leaf/spine/core (or block) labels
    /// and the cluster its `tiers`; nodes are matched by name.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Build a cluster file from real machines: captures, running node agents, or a Ray cluster.
    #[command(after_help = BUILD_HELP)]
    Build(BuildArgs),
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// `accel capture` outputs: a directory holding capture.bundle, a bundle file, or a captured
    /// tree with sys/ and proc/; `NAME=CAPTURE` names the node.
    #[arg(value_name = "CAPTURE")]
    captures: Vec<String>,
    /// Node agents to read (`http://HOST:PORT`); several may follow one flag.
    #[arg(long, value_name = "URL", num_args = 1..)]
    from_agent: Vec<String>,
    /// The agents' bearer token file (first line; owned by you, chmod 600). Default: the
    /// ACCEL_AGENT_TOKEN variable, else no token (an agent on loopback needs none).
    #[arg(long, value_name = "FILE", requires = "from_agent")]
    token_file: Option<PathBuf>,
    /// The CA certificate (PEM) that `https://` agents' certificates are verified against.
    #[arg(long, value_name = "FILE", requires = "from_agent")]
    ca_file: Option<PathBuf>,
    /// The machines `python -m accel.ray start` published in the running Ray cluster.
    #[arg(long)]
    from_ray: bool,
    /// The Ray cluster for --from-ray (`HOST:PORT` of its GCS); default: Ray's `auto`.
    #[arg(long, value_name = "ADDR", requires = "from_ray")]
    address: Option<String>,
    /// Per-node labels, merged into the nodes' labels: `NODE key=value ...` lines or JSON
    /// `{"NODE": {"key": "value"}}`.
    #[arg(long, value_name = "FILE")]
    labels: Option<PathBuf>,
    /// Put every N consecutive nodes in one rack (label `rack=r<k>`; --labels wins).
    #[arg(long, value_name = "N")]
    rack_size: Option<usize>,
    /// The fabric's switch tiers (as `accel cluster --topology`): a Slurm `topology.conf` or
    /// accel's topology JSON; nodes are matched by name.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Let the planner place devices whose health is unknown (the cluster's `health` policy).
    #[arg(long)]
    allow_unknown_health: bool,
    /// Write the cluster here (through a temporary file and a rename) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    registry: crate::source::RegistryArgs,
}

/// `accel cluster ...`.
pub fn run(args: &ClusterArgs, out: &mut impl Write) -> Result<()> {
    match &args.command {
        Some(ClusterCommand::Build(build_args)) => {
            let cluster = build(build_args)?;
            let text = serde_json::to_string(&cluster)? + "\n";
            match &build_args.output {
                Some(path) => {
                    crate::export::write_atomic(path, &text)?;
                    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
                    let plural = if names.len() == 1 { "" } else { "s" };
                    writeln!(out, "wrote {}: {} node{plural} ({})", path.display(), names.len(), names.join(", "))?;
                }
                None => out.write_all(text.as_bytes())?,
            }
        }
        // Through a string, so a closed pipe is an io::Error (exit 0), not a serde one.
        None => out.write_all((serde_json::to_string(&build_cluster(args)?)? + "\n").as_bytes())?,
    }
    Ok(())
}

/// Builds a cluster of sample machines; nodes are named `<sample>-<k>`.
pub fn build_cluster(args: &ClusterArgs) -> Result<Cluster> {
    let mut cluster = Cluster::default();
    let samples = args.sample.as_deref().unwrap_or_default();
    for part in samples.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, count) = match part.split_once(':') {
            Some((n, c)) => (n, c.parse::<usize>().with_context(|| format!("bad count in {part:?}"))?),
            None => (part, 1),
        };
        cluster.add_nodes(name, crate::source::sample_machine(name)?, count, args.clique_trays);
    }
    if cluster.nodes.is_empty() {
        bail!("--sample names no nodes");
    }
    if let Some(size) = args.rack_size {
        cluster.label_racks(size);
    }
    if let Some(path) = &args.topology {
        apply_topology(&mut cluster, path)?;
    }
    Ok(cluster)
}

/// One node before it joins the cluster: its name, where it came from (for errors), its
/// machine and the labels its source gave it.
struct Found {
    name: String,
    from: String,
    machine: Machine,
    labels: BTreeMap<String, String>,
}

/// `accel cluster build`: every source's nodes, in order, then racks, labels and tiers.
fn build(args: &BuildArgs) -> Result<Cluster> {
    if args.captures.is_empty() && args.from_agent.is_empty() && !args.from_ray {
        bail!("nothing to build from: give CAPTURE paths, --from-agent URL or --from-ray");
    }
    if args.rack_size == Some(0) {
        bail!("--rack-size must be at least 1");
    }
    // Check every file argument before the slow part (agents, Ray).
    let labels = args.labels.as_deref().map(read_labels).transpose()?;
    if let Some(path) = &args.topology {
        std::fs::metadata(path).with_context(|| format!("reading topology {}", path.display()))?;
    }
    let mut found = Vec::new();
    if !args.captures.is_empty() {
        let registry = crate::source::registry(&args.registry)?;
        for arg in &args.captures {
            found.push(from_capture(arg, &registry)?);
        }
    }
    if !args.from_agent.is_empty() {
        let token = agent_token(args.token_file.as_deref())?;
        let tls = args.ca_file.as_deref().map(accel_agent::tls::client_config).transpose()?;
        let client = AgentClient { token, tls };
        for url in &args.from_agent {
            found.push(from_agent(url, &client)?);
        }
    }
    if args.from_ray {
        found.extend(from_ray(args.address.as_deref())?);
    }
    let mut cluster = assemble(found)?;
    if args.allow_unknown_health {
        cluster.health.unknown = accel_plan::UnknownHealth::Allow;
    }
    if let Some(size) = args.rack_size {
        cluster.label_racks(size);
    }
    if let (Some(labels), Some(path)) = (labels, &args.labels) {
        apply_labels(&mut cluster, labels).with_context(|| format!("labels {}", path.display()))?;
    }
    if let Some(path) = &args.topology {
        apply_topology(&mut cluster, path)?;
    }
    // The exports read any machine; the planner has limits (devices per node): say so now,
    // not at the first `accel plan`.
    if let Err(e) = accel_plan::Planner::new(&cluster) {
        eprintln!("accel: warning: `accel plan` cannot use this cluster: {e}");
    }
    Ok(cluster)
}

/// The nodes as a cluster: each machine under its node's name in `machines`. Two nodes of one
/// name are an error naming both sources.
fn assemble(found: Vec<Found>) -> Result<Cluster> {
    let mut cluster = Cluster::default();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for node in found {
        check_name(&node.name).with_context(|| format!("{}: node name {:?}", node.from, node.name))?;
        if let Some(first) = seen.get(&node.name) {
            bail!(
                "two nodes named {:?}: {first} and {}; name them yourself (NAME=CAPTURE, or the agent's --node-name)",
                node.name,
                node.from
            );
        }
        seen.insert(node.name.clone(), node.from);
        cluster.machines.insert(node.name.clone(), node.machine);
        cluster.nodes.push(ClusterNode {
            machine: MachineRef::Name(node.name.clone()),
            name: node.name,
            labels: node.labels,
            allocated: Vec::new(),
        });
    }
    Ok(cluster)
}

/// A node name: what Slurm, Kubernetes and Ray all accept, a host name's characters.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if !ok {
        bail!("not a host name (letters, digits, '.', '-', '_'; starting with a letter or digit)");
    }
    Ok(())
}

// --- captures ---------------------------------------------------------------------------------

/// A capture argument (`PATH` or `NAME=PATH`) discovered, the way `accel topo --root PATH` does.
fn from_capture(arg: &str, registry: &accel_model::SkuRegistry) -> Result<Found> {
    let (given, path) = match arg.split_once('=') {
        Some((name, path)) if !name.is_empty() && !name.contains('/') => (Some(name.to_owned()), PathBuf::from(path)),
        _ => (None, PathBuf::from(arg)),
    };
    let from = format!("capture {}", path.display());
    std::fs::metadata(&path).with_context(|| format!("{from}: cannot read it"))?;
    let options = accel_discover::OpenOptions {
        registry: registry.clone(),
        labels_file: None,
        network: false,
        env: BTreeMap::new(),
    };
    let host = accel_discover::Host::open(&accel_discover::Source::Root(path.clone()), options)
        .with_context(|| from.clone())?;
    let machine = accel_discover::discover_all(&host, &crate::source::exec_options());
    let name = given
        .or_else(|| machine.host.hostname.clone().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty()))
        .or_else(|| name_from_path(&path))
        .with_context(|| format!("{from}: no hostname and no file name to name the node after (use NAME=CAPTURE)"))?;
    Ok(Found { name, from, machine, labels: BTreeMap::new() })
}

/// `node-a/` and `node-a/capture.bundle` are `node-a`; `node-b.bundle` is `node-b`.
fn name_from_path(path: &Path) -> Option<String> {
    let path = std::path::absolute(path).ok()?;
    let stem = if path.is_file() { path.file_stem()? } else { path.file_name()? };
    let stem = if stem == "capture" && path.is_file() { path.parent()?.file_name()? } else { stem };
    stem.to_str().map(str::to_owned)
}

// --- node agents ------------------------------------------------------------------------------

/// The most an agent's answer may hold (a machine description is well under a megabyte).
const MAX_AGENT_ANSWER: usize = 32 << 20;
/// Connecting to, asking and reading one agent, all of it.
const AGENT_TIMEOUT: Duration = Duration::from_secs(15);

/// The token for the agents: `--token-file` (checked as the agent checks its own), else
/// `ACCEL_AGENT_TOKEN`, else none.
fn agent_token(file: Option<&Path>) -> Result<Option<String>> {
    if let Some(path) = file {
        return Ok(Some(accel_agent::auth::read_token(path)?));
    }
    match std::env::var("ACCEL_AGENT_TOKEN") {
        Ok(t) if !t.trim().is_empty() => {
            let t = t.trim().to_owned();
            if t.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
                bail!("ACCEL_AGENT_TOKEN: the token must be printable ASCII without spaces");
            }
            Ok(Some(t))
        }
        _ => Ok(None),
    }
}

/// An agent's base URL: `http[s]://HOST[:PORT][/PREFIX]`.
#[derive(Debug, PartialEq)]
struct AgentUrl {
    /// `https://`: TLS, verified against `--ca-file`.
    tls: bool,
    /// `HOST:PORT`, to connect to (IPv6 in brackets).
    addr: String,
    /// The `Host` header: the URL's authority as written.
    host: String,
    /// A path prefix (a reverse proxy's), without the trailing slash.
    prefix: String,
}

fn parse_agent_url(url: &str) -> Result<AgentUrl> {
    let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => bail!("not an http:// or https:// URL"),
    };
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| (&rest[..i], &rest[i..]));
    if authority.is_empty()
        || authority.contains('@')
        || path.contains(['?', '#'])
        || url.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        bail!("not an http[s]://HOST[:PORT] URL");
    }
    let has_port = match authority.rfind(']') {
        Some(i) => authority[i + 1..].starts_with(':'),
        None => authority.contains(':'),
    };
    let default_port = if tls { 443 } else { 80 };
    let addr = if has_port { authority.to_owned() } else { format!("{authority}:{default_port}") };
    let prefix = path.trim_end_matches('/').trim_end_matches("/v1/node").trim_end_matches('/').to_owned();
    Ok(AgentUrl { tls, addr, host: authority.to_owned(), prefix })
}

impl AgentUrl {
    /// The host name or address the certificate must name (no port, no brackets).
    fn server_name(&self) -> &str {
        let host = match self.host.rfind(']') {
            Some(i) => &self.host[..=i],
            None => self.host.rsplit_once(':').map_or(self.host.as_str(), |(h, _)| h),
        };
        host.trim_start_matches('[').trim_end_matches(']')
    }

    /// Whether the agent is on this machine (a loopback address or `localhost`): the one place
    /// a token may travel without TLS.
    fn loopback(&self) -> bool {
        let name = self.server_name();
        name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// A TLS client connection over the agent's socket (rustls; verified against `--ca-file`).
struct TlsConn(rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>);

impl Read for TlsConn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsConn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl accel_discover::net::Conn for TlsConn {
    fn socket(&self) -> &std::net::TcpStream {
        &self.0.sock
    }
}

/// How `--from-agent` reaches agents: the token and, for `https://`, the CA to trust.
struct AgentClient {
    token: Option<String>,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// One GET over HTTP/1.0 before `deadline` (discovery's client, `accel_discover::net`): the
/// status and the body. The token goes in the `Authorization` header only; no error quotes a
/// header.
fn http_get(url: &AgentUrl, path: &str, client: &AgentClient, deadline: Instant) -> Result<(u16, Vec<u8>)> {
    use accel_discover::net::{exchange, exchange_over, Exchange, NetError};
    let bearer = client.token.as_deref().map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Accept", "application/json")];
    if let Some(b) = &bearer {
        headers.push(("Authorization", b.as_str()));
    }
    let target = format!("{}{path}", url.prefix);
    let x = Exchange {
        method: "GET",
        addr: &url.addr,
        host: &url.host,
        path: &target,
        headers: &headers,
        deadline,
        connect_timeout: AGENT_TIMEOUT,
        max_bytes: MAX_AGENT_ANSWER + 64 * 1024,
    };
    let answer = if url.tls {
        let Some(config) = client.tls.clone() else {
            bail!("https:// needs --ca-file FILE: the CA certificate (PEM) the agent's certificate is checked against");
        };
        let name = rustls::pki_types::ServerName::try_from(url.server_name().to_owned())
            .map_err(|e| anyhow::anyhow!("{:?} is not a name a certificate can hold: {e}", url.server_name()))?;
        exchange_over(&x, |socket| {
            let conn = rustls::ClientConnection::new(config, name).map_err(|e| NetError::Io(format!("TLS: {e}")))?;
            Ok(TlsConn(rustls::StreamOwned::new(conn, socket)))
        })
    } else {
        exchange(&x)
    };
    let (status, body) = answer.map_err(|e| match e {
        NetError::Budget => anyhow::anyhow!("{path}: no complete answer within {} s", AGENT_TIMEOUT.as_secs()),
        NetError::TooLarge(_) => anyhow::anyhow!("{path}: the answer is larger than {} MiB", MAX_AGENT_ANSWER >> 20),
        NetError::Malformed => anyhow::anyhow!("{path}: not an HTTP answer"),
        other => anyhow::anyhow!("{path}: {other}"),
    })?;
    if body.len() > MAX_AGENT_ANSWER {
        bail!("{path}: the answer is larger than {} MiB", MAX_AGENT_ANSWER >> 20);
    }
    Ok((status, body))
}

/// What a refused request means, in the agent's terms (docs/agent.md, "Security").
fn status_error(path: &str, status: u16, url: &AgentUrl, token: bool) -> anyhow::Error {
    match status {
        401 if token => anyhow::anyhow!("{path}: 401: the agent refused the token"),
        401 => anyhow::anyhow!("{path}: 401: the agent wants its token (--token-file FILE or ACCEL_AGENT_TOKEN)"),
        421 => anyhow::anyhow!(
            "{path}: 421: the agent does not answer to the name {:?}; start it with --allow-host NAME or use its address",
            url.host
        ),
        _ => anyhow::anyhow!("{path}: HTTP status {status}"),
    }
}

/// A node from a running agent: its machine (`/v1/node`) and its name (`/v1/health`'s `node`:
/// the agent's `--node-name`, else its sample or hostname).
fn from_agent(url: &str, client: &AgentClient) -> Result<Found> {
    let from = format!("agent {url}");
    let token = client.token.as_deref();
    let found = (|| -> Result<Found> {
        let agent = parse_agent_url(url)?;
        if token.is_some() && !agent.tls && !agent.loopback() {
            bail!(
                "refusing to send the token in the clear to {}: use https:// (the agent serves TLS beyond loopback) with --ca-file",
                agent.host
            );
        }
        let deadline = Instant::now() + AGENT_TIMEOUT;
        let (status, body) = http_get(&agent, "/v1/node", client, deadline)?;
        if status != 200 {
            return Err(status_error("/v1/node", status, &agent, token.is_some()));
        }
        let machine: Machine =
            serde_json::from_slice(&body).map_err(|e| anyhow::anyhow!("/v1/node is not a machine description: {e}"))?;
        // 503 is a stale sampler: the name in it is still the agent's.
        let (status, body) = http_get(&agent, "/v1/health", client, deadline)?;
        if status != 200 && status != 503 {
            return Err(status_error("/v1/health", status, &agent, token.is_some()));
        }
        let health: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| anyhow::anyhow!("/v1/health is not JSON: {e}"))?;
        let name = health["node"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| machine.host.hostname.clone())
            .context("/v1/health names no node")?;
        Ok(Found { name, from: from.clone(), machine, labels: BTreeMap::new() })
    })();
    found.with_context(|| from.clone())
}

// --- Ray --------------------------------------------------------------------------------------

/// The machines published in a Ray cluster, read by `python -m accel.ray cluster-json` in
/// `$ACCEL_PYTHON` (default `python3`): a cluster document whose nodes carry their machines
/// inline and their `accel.io/*` Ray labels as planner labels.
fn from_ray(address: Option<&str>) -> Result<Vec<Found>> {
    let python = std::env::var("ACCEL_PYTHON").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into());
    let mut cmd = crate::python::module(python.as_ref(), "accel.ray");
    cmd.arg("cluster-json");
    if let Some(a) = address {
        cmd.args(["--address", a]);
    }
    let out = run_bounded(cmd, RAY_TIMEOUT).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => anyhow::anyhow!(
            "--from-ray: {python} -m accel.ray cluster-json gave no answer within {} s (is the Ray address right?)",
            RAY_TIMEOUT.as_secs()
        ),
        _ => anyhow::anyhow!(
            "--from-ray: cannot run {python:?}: {e} (set ACCEL_PYTHON to an interpreter with accel and Ray installed)"
        ),
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains(crate::python::NOT_INSTALLED) {
            bail!(
                "--from-ray: the accel Python package is not installed in {python}: {}",
                crate::python::INSTALL_PYTHON_PACKAGE
            );
        }
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no error message");
        bail!("--from-ray: {python} -m accel.ray cluster-json failed: {}", last.trim());
    }
    let doc: Cluster = serde_json::from_slice(&out.stdout)
        .map_err(|e| anyhow::anyhow!("--from-ray: {python} -m accel.ray cluster-json printed no cluster: {e}"))?;
    if doc.nodes.is_empty() {
        bail!(
            "--from-ray: the Ray cluster has no node with a published machine (start nodes with `python -m accel.ray start`)"
        );
    }
    doc.nodes
        .iter()
        .map(|n| {
            let machine = doc.machine(n)?.clone();
            Ok(Found {
                name: n.name.clone(),
                from: format!("Ray node {:?}", n.name),
                machine,
                labels: n.labels.clone(),
            })
        })
        .collect()
}

/// How long `cluster-json` may take: connecting to Ray and reading its KV take seconds; Ray's
/// client can retry a dead address for minutes.
const RAY_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `cmd` to completion with its output captured, or kills it after `limit` (`TimedOut`).
fn run_bounded(mut cmd: std::process::Command, limit: Duration) -> std::io::Result<std::process::Output> {
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok(std::process::Output { status, stdout, stderr })
}

// --- labels -----------------------------------------------------------------------------------

type NodeLabels = BTreeMap<String, BTreeMap<String, String>>;

/// A labels file: JSON `{"NODE": {"key": "value"}}` (when it starts with `{`), else lines of
/// `NODE key=value ...` with `#` comments. Errors name the line.
fn read_labels(path: &Path) -> Result<NodeLabels> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading labels {}", path.display()))?;
    parse_labels(&text).with_context(|| format!("labels {}", path.display()))
}

fn parse_labels(text: &str) -> Result<NodeLabels> {
    let labels: NodeLabels = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("not {{\"NODE\": {{\"key\": \"value\"}}}}: {e}"))?
    } else {
        let mut labels = NodeLabels::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            let Some(node) = words.next() else { continue };
            let entry = labels.entry(node.to_owned()).or_default();
            for word in words {
                let (k, v) =
                    word.split_once('=').with_context(|| format!("line {}: {word:?} is not key=value", i + 1))?;
                entry.insert(k.to_owned(), v.to_owned());
            }
        }
        labels
    };
    for (node, map) in &labels {
        for (k, v) in map {
            check_label(k, v).with_context(|| format!("node {node:?}: label {k}={v}"))?;
        }
    }
    Ok(labels)
}

/// Keys as Kubernetes and Ray spell them (`rack`, `example.com/zone`); values a label value's
/// characters. `node` is the node's own name (`"select": {"node": ...}`), so never a label.
fn check_label(key: &str, value: &str) -> Result<()> {
    let key_ok = !key.is_empty()
        && key.len() <= 253
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'));
    if !key_ok {
        bail!("the key must be letters, digits, '.', '-', '_' or '/'");
    }
    if key == "node" {
        bail!("\"node\" is the node's own name, not a label");
    }
    let value_ok = !value.is_empty()
        && value.len() <= 63
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if !value_ok {
        bail!("the value must be 1 to 63 letters, digits, '.', '-' or '_'");
    }
    Ok(())
}

/// Merges the labels into the nodes' labels (a file's value wins); every node must exist.
fn apply_labels(cluster: &mut Cluster, labels: NodeLabels) -> Result<()> {
    for (node, map) in labels {
        let Some(target) = cluster.nodes.iter_mut().find(|n| n.name == node) else {
            let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
            bail!("names node {node:?}, which is not in the cluster (nodes: {})", names.join(", "));
        };
        target.labels.extend(map);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_urls() {
        let u = parse_agent_url("http://127.0.0.1:9477").unwrap();
        assert_eq!(
            u,
            AgentUrl {
                tls: false,
                addr: "127.0.0.1:9477".into(),
                host: "127.0.0.1:9477".into(),
                prefix: String::new()
            }
        );
        assert!(u.loopback());
        let u = parse_agent_url("http://node-1.example/agent/v1/node").unwrap();
        assert_eq!((u.addr.as_str(), u.prefix.as_str()), ("node-1.example:80", "/agent"));
        assert_eq!(parse_agent_url("http://[::1]").unwrap().addr, "[::1]:80");
        assert_eq!(parse_agent_url("http://[::1]:9477/").unwrap().addr, "[::1]:9477");
        for bad in ["ftp://x", "http://", "http://u:p@x/", "http://x/?a", "http://x y", "x:9477"] {
            assert!(parse_agent_url(bad).is_err(), "{bad}");
        }
        let u = parse_agent_url("https://node-1.example").unwrap();
        assert!(u.tls && !u.loopback());
        assert_eq!((u.addr.as_str(), u.server_name()), ("node-1.example:443", "node-1.example"));
        assert_eq!(parse_agent_url("https://[::1]:9477").unwrap().server_name(), "::1");
        assert!(parse_agent_url("http://[::1]:9477").unwrap().loopback());
        assert!(parse_agent_url("http://LOCALHOST").unwrap().loopback());
    }

    #[test]
    fn labels_files() {
        let lines = parse_labels("# racks\ngpu-a rack=r1 zone=z1\n\ngpu-b rack=r2  # spare\n").unwrap();
        assert_eq!(lines["gpu-a"]["zone"], "z1");
        assert_eq!(lines["gpu-b"]["rack"], "r2");
        let json = parse_labels(r#"{"gpu-a": {"rack": "r1", "example.com/zone": "z1"}}"#).unwrap();
        assert_eq!(json["gpu-a"]["example.com/zone"], "z1");
        for (bad, why) in [
            ("gpu-a rack", "not key=value"),
            ("gpu-a rack=", "the value"),
            ("gpu-a node=x", "node's own name"),
            ("gpu-a ra$ck=1", "the key"),
            ("{\"gpu-a\": [1]}", "not {"),
        ] {
            let err = format!("{:#}", parse_labels(bad).unwrap_err());
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn node_names() {
        for good in ["gpu-01", "node1.example.com", "a_b"] {
            check_name(good).unwrap();
        }
        for bad in ["", "-x", "a b", "a/b", "a\u{1b}b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(name_from_path(Path::new("/no/such/node-7")).as_deref(), Some("node-7"));
    }
}
