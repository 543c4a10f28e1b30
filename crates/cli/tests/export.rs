//! `accel export` and `accel --version` as a user meets them: help, files written whole, and the
//! exit status of bad input (2).

use std::process::{Command, Output};

fn accel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accel")).args(args).env_remove("ACCEL_SKU_DIR").output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Bad input: exit status 2 and one line on stderr naming the problem.
fn bad_input(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.contains(needle), "{err}");
}

#[test]
fn version_names_the_commit_and_features() {
    let v = stdout(&accel(&["--version"]));
    assert!(v.starts_with(concat!("accel ", env!("CARGO_PKG_VERSION"), " (git ")), "{v}");
    assert!(v.contains("; features: "), "{v}");
}

#[test]
fn export_help_teaches_each_format() {
    let help = stdout(&accel(&["export", "--help"]));
    for word in ["dra", "nfd", "slurm"] {
        assert!(help.contains(word), "{word} missing: {help}");
    }
    assert!(stdout(&accel(&["export", "dra", "--help"])).contains("pcieRoot"));
    assert!(stdout(&accel(&["export", "nfd", "--help"])).contains("--output"));
    assert!(stdout(&accel(&["export", "slurm", "--help"])).contains("accel cluster --sample"));
}

#[test]
fn nfd_output_is_written_whole_and_leaves_no_temporary_file() {
    let dir = accel_testdata::TempDir::new("nfd");
    let file = dir.join("accel");
    std::fs::write(&file, "old=1\n").unwrap();
    let out = accel(&["export", "nfd", "--sample", "dgx-h100", "--output", file.to_str().unwrap()]);
    assert!(out.status.success() && out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\n# +expiry-time=") && text.contains("\nnvidia.com/gpu.count=8\n"), "{text}");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["accel"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression (security): the NFD file was written through a predictable temporary name
/// (`.NAME.tmp.<pid>`) that `std::fs::write` followed if it was a symlink, so a local user who
/// could write to the features directory made `accel` (often root) overwrite any file. The
/// shell plants that link for its own pid and `exec`s accel under the same pid.
#[test]
fn nfd_output_never_follows_a_planted_temporary_name() {
    let dir = accel_testdata::TempDir::new("nfd-plant");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let script = format!(
        "ln -s {victim} {dir}/.features.tmp.$$ && exec {accel} export nfd --sample dgx-h100 --output {dir}/features",
        victim = victim.display(),
        dir = dir.display(),
        accel = env!("CARGO_BIN_EXE_accel"),
    );
    let out = Command::new("sh").arg("-c").arg(&script).env_remove("ACCEL_SKU_DIR").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n", "the write followed the planted link");
    assert!(std::fs::read_to_string(dir.join("features")).unwrap().contains("nvidia.com/gpu.count=8"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_exits_2() {
    bad_input(&accel(&["export", "dra", "--sample", "dgx-h100", "--driver", "Not_A_Domain"]), "DNS subdomain");
    bad_input(
        &accel(&["export", "slurm", "--cluster", "/nonexistent.json", "--out-dir", "/tmp/x"]),
        "cannot read cluster",
    );
    let dir = accel_testdata::TempDir::new("slurm");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"nodes\": 3}").unwrap();
    let out_dir = dir.join("out");
    bad_input(
        &accel(&["export", "slurm", "--cluster", bad.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()]),
        "parsing cluster",
    );
    assert!(!out_dir.exists(), "nothing written for bad input");
    std::fs::remove_dir_all(&dir).unwrap();
}
