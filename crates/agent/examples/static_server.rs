//! The benchmark's baseline: the same HTTP stack as the agent (axum on a current-thread tokio
//! runtime) serving one file's bytes from memory at `/metrics`, so the agent's scrape cost
//! can be compared with serving the same bytes statically. `static_server FILE ADDR`.

use axum::http::header;
use axum::routing::get;
use axum::Router;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(file), Some(addr)) = (args.next(), args.next()) else {
        eprintln!("usage: static_server FILE ADDR");
        std::process::exit(2);
    };
    let body: &'static str = Box::leak(std::fs::read_to_string(&file).expect("read FILE").into_boxed_str());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
        eprintln!("serving {file} on http://{}", listener.local_addr().expect("addr"));
        let app = Router::new().route(
            "/metrics",
            get(move || async move { ([(header::CONTENT_TYPE, accel_agent::metrics::CONTENT_TYPE)], body) }),
        );
        axum::serve(listener, app).await.expect("serve");
    });
}
