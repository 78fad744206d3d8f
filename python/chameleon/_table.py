"""The storages an Offload knows: one entry per torch storage, keyed by the
storage itself, never by the user's tensors (docs/pytorch.md, "Storages").

An entry holds a weak reference to its storage (torch's own: it keeps the
storage's bookkeeping alive but not its bytes, so the key cannot be reused
while the entry exists), the runtime's handle of the whole storage, the
handles of views ops have used, whether its bytes are away, and whether
torch lets it be released at all. A storage is gone when torch frees it,
whoever held it last (a user's tensor, autograd's saved outputs, an
accumulated gradient): the table finds out by asking the weak reference
(`sweep`), never from the user's Python objects.
"""
from collections import OrderedDict
from itertools import chain

import torch

from ._recompute import DROPPED

# The storage object of a tensor: torch 2 names it untyped_storage, 1.13
# has it as _storage. Taken at import: the glue may patch Tensor methods.
storage_of = getattr(torch.Tensor, "untyped_storage", None) or torch.Tensor._storage
_Storage = type(storage_of(torch.empty(0)))

# Views of one storage the table keeps handles of; an op using more
# distinct views of it (slices of a cache at every offset) gets handles
# that live for the op only.
_VIEWS_KEPT = 256


class Entry:
    """One storage."""
    __slots__ = ("key", "weak", "base", "views", "nbytes", "moved", "inbound", "pinned",
                 "born", "record", "writes", "exposed")

    def __init__(self, key, weak, base, nbytes, born):
        self.key = key
        self.weak = weak          # torch's weak reference (an int)
        self.base = base          # the runtime's handle of all of it
        self.views = {}           # (offset, sizes, strides, dtype) -> handle
        self.nbytes = nbytes      # its bytes on the device when there
        self.moved = None         # the host copy while away, else None
        self.inbound = None       # a copy back still in flight
        self.pinned = None        # why it never leaves the device: "unreleasable"
                                  # (torch refuses), "host-read" (a small integer
                                  # storage C++ may read), "record" (the profiler's)
        self.born = born          # the op at which the glue first saw it
        self.record = None        # the recomputable op that made it (_recompute.Record)
        self.writes = 0           # ops that wrote it (a record of a reader is then stale)
        self.exposed = False      # code outside aten may write it: made outside aten
                                  # (numpy may share it) and never released, or its
                                  # memory handed out (numpy(), data_ptr())

    def storage(self):
        """The storage, or None once torch freed it."""
        return _Storage._new_with_weak_ptr(self.weak)


class StorageTable:
    """The storages the runtime tracks, and how many bytes are on the device."""

    def __init__(self, ctx):
        self._ctx = ctx
        self.entries = {}
        # Entries on the device that may be sent away, least recently used
        # first: those of at least `small` bytes, then the smaller ones
        # (by_age), so room is made with few moves of large storages
        # before many of tiny ones, each of which costs a copy's overhead.
        self.lru = OrderedDict()
        self.lru_small = OrderedDict()
        self.small = 0
        self.resident = 0         # bytes on the device, freed storages included until swept
        self.live = 0             # bytes of every entry, on the device or away (likewise)
        # Storage key -> the records with a dropped output that read it: an
        # op about to write one makes those outputs again first.
        self.readers = {}
        self.added = 0            # bytes of all entries ever added (what ops made)

    def find(self, storage):
        return self.entries.get(storage._cdata)

    def add(self, storage, dtype, label, op):
        """A new entry for storage (on the device)."""
        nbytes = storage.nbytes()
        base = self._ctx.wrap(storage.data_ptr(), nbytes, dtype, label)
        key = storage._cdata
        base.key = key
        e = self.entries[key] = Entry(key, storage._weak_ref(), base, nbytes, op)
        self.resident += nbytes
        self.live += nbytes
        self.added += nbytes
        self._lru_of(e)[key] = e
        return e

    def _lru_of(self, e):
        return self.lru_small if e.nbytes < self.small else self.lru

    def set_small(self, nbytes):
        """Storages under nbytes are sent away after the larger ones (each
        order kept; the two merged as large ones first when it changes)."""
        entries = list(chain(self.lru.values(), self.lru_small.values()))
        self.small = nbytes
        self.lru, self.lru_small = OrderedDict(), OrderedDict()
        for e in entries:
            self._lru_of(e)[e.key] = e

    def by_age(self):
        """(key, entry) of the entries that may be sent away, in the order
        room is made: least recently used first, large before small."""
        return chain(self.lru.items(), self.lru_small.items())

    def view(self, e, t, dtype, label):
        """The handle of tensor t, a view of e's storage."""
        offset = t.storage_offset()
        sizes = tuple(t.size())
        strides = t.stride()
        vkey = (offset, sizes, strides, dtype)
        h = e.views.get(vkey)
        if h is None:
            h = self._ctx.view_strided(e.base, offset, sizes, strides, dtype, label)
            h.key = e.key
            if len(e.views) < _VIEWS_KEPT:
                e.views[vkey] = h
        return h

    def touch(self, e):
        """e was used: it goes to the back of the least-recently-used order."""
        lru = self._lru_of(e)
        if e.key in lru:
            lru.move_to_end(e.key)

    def forget(self, e):
        """e's storage is gone, or is no longer the storage e describes
        (resized by the user): the runtime sees it freed."""
        if e.moved is DROPPED:
            self._undrop(e)
        del self.entries[e.key]
        self._lru_of(e).pop(e.key, None)
        if e.moved is None:
            self.resident -= e.nbytes
        self.live -= e.nbytes
        e.views.clear()
        e.base = None
        e.moved = None
        e.inbound = None
        _Storage._free_weak_ref(e.weak)

    @staticmethod
    def expired(e):
        """True once torch has freed e's storage."""
        return _Storage._expired(e.weak)

    def sweep(self):
        """Forgets the entries whose storage torch has freed; their bytes."""
        expired = _Storage._expired
        gone = [e for e in self.entries.values() if expired(e.weak)]
        freed = 0
        for e in gone:
            if e.moved is None:
                freed += e.nbytes
            self.forget(e)
        return freed

    def away(self, e, releasing=False):
        """e's bytes left the device; releasing: they leave once a copy
        has read them, and count as on the device until released()."""
        if not releasing:
            self.resident -= e.nbytes
        self._lru_of(e).pop(e.key, None)

    def released(self, nbytes):
        """The bytes of an entry sent away with releasing=True left."""
        self.resident -= nbytes

    def back(self, e, counted=False):
        """e's bytes are on the device again; counted: they never left
        (sent away with releasing=True, and kept before released())."""
        if not counted:
            self.resident += e.nbytes
        if not e.pinned:
            self._lru_of(e)[e.key] = e

    def drop(self, e):
        """e's bytes were freed (its record holds its inputs: Record.hold);
        its op makes them again."""
        rec = e.record
        if rec.dropped == 1:
            for s in rec.inputs:
                self.readers.setdefault(s.entry.key, set()).add(rec)
        e.moved = DROPPED
        self.away(e)

    def recomputed(self, e):
        """e's bytes were made again, on the device."""
        self._undrop(e)
        e.moved = None
        self.back(e)

    def _undrop(self, e):
        rec = e.record
        rec.release()
        if rec.dropped == 0:
            for s in rec.inputs:
                recs = self.readers.get(s.entry.key)
                if recs is not None:
                    recs.discard(rec)
                    if not recs:
                        del self.readers[s.entry.key]

    def pin(self, e, why):
        """e's storage stays on the device (why: Entry.pinned)."""
        e.pinned = why
        self._lru_of(e).pop(e.key, None)

    def unpin(self, e):
        """e's storage may leave the device again."""
        e.pinned = None
        if e.moved is None:
            self._lru_of(e)[e.key] = e

    def clear(self):
        for e in list(self.entries.values()):
            self.forget(e)
