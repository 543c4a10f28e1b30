//! `accel conformance`: runs the conformance suite (accel_discover::conformance) on the built-in
//! and external plugins, over the embedded samples, the captures given and optionally this
//! machine, and prints the grades as text, JSON or the `docs/maturity.md` page.

use std::io::Write;
use std::path::PathBuf;

use accel_discover::conformance::{self, Capture, Status};
use accel_discover::{Host, OpenOptions, Source};
use anyhow::{bail, Context, Result};
use clap::Args;

#[derive(Debug, Args)]
#[command(
    after_help = "Checks (per plugin, on every capture holding its devices):\n  discover  schema, determinism, dense indices, devices in the PCI tree, SKU identified or\n            warned, robustness (mutated captures, empty and garbage roots: bounded, no panic)\n  topology  link ends and symmetry, path-matrix symmetry, link bandwidth from SKU data\n  isolate   the `isolate` answer matches each device's isolation values; labels and resources\n  metrics   `metrics` and `health` answers (when provided) match the schemas and the devices\n\nTiers per capability: T3 passes on captures; T2 also on a real capture whose README records its\nsource; T1 also with --live on real hardware (the environment fingerprint is attached).\n\nExit status:\n  0  every check passes\n  1  a check fails\n  2  invalid input or usage (bad arguments, an unknown plugin, an unreadable capture)"
)]
pub struct ConformanceArgs {
    /// Grade only this plugin (built-in id or external name); may be repeated.
    #[arg(long = "plugin", value_name = "NAME")]
    pub plugins: Vec<String>,
    /// Run on this capture (a captured root with sys/, a capture.bundle, or a directory holding
    /// one) instead of the embedded samples; may be repeated. Without --capture the suite runs
    /// on every embedded sample.
    #[arg(long = "capture", value_name = "DIR")]
    pub captures: Vec<PathBuf>,
    /// Also run on every embedded sample when --capture is given (the docs/maturity.md page
    /// grades every plugin on all of them).
    #[arg(long)]
    pub samples: bool,
    /// Also run on this machine (counts toward T1 when the plugin's devices are present).
    #[arg(long)]
    pub live: bool,
    /// Print the full report as JSON.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the docs/maturity.md page generated from the report.
    #[arg(long)]
    pub markdown: bool,
    #[command(flatten)]
    pub registry: crate::source::RegistryArgs,
}

/// Returns whether every check passed.
pub fn run(args: &ConformanceArgs, out: &mut impl Write) -> Result<bool> {
    let registry = crate::source::registry(&args.registry)?;
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let (plugins, warnings) = accel_discover::plugins_with_external(&accel_discover::exec::ExecOptions::from_env(&env));
    for w in &warnings {
        eprintln!("accel: warning: {w}");
    }
    let builtin: Vec<&str> =
        accel_discover::default_plugins().iter().map(|p| p.id()).collect::<Vec<_>>().leak().to_vec();
    let external: Vec<&str> = plugins.iter().map(|p| p.id()).filter(|id| !builtin.contains(id)).collect();
    for name in &args.plugins {
        if !plugins.iter().any(|p| p.id() == name) {
            let hint = accel_model::suggest(name, plugins.iter().map(|p| p.id()))
                .map(|s| format!("; did you mean {s:?}?"))
                .unwrap_or_default();
            let place = "an external plugin is an executable accel-plugin-NAME in ACCEL_PLUGIN_DIR or on PATH";
            bail!(
                "no plugin named {name:?}{hint} (built-in: {}; external: {}; {place})",
                builtin.join(", "),
                if external.is_empty() { "none found".to_owned() } else { external.join(", ") }
            );
        }
    }
    let samples = args.samples || args.captures.is_empty();
    let mut captures = conformance::captures(&args.captures, samples, &registry).map_err(anyhow::Error::msg)?;
    let mut fingerprint = None;
    if args.live {
        let options = OpenOptions { registry: registry.clone(), env, ..OpenOptions::default() };
        let host = Host::open(&Source::Live, options).context("opening this machine")?;
        fingerprint = Some(serde_json::to_value(accel_discover::fingerprint::collect(&host, &plugins))?);
        captures.push(Capture::live(host));
    }
    let mut report = conformance::run(&plugins, &external, &args.plugins, &captures);
    report.fingerprint = fingerprint;
    let ok =
        report.plugins.iter().all(|p| p.captures.iter().all(|c| c.checks.iter().all(|k| k.status != Status::Fail)));
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else if args.markdown {
        // Rendered from the JSON document, so the page shows exactly what --json reports.
        let text = serde_json::to_string(&report)?;
        let back: conformance::Report = serde_json::from_str(&text)?;
        out.write_all(conformance::markdown(&back, conformance::MATURITY_COMMAND).as_bytes())?;
    } else {
        out.write_all(text(&report).as_bytes())?;
    }
    Ok(ok)
}

fn text(report: &conformance::Report) -> String {
    let mut s = format!("{:<13}", "plugin");
    for c in conformance::CAPABILITIES {
        s.push_str(&format!(" {c:<9}"));
    }
    s.push_str(" captures\n");
    for p in &report.plugins {
        s.push_str(&format!("{:<13}", p.name));
        for c in conformance::CAPABILITIES {
            s.push_str(&format!(" {:<9}", p.tiers.get(c).map_or("none", |g| g.tier.as_str())));
        }
        s.push_str(&format!(" {}\n", p.captures.len()));
        for c in &p.captures {
            for k in c.checks.iter().filter(|k| k.status == Status::Fail) {
                s.push_str(&format!("  FAIL {} on {}: {}\n", k.name, c.capture, k.detail));
            }
        }
    }
    s
}
