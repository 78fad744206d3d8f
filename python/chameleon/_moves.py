"""How chameleon.torch moves a storage's bytes to host memory and back: one
interface, two implementations, CudaMoves for CUDA storages and CpuMoves for
CPU ones (docs/pytorch.md).

    moved = moves.copy_out(storage)          # the copy to host memory starts
    moves.release(moved, storage)            # the storage's memory is freed
    ...                                      #   (once the copy has read it)
    moves.release(moved, storage, wait=False)  # or False: not read yet, ask again
    moves.keep(moved, storage)               #   or keep it (after all), unreleased
    inbound = moves.copy_in(moved, storage)  # memory again; the copy back starts
    moves.wait(inbound)                      # before the storage's next use
    moves.synchronize()                      # every copy queued is done

What the caller keeps to (both implementations rely on it; neither can
enforce all of it):
  - from copy_out to release (or keep), nothing writes the storage;
  - after release, nothing touches the storage's old memory;
  - after copy_in, nothing reads or writes the storage (not even copy_out or
    release of it) before wait(inbound);
  - moved may be dropped right after copy_in: the host copy lives until the
    copy back has read it.

CpuMoves exists so that this ordering runs with real concurrency where there
is no GPU: its copies run on the Copier's worker threads (_copier.c), and in
an extension built with CHAM_DEBUG_CHECKS (the tests') the memory it hands
back unfilled is poisoned (POISON: a NaN as every float dtype), so a missing
wait changes the bytes a test compares; without it (a release build, the
benchmarks') that pass over the bytes, which no GPU makes, is left out. It also
refuses the one misuse it can see: copy_out or release of a storage whose
copy_in was not waited for.

Storages are untyped storages: ``storage_of(tensor)``.
"""
import torch

from . import _chameleon
from ._table import storage_of  # noqa: F401 (tensor -> its untyped storage, for callers)

__all__ = ["CpuMoves", "InlineMoves", "CudaMoves", "POISON", "storage_of"]

# What released and unfilled memory holds under CpuMoves: bytes F5 7F
# repeated (the 16-bit word 0x7FF5, a quiet NaN as f16, bf16, f32 and f64).
POISON = _chameleon.POISON

def _check_device(storage, kind, what):
    if storage.device.type != kind:
        raise ValueError(f"{what}: a storage on {storage.device}; this implementation "
                         f"moves {kind} storages")


def _check_out(storage, what):
    if storage.nbytes() == 0:
        raise ValueError(f"{what}: the storage holds no bytes (empty, or released already): "
                         "nothing to move")


def _check_release(moved, storage, what):
    n = storage.nbytes()
    if n != moved.nbytes:
        raise ValueError(f"{what}: the storage holds {n} bytes, its host copy {moved.nbytes}: "
                         "not the storage that was copied out, or released already")


def _check_in(moved, storage, what):
    n = storage.nbytes()
    if n != 0:
        raise ValueError(f"{what}: the storage holds {n} bytes; the {moved.nbytes} bytes of the "
                         "host copy go back into a released storage (0 bytes), which is given "
                         "memory of that size")


class _CpuInbound:
    """A copy back in flight: its event, the address it writes, and the
    storage, kept alive until the wait (as CUDA's record_stream would)."""
    __slots__ = ("event", "ptr", "storage")

    def __init__(self, event, ptr, storage):
        self.event, self.ptr, self.storage = event, ptr, storage


class CpuMoves:
    """Moves of CPU storages on a Copier's worker threads, one each way.

    copy_out queues the copy into a host buffer the Copier owns (the moved
    value is its HostCopy). release resizes the storage to 0 once that copy
    has read it. copy_in resizes it back, poisons the new bytes
    (DEBUG_CHECKS) and queues the copy back, which starts after the copy
    out; wait blocks (without the GIL) until it is done. delay_us: every copy sleeps
    that long first, so a race in the caller shows.

    Runs no aten op: nothing here passes through a TorchDispatchMode."""

    def __init__(self, delay_us=0):
        self.copier = _chameleon.Copier(delay_us)
        self._unwaited = {}          # address -> _CpuInbound not yet waited for

    def _check_waited(self, ptr, what):
        if ptr in self._unwaited:
            raise RuntimeError(f"{what}: the storage's copy_in has not been waited for "
                               "(wait(inbound) comes before any use of the storage)")

    def copy_out(self, storage):
        """Starts copying storage's bytes to host memory; returns the
        HostCopy (``.nbytes``, ``.copied`` its Event)."""
        _check_device(storage, "cpu", "CpuMoves.copy_out")
        _check_out(storage, "CpuMoves.copy_out")
        ptr = storage.data_ptr()
        self._check_waited(ptr, "CpuMoves.copy_out")
        return self.copier.out(ptr, storage.nbytes())

    def release(self, moved, storage, wait=True):
        """Frees storage's memory once the copy out has read it; True when
        freed. wait=False: False at once while the copy has not read it
        (the compute thread goes on; the caller asks again later, as a
        GPU's allocator reuses a block once its stream's copy is done)."""
        _check_release(moved, storage, "CpuMoves.release")
        ptr = storage.data_ptr()
        self._check_waited(ptr, "CpuMoves.release")
        if not wait and not moved.copied.done():
            return False
        moved.copied.wait()
        # Not poisoned before: torch may refuse the resize (a storage numpy
        # or another process shares), and its bytes must then stay as they
        # are. The memory freed goes back to the allocator.
        storage.resize_(0)
        return True

    @staticmethod
    def keep(moved, storage):
        """The storage is not released after all (it is needed again before
        release freed it): returns once the copy out has read it, after
        which it may be written."""
        moved.copied.wait()

    def copy_in(self, moved, storage):
        """Gives the released storage memory again (poisoned, with
        DEBUG_CHECKS) and starts the copy back; returns what wait takes."""
        _check_device(storage, "cpu", "CpuMoves.copy_in")
        _check_in(moved, storage, "CpuMoves.copy_in")
        storage.resize_(moved.nbytes)
        ptr = storage.data_ptr()
        if _chameleon.DEBUG_CHECKS:
            self.copier.poison(ptr, moved.nbytes)
        inbound = _CpuInbound(self.copier.into(moved, ptr, moved.nbytes), ptr, storage)
        self._unwaited[ptr] = inbound
        return inbound

    def wait(self, inbound):
        """Returns once the copy back is done: the storage may be used."""
        inbound.event.wait()
        if self._unwaited.get(inbound.ptr) is inbound:
            del self._unwaited[inbound.ptr]

    def synchronize(self):
        """Returns once every copy queued is done."""
        self.copier.synchronize()
        self._unwaited.clear()


class InlineMoves:
    """Moves of CPU storages done at once on the calling thread: what the
    glue's own cost is, without a worker's handoff (about 0.1 ms a copy on
    a busy 2-core machine, more than copying a small storage). For
    measuring the glue; CpuMoves is the default, whose ordering is the
    GPU's."""

    @staticmethod
    def copy_out(storage):
        _check_device(storage, "cpu", "InlineMoves.copy_out")
        _check_out(storage, "InlineMoves.copy_out")
        return _chameleon.save(storage.data_ptr(), storage.nbytes())

    @staticmethod
    def release(moved, storage, wait=True):
        storage.resize_(0)
        return True

    @staticmethod
    def keep(moved, storage):
        pass

    @staticmethod
    def copy_in(moved, storage):
        _check_device(storage, "cpu", "InlineMoves.copy_in")
        if storage.nbytes():
            raise ValueError(f"InlineMoves.copy_in: the storage holds {storage.nbytes()} "
                             "bytes; only a released one (0 bytes) takes its bytes back")
        storage.resize_(len(moved))
        _chameleon.restore(moved, storage.data_ptr())

    @staticmethod
    def wait(inbound):
        pass

    @staticmethod
    def synchronize():
        pass


class _CudaMoved:
    """A CUDA storage's bytes on their way to (or in) pinned host memory."""
    __slots__ = ("host", "copied", "stream", "nbytes")

    def __init__(self, host, copied, stream):
        self.host, self.copied, self.stream = host, copied, stream
        self.nbytes = host.numel()


class CudaMoves:
    """Moves of CUDA storages, on a side stream each way per device.

    Out: the side stream waits for the compute stream's work so far (the
    op that wrote the storage) and copies into pinned host memory. Release:
    the block is marked used by that stream (record_stream) before the
    storage is resized to 0, so the caching allocator reuses it only after
    the copy read it. In: the storage gets a block again (on the compute
    stream), the side stream waits for that and for the copy out, copies
    back, and wait makes the compute stream wait for it (the host waits for
    nothing). The pinned buffer may be dropped after copy_in: a non-blocking
    copy from pinned memory records an event on its stream, and torch's host
    allocator reuses the buffer only after it.

    The torch calls here (empty, set_, copy_) are aten ops: under a
    TorchDispatchMode the caller lets them through.

    Written and reviewed against torch's API but never run: no GPU is
    available to this project (docs/pytorch.md, limits). CpuMoves runs the
    same sequence of calls on the CPU, in the tests."""

    def __init__(self):
        self._streams = {}

    def _pair(self, device):
        pair = self._streams.get(device)
        if pair is None:
            pair = self._streams[device] = (torch.cuda.Stream(device), torch.cuda.Stream(device))
        return pair

    @staticmethod
    def _as_bytes(storage):
        return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)

    def copy_out(self, storage):
        _check_device(storage, "cuda", "CudaMoves.copy_out")
        _check_out(storage, "CudaMoves.copy_out")
        out, _ = self._pair(storage.device)
        src = self._as_bytes(storage)
        host = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=True)
        out.wait_stream(torch.cuda.current_stream(storage.device))
        with torch.cuda.stream(out):
            host.copy_(src, non_blocking=True)
        return _CudaMoved(host, out.record_event(), out)

    def release(self, moved, storage, wait=True):
        _check_release(moved, storage, "CudaMoves.release")
        self._as_bytes(storage).record_stream(moved.stream)
        storage.resize_(0)
        return True

    @staticmethod
    def keep(moved, storage):
        torch.cuda.current_stream(storage.device).wait_event(moved.copied)

    def copy_in(self, moved, storage):
        _check_device(storage, "cuda", "CudaMoves.copy_in")
        _check_in(moved, storage, "CudaMoves.copy_in")
        _, into = self._pair(storage.device)
        storage.resize_(moved.nbytes)
        dst = self._as_bytes(storage)
        into.wait_stream(torch.cuda.current_stream(storage.device))
        into.wait_event(moved.copied)
        with torch.cuda.stream(into):
            dst.copy_(moved.host, non_blocking=True)
        dst.record_stream(into)
        return storage.device, into.record_event()

    def wait(self, inbound):
        device, event = inbound
        torch.cuda.current_stream(device).wait_event(event)

    def synchronize(self):
        for out, into in self._streams.values():
            out.synchronize()
            into.synchronize()
