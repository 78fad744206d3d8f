"""Recomputation under chameleon.torch: which aten ops the glue may run
again, what it keeps of one to do so, and the inputs a dropped storage
holds (docs/pytorch.md, "Recomputation").

The runtime plans drops and re-runs (docs/executor.md, "Recomputation"):
where a policy drops a storage the op that made it was declared
recomputable, and the glue frees its memory without a copy; before its next
use the glue runs the op again on the same inputs and copies the result into
the storage. What keeps this exact:
  - only ops whose result depends on their inputs alone are declared (no
    random numbers, no bitwise-nondeterministic kernels, nothing written in
    place, no data-dependent shapes), and only when every tensor they read
    is a storage the glue tracks;
  - a Record keeps no tensor: the op, its arguments with each tensor as a
    Spec (the entry of its storage and the view), so keeping a record keeps
    no memory. When the output is dropped the record holds its inputs'
    storages (they cannot be freed while it needs them), and before any op
    or reader may write one of them the output is made again first;
  - a storage whose bytes code outside aten may write (made outside aten,
    so numpy may share it, until torch lets the glue release it; a numpy
    array or a data pointer handed out since) is never an input of a
    dropped output, nor is a conjugate or negative view (a bit a record
    would lose): such an output is sent to the host instead.
The glue also declines a drop whose re-run would not fit beside the
largest op (torch.py, Offload._drop).
"""
import torch

__all__ = ["DROPPED", "Record", "Spec", "recomputable", "written_arguments"]

# Entry.moved of a dropped storage: no host copy; its op runs again.
DROPPED = object()

_TAGS = tuple(getattr(torch.Tag, n) for n in ("nondeterministic_seeded",
                                              "nondeterministic_bitwise",
                                              "dynamic_output_shape", "data_dependent_output")
              if hasattr(torch.Tag, n))
# Convolutions on a GPU pick their algorithm per call unless cuDNN is made
# deterministic: a re-run may differ in the last bits.
_CUDNN_CHOOSES = ("convolution", "_convolution", "cudnn_convolution", "conv2d", "conv1d",
                  "conv3d")


# Ops that write arguments their schema does not mark as written (torch
# 1.13: batch norm updates its running statistics in place).
_UNMARKED_WRITES = {name: ("running_mean", "running_var") for name in
                    ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm",
                     "_native_batch_norm_legit")}


def written_arguments(func):
    """(place, name) of each argument func writes: those its schema marks,
    and those it writes unmarked."""
    unmarked = _UNMARKED_WRITES.get(func.overloadpacket.__name__, ())
    return tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                 if (a.alias_info is not None and a.alias_info.is_write) or a.name in unmarked)


def recomputable(func):
    """Whether func (an aten overload) makes its outputs from its inputs
    alone: every return a new tensor, no argument written, no random
    numbers, no kernel whose bits may differ between runs, and not a
    factory of uninitialised memory."""
    schema = func._schema
    returns = schema.returns
    if not returns or any(r.alias_info is not None for r in returns):
        return False
    if any(str(r.type) != "Tensor" for r in returns):
        return False
    if any(a.alias_info is not None for a in schema.arguments) or written_arguments(func):
        return False
    if any(t in _TAGS for t in getattr(func, "tags", ())):
        return False
    name = func.overloadpacket.__name__
    return "empty" not in name and name not in ("set_", "_local_scalar_dense")


def cudnn_may_differ(func):
    """A GPU run: whether func's kernel may be chosen differently when run
    again (cuDNN's autotuner)."""
    return (func.overloadpacket.__name__ in _CUDNN_CHOOSES and
            not torch.backends.cudnn.deterministic)


class Spec:
    """A tensor argument, as the view of a tracked storage it was."""
    __slots__ = ("entry", "offset", "sizes", "strides", "dtype", "nbytes", "writes")

    def __init__(self, entry, t):
        self.entry = entry
        self.offset = t.storage_offset()
        self.sizes = tuple(t.size())
        self.strides = t.stride()
        self.dtype = t.dtype
        self.nbytes = entry.nbytes     # the storage's size when the op read it
        self.writes = entry.writes     # and how often an op had written it

    def tensor(self, storage):
        return torch.empty(0, dtype=self.dtype, device=storage.device).set_(
            storage, self.offset, self.sizes, self.strides)


def _each(args, one):
    """args with one(a) for each (one level into lists and tuples, where
    the glue finds tensors)."""
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            filled = [one(b) for b in a]
            out.append(filled if isinstance(a, list) else tuple(filled))
        else:
            out.append(one(a))
    return out


def _template(args, specs):
    """args with each tensor replaced by the next of specs (an iterator)."""
    return _each(args, lambda a: next(specs) if isinstance(a, torch.Tensor) else a)


def _fill(args, tensors):
    """The template's arguments with each Spec's tensor."""
    return _each(args, lambda a: tensors[id(a)] if isinstance(a, Spec) else a)


class Record:
    """One run of a recomputable op: enough to run it again, and, while one
    of its outputs is dropped, the storages of its inputs."""
    __slots__ = ("func", "args", "kwargs", "inputs", "outputs", "dropped", "held")

    def __init__(self, func, args, kwargs, used, outputs):
        """used: the (entry, tensor) of each tensor argument in the order
        the glue found them (positional, then keyword); outputs: each
        output's entry and its place among the op's outputs."""
        specs = [Spec(e, t) for e, t in used]
        it = iter(specs)
        self.args = _template(args, it)
        self.kwargs = dict(zip(kwargs, _template(kwargs.values(), it)))
        self.func = func
        self.inputs = specs
        self.outputs = outputs     # [(entry, place)]
        self.dropped = 0           # of the outputs, how many are dropped
        self.held = None           # the inputs' storages while one is

    def can_hold(self, entries):
        """Whether every input is still the storage the op read, and none is
        one code outside aten may write (entries: the table's)."""
        for s in self.inputs:
            e = s.entry
            if entries.get(e.key) is not e or e.exposed or e.pinned == "unreleasable" or \
                    s.nbytes != e.nbytes or s.writes != e.writes:
                return False
        return True

    def hold(self):
        """One more output dropped: the inputs' storages stay alive; False
        when one is gone already."""
        if self.held is None:
            held = [s.entry.storage() for s in self.inputs]
            if any(st is None for st in held):
                return False
            self.held = held
        self.dropped += 1
        return True

    def release(self):
        """One dropped output is back or gone: the inputs go with the last."""
        self.dropped -= 1
        if self.dropped == 0:
            self.held = None

    def run(self, place):
        """Runs the op again (the inputs on the device); its output at place.
        The aten op as it ran: no autograd, and no autocast, which a re-run
        outside an op (a reader, the block's end) would otherwise pass
        through and cast its inputs."""
        tensors = {id(s): s.tensor(st) for s, st in zip(self.inputs, self.held)}
        casts = torch.is_autocast_enabled(), torch.is_autocast_cpu_enabled()
        torch.set_autocast_enabled(False)
        torch.set_autocast_cpu_enabled(False)
        try:
            with torch.no_grad():
                result = self.func(*_fill(self.args, tensors),
                                   **dict(zip(self.kwargs, _fill(self.kwargs.values(), tensors))))
        finally:
            torch.set_autocast_enabled(casts[0])
            torch.set_autocast_cpu_enabled(casts[1])
        outs = result if isinstance(result, (list, tuple)) else (result,)
        return outs[place]
