/* bench_plan: how long Chameleon's policy generator takes for profiles of
 * 1,000, 10,000 and 100,000 ops, and how that grows against n log n.
 *
 * Each profile is a synthetic transformer step built directly with the
 * profile builder: per layer a few forward ops, each saving an activation
 * for backward, the backward ops in reverse freeing them, then one optimizer
 * op per layer. The capacity is set so that the peak exceeds what fits by
 * about a third, so every profile needs a real policy. Times are measured
 * wall clock on this machine (medians of --repeat runs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chameleon/chameleon.h"
#include "profile/profile-impl.h"

#define MiB (1024.0 * 1024.0)
#define OPS_PER_LAYER 8                  /* forward ops per layer; backward likewise */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "bench_plan: %s: out of host memory\n", what);
        exit(1);
    }
}

static cham_tensor_use_t use_of(uint64_t storage, uint64_t bytes, uint32_t uses, bool output)
{
    return (cham_tensor_use_t){.storage = storage, .data_ptr = 0x100000000u + storage * 4096,
                               .bytes = bytes, .storage_bytes = bytes,
                               .dtype = CHAM_DTYPE_BF16, .use_count = uses,
                               .history = uses, .output = output};
}

/* A step of `layers` layers; *peak receives the profile's memory peak. */
static cham_profile_t *make_profile(uint32_t layers, uint64_t *peak)
{
    const uint64_t act = 64u << 20, weights = (uint64_t)layers * (256u << 20);
    const uint32_t n_act = layers * OPS_PER_LAYER;
    cham_profile_t *p = cham_profile_new(1, 0);
    check(p != NULL, "profile");
    const char *names[] = {"fwd", "bwd", "adamw"};
    check(cham_profile_set_tokens(p, names, 3), "tokens");
    uint64_t mem = weights, top = mem;
    /* Forward: op i reads activation i-1 and writes activation i. */
    for (uint32_t i = 0; i < n_act; i++) {
        check(cham_profile_begin_op(p, 0, CHAM_PHASE_FORWARD, mem), "op");
        if (i > 0) {
            cham_tensor_use_t in = use_of(i - 1, act, 1, false);
            check(cham_profile_add_use(p, &in), "use");
        }
        cham_tensor_use_t out = use_of(i, act, 0, true);
        check(cham_profile_add_use(p, &out), "use");
        mem += act;
        top = mem > top ? mem : top;
        cham_profile_end_op(p, mem);
    }
    /* Backward: op j reads activation n_act-1-j and frees it. */
    for (uint32_t j = 0; j < n_act; j++) {
        uint64_t s = n_act - 1 - j;
        check(cham_profile_begin_op(p, 1, CHAM_PHASE_BACKWARD, mem), "op");
        cham_tensor_use_t in = use_of(s, act, 2, false);
        check(cham_profile_add_use(p, &in), "use");
        mem -= act;
        cham_profile_end_op(p, mem);
    }
    for (uint32_t l = 0; l < layers; l++) {
        check(cham_profile_begin_op(p, 2, CHAM_PHASE_OPTIMIZER, mem), "op");
        cham_profile_end_op(p, mem);
    }
    /* 1 ms of device time per layer's forward and twice that backward. */
    cham_profile_set_duration(p, (uint64_t)layers * 3000000u);
    *peak = top;
    return p;
}

int main(int argc, char **argv)
{
    int repeat = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            repeat = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_plan [--repeat N]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    const cham_preset_t *dev = cham_preset_find("ascend-910b");
    printf("policy generation time: synthetic transformer profiles, %d forward ops per layer,\n"
           "64 MiB activations, capacity = 3/4 of the peak; measured wall clock on this "
           "machine, median of %d\n\n", OPS_PER_LAYER, repeat);
    printf("%9s %8s %10s %12s %10s %14s\n", "ops", "items", "ms", "ns per op", "peak GiB",
           "ms / (n log n)");
    double first_ratio = 0;
    for (uint32_t layers = 60; layers <= 6000; layers *= 10) {
        uint64_t peak;
        cham_profile_t *p = make_profile(layers, &peak);
        cham_profile_view_t pv;
        cham_profile_get(p, &pv);
        cham_planner_config_t cfg = cham_planner_config_default();
        cfg.capacity = peak / 4 * 3;
        cfg.h2d_bandwidth = dev->h2d_bandwidth;
        cfg.d2h_bandwidth = dev->d2h_bandwidth;
        uint64_t *t = calloc((size_t)repeat, sizeof *t);
        check(t != NULL, "times");
        size_t items = 0;
        for (int r = 0; r < repeat; r++) {
            cham_policy_t *pol;
            char err[512];
            uint64_t t0 = now_ns();
            cham_status_t st = cham_plan_chameleon(p, &cfg, &pol, err, sizeof err);
            t[r] = now_ns() - t0;
            if (st != CHAM_OK) {
                fprintf(stderr, "bench_plan: %zu ops: %s\n", pv.n_ops, err);
                return 1;
            }
            cham_policy_view_t v;
            cham_policy_get(pol, &v);
            items = v.n_items;
            cham_policy_free(pol);
        }
        qsort(t, (size_t)repeat, sizeof *t, cmp_u64);
        double ms = (double)t[repeat / 2] / 1e6, n = (double)pv.n_ops;
        double ratio = ms / (n * log2(n));
        if (first_ratio == 0)
            first_ratio = ratio;
        printf("%9zu %8zu %10.3f %12.1f %10.1f %14.2e  (x%.2f of the 1k ratio)\n", pv.n_ops,
               items, ms, ms * 1e6 / n, (double)peak / (1024.0 * MiB), ratio,
               ratio / first_ratio);
        free(t);
        cham_profile_free(p);
    }
    printf("\ntarget: under 10 ms for 10,000 ops, growth no worse than n log n (the last "
           "column stays near 1 or falls)\n");
    return 0;
}
