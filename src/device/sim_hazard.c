/* The sim backend's hazard detector: an interval map from byte ranges to
 * the last write and the recent reads per stream, checked on every access.
 * See sim_hazard.h for the rules.
 *
 * The map is a treap (a binary search tree by address whose nodes also
 * form a heap by a random priority, so its height stays O(log n) whatever
 * order the ranges arrive in). Every access replaces a run of consecutive
 * ranges, the ones its bytes overlap, with new pieces: the treap cuts that
 * run out (two splits), the pieces are computed from a copy of it, and the
 * treap joins them back in (merges), in O(log n + k) for n ranges and k
 * overlapped. The most common access, a tensor's block used again, covers
 * exactly one range and is updated in place after one descent. A sorted
 * array spliced with memmove did all this in O(n) per access, which made a
 * simulated step quadratic in the model's layers (docs/device.md has the
 * measurements). Priorities come from a fixed-seed generator: the tree's
 * shape never changes what is reported, and a run's cost is repeatable. */
#include "device/sim_hazard.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/intern.h"
#include "common/rng.h"

/* Readers remembered per range: compute, swap-out, swap-in and one more.
 * With more streams reading the same bytes between two writes, the reader
 * that finished earliest is forgotten (the least likely to conflict). */
#define HZ_READERS 4
#define HZ_NO_STREAM (-1)

/* One remembered access. Explicitly padded-free so ranges compare with
 * memcmp. stream == HZ_NO_STREAM marks an empty slot. */
typedef struct hz_access {
    int32_t stream;
    uint32_t label;          /* index into the label table */
    uint64_t end;            /* virtual time the access finishes */
} hz_access_t;

/* Reads hold only reads since the last write; an empty write slot means
 * the bytes have not been written since they were first seen. */
typedef struct hz_range {
    uintptr_t lo, hi;
    hz_access_t write;
    hz_access_t reads[HZ_READERS];
} hz_range_t;

/* A treap node. Children are indices into the node pool (not pointers:
 * the pool is reallocated as it grows); 0 is the empty tree. */
typedef struct hz_node {
    hz_range_t r;
    uint32_t left, right;
    uint32_t prio;           /* a parent's priority is >= its children's */
} hz_node_t;

/* Invariant (sim_hazard_check walks it): in order, the ranges are sorted
 * by lo, non-empty (lo < hi) and disjoint, and no two of them whose bytes
 * touch have the same state (they would have been merged), so the map
 * for a given history is always the same one; n counts them. Free nodes
 * are chained through .right from free_list. */
struct sim_hazard {
    hz_node_t *nodes;        /* the pool; nodes[0] is never used */
    size_t top, cap;         /* nodes [1, top) have been handed out */
    uint32_t free_list;
    uint32_t root;
    size_t n;
    uint64_t prio_state;     /* xorshift state for priorities: fixed seed */

    hz_range_t *old;         /* the ranges an access replaces, in order */
    size_t old_cap;
    hz_range_t *scratch;     /* the pieces that replace them */
    size_t scratch_cap;

    cham_intern_t labels;    /* task labels; index 0 is "" */

    char stream_names[CHAM_SIM_MAX_STREAMS][48];
    sim_hazard_report_fn report;
    void *user;
};

static const hz_access_t no_access = {HZ_NO_STREAM, 0, 0};

/* Makes *v hold at least need ranges. */
static bool reserve(hz_range_t **v, size_t *cap, size_t need)
{
    hz_range_t *p = cham_grow(*v, cap, need, sizeof *p, 64);
    if (p)
        *v = p;
    return p != NULL;
}

/* Makes room for `more` new nodes, so that taking them cannot fail (or
 * move the pool) in the middle of rewriting the tree. */
static bool reserve_nodes(sim_hazard_t *hz, size_t more)
{
    if (hz->top + more > UINT32_MAX)
        return false;
    hz_node_t *p = cham_grow(hz->nodes, &hz->cap, hz->top + more, sizeof *p, 256);
    if (p)
        hz->nodes = p;
    return p != NULL;
}

/* ---- lifetime -----------------------------------------------------------*/

sim_hazard_t *sim_hazard_new(sim_hazard_report_fn report, void *user)
{
    sim_hazard_t *hz = calloc(1, sizeof *hz);
    if (!hz)
        return NULL;
    hz->report = report;
    hz->user = user;
    hz->top = 1;             /* index 0 is the empty tree */
    hz->prio_state = CHAM_GOLDEN64;
    cham_intern_init(&hz->labels);
    if (cham_intern_add(&hz->labels, "") != 0 || !reserve(&hz->scratch, &hz->scratch_cap, 64) ||
        !reserve(&hz->old, &hz->old_cap, 64) || !reserve_nodes(hz, 64)) {
        sim_hazard_free(hz);
        return NULL;
    }
    for (int i = 0; i < CHAM_SIM_MAX_STREAMS; i++)
        snprintf(hz->stream_names[i], sizeof hz->stream_names[i], "stream%d", i);
    return hz;
}

void sim_hazard_free(sim_hazard_t *hz)
{
    if (!hz)
        return;
    cham_intern_free(&hz->labels);
    free(hz->nodes);
    free(hz->old);
    free(hz->scratch);
    free(hz);
}

void sim_hazard_name_stream(sim_hazard_t *hz, int stream, const char *name)
{
    CHAM_ASSERT(stream >= 0 && stream < CHAM_SIM_MAX_STREAMS);
    snprintf(hz->stream_names[stream], sizeof hz->stream_names[stream], "%s", name);
}

size_t sim_hazard_range_count(const sim_hazard_t *hz)
{
    return hz->n;
}

/* ---- the treap ----------------------------------------------------------*/

/* A node for r from the free list or the pool's reserved tail. */
static uint32_t node_new(sim_hazard_t *hz, const hz_range_t *r)
{
    uint32_t i = hz->free_list;
    if (i)
        hz->free_list = hz->nodes[i].right;
    else {
        CHAM_ASSERT(hz->top < hz->cap);      /* reserve_nodes came first */
        i = (uint32_t)hz->top++;
    }
    uint64_t x = cham_xorshift64(&hz->prio_state);
    hz->nodes[i] = (hz_node_t){*r, 0, 0, (uint32_t)(x >> 32)};
    return i;
}

static void node_free(sim_hazard_t *hz, uint32_t i)
{
    hz->nodes[i].right = hz->free_list;
    hz->free_list = i;
}

/* Splits tree t into *a, the ranges before addr, and *b, the rest.
 * "Before" is hi <= addr (by_end) or lo < addr: since the ranges are
 * sorted and disjoint, either holds for a prefix of them. */
static void split(hz_node_t *v, uint32_t t, uintptr_t addr, bool by_end, uint32_t *a,
                  uint32_t *b)
{
    if (!t) {
        *a = *b = 0;
        return;
    }
    if (by_end ? v[t].r.hi <= addr : v[t].r.lo < addr) {
        split(v, v[t].right, addr, by_end, &v[t].right, b);
        *a = t;
    } else {
        split(v, v[t].left, addr, by_end, a, &v[t].left);
        *b = t;
    }
}

/* Joins trees a and b, every range of a lying before every range of b. */
static uint32_t merge(hz_node_t *v, uint32_t a, uint32_t b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (v[a].prio >= v[b].prio) {
        v[a].right = merge(v, v[a].right, b);
        return a;
    }
    v[b].left = merge(v, a, v[b].left);
    return b;
}

/* Removes the last (first) node of t into *out; returns what is left. */
static uint32_t pop_last(hz_node_t *v, uint32_t t, uint32_t *out)
{
    if (!v[t].right) {
        *out = t;
        return v[t].left;
    }
    v[t].right = pop_last(v, v[t].right, out);
    return t;
}

static uint32_t pop_first(hz_node_t *v, uint32_t t, uint32_t *out)
{
    if (!v[t].left) {
        *out = t;
        return v[t].right;
    }
    v[t].left = pop_first(v, v[t].left, out);
    return t;
}

static uint32_t last_of(const hz_node_t *v, uint32_t t)
{
    while (v[t].right)
        t = v[t].right;
    return t;
}

static uint32_t first_of(const hz_node_t *v, uint32_t t)
{
    while (v[t].left)
        t = v[t].left;
    return t;
}

static size_t count(const hz_node_t *v, uint32_t t)
{
    return t ? 1 + count(v, v[t].left) + count(v, v[t].right) : 0;
}

/* Copies t's ranges in order to hz->old from *k on (room reserved) and
 * frees its nodes. */
static void take_all(sim_hazard_t *hz, uint32_t t, size_t *k)
{
    if (!t)
        return;
    uint32_t right = hz->nodes[t].right;
    take_all(hz, hz->nodes[t].left, k);
    hz->old[(*k)++] = hz->nodes[t].r;
    node_free(hz, t);
    take_all(hz, right, k);
}

/* Cuts the tree into the ranges before [lo, hi), those overlapping it and
 * those after it. */
static void cut(sim_hazard_t *hz, uintptr_t lo, uintptr_t hi, uint32_t *before, uint32_t *mid,
                uint32_t *after)
{
    uint32_t rest;
    split(hz->nodes, hz->root, lo, true, before, &rest);
    split(hz->nodes, rest, hi, false, mid, after);
    hz->root = 0;
}

/* ---- ranges -------------------------------------------------------------*/

static hz_range_t empty_range(uintptr_t lo, uintptr_t hi)
{
    hz_range_t r;
    memset(&r, 0, sizeof r);
    r.lo = lo;
    r.hi = hi;
    r.write = no_access;
    for (int i = 0; i < HZ_READERS; i++)
        r.reads[i] = no_access;
    return r;
}

static bool same_state(const hz_range_t *a, const hz_range_t *b)
{
    return memcmp(&a->write, &b->write,
                  sizeof *a - offsetof(hz_range_t, write)) == 0;
}

/* Merges neighbours of r[0, m) whose bytes touch and whose state is equal;
 * returns how many are left. */
static size_t coalesce(hz_range_t *r, size_t m)
{
    if (m == 0)
        return 0;
    size_t w = 0;
    for (size_t k = 1; k < m; k++) {
        if (r[w].hi == r[k].lo && same_state(&r[w], &r[k]))
            r[w].hi = r[k].hi;
        else
            r[++w] = r[k];
    }
    return w + 1;
}

/* Puts the pieces r[0, m) (sorted, lying between the trees) back in. */
static void join(sim_hazard_t *hz, uint32_t before, const hz_range_t *r, size_t m, uint32_t after)
{
    uint32_t t = 0;
    for (size_t k = 0; k < m; k++)
        t = merge(hz->nodes, t, node_new(hz, &r[k]));
    hz->n += m;
    hz->root = merge(hz->nodes, merge(hz->nodes, before, t), after);
}

/* ---- hazards ------------------------------------------------------------*/

/* A hazard being assembled: consecutive pieces that conflict with the same
 * earlier access are reported once, over their joint bytes. */
typedef struct pending {
    bool active;
    const char *kind;
    uintptr_t lo, hi;
    hz_access_t earlier;
} pending_t;

static void flush(sim_hazard_t *hz, pending_t *p, int stream, uint64_t start,
                  uint32_t label, size_t *found)
{
    if (!p->active)
        return;
    cham_hazard_t h = {
        .kind = p->kind,
        .addr = p->lo,
        .bytes = p->hi - p->lo,
        .earlier_stream = p->earlier.stream,
        .later_stream = stream,
        .earlier_stream_name = hz->stream_names[p->earlier.stream],
        .later_stream_name = hz->stream_names[stream],
        .earlier_label = cham_intern_name(&hz->labels, p->earlier.label),
        .later_label = cham_intern_name(&hz->labels, label),
        .earlier_end_ns = p->earlier.end,
        .later_start_ns = start,
    };
    (*found)++;
    if (hz->report)
        hz->report(&h, hz->user);
    p->active = false;
}

static void conflict(sim_hazard_t *hz, pending_t *p, const char *kind, const hz_range_t *piece,
                     const hz_access_t *earlier, int stream, uint64_t start, uint32_t label,
                     size_t *found)
{
    if (p->active && p->kind == kind && p->hi == piece->lo &&
        memcmp(&p->earlier, earlier, sizeof *earlier) == 0) {
        p->hi = piece->hi;
        return;
    }
    flush(hz, p, stream, start, label, found);
    *p = (pending_t){true, kind, piece->lo, piece->hi, *earlier};
}

/* Checks one piece against the access and updates its state. */
static void visit(sim_hazard_t *hz, hz_range_t *piece, bool write, int stream, uint64_t start,
                  uint64_t end, uint32_t label, pending_t *p, size_t *found)
{
    const hz_access_t *w = &piece->write;
    if (w->stream != HZ_NO_STREAM && w->stream != stream && start < w->end)
        conflict(hz, p, write ? "write-after-write" : "read-after-write", piece, w, stream,
                 start, label, found);
    if (write) {
        for (int i = 0; i < HZ_READERS; i++) {
            const hz_access_t *r = &piece->reads[i];
            if (r->stream != HZ_NO_STREAM && r->stream != stream && start < r->end)
                conflict(hz, p, "write-after-read", piece, r, stream, start, label, found);
        }
        piece->write = (hz_access_t){stream, label, end};
        for (int i = 0; i < HZ_READERS; i++)
            piece->reads[i] = no_access;
        return;
    }
    int slot = -1;
    for (int i = 0; i < HZ_READERS && slot < 0; i++)
        if (piece->reads[i].stream == stream)
            slot = i;
    for (int i = 0; i < HZ_READERS && slot < 0; i++)
        if (piece->reads[i].stream == HZ_NO_STREAM)
            slot = i;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < HZ_READERS; i++)
            if (piece->reads[i].end < piece->reads[slot].end)
                slot = i;
    }
    hz_access_t *r = &piece->reads[slot];
    uint64_t prev = r->stream == stream ? r->end : 0;
    *r = (hz_access_t){stream, label, end > prev ? end : prev};
}

/* Re-merges the ranges between lo and hi after a state changed in place:
 * at most three, so the nodes they free are enough and nothing can fail. */
static void recoalesce(sim_hazard_t *hz, uintptr_t lo, uintptr_t hi)
{
    uint32_t before, mid, after;
    cut(hz, lo, hi, &before, &mid, &after);
    size_t j = 0;
    CHAM_ASSERT(count(hz->nodes, mid) <= 3 && hz->old_cap >= 3);
    take_all(hz, mid, &j);
    hz->n -= j;
    join(hz, before, hz->old, coalesce(hz->old, j), after);
}

/* The common access: exactly the bytes of one range (a tensor's block used
 * again). Updates it in place without reshaping the tree; returns false,
 * having done nothing, for any other access. */
static bool access_one(sim_hazard_t *hz, uintptr_t lo, uintptr_t hi, bool write, int stream,
                       uint64_t start, uint64_t end, uint32_t label, size_t *found)
{
    hz_node_t *v = hz->nodes;
    uint32_t t = hz->root, pred = 0, succ = 0;
    while (t && !(v[t].r.lo <= lo && lo < v[t].r.hi)) {
        if (lo < v[t].r.lo) {
            succ = t;
            t = v[t].left;
        } else {
            pred = t;
            t = v[t].right;
        }
    }
    if (!t || v[t].r.lo != lo || v[t].r.hi != hi)
        return false;
    if (v[t].left)
        pred = last_of(v, v[t].left);
    if (v[t].right)
        succ = first_of(v, v[t].right);
    pending_t p = {0};
    visit(hz, &v[t].r, write, stream, start, end, label, &p, found);
    flush(hz, &p, stream, start, label, found);
    bool merge_pred = pred && v[pred].r.hi == lo && same_state(&v[pred].r, &v[t].r);
    bool merge_succ = succ && v[succ].r.lo == hi && same_state(&v[t].r, &v[succ].r);
    if (merge_pred || merge_succ)
        recoalesce(hz, merge_pred ? v[pred].r.lo : lo, merge_succ ? v[succ].r.hi : hi);
    return true;
}

size_t sim_hazard_access(sim_hazard_t *hz, uintptr_t addr, size_t bytes, bool write, int stream,
                         uint64_t start, uint64_t end, const char *label)
{
    CHAM_ASSERT(stream >= 0 && stream < CHAM_SIM_MAX_STREAMS && start <= end);
    if (bytes == 0)
        return 0;
    uintptr_t lo = addr, hi = addr + bytes;
    CHAM_ASSERT(hi > lo);
    uint32_t lab = cham_intern_add(&hz->labels, label ? label : "");
    if (lab == UINT32_MAX)
        return SIZE_MAX;
    size_t found = 0;
    if (access_one(hz, lo, hi, write, stream, start, end, lab, &found))
        return found;

    uint32_t before, mid, after;
    cut(hz, lo, hi, &before, &mid, &after);
    size_t j = count(hz->nodes, mid);
    /* Worst case: a left and a right remainder plus a piece and a gap per
     * range; scratch[0] and one slot past them are for the neighbours that
     * may merge with the pieces. Nothing has changed if this fails. */
    size_t most = 2 * j + 3;
    if (!reserve(&hz->old, &hz->old_cap, j) ||
        !reserve(&hz->scratch, &hz->scratch_cap, most + 2) || !reserve_nodes(hz, most + 2)) {
        hz->root = merge(hz->nodes, merge(hz->nodes, before, mid), after);
        return SIZE_MAX;
    }
    size_t taken = 0;
    take_all(hz, mid, &taken);
    hz->n -= j;

    hz_range_t *out = hz->scratch + 1;
    size_t m = 0;
    pending_t p = {0};
    uintptr_t cur = lo;
    for (size_t k = 0; k < j; k++) {
        hz_range_t r = hz->old[k];
        if (r.lo < lo) {                      /* left remainder keeps its state */
            out[m] = r;
            out[m++].hi = lo;
            r.lo = lo;
        }
        if (cur < r.lo) {                     /* gap: bytes never touched */
            out[m] = empty_range(cur, r.lo);
            visit(hz, &out[m++], write, stream, start, end, lab, &p, &found);
        }
        uintptr_t right = r.hi;
        if (r.hi > hi)
            r.hi = hi;
        out[m] = r;
        visit(hz, &out[m++], write, stream, start, end, lab, &p, &found);
        if (right > hi) {                     /* right remainder keeps its state */
            out[m] = hz->old[k];
            out[m].lo = hi;
            m++;
        }
        cur = r.hi;
    }
    if (cur < hi) {
        out[m] = empty_range(cur, hi);
        visit(hz, &out[m++], write, stream, start, end, lab, &p, &found);
    }
    flush(hz, &p, stream, start, lab, &found);
    CHAM_ASSERT(m >= 1 && m <= most);

    /* The ranges just outside may now merge with the pieces: take them
     * out of the trees into the run that is coalesced. */
    hz_range_t *run = out;
    uint32_t t;
    if (before && hz->nodes[last_of(hz->nodes, before)].r.hi == out[0].lo) {
        before = pop_last(hz->nodes, before, &t);
        *--run = hz->nodes[t].r;
        node_free(hz, t);
        hz->n--;
        m++;
    }
    if (after && hz->nodes[first_of(hz->nodes, after)].r.lo == run[m - 1].hi) {
        after = pop_first(hz->nodes, after, &t);
        run[m++] = hz->nodes[t].r;
        node_free(hz, t);
        hz->n--;
    }
    join(hz, before, run, coalesce(run, m), after);
    return found;
}

void sim_hazard_forget(sim_hazard_t *hz, uintptr_t addr, size_t bytes)
{
    /* An empty range forgets nothing (cutting at addr would split the
     * range around it into two equal halves). */
    if (bytes == 0)
        return;
    uintptr_t lo = addr, hi = addr + bytes;
    uint32_t before, mid, after;
    cut(hz, lo, hi, &before, &mid, &after);
    if (!mid) {
        hz->root = merge(hz->nodes, before, after);
        return;
    }
    /* Keep the parts outside [lo, hi) of the first and last ranges. They
     * keep their states and their outer neighbours, so nothing merges.
     * The nodes freed cover the pieces, except when one range is cut in
     * two; if there is no room for that, the bytes stay remembered (a
     * possible false report, never a missed one). */
    hz_range_t piece[2];
    size_t m = 0;
    hz_range_t first = hz->nodes[first_of(hz->nodes, mid)].r;
    hz_range_t last = hz->nodes[last_of(hz->nodes, mid)].r;
    if (first.lo < lo) {
        piece[m] = first;
        piece[m++].hi = lo;
    }
    if (last.hi > hi) {
        piece[m] = last;
        piece[m++].lo = hi;
    }
    size_t j = count(hz->nodes, mid);
    if (!reserve(&hz->old, &hz->old_cap, j) || (m > j && !reserve_nodes(hz, m - j))) {
        hz->root = merge(hz->nodes, merge(hz->nodes, before, mid), after);
        return;
    }
    size_t taken = 0;
    take_all(hz, mid, &taken);
    hz->n -= j;
    join(hz, before, piece, m, after);
}

/* ---- checks for tests ---------------------------------------------------*/

typedef struct walk {
    const hz_range_t *prev;
    size_t n, height;
    const char *broken;
} walk_t;

static void check_node(const sim_hazard_t *hz, uint32_t t, size_t depth, walk_t *w)
{
    if (!t || w->broken)
        return;
    const hz_node_t *v = hz->nodes;
    if (depth > w->height)
        w->height = depth;
    if ((v[t].left && v[v[t].left].prio > v[t].prio) ||
        (v[t].right && v[v[t].right].prio > v[t].prio))
        w->broken = "a child's priority is above its parent's";
    check_node(hz, v[t].left, depth + 1, w);
    if (w->broken)
        return;
    const hz_range_t *r = &v[t].r;
    if (r->lo >= r->hi)
        w->broken = "an empty range";
    else if (w->prev && w->prev->hi > r->lo)
        w->broken = "ranges out of order or overlapping";
    else if (w->prev && w->prev->hi == r->lo && same_state(w->prev, r))
        w->broken = "touching ranges with equal state not merged";
    w->prev = r;
    w->n++;
    check_node(hz, v[t].right, depth + 1, w);
}

const char *sim_hazard_check(const sim_hazard_t *hz, size_t *height)
{
    walk_t w = {0};
    check_node(hz, hz->root, 1, &w);
    if (height)
        *height = w.height;
    if (!w.broken && w.n != hz->n)
        w.broken = "the range count is wrong";
    return w.broken;
}

static void list_node(const hz_node_t *v, uint32_t t, uintptr_t *lo, uintptr_t *hi, size_t max,
                      size_t *k)
{
    if (!t)
        return;
    list_node(v, v[t].left, lo, hi, max, k);
    if (*k < max) {
        lo[*k] = v[t].r.lo;
        hi[*k] = v[t].r.hi;
    }
    (*k)++;
    list_node(v, v[t].right, lo, hi, max, k);
}

size_t sim_hazard_ranges(const sim_hazard_t *hz, uintptr_t *lo, uintptr_t *hi, size_t max)
{
    size_t k = 0;
    list_node(hz->nodes, hz->root, lo, hi, max, &k);
    return k;
}

/* Reports every access in the subtree t, in address order, still running
 * at time now over [lo, hi): the bytes are being unmapped under it. */
static void report_busy(sim_hazard_t *hz, uint32_t t, uintptr_t lo, uintptr_t hi, uint64_t now,
                        const char *what, size_t *found)
{
    if (!t)
        return;
    const hz_node_t *n = &hz->nodes[t];
    report_busy(hz, n->left, lo, hi, now, what, found);
    const hz_access_t *acc[1 + HZ_READERS] = {&n->r.write};
    for (int k = 0; k < HZ_READERS; k++)
        acc[1 + k] = &n->r.reads[k];
    for (int k = 0; k < 1 + HZ_READERS; k++) {
        if (acc[k]->stream == HZ_NO_STREAM || acc[k]->end <= now)
            continue;
        uintptr_t a = n->r.lo > lo ? n->r.lo : lo, b = n->r.hi < hi ? n->r.hi : hi;
        cham_hazard_t h = {
            .kind = "unmap-while-in-use",
            .addr = a,
            .bytes = b - a,
            .earlier_stream = acc[k]->stream,
            .later_stream = HZ_NO_STREAM,
            .earlier_stream_name = hz->stream_names[acc[k]->stream],
            .later_stream_name = "host",
            .earlier_label = cham_intern_name(&hz->labels, acc[k]->label),
            .later_label = what,
            .earlier_end_ns = acc[k]->end,
            .later_start_ns = now,
        };
        (*found)++;
        if (hz->report)
            hz->report(&h, hz->user);
        break;                    /* one report per range */
    }
    report_busy(hz, n->right, lo, hi, now, what, found);
}

size_t sim_hazard_unmap(sim_hazard_t *hz, uintptr_t addr, size_t bytes, uint64_t now,
                        const char *what)
{
    if (bytes == 0)
        return 0;
    uint32_t before, mid, after;
    cut(hz, addr, addr + bytes, &before, &mid, &after);
    size_t found = 0;
    report_busy(hz, mid, addr, addr + bytes, now, what, &found);
    hz->root = merge(hz->nodes, merge(hz->nodes, before, mid), after);
    sim_hazard_forget(hz, addr, bytes);
    return found;
}
