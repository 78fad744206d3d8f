"""Chameleon under a PyTorch training loop (docs/pytorch.md).

    import chameleon.torch as ct
    off = ct.Offload(budget="50%", device="a100-80g")
    with off:
        for step in range(n):
            loss = model(x).sum(); loss.backward(); opt.step(); opt.zero_grad()
            off.step()
    off.stats

Inside the context a TorchDispatchMode reports every aten op to the runtime
(advisor mode: the framework owns memory), and the runtime's actions are
carried out on the op's storages: a swap-out copies the storage's bytes to
host memory and releases the storage (``resize_(0)``), a swap-in restores
it. A released storage is never read: every op's inputs and every view's
base are brought back first. Saved activations need no hook: autograd holds
the same storages, which are released and restored in place.
"""
import json
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _chameleon
from ._chameleon import ChameleonError

__all__ = ["Offload", "ChameleonError", "allreduce_hook"]

_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool", torch.complex64: "c64", torch.complex128: "c128",
}
for _name, _code in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code

# Ops that multiply matrices: cost from their shapes (2 flops per
# multiply-add); every other op costs the bytes it reads and writes.
_MATMUL_OPERANDS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2),
                    "addbmm": (1, 2)}


def _parse_budget(budget):
    """Bytes, a percentage string of the first step's peak, or None."""
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


# The storage object of a tensor: torch 2 names it untyped_storage, 1.13
# has it as _storage (Tensor.storage() wraps it, at ten times the cost).
_untyped_storage = getattr(torch.Tensor, "untyped_storage", None) or torch.Tensor._storage


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


class _Op:
    """What the glue knows of one aten overload."""
    __slots__ = ("name", "token", "is_view", "matmul")

    def __init__(self, ctx, func):
        self.name = str(func)
        self.token = ctx.token(self.name)
        returns = func._schema.returns
        # A view op only makes new metadata over its input's storage: it
        # neither reads nor writes data and is not reported as an op.
        self.is_view = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns)
        self.matmul = _MATMUL_OPERANDS.get(func.overloadpacket.__name__)


class _CudaMoves:
    """Swaps of CUDA storages, on a side stream each way per device.

    Out: the side stream waits for the compute stream's work so far (the
    op that wrote the storage), copies into pinned host memory, and the
    block is marked used by that stream (record_stream) before the storage
    is released, so the caching allocator reuses it only after the copy
    read it. In: the storage gets a block again (on the compute stream),
    the side stream waits for that and for the copy out, copies back, and
    the compute stream waits for it when an op next uses the storage.

    Written and reviewed against torch's API but never run: no GPU is
    available to this project (docs/pytorch.md, limits)."""

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
        out, _ = self._pair(storage.device)
        src = self._as_bytes(storage)
        host = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=True)
        out.wait_stream(torch.cuda.current_stream(storage.device))
        with torch.cuda.stream(out):
            host.copy_(src, non_blocking=True)
        src.record_stream(out)
        return host, out.record_event()

    def copy_in(self, moved, storage):
        host, copied_out = moved
        _, into = self._pair(storage.device)
        storage.resize_(host.numel())
        dst = self._as_bytes(storage)
        into.wait_stream(torch.cuda.current_stream(storage.device))
        into.wait_event(copied_out)
        with torch.cuda.stream(into):
            dst.copy_(host, non_blocking=True)
        dst.record_stream(into)
        return into.record_event()


class _Mode(TorchDispatchMode):
    def __init__(self, off):
        super().__init__()
        self.off = off

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.off._dispatch(func, args, kwargs or {})


class Offload:
    """Runs the ops of the ``with`` block under Chameleon's runtime.

    budget: device bytes the step may hold, or "P%" of the peak of the
        first step (which runs unconstrained), or None (the device's).
    device: the device preset whose link and compute speeds the planner
        assumes (``chameleon presets`` lists them).
    log: a callable taking each log line, or None (stderr).
    Any other keyword is a runtime config key (docs/config.md).
    """

    def __init__(self, budget=None, device="a100-80g", log=None, **config):
        self._budget_bytes, self._budget_pct = _parse_budget(budget)
        if "memory_budget" in config or "mode" in config or "preset" in config:
            raise ValueError("Offload: give the budget as budget=, the preset as device=; "
                             "the mode is always advisor")
        config = dict(config, preset=device, mode="advisor")
        if self._budget_bytes is not None:
            config["memory_budget"] = self._budget_bytes
        try:
            text = json.dumps(config)
        except TypeError as e:
            raise ValueError(f"Offload: a config value is not JSON: {e}") from None
        self._ctx = _chameleon.Context(text, "Offload", log)
        # A tensor carries its handle of each Offload that saw it.
        self._attr = f"_chameleon_handle_{id(self._ctx):x}"
        dev = self._ctx.device()
        self._flops = dev["peak_flops"] or 1e12
        self._bandwidth = dev["hbm_bandwidth"] or 1e11
        self._p2p = dev["p2p_bandwidth"]
        self._ops = {}
        self._storages = {}          # storage key -> weakref to its base Handle
        self._mode = None
        self._patched = None
        self._phase = None
        self._in_backward = 0
        self._after_backward = False
        self._steps = 0
        self._largest_op = (0, "")   # step 0: the most bytes one op touched
        self._peaks = {}             # stable: the most a step held in Stable / before
        self._late = 0
        self._hazards = 0
        self._cuda = None            # _CudaMoves, made at the first CUDA tensor
        self._inbound = {}           # id(base) -> (device, event): CUDA swap-ins in flight
        self._busy = False           # the glue's own torch calls pass through

    # ---- the context ---------------------------------------------------------

    def __enter__(self):
        if self._mode is not None:
            raise RuntimeError("Offload: already entered")
        self._mode = _Mode(self)
        self._mode.__enter__()
        self._patch_autograd()
        return self

    def __exit__(self, *exc):
        self._unpatch_autograd()
        self._mode.__exit__(*exc)
        self._mode = None
        # What is away comes back: tensors outside the context hold data.
        for ref in list(self._storages.values()):
            base = ref()
            if base is not None and base.host is not None:
                self._bring_back(base, base, late=False)
        for device, event in self._inbound.values():
            torch.cuda.current_stream(device).wait_event(event)
        self._inbound.clear()
        return False

    def _patch_autograd(self):
        # Ops run by the autograd engine are the backward phase.
        backward, grad = torch.autograd.backward, torch.autograd.grad

        def wrap(fn):
            def run(*args, **kwargs):
                self._in_backward += 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._in_backward -= 1
                    self._after_backward = True
            return run
        self._patched = (backward, grad)
        torch.autograd.backward, torch.autograd.grad = wrap(backward), wrap(grad)

    def _unpatch_autograd(self):
        torch.autograd.backward, torch.autograd.grad = self._patched

    # ---- steps and counters ------------------------------------------------

    def step(self):
        """One training iteration ended."""
        info = self._ctx.step_end()
        self._steps += 1
        stable = info["from"] == "Stable"
        self._peaks[stable] = max(self._peaks.get(stable, 0), info["peak_bytes"])
        self._after_backward = False
        self._phase = None
        if self._steps == 1:
            self._first_step_done(info["peak_bytes"])
        return info

    def _first_step_done(self, peak):
        need, op = self._largest_op
        if self._budget_pct is not None:
            budget = int(peak * self._budget_pct / 100)
        else:
            budget = self._ctx.stats()["budget_bytes"]
        if budget < need:
            raise ValueError(f"Offload: budget of {budget} bytes is below the {need} bytes op "
                             f"{op} reads and writes at once (the first step's largest op)")
        if self._budget_pct is not None:
            self._ctx.set_budget(budget)

    @property
    def stats(self):
        s = self._ctx.stats()
        before = self._peaks.get(False, 0)
        return {
            # Advisor mode moves nothing before the first policy applies, so
            # the budget holds from Stable on; earlier steps are apart.
            "peak_device_bytes": self._peaks.get(True, before),
            "warmup_peak_bytes": before,
            "budget_bytes": s["budget_bytes"],
            "hazards": self._hazards,
            "planned_swaps": s["planned_swaps_out"],
            "passive_swaps": s["passive_swaps_out"],
            "on_demand_swapins": s["on_demand_swaps_in"] + self._late,
            "over_budget_steps": s["over_budget_steps"],
            "stage": s["stage"],
            "policies_generated": s["policies_generated"],
            "steps": self._steps,
        }

    @property
    def context(self):
        """The runtime context (chameleon.Context)."""
        return self._ctx

    # ---- tensors -----------------------------------------------------------

    def _handle(self, t, label):
        """t's handle: a view of its storage's base handle; None for a tensor
        of no bytes (it holds no memory)."""
        h = getattr(t, self._attr, None)
        if h is not None:
            return h
        if t.numel() == 0:
            return None
        code = _DTYPES.get(t.dtype)
        if code is None:
            raise TypeError(f"Offload: tensor of dtype {t.dtype} is not supported (supported: "
                            f"{', '.join(str(d) for d in _DTYPES)})")
        device = t.device.type
        if device != "cpu":
            if device != "cuda":
                raise TypeError(f"Offload: tensor on {t.device}: cpu and cuda only")
            if self._cuda is None:
                self._cuda = _CudaMoves()
        storage = _untyped_storage(t)
        key = storage._cdata
        ref = self._storages.get(key)
        base = ref() if ref is not None else None
        if base is None:
            nbytes = storage.nbytes()
            base = self._ctx.wrap(storage.data_ptr(), nbytes, code, label)
            base.storage = storage
            base.host = None
            self._storages[key] = weakref.ref(base, self._forget(key))
            if not t.storage_offset() and t.is_contiguous() and \
                    t.numel() * t.element_size() == nbytes:
                h = base         # the whole storage: its base handle serves
        if h is None:
            h = self._ctx.view_strided(base, t.storage_offset(), t.size(), t.stride(), code,
                                       label)
            h.base = base
        setattr(t, self._attr, h)
        return h

    def _forget(self, key):
        def gone(ref):
            if self._storages.get(key) is ref:
                del self._storages[key]
        return gone

    def _send_away(self, base, h):
        storage = base.storage
        if storage.device.type == "cuda":
            self._busy = True
            try:
                base.host = self._cuda.copy_out(storage)
            finally:
                self._busy = False
        else:
            base.host = _chameleon.save(storage.data_ptr(), storage.nbytes())
        storage.resize_(0)
        self._ctx.swapped_out(h)

    def _bring_back(self, base, h, late):
        if late and h.residency != "host":
            self._hazards += 1      # the runtime thought it was on the device
        storage = base.storage
        host = base.host
        if storage.device.type == "cuda":
            self._busy = True
            try:
                self._inbound[id(base)] = (storage.device,
                                           self._cuda.copy_in(host, storage))
            finally:
                self._busy = False
        else:
            storage.resize_(len(host))
            _chameleon.restore(host, storage.data_ptr())
        base.host = None
        self._ctx.swapped_in(h, storage.data_ptr())
        self._late += late

    def _resident(self, t):
        """Brings t's storage back if it is away (a late restore)."""
        h = self._handle(t, "input")
        if h is not None:
            base = getattr(h, "base", h)
            if base.host is not None:
                self._bring_back(base, h, late=True)
        return h

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
            self._ctx.phase(phase)
            self._phase = phase

    def _dispatch(self, func, args, kwargs):
        if self._busy:
            return func(*args, **kwargs)
        op = self._ops.get(func)
        if op is None:
            op = self._ops[func] = _Op(self._ctx, func)
        ins = _tensors(args, [])
        if kwargs:
            _tensors(kwargs.values(), ins)
        # Inputs first: a released storage is brought back before anything
        # reads it. A view op only makes metadata, but not over a released
        # storage (its bounds are checked); it is not reported as an op.
        attr, hin = self._attr, []
        for t in ins:
            h = getattr(t, attr, None) or self._handle(t, "input")
            if h is not None:
                base = getattr(h, "base", h)
                if base.host is not None:
                    self._bring_back(base, h, late=True)
                hin.append(h)
        if self._inbound:
            self._await_inbound(hin)
        result = func(*args, **kwargs)
        if op.is_view:
            return result
        hout = []
        for t in _tensors((result,), []):
            h = getattr(t, attr, None) or self._handle(t, op.name)
            if h is not None:
                hout.append(h)
        self._set_phase()
        if op.matmul is None:
            actions = self._ctx.op(op.token, hin, hout, -1.0, self._bandwidth)
        else:
            actions = self._ctx.op(op.token, hin, hout, self._matmul_ns(op, args))
        if actions:
            self._act(actions)
        if self._steps == 0:
            touched = sum({id(getattr(h, "base", h)): h.storage_nbytes
                           for h in hin + hout}.values())
            if touched > self._largest_op[0]:
                self._largest_op = (touched, op.name)
        return result

    def _await_inbound(self, handles):
        """The compute stream waits for CUDA swap-ins of what the op reads."""
        for h in handles:
            inbound = self._inbound.pop(id(getattr(h, "base", h)), None)
            if inbound is not None:
                torch.cuda.current_stream(inbound[0]).wait_event(inbound[1])

    def _act(self, actions):
        for kind, h, _ in actions:
            base = getattr(h, "base", h)
            if kind == "swap_out":
                self._send_away(base, h)
            elif kind == "swap_in":
                if base.host is not None:
                    self._bring_back(base, h, late=False)
            else:
                raise ChameleonError(f"Offload: action {kind} for {h.label}: the glue "
                                     "declares no op recomputable")

    def run_op(self, name, tensors, fn, cost_ns=-1.0, comm_ns=0.0, comm_waited=False):
        """Runs fn(), which reads and writes tensors outside aten's dispatch
        (a collective, say), as one op named name: their storages are on the
        device while it runs, and the runtime sees the use. comm_ns > 0: fn
        runs a collective of about that time, which the compute stream waits
        for when comm_waited (cham_op_set_comm)."""
        if self._mode is None:
            return fn()
        handles = [h for h in map(self._resident, tensors) if h is not None]
        if self._inbound:
            self._await_inbound(handles)
        result = fn()
        token = self._ops.get(name)
        if token is None:
            token = self._ops[name] = self._ctx.token(name)
        self._set_phase()
        self._act(self._ctx.op(token, handles, handles, cost_ns, 0.0, comm_ns, comm_waited))
        return result

    def allreduce_ns(self, nbytes, world):
        """ns of a ring allreduce of nbytes over world ranks on the preset's
        device-to-device link (2 (n - 1) / n of the bytes each way); 0
        without a link or a peer."""
        if world < 2 or not self._p2p:
            return 0.0
        return 2.0 * (world - 1) / world * nbytes / self._p2p * 1e9

    def _matmul_ns(self, op, args):
        """ns on the preset at 2*M*N*K flops (other ops cost their bytes
        at the memory's bandwidth: Context.op)."""
        a, b = args[op.matmul[0]], args[op.matmul[1]]
        return 2.0 * a.numel() * b.size(-1) / self._flops * 1e9


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
