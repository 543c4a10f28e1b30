//! The lab's pages (docs/lab.md) under `/lab/`: files that `accel lab pages` renders into a
//! directory (`--lab-pages DIR`), served read-only, so the lab has no HTTP server of its own and
//! its pages pass through the agent's limits, `Host` check and tokens.
//!
//! - A file is served only when its path is made of plain names (`[A-Za-z0-9][A-Za-z0-9._-]*`,
//!   at most [`MAX_DEPTH`] of them) with a known extension, it is opened beneath the directory
//!   without following any symbolic link (`openat2`, `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`),
//!   it is a regular file that neither group nor others may write, and it is at most
//!   [`MAX_PAGE`] bytes. The pages carry no script; their Content-Security-Policy allows only
//!   their own stylesheet and images.
//! - With a token, a page needs `Authorization: Bearer <token>` or a session cookie. `POST
//!   /lab/login` (a form with the token, at most [`MAX_FORM`] bytes, read within
//!   [`FORM_DEADLINE`]) starts a session: a random 256-bit id (never derived from the token) in
//!   an `HttpOnly; SameSite=Strict` cookie (`Secure` over TLS) that expires after the session
//!   lifetime; `POST /lab/logout` revokes it, and a restart revokes them all. A cross-site
//!   `Sec-Fetch-Site` (or, without it, `Origin`) is refused. The cookie reads pages only: the
//!   API and the metrics still need the bearer header. The stylesheet (`lab.css`, no data) is
//!   served to anyone, for the sign-in page.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Largest page served.
pub const MAX_PAGE: u64 = 16 << 20;
/// Most path segments below `/lab/`.
pub const MAX_DEPTH: usize = 3;
/// Largest sign-in form accepted.
pub const MAX_FORM: u64 = 1024;
/// How long the sign-in form's body may take to arrive.
pub const FORM_DEADLINE: Duration = Duration::from_secs(5);
/// Sessions held at once; the oldest goes first.
pub const MAX_SESSIONS: usize = 1024;
/// The session cookie's name.
pub const COOKIE: &str = "accel_lab_session";
/// The pages' policy: nothing but this origin's stylesheet and images, no script, no framing.
pub const CSP: &str =
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What `--lab-pages` configures.
#[derive(Debug, Clone)]
pub struct LabPages {
    pub dir: PathBuf,
    /// How long a session lives (`--session-hours`).
    pub session_ttl: Duration,
}

/// The lab's serving state: the pages directory, the agent's token and the sessions.
#[derive(Debug)]
pub struct Lab {
    pub dir: PathBuf,
    pub sessions: Sessions,
    /// Cookies get `Secure` (the agent serves TLS).
    pub secure: bool,
    /// The agent's token (`None`: loopback without one, pages open).
    pub token: Option<String>,
}

/// Sign-in sessions: random ids, each with its expiry.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    map: Mutex<HashMap<String, Instant>>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions { ttl, map: Mutex::new(HashMap::new()) }
    }

    /// A new session's id (64 hex digits from the system's secure random source).
    pub fn create(&self) -> String {
        let mut bytes = [0u8; 32];
        crate::tls::provider().secure_random.fill(&mut bytes).expect("the system's random source works");
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, expires| *expires > now);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map.iter().min_by_key(|(_, e)| **e).map(|(k, _)| k.clone()) {
                map.remove(&oldest);
            }
        }
        map.insert(id.clone(), now + self.ttl);
        id
    }

    /// Whether `id` names a live session (an expired one is forgotten).
    pub fn valid(&self, id: &str) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(id) {
            Some(expires) if *expires > Instant::now() => true,
            Some(_) => {
                map.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends a session.
    pub fn revoke(&self, id: &str) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// Why a directory cannot be served.
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("--lab-pages {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("--lab-pages {}: not a directory", dir.display()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "--lab-pages {}: group or others may write it (mode {:04o}); run `chmod go-w {}`",
            dir.display(),
            meta.mode() & 0o7777,
            dir.display()
        ));
    }
    Ok(())
}

/// The routes under `/lab`, with their own state (the agent's router holds them as any other).
pub fn routes<S: Clone + Send + Sync + 'static>(lab: Arc<Lab>) -> Router<S> {
    Router::new()
        .route("/lab", get(|| async { redirect("/lab/") }))
        .route("/lab/login", get(login_form).post(login))
        .route("/lab/logout", axum::routing::post(logout))
        .route("/lab/", get(page))
        .route("/lab/{*path}", get(page))
        .with_state(lab)
}

fn redirect(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

fn html(code: StatusCode, body: String) -> Response {
    let mut resp = (code, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response();
    page_headers(resp.headers_mut());
    resp
}

fn page_headers(h: &mut HeaderMap) {
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
}

const LOGIN_PAGE: &str = "<!doctype html><html lang=en><head><meta charset=utf-8><title>accel lab: sign in</title>\
<link rel=stylesheet href=/lab/lab.css></head><body><h1>accel lab: sign in</h1>{message}\
<form method=post action=/lab/login><label>token <input type=password name=token autocomplete=off></label> \
<button>sign in</button></form></body></html>";

fn login_page(code: StatusCode, message: &str) -> Response {
    html(code, LOGIN_PAGE.replace("{message}", message))
}

async fn login_form() -> Response {
    login_page(StatusCode::OK, "")
}

/// The session id in the request's cookie, if any.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// Whether a state-changing request comes from this origin: a cross-site `Sec-Fetch-Site` or an
/// `Origin` naming another host is refused (a form posted from another site).
fn same_origin(headers: &HeaderMap) -> bool {
    // A browser says where a request comes from in `Sec-Fetch-Site`; under the pages'
    // `no-referrer` policy its `Origin` on a form post is `null`, so that one decides.
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin" || site.as_bytes() == b"none";
    }
    let Some(origin) = headers.get(header::ORIGIN).filter(|o| o.as_bytes() != b"null") else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let origin = origin.to_str().unwrap_or("");
    let authority = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
    authority.is_some_and(|a| !host.is_empty() && a.eq_ignore_ascii_case(host))
}

/// `token=VALUE` of an `application/x-www-form-urlencoded` body.
fn form_token(body: &[u8]) -> Option<Vec<u8>> {
    body.split(|&b| b == b'&').find_map(|pair| {
        let value = pair.strip_prefix(b"token=")?;
        let plus: Vec<u8> = value.iter().map(|&b| if b == b'+' { b' ' } else { b }).collect();
        Some(percent_encoding::percent_decode(&plus).collect())
    })
}

async fn login(AxState(lab): AxState<Arc<Lab>>, req: Request) -> Response {
    let Some(token) = &lab.token else { return redirect("/lab/") };
    if !same_origin(req.headers()) {
        return login_page(StatusCode::FORBIDDEN, "<p>refused: a sign-in from another site</p>");
    }
    let body = req.into_body();
    let bytes = match tokio::time::timeout(FORM_DEADLINE, axum::body::to_bytes(body, MAX_FORM as usize)).await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => return login_page(StatusCode::PAYLOAD_TOO_LARGE, "<p>the form is too large</p>"),
        Err(_) => return login_page(StatusCode::REQUEST_TIMEOUT, "<p>the form did not arrive in time</p>"),
    };
    let given = form_token(&bytes).unwrap_or_default();
    if !crate::auth::constant_time_eq(&given, token.as_bytes()) {
        return login_page(StatusCode::UNAUTHORIZED, "<p>wrong token</p>");
    }
    let id = lab.sessions.create();
    let secure = if lab.secure { "; Secure" } else { "" };
    let cookie = format!(
        "{COOKIE}={id}; Path=/lab/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        lab.sessions.ttl().as_secs()
    );
    let mut resp = redirect("/lab/");
    resp.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("hex and ascii"));
    resp
}

async fn logout(AxState(lab): AxState<Arc<Lab>>, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return login_page(StatusCode::FORBIDDEN, "<p>refused: a sign-out from another site</p>");
    }
    if let Some(id) = session_cookie(&headers) {
        lab.sessions.revoke(id);
    }
    let mut resp = redirect("/lab/login");
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!("{COOKIE}=; Path=/lab/; HttpOnly; SameSite=Strict; Max-Age=0")).expect("ascii"),
    );
    resp
}

/// Whether the request may read the pages.
fn may_read(lab: &Lab, headers: &HeaderMap) -> bool {
    let Some(token) = &lab.token else { return true };
    crate::auth::authorized(headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes), token)
        || session_cookie(headers).is_some_and(|id| lab.sessions.valid(id))
}

/// The content type of a servable page path; `None` refuses it.
pub fn content_type(path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.split('/').collect();
    let plain = |s: &&str| {
        let b = s.as_bytes();
        !b.is_empty()
            && b.len() <= 128
            && b[0].is_ascii_alphanumeric()
            && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
    };
    if segments.len() > MAX_DEPTH || !segments.iter().all(plain) {
        return None;
    }
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => Some("text/html; charset=utf-8"),
        Some("css") => Some("text/css; charset=utf-8"),
        Some("svg") => Some("image/svg+xml"),
        Some("json") => Some("application/json"),
        _ => None,
    }
}

/// Reads `rel` beneath `dir` without following a link anywhere on the way, refusing what is not
/// a regular file, what group or others may write, and what is larger than [`MAX_PAGE`].
pub fn read_page(dir: &Path, rel: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let root = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let fd = rustix::fs::openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.mode() & 0o022 != 0 || meta.len() > MAX_PAGE {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_PAGE + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_PAGE).then_some(bytes)
}

async fn page(AxState(lab): AxState<Arc<Lab>>, req: Request) -> Response {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    // The stylesheet carries no data: the sign-in page needs it before anyone signs in.
    let public = req.uri().path() == "/lab/lab.css";
    if !public && !may_read(&lab, req.headers()) {
        let mut resp = login_page(StatusCode::UNAUTHORIZED, "");
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"accel lab\""));
        return resp;
    }
    let rel = match req.uri().path().strip_prefix("/lab/") {
        Some("") | None => "index.html".to_owned(),
        Some(p) => p.to_owned(),
    };
    let not_found =
        || html(StatusCode::NOT_FOUND, "<!doctype html><title>not found</title><p><a href=/lab/>the lab</a>".into());
    let Some(ctype) = content_type(&rel) else { return not_found() };
    let dir = lab.dir.clone();
    let read = tokio::task::spawn_blocking(move || read_page(&dir, &rel)).await;
    let Ok(Some(bytes)) = read else { return not_found() };
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    page_headers(resp.headers_mut());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_with_known_extensions_are_pages() {
        for ok in ["index.html", "lab.css", "run/ab12.html", "cell/x_y-z.1.html", "trend/a.svg"] {
            assert!(content_type(ok).is_some(), "{ok}");
        }
        for bad in
            ["", "../x.html", "run/../x.html", ".hidden.html", "a/b/c/d.html", "x.py", "x", "a//b.html", "a%2e.html"]
        {
            assert!(content_type(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn sessions_expire_and_are_revoked() {
        let s = Sessions::new(Duration::from_millis(50));
        let a = s.create();
        let b = s.create();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(s.valid(&a) && s.valid(&b));
        s.revoke(&a);
        assert!(!s.valid(&a) && s.valid(&b));
        std::thread::sleep(Duration::from_millis(80));
        assert!(!s.valid(&b), "expired");
        assert!(!s.valid("nope"));
    }

    #[test]
    fn the_form_token_is_percent_decoded() {
        assert_eq!(form_token(b"token=a%2Bb+c").unwrap(), b"a+b c");
        assert_eq!(form_token(b"x=1&token=t").unwrap(), b"t");
        assert!(form_token(b"tok=1").is_none());
    }

    #[test]
    fn pages_are_read_beneath_their_directory_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = accel_testdata::TempDir::new("agent-lab-pages");
        std::fs::create_dir(d.join("run")).unwrap();
        std::fs::write(d.join("index.html"), "hi").unwrap();
        std::fs::write(d.join("run/a.html"), "run").unwrap();
        std::fs::write(d.join("secret.html"), "s").unwrap();
        std::os::unix::fs::symlink(d.join("secret.html"), d.join("link.html")).unwrap();
        std::os::unix::fs::symlink(d.join("run"), d.join("dirlink")).unwrap();
        std::fs::write(d.join("open.html"), "o").unwrap();
        std::fs::set_permissions(d.join("open.html"), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_page(d.path(), "index.html").unwrap(), b"hi");
        assert_eq!(read_page(d.path(), "run/a.html").unwrap(), b"run");
        assert!(read_page(d.path(), "link.html").is_none(), "a link");
        assert!(read_page(d.path(), "dirlink/a.html").is_none(), "a link on the way");
        assert!(read_page(d.path(), "open.html").is_none(), "others may write it");
        assert!(read_page(d.path(), "run").is_none(), "a directory");
    }
}
