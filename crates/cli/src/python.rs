//! Running a module of accel's Python package (`accel.lab`, `accel.ray`) in an interpreter we do
//! not choose: never with the working directory first on `sys.path`, where a planted
//! `tomllib.py` or `accel/` would run in its place (`python3 -m` puts it there; `-P` does not,
//! but exists only from Python 3.11), and with one line saying what to install when that
//! interpreter lacks the package. The child side of the same prelude is `accel._python.PRELUDE`.

use std::ffi::OsStr;
use std::process::Command;

/// How to get the accel Python package, for every message that needs it (`accel lab`,
/// `accel cluster build --from-ray`): this project is not on PyPI, where the package named
/// `accel` is an unrelated one.
pub(crate) const INSTALL_PYTHON_PACKAGE: &str = "pip install dist/accel-*.whl (the wheel `bash scripts/wheel.sh` \
     builds; not `pip install accel`, an unrelated PyPI package), or from a checkout `bash scripts/setup.sh` \
     and ACCEL_PYTHON=.venv/bin/python";

/// What the prelude prints, after the module's name, when the interpreter has no accel package.
pub(crate) const NOT_INSTALLED: &str = "needs the accel Python package, which is not installed in";

/// `python -c PRELUDE MODULE ARGS...` runs MODULE as `python -m` would, without the working
/// directory on `sys.path`, on any Python 3; without the accel package it prints one line (the
/// install hint) and exits 2.
fn prelude() -> String {
    format!(
        "import importlib.util, runpy, sys\n\
sys.path[:1] = [p for p in sys.path[:1] if p]\n\
m = sys.argv.pop(1)\n\
if importlib.util.find_spec('accel') is None:\n    \
sys.stderr.write('accel: error: ' + m + ' {NOT_INSTALLED} ' + sys.executable + ': ' + {hint:?} + '\\n')\n    \
sys.exit(2)\n\
try:\n    found = importlib.util.find_spec(m)\nexcept ImportError:\n    found = None\n\
if found is None:\n    sys.exit(f'{{sys.executable}}: No module named {{m}}')\n\
runpy.run_module(m, run_name='__main__', alter_sys=True)\n",
        hint = INSTALL_PYTHON_PACKAGE
    )
}

/// The command that runs `module` in `python` (arguments follow).
pub fn module(python: &OsStr, module: &str) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg("-c").arg(prelude()).arg(module);
    cmd
}
