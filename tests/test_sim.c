/* The sim backend's time model: stream order, events, links, the launch
 * queue, host blocking, determinism, memory checks, data mode and errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"

#define MiB (1024u * 1024u)

/* A device with round figures so expected times can be computed by hand:
 * 1 TFLOP/s, 1e12 B/s HBM, 1e10 B/s each link, 1 us dispatch, no fixed
 * kernel or copy cost. */
static cham_device_t *open_round(uint32_t queue_depth, bool data)
{
    cham_device_config_t c = cham_device_config_default();
    c.capacity = 256 * MiB;
    c.peak_flops = 1e12;
    c.hbm_bandwidth = 1e12;
    c.flops_efficiency = 1;     /* the figures are what kernels reach */
    c.hbm_efficiency = 1;
    c.h2d_bandwidth = 1e10;
    c.d2h_bandwidth = 1e10;
    c.launch_ns = 1000;
    c.kernel_overhead_ns = 1;   /* 0 would mean "default"; 1 ns keeps sums easy */
    c.copy_latency_ns = 1;
    c.event_query_ns = 100;
    c.queue_depth = queue_depth;
    c.data = data;
    cham_device_t *dev = NULL;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    return dev;
}

/* A kernel of 1 GFLOP lasts 1 ms + 1 ns on the round device. */
static cham_kernel_t kernel(const char *label, double gflops)
{
    return (cham_kernel_t){.label = label, .flops = gflops * 1e9};
}

/* Records every task the device reports. */
typedef struct timeline {
    cham_task_record_t t[256];
    char labels[256][32];
    int n;
} timeline_t;

static void record_task(const cham_task_record_t *r, void *user)
{
    timeline_t *tl = user;
    if (tl->n < 256) {
        tl->t[tl->n] = *r;
        snprintf(tl->labels[tl->n], sizeof tl->labels[0], "%s", r->label);
        tl->t[tl->n].label = tl->labels[tl->n];
        tl->t[tl->n].stream_name = NULL;
        tl->n++;
    }
}

static void test_stream_fifo(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, false);
    cham_stream_t *s;
    assert_int_equal(cham_stream_new(dev, "compute", &s), CHAM_OK);
    timeline_t tl = {0};
    cham_device_set_task_hook(dev, record_task, &tl);
    cham_kernel_t a = kernel("a", 1), b = kernel("b", 2);
    assert_int_equal(cham_kernel_launch(s, &a), CHAM_OK);
    assert_int_equal(cham_kernel_launch(s, &b), CHAM_OK);
    assert_int_equal(tl.n, 2);
    /* a: queued at 1 us, runs 1 ms + 1 ns; b queued at 2 us waits for a. */
    assert_int_equal(tl.t[0].enqueue_ns, 1000);
    assert_int_equal(tl.t[0].start_ns, 1000);
    assert_int_equal(tl.t[0].end_ns, 1000 + 1000000 + 1);
    assert_int_equal(tl.t[1].enqueue_ns, 2000);
    assert_int_equal(tl.t[1].start_ns, tl.t[0].end_ns);
    assert_int_equal(tl.t[1].end_ns, tl.t[0].end_ns + 2000000 + 1);
    /* The host did not wait: it is at 2 us while the device runs. */
    assert_int_equal(cham_device_host_time(dev), 2000);
    assert_int_equal(cham_stream_synchronize(s), CHAM_OK);
    assert_int_equal(cham_device_host_time(dev), tl.t[1].end_ns);
    cham_stream_free(s);
    cham_device_close(dev);
}

/* Kernels run at the fractions of the peaks the device reaches: at half
 * the FLOP/s a 1 GFLOP kernel lasts 2 ms, at a quarter of the bandwidth
 * 1 GB read lasts 4 ms; links are not scaled. */
static void test_kernels_at_reached_fractions(void **state)
{
    (void)state;
    cham_device_config_t c = cham_device_config_default();
    c.capacity = 256 * MiB;
    c.peak_flops = 1e12;
    c.hbm_bandwidth = 1e12;
    c.flops_efficiency = 0.5;
    c.hbm_efficiency = 0.25;
    c.kernel_overhead_ns = 1;
    cham_device_t *dev = NULL;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_stream_t *s;
    assert_int_equal(cham_stream_new(dev, "compute", &s), CHAM_OK);
    timeline_t tl = {0};
    cham_device_set_task_hook(dev, record_task, &tl);
    cham_kernel_t a = kernel("a", 1), b = {.label = "b", .bytes = 1e9};
    assert_int_equal(cham_kernel_launch(s, &a), CHAM_OK);
    assert_int_equal(cham_kernel_launch(s, &b), CHAM_OK);
    assert_int_equal(tl.t[0].end_ns - tl.t[0].start_ns, 2000000 + 1);
    assert_int_equal(tl.t[1].end_ns - tl.t[1].start_ns, 4000000 + 1);
    cham_stream_free(s);
    cham_device_close(dev);
}

static void test_streams_overlap_and_wait(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, false);
    cham_stream_t *s1, *s2;
    cham_event_t *e;
    assert_int_equal(cham_stream_new(dev, "s1", &s1), CHAM_OK);
    assert_int_equal(cham_stream_new(dev, "s2", &s2), CHAM_OK);
    assert_int_equal(cham_event_new(dev, &e), CHAM_OK);
    timeline_t tl = {0};
    cham_device_set_task_hook(dev, record_task, &tl);

    /* b is shorter than a, so only the event wait can hold c back to a's
     * end: stream order alone would start c when b ends. */
    cham_kernel_t a = kernel("a", 1), b = kernel("b", 0.5), c = kernel("c", 1);
    cham_kernel_launch(s1, &a);
    cham_kernel_launch(s2, &b);       /* independent: overlaps a */
    assert_int_equal(cham_event_record(e, s1), CHAM_OK);
    assert_int_equal(cham_stream_wait_event(s2, e), CHAM_OK);
    cham_kernel_launch(s2, &c);       /* after a and after b */
    assert_int_equal(tl.n, 3);
    /* The sim knows ahead when a recorded event completes: at a's end. */
    uint64_t done;
    assert_int_equal(cham_event_time(e, &done), CHAM_OK);
    assert_int_equal(done, 1000 + 1000000 + 1);
    assert_true(cham_device_host_time(dev) < done);
    /* a: 1 us .. 1 us + 1 ms + 1 ns; b: 2 us .. 2 us + 0.5 ms + 1 ns. */
    assert_int_equal(tl.t[0].end_ns, 1000 + 1000000 + 1);
    assert_int_equal(tl.t[1].start_ns, 2000);
    assert_int_equal(tl.t[1].end_ns, 2000 + 500000 + 1);
    /* c waits for a (1001001 ns), not only for b (502001 ns). */
    assert_int_equal(tl.t[2].start_ns, 1001001);
    assert_int_equal(tl.t[2].end_ns, 1001001 + 1000001);
    cham_sim_stats_t st;
    assert_int_equal(cham_sim_get_stats(dev, &st), CHAM_OK);
    assert_int_equal(st.stream_busy_ns[cham_stream_id(s1)], 1000001);
    assert_int_equal(st.stream_busy_ns[cham_stream_id(s2)], 500001 + 1000001);
    cham_event_free(e);
    cham_stream_free(s1);
    cham_stream_free(s2);
    cham_device_close(dev);
}

static void test_event_query_in_host_time(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, false);
    cham_stream_t *s;
    cham_event_t *e, *never;
    cham_stream_new(dev, "s", &s);
    cham_event_new(dev, &e);
    cham_event_new(dev, &never);
    assert_int_equal(cham_event_query(never), CHAM_OK);   /* never recorded: complete */

    cham_kernel_t k = kernel("k", 1);                     /* ends at 1 us + 1 ms + 1 ns */
    cham_kernel_launch(s, &k);
    cham_event_record(e, s);
    uint64_t before = cham_device_host_time(dev);
    assert_int_equal(cham_event_query(e), CHAM_NOT_READY);
    /* A query costs host time (100 ns here): polling is not free. */
    assert_int_equal(cham_device_host_time(dev), before + 100);
    /* Move the host to 100 ns before the kernel's end; the next query
     * costs those 100 ns and lands exactly on the end: complete. */
    cham_sim_stats_t st;
    cham_sim_get_stats(dev, &st);
    cham_device_host_work(dev, st.device_end_ns - 100 - cham_device_host_time(dev));
    assert_int_equal(cham_event_query(e), CHAM_OK);
    assert_int_equal(cham_device_host_time(dev), st.device_end_ns);

    /* Synchronising on a later event jumps the host clock to its time. */
    cham_kernel_launch(s, &k);
    cham_event_record(e, s);
    cham_sim_get_stats(dev, &st);
    uint64_t blocked = st.host_blocked_ns;
    cham_event_synchronize(e);
    cham_sim_get_stats(dev, &st);
    assert_int_equal(cham_device_host_time(dev), st.device_end_ns);
    assert_true(st.host_blocked_ns > blocked);
    assert_int_equal(st.event_queries, 3);
    cham_event_free(e);
    cham_event_free(never);
    cham_stream_free(s);
    cham_device_close(dev);
}

static void test_links_full_duplex_and_shared(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, false);
    cham_stream_t *s1, *s2, *s3;
    cham_stream_new(dev, "s1", &s1);
    cham_stream_new(dev, "s2", &s2);
    cham_stream_new(dev, "s3", &s3);
    void *d1, *d2, *h1, *h2;
    assert_int_equal(cham_device_mem_alloc(dev, 10 * MiB, &d1), CHAM_OK);
    assert_int_equal(cham_device_mem_alloc(dev, 10 * MiB, &d2), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(dev, 10 * MiB, &h1), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(dev, 10 * MiB, &h2), CHAM_OK);
    uint64_t t0 = cham_device_host_time(dev);
    timeline_t tl = {0};
    cham_device_set_task_hook(dev, record_task, &tl);

    /* 10 MB at 1e10 B/s = 1 ms. Opposite directions run side by side. */
    const size_t n = 10000000;
    cham_copy_async(s1, d1, h1, n, CHAM_COPY_H2D, "in");
    cham_copy_async(s2, h2, d2, n, CHAM_COPY_D2H, "out");
    assert_int_equal(tl.t[0].start_ns, t0 + 1000);
    assert_int_equal(tl.t[0].end_ns, t0 + 1000 + 1000000 + 1);
    assert_int_equal(tl.t[1].start_ns, t0 + 2000);
    assert_true(tl.t[1].start_ns < tl.t[0].end_ns);
    /* A second H2D on a third stream shares the link with the first. */
    cham_copy_async(s3, d1, h1, n, CHAM_COPY_H2D, "in2");
    assert_int_equal(tl.t[2].start_ns, tl.t[0].end_ns);
    assert_int_equal(tl.t[2].end_ns, tl.t[0].end_ns + 1000001);

    cham_sim_stats_t st;
    cham_sim_get_stats(dev, &st);
    assert_int_equal(st.bytes_h2d, 2 * n);
    assert_int_equal(st.bytes_d2h, n);
    assert_int_equal(st.link_busy_h2d_ns, 2 * 1000001);
    assert_int_equal(st.hazards, 0);
    cham_device_synchronize(dev);
    cham_device_mem_free(dev, d1);
    cham_device_mem_free(dev, d2);
    cham_device_host_free(dev, h1);
    cham_device_host_free(dev, h2);
    cham_stream_free(s1);
    cham_stream_free(s2);
    cham_stream_free(s3);
    cham_device_close(dev);
}

static void test_host_blocks_at_queue_limit(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(4, false);
    cham_stream_t *s;
    cham_stream_new(dev, "s", &s);
    timeline_t tl = {0};
    cham_device_set_task_hook(dev, record_task, &tl);
    cham_kernel_t k = kernel("k", 1);
    for (int i = 0; i < 4; i++)
        cham_kernel_launch(s, &k);
    assert_int_equal(cham_device_host_time(dev), 4000);   /* no waiting yet */
    cham_kernel_launch(s, &k);                            /* fifth: queue full */
    /* The host waited for the first kernel to finish, then queued. */
    int n = tl.n;
    assert_int_equal(tl.t[n - 2].kind, CHAM_TASK_HOST_BLOCKED);
    assert_int_equal(tl.t[n - 1].enqueue_ns, tl.t[0].end_ns);
    assert_int_equal(cham_device_host_time(dev), tl.t[0].end_ns);
    cham_sim_stats_t st;
    cham_sim_get_stats(dev, &st);
    assert_int_equal(st.host_blocked_ns, tl.t[0].end_ns - 5000);
    cham_stream_free(s);
    cham_device_close(dev);
}

/* A small program with three streams, copies, events and kernels. */
static void run_program(timeline_t *tl)
{
    cham_device_config_t c = cham_device_config_default();
    c.preset = "v100-16g";
    c.queue_depth = 8;
    cham_device_t *dev;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_device_set_task_hook(dev, record_task, tl);
    cham_stream_t *comp, *out, *in;
    cham_event_t *e;
    cham_stream_new(dev, "compute", &comp);
    cham_stream_new(dev, "swap-out", &out);
    cham_stream_new(dev, "swap-in", &in);
    cham_event_new(dev, &e);
    void *d, *h;
    cham_device_mem_alloc(dev, 64 * MiB, &d);
    cham_device_host_alloc(dev, 64 * MiB, &h);
    for (int i = 0; i < 20; i++) {
        cham_access_t acc = {(char *)d + (i % 4) * 8 * MiB, 8 * MiB, CHAM_ACCESS_WRITE};
        cham_kernel_t k = {.label = "matmul", .flops = 3e11 * (1 + i % 3), .bytes = 5e7,
                           .accesses = &acc, .n_accesses = 1};
        cham_kernel_launch(comp, &k);
        cham_event_record(e, comp);
        cham_stream_wait_event(out, e);
        cham_copy_async(out, (char *)h + (i % 4) * 8 * MiB, acc.ptr, 8 * MiB, CHAM_COPY_D2H,
                        "act");
        cham_event_record(e, out);
        cham_stream_wait_event(in, e);
        cham_copy_async(in, (char *)d + 32 * MiB, (char *)h + (i % 4) * 8 * MiB, 8 * MiB,
                        CHAM_COPY_H2D, "act-back");
        cham_event_record(e, in);
        cham_stream_wait_event(comp, e);
        cham_event_query(e);
    }
    cham_device_synchronize(dev);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_device_mem_free(dev, d);
    cham_device_host_free(dev, h);
    cham_event_free(e);
    cham_stream_free(comp);
    cham_stream_free(out);
    cham_stream_free(in);
    cham_device_close(dev);
}

static void test_deterministic(void **state)
{
    (void)state;
    static timeline_t a, b;
    run_program(&a);
    run_program(&b);
    assert_int_equal(a.n, b.n);
    assert_true(a.n > 60);
    for (int i = 0; i < a.n; i++) {
        assert_int_equal(a.t[i].kind, b.t[i].kind);
        assert_int_equal(a.t[i].stream_id, b.t[i].stream_id);
        assert_string_equal(a.t[i].label, b.t[i].label);
        assert_int_equal(a.t[i].enqueue_ns, b.t[i].enqueue_ns);
        assert_int_equal(a.t[i].start_ns, b.t[i].start_ns);
        assert_int_equal(a.t[i].end_ns, b.t[i].end_ns);
    }
}

static void test_memory_checks_and_oom(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, false);
    cham_stream_t *s;
    cham_stream_new(dev, "s", &s);
    void *d, *h, *big;
    assert_int_equal(cham_device_mem_alloc(dev, 200 * MiB, &d), CHAM_OK);
    /* 256 MiB capacity: 100 MiB more does not fit, with a clear message. */
    assert_int_equal(cham_device_mem_alloc(dev, 100 * MiB, &big), CHAM_ERR_OUT_OF_MEMORY);
    assert_null(big);
    assert_non_null(strstr(cham_device_last_error(dev), "out of device memory"));
    assert_int_equal(cham_device_host_alloc(dev, MiB, &h), CHAM_OK);

    /* A copy past the end of a segment is refused, naming the task. */
    assert_int_equal(cham_copy_async(s, (char *)d + 200 * MiB - 10, h, 100, CHAM_COPY_H2D,
                                     "tail"),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "\"tail\""));
    /* Host and device pointers swapped: refused. */
    assert_int_equal(cham_copy_async(s, h, d, 100, CHAM_COPY_H2D, "swapped"),
                     CHAM_ERR_INVALID_ARG);
    cham_access_t acc = {h, 16, CHAM_ACCESS_READ};
    cham_kernel_t k = {.label = "bad", .accesses = &acc, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(s, &k), CHAM_ERR_INVALID_ARG);

    /* Fault injection: the second allocation from now fails once. */
    assert_int_equal(cham_sim_inject_fault(dev, CHAM_SIM_FAULT_MEM_ALLOC, 1,
                                           CHAM_ERR_BACKEND), CHAM_OK);
    void *p1, *p2, *p3;
    assert_int_equal(cham_device_mem_alloc(dev, MiB, &p1), CHAM_OK);
    assert_int_equal(cham_device_mem_alloc(dev, MiB, &p2), CHAM_ERR_BACKEND);
    assert_non_null(strstr(cham_device_last_error(dev), "injected"));
    assert_int_equal(cham_device_mem_alloc(dev, MiB, &p3), CHAM_OK);

    cham_sim_stats_t st;
    cham_sim_get_stats(dev, &st);
    assert_int_equal(st.mem_in_use, 202 * MiB);
    assert_int_equal(st.mem_allocs, 3);
    cham_device_mem_free(dev, p1);
    cham_device_mem_free(dev, p3);
    cham_device_mem_free(dev, d);
    cham_device_host_free(dev, h);
    cham_sim_get_stats(dev, &st);
    assert_int_equal(st.mem_in_use, 0);
    assert_int_equal(st.host_in_use, 0);
    cham_stream_free(s);
    cham_device_close(dev);
}

static void test_free_synchronises(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, false);
    cham_stream_t *s;
    cham_stream_new(dev, "s", &s);
    void *d;
    cham_device_mem_alloc(dev, MiB, &d);
    cham_kernel_t k = kernel("long", 5);
    cham_kernel_launch(s, &k);
    cham_sim_stats_t st;
    cham_sim_get_stats(dev, &st);
    cham_device_mem_free(dev, d);       /* like cudaFree: waits for the device */
    assert_true(cham_device_host_time(dev) >= st.device_end_ns);
    cham_stream_free(s);
    cham_device_close(dev);
}

static void fill(void *arg)
{
    uint32_t *p = arg;
    for (int i = 0; i < 1024; i++)
        p[i] = 0xC0DE0000u + (uint32_t)i;
}

static void test_data_mode_round_trip(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, true);
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_true(info.data);
    cham_stream_t *s;
    cham_stream_new(dev, "s", &s);
    void *d, *h;
    cham_device_mem_alloc(dev, 8192, &d);
    cham_device_host_alloc(dev, 8192, &h);
    /* Never-written device memory holds the poison byte, every run. */
    assert_int_equal(((unsigned char *)d)[100], 0xA5);
    cham_access_t acc = {d, 4096, CHAM_ACCESS_WRITE};
    cham_kernel_t k = {.label = "fill", .flops = 1e6, .accesses = &acc, .n_accesses = 1,
                       .cpu_fn = fill, .arg = d};
    assert_int_equal(cham_kernel_launch(s, &k), CHAM_OK);
    assert_int_equal(cham_copy_async(s, h, d, 4096, CHAM_COPY_D2H, "out"), CHAM_OK);
    assert_int_equal(cham_copy_async(s, (char *)d + 4096, h, 4096, CHAM_COPY_H2D, "in"),
                     CHAM_OK);
    cham_stream_synchronize(s);
    const uint32_t *back = (const uint32_t *)((char *)d + 4096);
    for (int i = 0; i < 1024; i++)
        assert_int_equal(back[i], 0xC0DE0000u + (uint32_t)i);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_device_mem_free(dev, d);
    cham_device_host_free(dev, h);
    cham_stream_free(s);
    cham_device_close(dev);
}

static void test_open_errors(void **state)
{
    (void)state;
    cham_device_config_t c = cham_device_config_default();
    cham_device_t *dev = (cham_device_t *)1;
    c.preset = "tpu-v9";
    assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_NOT_FOUND);
    assert_null(dev);
    assert_non_null(strstr(cham_device_last_error(NULL), "\"tpu-v9\""));
    assert_non_null(strstr(cham_device_last_error(NULL), "a100-80g"));
    c = cham_device_config_default();
    c.backend = "opencl";
    assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_NOT_FOUND);
    assert_non_null(strstr(cham_device_last_error(NULL), "\"opencl\""));
    c = cham_device_config_default();
    c.h2d_bandwidth = -5;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(NULL), "h2d_bandwidth"));
    /* Defaults: the default preset, overrides applied. */
    c = cham_device_config_default();
    c.capacity = 12345ull * MiB;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_string_equal(info.backend, "sim");
    assert_string_equal(info.name, cham_preset_default_name());
    assert_int_equal(info.capacity, 12345ull * MiB);
    assert_false(info.data);
    assert_true(cham_sim_is_sim(dev));
    cham_device_close(dev);
}

static void count_hazard(const cham_hazard_t *h, void *user)
{
    (void)h;
    ++*(int *)user;
}

/* A host stream: its kernels take the host's figures (here 1e11 FLOP/s and
 * 1e10 B/s) on pinned memory, wait for events like any stream, and a read
 * of a buffer a copy still writes is a hazard. */
static void test_host_stream(void **state)
{
    (void)state;
    cham_device_config_t c = cham_device_config_default();
    c.preset = "rtx3090-24g";            /* a preset with no host */
    c.capacity = 256 * MiB;
    c.h2d_bandwidth = c.d2h_bandwidth = 1e10;
    c.kernel_overhead_ns = c.copy_latency_ns = 1;
    c.launch_ns = 1000;
    cham_device_t *dev;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_stream_t *h;
    assert_int_equal(cham_stream_new_host(dev, "adam", &h), CHAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(cham_device_last_error(dev), "rtx3090-24g"));
    assert_non_null(strstr(cham_device_last_error(dev), "host_flops"));
    cham_device_close(dev);

    c.host_flops = 1e11;
    c.host_mem_bandwidth = 1e10;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_true(info.host_flops == 1e11 && info.host_mem_bandwidth == 1e10);
    int hazards = 0;
    cham_device_set_hazard_hook(dev, count_hazard, &hazards);
    timeline_t tl = {.n = 0};
    cham_device_set_task_hook(dev, record_task, &tl);
    cham_stream_t *copy;
    assert_int_equal(cham_stream_new_host(dev, "adam", &h), CHAM_OK);
    assert_int_equal(cham_stream_new(dev, "copy", &copy), CHAM_OK);
    assert_true(cham_stream_on_host(h) && !cham_stream_on_host(copy));
    void *d, *p;
    cham_device_mem_alloc(dev, 4 * MiB, &d);
    cham_device_host_alloc(dev, 4 * MiB, &p);
    cham_access_t on_device = {d, MiB, CHAM_ACCESS_READ};
    cham_kernel_t k = {.label = "bad", .bytes = 1, .accesses = &on_device, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(h, &k), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "pinned host"));
    assert_int_equal(cham_copy_async(h, p, d, MiB, CHAM_COPY_D2H, "x"), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(dev), "host stream"));

    /* 1e7 bytes at 1e10 B/s: 1 ms; 1e9 FLOP at 1e11 FLOP/s: 10 ms. */
    cham_access_t acc = {p, MiB, CHAM_ACCESS_READ_WRITE};
    cham_kernel_t mem = {.label = "mem", .bytes = 1e7, .accesses = &acc, .n_accesses = 1};
    cham_kernel_t flop = {.label = "flop", .flops = 1e9, .accesses = &acc, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(h, &mem), CHAM_OK);
    assert_int_equal(cham_kernel_launch(h, &flop), CHAM_OK);
    assert_int_equal(tl.n, 2);
    assert_int_equal(tl.t[0].end_ns - tl.t[0].start_ns, 1000001);
    assert_int_equal(tl.t[1].end_ns - tl.t[1].start_ns, 10000001);
    assert_int_equal(hazards, 0);
    cham_stream_synchronize(h);
    tl.n = 0;

    /* A copy into the buffer, then host work on it: ordered by an event,
     * no hazard; not ordered, one. */
    cham_event_t *ev;
    cham_event_new(dev, &ev);
    assert_int_equal(cham_copy_async(copy, p, d, MiB, CHAM_COPY_D2H, "in"), CHAM_OK);
    cham_event_record(ev, copy);
    cham_stream_wait_event(h, ev);
    assert_int_equal(cham_kernel_launch(h, &mem), CHAM_OK);
    assert_int_equal(hazards, 0);
    assert_int_equal(tl.n, 2);
    assert_true(tl.t[1].start_ns >= tl.t[0].end_ns);
    cham_device_synchronize(dev);
    assert_int_equal(cham_copy_async(copy, p, d, MiB, CHAM_COPY_D2H, "in"), CHAM_OK);
    assert_int_equal(cham_kernel_launch(h, &mem), CHAM_OK);
    assert_int_equal(hazards, 1);
    cham_device_synchronize(dev);
    cham_event_free(ev);
    cham_device_mem_free(dev, d);
    cham_device_host_free(dev, p);
    cham_stream_free(copy);
    cham_stream_free(h);
    cham_device_close(dev);
}

static void test_stream_ids_reused(void **state)
{
    (void)state;
    cham_device_t *dev = open_round(1024, false);
    cham_stream_t *a, *b, *c;
    cham_stream_new(dev, "a", &a);
    cham_stream_new(dev, NULL, &b);
    assert_int_equal(cham_stream_id(a), 0);
    assert_int_equal(cham_stream_id(b), 1);
    assert_string_equal(cham_stream_name(b), "stream1");
    cham_stream_free(a);
    cham_stream_new(dev, "c", &c);
    assert_int_equal(cham_stream_id(c), 0);
    assert_ptr_equal(cham_stream_device(c), dev);
    cham_stream_free(b);
    cham_stream_free(c);
    cham_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_fifo),
        cmocka_unit_test(test_kernels_at_reached_fractions),
        cmocka_unit_test(test_streams_overlap_and_wait),
        cmocka_unit_test(test_event_query_in_host_time),
        cmocka_unit_test(test_links_full_duplex_and_shared),
        cmocka_unit_test(test_host_blocks_at_queue_limit),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_memory_checks_and_oom),
        cmocka_unit_test(test_free_synchronises),
        cmocka_unit_test(test_data_mode_round_trip),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_stream_ids_reused),
        cmocka_unit_test(test_host_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
