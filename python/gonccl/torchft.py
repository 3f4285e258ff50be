"""gonccl under torchft: ProcessGroupGonccl, a reconfigurable process group.

torchft (pytorch/torchft, an optional dependency imported only here) runs
fault-tolerant training by rebuilding its process group on every quorum change:
``configure(store_addr, replica_id, rank, world_size)`` is called with a fresh store
prefix each time, after ``abort()`` of the previous group when it failed.
ProcessGroupGonccl is torchft's ProcessGroupWrapper (like its ProcessGroupGloo and
ProcessGroupNCCL) over a gonccl backend, for CPU and CUDA tensors, in process:

- ``configure`` makes a gonccl communicator on the store prefix it is given (it
  replaces, after aborting it, the group of the previous configure);
- ``abort()`` fails every pending operation at once and releases the communicator
  (sockets, shared memory, goroutines): unlike Gloo, no subprocess is needed to be
  able to abort;
- ``errored()`` returns the first error an operation of the current group failed
  with (a lost rank, a timeout, an abort), None while it is healthy;
- ``set_timeout()`` sets the timeout of the groups made by later ``configure`` calls
  (a gonccl communicator's operation timeout is fixed when it is made);
- ``shutdown()`` closes the group (pending operations fail) and forgets it;
- every collective of the wrapper, reduce_scatter included (torchft's Gloo wrapper
  has none).

    from gonccl.torchft import ProcessGroupGonccl
    pg = ProcessGroupGonccl(timeout=timedelta(seconds=10))
    manager = torchft.Manager(pg=pg, ...)
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

try:
    from torchft.process_group import ProcessGroupWrapper
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("gonccl.torchft needs torchft (pip install torchft); gonccl itself does not") from err


__all__ = ["ProcessGroupGonccl"]


class ProcessGroupGonccl(ProcessGroupWrapper):
    """A torchft process group on gonccl, remade by every ``configure``."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._lock = threading.Lock()
        self._errored: Optional[Exception] = None
        self._generation = 0  # which configure the current group came from

    def getBackendName(self) -> str:
        return "torchft-gonccl"

    def _create_pg(self, store: dist.Store, rank: int, world_size: int) -> dist.ProcessGroup:
        from gonccl._library import check_library, load_extension

        _C = load_extension()

        with self._lock:
            self._errored = None
            self._generation += 1
        options = _C.GoncclOptions(timeout=self._timeout)
        backend = _C.GoncclBackend(store, rank, world_size, options, check_library())
        pg = dist.ProcessGroup(store, rank, world_size)
        custom = dist.ProcessGroup.BackendType.CUSTOM
        pg._set_default_backend(custom)
        for device in ("cpu", "cuda"):
            pg._register_backend(torch.device(device), custom, backend)
        return pg

    def _wrap_work(self, work: dist.Work, opts: object) -> dist.Work:
        """Records the first failure of the current group for errored()."""
        generation = self._generation

        def record(fut: torch.futures.Future) -> None:
            try:
                fut.value()
            except Exception as err:  # noqa: BLE001 - kept for errored()
                with self._lock:
                    if self._generation == generation and self._errored is None:
                        self._errored = err

        work.get_future().add_done_callback(record)
        return work

    def abort(self, errored: bool = True) -> None:
        with self._lock:
            if self._pg is not None and self._errored is None:
                self._errored = RuntimeError("gonccl: the torchft process group was aborted")
        super().abort(errored=errored)

    def errored(self) -> Optional[Exception]:
        with self._lock:
            return self._errored

    def shutdown(self) -> None:
        pg = self._pg
        if pg is not None:
            pg.shutdown()
        self._pg = None

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"ProcessGroupGonccl(pg={self._pg})"
