//! The dashboard, compiled into the binary: no CDN, no network, works offline.

pub const INDEX_HTML: &str = include_str!("../assets/index.html");
pub const APP_JS: &str = include_str!("../assets/app.js");
pub const STYLE_CSS: &str = include_str!("../assets/style.css");
