//! Running a module of accel's Python package (`accel.lab`, `accel.ray`) in an interpreter we do
//! not choose: never with the working directory first on `sys.path`, where a planted
//! `tomllib.py` or `accel/` would run in its place (`python3 -m` puts it there; `-P` does not,
//! but exists only from Python 3.11). The same prelude is `accel._python.PRELUDE`.

use std::ffi::OsStr;
use std::process::Command;

/// `python -c PRELUDE MODULE ARGS...` runs MODULE as `python -m` would, without the working
/// directory on `sys.path`, on any Python 3.
pub const PRELUDE: &str = "import importlib.util, runpy, sys\n\
sys.path[:1] = [p for p in sys.path[:1] if p]\n\
m = sys.argv.pop(1)\n\
try:\n    found = importlib.util.find_spec(m)\nexcept ImportError:\n    found = None\n\
if found is None:\n    sys.exit(f'{sys.executable}: No module named {m}')\n\
runpy.run_module(m, run_name='__main__', alter_sys=True)\n";

/// The command that runs `module` in `python` (arguments follow).
pub fn module(python: &OsStr, module: &str) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg("-c").arg(PRELUDE).arg(module);
    cmd
}
