"""The ACCEL Ray tensor transport: `@ray.method(tensor_transport="ACCEL")` for numpy arrays.

One idempotent call, made before the actor classes are defined, is all a user writes:

    import accel.ray
    accel.ray.register_transport()

It handles the traps of custom transports in Ray 2.60 (see ARCHITECTURE.md, "Ray tensor
transport"):

1. registration must precede the class definitions: documented, and idempotent so that every
   module defining actors can call it at its top;
2. receiving actors need ``enable_tensor_transport=True``: actors defined afterwards get it by
   default (an explicit ``False`` is kept), so a consumer never waits 60 s for a receive that
   has no thread to run on;
3. Ray's failure path imports ``ray.experimental.collective``, which imports torch: without
   torch a stub module with the one function that path needs is installed;
4. segments alive at ``ray.shutdown()`` would leak (workers are killed, no garbage collection):
   ``ray.shutdown`` and interpreter exit sweep the segments of exited owners;

The cluster secret needs no call: inside a Ray cluster every process takes it from Ray's KV
(``accel._raysecret``) unless its own variable or file says otherwise. ``ray.init`` is wrapped so
that a driver whose transport started before it makes its secret the cluster's. The secret never
goes into a ``runtime_env`` (Ray stores those and shows them in its dashboard); only a
non-default file location does.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, cast

import numpy as np

from .. import _buffers as _b
from .. import transport as _t

TRANSPORT_NAME = "ACCEL"
_lock = threading.Lock()
_done = False

from ._rdt import CommunicatorMetadata, TensorTransportManager, TensorTransportMetadata, abort, check_aborted


@dataclass
class AccelTransportMetadata(TensorTransportMetadata):  # type: ignore[misc,unused-ignore]
    """Ray's per-object metadata plus one accel reference per array."""

    refs: List[Any] = field(default_factory=list)


class AccelTensorTransport(TensorTransportManager):  # type: ignore[misc,unused-ignore]
    """One-sided: the source publishes each array, the receiver gets it (zero-copy on a host).
    Abortable: every read has its own deadline (a dead owner is `OwnerGone` at once, a stalled
    one times out), and a receive Ray aborts stops before its next array, so a failed transfer
    never makes Ray kill the two actors."""

    def tensor_transport_backend(self) -> str:
        return TRANSPORT_NAME

    @staticmethod
    def is_one_sided() -> bool:
        return True

    @staticmethod
    def can_abort_transport() -> bool:
        return True

    def actor_has_tensor_transport(self, actor: Any) -> bool:
        return True

    def extract_tensor_transport_metadata(self, obj_id: str, rdt_object: List[Any]) -> AccelTransportMetadata:
        refs = [_t.put(a) for a in rdt_object]
        meta = [(r.shape, np.lib.format.descr_to_dtype(r.dtype)) for r in refs]
        return AccelTransportMetadata(tensor_meta=meta, tensor_device="cpu", refs=refs)

    def get_communicator_metadata(self, src_actor: Any, dst_actor: Any, backend: Optional[str] = None) -> Any:
        return CommunicatorMetadata()

    def recv_multiple_tensors(
        self,
        obj_id: str,
        tensor_transport_metadata: TensorTransportMetadata,
        communicator_metadata: Any,
        target_buffers: List[Any] | None = None,
    ) -> List[Any]:
        out: List[Any] = []
        for i, ref in enumerate(cast(AccelTransportMetadata, tensor_transport_metadata).refs):
            check_aborted(obj_id, TRANSPORT_NAME)
            target = None if target_buffers is None else target_buffers[i]
            if target is not None and target.flags.c_contiguous and target.shape == tuple(ref.shape):
                out.append(_t.get(ref, out=target))
            elif target is not None:
                np.copyto(target, _t.get(ref))
                out.append(target)
            else:
                out.append(_t.get(ref))
        return out

    def send_multiple_tensors(
        self, tensors: List[Any], tensor_transport_metadata: TensorTransportMetadata, communicator_metadata: Any
    ) -> None:
        raise NotImplementedError("ACCEL is one-sided: receivers fetch")

    def garbage_collect(self, obj_id: str, tensor_transport_meta: TensorTransportMetadata, tensors: Any) -> None:
        for ref in cast(AccelTransportMetadata, tensor_transport_meta).refs:
            _t.free(ref)

    def abort_transport(self, obj_id: str, communicator_metadata: Any) -> None:
        abort(obj_id)


def _install_collective_stub() -> None:
    try:
        import ray.experimental.collective  # noqa: F401  (imports torch)
    except ImportError:
        stub = types.ModuleType("ray.experimental.collective")

        def destroy_collective_group(group_name: str) -> None:
            # Ray's abort path calls this for every transport; ACCEL has no collective group.
            raise ValueError(f"no collective group {group_name!r} (accel stub: torch is not installed)")

        stub.destroy_collective_group = destroy_collective_group  # type: ignore[attr-defined]
        stub.__accel_stub__ = True  # type: ignore[attr-defined]
        sys.modules["ray.experimental.collective"] = stub


def _enable_tensor_transport_by_default() -> None:
    import ray.actor

    original: Callable[..., Any] = ray.actor._process_option_dict
    if getattr(original, "__accel_patched__", False):
        return

    @functools.wraps(original)
    def process_option_dict(actor_options: dict[str, Any], has_tensor_transport_methods: bool) -> Any:
        if actor_options.get("enable_tensor_transport") is None:
            actor_options = {**actor_options, "enable_tensor_transport": True}
        return original(actor_options, has_tensor_transport_methods)

    process_option_dict.__accel_patched__ = True  # type: ignore[attr-defined]
    ray.actor._process_option_dict = process_option_dict


def _share_secret_with_workers() -> None:
    import ray

    original = ray.init
    if getattr(original, "__accel_patched__", False):
        return

    @functools.wraps(original)
    def init(*args: Any, **kwargs: Any) -> Any:
        # Only a custom location travels with the job: a path, never the secret.
        custom = os.environ.get(_t.SECRET_FILE_VAR)
        env = kwargs.get("runtime_env")
        if custom and (env is None or isinstance(env, dict)):
            env = dict(env or {})
            env_vars = dict(env.get("env_vars") or {})
            env_vars.setdefault(_t.SECRET_FILE_VAR, custom)
            env["env_vars"] = env_vars
            kwargs["runtime_env"] = env
        result = original(*args, **kwargs)
        # A driver whose transport started before ray.init makes its secret the cluster's.
        _b.share_with_ray()
        return result

    init.__accel_patched__ = True  # type: ignore[attr-defined]
    ray.init = init


def sweep_after_shutdown(timeout: float = 3.0) -> int:
    """Sweep the segments of exited owners, waiting up to `timeout` s for killed workers to go."""
    removed = 0
    deadline = time.monotonic() + timeout
    mine = f"accel-{os.getpid()}-"
    while True:
        removed += _t.sweep()
        try:
            left = [n for n in os.listdir(_t.shm_dir()) if n.startswith("accel-") and not n.startswith(mine)]
        except OSError:
            left = []
        if not left or time.monotonic() > deadline:
            return removed
        time.sleep(0.05)


def _hook_shutdown() -> None:
    import ray

    original = ray.shutdown
    if getattr(original, "__accel_patched__", False):
        return

    @functools.wraps(original)
    def shutdown(*args: Any, **kwargs: Any) -> Any:
        was_up = ray.is_initialized()
        result = original(*args, **kwargs)
        if was_up:
            sweep_after_shutdown()
        return result

    shutdown.__accel_patched__ = True  # type: ignore[attr-defined]
    ray.shutdown = shutdown

    def at_exit() -> None:
        # Runs before Ray's own exit hook (registered earlier), so shut Ray down here to sweep.
        if ray.is_initialized():
            shutdown()

    atexit.register(at_exit)


def register_transport() -> None:
    """Register accel as Ray tensor transport "ACCEL" (idempotent; call before defining actors)."""
    global _done
    with _lock:
        if _done:
            return
        from ray.experimental.rdt import util

        if TRANSPORT_NAME not in util.transport_manager_info:
            util.register_tensor_transport(TRANSPORT_NAME, ["cpu"], AccelTensorTransport, np.ndarray)
        from . import _device_transport  # torch tensors, host and CUDA ("ACCEL_TORCH"), if torch imports

        _device_transport.register(util)
        _install_collective_stub()
        _enable_tensor_transport_by_default()
        _share_secret_with_workers()
        _hook_shutdown()
        _done = True
