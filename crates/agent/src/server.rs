//! The HTTP side: an axum router over one shared [`State`], refreshed by a background sampler.
//! Every route is a GET (but the lab's sign-in form, [`crate::lab`]); the API and the metrics need the bearer token when one is set; the
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
    /// The lab's pages (`--lab-pages`), served under `/lab/`.
    pub lab: Option<Arc<crate::lab::Lab>>,
    pub latest: RwLock<Arc<Snapshot>>,
}

/// The latest sample and its renderings.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub sample: Sample,
    /// The exposition, shared by every scrape without a copy.
    pub metrics: Bytes,
    pub readings_json: String,
    /// `/v1/node`: the machine with the health judged at this sample, serialised once (empty
    /// before the first sample, when the discovered machine is served).
    pub machine_json: String,
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
            lab: None,
            latest: RwLock::new(Arc::new(Snapshot::default())),
        }
    }

    /// Runs every reader once and publishes the result.
    pub fn refresh(&self, readers: &Readers) {
        let start = std::time::Instant::now();
        let sample = readers.sample();
        let live = readers.judge(&self.machine);
        let metrics = metrics::render(&live, &sample);
        let machine_json = serde_json::to_string(&live).expect("the model serialises");
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
            machine_json,
            taken_at: now(),
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
    let page = match &state.lab {
        Some(lab) => page.merge(crate::lab::routes(lab.clone())),
        None => page,
    };
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
    let length =
        req.headers().get(header::CONTENT_LENGTH).map(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()));
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING) || length.is_some_and(|n| n != Some(0));
    // The one body the agent reads: the lab's sign-in form, small and with its length given.
    let sign_in = state.lab.is_some()
        && req.method() == axum::http::Method::POST
        && req.uri().path() == "/lab/login"
        && !req.headers().contains_key(header::TRANSFER_ENCODING)
        && length.is_some_and(|n| n.is_some_and(|n| n <= crate::lab::MAX_FORM));
    if has_body && !sign_in {
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
    // The lab's pages set a stricter policy of their own.
    h.entry("content-security-policy")
        .or_insert(HeaderValue::from_static("default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"));
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
    let snap = state.snapshot();
    json_response(if snap.machine_json.is_empty() { state.machine_json.clone() } else { snap.machine_json.clone() })
}

async fn env(AxState(state): AxState<Arc<State>>) -> Response {
    json_response(state.env_json.clone())
}

async fn health(AxState(state): AxState<Arc<State>>) -> Response {
    let snap = state.snapshot();
    let failed: Vec<&str> = snap.sample.readers.iter().filter(|r| !r.ok).map(|r| r.name.as_str()).collect();
    // Stale when the sampler missed three rounds (it is stuck in a reader).
    let (age, stale) = freshness((snap.taken_at != 0.0).then_some(snap.taken_at), state.interval.as_secs_f64(), now());
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
        "sample_age_s": age,
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

/// Unix seconds by this server's clock.
fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// How old a document made at `made_at` (Unix seconds; `None` when unknown) is at `now`, and
/// whether it is stale: its maker, refreshing it every `interval_s`, missed three rounds. The
/// one staleness rule of the agent (the health check's sample, the cluster view).
pub fn freshness(made_at: Option<f64>, interval_s: f64, now: f64) -> (Option<f64>, bool) {
    match made_at {
        Some(at) if at.is_finite() && at > 0.0 => {
            let age = (now - at).max(0.0);
            (Some(age), age > 3.0 * interval_s + 1.0)
        }
        _ => (None, true),
    }
}

/// Marks a cluster document with its age by this server's clock (`age_s`, from the document's
/// own `updated_at`) and whether it is `stale` (its writer, which says it refreshes it every
/// `interval_s`, or the agent's own interval when it does not say, missed three rounds: the
/// sidecar or Ray is gone).
pub fn mark_freshness(doc: &mut serde_json::Value, default_interval_s: f64, now: f64) {
    let made_at = doc.get("updated_at").and_then(serde_json::Value::as_f64);
    let interval = doc
        .get("interval_s")
        .and_then(serde_json::Value::as_f64)
        .filter(|i| i.is_finite() && *i > 0.0)
        .unwrap_or(default_interval_s);
    let (age, stale) = freshness(made_at, interval, now);
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("age_s".into(), json!(age));
        obj.insert("stale".into(), json!(stale));
    }
}

/// The cluster: the document the Ray sidecar writes (`--cluster-file`), or this node alone;
/// either way marked with its age and whether it is stale ([`mark_freshness`]).
async fn cluster(AxState(state): AxState<Arc<State>>) -> Response {
    let interval = state.interval.as_secs_f64();
    if let Some(path) = state.cluster_file.clone() {
        // The operator's file, so a link is fine; a FIFO or a device is not.
        let rules = Rules { max: MAX_CLUSTER_FILE, owner: None, follow_links: true };
        let read = tokio::task::spawn_blocking(move || files::read(&path, rules)).await;
        // Not written yet: this node alone, marked as such.
        if let Ok(Ok(bytes)) = read {
            return match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(mut doc) if doc.get("nodes").is_some_and(|n| n.is_array()) => {
                    mark_freshness(&mut doc, interval, now());
                    json_response(json_body(&doc))
                }
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
    let mut doc = json!({
        "source": "agent",
        "updated_at": snap.taken_at,
        "interval_s": interval,
        "nodes": [{
            "name": state.node_name,
            "machine": machine,
            "readings": snap.sample.readings,
            "readings_at": snap.taken_at,
        }],
        "placement_groups": [],
        "actors": [],
    });
    mark_freshness(&mut doc, interval, now());
    json_response(json_body(&doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness_is_age_by_the_given_clock_and_three_missed_rounds() {
        assert_eq!(freshness(Some(100.0), 5.0, 110.0), (Some(10.0), false));
        assert_eq!(freshness(Some(100.0), 5.0, 116.5), (Some(16.5), true), "3 x 5 s + 1 s missed");
        assert_eq!(freshness(None, 5.0, 110.0), (None, true), "no time: never shown as live");
        assert_eq!(freshness(Some(0.0), 5.0, 110.0), (None, true));
        assert_eq!(
            freshness(Some(120.0), 5.0, 110.0),
            (Some(0.0), false),
            "a writer's clock ahead is not negative age"
        );
    }

    #[test]
    fn a_cluster_document_is_marked_from_its_own_time_and_interval() {
        let mut doc = json!({"updated_at": 1000.0, "interval_s": 1.0, "nodes": []});
        mark_freshness(&mut doc, 5.0, 1003.0);
        assert_eq!((doc["age_s"].as_f64(), doc["stale"].as_bool()), (Some(3.0), Some(false)));
        mark_freshness(&mut doc, 5.0, 1004.5);
        assert_eq!(
            (doc["age_s"].as_f64(), doc["stale"].as_bool()),
            (Some(4.5), Some(true)),
            "the document's own interval rules"
        );
        let mut doc = json!({"updated_at": 1000.0, "nodes": []});
        mark_freshness(&mut doc, 5.0, 1010.0);
        assert_eq!(doc["stale"], json!(false), "no interval in the document: the agent's own");
        let mut doc = json!({"nodes": []});
        mark_freshness(&mut doc, 5.0, 1010.0);
        assert_eq!((doc["age_s"].clone(), doc["stale"].clone()), (json!(null), json!(true)));
    }
}
