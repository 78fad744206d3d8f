/* bench_executor: what the executor costs and gains.
 *
 * 1. Custom against PyTorch-style recordStream (paper Fig. 8), simulated:
 *    the transformer-shaped scripted workload (tests/support/train_script.h,
 *    no data) at half the memory it needs, on two presets, as layers grow.
 *    Per setting: the step time in Stable (virtual time, averaged over the
 *    last steps), the memory block reuse interval (ops dispatched between a
 *    swapped-out block's free and its return to the pool: mean and max),
 *    host event queries and host waits per step.
 * 2. The policy cache, simulated: a run with a forward-only validation step
 *    every 20 steps, total time with and without the cache.
 * 3. Matching cost, measured on this machine: the tensor uses of a profiled
 *    step replayed through the matcher (features -> policy item), against
 *    the same loop without the lookup; ns per op, median of --repeat runs.
 *
 * Usage: bench_executor [--quick] [--repeat N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "match/match.h"
#include "lib/machine.h"
#include "support/train_script.h"

#define MiB (UINT64_C(1) << 20)

static void ignore_log(const char *line, void *user)
{
    (void)line, (void)user;
}

static void die(const char *what, cham_context_t *ctx)
{
    fprintf(stderr, "bench_executor: %s: %s\n", what, cham_context_last_error(ctx));
    exit(1);
}

static cham_context_t *open_ctx(const char *preset, uint64_t capacity, bool pytorch)
{
    cham_config_t c = cham_config_default();
    c.device.preset = preset;
    c.device.capacity = capacity;
    c.device.hazard_check = false;       /* timing only; the tests check hazards */
    c.pinned_budget = 1024 * 1024 * MiB;
    c.pytorch_record_stream = pytorch;
    cham_context_t *ctx = NULL;
    if (cham_context_new(&c, &ctx) != CHAM_OK)
        die("context", NULL);
    cham_context_set_log(ctx, ignore_log, NULL);
    return ctx;
}

static ts_config_t workload(int layers)
{
    ts_config_t tc = ts_config_default();
    tc.layers = layers;
    tc.act_bytes = 32 * MiB;
    tc.weight_bytes = 8 * MiB;
    tc.layer_flops = 8e12;
    return tc;
}

/* ---- 1. recordStream ------------------------------------------------------------*/

typedef struct outcome {
    double step_ms;              /* simulated, Stable steps */
    double reuse_mean;
    uint64_t reuse_max;
    double queries, syncs;       /* per Stable step */
    uint64_t passive;            /* passive swaps in Stable steps */
    bool stable;
} outcome_t;

#define STEPS 20
#define TIMED 6                  /* the last steps, all in Stable */

static outcome_t run(const char *preset, const ts_config_t *tc, uint64_t capacity, bool pytorch)
{
    cham_context_t *ctx = open_ctx(preset, capacity, pytorch);
    ts_model_t *m = ts_model_new(ctx, tc);
    if (!m)
        die("model", ctx);
    outcome_t o = {0};
    uint64_t sum, t0 = 0;
    cham_alloc_stats_t a0 = {0}, a1;
    cham_runtime_stats_t r0 = {0}, r1;
    for (int s = 0; s < STEPS; s++) {
        if (s == STEPS - TIMED) {
            cham_device_synchronize(cham_context_device(ctx));
            t0 = cham_device_host_time(cham_context_device(ctx));
            cham_context_alloc_stats(ctx, &a0);
            cham_context_get_stats(ctx, &r0);
            o.stable = cham_context_stage(ctx) == CHAM_STAGE_STABLE;
        }
        if (ts_step(m, s, &sum) != CHAM_OK)
            die("step", ctx);
    }
    cham_device_synchronize(cham_context_device(ctx));
    uint64_t t1 = cham_device_host_time(cham_context_device(ctx));
    cham_context_alloc_stats(ctx, &a1);
    cham_context_get_stats(ctx, &r1);
    uint64_t released = a1.n_deferred_released - a0.n_deferred_released;
    o.step_ms = (double)(t1 - t0) / TIMED / 1e6;
    o.reuse_mean = released ? (double)(a1.reuse_interval_sum - a0.reuse_interval_sum) /
                                  (double)released : 0;
    o.reuse_max = a1.reuse_interval_max;
    o.queries = (double)(a1.n_event_queries - a0.n_event_queries) / TIMED;
    o.syncs = (double)(a1.n_event_syncs - a0.n_event_syncs) / TIMED;
    o.passive = r1.passive_swaps_out - r0.passive_swaps_out;
    ts_model_free(m);
    cham_context_free(ctx);
    return o;
}

/* The memory the workload needs without swaps. */
static uint64_t need(const char *preset, const ts_config_t *tc)
{
    cham_context_t *ctx = open_ctx(preset, 0, false);
    ts_model_t *m = ts_model_new(ctx, tc);
    uint64_t sum;
    if (!m || ts_step(m, 0, &sum) != CHAM_OK)
        die("unconstrained step", ctx);
    cham_runtime_stats_t st;
    cham_context_get_stats(ctx, &st);
    ts_model_free(m);
    cham_context_free(ctx);
    return st.mem_peak;
}

static void record_stream(bool quick)
{
    static const char *const presets[] = {"ascend-910b", "a100-80g"};
    static const int layers[] = {8, 16, 24, 32};
    size_t n_layers = quick ? 2 : sizeof layers / sizeof layers[0];
    printf("1. custom vs PyTorch recordStream (simulated; scripted transformer-shaped "
           "workload,\n   32 MiB activations, half the memory it needs; Stable steps %d-%d)\n\n",
           STEPS - TIMED, STEPS - 1);
    printf("%-12s %6s %9s %9s | %10s %10s %6s %7s | %10s %10s %8s %8s %6s %7s | %7s %7s\n",
           "preset", "layers", "capacity", "ideal ms", "custom ms", "reuse avg", "max",
           "passive", "pytorch ms", "reuse avg", "max", "queries", "syncs", "passive", "time x",
           "reuse x");
    double ratio_sum = 0;
    int n = 0;
    for (size_t p = 0; p < 2; p++) {
        for (size_t l = 0; l < n_layers; l++) {
            ts_config_t tc = workload(layers[l]);
            uint64_t cap = need(presets[p], &tc) / 2;
            outcome_t ideal = run(presets[p], &tc, 0, false);
            outcome_t c = run(presets[p], &tc, cap, false);
            outcome_t t = run(presets[p], &tc, cap, true);
            double rx = c.reuse_mean > 0 ? t.reuse_mean / c.reuse_mean : 0;
            printf("%-12s %6d %6.1fGiB %9.2f | %10.2f %10.2f %6llu %7llu | %10.2f %10.2f %8llu "
                   "%8.0f %6.1f %7llu | %7.3f %7.2f%s\n",
                   presets[p], layers[l], (double)cap / (1024.0 * MiB), ideal.step_ms, c.step_ms,
                   c.reuse_mean, (unsigned long long)c.reuse_max, (unsigned long long)c.passive,
                   t.step_ms, t.reuse_mean, (unsigned long long)t.reuse_max, t.queries, t.syncs,
                   (unsigned long long)t.passive, t.step_ms / c.step_ms, rx,
                   c.stable && t.stable ? "" : "  (not all in Stable)");
            ratio_sum += rx;
            n++;
        }
    }
    printf("\nreuse interval, PyTorch's over custom, mean over settings: %.2fx (target >= 3x: "
           "%s)\n\n", ratio_sum / n, bench_verdict(ratio_sum / n >= 3));
}

/* ---- 3. matching cost -------------------------------------------------------------*/

typedef struct replay {
    cham_features_t *feat;       /* after each use */
    int32_t *token;
    uint64_t *storage;
    size_t n_uses, n_ops;
} replay_t;

/* The features after every use of the profile, as the runtime computes
 * them (with the tag bits of the index). */
static replay_t make_replay(const cham_profile_t *p, const cham_match_t *m)
{
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    replay_t r = {.n_uses = v.n_uses, .n_ops = v.n_ops};
    r.feat = calloc(v.n_uses, sizeof *r.feat);
    r.token = calloc(v.n_uses, sizeof *r.token);
    r.storage = calloc(v.n_uses, sizeof *r.storage);
    uint64_t max_id = 0;
    for (size_t u = 0; u < v.n_uses; u++)
        max_id = v.uses[u].storage > max_id ? v.uses[u].storage : max_id;
    cham_features_t *cur = calloc(max_id + 1, sizeof *cur);
    if (!r.feat || !r.token || !r.storage || !cur) {
        fprintf(stderr, "bench_executor: out of host memory\n");
        exit(1);
    }
    for (size_t o = 0; o < v.n_ops; o++) {
        for (uint32_t k = 0; k < v.ops[o].n_uses; k++) {
            size_t u = v.ops[o].first_use + k;
            cham_features_t *f = &cur[v.uses[u].storage];
            f->bytes = v.uses[u].storage_bytes;
            f->dtype = (uint32_t)v.uses[u].dtype;
            cham_features_advance(f, v.ops[o].token, cham_match_tag_bit(m, v.ops[o].token));
            r.feat[u] = *f;
            r.token[u] = v.ops[o].token;
            r.storage[u] = v.uses[u].persistent ? v.uses[u].storage : CHAM_MATCH_NEW;
        }
    }
    free(cur);
    return r;
}

static void matching_cost(int repeat)
{
    /* A 32-layer run at half its memory, profiled in GenPolicy. */
    ts_config_t tc = workload(32);
    cham_context_t *ctx = open_ctx("a100-80g", need("a100-80g", &tc) / 2, false);
    ts_model_t *model = ts_model_new(ctx, &tc);
    uint64_t sum;
    for (int s = 0; s < 8; s++)
        if (!model || ts_step(model, s, &sum) != CHAM_OK)
            die("step", ctx);
    const cham_profile_t *prof = cham_context_last_profile(ctx);
    cham_device_info_t info;
    cham_device_get_info(cham_context_device(ctx), &info);
    cham_planner_config_t pc = cham_planner_config_default();
    pc.capacity = info.capacity;
    pc.h2d_bandwidth = info.h2d_bandwidth;
    pc.d2h_bandwidth = info.d2h_bandwidth;
    cham_policy_t *pol = NULL;
    char err[300];
    if (cham_plan_chameleon(prof, &pc, &pol, err, sizeof err) != CHAM_OK) {
        fprintf(stderr, "bench_executor: plan: %s\n", err);
        exit(1);
    }
    cham_match_t m;
    if (!cham_match_build(&m, pol, prof)) {
        fprintf(stderr, "bench_executor: out of host memory\n");
        exit(1);
    }
    replay_t r = make_replay(prof, &m);
    cham_policy_view_t pv;
    cham_policy_get(pol, &pv);

    uint64_t *with = malloc((size_t)repeat * sizeof *with);
    uint64_t *without = malloc((size_t)repeat * sizeof *without);
    volatile uint64_t sink = 0;
    size_t hits = 0;
    for (int k = 0; k < repeat; k++) {
        uint64_t t0 = bench_now_ns();
        uint64_t acc = 0;
        for (size_t u = 0; u < r.n_uses; u++)
            acc += r.feat[u].use_count + (uint64_t)r.token[u];
        uint64_t t1 = bench_now_ns();
        sink += acc;
        cham_match_step_start(&m);
        hits = 0;
        uint64_t t2 = bench_now_ns();
        for (size_t u = 0; u < r.n_uses; u++)
            hits += cham_match_use(&m, &r.feat[u], r.token[u], r.storage[u]) != CHAM_MATCH_NONE;
        uint64_t t3 = bench_now_ns();
        without[k] = t1 - t0;
        with[k] = t3 - t2;
    }
    double base = (double)bench_median_u64(without, (size_t)repeat);
    double full = (double)bench_median_u64(with, (size_t)repeat);
    char cpu[128];
    bench_cpu_model(cpu, sizeof cpu);
    printf("3. matching cost (measured on %s; median of %d replays)\n\n", cpu, repeat);
    printf("   step replayed: %zu ops, %zu tensor uses; policy: %zu items; matched %zu\n",
           r.n_ops, r.n_uses, pv.n_items, hits);
    printf("   loop without lookup: %8.1f ns per op\n", base / (double)r.n_ops);
    printf("   loop with matching:  %8.1f ns per op\n", full / (double)r.n_ops);
    double cost = (full - base) / (double)r.n_ops;
    printf("   matching costs       %8.1f ns per op (target < 100: %s)\n", cost,
           bench_verdict(cost < 100));
    (void)sink;
    free(with), free(without), free(r.feat), free(r.token), free(r.storage);
    cham_match_free(&m);
    cham_policy_free(pol);
    ts_model_free(model);
    cham_context_free(ctx);
}

/* ---- 2. the policy cache ----------------------------------------------------------*/

/* Total simulated time of a run with a validation step every 20 steps, with
 * and without the policy cache. */
static void policy_cache(bool quick)
{
    int steps = quick ? 60 : 200;
    ts_config_t tc = workload(16);
    tc.validate_every = 20;
    uint64_t cap = need("ascend-910b", &tc) / 2;
    printf("2. policy cache (simulated, ascend-910b; %d steps, forward-only validation every "
           "20 steps, half the memory)\n\n", steps);
    printf("   %-6s %12s %10s %10s %12s %12s\n", "cache", "total s", "policies", "cache hits",
           "passive", "with policy");
    double total[2];
    for (int on = 1; on >= 0; on--) {
        cham_config_t c = cham_config_default();
        c.device.preset = "ascend-910b";
        c.device.capacity = cap;
        c.device.hazard_check = false;
        c.pinned_budget = 1024 * 1024 * MiB;
        c.policy_cache = on ? 4 : 0;
        cham_context_t *ctx = NULL;
        if (cham_context_new(&c, &ctx) != CHAM_OK)
            die("context", NULL);
        cham_context_set_log(ctx, ignore_log, NULL);
        ts_model_t *m = ts_model_new(ctx, &tc);
        uint64_t sum;
        for (int st = 0; st < steps; st++)
            if (!m || ts_step(m, st, &sum) != CHAM_OK)
                die("step", ctx);
        cham_device_synchronize(cham_context_device(ctx));
        total[on] = (double)cham_device_host_time(cham_context_device(ctx)) / 1e9;
        cham_runtime_stats_t r;
        cham_context_get_stats(ctx, &r);
        printf("   %-6s %12.2f %10llu %10llu %12llu %12llu\n", on ? "on" : "off", total[on],
               (unsigned long long)r.policies_generated, (unsigned long long)r.policy_cache_hits,
               (unsigned long long)r.passive_swaps_out, (unsigned long long)r.steps_with_policy);
        ts_model_free(m);
        cham_context_free(ctx);
    }
    printf("\n   run time without the cache over with it: %.3fx\n\n", total[0] / total[1]);
}

int main(int argc, char **argv)
{
    bench_output_by_line();
    bool quick = false;
    int repeat = 51;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_executor [--quick] [--repeat N]\n");
            return 2;
        }
    }
    if (repeat < 1)
        repeat = 1;
    record_stream(quick);
    policy_cache(quick);
    matching_cost(repeat);
    return 0;
}
