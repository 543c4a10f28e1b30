//! Fuzz target `plugin_answer`: what an external plugin (protocol v1, docs/plugin-protocol.md)
//! could print on stdout. The bytes go through what accel does with a plugin's output, in
//! process (no executable is run):
//!
//! - the JSON parse and the `protocol` check of `ExecPlugin::run` (mirrored: that code is inline
//!   in `run`, which spawns the plugin);
//! - the schema validator, for every response the protocol has (`schema::validate`), and the
//!   control-character escaping of the answer checks (`validate::escape_controls`);
//! - `exec::parse_discover`, then a whole discovery of the Ascend example's capture
//!   (`examples/plugins/ascend/capture`) with a plugin that answers that report, placed where
//!   external plugins run (before the generic PCI plugin), so `validate` checks it as it checks
//!   an executable's;
//! - isolation of every device, the path matrix, and the machine's JSON.
//!
//! Never a panic. With `ACCEL_FUZZ_STRICT=1` the machine must also pass the model's invariants
//! (`conformance::invariants`).

#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use accel_discover::exec::{self, ExecPlugin};
use accel_discover::{conformance, default_plugins, discover, schema, validate, Host, Isolation, Report, Vendor};
use accel_model::{Accelerator, Machine, PathClassifier};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const NAME: &str = "fuzz";

/// The platform: the capture the Ascend example plugin is demonstrated on, read once.
fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/plugins/ascend/capture");
        let tree = accel_fuzz::tree_from_dir(std::path::Path::new(dir)).expect("the Ascend example capture");
        Host::in_memory(Arc::new(tree), accel_fuzz::registry())
    })
}

/// An external plugin whose executable is never run: only its (pure) `isolate` is used.
fn exec_plugin() -> &'static ExecPlugin {
    static PLUGIN: OnceLock<ExecPlugin> = OnceLock::new();
    PLUGIN.get_or_init(|| ExecPlugin::at(NAME, "/nonexistent/accel-plugin-fuzz", Duration::from_secs(1)))
}

/// A plugin that answers `discover` with the fuzzed report.
struct Answer(Report);

impl Vendor for Answer {
    fn id(&self) -> &'static str {
        NAME
    }

    /// What `ExecPlugin::discover` returns after its `run`: the parsed report, unchecked
    /// (`discover` checks it against itself and the other plugins, `accel_discover::validate`).
    fn discover(&self, _host: &Host, _platform: &Machine) -> Report {
        self.0.clone()
    }

    fn isolate(&self, devices: &[&Accelerator]) -> Isolation {
        exec_plugin().isolate(devices)
    }
}

/// `ExecPlugin::run`'s checks of the output: one JSON document speaking protocol 1.
fn answer(out: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(out).ok()?;
    match value.get("protocol") {
        Some(Value::Number(n)) if n.as_u64() == Some(exec::PROTOCOL) => Some(value),
        _ => None,
    }
}

fn run(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        for keep_lines in [false, true] {
            let _ = validate::escape_controls(text, keep_lines);
        }
    }
    let Some(value) = answer(data) else { return };
    for name in ["version.response", "discover.response", "isolate.response", "metrics.response", "health.response"] {
        let _ = schema::validate(name, &value);
    }
    let report = exec::parse_discover(NAME, &value);
    let mut plugins = default_plugins();
    let generic = plugins.pop().expect("the generic plugin is last");
    plugins.push(Box::new(Answer(report)));
    plugins.push(generic);
    let machine = discover(host(), &plugins);
    let ids: Vec<&str> = machine.accelerators.iter().map(|a| a.id.as_str()).collect();
    let _ = accel_discover::isolate(&plugins, &machine, &ids);
    let _ = PathClassifier::new(&machine).matrix();
    serde_json::to_string(&machine).expect("a machine serializes");
    if accel_fuzz::strict() {
        if let Err(e) = conformance::invariants(&machine) {
            panic!("invariant broken: {e}");
        }
    }
}

fuzz_target!(|data: &[u8]| run(data));
