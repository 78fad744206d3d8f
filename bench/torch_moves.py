"""The moves chameleon.torch.Offload makes in each of the zoo's loops
(python/tests/zoo.py), per step, at budgets of 70%, 50% and 35% (of the
steady peak Offload estimates from its measured first step): planned
swaps (a policy's), passive swaps (the glue making room), on-demand
swap-ins (a storage needed before the policy brought it back) and drops
(outputs a policy freed to make them again, docs/pytorch.md,
"Recomputation"), for the last three steps and in all. The counts do not depend
on the machine's speed (the runtime times its trials on the preset's
virtual clock), so they compare commits (docs/pytorch.md, "The budget").

    PYTHONPATH=build/python:python/tests /usr/bin/python3 bench/torch_moves.py [--loops a,b]
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import chameleon.torch as ct  # noqa: E402
import tracker  # noqa: E402
import zoo  # noqa: E402

FRACTIONS = (0.70, 0.50, 0.35)
KEYS = ("planned_swaps", "passive_swaps", "on_demand_swapins", "drops")


class Counting(tracker.Tracker):
    """The tracker (the peak's judge), noting the Offload's counters at
    each step's end."""

    def __init__(self, off):
        super().__init__()
        self.off = off
        self.rows = []

    def step(self):
        super().step()
        s = self.off.stats
        self.rows.append(tuple(s[k] for k in KEYS))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", default=",".join(zoo.LOOPS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("loop            budget  stage      last three steps "
          "(planned/passive/on-demand/drops)   all steps          within (tracker, from step 1)")
    for name in args.loops.split(","):
        run = zoo.LOOPS[name]
        for frac in FRACTIONS:
            # Priced as a GPU preset: the counts are the same on any machine
            # (measured pricing, the CPU device's default, is this machine's).
            off = ct.Offload(budget=f"{frac * 100:g}%", device="a100-80g",
                             log=lambda _line: None, cpu_copies="inline")
            tr = Counting(off)
            try:
                run(off=off, tracker=tr)
            except ct.ChameleonError as e:
                print(f"{name:15s} {frac:4.0%}   ChameleonError: {str(e)[:90]}")
                continue
            rows = [(0,) * len(KEYS)] + tr.rows
            last = [tuple(b - a for a, b in zip(rows[i - 1], rows[i]))
                    for i in range(len(rows) - 3, len(rows))]
            s = off.stats
            within = all(p <= s["budget_bytes"] for p in tr.peaks[1:])
            print(f"{name:15s} {frac:4.0%}   {s['stage']:9s}  "
                  f"{' '.join('/'.join(map(str, r)) for r in last):42s} "
                  f"{'/'.join(str(x) for x in rows[-1]):18s} {'yes' if within else 'NO'}")


if __name__ == "__main__":
    main()
