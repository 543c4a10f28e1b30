"""The docs as a newcomer runs them: every example of the user guide (examples/) and every code
block of README.md and docs/guide/, each in a child process with a clean environment (PATH with
the `accel` binary and the virtualenv, a fresh HOME, VIRTUAL_ENV, and TMPDIR inside this run's
temp root; no ACCEL_* variable, no secret file, no RAY_* variable), from a scratch directory
that looks like a checkout (`examples`, `.venv`, `target`, ... link to the repository). Where a
block needs Ray it gets a fresh private cluster (`ray.init(address="local")` or
`ray.cluster_utils.Cluster`), never a running one. What a block prints is checked against the
output block the docs show after it.

Each code block carries one annotation, an HTML comment on the line above its fence:

- `<!-- doctest: run -->`: runs as it is (`sh` with bash, `python` with the venv's Python);
  `cargo run [--release] -q -p accel-cli --` stands for the built `accel`, as README says;
- `<!-- doctest: run with NAME -->`: runs after the prelude NAME below (the context the prose
  around the block assumes: a Ray cluster of sample nodes, the arrays it names), then NAME's end;
- `<!-- doctest: continue -->`: runs in the same process as the block before, appended to it;
- `<!-- doctest: output -->`: what the run block before it prints; `…` matches anything on
  its line;
- `<!-- doctest: example -->`: the block runs examples (`examples/NAME`); `test_example_runs`
  runs each the same way, and checks the output block that follows against it;
- `<!-- doctest: excerpt of PATH -->`: the block is, line for line, in the file PATH;
- `<!-- doctest: synopsis -->`: a summary with placeholders (`DIR`, `[--flag]`); each command
  it names must exist with every flag it names (as python/tests/test_hints.py checks);
- `<!-- doctest: skip: REASON -->`: not runnable here, and why (root, real hardware, the test
  command itself); the reason names what tests it instead.

A block without an annotation fails the test, so no snippet is silently left out.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (REPO / "examples").iterdir() if p.suffix in (".py", ".sh"))
DOCS = [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]
VENV = pathlib.Path(sys.executable).parent.parent
# What a checkout holds that a block may name by a relative path.
CHECKOUT = ("examples", "docs", "scripts", "test_data", "target", ".venv", "crates", "Cargo.toml")
TIMEOUT_S = 600

_RAY_NODES = r'''
import os
import numpy as np
import ray
from ray.cluster_utils import Cluster
import accel
import accel.ray

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# The head node is the first sample node (one raylet fewer on a small machine).
_specs = [(_name, accel.ray.node_spec(accel.sample(_sample), _name, _labels)) for _name, _sample, _labels in NODES]
_args = [{"num_cpus": 2, "num_gpus": s["num_gpus"], "resources": s["resources"], "labels": s["labels"]} for _, s in _specs]
_cluster = Cluster(initialize_head=True, head_node_args={**_args[0], "include_dashboard": False})
for _a in _args[1:]:
    _cluster.add_node(**_a)
_cluster.wait_for_nodes()
ray.init(address=_cluster.address, log_to_driver=False)
for _name, _sample, _labels in NODES:
    accel.ray.publish_machine(_name, accel.sample(_sample))


@ray.remote(num_cpus=0)
class MyActor:
    def visible(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")
'''
_RAY_END = "\nray.shutdown()\n_cluster.shutdown()\n"

# The contexts blocks run in: (code before the block, code after it).
PRELUDES: dict[str, tuple[str, str]] = {
    # A private cluster of one DGX H100 sample node (8 GPUs), published for the planner.
    "a DGX H100 node": ('NODES = [("dgx-a", "dgx-h100", {})]\n' + _RAY_NODES, _RAY_END),
    # Two GB200 trays of one NVLink clique: one ray.io/gpu-domain.
    "two GB200 trays": ('NODES = [("nvl-0", "gb200-nvl72-tray", {}), ("nvl-1", "gb200-nvl72-tray", {})]\n' + _RAY_NODES, _RAY_END),
    # The guide's gang cluster: three GB200 trays in two cliques, and the 3 x 4 gang of the
    # block before (chapter 3, "Training gangs").
    "three GB200 trays in two cliques": (
        'NODES = [("nvl-a0", "gb200-nvl72-tray", {"nvlink_clique": "clique-a"}), '
        '("nvl-b0", "gb200-nvl72-tray", {"nvlink_clique": "clique-b"}), '
        '("nvl-b1", "gb200-nvl72-tray", {"nvlink_clique": "clique-b"})]\n'
        + _RAY_NODES
        + 'gang = accel.ray.gang({"count": 1, "sku": ["nvidia-gb200"]}, groups=3, group_size=4, within="nvlink_clique", replicas="pack")\n',
        _RAY_END,
    ),
    # Ray and numpy imported, as the block's module would import them.
    "ray and numpy imported": ("import numpy as np\nimport ray\n", ""),
    # What a transport block names: the data it writes and the array it reads into.
    "arrays": (
        "import numpy as np\n"
        "def compute():\n    return np.float32(1.5)\n"
        "mine = np.empty(1 << 20, np.float32)\n",
        "",
    ),
    # A channel's producer in this process and an inference worker actor on a private cluster.
    "a channel and a worker": (
        "import numpy as np\n"
        "import ray\n"
        "from accel import transport\n"
        'ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)\n'
        "new_weights = np.ones((4096, 4096), np.float32)\n"
        "bias = np.zeros(16, np.float32)\n"
        "bufs = {'w': np.empty((4096, 4096), np.float32), 'b': np.empty(16, np.float32)}\n"
        "def load(tensors):\n    assert float(tensors['w'][0, 0]) == 1.0\n"
        "@ray.remote(num_cpus=0)\n"
        "class _Worker:\n"
        "    def update(self, ch):\n"
        "        with ch.read() as (version, tensors):\n"
        "            return version, float(tensors['w'].sum())\n"
        "worker = _Worker.remote()\n",
        "ray.shutdown()\n",
    ),
    # chapter 6's toy model and its ranks: 4 trainer ranks and 8 inference ranks on a private
    # cluster, each trainer's `step` publishing its box of the weights.
    "trainer and inference ranks": (
        "import numpy as np\n"
        "import ray\n"
        "import accel.ray\n"
        "from accel import weights\n"
        'model = {"w1": ((64, 256), "f32"), "w2": ((256, 16), "f32")}\n'
        "_train = weights.Layout.sharded(model, ranks=4, dim=0)\n"
        'ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)\n'
        "@ray.remote(num_cpus=0)\n"
        "class _Trainer(accel.ray.WeightSource):\n"
        "    def __init__(self, rank):\n        self.rank = rank\n"
        "    def step(self, version):\n"
        "        boxes = _train.ranks[self.rank]\n"
        "        mine = {n: np.ones([hi - lo for lo, hi in b], np.float32) for n, b in boxes.items()}\n"
        "        return self.publish_weights(version, mine)\n"
        "@ray.remote(num_cpus=0)\n"
        "class _Worker(accel.ray.WeightTarget):\n    pass\n"
        "trainers = [_Trainer.remote(r) for r in range(4)]\n"
        "workers = [_Worker.remote() for _ in range(8)]\n"
        "v = 1\n",
        "assert report.nbytes > 0\nray.shutdown()\n",
    ),
}


@dataclass
class Block:
    path: pathlib.Path
    line: int
    lang: str
    text: str
    note: str
    runs: list[str] = field(default_factory=list)  # the run blocks before it, for continue/output

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: pathlib.Path) -> list[Block]:
    """Every fenced code block of a markdown file, with the annotation on the line above it."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = lines[i - 1].strip() if i else ""
        note = re.fullmatch(r"<!-- doctest: (.*) -->", above)
        out.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1 : end]) + "\n", note.group(1) if note else ""))
        i = end + 1
    return out


ALL = [b for doc in DOCS for b in blocks(doc)]


def clean_env(home: pathlib.Path, accel_bin: pathlib.Path) -> dict[str, str]:
    """What a newcomer's shell holds after activating the venv: nothing of this test run's."""
    return {
        "PATH": os.pathsep.join([str(accel_bin.parent), str(VENV / "bin"), "/usr/bin", "/bin"]),
        "HOME": str(home),
        "VIRTUAL_ENV": str(VENV),
        # This run's one temp root (conftest.py), so a Ray session leaves nothing in /tmp.
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "LANG": "C.UTF-8",
    }


def scratch(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory that looks like a checkout to relative paths, and takes what blocks write."""
    work = tmp_path / "work"
    work.mkdir()
    for name in CHECKOUT:
        (work / name).symlink_to(REPO / name)
    (tmp_path / "home").mkdir()
    return work


def run(cmd: list[str], tmp_path: pathlib.Path, accel_bin: pathlib.Path) -> subprocess.CompletedProcess[str]:
    work = scratch(tmp_path)
    done = subprocess.run(cmd, cwd=work, env=clean_env(tmp_path / "home", accel_bin), capture_output=True, text=True, timeout=TIMEOUT_S)
    secret = tmp_path / "home" / ".config" / "accel" / "transport-secret"
    assert not secret.exists(), "a run made a secret file: a newcomer needs none"
    return done


def test_every_guide_chapter_example_exists() -> None:
    guide = "".join(p.read_text() for p in (REPO / "docs" / "guide").glob("*.md"))
    for example in EXAMPLES:
        assert f"examples/{example.name}" in guide, f"{example.name} is in no guide chapter"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: pathlib.Path, accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    cmd = [str(VENV / "bin" / "python"), str(example)] if example.suffix == ".py" else ["bash", str(example)]
    done = run(cmd, tmp_path, accel_bin)
    assert done.returncode == 0, f"{example.name} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    shown = [b for b in ALL if b.note == "output" and _ran_example(b) == example.name]
    for b in shown:
        assert_prints(done.stdout, b)


def _ran_example(output: Block) -> str | None:
    """The example an output block shows: the one the run block before it names."""
    doc = blocks(output.path)
    k = next(i for i, b in enumerate(doc) if b.line == output.line)
    before = next((b for b in reversed(doc[:k]) if b.note.startswith("run") or b.note == "example"), None)
    m = re.search(r"examples/(\w+\.(?:py|sh))", before.text) if before else None
    return m.group(1) if m else None


def assert_prints(stdout: str, shown: Block) -> None:
    """`stdout` holds the output block's lines, in order (`…` matches anything in a line)."""
    got = [line.rstrip() for line in stdout.splitlines()]
    at = 0
    for want in (line.rstrip() for line in shown.text.splitlines() if line.strip()):
        pattern = re.compile(".*?".join(re.escape(part) for part in want.split("…")) + "$")
        while at < len(got) and not pattern.match(got[at]):
            at += 1
        assert at < len(got), f"{shown.where}: the docs show {want!r}, which is not printed in order:\n{stdout[-4000:]}"
        at += 1


ANNOTATIONS = ("run", "run with ", "continue", "output", "example", "excerpt of ", "synopsis", "skip: ")


def test_every_block_of_the_readme_and_the_guide_is_annotated() -> None:
    bad = [f"{b.where}: {b.note or 'no annotation'}" for b in ALL if not (b.note in ("run", "example") or b.note.startswith(ANNOTATIONS[1:]))]
    assert not bad, "blocks without a doctest annotation (see this file's docstring):\n" + "\n".join(bad)
    unknown = [f"{b.where}: {b.note}" for b in ALL if b.note.startswith("run with ") and b.note[9:] not in PRELUDES]
    assert not unknown, unknown


def _script(block: Block) -> tuple[str, str]:
    """The program a run block and the `continue` blocks after it make, and its language."""
    doc = blocks(block.path)
    k = next(i for i, b in enumerate(doc) if b.line == block.line)
    body = [block.text]
    for b in doc[k + 1 :]:
        if b.note == "continue":
            body.append(b.text)
        elif b.note != "output":
            break
    text = "".join(body)
    if block.lang == "sh":
        text = re.sub(r"cargo run (--release )?-q -p accel-cli --", "accel", text)
        return "set -euo pipefail\n" + text, "sh"
    before, after = PRELUDES[block.note[9:]] if block.note.startswith("run with ") else ("", "")
    return before + text + after, "python"


RUNS = [b for b in ALL if b.note == "run" or b.note.startswith("run with ")]


@pytest.mark.parametrize("block", RUNS, ids=[b.where for b in RUNS])
def test_doc_block_runs_and_prints_what_the_docs_show(block: Block, accel_bin: pathlib.Path, tmp_path: pathlib.Path) -> None:
    program, lang = _script(block)
    cmd = ["bash", "-c", program] if lang == "sh" else [str(VENV / "bin" / "python"), "-c", program]
    done = run(cmd, tmp_path, accel_bin)
    assert done.returncode == 0, f"{block.where} exited {done.returncode}\n{program}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    doc = blocks(block.path)
    k = next(i for i, b in enumerate(doc) if b.line == block.line)
    for b in doc[k + 1 :]:
        if b.note == "output" and _ran_example(b) is None:
            assert_prints(done.stdout, b)
        elif b.note not in ("continue", "output"):
            break


EXAMPLE_BLOCKS = [b for b in ALL if b.note == "example"]


@pytest.mark.parametrize("block", EXAMPLE_BLOCKS, ids=[b.where for b in EXAMPLE_BLOCKS])
def test_doc_example_block_names_examples_that_exist(block: Block) -> None:
    named = re.findall(r"examples/(\w+\.(?:py|sh))", block.text)
    assert named and all((REPO / "examples" / n).is_file() for n in named), f"{block.where}: {named}"
    for line in filter(str.strip, block.text.splitlines()):
        assert re.search(r"examples/\w+\.(py|sh)\s*$", line), f"{block.where}: more than an example: {line!r}"


EXCERPTS = [b for b in ALL if b.note.startswith("excerpt of ")]


@pytest.mark.parametrize("block", EXCERPTS, ids=[b.where for b in EXCERPTS])
def test_doc_excerpt_is_in_its_file(block: Block) -> None:
    source = (REPO / block.note[len("excerpt of ") :]).read_text()
    assert block.text.strip() in source, f"{block.where} is no longer in {block.note[11:]}"


SYNOPSES = [b for b in ALL if b.note == "synopsis"]


@pytest.mark.parametrize("block", SYNOPSES, ids=[b.where for b in SYNOPSES])
def test_doc_synopsis_names_real_commands(block: Block, accel_bin: pathlib.Path) -> None:
    env = {**os.environ, "ACCEL_PYTHON": sys.executable}
    for line in block.text.splitlines():
        command = line.split("#")[0].strip()
        command = re.sub(r"^(\w+=\S+\s+)+", "", command)  # VAR=value prefixes
        if command.startswith("accel "):
            base, words = [str(accel_bin)], command.split()[1:]
        elif command.startswith("python -m accel.ray "):
            base, words = [sys.executable, "-m", "accel.ray"], command.split()[3:]
        else:
            continue
        program = list(base)
        for w in words:
            if w.startswith(("-", "[", "<", "|")) or w.isupper():
                break
            trial = subprocess.run([*program, w, "--help"], capture_output=True, text=True, env=env, timeout=120)
            if trial.returncode != 0:
                break
            program.append(w)
        assert program != base, f"{block.where}: {command!r} names no command"
        help_text = subprocess.run([*program, "--help"], capture_output=True, text=True, env=env, timeout=120).stdout
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), f"{block.where}: {' '.join(program[len(base) - 1:])} has no {flag}"
