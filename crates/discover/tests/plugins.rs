//! Out-of-process plugins (protocol v1): hostile plugins cost one warning naming them and at
//! most the timeout, and discovery goes on; a well-behaved one adds its devices.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use accel_discover::exec::{ExecOptions, ExecPlugin, PluginError};
use accel_discover::{discover_all, Host};
use accel_model::SkuRegistry;

const TIMEOUT: Duration = Duration::from_millis(700);

fn plugin_dir(name: &str, plugins: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("accel-plugins-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (plugin, script) in plugins {
        let path = dir.join(format!("accel-plugin-{plugin}"));
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
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
    for dir in [open_dir, good_dir] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
