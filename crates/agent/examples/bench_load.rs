//! An open-loop HTTP load generator for the agent benchmark (scripts/bench_agent.py):
//! `bench_load URL RATE SECONDS CONNECTIONS [TOKEN]` sends GETs on a fixed schedule (RATE per
//! second, spread over CONNECTIONS keep-alive connections) and prints one JSON line of latency
//! percentiles. Latency is measured from each request's scheduled time, so a stalled server
//! is charged for the requests it delayed (no coordinated omission).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 4 {
        eprintln!("usage: bench_load URL RATE SECONDS CONNECTIONS [TOKEN]");
        std::process::exit(2);
    }
    let url = a[0].strip_prefix("http://").expect("http:// URL").to_owned();
    let (hostport, path) =
        url.split_once('/').map(|(h, p)| (h.to_owned(), format!("/{p}"))).unwrap_or((url.clone(), "/".into()));
    let rate: f64 = a[1].parse().expect("RATE");
    let seconds: f64 = a[2].parse().expect("SECONDS");
    let conns: usize = a[3].parse().expect("CONNECTIONS");
    let token = a.get(4).cloned();
    let start = Instant::now() + Duration::from_millis(200);
    let total = (rate * seconds) as usize;
    let mut handles = Vec::new();
    for c in 0..conns {
        let (hostport, path, token) = (hostport.clone(), path.clone(), token.clone());
        handles.push(std::thread::spawn(move || {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut bytes = 0u64;
            let mut stream: Option<BufReader<TcpStream>> = None;
            let mut req = format!("GET {path} HTTP/1.1\r\nHost: {hostport}\r\n");
            if let Some(t) = &token {
                req.push_str(&format!("Authorization: Bearer {t}\r\n"));
            }
            req.push_str("\r\n");
            let mut i = c;
            while i < total {
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let ok = (|| -> std::io::Result<u64> {
                    if stream.is_none() {
                        let s = TcpStream::connect(&hostport)?;
                        s.set_nodelay(true)?;
                        stream = Some(BufReader::new(s));
                    }
                    let r = stream.as_mut().expect("connected");
                    r.get_mut().write_all(req.as_bytes())?;
                    let mut line = String::new();
                    r.read_line(&mut line)?;
                    if !line.starts_with("HTTP/1.1 200") {
                        return Err(std::io::Error::other(line));
                    }
                    let mut len = None;
                    let mut chunked = false;
                    loop {
                        line.clear();
                        r.read_line(&mut line)?;
                        let l = line.trim_end();
                        if l.is_empty() {
                            break;
                        }
                        let lower = l.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            len = v.trim().parse::<usize>().ok();
                        }
                        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                            chunked = true;
                        }
                    }
                    let mut n = 0u64;
                    if let Some(len) = len {
                        let mut buf = vec![0u8; len];
                        r.read_exact(&mut buf)?;
                        n += len as u64;
                    } else if chunked {
                        loop {
                            line.clear();
                            r.read_line(&mut line)?;
                            let size = usize::from_str_radix(line.trim(), 16).map_err(std::io::Error::other)?;
                            let mut buf = vec![0u8; size + 2];
                            r.read_exact(&mut buf)?;
                            n += size as u64;
                            if size == 0 {
                                break;
                            }
                        }
                    }
                    Ok(n)
                })();
                match ok {
                    Ok(n) => {
                        bytes += n;
                        lat.push(due.elapsed().as_secs_f64());
                    }
                    Err(_) => {
                        errors += 1;
                        stream = None;
                    }
                }
                i += conns;
            }
            (lat, errors, bytes)
        }));
    }
    let mut lat = Vec::new();
    let (mut errors, mut bytes) = (0, 0);
    for h in handles {
        let (l, e, b) = h.join().expect("thread");
        lat.extend(l);
        errors += e;
        bytes += b;
    }
    let elapsed = start.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| if lat.is_empty() { f64::NAN } else { lat[((lat.len() - 1) as f64 * p).round() as usize] * 1e3 };
    println!(
        "{{\"requests\":{},\"errors\":{},\"bytes\":{},\"elapsed_s\":{:.3},\"achieved_rps\":{:.1},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"p999_ms\":{:.3},\"max_ms\":{:.3}}}",
        lat.len(),
        errors,
        bytes,
        elapsed,
        lat.len() as f64 / elapsed,
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(0.999),
        pct(1.0)
    );
}
