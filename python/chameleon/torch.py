"""Chameleon under a PyTorch training loop (docs/pytorch.md).

    import chameleon.torch as ct
    off = ct.Offload(budget="50%")
    with off:
        for step in range(n):
            loss = model(x).sum(); loss.backward(); opt.step(); opt.zero_grad()
            off.step()
    off.stats

Inside the context a TorchDispatchMode sees every aten op. The runtime runs
in advisor mode (torch owns the memory): it profiles the ops and plans what
to move, and the glue carries its actions out on the ops' storages. A
swap-out copies a storage's bytes to host memory and releases the storage
(``resize_(0)``); a swap-in restores it. Every tensor and view of the
storage follows, saved activations included: autograd holds the same
storage. Before an op runs the glue also makes room for the bytes it is
about to make, sending away the storages used least recently (the passive
path), so the budget holds from the first op, plan or no plan. A released
storage is never read: every op's inputs, every view's base and every
tensor read outside aten (``numpy()``, pickling, ``deepcopy``) come back
first.
"""
import gc
from collections import OrderedDict
import json
import math
import os
import threading
import warnings
from time import perf_counter_ns as _clock

import torch
from torch.autograd.variable import Variable as _Variable
from torch.utils._python_dispatch import TorchDispatchMode

from . import _chameleon
from ._chameleon import ChameleonError
from ._estimate import OpBytes, on_meta
from ._moves import CpuMoves, CudaMoves, InlineMoves
from ._pricing import MEASURED, flops_of, host_copy_bandwidth, resolve
from ._recompute import DROPPED, Record, cudnn_may_differ, recomputable, written_arguments
from ._table import StorageTable, _Storage, storage_of

__all__ = ["Offload", "ChameleonError", "allreduce_hook"]

_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool", torch.complex64: "c64", torch.complex128: "c128",
}
for _name, _code in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code

# Integer storages this small are what C++ code reads on the host outside
# aten: a packed sequence's batch_sizes, the lengths ctc_loss and
# pack_padded_sequence take. A GPU run keeps them in host memory; the CPU
# device, which stands in for one in tests, pins them (docs/pytorch.md).
_INTEGERS = {torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8}
_HOST_READ_BYTES = 64 << 10

# Planners that cannot work under the glue, and why (docs/pytorch.md).
_REFUSED_PLANNERS = {
    "swapadvisor": "it plans one fixed op sequence ahead of time, and its plan moves model "
                   "state the optimizer must update on the device: a PyTorch loop's ops "
                   "change between steps (evaluation, skipped steps) and its optimizer runs "
                   "on the device",
    "hyperoffload": "it keeps model state on the host for an optimizer on the host, which a "
                    "PyTorch optimizer is not",
}

_STATIC_PLANNERS = ("vdnn", "capuchin")
# Ops whose output is their input's storage though their schema does not
# say so (matmul's reshape of an mm result): they make no storage. They
# stay ops to the runtime, whose sequence classes count them.
_UNANNOTATED_ALIASES = {"_unsafe_view"}
# Ops that read only their tensor arguments' metadata (shape, dtype,
# device), never their bytes: an input sent away stays away, and is not
# one of the bytes the op needs on the device (SparseAdam's and many an
# optimizer's state starts as zeros_like(param)).
_METADATA_ONLY = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
                            "randn_like", "randint_like", "new_empty", "new_empty_strided",
                            "new_zeros", "new_ones", "new_full"})
_STRIDED = torch.strided

# Tensor methods that read a storage's bytes without an aten op: inside the
# block they bring the storage back first (torch.save and pickle go through
# __reduce_ex__, copy.deepcopy through __deepcopy__, numpy and TensorBoard
# through numpy/__array__; data_ptr, which a released storage answers with
# 0: tied-weight detection compares them).
_READERS = ("numpy", "__array__", "tolist", "__reduce_ex__", "__deepcopy__", "storage",
            "data_ptr", "__dlpack__")
# Functions that make a tensor from data, which may hold tensors (a list of
# 0-dim losses: torch.tensor(history)) whose values torch reads in C++
# with the dispatch modes excluded: (module or class, name, where the data
# is among the positional arguments). Inside the block every tensor in the
# data comes back first.
_DATA_READERS = ((torch, "tensor", 0), (torch, "as_tensor", 0), (torch, "asarray", 0),
                 (torch.Tensor, "new_tensor", 1))
# Readers whose result keeps pointing at the storage's memory after they
# return (a DLPack capsule: numpy.from_dlpack): the storage is pinned for
# good, as torch itself does for numpy().
_SHARING_READERS = ("__dlpack__",)
# Readers that hand out the memory, which code outside aten may then write.
_EXPOSING_READERS = ("numpy", "__array__", "storage", "data_ptr", "__dlpack__")
# Readers that make a copy of the storage on its device outside aten (a
# storage's clone: the glue sees the copy only once it exists).
_COPYING_READERS = ("__deepcopy__",)

# The Offload whose block is running: one at a time per process.
_active = None


def _after_fork_in_child():
    # A DataLoader worker forked inside the block inherits the dispatch
    # mode: its ops are the worker's own and the runtime is the parent's.
    if _active is not None:
        _active._busy = True
        _active._lock = threading.RLock()    # a lock held at the fork stays held


os.register_at_fork(after_in_child=_after_fork_in_child)


def _parse_budget(budget):
    """Bytes, a percentage string of the steady peak, or None."""
    if budget is None:
        return None, None
    if isinstance(budget, str):
        text = budget.strip()
        if not text.endswith("%"):
            raise ValueError(f"budget {budget!r}: expected bytes (an int) or a percentage "
                             "such as \"60%\"")
        try:
            pct = float(text[:-1])
        except ValueError:
            raise ValueError(f"budget {budget!r}: not a number before '%'") from None
        if not 0 < pct <= 100:
            raise ValueError(f"budget {budget!r}: a percentage must be in (0, 100]")
        return None, pct
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"budget {budget!r}: expected a positive number of bytes or a "
                         "percentage string")
    return budget, None


def _tensors(args, out):
    """The tensors among args, one level into lists and tuples."""
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    out.append(b)
    return out


def _outputs(result):
    """The tensors an op returned (one, or a list or tuple of them)."""
    return _tensors(result if isinstance(result, (list, tuple)) else (result,), [])


# A sparse tensor's bytes are dense tensors of its own (indices, values),
# which its ops read and write in C++: the glue plans those.
_SPARSE_PARTS = {torch.sparse_coo: lambda t: (t._indices(), t._values())}
for _layout, _parts in (("sparse_csr", ("crow_indices", "col_indices", "values")),
                        ("sparse_bsr", ("crow_indices", "col_indices", "values")),
                        ("sparse_csc", ("ccol_indices", "row_indices", "values")),
                        ("sparse_bsc", ("ccol_indices", "row_indices", "values"))):
    if hasattr(torch, _layout):
        _SPARSE_PARTS[getattr(torch, _layout)] = \
            lambda t, names=_parts: tuple(getattr(t, n)() for n in names)


class _Op:
    """What the glue knows of one aten overload."""
    __slots__ = ("name", "token", "is_view", "makes", "writes_hidden", "flops", "bookkeeping",
                 "writes", "recomputable", "storages", "outs", "grows", "reads_data")

    def __init__(self, ctx, func):
        self.name = str(func)
        # The profiler's ops carry torch's own records, not data: they run
        # as they are (one of their tensors is a C++ object in disguise).
        self.bookkeeping = self.name.startswith("profiler.")
        self.token = ctx.token(self.name)
        returns = func._schema.returns
        # A view op only makes new metadata over its input's storage: it
        # neither reads nor writes data and is not reported as an op.
        self.is_view = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns)
        # An op whose every return aliases an input (in place, out=) makes
        # no storage.
        self.makes = any(r.alias_info is None for r in returns) and \
            func.overloadpacket.__name__ not in _UNANNOTATED_ALIASES
        # An op writing an argument it does not return may resize it
        # (fake-quant observers grow their buffers from 1 element).
        self.writes_hidden = any(
            a.alias_info is not None and a.alias_info.is_write
            for a in func._schema.arguments) and not all(
            r.alias_info is not None for r in returns)
        self.flops = flops_of(func)      # under a preset (_pricing)
        # The arguments it writes (place, name): a dropped storage made
        # from one is made again before the op runs.
        self.writes = written_arguments(func)
        # Not an out= overload: the argument it writes is data.
        self.reads_data = func.overloadpacket.__name__ not in _METADATA_ONLY or bool(self.writes)
        # One reading no data holds no inputs to make its output again from.
        self.recomputable = recomputable(func) and self.reads_data
        # The arguments that are a storage, not a tensor (set_ onto one:
        # a storage's copy runs empty().set_(source).copy_ outside Python).
        self.storages = [(i, a.name) for i, a in enumerate(func._schema.arguments)
                         if str(a.type) == "Storage"]
        # Its out= arguments (keyword-only, written), which it resizes when
        # they are too small for the result.
        self.outs = tuple(a.name for a in func._schema.arguments
                          if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
        # resize_ and resize_as_ grow their tensor's storage by what their
        # arguments say, an out= op by what a meta run of it says: the bytes
        # are known before the op.
        self.grows = self.name in _GROWING or bool(self.outs)


# In-place ops that grow their first argument's storage to the size their
# second one gives (a shape, or a tensor's): see _growth.
_GROWING = ("aten.resize_.default", "aten.resize_as_.default")


def _growth(op, func, args, kwargs):
    """The bytes op (a resize_, resize_as_ or out= op) adds to the storages
    it writes, which are on the device by then."""
    if op.outs:
        return _out_growth(op, func, args, kwargs)
    t = args[0]
    shape = args[1] if len(args) > 1 else kwargs.get("size", kwargs.get("the_template"))
    numel = shape.numel() if isinstance(shape, torch.Tensor) else math.prod(shape)
    need = (t.storage_offset() + numel) * t.element_size()
    return max(0, need - storage_of(t).nbytes())


def _out_growth(op, func, args, kwargs):
    """What op's out= tensors grow by: the op run on meta tensors resizes
    their meta copies as it would resize them. 0 when no meta run can say
    (the glue then counts the growth after the op)."""
    outs = [t for name in op.outs for t in _flat_tensors(kwargs.get(name))]
    if not outs:
        return 0
    try:
        margs, mkwargs = on_meta(args, kwargs)
        func(*margs, **mkwargs)
    except Exception:                # no meta kernel, a data-dependent size, ...
        return 0
    metas = [t for name in op.outs for t in _flat_tensors(mkwargs.get(name))]
    grow = 0
    for t, m in zip(outs, metas):
        need = (t.storage_offset() + m.numel()) * m.element_size()
        grow += max(0, need - storage_of(t).nbytes())
    return grow


def _flat_tensors(a):
    if isinstance(a, torch.Tensor):
        return [a]
    return [t for t in a if isinstance(t, torch.Tensor)] if isinstance(a, (list, tuple)) else []


def _written(op, args, kwargs):
    """The tensors op writes among args and kwargs."""
    out = []
    for i, name in op.writes:
        a = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(b for b in a if isinstance(b, torch.Tensor))
    return out


class _Mode(TorchDispatchMode):
    def __init__(self, off):
        super().__init__()
        self.off = off

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        off = self.off
        if off._mode is None:        # a thread still running after the block ended
            return func(*args, **(kwargs or {}))
        # One thread in the glue at a time: a thread started in the block
        # runs its ops under this mode too (Offload._patch).
        with off._lock:
            return off._dispatch(func, args, kwargs or {})


class _Engine:
    """The autograd engine's Python handle while a block runs: every
    backward (Tensor.backward, torch.autograd.backward and grad, a name
    imported before the block, checkpointing's) calls its run_backward at
    the time of the call, so its ops are the backward phase."""

    def __init__(self, engine, off):
        self._engine, self._off = engine, off

    def run_backward(self, *args, **kwargs):
        off = self._off
        off._in_backward += 1
        try:
            return self._engine.run_backward(*args, **kwargs)
        finally:
            off._in_backward -= 1
            off._after_backward = True

    def __getattr__(self, name):          # queue_callback, is_checkpoint_valid, ...
        return getattr(self._engine, name)


class Offload:
    """Runs the ops of the ``with`` block under Chameleon's runtime.

    budget: device bytes every step may hold (from the first op on), or
        "P%" of the steady peak, estimated from the first step, which runs
        unconstrained and measured (the budget holds from the second step
        on), or None (the device's).
    device: the device preset whose link and compute speeds the planner
        assumes (``chameleon devices`` lists them).
    log: a callable taking each log line, or None (stderr).
    cpu_copies: how storages on the CPU device are copied: "worker" (on the
        Copier's threads, with the ordering a GPU's streams need) or
        "inline" (at once, on the calling thread: the glue's own cost).
    strict: an op that cannot run within the budget (its own inputs and
        outputs, plus what torch will not let go, exceed it) raises
        ChameleonError naming the op and the bytes; False: it runs over the
        budget, counted in ``stats["over_budget_steps"]`` and logged once
        per op.
    Any other keyword is a runtime config key (docs/config.md).
    """

    def __init__(self, budget=None, device=None, log=None, strict=True,
                 cpu_copies="worker", **config):
        self._budget, self._budget_pct = _parse_budget(budget)
        if "memory_budget" in config or "mode" in config or "preset" in config:
            raise ValueError("Offload: give the budget as budget=, the preset as device=; "
                             "the mode is always advisor")
        planner = self._planner = config.get("planner", "chameleon")
        if planner in _REFUSED_PLANNERS:
            raise ValueError(f"Offload: planner {planner!r} cannot run under the PyTorch glue: "
                             f"{_REFUSED_PLANNERS[planner]} (use \"chameleon\", the default)")
        # The glue carries out an op's actions after running it (only then
        # are its outputs known): what the next op needs is advised now.
        preset, self._measured = resolve(device)
        if self._measured:
            # Copies at this machine's speed, unless the config says otherwise.
            bandwidth = host_copy_bandwidth()
            config = dict({"h2d_bandwidth": bandwidth, "d2h_bandwidth": bandwidth}, **config)
        config = dict({"advise_ahead": 1}, **config, preset=preset, mode="advisor")
        if self._budget is not None:
            config["memory_budget"] = self._budget
        try:
            text = json.dumps(config)
        except TypeError as e:
            raise ValueError(f"Offload: a config value is not JSON: {e}") from None
        self._log = log
        self._ctx = _chameleon.Context(text, "Offload", log)
        dev = self._ctx.device()
        self._device = MEASURED if self._measured else preset
        # What the device's kernels reach of its peaks (devices.md, "What
        # kernels achieve"): the ops' costs the planner reads.
        self._flops = (dev["peak_flops"] or 1e12) * (dev["flops_efficiency"] or 1)
        self._bandwidth = (dev["hbm_bandwidth"] or 1e11) * (dev["hbm_efficiency"] or 1)
        self._p2p = dev["p2p_bandwidth"]
        self._strict = bool(strict)
        self._table = StorageTable(self._ctx)
        if self._budget is not None:
            self._table.set_small(self._ctx.min_swap())
        self._op_bytes = OpBytes()
        # On the CPU device (the tests') host memory stands for device
        # memory; its copies run on worker threads as a GPU's would, or
        # inline to measure the glue alone.
        if cpu_copies not in ("worker", "inline"):
            raise ValueError(f"Offload: cpu_copies {cpu_copies!r}: \"worker\" or \"inline\"")
        self._cpu = CpuMoves() if cpu_copies == "worker" else InlineMoves()
        self._cuda = None            # CudaMoves, made at the first CUDA storage
        self._cuda_run = False       # a CUDA tensor was seen: CPU storages are the host's
        self._ops = {}
        self._mode = None
        self._patched = None
        self._phase = None
        self._in_backward = 0
        self._after_backward = False
        self._busy = False           # the glue's own torch calls pass through
        self._lock = threading.RLock()   # the glue's state, for threads in the block
        self._opno = 0               # ops dispatched since the Offload was made
        self._steps = 0
        self._step_peak = 0          # the most bytes on the device in this step
        self._peaks = []             # each step's peak
        self._largest_op = (0, "")   # step 0: the most bytes one op touched
        self._steady = None          # percentage budgets: the steady peak estimated
        self._held = []              # the measured step: (op, bytes held after it)
        self._settling = False       # percentage: later steps may still raise it
        self._step_live = 0          # the most bytes this step held, sent away or not
        self._counts = dict(hazards=0, pinned=0, unplanned=0, over_ops=0)
        self._over_steps = 0
        self._over_now = False       # this step went past the budget (strict=False)
        self._over_logged = set()
        self._warned_no_step = False
        # What this block saw since it was entered (or since step()): a
        # backward, and a forward after an optimizer's ops (a new iteration).
        self._block_backward = False
        self._block_next_iteration = False
        self._read_pins = set()      # storages read outside aten since the last op
        self._reading = 0            # readers running (one may call another)
        self._next_sweep = 0         # the op at which the table is next swept
        self._recent = ()            # entries the last ops used (a budget only)
        self._deferred = []          # prefetches that did not fit after the last op
        # Entries sent away whose memory is freed once their copy out has
        # read it (key -> (entry, moved, storage), in the order sent): the
        # compute thread does not wait for the copy, as on a GPU.
        self._releasing = OrderedDict()
        self._adopted = False        # the model state alive at entry is counted
        # A budget in bytes, or a percentage (in bytes after its measured
        # step): op sizes are learned and frees looked for at each op.
        self._budgeted = self._budget is not None or self._budget_pct is not None
        # Under a budget, ops that can run again are declared to the
        # runtime, whose plans may then drop what they made (_recompute).
        self._recompute_on = bool(config.get("recompute", True)) and self._budgeted

    # ---- the context ---------------------------------------------------------

    def __enter__(self):
        global _active
        if self._mode is not None:
            raise RuntimeError("Offload: already entered")
        if _active is not None:
            raise RuntimeError("Offload: another Offload is active; nesting them is not "
                               "supported (one Offload manages the device at a time: leave "
                               "the outer block first)")
        self._mode = _Mode(self)
        self._mode.__enter__()
        _active = self
        self._block_backward = self._block_next_iteration = False
        self._patch()
        try:
            if not self._adopted:
                self._adopted = True
                self._adopt_model_state()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _adopt_model_state(self):
        """Counts, from the first op, the storages of every module's
        parameters, buffers and gradients and every optimizer's state alive
        when the block is first entered: on a device they take its memory
        before any op uses them. Made room for like an op's (a byte
        budget). Once per Offload: the look at every Python object costs
        about 0.1 s, and what a later entry would find was used since."""
        # Modules dropped but not yet collected (a reference cycle, as
        # parametrizations make) are no model state.
        gc.collect()
        found = []
        for o in gc.get_objects():
            # getattr: a module or optimizer half made (its __init__ still
            # running in another frame) has no dicts yet.
            if isinstance(o, torch.nn.Module):
                params = getattr(o, "_parameters", None) or {}
                found.extend(t for t in params.values() if t is not None)
                found.extend(t.grad for t in params.values()
                             if t is not None and t.grad is not None)
                found.extend(t for t in (getattr(o, "_buffers", None) or {}).values()
                             if t is not None)
            elif isinstance(o, torch.optim.Optimizer):
                for state in (getattr(o, "state", None) or {}).values():
                    if isinstance(state, dict):
                        found.extend(v for v in state.values() if isinstance(v, torch.Tensor))
        for t in found:
            r = self._lookup(t, "model state")
            if r is not None and self._budget is not None:
                self._make_room(0, {r[0].key}, "the model state alive at entry")

    def __exit__(self, exc_type, exc, tb):
        global _active
        self._unpatch()
        _active = None
        with self._lock:
            try:
                self._mode.__exit__(exc_type, exc, tb)
            finally:
                self._mode = None
                first = self._restore_all()
        # No step() yet: a forgotten one, unless the block held one
        # iteration's forward and backward and step() comes after it (a
        # block per micro-batch, step() outside once they are accumulated).
        one_iteration = self._block_backward and not self._block_next_iteration
        if (exc_type is None and self._steps == 0 and self._opno and not one_iteration and
                not self._warned_no_step):
            self._warned_no_step = True
            warnings.warn("Offload: the block ran ops but never called off.step(): the "
                          "runtime saw one endless step, so it planned nothing and the "
                          "budget was not measured; call off.step() at the end of each "
                          "training iteration", RuntimeWarning, stacklevel=2)
        if first is not None and exc_type is None:
            raise first
        return False

    def _restore_all(self):
        """Brings every storage still away back (tensors outside the
        context hold their data); the first error, after trying them all."""
        first = None
        table = self._table
        for e in list(table.entries.values()):
            try:
                if e.moved is not None:
                    storage = e.storage()
                    if storage is None:
                        table.forget(e)
                        continue
                    self._bring_back(e, storage, late=False)
                if e.inbound is not None:
                    self._wait(e)
            except Exception as err:          # keep going: restore what can be
                if first is None:
                    first = err
        for moves in (self._cpu, self._cuda):
            if moves is not None:
                moves.synchronize()
        # Every entry sent away came back above (kept, if its release was
        # still pending); one forgotten meanwhile keeps its bytes.
        self._releasing.clear()
        table.sweep()
        return first

    def _patch(self):
        # Ops run by the autograd engine are the backward phase.
        engine = _Variable._execution_engine
        readers = {name: torch.Tensor.__dict__.get(name) for name in _READERS}
        makers = [(owner, name, getattr(owner, name)) for owner, name, _ in _DATA_READERS]
        save, start = torch.save, threading.Thread.start
        self._patched = (engine, readers, makers, save, start)
        _Variable._execution_engine = _Engine(engine, self)

        def save_whole(*args, **kwargs):
            # torch.save reads every storage's bytes at its end: no other
            # thread's op may send one away before. The readers it calls
            # hand nothing out.
            with self._lock:
                self._reading += 1
                try:
                    return save(*args, **kwargs)
                finally:
                    self._reading -= 1
        torch.save = save_whole

        def start_under_mode(thread):
            # A thread started in the block runs its ops through the glue
            # (a dispatch mode is the thread's own): they read storages the
            # glue may have released.
            run = thread.run

            def run_under_mode():
                if _active is not self:
                    return run()
                with _Mode(self):
                    return run()
            thread.run = run_under_mode
            return start(thread)
        threading.Thread.start = start_under_mode
        for name in _READERS:
            setattr(torch.Tensor, name, _reader(getattr(torch.Tensor, name),
                                                name in _SHARING_READERS,
                                                name in _EXPOSING_READERS,
                                                name in _COPYING_READERS))
        for owner, name, at in _DATA_READERS:
            setattr(owner, name, _data_reader(getattr(owner, name), at))

    def _unpatch(self):
        engine, readers, makers, save, start = self._patched
        _Variable._execution_engine = engine
        torch.save, threading.Thread.start = save, start
        for owner, name, original in makers:
            setattr(owner, name, original)
        for name, original in readers.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)

    # ---- steps and counters ------------------------------------------------

    def step(self):
        """One training iteration ended."""
        with self._lock:
            return self._step()

    def _step(self):
        self._table.sweep()
        measured = self._steps == 0 and self._budget_pct is not None
        if measured:
            self._set_percentage_budget()
        # A static planner plans once, at the first step's end: it must know
        # the budget by then. The others hear of it after the measured step,
        # which ran (as it should) past it.
        if measured and self._planner in _STATIC_PLANNERS:
            self._ctx.set_budget(self._budget)
        info = self._ctx.step_end()
        if measured and self._planner not in _STATIC_PLANNERS:
            self._ctx.set_budget(self._budget)
        if self._settling:
            self._settle_percentage_budget()
        if measured:
            self._table.set_small(self._ctx.min_swap())
        self._steps += 1
        peak = self._step_peak
        self._peaks.append(peak)
        info["runtime_peak_bytes"] = info["peak_bytes"]
        info["peak_bytes"] = peak
        budget = self._budget if self._steps > 1 or self._budget_pct is None else None
        info["over_budget_bytes"] = max(0, peak - budget) if budget is not None else 0
        if info["over_budget_bytes"] and not self._over_now and "passed" not in self._over_logged:
            # Passed where passing is allowed: an op whose size was a guess,
            # a read outside aten (docs/pytorch.md, "The budget").
            self._over_logged.add("passed")
            (self._log or _stderr)(f"Offload: step {self._steps - 1} held {peak} bytes, "
                                   f"{peak - budget} past the budget (an op larger than its "
                                   "size was guessed, or a read outside aten); counted in "
                                   "over_budget_steps")
        self._over_steps += self._over_now or info["over_budget_bytes"] > 0
        self._over_now = False
        self._after_backward = False
        self._phase = None
        self._block_backward = self._block_next_iteration = False
        self._step_peak = self._table.resident
        return info

    def _set_percentage_budget(self):
        """The first step ran unconstrained: a share of the steady peak it
        shows (_held_at_peak) is the budget from the second step on."""
        self._steady = self._held_at_peak()
        self._held = []
        self._budget = int(self._steady * self._budget_pct / 100)
        self._settling = True
        need, op = self._largest_op
        if self._budget < need:
            raise ChameleonError(f"Offload: budget of {self._budget} bytes ({self._budget_pct:g}% "
                                 f"of the {self._steady} bytes steady peak) is below the {need} "
                                 f"bytes op {op} reads and writes at once (the first step's "
                                 "largest op)")
        # What the measured step left on the device must fit before the
        # next step's first op.
        self._make_room(0, set(), "what the measured first step left")

    def _settle_percentage_budget(self):
        """A later step ran within the share, and the most bytes it held at
        once, sent away or not, is what an unconstrained step holds: where
        that is more than the first step showed (tensors it did not make),
        the budget is the share of it from the next step on. It never
        shrinks: the steps before were held to the smaller share. Until a
        policy is planned (a static planner's, at the first step's end),
        which is for the budget it was given."""
        if self._planner in _STATIC_PLANNERS or self._ctx.stats()["policies_generated"]:
            self._settling = False
        elif self._step_live > self._steady:
            self._steady = self._step_live
            self._budget = int(self._steady * self._budget_pct / 100)
            self._ctx.set_budget(self._budget)
            self._table.set_small(self._ctx.min_swap())
        self._step_live = 0

    def _held_at_peak(self):
        """What a later step holds at its peak, from the first: at each op
        k, what the first held after it (self._held), plus what it made
        from op k on and still holds at its end (the optimizer state the
        first opt.step() makes, gradients, a result kept until the next
        step makes its own), which the next step still holds at op k. What
        it made before op k and holds at its end (the batch, say) is
        replaced before op k. The most over the ops need not be at the
        first step's own peak: that one may be in the optimizer step,
        after the activations were freed."""
        held = sorted((e.born, e.nbytes) for e in self._table.entries.values())
        later, steady, i = sum(n for _, n in held), 0, 0
        for op, nbytes in self._held:              # op numbers rise, as do births
            while i < len(held) and held[i][0] < op:
                later -= held[i][1]
                i += 1
            steady = max(steady, nbytes + later)
        return steady

    @property
    def stats(self):
        s = self._ctx.stats()
        c = self._counts
        planned = self._peaks[1:] if self._budget_pct is not None else self._peaks
        return {
            # What the glue counted on the device: every storage an op used
            # until torch freed it (an upper bound between the glue's looks).
            "peak_device_bytes": max(planned, default=0),
            "warmup_peak_bytes": self._peaks[0] if self._budget_pct is not None and
            self._peaks else 0,
            "steady_peak_estimate": self._steady,
            # None while a percentage waits for its measured first step.
            "budget_bytes": (self._budget if self._budget is not None else
                             None if self._budget_pct is not None else s["budget_bytes"]),
            "hazards": c["hazards"],
            "planned_swaps": s["planned_swaps_out"],
            "passive_swaps": s["passive_swaps_out"],
            "on_demand_swapins": s["on_demand_swaps_in"],
            "drops": s["drops"],
            "recomputes": s["recomputes"],
            "on_demand_recomputes": s["on_demand_recomputes"],
            "over_budget_steps": self._over_steps,
            "over_budget_ops": c["over_ops"],
            "pinned_storages": c["pinned"],
            "unplanned_tensors": c["unplanned"],
            "stage": s["stage"],
            "policies_generated": s["policies_generated"],
            "steps": self._steps,
            # How ops and copies were priced: "cpu" (measured) or a preset.
            "device": self._device,
        }

    @property
    def context(self):
        """The runtime context (chameleon.Context)."""
        return self._ctx

    # ---- storages ----------------------------------------------------------

    def _lookup(self, t, label):
        """(entry, handle) of tensor t; None for a tensor the glue does not
        plan: no elements, on the host of a GPU run, or not a dense tensor
        of a known dtype on the CPU or a CUDA device (sparse, quantized,
        meta: they pass through and are counted)."""
        code = _DTYPES.get(t.dtype)
        if code is None or t.layout != _STRIDED or not (t.is_cpu or t.is_cuda) or t.is_nested:
            self._counts["unplanned"] += 1
            return None
        if t.is_cuda != self._cuda_run:
            if t.is_cpu:
                return None           # host memory of a GPU run: not the device's
            self._start_cuda_run()
        if t.numel() == 0:
            return None
        try:
            storage = storage_of(t)
        except (NotImplementedError, RuntimeError):
            # A wrapper subclass (_make_wrapper_subclass) has no storage of
            # its own: the tensors it wraps are what its ops use.
            self._counts["unplanned"] += 1
            return None
        table = self._table
        e = table.entries.get(storage._cdata)
        if e is None:
            if storage.nbytes() == 0:
                return None
            e = self._add(storage, t.dtype, code, label)
        elif e.moved is None and storage.nbytes() != e.nbytes:
            # resize_ or set_ changed it: a new storage to the runtime.
            table.forget(e)
            e = self._add(storage, t.dtype, code, label)
        elif e.pinned == "host-read" and t.dtype not in _INTEGERS:
            # Seen first as bytes (a storage's clone copies through a uint8
            # view: deepcopy, load_state_dict), used as numbers: not metadata.
            table.unpin(e)
            self._counts["pinned"] -= 1
        if not t.storage_offset() and t.numel() * t.element_size() == e.nbytes and \
                t.is_contiguous():
            return e, e.base           # the whole storage: its base handle serves
        return e, table.view(e, t, code, label)

    def _add(self, storage, dtype, code, label):
        e = self._table.add(storage, code, label, self._opno)
        # First seen as an op's input: made outside aten (torch.from_numpy,
        # before the block), so numpy may hold and write its memory, until
        # torch lets the glue release it (a storage numpy shares cannot
        # be). Never the input of a drop until then.
        e.exposed = label == "input"
        if dtype in _INTEGERS and e.nbytes <= _HOST_READ_BYTES and not self._cuda_run:
            # On a GPU these stay on the host (C++ reads them there); the
            # CPU device, standing in for one, keeps them in place.
            self._table.pin(e, "host-read")
            self._counts["pinned"] += 1
        return e

    def _start_cuda_run(self):
        """The first CUDA tensor: the device is the GPU, and CPU storages
        are host memory, no longer the budget's. Those the glue counted
        come back and are forgotten."""
        if self._measured:
            raise ValueError("Offload(device=\"cpu\") prices each op by the wall time it took, "
                             "which for a CUDA op is its launch alone: give the GPU's preset "
                             "(chameleon devices) or device=None")
        first = self._restore_all()
        if first is not None:
            raise first
        self._table.clear()
        self._cuda_run = True

    def _moves(self, storage):
        if storage.device.type == "cuda":
            if self._cuda is None:
                self._cuda = CudaMoves()
            return self._cuda
        return self._cpu

    def _send_away(self, e):
        """Copies e's storage to the host and releases it; False when it
        cannot go (torch freed it, or will not resize it)."""
        table = self._table
        storage = e.storage()
        if storage is None:
            table.forget(e)
            return False
        if e.inbound is not None:
            self._wait(e)             # its copy back must land before it leaves again
        moves = self._moves(storage)
        self._busy = True
        try:
            moved = moves.copy_out(storage)
            try:
                # One made outside aten is released at once the first
                # time: numpy may share it (then torch refuses).
                released = moves.release(moved, storage, wait=e.exposed)
            except RuntimeError as err:
                if "resizable" not in str(err):
                    raise
                # numpy arrays, shared memory (DataLoader workers), from_numpy,
                # torch.load: torch will not release it; it stays on the device.
                table.pin(e, "unreleasable")
                self._counts["pinned"] += 1
                return False
        finally:
            self._busy = False
        e.moved = moved
        e.exposed = False                # torch released it: no numpy array shares it
        if not released:
            self._releasing[e.key] = (e, moved, storage)
        table.away(e, releasing=not released)
        self._ctx.swapped_out(e.base)    # unadvised: the runtime counts it passive
        return True

    def _reap(self, need=0):
        """Frees the memory of storages sent away whose copy out has read
        them, in the order sent; need > 0: waits for the copies until need
        more bytes are free (or none is left to wait for)."""
        releasing, table = self._releasing, self._table
        while releasing:
            key, (e, moved, storage) = next(iter(releasing.items()))
            self._busy = True
            try:
                if not self._moves(storage).release(moved, storage, wait=need > 0):
                    return
            except RuntimeError as err:
                if "resizable" not in str(err):
                    raise
                del releasing[key]
                self._unreleasable(e, storage)
                continue
            finally:
                self._busy = False
            del releasing[key]
            table.released(e.nbytes)
            need -= e.nbytes

    def _unreleasable(self, e, storage):
        """torch refused to release e's storage after its copy out (shared
        memory since): it stays on the device, its bytes intact."""
        table = self._table
        if table.entries.get(e.key) is not e:
            table.released(e.nbytes)      # forgotten meanwhile: no longer counted
            return
        e.moved = None
        table.pin(e, "unreleasable")
        self._counts["pinned"] += 1
        self._ctx.swapped_in(e.base, storage.data_ptr())

    def _drop(self, e):
        """Frees e's storage without a copy, its op to be run again before
        its next use; False when it cannot be (no record of its op, or one
        that no longer describes it): it is sent to the host instead."""
        rec = e.record
        if rec is None or not rec.can_hold(self._table.entries):
            return False
        # It is made again inside the op that needs it, whose own storages
        # are on the device then: its inputs, itself and the op's fresh
        # outputs must fit beside the largest op seen.
        if self._budget is not None and \
                _rerun_bytes(e, all_inputs=True) + self._largest_op[0] > self._budget:
            return False
        storage = e.storage()
        if storage is None or e.inbound is not None or not rec.hold():
            return False
        self._busy = True
        try:
            storage.resize_(0)
        except RuntimeError as err:
            if "resizable" not in str(err):
                raise
            rec.release()
            return False
        finally:
            self._busy = False
        self._table.drop(e)
        self._ctx.dropped(e.base)
        return True

    def _recompute(self, e, storage, late, protect, reading, what):
        """Makes dropped e again: its op runs on its inputs (each brought
        back or made again first) and the output's bytes go into e's
        storage. The op's outputs exist at once while it runs: room is made
        for them too."""
        table, rec = self._table, e.record
        keep = {s.entry.key for s in rec.inputs} | {e.key} | (protect or set())
        for s, held in zip(rec.inputs, rec.held):
            ie = s.entry
            if ie.moved is not None:
                self._bring_back(ie, held, late, keep if protect is not None else None,
                                 reading, what)
            if ie.inbound is not None:
                self._wait(ie)
        if protect is not None and self._budget is not None:
            self._make_room(e.nbytes + sum(oe.nbytes for oe, _ in rec.outputs), keep,
                            what or f"making {e.base.label} again", may_pass=reading)
        if late and e.base.residency != "dropped":
            self._counts["hazards"] += 1      # the runtime thought it was on the device
        place = next(p for oe, p in rec.outputs if oe is e)
        self._busy = True
        try:
            out = storage_of(rec.run(place))
            if out.nbytes() != e.nbytes:
                raise ChameleonError(f"Offload: {rec.func} made {out.nbytes()} bytes again for "
                                     f"\"{e.base.label}\", which held {e.nbytes}")
            storage.resize_(e.nbytes)
            _as_bytes(storage).copy_(_as_bytes(out))
        finally:
            self._busy = False
        table.recomputed(e)
        self._ctx.recomputed(e.base, storage.data_ptr())

    def _bring_back(self, e, storage, late, protect=None, reading=False, what=None):
        """Restores e's storage (making room first when protect is given;
        what: the op that needs it, for the error)."""
        if e.moved is DROPPED:
            if storage is None:               # torch freed it while it was dropped
                self._table.forget(e)
            else:
                self._recompute(e, storage, late, protect, reading, what)
            return
        pending = self._releasing.pop(e.key, None)
        if pending is None and protect is not None and self._budget is not None:
            self._make_room(e.nbytes, protect, what or f"reading {e.base.label}",
                            may_pass=reading)
        if late and e.base.residency != "host":
            self._counts["hazards"] += 1      # the runtime thought it was on the device
        moves = self._moves(storage)
        if pending is not None:
            # Not released yet: it never left, and needs no copy back.
            moves.keep(e.moved, storage)
            e.moved = None
            self._table.back(e, counted=True)
            self._ctx.swapped_in(e.base, storage.data_ptr())
            return
        self._busy = True
        try:
            e.inbound = moves.copy_in(e.moved, storage)
        finally:
            self._busy = False
        e.moved = None
        self._table.back(e)
        self._ctx.swapped_in(e.base, storage.data_ptr())   # unadvised: on demand

    def _wait(self, e):
        inbound, e.inbound = e.inbound, None
        if inbound is not None:
            self._moves(e.storage()).wait(inbound)

    def _restore_for_read(self, t, pin=False, exposes=False, copies=False):
        """t is about to be read outside aten: its storage comes back, and
        stays until the next op or the next reader not called by this one. torch.save reads the bytes of every
        storage it saves at its end: sending one away to bring the next back
        would save nothing for it, so a save may hold what it saves on the
        device at once (docs/pytorch.md, "Reads outside aten"). exposes:
        the reader hands out the memory itself (a numpy array, a pointer),
        which code outside aten may write: nothing dropped is made from it
        from then on. copies: the reader copies the storage on the device
        (copy.deepcopy), which the budget must have room for."""
        if t.layout != _STRIDED or not (t.is_cpu or t.is_cuda):
            return
        storage = storage_of(t)
        e = self._table.entries.get(storage._cdata)
        if e is None:
            return
        self._read_pins.add(e.key)
        if e.moved is not None:
            self._bring_back(e, storage, late=True, protect={e.key}, reading=True)
        if exposes and not e.exposed:
            e.exposed = True
            for rec in list(self._table.readers.get(e.key, ())):
                for oe, _ in rec.outputs:
                    if oe.moved is DROPPED:
                        self._bring_back(oe, oe.storage(), late=True, protect={e.key},
                                         reading=True)
        if e.inbound is not None:
            self._wait(e)
        if pin and not e.pinned:
            self._table.pin(e, "unreleasable")
            self._counts["pinned"] += 1
        if copies and self._budget is not None and not self._reading:
            self._make_room(e.nbytes, {e.key}, "copy.deepcopy of a tensor", may_pass=True)

    # ---- the budget ---------------------------------------------------------

    def _make_room(self, need, protect, what, may_pass=False, sure=None):
        """Sends storages away, least recently used first (those under the
        planner's smallest swap after the others: each move costs its own
        overhead) and none of protect or of those read outside aten since
        the last op, until need
        more bytes fit in the budget. may_pass: need is a guess, or the
        room is for a read outside aten: the budget may be passed rather
        than fail (a guess is checked against what the op made). sure: of
        need, the bytes known (a meta run's); only the rest may pass."""
        table, budget = self._table, self._budget
        excess = table.resident + need - budget
        if excess <= 0:
            return
        if self._releasing:
            # Copies already under way free their memory first.
            self._reap(excess)
            excess = table.resident + need - budget
        # Least recently used first: the storages torch freed since the
        # glue last looked are among them, and cost no copy (no sweep of
        # the whole table: that is O(storages) per op under pressure). A
        # victim torch will not release is pinned, leaves the order, and
        # the next round picks others.
        pins = self._read_pins
        expired = table.expired
        while excess > 0:
            victims = []
            for key, e in table.by_age():
                if key in protect or key in pins:
                    continue
                victims.append(e)
                if not expired(e):
                    excess -= e.nbytes
                if excess <= 0:
                    break
            if not victims:
                break
            for e in victims:
                if expired(e):
                    table.forget(e)
                else:
                    self._send_away(e)
            excess = table.resident + need - budget
            if excess > 0 and self._releasing:
                self._reap(excess)        # the room is needed now
                excess = table.resident + need - budget
        if excess > 0 and table.sweep():
            excess = table.resident + need - budget     # freed storages away from the LRU
        guessed = 0 if sure is None else need - sure
        if excess > guessed and not may_pass:
            self._over_budget(need - guessed, protect, what, excess - guessed)

    def _over_budget(self, need, protect, what, excess):
        entries = self._table.entries
        # The protected storages on the device; one being brought back is
        # still away, and is need.
        own = need + sum(entries[k].nbytes for k in protect
                         if k in entries and entries[k].moved is None)
        kept = {}
        for e in entries.values():
            if e.pinned and e.moved is None and e.key not in protect:
                kept[e.pinned] = kept.get(e.pinned, 0) + e.nbytes
        message = (f"Offload: {what} needs {own} bytes on the device at once (the storages "
                   f"it uses), {excess} bytes past the budget of {self._budget} bytes with "
                   "everything else sent away")
        if kept.get("unreleasable"):
            message += (f"; {kept['unreleasable']} of the bytes left are storages torch will "
                        "not release (shared with numpy, shared memory or DataLoader workers, "
                        "or loaded by torch.load)")
        host = kept.get("host-read", 0) + kept.get("record", 0)
        if host:
            message += (f"; {host} are storages C++ code reads outside aten (small integer "
                        "tensors, profiler records), kept in place")
        if self._budget_pct is not None and self._steady:
            message += (f"; the budget is {self._budget_pct:g}% of the {self._steady} bytes the "
                        "first steps held: a loop whose later steps hold more (shapes "
                        "that grow) needs a budget in bytes")
        if self._strict:
            raise ChameleonError(message + " (strict=False runs on over the budget)")
        self._counts["over_ops"] += 1
        self._over_now = True
        if what not in self._over_logged:
            self._over_logged.add(what)
            (self._log or _stderr)(message)

    def _note_peak(self):
        table = self._table
        if self._budget_pct is not None and self._steps == 0:
            # The measured step: what it holds after each op, exactly (once
            # a run: a look at every storage after every op).
            table.sweep()
            self._held.append((self._opno, table.live))
        elif self._settling and table.live > self._step_live:
            table.sweep()             # the exact peak of every byte, sent away or not
            self._step_live = max(self._step_live, table.live)
        if table.resident > self._step_peak:
            self._step_peak = table.resident

    # ---- dispatch ------------------------------------------------------------

    def _set_phase(self):
        if self._in_backward:
            phase = "backward"
        elif torch.is_grad_enabled():
            phase = "forward"
        elif self._after_backward:
            phase = "optimizer"
        else:
            phase = "eval"
        if phase != self._phase:
            self._block_backward |= phase == "backward"
            self._block_next_iteration |= phase == "forward" and self._phase == "optimizer"
            self._ctx.phase(phase)
            self._phase = phase

    def _dispatch(self, func, args, kwargs):
        if self._busy:
            return func(*args, **kwargs)
        # By id: an OpOverload hashes in Python, and lives as long as torch.
        op = self._ops.get(id(func))
        if op is None:
            op = self._ops[id(func)] = _Op(self._ctx, func)
        if op.bookkeeping:
            return self._bookkeeping(op, func, args, kwargs)
        if self._releasing:
            self._reap()
        if self._read_pins and not self._reading:
            # A reader's own ops (a storage copy's set_ and copy_) run
            # while it reads: what it read stays until it returns.
            self._read_pins.clear()
        ins = _tensors(args, []) if op.reads_data else []
        if kwargs and op.reads_data:
            _tensors(kwargs.values(), ins)
        if self._recent:
            self._forget_recent_frees()
        if self._deferred:
            # A prefetch that did not fit after the last op: once more now;
            # one that still does not waits for its use.
            deferred, self._deferred = self._deferred, []
            for e in deferred:
                if self._table.entries.get(e.key) is e:
                    self._prefetch(e)
        self._opno += 1
        table, budget = self._table, self._budget
        used = []
        for t in ins:                  # grows by the parts of a sparse one
            r = self._lookup(t, "input")
            if r is not None:
                used.append(r)
            elif t.layout in _SPARSE_PARTS:
                ins.extend(_SPARSE_PARTS[t.layout](t))
        # What room-making must not send away; only wanted under a budget.
        protect = {e.key for e, _ in used} if budget is not None else None
        # Inputs first: a released storage comes back before anything reads
        # it. A view op only makes metadata, but not over a released
        # storage (its bounds are checked); it is not reported as an op.
        for e, h in used:
            if e.moved is not None or e.inbound is not None:
                self._on_device(e, protect, op)
        if op.storages:
            self._bring_back_storages(op, args, kwargs, protect)
        if self._recompute_on and op.writes:
            self._before_write(op, args, kwargs, protect)
        if op.is_view:
            if budget is not None and table.resident > budget:
                # Its input was first seen here (a tensor made before the
                # block): room for it now, not at the next op.
                self._make_room(0, protect, f"op {op.name}", may_pass=True)
            return func(*args, **kwargs)
        # The measured step of a percentage only learns the sizes.
        sized = op.makes and self._budgeted
        key = self._op_bytes.key(func, args, kwargs) if sized else None
        if sized and budget is not None:
            self._busy = True
            try:
                sizes = [e.nbytes for e, _ in used]
                need, sure = self._op_bytes.guess(key, func, args, kwargs, sum(sizes),
                                                  max(sizes, default=0))
            finally:
                self._busy = False
            self._make_room(need, protect, f"op {op.name}", sure=sure)
        elif budget is not None and (op.grows or table.resident > budget):
            # An input first seen here (an in-place op on a tensor made
            # before the block), or a storage resize_ grows: room for it
            # before the op writes it.
            grows = 0
            if op.grows:
                self._busy = True        # an out= op's meta run is no op of the user's
                try:
                    grows = _growth(op, func, args, kwargs)
                finally:
                    self._busy = False
            self._make_room(grows, protect, f"op {op.name}")
        before = table.added
        start = _clock()
        result = func(*args, **kwargs)
        took = _clock() - start
        if op.writes_hidden and any(e.storage().nbytes() != e.nbytes for e, _ in used):
            # It resized what it wrote: a new storage to the runtime (_lookup).
            used = [r for r in (self._lookup(t, "input") for t in ins) if r is not None]
        made, places = [], []
        outs = _outputs(result)
        direct = len(outs)
        for place, t in enumerate(outs):    # grows by the parts of a sparse one
            r = self._lookup(t, op.name)
            if r is not None:
                made.append(r)
                places.append(place)
            elif t.layout in _SPARSE_PARTS:
                outs.extend(_SPARSE_PARTS[t.layout](t))
        # Only dense outputs are made again (a sparse one's parts are not
        # the op's outputs), from tracked inputs alone.
        recompute = (self._recompute_on and op.recomputable and made and len(used) == len(ins) and
                     places[-1] < direct and
                     self._record(func, args, kwargs, ins, used, made, places))
        if key is not None:
            self._op_bytes.made(key, table.added - before)
        opno = self._opno
        for e, _ in used:
            table.touch(e)
        for e, _ in made:
            table.touch(e)
        if self._budgeted:
            # Entries, not the (entry, handle) pairs: a view's handle held
            # here would keep the view alive in the runtime's count.
            seen = [e for e, _ in used]
            seen.extend(e for e, _ in made)
            self._recent = (seen, self._recent[0] if self._recent else ())
        self._set_phase()
        hin = [h for _, h in used]
        hout = [h for _, h in made]
        if self._measured:
            cost = float(took)
        else:
            cost = -1.0 if op.flops is None else op.flops(args, result) / self._flops * 1e9
        actions = self._ctx.op(op.token, hin, hout, cost, self._bandwidth, 0.0, False, recompute)
        self._note_peak()
        if self._steps == 0:
            touched = sum({e.key: e.nbytes for e, _ in used + made}.values())
            if touched > self._largest_op[0]:
                self._largest_op = (touched, op.name)
        if actions:
            self._act(actions)
        if budget is not None and table.resident > budget:
            # The op made more than it was thought to (a data-dependent size).
            self._make_room(0, {e.key for e, _ in made}, f"op {op.name}")
        elif opno >= self._next_sweep:
            # The runtime learns of frees every so many ops: at most an
            # eighth of a sweep's cost (one look per storage) per op.
            table.sweep()
            self._next_sweep = opno + max(32, len(table.entries) // 8)
        return result

    def _bring_back_storages(self, op, args, kwargs, protect):
        """The storages op takes as storages (set_'s source) come back
        before it makes a tensor over one; one never seen (a DataLoader
        worker's batch, rebuilt over its shared memory) is made room for,
        as it is counted once the op returns."""
        unseen = 0
        for i, name in op.storages:
            st = args[i] if i < len(args) else kwargs.get(name)
            st = getattr(st, "_untyped_storage", None) or getattr(st, "_storage", None) or st
            e = self._table.entries.get(getattr(st, "_cdata", None))
            if e is None:
                nbytes = getattr(st, "nbytes", None)
                unseen += nbytes() if callable(nbytes) else 0
                continue
            if protect is not None:
                protect.add(e.key)
            self._on_device(e, protect, op)
        if unseen and self._budget is not None:
            self._make_room(unseen, protect or set(), f"op {op.name}", may_pass=True)

    def _on_device(self, e, protect, op):
        """e's bytes on the device, and no copy back still in flight, for
        op, which is about to use it."""
        if e.moved is not None:
            self._bring_back(e, e.storage(), late=True, protect=protect, what=f"op {op.name}")
        if e.inbound is not None:
            self._wait(e)

    def _forget_recent_frees(self):
        """Forgets the storages the last two ops used that torch has freed
        since: most storages die just after their last use (a temporary, a
        saved tensor once its backward node ran), and the runtime's
        profile must see the free there, not at the next sweep, or the
        planner, thinking them alive, cannot fit its plan in the budget
        and leaves the room to the passive path (docs/pytorch.md, "The
        budget")."""
        expired, forget = _Storage._expired, self._table.forget
        for group in self._recent:
            for e in group:
                if e.base is not None and expired(e.weak):
                    forget(e)

    def _before_write(self, op, args, kwargs, protect):
        """op is about to write tensors: what a dropped storage was made
        from must not change before it is made again, and a record that
        read them no longer describes its output."""
        table = self._table
        for t in _written(op, args, kwargs):
            try:
                e = table.entries.get(storage_of(t)._cdata)
            except (NotImplementedError, RuntimeError):
                continue
            if e is None:
                continue
            e.writes += 1
            e.record = None
            for rec in list(table.readers.get(e.key, ())):
                for oe, _ in rec.outputs:
                    if oe.moved is DROPPED:
                        self._bring_back(oe, oe.storage(), late=True, protect=protect,
                                         what=f"op {op.name}")

    def _record(self, func, args, kwargs, ins, used, made, places):
        """Whether the op just run may be run again to make its outputs
        (the runtime may then drop them): each a whole storage of its own
        and large enough to be worth planning, every input one the glue
        tracks and only aten writes; if so its Record is kept with them."""
        keys = {e.key for e, _ in made}
        if len(keys) != len(made) or any(h is not e.base for e, h in made) or \
                any(e.key in keys or e.exposed or e.pinned == "unreleasable" for e, _ in used):
            return False
        # A conjugate or negative view is a bit on the tensor, not in its
        # bytes or strides: a record of the view would lose it.
        if any(t.is_conj() or t.is_neg() for t in ins):
            return False
        if sum(e.nbytes for e, _ in made) < self._table.small or \
                (self._cuda_run and cudnn_may_differ(func)):
            return False
        rec = Record(func, args, kwargs, [(e, t) for (e, _), t in zip(used, ins)],
                     [(e, p) for (e, _), p in zip(made, places)])
        for e, _ in made:
            e.record = rec
        return True

    def _bookkeeping(self, op, func, args, kwargs):
        """A profiler op (an optimizer's step records one): its tensor is
        torch's own record, read in C++ and never by an op. It runs as it
        is, and its bytes are counted and never moved."""
        table, key = self._table, (func,)
        if self._budget is not None and op.makes:
            self._make_room(self._op_bytes.known(key), set(), f"op {op.name}")
        before = table.added
        result = func(*args, **kwargs)
        for t in _outputs(result):
            r = self._lookup(t, op.name)
            if r is not None:
                table.pin(r[0], "record")
        self._op_bytes.made(key, table.added - before)
        return result

    def _act(self, actions):
        table = self._table
        for kind, h, needed in actions:
            e = table.entries.get(h.key)
            if e is None:
                continue
            if kind == "swap_out" or kind == "drop":
                if e.moved is None and not e.pinned and not (kind == "drop" and self._drop(e)):
                    self._send_away(e)
            elif not self._prefetch(e):        # swap_in, recompute
                # The op just run still holds its inputs (its arguments are
                # alive until it returns): the next op may have the room.
                self._deferred.append(e)

    def _prefetch(self, e):
        """Brings e back ahead of its use if it fits in the budget; False
        when it does not (yet)."""
        table, budget = self._table, self._budget
        if e.moved is None:
            return True
        storage = e.storage()
        if storage is None:                   # torch freed it while it was away
            table.forget(e)
            return True
        dropped = e.moved is DROPPED
        need = _rerun_bytes(e) if dropped else e.nbytes
        if budget is not None and table.resident + need > budget:
            table.sweep()
            if table.resident + need > budget:
                return False
        # A re-run's inputs come back within the room just checked (an
        # empty protect set: room is made if the count was short, never
        # an error for a prefetch).
        self._bring_back(e, storage, late=False, protect=set() if dropped else None,
                         reading=dropped)
        return True

    def run_op(self, name, tensors, fn, cost_ns=-1.0, comm_ns=0.0, comm_waited=False):
        """Runs fn(), which reads and writes tensors outside aten's dispatch
        (a collective, say), as one op named name: their storages are on the
        device while it runs, and the runtime sees the use. comm_ns > 0: fn
        runs a collective of about that time, which the compute stream waits
        for when comm_waited (cham_op_set_comm)."""
        if self._mode is None:
            return fn()
        used = [r for r in (self._lookup(t, "input") for t in tensors) if r is not None]
        protect = {e.key for e, _ in used}
        for e, _ in used:
            if e.moved is not None:
                self._bring_back(e, e.storage(), late=True,
                                 protect=protect if self._budget is not None else None,
                                 what=f"op {name}")
            if e.inbound is not None:
                self._wait(e)
        start = _clock()
        result = fn()
        if cost_ns < 0 and self._measured:
            cost_ns = float(_clock() - start)
        self._opno += 1
        for e, _ in used:
            self._table.touch(e)
        token = self._ops.get(name)
        if token is None:
            token = self._ops[name] = self._ctx.token(name)
        self._set_phase()
        handles = [h for _, h in used]
        self._act(self._ctx.op(token, handles, handles, cost_ns, 0.0, comm_ns, comm_waited))
        return result

    def allreduce_ns(self, nbytes, world):
        """ns of a ring allreduce of nbytes over world ranks on the preset's
        device-to-device link (2 (n - 1) / n of the bytes each way); 0
        without a link or a peer, or when ops are measured (run_op times
        the collective itself)."""
        if world < 2 or not self._p2p or self._measured:
            return 0.0
        return 2.0 * (world - 1) / world * nbytes / self._p2p * 1e9


def _rerun_bytes(e, all_inputs=False):
    """The most bytes making dropped e again adds on the device: its
    inputs that are away (made again first if dropped themselves; with
    all_inputs, every input), e, and the op's outputs while it runs."""
    need = e.nbytes + sum(oe.nbytes for oe, _ in e.record.outputs)
    for ie in {s.entry.key: s.entry for s in e.record.inputs}.values():
        if ie.moved is DROPPED:
            need += _rerun_bytes(ie, all_inputs)
        elif ie.moved is not None or all_inputs:
            need += ie.nbytes
    return need


def _as_bytes(storage):
    """A uint8 tensor over all of storage (an aten op: the glue's own)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _stderr(line):
    import sys
    print(line, file=sys.stderr)


def _reader(original, shares=False, exposes=False, copies=False):
    """original (a Tensor method reading bytes outside aten), bringing the
    tensor's storage back first while an Offload's block runs; shares: its
    result keeps the memory, which must then never be released; exposes:
    it hands out the memory (Offload._restore_for_read); copies: it makes a
    copy of the storage on the device, which is made room for first."""
    def read(t, *args, **kwargs):
        off = _active
        if off is None:
            return original(t, *args, **kwargs)
        # Held through the read: another thread's op must not send the
        # storage away before the read is done.
        with off._lock:
            if not off._busy:
                if not off._reading:
                    # What an earlier reader read was read when it returned
                    # (deepcopy of a state dict reads tensor after tensor,
                    # with no op between: its pins would hold them all).
                    off._read_pins.clear()
                # A reader another reader calls (deepcopy and pickling take
                # storage()) hands nothing out to the user.
                off._restore_for_read(t, pin=shares, exposes=exposes and not off._reading,
                                      copies=copies)
            off._reading += 1
            try:
                return original(t, *args, **kwargs)
            finally:
                off._reading -= 1
    read.__name__ = getattr(original, "__name__", "read")
    read.__doc__ = getattr(original, "__doc__", None)
    return read


def _tensors_in_data(data, found):
    """The tensors in data (a tensor, or lists and tuples nesting them
    among numbers), into found."""
    if isinstance(data, torch.Tensor):
        found.append(data)
    elif isinstance(data, (list, tuple)):
        for x in data:
            if not isinstance(x, (float, int, bool)):
                _tensors_in_data(x, found)


def _data_reader(original, at):
    """original (a function making a tensor from data, the positional
    argument at or the keyword "data"), bringing the storages of the
    tensors in the data back first while an Offload's block runs: torch
    reads them outside aten."""
    def make(*args, **kwargs):
        off = _active
        data = args[at] if len(args) > at else kwargs.get("data")
        if off is None or data is None or isinstance(data, (float, int, bool)):
            return original(*args, **kwargs)
        found = []
        _tensors_in_data(data, found)
        if not found:
            return original(*args, **kwargs)
        with off._lock:
            if not off._busy:
                if not off._reading:
                    off._read_pins.clear()
                # Each read pins its storage until the next op: bringing
                # one back never sends an earlier one of the data away.
                for t in found:
                    off._restore_for_read(t)
            off._reading += 1
            try:
                return original(*args, **kwargs)
            finally:
                off._reading -= 1
    make.__name__ = getattr(original, "__name__", "make")
    make.__doc__ = getattr(original, "__doc__", None)
    return make


def allreduce_hook(off, bucket):
    """A DistributedDataParallel comm hook (``ddp.register_comm_hook(off,
    chameleon.torch.allreduce_hook)``): DDP's averaging allreduce of a
    gradient bucket, run as an op the runtime sees, so the bucket is on the
    device while the collective reads it and is never moved under it."""
    import torch.distributed as dist
    buf = bucket.buffer()

    world = dist.get_world_size()

    def reduce():
        buf.div_(world)
        dist.all_reduce(buf)
    # The hook returns when the allreduce is done: the compute stream waits.
    ns = off.allreduce_ns(buf.numel() * buf.element_size(), world)
    off.run_op("c10d::allreduce_", [buf], reduce, ns if ns > 0 else -1.0, ns, ns > 0)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut
