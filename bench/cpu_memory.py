"""A CPU stand-in for the notebook's `CudaMemory`: the GPU probe's measurements, run on the CPU.

The notebook's GPU probe reaches the device only through a small adapter (synchronize, allocated,
reset_peak, peak, release, is_oom, name). `CpuMemory` offers the same methods on the CPU, so the
tests and `bench/gpu_evidence.py --device cpu` run every other line of the probe's real path.

How it counts: while it is entered, a TorchDispatchMode sees every aten op. An output whose storage
is new (not the storage of any input) is an allocation of `storage.nbytes()` bytes; views and
in-place results add a reference to a storage already counted. A weakref finalizer on every
counted tensor drops the reference; a storage's bytes are freed when its last tensor dies. Memory
that a kernel allocates internally and frees before returning is not seen (no aten op returns it);
the probe's ops (matmul, masked_fill, softmax, cat, fill_) return every buffer they allocate.

`limit_bytes` makes the counter behave like a device that size: an allocation that would take the
total past it raises `CpuOutOfMemoryError` (a RuntimeError whose message says "out of memory", as
CUDA's does before torch 1.13).
"""

from __future__ import annotations

import platform
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class CpuOutOfMemoryError(RuntimeError):
    """Raised when an allocation would take the counted total past `limit_bytes`."""


class CpuMemory:
    """Counts the bytes of the tensors allocated on the CPU while it is entered (re-entrant)."""

    def __init__(self, limit_bytes: int | None = None):
        self.limit_bytes = limit_bytes
        self.name = f"cpu ({platform.machine()}, torch {torch.__version__}, allocation counter)"
        self._live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors referring to it]
        self._allocated = 0
        self._peak = 0
        self._depth = 0
        self._mode = _CountingMode(self)

    def __enter__(self) -> CpuMemory:
        if self._depth == 0:
            self._mode.__enter__()
        self._depth += 1
        return self

    def __exit__(self, *exc_info) -> bool:
        self._depth -= 1
        if self._depth == 0:
            self._mode.__exit__(*exc_info)
        return False

    def synchronize(self) -> None:
        """The CPU runs ops eagerly: nothing to wait for."""

    def allocated(self) -> int:
        return self._allocated

    def reset_peak(self) -> None:
        self._peak = self._allocated

    def peak(self) -> int:
        return self._peak

    def release(self) -> None:
        """No cache to empty: freed tensors are already given back."""

    def is_oom(self, error: BaseException) -> bool:
        return isinstance(error, CpuOutOfMemoryError)

    def _track(self, tensor: torch.Tensor, input_storages: set[int]) -> None:
        storage = tensor.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if key in self._live:
            self._live[key][1] += 1
        elif key in input_storages or size == 0:
            return  # a view of a tensor made before counting began, or an empty tensor
        else:
            if self.limit_bytes is not None and self._allocated + size > self.limit_bytes:
                raise CpuOutOfMemoryError(
                    f"CPU counter: out of memory: tried to allocate {size} bytes with "
                    f"{self._allocated} of {self.limit_bytes} in use"
                )
            self._live[key] = [size, 1]
            self._allocated += size
            self._peak = max(self._peak, self._allocated)
        weakref.finalize(tensor, self._drop, key)

    def _drop(self, key: int) -> None:
        entry = self._live[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._live[key]
            self._allocated -= entry[0]


class _CountingMode(TorchDispatchMode):
    def __init__(self, memory: CpuMemory):
        super().__init__()
        self.memory = memory

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = tree_flatten((args, kwargs))[0]
        storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
                self.memory._track(tensor, storages)
        return out
