"""The NIXL backend: a small shim over the ``nixl-cu12`` wheel's Python API.

The owner registers a published buffer's shared-memory segment with its NIXL agent (once per
segment: pooled segments are recycled, so their registration is too) and puts a *ticket* on the
reference: its agent name, the partial agent metadata covering that segment (UCX connection
info and remote key, ~500 bytes), and the buffer's address. A consumer loads the metadata into
its own agent (merged per remote agent; cheap after the first) and does a one-sided READ into a
registered destination. DRAM moves over UCX's shared-memory, CMA or TCP transports here; the
same calls move VRAM over NVLink/CUDA IPC and RDMA where UCX finds them.

One-sided reads cannot ask the owner anything, so the caller confirms with the owner that the
buffer is still published *after* the read (``accel.transport``): a buffer id never comes back
once freed, so a buffer still published then was published during the whole read.

UCX does not authenticate or encrypt: NIXL is opt-in on the owner (``put(..., path="nixl")`` or
``ACCEL_TRANSPORT_NIXL=1``) and never chosen on its own beyond one host (README, "Security").
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

_MODULES = ("nixl_cu12", "nixl_cu13", "nixl")


class NixlUnavailable(RuntimeError):
    """NIXL is not installed, or its agent cannot start here."""


class NixlDisconnected(RuntimeError):
    """The remote agent went away (its process exited)."""


class NixlFailed(RuntimeError):
    """A NIXL call or transfer failed."""


@dataclass(frozen=True)
class Ticket:
    """What a consumer needs to read one buffer with NIXL."""

    agent: str
    metadata: bytes
    addr: int
    nbytes: int

    def encode(self) -> bytes:
        return pickle.dumps((self.agent, self.metadata, self.addr, self.nbytes), protocol=5)

    @staticmethod
    def decode(raw: bytes) -> Ticket:
        agent, metadata, addr, nbytes = pickle.loads(raw)
        return Ticket(str(agent), bytes(metadata), int(addr), int(nbytes))


_lock = threading.RLock()
_module: Any = None
_probed = False


def module() -> Any:
    """The NIXL Python module, or None when no NIXL wheel is installed."""
    global _module, _probed
    with _lock:
        if not _probed:
            _probed = True
            for name in _MODULES:
                try:
                    mod = importlib.import_module(name)
                except ImportError:
                    continue
                if hasattr(mod, "nixl_agent"):
                    _quiet()
                    _module = mod
                    break
        return _module


def _quiet() -> None:
    """NIXL's Python logger and UCX's log both write to stdout, which belongs to the program:
    send them to stderr, and keep NIXL's INFO chatter out unless NIXL_LOG_LEVEL asks for it."""
    log = logging.getLogger("nixl")
    for h in log.handlers:
        if isinstance(h, logging.StreamHandler) and h.stream is sys.stdout:
            h.setStream(sys.stderr)
    if not os.environ.get("NIXL_LOG_LEVEL"):
        log.setLevel(logging.WARNING)
    # Read by UCX when the first agent starts.
    os.environ.setdefault("UCX_LOG_FILE", "/dev/stderr")


def available() -> bool:
    """Whether a NIXL wheel is importable (agents may still fail to start: see Agent)."""
    return module() is not None


class Agent:
    """This process's NIXL agent (one per process, created on first use: ~0.5 s)."""

    def __init__(self, name: str) -> None:
        mod = module()
        if mod is None:
            raise NixlUnavailable("NIXL is not installed (pip install --no-deps nixl-cu12 numpy)")
        try:
            conf = mod.nixl_agent_config(enable_prog_thread=True, backends=["UCX"])
            self.agent: Any = mod.nixl_agent(name, conf)
        except Exception as e:  # the bindings raise their own error types
            raise NixlUnavailable(f"NIXL agent could not start: {e}") from e
        if "UCX" not in self.agent.backends:
            raise NixlUnavailable("NIXL has no UCX backend here")
        self.name = name
        self.lock = threading.Lock()
        self.registered: dict[tuple[int, int], tuple[Any, bytes]] = {}
        self.loaded: set[tuple[str, bytes]] = set()

    # ---------------------------------------------------------------- owner
    def ticket(self, seg_addr: int, seg_len: int, addr: int, nbytes: int) -> Ticket:
        """Registers the segment [seg_addr, seg_addr+seg_len) once and returns a ticket for the
        buffer at ``addr``."""
        key = (seg_addr, seg_len)
        with self.lock:
            entry = self.registered.get(key)
            if entry is None:
                try:
                    reg = self.agent.register_memory([(seg_addr, seg_len, 0, "")], "DRAM")
                    md = bytes(self.agent.get_partial_agent_metadata(reg, True, ["UCX"]))
                except Exception as e:
                    raise NixlFailed(f"NIXL registration of {seg_len} bytes failed: {e}") from e
                entry = (reg, md)
                self.registered[key] = entry
        return Ticket(self.name, entry[1], addr, nbytes)

    def deregister_all(self) -> None:
        with self.lock:
            for reg, _ in self.registered.values():
                try:
                    self.agent.deregister_memory(reg)
                except Exception:
                    pass
            self.registered.clear()

    # ---------------------------------------------------------------- consumer
    def read(self, t: Ticket, dst: np.ndarray, timeout_s: float) -> str:
        """One-sided READ of the ticket's buffer into ``dst`` (C-contiguous, t.nbytes bytes).
        Returns the backend NIXL used."""
        if dst.nbytes != t.nbytes:
            raise ValueError(f"destination holds {dst.nbytes} bytes, the buffer {t.nbytes}")
        if t.nbytes == 0:
            return "none"
        a = self.agent
        with self.lock:
            if (t.agent, t.metadata) not in self.loaded:
                try:
                    a.add_remote_agent(t.metadata)
                except Exception as e:
                    raise _classify(e, t.agent) from e
                self.loaded.add((t.agent, t.metadata))
        addr = int(dst.ctypes.data)
        reg = None
        handle = None
        try:
            reg = a.register_memory([(addr, t.nbytes, 0, "")], "DRAM")
            local = a.get_xfer_descs([(addr, t.nbytes, 0)], "DRAM")
            remote = a.get_xfer_descs([(t.addr, t.nbytes, 0)], "DRAM")
            handle = a.initialize_xfer("READ", local, remote, t.agent.encode())
            state = a.transfer(handle)
            deadline = time.monotonic() + timeout_s
            while state == "PROC":
                if time.monotonic() > deadline:
                    raise NixlFailed(f"NIXL read of {t.nbytes} bytes did not finish in {timeout_s:.1f} s")
                time.sleep(0)
                state = a.check_xfer_state(handle)
            if state != "DONE":
                raise NixlFailed(f"NIXL read from {t.agent} failed ({state})")
            return str(a.query_xfer_backend(handle))
        except Exception as e:
            raise _classify(e, t.agent) from e
        finally:
            if handle is not None:
                try:
                    a.release_xfer_handle(handle)
                except Exception:
                    pass
            if reg is not None:
                try:
                    a.deregister_memory(reg)
                except Exception:
                    pass

    def forget(self, agent: str) -> None:
        """Drops a remote agent (after it disconnected), so a restarted one loads afresh."""
        with self.lock:
            self.loaded = {k for k in self.loaded if k[0] != agent}
            try:
                self.agent.remove_remote_agent(agent)
            except Exception:
                pass


def _classify(e: BaseException, agent: str) -> Exception:
    if isinstance(e, (NixlFailed, NixlDisconnected, NixlUnavailable, ValueError)):
        return e
    kind = type(e).__name__
    if "Disconnect" in kind:
        return NixlDisconnected(f"NIXL agent {agent} disconnected")
    return NixlFailed(f"NIXL: {kind}: {e}")


_agent: Agent | None = None
_agent_pid = -1


def agent(name: str) -> Agent:
    """This process's agent, created with ``name`` on first use (again in a forked child)."""
    global _agent, _agent_pid
    with _lock:
        if _agent is None or _agent_pid != os.getpid():
            _agent = Agent(f"{name}-nixl")
            _agent_pid = os.getpid()
        return _agent


def current() -> Agent | None:
    """The agent if this process made one."""
    return _agent if _agent_pid == os.getpid() else None
