"""The model zoo under chameleon.torch.Offload (issue 48, item 5): each loop
of zoo.py at 70%, 50% and 35% of its plain peak, as a byte budget and as a
percentage budget, judged by tracker.Tracker (it asks chameleon nothing).

    cd python/tests && PYTHONPATH=<build>/python /usr/bin/python3 -m unittest -v test_zoo

What a user relies on, per run:
  - losses and parameters (and buffers) bit-identical to the plain run;
  - a byte budget B: every step's tracked peak, step 0 included, <= B;
  - a percentage budget "P%": off.stats["budget_bytes"] is at most P% of
    the plain run's steady peak (10% slack for the glue's estimate from
    step 0), and every step from step 1 on holds <= it;
  - a budget below the floor (the model state, parameters + buffers +
    gradients + optimizer state, plus the largest op's other inputs and
    outputs, both measured by the tracker on the plain run) may end in a
    chameleon.ChameleonError naming the op and the bytes, or run within
    it; at or above the floor, an error is a failure;
  - strict=False below the floor: the run goes on, bit for bit, and
    off.stats["over_budget_steps"] counts at least the steps the tracker
    saw over.
Byte budgets are priced as an a100-80g, percentages by this machine's
measured op times (docs/pytorch.md, "Pricing").
The plain run's peak P is its steady peak: the most any step from 2 on
held (the optimizer's state exists from step 1's end at the latest).
"""
import unittest

import torch

import chameleon
import chameleon.torch as ct
import tracker
import zoo

FRACTIONS = (0.70, 0.50, 0.35)
PERCENT_SLACK = 1.10

_plain = {}


class _Plain:
    """A loop's plain run, tracked: the reference for every budget."""

    def __init__(self, name):
        tr = tracker.Tracker()
        self.losses, self.params = zoo.LOOPS[name](tracker=tr)
        self.peaks = tr.peaks
        self.peak = tr.steady_peak(2)
        state = max(tr.state_bytes[1:])
        op_bytes, op_name = max(tr.largest_op_nonstate[1:])
        self.floor = state + op_bytes
        self.floor_text = (f"floor {self.floor} B = model state {state} B + op {op_name}'s "
                           f"other inputs and outputs {op_bytes} B")


def plain(name):
    if name not in _plain:
        _plain[name] = _Plain(name)
    return _plain[name]


def _ranges(steps):
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out, start = [], None
    for i, s in enumerate(steps):
        if start is None:
            start = s
        if i + 1 == len(steps) or steps[i + 1] != s + 1:
            out.append(f"{start}-{s}" if s != start else f"{s}")
            start = None
    return ", ".join(out)


def _first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"loss {i}: {x!r} vs plain {y!r}"
    return f"{len(a)} losses vs plain {len(b)}"


class Zoo(unittest.TestCase):
    def _run(self, name, frac, kind):
        torch.set_num_threads(1)
        base = plain(name)
        pct = round(frac * 100)
        if kind == "bytes":
            budget = int(base.peak * frac)
            what = f"{name} at {budget} B ({pct}% of the plain steady peak {base.peak} B)"
        else:
            budget = f"{pct}%"
            what = f"{name} at \"{pct}%\" (plain steady peak {base.peak} B)"
        logs = []
        # Both pricings (docs/pytorch.md, "Pricing"): a GPU preset's under
        # byte budgets, this machine's measured times (what a user of the
        # CPU device gets) under percentages.
        device = "a100-80g" if kind == "bytes" else None
        off = ct.Offload(budget=budget, device=device, log=logs.append)
        tr = tracker.Tracker()
        error = None
        try:
            losses, params = zoo.LOOPS[name](off=off, tracker=tr)
        except chameleon.ChameleonError as e:
            error = e
        budget_bytes = budget if kind == "bytes" else off.stats["budget_bytes"]
        what += f", budget_bytes {budget_bytes}"
        if error is not None:
            self.assertLess(budget_bytes, base.floor,
                            f"{what}: ChameleonError at or above the floor "
                            f"({base.floor_text}): {error}")
            text = str(error)
            self.assertRegex(text, r"\d{3,}", f"{what}: the error names no bytes: {text}")
            self.assertRegex(text, r"aten[.:]", f"{what}: the error names no op: {text}")
            return
        self.assertEqual(losses, base.losses, f"{what}: losses differ: "
                         f"{_first_difference(losses, base.losses)}")
        self.assertEqual(sorted(params), sorted(base.params), f"{what}: other state_dict keys")
        for k, v in params.items():
            self.assertTrue(torch.equal(v, base.params[k]), f"{what}: {k} differs from plain")
        if kind == "percent":
            self.assertLessEqual(budget_bytes, int(base.peak * frac * PERCENT_SLACK),
                                 f"{what}: \"{pct}%\" became more than {pct}% (+10%) of the "
                                 f"steady peak")
        first = 0 if kind == "bytes" else 1
        over = [(s, p) for s, p in enumerate(tr.peaks) if s >= first and p > budget_bytes]
        if over:
            s, p = over[0]
            worst = max(over, key=lambda o: o[1])
            below = " (below the floor: an error would do)" if budget_bytes < base.floor else ""
            self.fail(f"{what}: step {s} tracked {p} B > budget {budget_bytes} B "
                      f"({p / budget_bytes:.1%}); {len(over)} of {len(tr.peaks) - first} steps "
                      f"over (steps {_ranges([o[0] for o in over])}), worst step {worst[0]} "
                      f"{worst[1]} B ({worst[1] / budget_bytes:.1%}) at {tr.peak_at[worst[0]]}; "
                      f"{base.floor_text}{below}; off.stats {off.stats}")


def _case(name, frac, kind):
    def test(self):
        self._run(name, frac, kind)
    test.__doc__ = f"{name}, {round(frac * 100)}% as {kind}"
    return test


for _name in zoo.LOOPS:
    for _frac in FRACTIONS:
        for _kind in ("bytes", "percent"):
            setattr(Zoo, f"test_{_name}_{round(_frac * 100)}_{_kind}", _case(_name, _frac, _kind))


class NotStrict(unittest.TestCase):
    """strict=False below the floor: the run goes on, bit for bit, and every
    step the tracker saw over the budget is counted in the stats (never
    silently over)."""

    def test_below_the_floor_runs_on_and_counts(self):
        torch.set_num_threads(1)
        name = "mlp"
        base = plain(name)
        budget = int(base.floor * 0.8)
        what = f"{name} at {budget} B (80% of its {base.floor_text}), strict=False"
        off = ct.Offload(budget=budget, device="a100-80g", log=lambda _: None, strict=False)
        tr = tracker.Tracker()
        losses, params = zoo.LOOPS[name](off=off, tracker=tr)
        self.assertEqual(losses, base.losses, f"{what}: losses differ")
        for k, v in params.items():
            self.assertTrue(torch.equal(v, base.params[k]), f"{what}: {k} differs from plain")
        over = [s for s, p in enumerate(tr.peaks) if p > budget]
        self.assertGreaterEqual(off.stats["over_budget_steps"], len(over),
                                f"{what}: the tracker saw steps {_ranges(over)} over, "
                                f"off.stats {off.stats}")


class Floors(unittest.TestCase):
    """The zoo's plain runs: repeatable, and the floor below the peak (a
    floor at the peak would let every budget end in an error)."""

    def test_plain_runs_repeat_bit_for_bit(self):
        for name in zoo.LOOPS:
            with self.subTest(loop=name):
                base = plain(name)
                losses, params = zoo.LOOPS[name]()
                self.assertEqual(losses, base.losses)
                for k, v in params.items():
                    self.assertTrue(torch.equal(v, base.params[k]), k)

    def test_every_loop_has_a_budget_above_its_floor(self):
        for name in zoo.LOOPS:
            with self.subTest(loop=name):
                base = plain(name)
                self.assertLess(base.floor, base.peak * FRACTIONS[0],
                                f"{name}: {base.floor_text}, steady peak {base.peak} B")


if __name__ == "__main__":
    unittest.main()
