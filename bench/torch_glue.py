"""Host time per aten op of chameleon.torch's glue against a pass-through
TorchDispatchMode, measured in one run (docs/pytorch.md, "The zoo, measured").

    PYTHONPATH=build/python:python/tests /usr/bin/python3 bench/torch_glue.py

Three ways to run the same training steps of python/tests/tiny_gpt.py, each
timed over the same steps, interleaved, the median of several rounds:
  pass-through  a TorchDispatchMode that only calls the op
  glue          chameleon.torch.Offload with the device's whole memory:
                every op reported, nothing to move
  glue 50%      Offload(budget="50%"): the runtime's swaps carried out too
Prints the time per op of each and the glue's extra cost as a share of the
pass-through's (the target: at most 25%). Measured on this machine's CPU;
never a test.
"""
import argparse
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import chameleon.torch as ct
import tiny_gpt


class PassThrough(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))

    def step(self):
        pass


def steps(model, opt, mode, data):
    for x, y in data:
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        mode.step()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per round")
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = list(tiny_gpt.batches(1, a.steps, batch=a.batch))
    runs = {}
    for name, make_mode in (("pass-through", PassThrough),
                            ("glue", lambda: ct.Offload(log=lambda _: None)),
                            ("glue 50%", lambda: ct.Offload(budget="50%", log=lambda _: None))):
        model = tiny_gpt.make()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        mode = make_mode()
        with mode:          # warm: the glue reaches Stable, caches fill
            steps(model, opt, mode, data * 3)
        runs[name] = (model, opt, mode, [])
    counter = PassThrough()
    with counter:
        steps(*runs["pass-through"][:2], counter, data)
    ops = counter.ops
    for _ in range(a.rounds):
        for name, (model, opt, mode, times) in runs.items():
            with mode:
                t = time.perf_counter()
                steps(model, opt, mode, data)
                times.append(time.perf_counter() - t)
    per_op = {n: statistics.median(r[3]) / ops * 1e6 for n, r in runs.items()}
    base = per_op["pass-through"]
    print(f"torch {torch.__version__}, {ops // a.steps} aten ops a step, {a.steps} steps, "
          f"median of {a.rounds} rounds (measured, host CPU)")
    for name, us in per_op.items():
        extra = "" if name == "pass-through" else f"  extra {100 * (us - base) / base:+.1f}%"
        print(f"  {name:13s} {us:8.2f} us per op{extra}")
    s = runs["glue 50%"][2].stats
    print(f"  glue 50%: stage {s['stage']}, {s['planned_swaps']} planned swaps, peak "
          f"{s['peak_device_bytes']} of {s['budget_bytes']} budget bytes")


if __name__ == "__main__":
    main()
