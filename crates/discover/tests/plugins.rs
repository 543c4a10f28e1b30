//! Out-of-process plugins (protocol v1): hostile plugins cost one warning naming them and at
//! most the timeout, and discovery goes on; a well-behaved one adds its devices; every answer is
//! checked against itself and the other plugins' (unique ids, one owner per PCI function, links
//! with both ends present and consenting, bounded sizes, no control characters).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accel_discover::exec::{ExecOptions, ExecPlugin, PluginError};
use accel_discover::{discover, discover_all, Host, Isolation, Report, Vendor};
use accel_model::{Accelerator, Link, LinkKind, Machine, SkuRegistry, Warning};
use accel_testdata::TempDir;

const TIMEOUT: Duration = Duration::from_millis(700);

fn plugin_dir(name: &str, plugins: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new(&format!("plugins-{name}"));
    for (plugin, script) in plugins {
        let path = dir.join(format!("accel-plugin-{plugin}"));
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// A plugin script that prints `json` verbatim (a here-document: no shell escapes apply).
fn answers(json: &str) -> String {
    format!("cat > /dev/null\ncat <<'EOF'\n{json}\nEOF")
}

fn options(dir: &Path) -> ExecOptions {
    ExecOptions { dirs: vec![dir.to_path_buf()], timeout: TIMEOUT, skipped: Vec::new() }
}

fn host() -> Host {
    Host::new(accel_testdata::root("hwloc-2p8co2t-8ve"), SkuRegistry::builtin())
}

/// Each hostile plugin alone: one warning naming it, the rest of discovery intact, bounded time.
#[test]
fn hostile_plugins_cost_one_warning_each() {
    let baseline = discover_all(&host(), &options(Path::new("/nonexistent")));
    let cases: &[(&str, &str, &str)] = &[
        ("hang", "sleep 30", "did not answer within"),
        ("hang-silently-forked", "(sleep 30 &) ; sleep 30", "did not answer within"),
        ("crash", "echo 'segfault in vendor sdk' >&2; kill -SEGV $$", "exited with"),
        ("fail", "echo 'no driver' >&2; exit 1", "no driver"),
        ("garbage", "echo 'this is not json {'", "no valid JSON"),
        ("binary", "head -c 3000 /dev/urandom", "no valid JSON"),
        ("talkative", "yes '{\"protocol\": 1}'", "more than"),
        ("old-protocol", "echo '{\"protocol\": 0, \"accelerators\": []}'", "protocol"),
        ("bad-device", "echo '{\"protocol\": 1, \"accelerators\": [{\"id\": 3}]}'", "device dropped"),
    ];
    for (name, script, expect) in cases {
        let dir = plugin_dir(name, &[(name, script)]);
        let start = Instant::now();
        let m = discover_all(&host(), &options(&dir));
        let took = start.elapsed();
        let mine: Vec<String> =
            m.warnings.iter().filter(|w| w.source == format!("plugin:{name}")).map(|w| w.to_string()).collect();
        assert_eq!(mine.len(), 1, "{name}: {mine:?}");
        assert!(mine[0].contains(expect) && mine[0].contains(name), "{name}: {mine:?}");
        assert_eq!(m.accelerators, baseline.accelerators, "{name} changed discovery");
        // Bounded: the timeout plus process start-up, never the plugin's 30 s.
        assert!(took < TIMEOUT + Duration::from_secs(3), "{name} took {took:?}");
    }
}

#[test]
fn a_plugin_adds_devices_and_may_not_take_claimed_ones() {
    let dev = r#"{"id": "acme-0000:1b:00.0", "vendor": "acme", "product": "Acme X1", "pci": "0000:1b:00.0",
        "vocabulary": {"kind": "npu", "label": "XPU", "visibility_env": "ACME_VISIBLE", "isolation": ["7"]}}"#;
    let script = format!("cat > /dev/null; echo '{{\"protocol\": 1, \"accelerators\": [{}]}}'", dev.replace('\n', " "));
    let dir = plugin_dir("acme", &[("acme", &script)]);
    let m = discover_all(&host(), &options(&dir));
    let acme: Vec<_> = m.accelerators.iter().filter(|a| a.plugin == "acme").collect();
    // 0000:1b:00.0 is an NEC card the generic plugin would take: the external plugin runs first.
    assert_eq!(acme.len(), 1, "{:?}", m.warnings);
    assert_eq!(acme[0].vocabulary.label, "XPU");
    let iso = accel_discover::isolate(&accel_discover::default_plugins(), &m, &[&acme[0].id]);
    assert_eq!(iso.env["ACME_VISIBLE"], "7");
    assert!(m.device_labels().contains(&"XPU0".to_owned()));
}

#[test]
fn built_in_names_are_reserved_and_calls_are_typed() {
    let dir = plugin_dir("reserved", &[("nvidia", "echo '{\"protocol\": 1}'")]);
    let m = discover_all(&host(), &options(&dir));
    assert!(m.warnings.iter().any(|w| w.source == "plugin:nvidia" && w.message.contains("built-in")));
    let dir = plugin_dir("unsupported", &[("quiet", "exit 3")]);
    let p = ExecPlugin::at("quiet", dir.join("accel-plugin-quiet"), TIMEOUT);
    assert!(matches!(p.run("metrics", None, &serde_json::json!({})), Err(PluginError::Unsupported { .. })));
}

/// Regression (security): relative and world-writable `PATH` directories were searched for
/// plugins without a word, so whoever owned the working directory, or any local user with `/tmp`
/// on `PATH`, could plant `accel-plugin-x` and have accel run it. Each is now skipped with a
/// warning, and so is a world-writable plugin executable in a good directory.
#[test]
fn planted_plugins_are_not_run() {
    let planted = r#"echo '{"protocol": 1, "accelerators": []}'"#;
    let open_dir = plugin_dir("world-writable", &[("planted", planted)]);
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let good_dir = plugin_dir("good-dir", &[("fine", planted), ("writable", planted)]);
    std::fs::set_permissions(good_dir.join("accel-plugin-writable"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = format!("relative/bin:{}:{}", open_dir.display(), good_dir.display());
    let env = [("PATH".to_owned(), path)].into_iter().collect();
    let (found, warnings) = accel_discover::exec::find(&ExecOptions::from_env(&env), &[]);
    let names: Vec<_> = found.iter().map(|p| p.path().file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["accel-plugin-fine"], "{warnings:?}");
    let text: Vec<String> = warnings.iter().map(|w| w.to_string()).collect();
    assert!(text.iter().any(|w| w.contains("\"relative/bin\"") && w.contains("relative")), "{text:?}");
    assert!(
        text.iter().any(|w| w.contains(&open_dir.display().to_string()) && w.contains("any local user")),
        "{text:?}"
    );
    assert!(text.iter().any(|w| w.contains("accel-plugin-writable") && w.contains("any local user")), "{text:?}");
    // ACCEL_PLUGIN_DIR is named on purpose: a relative one is still searched.
    let env = [("ACCEL_PLUGIN_DIR".to_owned(), "relative/bin".to_owned())].into_iter().collect();
    assert_eq!(ExecOptions::from_env(&env).dirs, [PathBuf::from("relative/bin")]);
}

/// The warnings of plugin `name` whose text contains `text`.
fn warned<'m>(m: &'m Machine, name: &str, text: &str) -> Vec<&'m Warning> {
    m.warnings.iter().filter(|w| w.source == format!("plugin:{name}") && w.to_string().contains(text)).collect()
}

fn from_plugin<'m>(m: &'m Machine, name: &str) -> Vec<&'m Accelerator> {
    m.accelerators.iter().filter(|a| a.plugin == name).collect()
}

/// Regression: a plugin that repeated an id had both devices kept (two `ACME0`s, isolation and
/// plans picking either). The first device with an id wins, within a plugin and across plugins.
#[test]
fn a_later_device_with_a_seen_id_is_dropped() {
    let aaa = answers(
        r#"{"protocol": 1, "accelerators": [
            {"id": "twin", "vendor": "acme", "product": "first"},
            {"id": "twin", "vendor": "acme", "product": "second"}]}"#,
    );
    let bbb = answers(
        r#"{"protocol": 1, "accelerators": [
            {"id": "twin", "vendor": "bolt", "product": "third"},
            {"id": "bolt-1", "vendor": "bolt", "product": "Bolt"}]}"#,
    );
    let dir = plugin_dir("ids", &[("aaa", &aaa), ("bbb", &bbb)]);
    let m = discover_all(&host(), &options(&dir));
    let twins: Vec<&str> = m.accelerators.iter().filter(|a| a.id == "twin").map(|a| a.product.as_str()).collect();
    assert_eq!(twins, ["first"], "{:?}", m.warnings);
    assert!(m.accelerator("bolt-1").is_some());
    assert_eq!(warned(&m, "aaa", "twin").len(), 1, "{:?}", m.warnings);
    assert_eq!(warned(&m, "bbb", "twin").len(), 1, "{:?}", m.warnings);
    // The rest of discovery goes on: the generic plugin still finds the eight NEC cards.
    assert_eq!(from_plugin(&m, "generic-pci").len(), 8);
}

/// Regression: a device that called itself a partition could sit on a PCI function another
/// plugin had claimed (only whole devices were checked), so one card was two plugins' devices.
/// A function belongs to the first plugin that claims it; partitions of one physical device
/// from that same plugin (MIG, AMD CPX) share it.
#[test]
fn a_pci_function_belongs_to_the_first_plugin_that_claims_it() {
    let part = |id: &str, pci: &str, physical: &str, index: u32| {
        format!(
            r#"{{"id": "{id}", "vendor": "acme", "product": "A", "pci": "{pci}",
                "partition": {{"physical_id": "{physical}", "index": {index}, "mode": "MIG 1g.10gb"}}}}"#
        )
    };
    let aaa = answers(&format!(
        r#"{{"protocol": 1, "accelerators": [
            {{"id": "aaa-0", "vendor": "acme", "product": "A", "pci": "0000:1b:00.0"}}, {}, {},
            {{"id": "aaa-0b", "vendor": "acme", "product": "A", "pci": "0000:1b:00.0"}}]}}"#,
        part("aaa-1a", "0000:1c:00.0", "aaa-1", 0),
        part("aaa-1b", "0000:1c:00.0", "aaa-1", 1),
    ));
    let bbb = answers(&format!(
        r#"{{"protocol": 1, "accelerators": [{}, {{"id": "bbb-1", "vendor": "bolt", "product": "B", "pci": "0000:1c:00.0"}}]}}"#,
        part("bbb-0", "0000:1b:00.0", "bbb-x", 0),
    ));
    let dir = plugin_dir("pci", &[("aaa", &aaa), ("bbb", &bbb)]);
    let m = discover_all(&host(), &options(&dir));
    let ids = |name| from_plugin(&m, name).iter().map(|a| a.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids("aaa"), ["aaa-0", "aaa-1a", "aaa-1b"], "{:?}", m.warnings);
    assert_eq!(ids("bbb"), Vec::<String>::new(), "{:?}", m.warnings);
    let w = warned(&m, "aaa", "aaa-0b");
    assert!(w.len() == 1 && w[0].message.contains("only partitions share one"), "{w:?}");
    for (id, pci) in [("bbb-0", "0000:1b:00.0"), ("bbb-1", "0000:1c:00.0")] {
        let w = warned(&m, "bbb", id);
        assert!(w.len() == 1 && w[0].message.contains(pci) && w[0].message.contains("aaa"), "{w:?}");
    }
    // Neither function reaches the generic fallback either.
    assert!(!from_plugin(&m, "generic-pci").iter().any(|a| a.id.ends_with("1b:00.0") || a.id.ends_with("1c:00.0")));
}

/// Regression: links were kept whatever they named: a device that does not exist, a device of
/// another plugin that never agreed to it, or two devices of someone else. Now a link joins
/// devices (or NICs) of the machine, and one to another plugin's device needs that plugin to
/// report it too (it is then kept once).
#[test]
fn links_need_both_ends_and_both_plugins() {
    let link = |a: &str, b: &str, kind: &str| format!(r#"{{"a": "{a}", "b": "{b}", "kind": "{kind}", "count": 2}}"#);
    let aaa = answers(&format!(
        r#"{{"protocol": 1, "accelerators": [
            {{"id": "aaa-0", "vendor": "acme", "product": "A"}}, {{"id": "aaa-1", "vendor": "acme", "product": "A"}}],
           "links": [{}, {}, {}, {}, {}, {}, {}]}}"#,
        link("aaa-0", "aaa-1", "nvlink"),
        link("aaa-0", "ghost", "nvlink"),
        link("aaa-0", "bbb-0", "xgmi"),
        link("aaa-1", "bbb-0", "xgmi"),
        link("aaa-0", "enp96s0f0", "roce"),
        link("aaa-1", "aaa-1", "nvlink"),
        link("aaa-1", "aaa-0", "nvlink"),
    ));
    let bbb = answers(&format!(
        r#"{{"protocol": 1, "accelerators": [{{"id": "bbb-0", "vendor": "bolt", "product": "B"}}], "links": [{}]}}"#,
        link("bbb-0", "aaa-0", "xgmi"),
    ));
    let ccc =
        answers(&format!(r#"{{"protocol": 1, "accelerators": [], "links": [{}]}}"#, link("aaa-1", "aaa-0", "c2c")));
    let dir = plugin_dir("links", &[("aaa", &aaa), ("bbb", &bbb), ("ccc", &ccc)]);
    let m = discover_all(&host(), &options(&dir));
    let links: Vec<String> = m.links.iter().map(|l| format!("{}-{}-{}", l.a, l.kind, l.b)).collect();
    assert_eq!(links, ["aaa-0-nvlink-aaa-1", "aaa-0-xgmi-bbb-0", "aaa-0-roce-enp96s0f0"], "{:?}", m.warnings);
    assert_eq!(warned(&m, "aaa", "ghost").len(), 1, "{:?}", m.warnings);
    let refused = warned(&m, "aaa", "aaa-1");
    assert!(refused.iter().any(|w| w.message.contains("bbb-0") && w.message.contains("bbb")), "{refused:?}");
    assert!(refused.iter().any(|w| w.message.contains("itself")), "{refused:?}");
    assert!(refused.iter().any(|w| w.message.contains("reported twice")), "{refused:?}");
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert_eq!(warned(&m, "ccc", "aaa-0").len(), 1, "{:?}", m.warnings);
    assert!(warned(&m, "bbb", "").is_empty(), "{:?}", m.warnings);
}

/// Regression: 20,000 devices fit under the 4 MiB output cap, and `accel topo` then took 79 s
/// and 6.7 GB. A plugin's answer is now cut to the documented limits (1024 devices, 65,536
/// links, 256 domains, warnings and attributes), with one warning counting what each list lost.
#[test]
fn a_huge_answer_is_cut_to_the_limits() {
    // Short ids keep 20,000 devices and 66,000 links (between the first 1024) under the 4 MiB
    // cap (about 3.9 MB).
    let script = r#"cat > /dev/null
awk 'BEGIN {
  printf "{\"protocol\":1,\"accelerators\":["
  for (i = 0; i < 20000; i++) printf "%s{\"id\":\"g%d\",\"vendor\":\"g\",\"product\":\"G\"}", (i ? "," : ""), i
  printf "],\"links\":["
  for (i = 0; i < 66000; i++) printf "%s{\"a\":\"g%d\",\"b\":\"g%d\",\"kind\":\"c2c\",\"count\":1}", (i ? "," : ""), int(i / 512), 512 + i % 512
  printf "],\"domains\":["
  for (i = 0; i < 300; i++) printf "%s{\"kind\":\"rack\",\"name\":\"r%d\",\"source\":\"s\"}", (i ? "," : ""), i
  printf "],\"warnings\":["
  for (i = 0; i < 300; i++) printf "%s{\"message\":\"w%d\"}", (i ? "," : ""), i
  printf "],\"attributes\":{"
  for (i = 0; i < 300; i++) printf "%s\"a%d\":\"v\"", (i ? "," : ""), i
  printf "}}\n"
}'"#;
    let dir = plugin_dir("huge", &[("huge", script)]);
    let options = ExecOptions { timeout: Duration::from_secs(30), ..options(&dir) };
    let m = discover_all(&host(), &options);
    let devices = from_plugin(&m, "huge");
    assert_eq!(devices.len(), 1024, "{:?}", m.warnings.iter().take(5).collect::<Vec<_>>());
    assert!(devices.iter().all(|a| a.id[1..].parse::<u32>().unwrap() < 1024), "the first 1024 are kept");
    assert_eq!(m.links.len(), 65536);
    assert_eq!((m.domains.len(), m.attributes.len()), (256, 256));
    // The plugin's own warnings, cut to 256, then one warning per list that was cut.
    let mine = warned(&m, "huge", "");
    assert_eq!(mine.len(), 256 + 5, "{:?}", &mine[250..]);
    for cut in ["18976 devices", "464 links", "44 domains", "44 warnings", "44 attributes"] {
        assert_eq!(warned(&m, "huge", &format!("{cut} over the limit")).len(), 1, "{cut}: {:?}", &mine[250..]);
    }
}

/// Every string of `value` (keys too), with the path to it.
fn strings(value: &serde_json::Value, path: String, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::String(s) => out.push((path, s.clone())),
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                strings(v, format!("{path}[{i}]"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.push((format!("{path}.{k} (key)"), k.clone()));
                strings(v, format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

/// Regression: a plugin's names reached the terminal raw, so `accel topo` could be made to
/// clear the screen, retitle the window or hide lines (ESC, CSI, OSC). Control characters in
/// every string a plugin reports are now escaped as text (`\u{1b}`), and over-long strings are
/// cut (a link naming a long id still finds it).
#[test]
fn control_characters_are_escaped_and_long_strings_cut() {
    let long_id = format!("esc-{}", "l".repeat(300));
    let esc = answers(&format!(
        r#"{{"protocol": 1,
  "accelerators": [
    {{"id": "esc-\u001b[2J0", "vendor": "esc\u009b31m", "product": "Evil\u001b]0;pwned\u0007 X1\nforged line",
      "uuid": "u\u001bu", "serial": "s\u0000", "family": "f\u007f", "dtypes": ["bf\u001b16"],
      "vocabulary": {{"kind": "npu", "label": "E\u001b[31mX", "visibility_env": "ESC\u007fVISIBLE",
                     "isolation": ["\u0000"], "ray_resource": "R\u001b", "device_files": ["/dev/esc\u001b0"]}}}},
    {{"id": "{long_id}", "vendor": "esc", "product": "{long_product}", "dtypes": [{dtypes}]}}],
  "links": [{{"a": "esc-\u001b[2J0", "b": "{long_id}", "kind": "nvlink", "count": 1}}],
  "domains": [{{"kind": "rack", "name": "r\u001b1", "source": "s\u001b", "accelerators": ["esc-\u001b[2J0"]}}],
  "warnings": [{{"message": "careful\u001b[0m", "path": "/p\u001b"}}],
  "attributes": {{"esc.k\u001bey": "v\u001b\nline two"}}}}"#,
        long_product = "p".repeat(300),
        dtypes = vec!["\"bf16\""; 70].join(", "),
    ));
    let fail = "echo 'driver says \\033[2J' >&2; exit 1";
    let dir = plugin_dir("escape", &[("esc", &esc), ("esc-fail", fail)]);
    let m = discover_all(&host(), &options(&dir));
    let mut all = Vec::new();
    strings(&serde_json::to_value(&m).unwrap(), String::new(), &mut all);
    for (path, s) in &all {
        // Attribute values are documents (`gce.tpu-env`): line breaks and tabs stay.
        let allowed =
            |c: char| path.starts_with(".attributes.") && !path.ends_with("(key)") && matches!(c, '\n' | '\t');
        assert!(!s.chars().any(|c| c.is_control() && !allowed(c)), "{path}: {s:?}");
    }
    for w in &m.warnings {
        assert!(!w.to_string().contains('\u{1b}'), "{w:?}");
    }
    let evil = m.accelerator("esc-\\u{1b}[2J0").unwrap_or_else(|| panic!("{:?}", m.accelerators));
    assert_eq!(evil.product, "Evil\\u{1b}]0;pwned\\u{7} X1\\u{a}forged line");
    assert_eq!(evil.vocabulary.label, "E\\u{1b}[31mX");
    assert_eq!(m.attributes["esc.k\\u{1b}ey"], "v\\u{1b}\nline two");
    let long = m.accelerators.iter().find(|a| a.id.starts_with("esc-ll")).unwrap();
    assert_eq!((long.id.chars().count(), long.product.chars().count(), long.dtypes.len()), (256, 256, 64));
    assert_eq!(m.links.len(), 1, "{:?}", m.warnings);
    assert_eq!(warned(&m, "esc", "truncated").len(), 1, "{:?}", m.warnings);
    assert!(!warned(&m, "esc-fail", "\\u{1b}[2J").is_empty(), "{:?}", m.warnings);
}

/// A built-in plugin's report goes through the same checks as an executable's.
struct Sloppy;

impl Vendor for Sloppy {
    fn id(&self) -> &'static str {
        "sloppy"
    }

    fn discover(&self, _host: &Host, _platform: &Machine) -> Report {
        let acc = |id: &str, product: &str| -> Accelerator {
            serde_json::from_value(
                serde_json::json!({"id": id, "index": 0, "vendor": "sloppy", "plugin": "sloppy", "product": product}),
            )
            .unwrap()
        };
        Report {
            accelerators: vec![acc("s-0", "S\u{1b}[1m"), acc("s-0", "again")],
            links: vec![Link::new("s-0", "nowhere", LinkKind::new("nvlink"), 1, None)],
            ..Report::default()
        }
    }

    fn isolate(&self, _devices: &[&Accelerator]) -> Isolation {
        Isolation::default()
    }
}

#[test]
fn built_in_plugins_go_through_the_same_checks() {
    let m = discover(&host(), &[Box::new(Sloppy)]);
    let products: Vec<&str> = m.accelerators.iter().map(|a| a.product.as_str()).collect();
    assert_eq!(products, ["S\\u{1b}[1m"]);
    assert!(m.links.is_empty());
    let mine = warned(&m, "sloppy", "");
    assert_eq!(mine.len(), 3, "{mine:?}");
    for text in ["control characters escaped", "device s-0 dropped", "no device or NIC nowhere"] {
        assert!(mine.iter().any(|w| w.message.contains(text)), "{text}: {mine:?}");
    }
}
