/* The hazard detector: three planted races are caught and their correct
 * versions stay silent; the report names block, streams, times and tasks;
 * and the interval map agrees with a byte-by-byte reference model on
 * random access sequences. */
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
    cham_sim_set_hazard_hook(r->dev, on_hazard, &r->seen);
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
        assert_int_equal(cham_sim_hazard_count(r.dev), 0);
    } else {
        assert_int_equal(r.seen.n, 1);
        assert_int_equal(cham_sim_hazard_count(r.dev), 1);
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
    assert_int_equal(cham_sim_hazard_count(dev), 0);
    cham_device_synchronize(dev);
    cham_device_mem_free(dev, d);
    cham_stream_free(a);
    cham_stream_free(b);
    cham_device_close(dev);
}

/* ---- the interval map against a byte-by-byte model ----------------------*/

#define SPACE 256
#define STREAMS 4

typedef struct byte_state {
    int w_stream;
    uint64_t w_end;
    uint64_t r_end[STREAMS];   /* 0 = no read since the last write */
} byte_state_t;

/* True if the reference model sees a conflict for this access. */
static bool model_access(byte_state_t *m, int lo, int hi, bool write, int s, uint64_t start,
                         uint64_t end)
{
    bool hit = false;
    for (int b = lo; b < hi; b++) {
        byte_state_t *x = &m[b];
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

static void test_interval_map_matches_model(void **state)
{
    (void)state;
    for (unsigned seed = 1; seed <= 20; seed++) {
        test_rng_t r = {seed * 0x9E3779B97F4A7C15u};
        sim_hazard_t *hz = sim_hazard_new(NULL, NULL);
        assert_non_null(hz);
        byte_state_t m[SPACE];
        for (int b = 0; b < SPACE; b++)
            m[b] = (byte_state_t){.w_stream = -1};
        uint64_t now = 0;
        size_t hits = 0;
        for (int i = 0; i < 3000; i++) {
            int lo = (int)test_rng_below(&r, SPACE), len = 1 + (int)test_rng_below(&r, 48);
            int hi = lo + len > SPACE ? SPACE : lo + len;
            bool write = test_rng_below(&r, 3) == 0;
            int s = (int)test_rng_below(&r, STREAMS);
            uint64_t start = now + test_rng_below(&r, 50);
            uint64_t end = start + 1 + test_rng_below(&r, 100);
            now += test_rng_below(&r, 20);
            if (test_rng_below(&r, 50) == 0) {   /* a segment returned after a full sync */
                int flo = (int)test_rng_below(&r, SPACE), fhi = flo + 1 + (int)test_rng_below(&r, 64);
                if (fhi > SPACE)
                    fhi = SPACE;
                sim_hazard_forget(hz, 0x10000 + (uintptr_t)flo, (size_t)(fhi - flo));
                for (int b = flo; b < fhi; b++)
                    m[b] = (byte_state_t){.w_stream = -1};
                continue;
            }
            bool expect = model_access(m, lo, hi, write, s, start, end);
            size_t got = sim_hazard_access(hz, 0x10000 + (uintptr_t)lo, (size_t)(hi - lo),
                                           write, s, start, end, write ? "w" : "r");
            assert_int_not_equal(got, SIZE_MAX);
            if (expect != (got > 0))
                fail_msg("seed %u step %d: model says %d, detector found %zu", seed, i,
                         expect, got);
            hits += got;
            /* Merging keeps the map no larger than the bytes it covers. */
            assert_true(sim_hazard_range_count(hz) <= SPACE);
        }
        assert_true(hits > 0);   /* the random program does race */
        sim_hazard_free(hz);
    }
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
