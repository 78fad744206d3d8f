"""Where a TorchDispatchMode's cost goes: a zoo loop (python/tests/zoo.py)
run plainly and under a dispatch mode that only calls each op, with the
aten ops' self CPU time from torch's profiler over the same steps, and the
cost per op of the mode on a tiny op alone (docs/pytorch.md, "The zoo,
measured"). Measured on this machine's CPU; never a test.

    PYTHONPATH=build/python:python/tests /usr/bin/python3 bench/torch_mode_cost.py \
        [--loop cnn] [--size large] [--rounds 3]

chameleon.torch's glue is such a mode: what the mode alone costs is the
floor of the glue's cost over plain torch. If that floor were the Python
each op runs, it would be about ops x the tiny op's cost; the table says
which kernels the rest is in. Runs under the same GLIBC_TUNABLES as
bench/torch_zoo.py (freed memory kept in the process).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import torch_zoo  # noqa: E402  (its re-exec under GLIBC_TUNABLES, LARGE sizes)
import torch  # noqa: E402
import zoo  # noqa: E402


class Window(torch_zoo.Clock):
    """Passed as a loop's tracker: the step times, and torch's profiler
    over steps [first, last)."""

    def __init__(self, first, last):
        super().__init__()
        self.first, self.last, self.n, self.prof, self.ops = first, last, 0, None, None

    def step(self):
        super().step()
        self.n += 1
        if self.n == self.first:
            self.prof = torch.autograd.profiler.profile()
            self.prof.__enter__()
        elif self.n == self.last:
            self.prof.__exit__(None, None, None)
            self.ops = {e.key: (e.self_cpu_time_total, e.count)
                        for e in self.prof.key_averages() if e.key.startswith("aten::")}


def tiny_op_cost(n=20000, repeats=5):
    """us per op of torch.add on 4 floats: plain, and under PassThrough."""
    x, y = torch.ones(4), torch.ones(4)

    def run():
        t = time.perf_counter()
        for _ in range(n):
            torch.add(x, y)
        return (time.perf_counter() - t) / n * 1e6

    plain = min(run() for _ in range(repeats))
    with torch_zoo.PassThrough():
        mode = min(run() for _ in range(repeats))
    return plain, mode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loop", default="cnn", choices=sorted(zoo.LOOPS))
    ap.add_argument("--size", choices=("small", "large"), default="large")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    torch_zoo.keep_freed_memory()
    torch.set_num_threads(1)
    run = zoo.LOOPS[a.loop]
    steps, kw = ((torch_zoo.default_steps(run), {}) if a.size == "small"
                 else torch_zoo.LARGE[a.loop])
    first, last = steps // 2, steps
    ratios, kernels = [], {"plain": [], "mode": []}
    for _ in range(a.rounds):
        t = {}
        for name, make in (("plain", None), ("mode", torch_zoo.PassThrough)):
            w = Window(first, last)
            run(off=make() if make else None, tracker=w, steps=steps, **kw)
            t[name] = statistics.median(w.step_times()[first:])
            kernels[name].append(w.ops)
        ratios.append(t["mode"] / t["plain"])
    plain_us, mode_us = tiny_op_cost()
    ops = sum(c for _, c in kernels["plain"][0].values()) / (last - first)

    def per_step(name, key):
        return statistics.median(k.get(key, (0, 0))[0] for k in kernels[name]) / (last - first)

    print(f"measured, {torch_zoo.machine()}; loop {a.loop} {a.size}, {a.rounds} rounds, "
          f"steps {first}-{last - 1} of each run")
    print(f"step time under the mode: {statistics.median(ratios):.3f}x plain (median of the "
          f"rounds' ratios; each {', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"a tiny op: {plain_us:.2f} us plain, {mode_us:.2f} us under the mode: "
          f"+{mode_us - plain_us:.2f} us an op; x {ops:.0f} aten ops a step (the profiler's "
          f"count) = {(mode_us - plain_us) * ops / 1e3:.1f} ms a step")
    keys = set().union(*kernels["plain"], *kernels["mode"])
    rows = sorted(((per_step("mode", k) - per_step("plain", k), k) for k in keys), reverse=True)
    total = sum(d for d, _ in rows)
    print(f"aten ops' self CPU time a step: plain {sum(per_step('plain', k) for k in keys) / 1e3:.1f}"
          f" ms, under the mode {sum(per_step('mode', k) for k in keys) / 1e3:.1f} ms "
          f"({total / 1e3:+.1f} ms); where the difference is (medians over rounds):")
    print(f"  {'op':40s} {'calls':>6s} {'plain ms':>9s} {'mode ms':>9s} {'extra ms':>9s} "
          f"{'us a call':>9s}")
    for d, k in rows[:a.top]:
        calls = kernels["plain"][0].get(k, (0, 0))[1] / (last - first)
        print(f"  {k:40s} {calls:6.0f} {per_step('plain', k) / 1e3:9.2f} "
              f"{per_step('mode', k) / 1e3:9.2f} {d / 1e3:9.2f} "
              f"{d / calls if calls else float('nan'):9.1f}")


if __name__ == "__main__":
    main()
