"""What an op and a copy cost, as chameleon.torch tells the runtime
(docs/pytorch.md, "Pricing").

The planner chooses between sending a storage away and making it again by
their costs: a copy's bytes over the host link against the time of the op
that made it. The glue knows them in one of two ways:

  preset    A GPU preset's figures (``chameleon devices``): a matrix product
            or a convolution costs its flops at the preset's peak, any other
            op the bytes it reads and writes at the memory's bandwidth (the
            runtime prices those), a copy its bytes over the host link. For
            CUDA tensors, whose ops are asynchronous: a clock around one
            times its launch, not its work.
  measured  This machine (``device="cpu"``): an op costs the wall time it
            took, a copy its bytes at the host memory's bandwidth, measured
            once per process. For CPU tensors a preset prices a GPU that is
            not there: it recomputes a convolution in microseconds that
            takes milliseconds here, where copying the output takes less.

``device=None`` (the default) is ``"cpu"`` where torch sees no GPU, else the
preset named like the GPU.
"""
import ctypes
import time

import torch

__all__ = ["resolve", "host_copy_bandwidth", "flops_of"]

MEASURED = "cpu"

# GPU names (torch.cuda.get_device_name) to presets; the first match wins.
_GPU_PRESETS = (("H100", "h100-80g"), ("A100", "a100-80g"), ("V100", "v100-16g"),
                ("3090", "rtx3090-24g"))
_DEFAULT_GPU_PRESET = "a100-80g"


def resolve(device):
    """(preset or None, measured): the preset the runtime is made with (None:
    its default) and whether ops are priced by their wall time."""
    if device is None:
        if not torch.cuda.is_available():
            return None, True
        name = torch.cuda.get_device_name()
        return next((p for key, p in _GPU_PRESETS if key in name), _DEFAULT_GPU_PRESET), False
    if device == MEASURED:
        return None, True
    return device, False


_bandwidth = None


def host_copy_bandwidth(nbytes=16 << 20, rounds=3):
    """Bytes per second one thread copies between two host buffers larger
    than a cache (the best of a few rounds), measured once per process so
    that every Offload of a run plans with the same figure. Plain memory,
    not torch: it runs under any dispatch mode without being seen."""
    global _bandwidth
    if _bandwidth is None:
        src, dst = bytearray(b"\x01") * nbytes, bytearray(nbytes)    # pages touched
        s = (ctypes.c_char * nbytes).from_buffer(src)
        d = (ctypes.c_char * nbytes).from_buffer(dst)
        best = None
        for _ in range(rounds):
            t = time.perf_counter_ns()
            ctypes.memmove(d, s, nbytes)
            took = time.perf_counter_ns() - t
            best = took if best is None else min(best, took)
        del s, d
        _bandwidth = nbytes / (max(best, 1) * 1e-9)
    return _bandwidth


def _matmul(a, b):
    return lambda args, result: 2.0 * args[a].numel() * args[b].size(-1)


def _macs_per_element(weight):
    """Multiply-adds per output element of a convolution (per input element
    of a transposed one): the weight's elements per output channel (input
    channel, transposed)."""
    return weight.numel() / max(weight.size(0), 1)


def _convolution(args, result):
    # (input, weight, bias, stride, padding, dilation, transposed, ...)
    x, w, transposed = args[0], args[1], args[6]
    return 2.0 * (x.numel() if transposed else result.numel()) * _macs_per_element(w)


def _convolution_backward(args, result):
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #  transposed, output_padding, groups, output_mask): the input's and the
    # weight's gradient each cost the forward's flops.
    g, x, w, transposed, mask = args[0], args[1], args[2], args[7], args[10]
    forward = 2.0 * (x.numel() if transposed else g.numel()) * _macs_per_element(w)
    return forward * (int(bool(mask[0])) + int(bool(mask[1])))


# Ops priced by their flops under a preset (2 per multiply-add); every other
# op costs its bytes at the memory's bandwidth.
_FLOPS = {"mm": _matmul(0, 1), "addmm": _matmul(1, 2), "bmm": _matmul(0, 1),
          "baddbmm": _matmul(1, 2), "addbmm": _matmul(1, 2),
          "convolution": _convolution, "convolution_backward": _convolution_backward}


def flops_of(func):
    """f(args, result) -> the flops of one run of func, or None when the op
    is priced by its bytes."""
    return _FLOPS.get(func.overloadpacket.__name__)
