"""The bytes an op is about to make, known before it runs: what the glue
must make room for (docs/pytorch.md, "The budget").

The op's outputs that alias no input are new storages. Their size comes
from, in order: the same op on inputs of the same shapes and the same other
arguments seen before (what it made then: exact for ops whose output sizes
follow from their arguments, which is all of aten's but a few data-dependent
ones such as nonzero); running the op on meta tensors (shapes only, no
data); else the bytes of its inputs, a guess corrected after the op.

A meta run gives the outputs' shapes, not the storage the kernel keeps:
some of torch 1.13's CPU kernels return their result as a view of an
input-sized buffer (mse_loss, smooth_l1_loss, binary_cross_entropy and
soft_margin_loss their scalar, col2im its image). A call never seen whose
meta outputs are smaller than its largest input is therefore given room
for that input, of which only the meta run's bytes are sure (the rest may
pass the budget, never raise), and what it made is remembered. A sparse
output's meta run says nothing of its parts: a guess too.
"""
import torch

_SCALARS = (int, float, complex, bool, str, type(None), torch.dtype, torch.device,
            torch.layout, torch.memory_format)


def _signature(args, out):
    """args as something hashable: tensors as their shapes and dtypes."""
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append((a.shape, a.dtype))
        elif isinstance(a, _SCALARS):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.append(len(a))
            _signature(a, out)
        elif isinstance(a, torch.Generator):
            out.append(torch.Generator)      # which one does not change sizes
        else:
            raise TypeError
    return out


_META = torch.device("meta")
_REMEMBERED = 1 << 16        # calls whose sizes are kept
# Ops whose output size depends on the data: no meta run can say.
_NOT_ON_META = tuple(getattr(torch.Tag, name) for name in
                     ("data_dependent_output", "dynamic_output_shape")
                     if hasattr(torch, "Tag") and hasattr(torch.Tag, name))


def _data_dependent(func, args=()):
    """Whether func's output sizes depend on the data. aten.index.Tensor
    is tagged so for its boolean masks; with integer indices (h[src] over
    a graph's edges) its size follows from theirs."""
    if func is _INDEX and len(args) > 1 and isinstance(args[1], (list, tuple)):
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
                   for i in args[1])
    return any(tag in _NOT_ON_META for tag in getattr(func, "tags", ()))


_INDEX = torch.ops.aten.index.Tensor

# Ops without a meta kernel in torch 1.13 whose output size their
# arguments say: the bytes of that call, known before its first run.
# _embedding_bag_dense_backward makes the weight's whole gradient
# (num_weights rows of grad's width) from a batch's few KiB.
_SIZE_RULES = {
    torch.ops.aten._embedding_bag_dense_backward.default:
        lambda args, kwargs: (args[5] if len(args) > 5 else kwargs["num_weights"]) *
        args[0].shape[-1] * args[0].element_size(),
}


def _to_meta(a):
    if isinstance(a, torch.Tensor):
        if a.layout != torch.strided or a.is_nested:
            raise TypeError
        return torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=_META)
    if isinstance(a, torch.device):
        return _META
    if isinstance(a, (list, tuple)):
        return type(a)(_to_meta(b) for b in a)
    if isinstance(a, torch.Generator):
        return None          # a meta kernel draws nothing; no real generator goes near it
    return a


def on_meta(args, kwargs):
    """args and kwargs with every tensor (and device) made meta; TypeError
    for a tensor no meta one stands for (sparse, nested)."""
    return _to_meta(args), {k: _to_meta(v) for k, v in kwargs.items()}


def _meta_bytes(func, args, kwargs):
    rule = _SIZE_RULES.get(func)
    if rule is not None:
        return rule(args, kwargs)
    if _data_dependent(func, args):
        raise TypeError
    margs, mkwargs = on_meta(args, kwargs)
    # Every tensor and device became meta: nothing runs on a real device (a
    # random factory op given its real device would draw from the
    # generator and change the user's random stream). Factory ops without a
    # device argument are told it.
    if "device" in kwargs or not any(isinstance(a, torch.Tensor) for a in _flat(args)):
        mkwargs["device"] = _META
    seen = {id(t) for t in _flat(margs) if isinstance(t, torch.Tensor)}
    seen.update(id(t) for t in _flat(mkwargs.values()) if isinstance(t, torch.Tensor))
    result = func(*margs, **mkwargs)
    total = 0
    for t in _flat((result,)):
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            if t.layout != torch.strided:
                raise TypeError          # its indices and values: sizes a meta run lacks
            total += t.numel() * t.element_size()
    return total


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


class OpBytes:
    """Bytes of the new storages an op makes, by its arguments."""

    def __init__(self):
        self._made = {}
        self._meta = {}          # key -> (func, bytes a meta run said), until made
        self._short = {}         # func -> the most its kernel made past its meta run
        # func -> the most a call made that no meta run could size (no meta
        # kernel: _embedding_bag_dense_backward makes the whole weight's
        # gradient from a few KiB of inputs, whatever the batch's shapes).
        self._unsized = {}
        self.misses = 0

    def key(self, func, args, kwargs):
        """The lookup key of a call, or None when an argument has no
        stable signature (then nothing is remembered)."""
        try:
            sig = _signature(args, [func])
            if kwargs:
                _signature(sorted(kwargs.items()), sig)
            return tuple(sig)
        except (TypeError, RuntimeError):     # RuntimeError: a nested tensor's shape
            return None

    def guess(self, key, func, args, kwargs, input_bytes, largest_input):
        """(bytes, sure): the bytes the call will make, of which `sure` are
        known: remembered (all, unless its sizes depend on the data), from
        meta tensors (all, or largest_input if it is more, the meta bytes
        sure), else input_bytes (none sure)."""
        made = self._made.get(key) if key is not None else None
        if made is not None:
            # nonzero, unique, ...: the same shapes need not make as much.
            return made, 0 if _data_dependent(func, args) else made
        self.misses += 1
        try:
            nbytes = _meta_bytes(func, args, kwargs)
        except Exception:            # no meta kernel, data-dependent shape, ...
            # Shapes that change every step (bucketed lengths) are a new
            # call each time: the most the op made before, or its inputs.
            if key is not None:
                self._meta[key] = func, None
            return max(input_bytes, self._unsized.get(func, 0)), 0
        if key is not None:
            self._meta[key] = func, nbytes
        # A meta kernel that said less than the op made before (torch
        # 1.13's _embedding_bag leaves max_indices empty): that much more,
        # and a guess.
        short = self._short.get(func)
        if short is not None:
            return nbytes + short, nbytes
        return max(nbytes, largest_input), nbytes

    def known(self, key):
        """What the call made before; 0 when never seen."""
        return self._made.get(key, 0)

    def made(self, key, nbytes):
        """The call made nbytes of new storages."""
        said = self._meta.pop(key, None) if self._meta else None
        if said is not None:
            func, meta = said
            if meta is None:
                self._unsized[func] = max(self._unsized.get(func, 0), nbytes)
            elif nbytes > meta:
                self._short[func] = max(self._short.get(func, 0), nbytes - meta)
        if key is not None:
            if len(self._made) >= _REMEMBERED:
                # A loop whose shapes never repeat (a sequence length per
                # batch): start again rather than grow without end.
                self._made.clear()
            self._made[key] = nbytes
