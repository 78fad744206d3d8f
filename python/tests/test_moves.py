"""chameleon._moves and the Copier under it (python/chameleon/_copier.c): the
copies chameleon.torch makes, run on worker threads with events, so its
ordering (wait before use, free after the copy, no reuse of a buffer a copy
still reads) is tested with real concurrency on a CPU-only machine.

Races are made deterministic with Copier.pause() (the workers start no copy
until resume()), never by timing; delay_us only widens the windows."""
import ctypes
import gc
import random
import threading
import unittest

from chameleon import _chameleon

try:
    import torch
except ImportError:          # the Copier's own tests need no torch
    torch = None

if torch is not None:
    from chameleon import _moves

needs_torch = unittest.skipIf(torch is None, "python3-torch is not installed")

POISON = b"\xf5\x7f"


def raw(data):
    """A ctypes buffer holding data, and its address."""
    buf = ctypes.create_string_buffer(bytes(data), len(data))
    return buf, ctypes.addressof(buf)


def random_bytes(rng, n):
    return bytes(rng.getrandbits(8) for _ in range(n))


@needs_torch
class Poison(unittest.TestCase):
    def test_poison_is_nan_in_every_float_dtype_and_no_small_integer(self):
        t = torch.zeros(64, dtype=torch.uint8)
        _chameleon.Copier().poison(t.data_ptr(), 64)
        self.assertEqual(bytes(t.tolist()), POISON * 32)
        for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            self.assertTrue(torch.isnan(t.view(dtype)).all(), dtype)
        self.assertEqual(set(t.view(torch.int32).tolist()), {0x7FF57FF5})
        self.assertEqual(set(t.view(torch.int16).tolist()), {0x7FF5})
        self.assertEqual(_moves.POISON, POISON)

    def test_odd_length_keeps_the_pattern_in_phase(self):
        t = torch.zeros(37, dtype=torch.uint8)
        _chameleon.Copier().poison(t.data_ptr(), 37)
        self.assertEqual(bytes(t.tolist()), (POISON * 19)[:37])


class CopierRaw(unittest.TestCase):
    """The Copier on raw addresses (ctypes buffers)."""

    def test_out_then_into_round_trips_bytes(self):
        rng = random.Random(1)
        c = _chameleon.Copier()
        data = random_bytes(rng, 4099)
        src, src_ptr = raw(data)
        hc = c.out(src_ptr, len(data))
        self.assertEqual(hc.nbytes, len(data))
        self.assertEqual(hc.tobytes(), data)
        self.assertTrue(hc.copied.done())
        dst, dst_ptr = raw(bytes(len(data)))
        c.into(hc, dst_ptr, len(data)).wait()
        self.assertEqual(dst.raw, data)

    def test_out_reads_the_bytes_when_it_runs_not_when_queued(self):
        # The contract the caller keeps (bytes unchanged until copied is
        # done), shown to matter: a write before the copy ran lands in it.
        c = _chameleon.Copier()
        src, ptr = raw(b"before")
        c.pause()
        hc = c.out(ptr, 6)
        self.assertFalse(hc.copied.done())
        ctypes.memmove(ptr, b"after!", 6)
        c.resume()
        self.assertEqual(hc.tobytes(), b"after!")

    def test_hostcopy_released_while_a_copy_reads_it_is_freed_after(self):
        c = _chameleon.Copier()
        data = bytes(range(256)) * 64
        src, src_ptr = raw(data)
        dst, dst_ptr = raw(bytes(len(data)))
        c.pause()
        hc = c.out(src_ptr, len(data))
        ev = c.into(hc, dst_ptr, len(data))
        del hc
        gc.collect()
        # The buffer outlives its HostCopy: two copies still use it.
        self.assertEqual(c.stats()["host_buffers"], 1)
        c.resume()
        ev.wait()
        self.assertEqual(dst.raw, data)
        c.synchronize()
        self.assertEqual(c.stats()["host_buffers"], 0)

    def test_shutdown_runs_the_jobs_still_queued(self):
        rng = random.Random(2)
        c = _chameleon.Copier(delay_us=200)
        keep = []
        c.pause()
        for _ in range(40):
            data = random_bytes(rng, rng.randrange(1, 300))
            src, src_ptr = raw(data)
            dst, dst_ptr = raw(bytes(len(data)))
            c.into(c.out(src_ptr, len(data)), dst_ptr, len(data))   # both dropped
            keep.append((data, src, dst))
        self.assertEqual(c.stats()["pending"], 80)
        del c           # paused, 80 jobs queued: the dealloc drains and joins
        for data, _, dst in keep:
            self.assertEqual(dst.raw, data)

    def test_ten_thousand_small_jobs(self):
        rng = random.Random(3)
        n, size = 10000, 24
        data = random_bytes(rng, n * size)
        src, src_ptr = raw(data)
        dst, dst_ptr = raw(bytes(n * size))
        c = _chameleon.Copier()
        events = []
        for i in range(n):
            hc = c.out(src_ptr + i * size, size)
            events.append(c.into(hc, dst_ptr + (n - 1 - i) * size, size))
        for ev in events:
            ev.wait()
        want = b"".join(data[(n - 1 - i) * size:(n - i) * size] for i in range(n))
        self.assertEqual(dst.raw, want)
        del events, ev, hc      # the last HostCopy and Event of the loops
        c.synchronize()
        s = c.stats()
        self.assertEqual((s["jobs_done"], s["bytes_copied"]), (2 * n, 2 * n * size))
        self.assertEqual((s["pending"], s["host_buffers"], s["events"]), (0, 0, 0))

    def test_threads_share_one_copier(self):
        c = _chameleon.Copier()
        failures = []

        def worker(seed):
            rng = random.Random(seed)
            for _ in range(300):
                data = random_bytes(rng, rng.randrange(1, 200))
                src, src_ptr = raw(data)
                dst, dst_ptr = raw(bytes(len(data)))
                c.into(c.out(src_ptr, len(data)), dst_ptr, len(data)).wait()
                if dst.raw != data:
                    failures.append(seed)
        threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])

    def test_bad_calls_raise(self):
        c, other = _chameleon.Copier(), _chameleon.Copier()
        src, ptr = raw(b"12345678")
        with self.assertRaisesRegex(ValueError, "bad region"):
            c.out(0, 8)
        with self.assertRaisesRegex(ValueError, "bad region"):
            c.out(ptr, -1)
        hc = c.out(ptr, 8)
        with self.assertRaisesRegex(ValueError, "destination holds 4 bytes, the host copy 8"):
            c.into(hc, ptr, 4)
        with self.assertRaisesRegex(ValueError, "another Copier"):
            other.into(hc, ptr, 8)
        with self.assertRaises(TypeError):
            c.into(b"12345678", ptr, 8)
        with self.assertRaisesRegex(ValueError, "delay_us"):
            _chameleon.Copier(delay_us=-1)
        c.pause()
        hc2 = c.out(ptr, 8)
        with self.assertRaisesRegex(RuntimeError, "paused"):
            hc2.copied.wait()
        with self.assertRaisesRegex(RuntimeError, "paused"):
            c.synchronize()
        c.resume()
        hc2.copied.wait()


def filled(rng, nbytes, dtype=torch.uint8 if torch else None):
    t = torch.tensor(list(random_bytes(rng, nbytes)), dtype=torch.uint8)
    return t.view(dtype) if dtype is not torch.uint8 else t


@needs_torch
class CpuMovesRoundTrip(unittest.TestCase):
    def test_many_storages_random_sizes_interleaved(self):
        rng = random.Random(4)
        moves = _moves.CpuMoves()
        tensors = [filled(rng, rng.randrange(1, 1 << 16)) for _ in range(120)]
        refs = [t.clone() for t in tensors]
        away = {}            # index -> moved
        inbound = {}
        # Out, release and in interleave: copies of some storages run while
        # others are released or handed back.
        for step in range(600):
            i = rng.randrange(len(tensors))
            s = _moves.storage_of(tensors[i])
            if i in inbound:
                moves.wait(inbound.pop(i))
                self.assertTrue(torch.equal(tensors[i], refs[i]), i)
            elif i in away:
                inbound[i] = moves.copy_in(away.pop(i), s)   # moved dropped here
            else:
                moved = moves.copy_out(s)
                moves.release(moved, s)
                self.assertEqual(s.nbytes(), 0)
                away[i] = moved
        for i, moved in list(away.items()):
            inbound[i] = moves.copy_in(moved, _moves.storage_of(tensors[i]))
        away.clear()
        for i, ib in inbound.items():
            moves.wait(ib)
        for t, r in zip(tensors, refs):
            self.assertTrue(torch.equal(t, r))
        del moved, ib, inbound          # the last HostCopy and inbound of the loops
        moves.synchronize()
        self.assertEqual(moves.copier.stats()["host_buffers"], 0)

    def test_with_delay_the_waited_bytes_are_right(self):
        rng = random.Random(5)
        moves = _moves.CpuMoves(delay_us=2000)
        tensors = [filled(rng, 4 * rng.randrange(1, 5000), torch.float32) for _ in range(20)]
        refs = [t.clone() for t in tensors]
        moved = []
        for t in tensors:
            s = _moves.storage_of(t)
            m = moves.copy_out(s)
            moves.release(m, s)
            moved.append(m)
        inbound = [moves.copy_in(m, _moves.storage_of(t)) for m, t in zip(moved, tensors)]
        del moved
        for ib, t, r in zip(inbound, tensors, refs):
            moves.wait(ib)
            self.assertTrue(torch.equal(t.view(torch.uint8), r.view(torch.uint8)))

    def test_ten_thousand_small_storages(self):
        rng = random.Random(6)
        moves = _moves.CpuMoves()
        tensors = [filled(rng, rng.randrange(1, 64)) for _ in range(10000)]
        refs = [bytes(t.tolist()) for t in tensors]
        moved = []
        for t in tensors:
            s = _moves.storage_of(t)
            m = moves.copy_out(s)
            moves.release(m, s)
            moved.append(m)
        inbound = [moves.copy_in(m, _moves.storage_of(t)) for m, t in zip(moved, tensors)]
        del moved
        for ib in inbound:
            moves.wait(ib)
        self.assertEqual([bytes(t.tolist()) for t in tensors], refs)
        self.assertEqual(moves.copier.stats()["jobs_done"], 20000)


@needs_torch
class CpuMovesOrdering(unittest.TestCase):
    """A missing wait changes the bytes; the waits the glue makes fix them."""

    def setUp(self):
        self.moves = _moves.CpuMoves()
        self.t = torch.arange(1, 1025, dtype=torch.float32)
        self.ref = self.t.clone()
        self.s = _moves.storage_of(self.t)

    @unittest.skipUnless(_chameleon.DEBUG_CHECKS,
                         "the extension was built without CHAM_DEBUG_CHECKS: no poison")
    def test_reading_before_wait_sees_the_poison_and_after_it_the_data(self):
        moved = self.moves.copy_out(self.s)
        self.moves.release(moved, self.s)
        self.moves.copier.pause()
        inbound = self.moves.copy_in(moved, self.s)
        # The copy back has not run: the storage holds poison, not stale
        # data or zeros, so a missing wait cannot pass unnoticed.
        self.assertTrue(torch.isnan(self.t).all())
        self.assertEqual(bytes(self.t.view(torch.uint8).tolist()), POISON * 2048)
        self.moves.copier.resume()
        self.moves.wait(inbound)
        self.assertTrue(torch.equal(self.t, self.ref))

    def test_release_waits_for_the_copy_out(self):
        self.moves.copier.pause()
        moved = self.moves.copy_out(self.s)
        # The copy has not read the storage: release must not free it yet
        # (paused, its wait would never end, so it says so).
        with self.assertRaisesRegex(RuntimeError, "paused"):
            self.moves.release(moved, self.s)
        self.assertEqual(self.s.nbytes(), 4096)
        self.moves.copier.resume()
        self.moves.release(moved, self.s)
        inbound = self.moves.copy_in(moved, self.s)
        self.moves.wait(inbound)
        self.assertTrue(torch.equal(self.t, self.ref))

    def test_release_without_waiting_frees_only_once_the_copy_read_it(self):
        self.moves.copier.pause()
        moved = self.moves.copy_out(self.s)
        # The compute thread goes on: not freed, not blocked.
        self.assertFalse(self.moves.release(moved, self.s, wait=False))
        self.assertEqual(self.s.nbytes(), 4096)
        self.moves.copier.resume()
        moved.copied.wait()
        self.assertTrue(self.moves.release(moved, self.s, wait=False))
        self.assertEqual(self.s.nbytes(), 0)
        self.moves.wait(self.moves.copy_in(moved, self.s))
        self.assertTrue(torch.equal(self.t, self.ref))

    def test_kept_before_release_it_may_be_written_once_the_copy_read_it(self):
        self.moves.copier.pause()
        moved = self.moves.copy_out(self.s)
        self.assertFalse(self.moves.release(moved, self.s, wait=False))
        # keep waits for the copy out (paused, that wait would never end).
        with self.assertRaisesRegex(RuntimeError, "paused"):
            self.moves.keep(moved, self.s)
        self.moves.copier.resume()
        self.moves.keep(moved, self.s)
        self.assertTrue(moved.copied.done())
        self.t.add_(1)                       # the copy read the old bytes already
        self.assertEqual(moved.tobytes(), bytes(self.ref.view(torch.uint8).tolist()))
        self.assertTrue(torch.equal(self.t, self.ref + 1))

    def test_negative_control_a_release_without_the_wait_corrupts_the_copy(self):
        class NoWait(_moves.CpuMoves):
            def release(self, moved, storage, wait=True):   # the bug: no moved.copied.wait()
                self.copier.poison(storage.data_ptr(), moved.nbytes)
        moves = NoWait()
        moves.copier.pause()
        moved = moves.copy_out(self.s)
        moves.release(moved, self.s)
        moves.copier.resume()
        self.assertEqual(moved.tobytes(), POISON * 2048)

    def test_a_use_before_wait_is_refused(self):
        moved = self.moves.copy_out(self.s)
        self.moves.release(moved, self.s)
        self.moves.copier.pause()
        inbound = self.moves.copy_in(moved, self.s)
        with self.assertRaisesRegex(RuntimeError, "not been waited for"):
            self.moves.copy_out(self.s)
        with self.assertRaisesRegex(RuntimeError, "not been waited for"):
            self.moves.release(moved, self.s)
        self.moves.copier.resume()
        self.moves.wait(inbound)
        self.moves.release(self.moves.copy_out(self.s), self.s)   # fine now

    def test_hostcopy_dropped_while_the_copy_back_reads_it(self):
        moved = self.moves.copy_out(self.s)
        self.moves.release(moved, self.s)
        self.moves.copier.pause()
        inbound = self.moves.copy_in(moved, self.s)
        del moved
        gc.collect()
        self.assertEqual(self.moves.copier.stats()["host_buffers"], 1)
        self.moves.copier.resume()
        self.moves.wait(inbound)
        self.assertTrue(torch.equal(self.t, self.ref))
        self.moves.synchronize()
        self.assertEqual(self.moves.copier.stats()["host_buffers"], 0)


@needs_torch
class CpuMovesErrors(unittest.TestCase):
    def setUp(self):
        self.moves = _moves.CpuMoves()

    def test_copy_in_into_a_storage_of_the_wrong_size(self):
        a = torch.arange(10, dtype=torch.uint8)
        b = torch.arange(20, dtype=torch.uint8)
        sa, sb = _moves.storage_of(a), _moves.storage_of(b)
        moved = self.moves.copy_out(sa)
        self.moves.release(moved, sa)
        with self.assertRaisesRegex(ValueError, r"CpuMoves.copy_in: the storage holds 20 bytes; "
                                    r"the 10 bytes of the host copy go back into a released "
                                    r"storage \(0 bytes\)"):
            self.moves.copy_in(moved, sb)
        self.assertTrue(torch.equal(b, torch.arange(20, dtype=torch.uint8)))   # untouched
        self.moves.wait(self.moves.copy_in(moved, sa))
        self.assertTrue(torch.equal(a, torch.arange(10, dtype=torch.uint8)))

    def test_release_of_another_storage(self):
        sa = _moves.storage_of(torch.zeros(10, dtype=torch.uint8))
        sb = _moves.storage_of(torch.zeros(12, dtype=torch.uint8))
        moved = self.moves.copy_out(sa)
        with self.assertRaisesRegex(ValueError, "holds 12 bytes, its host copy 10"):
            self.moves.release(moved, sb)
        self.moves.release(moved, sa)
        with self.assertRaisesRegex(ValueError, "holds 0 bytes, its host copy 10"):
            self.moves.release(moved, sa)     # twice

    def test_empty_storage_has_nothing_to_move(self):
        with self.assertRaisesRegex(ValueError, "holds no bytes"):
            self.moves.copy_out(_moves.storage_of(torch.zeros(0)))

    def test_cuda_moves_refuse_a_cpu_storage(self):
        with self.assertRaisesRegex(ValueError, "a storage on cpu; this implementation moves "
                                    "cuda storages"):
            _moves.CudaMoves().copy_out(_moves.storage_of(torch.zeros(4)))


@needs_torch
@unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
class CudaMovesOnAGpu(unittest.TestCase):
    """Never run by this project (no GPU): the CUDA twin of the round trip."""

    def test_round_trip(self):
        moves = _moves.CudaMoves()
        t = torch.randn(1 << 20, device="cuda")
        ref = t.clone()
        s = _moves.storage_of(t)
        moved = moves.copy_out(s)
        moves.release(moved, s)
        moves.wait(moves.copy_in(moved, s))
        self.assertTrue(torch.equal(t, ref))


if __name__ == "__main__":
    unittest.main()
