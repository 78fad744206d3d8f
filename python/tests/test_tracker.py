"""tracker.Tracker, the zoo's judge (test_zoo.py), on plain torch: it must
see every byte a training loop holds, including what only autograd and the
optimizer reference, and nothing that is gone.

    cd python/tests && /usr/bin/python3 -m unittest -v test_tracker

Expected values are computed here from shapes, never read from the tracker.
"""
import unittest

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import tracker

B, D_IN, H, D_OUT = 64, 256, 128, 32
F32 = 4
SLACK = 1024        # scalars: the loss, a mean's output, Adam's step counters


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D_IN, H), nn.ReLU(), nn.Linear(H, D_OUT))


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


class PlainLoop(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)
        self.model = _model()
        self.params = _nbytes(self.model.parameters())
        # What autograd saves in the forward below: x (addmm's input), the
        # ReLU's output (the ReLU's result and the second addmm's input),
        # the second layer's output (square's input).
        self.saved = (B * D_IN + B * H + B * D_OUT) * F32

    def _forward(self):
        x = torch.randn(B, D_IN)
        return self.model(x).square().mean()   # only autograd holds x and the rest

    def test_parameters_before_any_op(self):
        tr = tracker.Tracker(state=lambda: list(self.model.parameters()))
        with tr:
            self.assertEqual(tr.live_bytes(), self.params)
        # Without state= it knows a parameter from its first op only.
        tr = tracker.Tracker()
        with tr:
            self.assertEqual(tr.live_bytes(), 0)
            loss = self._forward()
            self.assertGreaterEqual(tr.live_bytes(), self.params + self.saved)
            del loss

    def test_a_sparse_gradient_counts_its_indices_and_values(self):
        # nn.Embedding(sparse=True)'s gradient is a sparse COO tensor: its
        # bytes are its indices' and values' storages.
        emb = torch.nn.Embedding(1000, 64, sparse=True)
        idx = torch.tensor([1, 5, 7, 5])
        tr = tracker.Tracker(state=lambda: list(emb.parameters()))
        with tr:
            emb(idx).sum().backward()
            live = tr.live_bytes()
        g = emb.weight.grad               # read outside: its parts are no op's outputs here
        self.assertTrue(g.is_sparse)
        want = 1000 * 64 * F32 + g._values().numel() * F32 + g._indices().numel() * 8
        self.assertGreaterEqual(live, want)

    def test_saved_activations_only_autograd_holds(self):
        tr = tracker.Tracker(state=lambda: list(self.model.parameters()))
        with tr:
            loss = self._forward()
            live = tr.live_bytes() - self.params
            self.assertGreaterEqual(live, self.saved)
            self.assertLessEqual(live, self.saved + SLACK)
            del loss            # the graph and its saved tensors go
            self.assertLessEqual(tr.live_bytes(), self.params + SLACK)

    def test_gradients_accumulategrad_makes_and_zero_grad_drops(self):
        opt = torch.optim.Adam(self.model.parameters())
        tr = tracker.Tracker(state=lambda: list(self.model.parameters()))
        with tr:
            for p in self.model.parameters():
                self.assertIsNone(p.grad)
            self._forward().backward()      # AccumulateGrad makes p.grad
            live = tr.live_bytes()
            self.assertGreaterEqual(live, 2 * self.params)
            self.assertLessEqual(live, 2 * self.params + SLACK)
            opt.step()                      # Adam's exp_avg, exp_avg_sq
            live = tr.live_bytes()
            self.assertGreaterEqual(live, 4 * self.params)
            self.assertLessEqual(live, 4 * self.params + SLACK)
            opt.zero_grad(set_to_none=True)
            live = tr.live_bytes()
            self.assertGreaterEqual(live, 3 * self.params)
            self.assertLessEqual(live, 3 * self.params + SLACK)

    def test_step_peaks_of_a_loop(self):
        opt = torch.optim.Adam(self.model.parameters())
        tr = tracker.Tracker(state=lambda: tracker.state_tensors(self.model, [opt]))
        with tr:
            for _ in range(4):
                loss = self._forward()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del loss
                tr.step()
        self.assertEqual(len(tr.peaks), 4)
        # From step 1: parameters, Adam's two moments and the saved
        # activations at the end of the forward; during the backward the
        # gradients come while activations go, so the peak is at least that.
        floor = 3 * self.params + self.saved
        for s in (1, 2, 3):
            self.assertGreaterEqual(tr.peaks[s], floor, f"step {s}")
            # ... and at most everything at once: the above, the gradients,
            # two backward temporaries of the hidden layer's size, and
            # Adam's two temporaries of a parameter's size (sqrt, then div).
            largest = D_IN * H * F32
            self.assertLessEqual(tr.peaks[s], 4 * self.params + self.saved + B * H * 2 * F32 +
                                 2 * largest + SLACK, f"step {s}")
        self.assertEqual(tr.peaks[1], tr.peaks[3])
        # The model state at a step's end: parameters, moments, no gradients
        # (given as their bytes: set_to_none).
        self.assertGreaterEqual(tr.state_bytes[1], 4 * self.params)
        self.assertLessEqual(tr.state_bytes[1], 4 * self.params + SLACK)

    def test_agrees_with_the_profilers_allocator_events(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        peaks = []
        for tr in (tracker.Tracker(), tracker.ProfilerTracker()):
            tr.state_fn = lambda: tracker.state_tensors(self.model, [opt])
            with tr:
                for _ in range(3):
                    loss = self._forward()
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    del loss
                    tr.step()
            peaks.append(tr.peaks)
        ours, profiler = peaks
        self.assertEqual(len(profiler), 3)
        for s in (1, 2):
            # The profiler also sees kernels' scratch: at least ours, and
            # not much more on these small ops.
            self.assertGreaterEqual(profiler[s] + SLACK, ours[s], f"step {s}")
            self.assertLessEqual(profiler[s], ours[s] * 1.25, f"step {s}")


class Released(unittest.TestCase):
    N = 1 << 18     # bytes

    def _two(self, tr):
        a = torch.empty(self.N, dtype=torch.uint8).fill_(1)
        b = torch.empty(self.N, dtype=torch.uint8).fill_(2)
        return a, b

    def test_a_released_storage_counts_zero(self):
        tr = tracker.Tracker()
        with tr:
            a, b = self._two(tr)
            self.assertEqual(tr.live_bytes(), 2 * self.N)
            a._storage().resize_(0)                  # what a glue does to send it away
            self.assertEqual(tr.live_bytes(), self.N)
            a._storage().resize_(self.N)
            self.assertEqual(tr.live_bytes(), 2 * self.N)
            del a
            self.assertEqual(tr.live_bytes(), self.N)
            del b

    def _bring_back_then_send_away(self, watch):
        tr = tracker.Tracker(watch_resize=watch)
        with tr:
            a, b = self._two(tr)
            a._storage().resize_(0)
            tr.step()
            # Outside any op: a comes back before b goes away.
            a._storage().resize_(self.N)
            b._storage().resize_(0)
            tr.step()
        return tr.peaks

    def test_a_moment_outside_ops_when_both_are_back(self):
        self.assertEqual(self._bring_back_then_send_away(True)[1], 2 * self.N)
        # Negative control: without the resize watch the moment is missed.
        self.assertEqual(self._bring_back_then_send_away(False)[1], self.N)


class _Scratch(TorchDispatchMode):
    """A mode that holds a scratch tensor of its own while each mm runs, as
    a glue's re-dispatched ops would."""
    N = 1 << 20

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            scratch = torch.zeros(self.N, dtype=torch.uint8)
            out = func(*args, **(kwargs or {}))
            scratch.fill_(0)        # still held while the op ran
            return out
        return func(*args, **(kwargs or {}))


class Stacking(unittest.TestCase):
    def _peak(self, inner):
        a, b = torch.randn(8, 8), torch.randn(8, 8)
        tr = tracker.Tracker()
        with tr:
            with inner if inner is not None else torch.no_grad():
                (a @ b).sum()
            tr.step()
        return tr.peaks[0]

    def test_a_tracker_entered_first_sees_the_inner_modes_ops(self):
        self.assertGreaterEqual(self._peak(_Scratch()), _Scratch.N)
        self.assertLess(self._peak(None), _Scratch.N)       # negative control


if __name__ == "__main__":
    unittest.main()
