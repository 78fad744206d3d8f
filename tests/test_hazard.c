/* The hazard detector: three planted races are caught and their correct
 * versions stay silent; the report names block, streams, times and tasks;
 * the interval map agrees with a byte-by-byte reference model on random
 * access sequences, keeps its invariants (order, merging, a balanced tree)
 * after every call, and handles the edges of its tree by hand-checked
 * cases: merging on either side, splits at both ends, an access across a
 * thousand ranges, and a hundred thousand ranges added in address order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "device/sim_hazard.h"
#include "support/rng.h"

#define MiB (1024u * 1024u)

typedef struct seen {
    int n;
    cham_hazard_t first;
    char kind[32], earlier_label[32], later_label[32], earlier_stream[32], later_stream[32];
} seen_t;

static void on_hazard(const cham_hazard_t *h, void *user)
{
    seen_t *s = user;
    if (s->n++ == 0) {
        s->first = *h;
        snprintf(s->kind, sizeof s->kind, "%s", h->kind);
        snprintf(s->earlier_label, sizeof s->earlier_label, "%s", h->earlier_label);
        snprintf(s->later_label, sizeof s->later_label, "%s", h->later_label);
        snprintf(s->earlier_stream, sizeof s->earlier_stream, "%s", h->earlier_stream_name);
        snprintf(s->later_stream, sizeof s->later_stream, "%s", h->later_stream_name);
    }
}

/* A device with compute, swap-out and swap-in streams, one activation block
 * on the device and one pinned buffer. */
typedef struct rig {
    cham_device_t *dev;
    cham_stream_t *compute, *out, *in;
    cham_event_t *ev;
    void *block, *host;
    seen_t seen;
} rig_t;

static void rig_open(rig_t *r, bool data)
{
    memset(r, 0, sizeof *r);
    cham_device_config_t c = cham_device_config_default();
    c.preset = "a100-80g";
    c.capacity = 512 * MiB;
    c.data = data;
    assert_int_equal(cham_device_open(&c, &r->dev), CHAM_OK);
    cham_device_set_hazard_hook(r->dev, on_hazard, &r->seen);
    cham_stream_new(r->dev, "compute", &r->compute);
    cham_stream_new(r->dev, "swap-out", &r->out);
    cham_stream_new(r->dev, "swap-in", &r->in);
    cham_event_new(r->dev, &r->ev);
    assert_int_equal(cham_device_mem_alloc(r->dev, 64 * MiB, &r->block), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(r->dev, 64 * MiB, &r->host), CHAM_OK);
}

static void rig_close(rig_t *r)
{
    cham_device_synchronize(r->dev);
    cham_device_mem_free(r->dev, r->block);
    cham_device_host_free(r->dev, r->host);
    cham_event_free(r->ev);
    cham_stream_free(r->compute);
    cham_stream_free(r->out);
    cham_stream_free(r->in);
    cham_device_close(r->dev);
}

static void launch(cham_stream_t *s, const char *label, void *ptr, size_t bytes,
                   cham_access_mode_t mode, double flops)
{
    cham_access_t a = {ptr, bytes, mode};
    cham_kernel_t k = {.label = label, .flops = flops, .bytes = (double)bytes,
                       .accesses = &a, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(s, &k), CHAM_OK);
}

/* Race 1: the block is reused (written by a new tensor's producer on the
 * compute stream) while the swap-out still reads it. */
static void reuse_during_swap_out(bool correct)
{
    rig_t r;
    rig_open(&r, false);
    launch(r.compute, "produce act", r.block, 32 * MiB, CHAM_ACCESS_WRITE, 1e9);
    cham_event_record(r.ev, r.compute);
    cham_stream_wait_event(r.out, r.ev);
    cham_copy_async(r.out, r.host, r.block, 32 * MiB, CHAM_COPY_D2H, "swap-out act");
    if (correct) {   /* the custom recordStream: record on swap, wait on compute */
        cham_event_record(r.ev, r.out);
        cham_stream_wait_event(r.compute, r.ev);
    }
    launch(r.compute, "produce next", r.block, 16 * MiB, CHAM_ACCESS_WRITE, 1e9);
    if (correct) {
        assert_int_equal(r.seen.n, 0);
        assert_int_equal(cham_device_hazard_count(r.dev), 0);
    } else {
        assert_int_equal(r.seen.n, 1);
        assert_int_equal(cham_device_hazard_count(r.dev), 1);
        assert_string_equal(r.seen.kind, "write-after-read");
        assert_string_equal(r.seen.earlier_label, "swap-out act");
        assert_string_equal(r.seen.later_label, "produce next");
        assert_string_equal(r.seen.earlier_stream, "swap-out");
        assert_string_equal(r.seen.later_stream, "compute");
        assert_int_equal(r.seen.first.addr, (uintptr_t)r.block);
        assert_int_equal(r.seen.first.bytes, 16 * MiB);
        assert_true(r.seen.first.later_start_ns < r.seen.first.earlier_end_ns);
    }
    rig_close(&r);
}

static void test_reuse_while_swap_out_reads(void **state)
{
    (void)state;
    reuse_during_swap_out(false);
    reuse_during_swap_out(true);
}

/* Race 2: a kernel reads the block before its swap-in has finished. */
static void read_before_swap_in(bool correct)
{
    rig_t r;
    rig_open(&r, false);
    cham_copy_async(r.in, r.block, r.host, 48 * MiB, CHAM_COPY_H2D, "swap-in act");
    if (correct) {
        cham_event_record(r.ev, r.in);
        cham_stream_wait_event(r.compute, r.ev);
    }
    launch(r.compute, "backward", r.block, 48 * MiB, CHAM_ACCESS_READ, 1e9);
    if (correct) {
        assert_int_equal(r.seen.n, 0);
    } else {
        assert_int_equal(r.seen.n, 1);
        assert_string_equal(r.seen.kind, "read-after-write");
        assert_string_equal(r.seen.earlier_label, "swap-in act");
        assert_string_equal(r.seen.later_label, "backward");
        assert_string_equal(r.seen.earlier_stream, "swap-in");
        assert_int_equal(r.seen.first.bytes, 48 * MiB);
    }
    rig_close(&r);
}

static void test_read_before_swap_in_done(void **state)
{
    (void)state;
    read_before_swap_in(false);
    read_before_swap_in(true);
}

/* Race 3: a write on one stream while another stream reads. */
static void write_while_read(bool correct)
{
    rig_t r;
    rig_open(&r, false);
    launch(r.out, "long reader", r.block, 8 * MiB, CHAM_ACCESS_READ, 5e12);
    if (correct) {
        cham_event_record(r.ev, r.out);
        cham_stream_wait_event(r.compute, r.ev);
    }
    /* Overlaps only the reader's second half: the report names that part. */
    launch(r.compute, "writer", (char *)r.block + 4 * MiB, 8 * MiB, CHAM_ACCESS_READ_WRITE,
           1e9);
    if (correct) {
        assert_int_equal(r.seen.n, 0);
    } else {
        assert_int_equal(r.seen.n, 1);
        assert_string_equal(r.seen.kind, "write-after-read");
        assert_int_equal(r.seen.first.addr, (uintptr_t)r.block + 4 * MiB);
        assert_int_equal(r.seen.first.bytes, 4 * MiB);
    }
    rig_close(&r);
}

static void test_write_while_other_stream_reads(void **state)
{
    (void)state;
    write_while_read(false);
    write_while_read(true);
}

/* Without a hook, hazards are printed and counted; the report line has all
 * the parts a person needs. */
static void test_report_format(void **state)
{
    (void)state;
    cham_hazard_t h = {.kind = "read-after-write", .addr = 0x1000, .bytes = 64,
                       .earlier_stream = 2, .later_stream = 0,
                       .earlier_stream_name = "swap-in", .later_stream_name = "compute",
                       .earlier_label = "copy x", .later_label = "matmul",
                       .earlier_end_ns = 900, .later_start_ns = 500};
    char buf[512];
    cham_hazard_format(&h, buf, sizeof buf);
    assert_string_equal(buf, "hazard read-after-write at 0x1000 (64 bytes): \"matmul\" on "
                             "stream compute starts at 500 ns, before \"copy x\" on stream "
                             "swap-in finishes at 900 ns");
}

static void test_detector_off(void **state)
{
    (void)state;
    cham_device_config_t c = cham_device_config_default();
    c.hazard_check = false;
    c.capacity = 64 * MiB;
    cham_device_t *dev;
    cham_device_open(&c, &dev);
    cham_stream_t *a, *b;
    cham_stream_new(dev, "a", &a);
    cham_stream_new(dev, "b", &b);
    void *d;
    cham_device_mem_alloc(dev, MiB, &d);
    launch(a, "w1", d, MiB, CHAM_ACCESS_WRITE, 1e12);
    launch(b, "w2", d, MiB, CHAM_ACCESS_WRITE, 1e12);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_device_synchronize(dev);
    cham_device_mem_free(dev, d);
    cham_stream_free(a);
    cham_stream_free(b);
    cham_device_close(dev);
}

/* ---- the interval map against a byte-by-byte model ----------------------*/

#define SPACE 4096
#define STREAMS 4

typedef struct byte_state {
    bool seen;                 /* touched since it was last forgotten */
    int w_stream;
    uint64_t w_end;
    uint64_t r_end[STREAMS];   /* 0 = no read since the last write */
} byte_state_t;

static const byte_state_t fresh = {.w_stream = -1};

/* True if the reference model sees a conflict for this access. */
static bool model_access(byte_state_t *m, int lo, int hi, bool write, int s, uint64_t start,
                         uint64_t end)
{
    bool hit = false;
    for (int b = lo; b < hi; b++) {
        byte_state_t *x = &m[b];
        x->seen = true;
        if (x->w_stream >= 0 && x->w_stream != s && start < x->w_end)
            hit = true;
        if (write) {
            for (int t = 0; t < STREAMS; t++)
                if (t != s && x->r_end[t] && start < x->r_end[t])
                    hit = true;
            x->w_stream = s;
            x->w_end = end;
            memset(x->r_end, 0, sizeof x->r_end);
        } else if (end > x->r_end[s]) {
            x->r_end[s] = end;
        }
    }
    return hit;
}

/* A treap's height is O(log n); a broken balance shows up as far more. */
static size_t height_limit(size_t n)
{
    size_t log2n = 0;
    while ((UINT64_C(1) << log2n) < n + 2)
        log2n++;
    return 6 * log2n + 10;
}

/* The map's invariants hold, its height is logarithmic, and its ranges
 * cover exactly the bytes the model has seen. */
static void check_map(const sim_hazard_t *hz, const byte_state_t *m, int space, unsigned seed,
                      int step)
{
    size_t height;
    const char *broken = sim_hazard_check(hz, &height);
    if (broken)
        fail_msg("seed %u step %d: %s", seed, step, broken);
    size_t n = sim_hazard_range_count(hz);
    if (height > height_limit(n))
        fail_msg("seed %u step %d: height %zu for %zu ranges", seed, step, height, n);
    static uintptr_t lo[SPACE], hi[SPACE];
    assert_true(n <= SPACE);     /* merging: no more ranges than bytes */
    assert_int_equal(sim_hazard_ranges(hz, lo, hi, SPACE), n);
    size_t k = 0;
    for (int b = 0; b < space; b++) {
        uintptr_t a = 0x10000 + (uintptr_t)b;
        while (k < n && hi[k] <= a)
            k++;
        bool covered = k < n && lo[k] <= a;
        if (covered != m[b].seen)
            fail_msg("seed %u step %d: byte %d is %s the map but %s", seed, step, b,
                     covered ? "in" : "not in", m[b].seen ? "seen" : "never seen");
    }
}

/* Random programs over `space` bytes: accesses of 1 to `len` bytes (one in
 * `wide` up to the whole space), one in three the next buffer of the
 * previous access's kernel (same stream, times and label, just before or
 * after it: what merges), and now and then a forgotten segment. */
static void random_program(unsigned seed, int space, int len, int wide, int steps)
{
    test_rng_t r = {seed * 0x9E3779B97F4A7C15u};
    sim_hazard_t *hz = sim_hazard_new(NULL, NULL);
    assert_non_null(hz);
    static byte_state_t m[SPACE];
    for (int b = 0; b < space; b++)
        m[b] = fresh;
    uint64_t now = 0, start = 0, end = 0;
    int lo = 0, hi = 0, s = 0;
    bool write = false;
    size_t hits = 0;
    for (int i = 0; i < steps; i++) {
        if (i > 0 && test_rng_below(&r, 3) == 0) {     /* the kernel's next buffer */
            int n = 1 + (int)test_rng_below(&r, (uint64_t)len);
            if (test_rng_below(&r, 2) == 0 && lo >= n) {
                hi = lo;
                lo -= n;
            } else {
                lo = hi < space ? hi : 0;
                hi = lo + n > space ? space : lo + n;
            }
        } else {
            lo = (int)test_rng_below(&r, (uint64_t)space);
            int n = 1 + (int)test_rng_below(&r, test_rng_below(&r, (uint64_t)wide) == 0
                                                    ? (uint64_t)space : (uint64_t)len);
            hi = lo + n > space ? space : lo + n;
            write = test_rng_below(&r, 3) == 0;
            s = (int)test_rng_below(&r, STREAMS);
            start = now + test_rng_below(&r, 50);
            end = start + 1 + test_rng_below(&r, 100);
            now += test_rng_below(&r, 20);
        }
        if (test_rng_below(&r, 50) == 0) {   /* a segment returned after a full sync */
            int flo = (int)test_rng_below(&r, (uint64_t)space);
            int fhi = flo + (int)test_rng_below(&r, (uint64_t)space / 4);
            if (fhi > space)
                fhi = space;
            sim_hazard_forget(hz, 0x10000 + (uintptr_t)flo, (size_t)(fhi - flo));
            for (int b = flo; b < fhi; b++)
                m[b] = fresh;
        } else {
            bool expect = model_access(m, lo, hi, write, s, start, end);
            size_t got = sim_hazard_access(hz, 0x10000 + (uintptr_t)lo, (size_t)(hi - lo),
                                           write, s, start, end, write ? "w" : "r");
            assert_int_not_equal(got, SIZE_MAX);
            if (expect != (got > 0))
                fail_msg("seed %u step %d: model says %d, detector found %zu", seed, i,
                         expect, got);
            hits += got;
        }
        check_map(hz, m, space, seed, i);
    }
    assert_true(hits > 0);   /* the random program does race */
    sim_hazard_free(hz);
}

static void test_interval_map_matches_model(void **state)
{
    (void)state;
    for (unsigned seed = 1; seed <= 20; seed++) {
        random_program(seed, 256, 48, 10, 3000);       /* dense: wide accesses, merges */
        random_program(seed + 100, SPACE, 24, 200, 1500); /* many ranges, a deep tree */
    }
}

/* ---- the map's edges, by hand -----------------------------------------------*/

#define BASE ((uintptr_t)0x100000)

static size_t touch(sim_hazard_t *hz, uintptr_t off, size_t bytes, bool write, int stream,
                     uint64_t start, uint64_t end, const char *label)
{
    size_t n = sim_hazard_access(hz, BASE + off, bytes, write, stream, start, end, label);
    assert_int_not_equal(n, SIZE_MAX);
    assert_null(sim_hazard_check(hz, NULL));
    return n;
}

/* The ranges as "lo-hi lo-hi ..." offsets from BASE. */
static const char *ranges_text(const sim_hazard_t *hz, char *buf, size_t size)
{
    uintptr_t lo[16], hi[16];
    size_t n = sim_hazard_ranges(hz, lo, hi, 16), used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && i < 16; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lu-%lu", i ? " " : "",
                                 (unsigned long)(lo[i] - BASE), (unsigned long)(hi[i] - BASE));
    return buf;
}

static void test_map_merges_and_splits(void **state)
{
    (void)state;
    seen_t seen = {0};
    sim_hazard_t *hz = sim_hazard_new(on_hazard, &seen);
    assert_non_null(hz);
    char buf[256];
    /* One kernel writing three adjacent buffers, the middle one last:
     * merges on the left, then on both sides at once. */
    touch(hz, 0, 100, true, 0, 10, 20, "k");
    touch(hz, 200, 100, true, 0, 10, 20, "k");
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-100 200-300");
    touch(hz, 100, 100, true, 0, 10, 20, "k");
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-300");
    /* The next bytes from another task (it ends later): no merge. */
    touch(hz, 300, 50, true, 0, 10, 21, "k");
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-300 300-350");
    /* A long read on stream 1 in the middle of the first range splits it
     * at both ends; the remainders keep their state. */
    touch(hz, 120, 60, false, 1, 30, 1000, "slow read");
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-120 120-180 180-300 300-350");
    /* A write on stream 0 across everything while the read runs: one
     * report, over exactly the bytes read. */
    assert_int_equal(touch(hz, 0, 350, true, 0, 40, 50, "overwrite"), 1);
    assert_string_equal(seen.kind, "write-after-read");
    assert_int_equal(seen.first.addr, BASE + 120);
    assert_int_equal(seen.first.bytes, 60);
    assert_string_equal(seen.earlier_label, "slow read");
    /* ... and the bytes are one range again. */
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-350");
    /* Forgetting the middle splits it in two; an empty forget changes
     * nothing; forgetting around a range drops it whole. */
    sim_hazard_forget(hz, BASE + 100, 50);
    assert_null(sim_hazard_check(hz, NULL));
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-100 150-350");
    sim_hazard_forget(hz, BASE + 200, 0);
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-100 150-350");
    sim_hazard_forget(hz, BASE + 90, 300);
    assert_null(sim_hazard_check(hz, NULL));
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-90");
    /* Accesses of exactly one range (updated in place) merge with the
     * neighbour before, or the one after, once their states agree. */
    touch(hz, 1000, 100, true, 0, 60, 70, "t");
    touch(hz, 1100, 100, true, 0, 61, 71, "u");
    touch(hz, 1000, 100, true, 0, 80, 90, "v");
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-90 1000-1100 1100-1200");
    touch(hz, 1100, 100, true, 0, 80, 90, "v");
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-90 1000-1200");
    touch(hz, 2000, 100, true, 0, 60, 70, "t");
    touch(hz, 2100, 100, true, 0, 61, 71, "u");
    touch(hz, 2100, 100, true, 0, 80, 90, "v");
    touch(hz, 2000, 100, true, 0, 80, 90, "v");
    assert_string_equal(ranges_text(hz, buf, sizeof buf), "0-90 1000-1200 2000-2200");
    sim_hazard_free(hz);
}

/* A write across a thousand ranges, each written on another stream by a
 * task still running: one report per range (each a different earlier
 * access), the gaps between them silent, and one range afterwards. */
static void test_access_across_many_ranges(void **state)
{
    (void)state;
    seen_t seen = {0};
    sim_hazard_t *hz = sim_hazard_new(on_hazard, &seen);
    assert_non_null(hz);
    for (uintptr_t i = 0; i < 1000; i++)
        touch(hz, 100 * i, 64, true, 1, i, 1000000 + i, "producer");
    assert_int_equal(sim_hazard_range_count(hz), 1000);
    assert_int_equal(touch(hz, 0, 100000, true, 0, 500, 600, "memset"), 1000);
    assert_int_equal(seen.n, 1000);
    assert_string_equal(seen.kind, "write-after-write");
    assert_int_equal(seen.first.addr, BASE);
    assert_int_equal(seen.first.bytes, 64);
    assert_int_equal(seen.first.earlier_end_ns, 1000000);
    assert_int_equal(sim_hazard_range_count(hz), 1);
    sim_hazard_free(hz);
}

/* A hundred thousand ranges added in address order (the order that turns
 * an unbalanced search tree into a list), then each accessed again in
 * place: the tree stays logarithmically high. */
static void test_many_ranges_stay_balanced(void **state)
{
    (void)state;
    sim_hazard_t *hz = sim_hazard_new(NULL, NULL);
    assert_non_null(hz);
    const uintptr_t n = 100000;
    for (uintptr_t i = 0; i < n; i++)   /* distinct end times: nothing merges */
        assert_int_equal(sim_hazard_access(hz, BASE + 256 * i, 256, true, 0, i, i + 1, "w"), 0);
    for (uintptr_t i = 0; i < n; i++)
        assert_int_equal(sim_hazard_access(hz, BASE + 256 * i, 256, false, 1, n + i, n + i + 1,
                                           "r"), 0);
    size_t height;
    assert_null(sim_hazard_check(hz, &height));
    assert_int_equal(sim_hazard_range_count(hz), n);
    if (height > height_limit(n))
        fail_msg("height %zu for %lu ranges", height, (unsigned long)n);
    sim_hazard_free(hz);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_while_swap_out_reads),
        cmocka_unit_test(test_read_before_swap_in_done),
        cmocka_unit_test(test_write_while_other_stream_reads),
        cmocka_unit_test(test_report_format),
        cmocka_unit_test(test_detector_off),
        cmocka_unit_test(test_interval_map_matches_model),
        cmocka_unit_test(test_map_merges_and_splits),
        cmocka_unit_test(test_access_across_many_ranges),
        cmocka_unit_test(test_many_ranges_stay_balanced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
