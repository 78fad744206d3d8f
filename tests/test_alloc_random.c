/* A randomized test of the caching allocator: over 100,000 operations (alloc,
 * free, record_stream + free, free_after_op, op_dispatched, empty_cache) on
 * three streams of a sim device with the hazard detector on, checked against
 * a simple reference model:
 *   - no new block overlaps a live block, a block waiting for its op, or a
 *     recordStream block whose event (our own twin, recorded at the same
 *     point) has not completed;
 *   - bytes are conserved: allocated, requested and pending bytes equal the
 *     model's, and reserved = allocated + pending + free;
 *   - the allocator's blocks are the model's (walked and compared), and
 *     every free block is coalesced (no two free neighbours);
 *   - the device saw no hazard: every reuse was ordered after the previous
 *     user's last access.
 * The same run again in expandable-segments mode, where the allocator's own
 * checker verifies the granules (every block in use mapped, every chunk
 * accounted) and an out-of-memory must be real in physical terms.
 * Fixed seeds: the run is the same every time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/rng.h"

#include "alloc/alloc-impl.h"
#include "chameleon/chameleon.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define N_STREAMS 3
#define MAX_LIVE 96
#define MAX_PENDING 4096
#define OPS_PER_SEED 40000
#define CHECK_EVERY 128

static test_rng_t rng_gen;
static bool expandable;          /* the run's allocator mode */
static uint64_t rng(void)
{
    return test_rng_next(&rng_gen);
}
static uint64_t below(uint64_t n)
{
    return rng() % n;
}

typedef struct live {
    cham_block_t *block;
    uintptr_t ptr;
    size_t size, requested;
    int stream;
    int recorded;            /* another stream given to record_stream, or -1 */
} live_t;

typedef struct pending {
    uintptr_t ptr;
    size_t size;
    uint64_t op;             /* free-after-op: the op it waits for */
    cham_event_t *twin;      /* recordStream: our event, recorded with the allocator's */
} pending_t;

typedef struct model {
    cham_device_t *dev;
    cham_stream_t *s[N_STREAMS];
    cham_allocator_t *alloc;
    cham_event_t *order_ev;
    cham_event_t *spare[MAX_PENDING];
    size_t n_spare;
    live_t live[MAX_LIVE];
    size_t n_live;
    pending_t by_op[MAX_PENDING];
    size_t n_by_op;
    pending_t by_event[MAX_PENDING];
    size_t n_by_event;
    uint64_t last_op;
    /* Counts, printed at the end to show what the run covered. */
    uint64_t n_alloc, n_oom, n_free, n_rs_free, n_op_free, n_dispatch, n_empty, n_early;
    uint64_t n_calls;        /* allocator operations made */
} model_t;

static cham_event_t *twin_get(model_t *m)
{
    if (m->n_spare)
        return m->spare[--m->n_spare];
    cham_event_t *e = NULL;
    assert_int_equal(cham_event_new(m->dev, &e), CHAM_OK);
    return e;
}

static void twin_put(model_t *m, cham_event_t *e)
{
    assert_true(m->n_spare < MAX_PENDING);
    m->spare[m->n_spare++] = e;
}

static bool overlaps(uintptr_t p, size_t n, uintptr_t q, size_t k)
{
    return p < q + k && q < p + n;
}

/* A kernel on stream s touching the whole block. */
static void touch(model_t *m, int s, uintptr_t ptr, size_t bytes, cham_access_mode_t mode,
                  double flops)
{
    cham_access_t acc = {.ptr = (const void *)ptr, .bytes = bytes, .mode = mode};
    cham_kernel_t k = {.label = mode == CHAM_ACCESS_READ ? "read" : "write", .flops = flops,
                       .accesses = &acc, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(m->s[s], &k), CHAM_OK);
}

static void order(model_t *m, int from, int to)
{
    assert_int_equal(cham_event_record(m->order_ev, m->s[from]), CHAM_OK);
    assert_int_equal(cham_stream_wait_event(m->s[to], m->order_ev), CHAM_OK);
}

static size_t random_size(void)
{
    uint64_t r = below(100);
    if (r < 70)
        return (size_t)below(r < 35 ? 4 * KiB : 512 * KiB) + 1;   /* small pool */
    if (r < 96)
        return MiB + (size_t)below(9 * MiB);                      /* shared large segments */
    return 10 * MiB + (size_t)below(30 * MiB);                    /* own segments */
}

typedef struct walked {
    cham_alloc_block_info_t *v;
    size_t n, cap;
} walked_t;

static void collect(const cham_alloc_block_info_t *info, void *user)
{
    walked_t *w = user;
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->v = realloc(w->v, w->cap * sizeof *w->v);
        assert_non_null(w->v);
    }
    w->v[w->n++] = *info;
}

/* An allocation failed: no free block of the stream and pool could hold it,
 * no wholly free segment was left cached, and no new segment fits. */
static void assert_oom_is_real(model_t *m, int s, size_t rounded)
{
    if (expandable) {
        /* Expandable: fewer obtainable bytes than the request's granules
         * (it may straddle one more). */
        cham_alloc_stats_t st;
        cham_allocator_get_stats(m->alloc, &st);
        size_t g = cham_vm_granularity(m->dev);
        assert_true(st.largest_free < rounded + 2 * g);
        return;
    }
    bool small = rounded <= CHAM_ALLOC_SMALL_SIZE;
    walked_t w = {0};
    cham_allocator_walk(m->alloc, collect, &w);
    for (size_t i = 0; i < w.n; i++) {
        const cham_alloc_block_info_t *b = &w.v[i];
        if (b->state != CHAM_BLOCK_FREE)
            continue;
        assert_false(b->ptr == b->segment && b->size == b->segment_size);
        if (b->stream_id == cham_stream_id(m->s[s]) && b->small == small)
            assert_true(b->size < rounded);
    }
    free(w.v);
    cham_alloc_stats_t st;
    cham_allocator_get_stats(m->alloc, &st);
    size_t need = small ? CHAM_ALLOC_SMALL_SEGMENT
                        : (rounded + CHAM_ALLOC_ROUND_LARGE - 1) / CHAM_ALLOC_ROUND_LARGE *
                              CHAM_ALLOC_ROUND_LARGE;
    assert_true(st.reserved + need > st.limit);
}

/* Expandable segments place a request in one of the few smallest free
 * blocks that hold it (the one needing the fewest granules mapped), at its
 * start or at a granule boundary of its segment far enough in that the
 * part before is a block of its own, or in a new reservation: true if ptr
 * is such a place or lies in no block walked before (w). */
static bool is_fitting_start(const walked_t *w, int sid, bool small, size_t rounded, size_t g,
                             uintptr_t ptr)
{
    for (size_t i = 0; i < w->n; i++) {
        const cham_alloc_block_info_t *b = &w->v[i];
        if (ptr >= b->ptr && ptr - b->ptr < b->size) {      /* the block holding ptr */
            size_t front = ptr - b->ptr;
            bool place = front == 0 ||
                         ((ptr - b->segment) % g == 0 &&
                          (small ? front >= CHAM_ALLOC_MIN_BLOCK : front > CHAM_ALLOC_SMALL_SIZE));
            return place && b->state == CHAM_BLOCK_FREE && b->stream_id == sid &&
                   b->small == small && b->size - front >= rounded;
        }
    }
    return true;
}

/* The block best fit must pick for a rounded request on stream s: the
 * smallest free block of that stream and pool with enough bytes, lowest
 * address first. 0 when there is none, or when recordStream frees are
 * pending (the allocation's queries may return and merge blocks first). */
static uintptr_t best_fit_now(model_t *m, int s, size_t rounded)
{
    bool small = rounded <= CHAM_ALLOC_SMALL_SIZE;
    walked_t w = {0};
    cham_allocator_walk(m->alloc, collect, &w);
    const cham_alloc_block_info_t *best = NULL;
    bool waiting = false;
    for (size_t i = 0; i < w.n; i++) {
        const cham_alloc_block_info_t *b = &w.v[i];
        waiting |= b->state == CHAM_BLOCK_PENDING_EVENTS;
        if (b->state != CHAM_BLOCK_FREE || b->stream_id != cham_stream_id(m->s[s]) ||
            b->small != small || b->size < rounded)
            continue;
        if (!best || b->size < best->size || (b->size == best->size && b->ptr < best->ptr))
            best = b;
    }
    uintptr_t fit = best && !waiting ? best->ptr : 0;
    free(w.v);
    return fit;
}

/* The OOM path may release every free-after-op block early. */
static void note_early_release(model_t *m)
{
    if (m->alloc->n_heap == 0 && m->n_by_op > 0) {
        m->n_by_op = 0;
        m->n_early++;
    }
}

static void do_alloc(model_t *m)
{
    int s = below(10) < 6 ? 0 : 1 + (int)below(2);
    size_t bytes = random_size();
    cham_alloc_stats_t before;
    cham_allocator_get_stats(m->alloc, &before);
    uintptr_t fit = best_fit_now(m, s, cham_alloc_round_size(bytes));
    walked_t before_w = {0};
    if (expandable)
        cham_allocator_walk(m->alloc, collect, &before_w);
    cham_block_t *b = NULL;
    cham_status_t st = cham_block_alloc(m->alloc, bytes, m->s[s], &b);
    m->n_calls++;
    uint64_t early = m->n_early;
    note_early_release(m);
    /* Best fit; expandable: a fitting free block's start or a new
     * reservation, unless the fallback chain ran (a block that could not be
     * backed goes back, and the blocks freed early count). */
    if (fit && st == CHAM_OK && !expandable)
        assert_int_equal((uintptr_t)cham_block_ptr(b), fit);
    if (fit && st == CHAM_OK && expandable && m->n_early == early)
        assert_true(is_fitting_start(&before_w, cham_stream_id(m->s[s]),
                                     cham_alloc_round_size(bytes) <= CHAM_ALLOC_SMALL_SIZE,
                                     cham_alloc_round_size(bytes), m->alloc->granularity,
                                     (uintptr_t)cham_block_ptr(b)));
    free(before_w.v);
    if (st != CHAM_OK) {
        assert_int_equal(st, CHAM_ERR_OUT_OF_MEMORY);
        assert_null(b);
        cham_oom_info_t info;
        cham_alloc_stats_t after;
        cham_allocator_get_stats(m->alloc, &after);
        assert_int_equal(cham_allocator_last_oom(m->alloc, &info), CHAM_OK);
        assert_int_equal(info.requested, bytes);
        assert_int_equal(info.allocated, after.allocated);
        assert_int_equal(info.allocated, before.allocated);
        assert_int_equal(info.free_bytes, info.limit - info.allocated);
        assert_int_equal(info.reserved, after.reserved);
        assert_oom_is_real(m, s, info.rounded);
        m->n_oom++;
        return;
    }
    uintptr_t p = (uintptr_t)cham_block_ptr(b);
    size_t size = cham_block_size(b);
    assert_true(size >= bytes && size % 512 == 0);
    assert_int_equal(cham_block_requested(b), bytes);
    assert_ptr_equal(cham_block_stream(b), m->s[s]);
    for (size_t i = 0; i < m->n_live; i++)
        assert_false(overlaps(p, size, m->live[i].ptr, m->live[i].size));
    for (size_t i = 0; i < m->n_by_op; i++)
        assert_false(overlaps(p, size, m->by_op[i].ptr, m->by_op[i].size));
    for (size_t i = 0; i < m->n_by_event;) {
        pending_t *q = &m->by_event[i];
        if (overlaps(p, size, q->ptr, q->size)) {
            /* Reused: its event must have completed. */
            assert_int_equal(cham_event_query(q->twin), CHAM_OK);
            twin_put(m, q->twin);
            *q = m->by_event[--m->n_by_event];
            continue;
        }
        i++;
    }
    assert_true(m->n_live < MAX_LIVE);
    m->live[m->n_live++] = (live_t){b, p, size, bytes, s, -1};
    touch(m, s, p, size, CHAM_ACCESS_WRITE, (double)below(10000000));
    m->n_alloc++;
}

static live_t take_live(model_t *m)
{
    size_t i = below(m->n_live);
    live_t l = m->live[i];
    m->live[i] = m->live[--m->n_live];
    return l;
}

static void do_record(model_t *m)
{
    live_t *l = &m->live[below(m->n_live)];
    if (l->recorded >= 0)
        return;
    int other = (l->stream + 1 + (int)below(N_STREAMS - 1)) % N_STREAMS;
    order(m, l->stream, other);
    assert_int_equal(cham_block_record_stream(m->alloc, l->block, m->s[other]), CHAM_OK);
    m->n_calls++;
    touch(m, other, l->ptr, l->size, CHAM_ACCESS_READ, (double)below(100000000));
    l->recorded = other;
}

static void do_free(model_t *m)
{
    live_t l = take_live(m);
    cham_block_free(m->alloc, l.block);
    m->n_calls++;
    if (l.recorded >= 0) {
        cham_event_t *twin = twin_get(m);
        assert_int_equal(cham_event_record(twin, m->s[l.recorded]), CHAM_OK);
        assert_true(m->n_by_event < MAX_PENDING);
        m->by_event[m->n_by_event++] = (pending_t){l.ptr, l.size, 0, twin};
        m->n_rs_free++;
    } else {
        m->n_free++;
    }
}

static void do_free_after_op(model_t *m)
{
    live_t l = take_live(m);
    int user = (l.stream + 1 + (int)below(N_STREAMS - 1)) % N_STREAMS;
    order(m, l.stream, user);
    touch(m, user, l.ptr, l.size, CHAM_ACCESS_READ, (double)below(100000000));  /* swap-out */
    uint64_t op = m->last_op + below(5);
    assert_int_equal(cham_block_free_after_op(m->alloc, l.block, m->s[user], op), CHAM_OK);
    m->n_calls++;
    /* Released at the op, or now if it has been dispatched already. A
     * recorded stream gets an event too, waited for in the same way. */
    if (op > m->last_op) {
        assert_true(m->n_by_op < MAX_PENDING);
        m->by_op[m->n_by_op++] = (pending_t){l.ptr, l.size, op, NULL};
    }
    m->n_op_free++;
}

static void do_dispatch(model_t *m)
{
    m->last_op++;
    assert_int_equal(cham_allocator_op_dispatched(m->alloc, m->last_op), CHAM_OK);
    m->n_calls++;
    for (size_t i = 0; i < m->n_by_op;) {
        if (m->by_op[i].op <= m->last_op) {
            m->by_op[i] = m->by_op[--m->n_by_op];
            continue;
        }
        i++;
    }
    cham_device_host_work(m->dev, below(40000));
    m->n_dispatch++;
}

/* ---- the deep check: walk the allocator and compare with the model ---------*/

static const cham_alloc_block_info_t *find_walked(const walked_t *w, uintptr_t ptr)
{
    for (size_t i = 0; i < w->n; i++)
        if (w->v[i].ptr == ptr)
            return &w->v[i];
    return NULL;
}

static void deep_check(model_t *m)
{
    char why[512] = "";
    bool ok = cham_allocator_check(m->alloc, why, sizeof why);
    if (!ok)
        print_error("allocator check: %s\n", why);
    assert_true(ok);
    /* Expandable: the free-granule index the reclaim and the best fit
     * read, against every granule. */
    ok = cham_allocator_check_vm_index(m->alloc, why, sizeof why);
    if (!ok)
        print_error("free-granule index: %s\n", why);
    assert_true(ok);

    walked_t w = {0};
    cham_allocator_walk(m->alloc, collect, &w);
    uint64_t reserved = 0, n_alloc = 0, n_op = 0, n_ev = 0;
    for (size_t i = 0; i < w.n; i++) {
        const cham_alloc_block_info_t *b = &w.v[i];
        if (b->ptr == b->segment)
            reserved += b->segment_size;
        /* Coalesced: a free block's successor in its segment is not free. */
        if (b->state == CHAM_BLOCK_FREE && i + 1 < w.n && w.v[i + 1].segment == b->segment)
            assert_int_not_equal(w.v[i + 1].state, CHAM_BLOCK_FREE);
        n_alloc += b->state == CHAM_BLOCK_ALLOCATED;
        n_op += b->state == CHAM_BLOCK_PENDING_OP;
        n_ev += b->state == CHAM_BLOCK_PENDING_EVENTS;
    }
    /* The allocator's blocks are the model's. */
    assert_int_equal(n_alloc, m->n_live);
    assert_int_equal(n_op, m->n_by_op);
    uint64_t live_bytes = 0, live_req = 0, pending = 0;
    for (size_t i = 0; i < m->n_live; i++) {
        const cham_alloc_block_info_t *b = find_walked(&w, m->live[i].ptr);
        assert_non_null(b);
        assert_int_equal(b->state, CHAM_BLOCK_ALLOCATED);
        assert_int_equal(b->size, m->live[i].size);
        assert_int_equal(b->stream_id, cham_stream_id(m->s[m->live[i].stream]));
        live_bytes += m->live[i].size;
        live_req += m->live[i].requested;
    }
    for (size_t i = 0; i < m->n_by_op; i++) {
        const cham_alloc_block_info_t *b = find_walked(&w, m->by_op[i].ptr);
        assert_non_null(b);
        assert_int_equal(b->state, CHAM_BLOCK_PENDING_OP);
        assert_int_equal(b->size, m->by_op[i].size);
        pending += b->size;
    }
    /* recordStream blocks no longer pending were released: only after their
     * events completed. */
    for (size_t i = 0; i < m->n_by_event;) {
        pending_t *q = &m->by_event[i];
        const cham_alloc_block_info_t *b = find_walked(&w, q->ptr);
        if (b && b->state == CHAM_BLOCK_PENDING_EVENTS && b->size == q->size) {
            pending += q->size;
            i++;
            continue;
        }
        assert_int_equal(cham_event_query(q->twin), CHAM_OK);
        twin_put(m, q->twin);
        *q = m->by_event[--m->n_by_event];
    }
    assert_int_equal(n_ev, m->n_by_event);

    cham_alloc_stats_t s;
    cham_allocator_get_stats(m->alloc, &s);
    assert_int_equal(s.allocated, live_bytes);
    assert_int_equal(s.requested, live_req);
    assert_int_equal(s.pending_free, pending);
    if (!expandable)              /* expandable: the checker counts granules */
        assert_int_equal(s.reserved, reserved);
    assert_true(s.reserved <= s.limit);
    assert_true(s.peak_allocated >= s.allocated && s.peak_reserved >= s.reserved);
    assert_true(s.fragmentation >= 0.0 && s.fragmentation <= 1.0);
    free(w.v);
}

static void run_seed(uint64_t seed, bool vm)
{
    expandable = vm;
    static model_t m;
    memset(&m, 0, sizeof m);
    rng_gen.state = seed;
    cham_device_config_t c = cham_device_config_default();
    c.capacity = 4096 * MiB;
    c.peak_flops = 1e12;
    c.hbm_bandwidth = 1e12;
    c.flops_efficiency = 1;     /* round figures: what kernels reach */
    c.hbm_efficiency = 1;
    c.launch_ns = 1000;
    c.hazard_check = true;
    assert_int_equal(cham_device_open(&c, &m.dev), CHAM_OK);
    const char *names[N_STREAMS] = {"compute", "swap", "third"};
    for (int i = 0; i < N_STREAMS; i++)
        assert_int_equal(cham_stream_new(m.dev, names[i], &m.s[i]), CHAM_OK);
    assert_int_equal(cham_event_new(m.dev, &m.order_ev), CHAM_OK);
    cham_allocator_config_t ac = {.kind = CHAM_MEM_DEVICE, .limit = 256 * MiB,
                                  .expandable = vm};
    assert_int_equal(cham_allocator_new(m.dev, &ac, &m.alloc), CHAM_OK);
    assert_int_equal(cham_allocator_op_dispatched(m.alloc, 0), CHAM_OK);

    for (int step = 0; step < OPS_PER_SEED; step++) {
        uint64_t r = below(100);
        /* Keep the live set between empty and MAX_LIVE, busier when fuller. */
        bool want_free = m.n_live > 0 && (m.n_live >= MAX_LIVE - 1 ||
                                          below(MAX_LIVE) < m.n_live);
        if (r < 55) {
            if (want_free)
                do_free(&m);
            else
                do_alloc(&m);
        } else if (r < 67) {
            if (m.n_live)
                do_free_after_op(&m);
        } else if (r < 77) {
            if (m.n_live)
                do_record(&m);
        } else if (r < 99) {
            do_dispatch(&m);
        } else {
            assert_int_equal(cham_allocator_empty_cache(m.alloc), CHAM_OK);
            m.n_empty++;
            m.n_calls++;
        }
        if (step % CHECK_EVERY == 0)
            deep_check(&m);
    }
    deep_check(&m);

    /* Drain: free everything, let the device finish, and empty the cache. */
    while (m.n_live)
        do_free(&m);
    do_dispatch(&m);
    m.last_op += 10;
    do_dispatch(&m);
    cham_device_synchronize(m.dev);
    assert_int_equal(cham_allocator_empty_cache(m.alloc), CHAM_OK);
    deep_check(&m);
    cham_alloc_stats_t s;
    cham_allocator_get_stats(m.alloc, &s);
    assert_int_equal(s.allocated, 0);
    assert_int_equal(s.pending_free, 0);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(m.n_by_event, 0);
    assert_int_equal(cham_device_hazard_count(m.dev), 0);
    print_message("%sseed %ju: %ju allocator operations: %ju allocs (%ju out of memory), %ju frees, %ju recordStream "
                  "frees, %ju free-after-op (%ju early releases at OOM), %ju ops, %ju empty "
                  "caches; %ju event queries, %ju splits, %ju merges, %ju segments, peak "
                  "reserved %ju MiB, reuse interval mean %.2f max %ju ops\n",
                  vm ? "expandable, " : "", (uintmax_t)seed, (uintmax_t)m.n_calls, (uintmax_t)m.n_alloc, (uintmax_t)m.n_oom,
                  (uintmax_t)m.n_free, (uintmax_t)m.n_rs_free, (uintmax_t)m.n_op_free,
                  (uintmax_t)m.n_early, (uintmax_t)m.n_dispatch, (uintmax_t)m.n_empty,
                  (uintmax_t)s.n_event_queries, (uintmax_t)s.n_splits, (uintmax_t)s.n_merges,
                  (uintmax_t)s.n_segment_allocs, (uintmax_t)(s.peak_reserved / MiB),
                  s.n_deferred_released
                      ? (double)s.reuse_interval_sum / (double)s.n_deferred_released
                      : 0.0,
                  (uintmax_t)s.reuse_interval_max);
    if (vm)
        print_message("  %ju maps, %ju unmaps in %ju reclaims that waited (%ju for a whole "
                      "stream); %ju MiB of addresses\n",
                      (uintmax_t)s.n_vm_maps, (uintmax_t)s.n_vm_unmaps,
                      (uintmax_t)s.n_vm_reclaims, (uintmax_t)s.n_vm_stream_syncs,
                      (uintmax_t)(s.va_reserved / MiB));
    /* Enough of each kind happened for the run to mean something. */
    assert_true(m.n_oom > 0 && m.n_rs_free > 100 && m.n_op_free > 100 && m.n_empty > 10);
    assert_true(m.n_calls >= 34000);   /* three seeds: over 100,000 operations */

    cham_allocator_free(m.alloc);
    for (size_t i = 0; i < m.n_spare; i++)
        cham_event_free(m.spare[i]);
    cham_event_free(m.order_ev);
    for (int i = 0; i < N_STREAMS; i++)
        cham_stream_free(m.s[i]);
    cham_device_close(m.dev);
}

static void test_random_seed_1(void **state)
{
    (void)state;
    run_seed(0x1234567887654321u, false);
}

static void test_random_seed_2(void **state)
{
    (void)state;
    run_seed(0xDEADBEEFCAFEF00Du, false);
}

static void test_random_seed_3(void **state)
{
    (void)state;
    run_seed(42, false);
}

static void test_expandable_seed_1(void **state)
{
    (void)state;
    run_seed(42, true);
}

static void test_expandable_seed_2(void **state)
{
    (void)state;
    run_seed(7, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_seed_1),
        cmocka_unit_test(test_random_seed_2),
        cmocka_unit_test(test_random_seed_3),
        cmocka_unit_test(test_expandable_seed_1),
        cmocka_unit_test(test_expandable_seed_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
