//! The HTTP side: an axum router over one shared [`State`], refreshed by a background sampler.
//! Every route is a GET; the API and the metrics need the bearer token when one is set; the
//! dashboard's static files carry no data and are served to anyone. No CORS headers are sent
//! (the dashboard is same-origin), and the page's Content-Security-Policy allows only itself.
//! Before any route, a request must name the agent in its `Host` (421 otherwise, see
//! [`crate::auth::HostPolicy`]) and carry no body (413: nothing here reads one).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use accel_model::Machine;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State as AxState};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;

use crate::auth::HostPolicy;
use crate::files::{self, Rules};
use crate::readers::{Readers, Sample};
use crate::{assets, metrics, transport};

/// What the handlers read.
#[derive(Debug)]
pub struct State {
    pub node_name: String,
    pub machine: Machine,
    /// `/v1/node`, serialised once.
    pub machine_json: String,
    /// `/v1/env`: the environment fingerprint, serialised once (empty object until set).
    pub env_json: String,
    pub token: Option<String>,
    pub cluster_file: Option<PathBuf>,
    pub transport_dir: Option<PathBuf>,
    pub interval: Duration,
    /// Which `Host` a request may name.
    pub hosts: HostPolicy,
    pub latest: RwLock<Arc<Snapshot>>,
}

/// The latest sample and its renderings.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub sample: Sample,
    /// The exposition, shared by every scrape without a copy.
    pub metrics: Bytes,
    pub readings_json: String,
    /// Unix seconds.
    pub taken_at: f64,
    pub took_s: f64,
}

impl State {
    pub fn new(node_name: String, machine: Machine, token: Option<String>) -> State {
        let machine_json = serde_json::to_string(&machine).expect("the model serialises");
        State {
            node_name,
            machine,
            machine_json,
            env_json: "{}".into(),
            token,
            cluster_file: None,
            transport_dir: None,
            interval: Duration::from_secs(5),
            hosts: HostPolicy::loopback(),
            latest: RwLock::new(Arc::new(Snapshot::default())),
        }
    }

    /// Runs every reader once and publishes the result.
    pub fn refresh(&self, readers: &Readers) {
        let start = std::time::Instant::now();
        let sample = readers.sample();
        let metrics = metrics::render(&self.machine, &sample);
        let readings_json = serde_json::to_string(&json!({
            "node": self.node_name,
            "readings": sample.readings,
            "readers": sample.readers,
            "warnings": sample.warnings,
        }))
        .expect("readings serialise");
        let snap = Snapshot {
            sample,
            metrics: Bytes::from(metrics),
            readings_json,
            taken_at: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
            took_s: start.elapsed().as_secs_f64(),
        };
        *self.latest.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snap);
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.latest.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The routes.
pub fn router(state: Arc<State>) -> Router {
    let api = Router::new()
        .route("/v1/node", get(node))
        .route("/v1/health", get(health))
        .route("/v1/env", get(env))
        .route("/v1/readings", get(readings))
        .route("/v1/cluster", get(cluster))
        .route("/metrics", get(prometheus))
        .route("/metrics/transport", get(transport_metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let page = Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", assets::INDEX_HTML) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", assets::APP_JS) }))
        .route("/style.css", get(|| async { asset("text/css; charset=utf-8", assets::STYLE_CSS) }));
    api.merge(page)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
        .layer(middleware::from_fn(common_headers))
}

/// Refuses, before routing, a request that does not name the agent in its `Host` (DNS
/// rebinding: a page whose name now resolves to this host) and one that carries a body.
async fn guard(AxState(state): AxState<Arc<State>>, req: Request, next: Next) -> Response {
    if !host_allowed(&state.hosts, &req) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            [(header::CONNECTION, "close")],
            json_response(json_body(&json!({
                "error": "this agent does not serve that host name; start it with --allow-host NAME to serve it"
            }))),
        )
            .into_response();
    }
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) != Some(0));
    if has_body {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONNECTION, "close")],
            json_response(json_body(&json!({"error": "requests to the agent carry no body"}))),
        )
            .into_response();
    }
    next.run(req).await
}

/// The `Host` header (exactly one; required from HTTP/1.1 on) and an absolute URI's authority
/// must both name the agent.
fn host_allowed(policy: &HostPolicy, req: &Request) -> bool {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (Some(h), None) => match h.to_str() {
            Ok(h) => Some(h),
            Err(_) => return false,
        },
        (None, _) => None,
        (Some(_), Some(_)) => return false,
    };
    if host.is_none() && req.version() >= axum::http::Version::HTTP_11 {
        return false;
    }
    let authority = req.uri().authority().map(|a| a.as_str());
    [host, authority].into_iter().flatten().all(|h| policy.allows(h))
}

async fn require_token(AxState(state): AxState<Arc<State>>, req: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let header = req.headers().get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
        if !crate::auth::authorized(header, token) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"accel\"")],
                json_body(&json!({"error": "missing or wrong bearer token"})),
            )
                .into_response();
        }
    }
    next.run(req).await
}

async fn common_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn json_body(v: &serde_json::Value) -> String {
    serde_json::to_string(v).expect("json values serialise")
}

fn json_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, json_response(json_body(&json!({"error": "no such path"})))).into_response()
}

async fn node(AxState(state): AxState<Arc<State>>) -> Response {
    json_response(state.machine_json.clone())
}

async fn env(AxState(state): AxState<Arc<State>>) -> Response {
    json_response(state.env_json.clone())
}

async fn health(AxState(state): AxState<Arc<State>>) -> Response {
    let snap = state.snapshot();
    let failed: Vec<&str> = snap.sample.readers.iter().filter(|r| !r.ok).map(|r| r.name.as_str()).collect();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let age = now - snap.taken_at;
    // Stale when the sampler missed three rounds (it is stuck in a reader).
    let stale = snap.taken_at == 0.0 || age > 3.0 * state.interval.as_secs_f64() + 1.0;
    let status = if stale {
        "stale"
    } else if failed.is_empty() {
        "ok"
    } else {
        "degraded"
    };
    let body = json!({
        "status": status,
        "node": state.node_name,
        "accelerators": state.machine.accelerators.len(),
        "discovery_warnings": state.machine.warnings.len(),
        "readers": snap.sample.readers,
        "failed_readers": failed,
        "sample_age_s": if snap.taken_at == 0.0 { None } else { Some(age) },
        "sample_took_s": snap.took_s,
    });
    let code = if stale { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (code, json_response(json_body(&body))).into_response()
}

async fn readings(AxState(state): AxState<Arc<State>>) -> Response {
    json_response(state.snapshot().readings_json.clone())
}

async fn prometheus(AxState(state): AxState<Arc<State>>) -> Response {
    let snap = state.snapshot();
    let mut resp = Response::new(Body::from(snap.metrics.clone()));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(metrics::CONTENT_TYPE));
    resp
}

async fn transport_metrics(AxState(state): AxState<Arc<State>>) -> Response {
    let Some(dir) = state.transport_dir.clone() else {
        return ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], String::new()).into_response();
    };
    let text = tokio::task::spawn_blocking(move || {
        transport::collect(&dir, &|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    })
    .await
    .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Largest cluster document served.
const MAX_CLUSTER_FILE: u64 = 64 << 20;

/// The cluster: the document the Ray sidecar writes (`--cluster-file`), or this node alone.
async fn cluster(AxState(state): AxState<Arc<State>>) -> Response {
    if let Some(path) = state.cluster_file.clone() {
        // The operator's file, so a link is fine; a FIFO or a device is not.
        let rules = Rules { max: MAX_CLUSTER_FILE, owner: None, follow_links: true };
        let read = tokio::task::spawn_blocking(move || files::read(&path, rules)).await;
        // Not written yet: this node alone, marked as such.
        if let Ok(Ok(bytes)) = read {
            return match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(doc) if doc.get("nodes").is_some_and(|n| n.is_array()) => json_response(json_body(&doc)),
                _ => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json_response(json_body(&json!({"error": "the cluster file is not a cluster document"}))),
                )
                    .into_response(),
            };
        }
    }
    let snap = state.snapshot();
    let machine: serde_json::Value = serde_json::from_str(&state.machine_json).expect("own json");
    let doc = json!({
        "source": "agent",
        "updated_at": snap.taken_at,
        "nodes": [{
            "name": state.node_name,
            "machine": machine,
            "readings": snap.sample.readings,
            "readings_at": snap.taken_at,
        }],
        "placement_groups": [],
        "actors": [],
    });
    json_response(json_body(&doc))
}
