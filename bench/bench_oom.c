/* bench_oom: how the out-of-memory path (src/runtime/oom.c) scales with
 * the number of live tensors. One step is an op stream in which every op
 * makes a new tensor, reads the one before, and keeps it alive to the end
 * of the step (as activations saved for backward), on a device that holds
 * half of them: every allocation past the first half finds memory short
 * and passively swaps a victim out. The step is timed at 2,000, 4,000,
 * 8,000 and 16,000 live tensors in one run; with a victim index of
 * O(log n) per passive swap, doubling the tensors should at most about
 * double the step (target: each doubling at most 2.2x). Measured CPU time
 * of the thread on this machine, the median of --repeat steps per size:
 * the device is the sim without data (no bytes move), so the step is host
 * work alone, and CPU time keeps other jobs on a shared machine out of
 * the ratios. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chameleon/chameleon.h"
#include "common/rng.h"
#include "lib/machine.h"

#define KiB (UINT64_C(1) << 10)
#define MAX_SIZES 8
#define TARGET_RATIO 2.2

static const size_t default_sizes[] = {2000, 4000, 8000, 16000};

/* What one size's steps gave. */
typedef struct result {
    size_t tensors;
    uint64_t step_ns;             /* the median step */
    uint64_t passive;             /* passive swap-outs in one step */
} result_t;

static void ignore_log(const char *line, void *user)
{
    (void)line, (void)user;
}

static void die(const char *what, cham_context_t *ctx)
{
    fprintf(stderr, "bench_oom: %s: %s\n", what, cham_context_last_error(ctx));
    exit(1);
}

/* Tensor i's bytes: 64 KiB .. 1 MiB in 64 KiB steps, the same sequence for
 * every size (xorshift), so many tensors share a size and the victim's
 * tie-break is exercised. */
static uint64_t tensor_bytes(size_t i)
{
    uint64_t x = 88172645463325252u ^ (uint64_t)(i + 1) * CHAM_GOLDEN64;
    return (1 + cham_xorshift64(&x) % 16) * 64 * KiB;
}

/* CPU time of the calling thread, in ns. */
static uint64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One step of n ops: the op stream above, then every tensor released. The
 * CPU time of the ops and the step end. */
static uint64_t run_step(cham_context_t *ctx, cham_op_token_t token, cham_tensor_t **t, size_t n)
{
    uint64_t t0 = cpu_now_ns();
    for (size_t i = 0; i < n; i++) {
        if (cham_tensor_new(ctx, tensor_bytes(i), CHAM_DTYPE_F32, "act", &t[i]) != CHAM_OK)
            die("tensor", ctx);
        cham_tensor_t *in = i ? t[i - 1] : NULL;
        if (cham_op_begin(ctx, token, &in, in ? 1 : 0, &t[i], 1) != CHAM_OK ||
            cham_op_end(ctx) != CHAM_OK)
            die("op", ctx);
    }
    if (cham_step_end(ctx) != CHAM_OK)
        die("step end", ctx);
    uint64_t dt = cpu_now_ns() - t0;
    for (size_t i = 0; i < n; i++)
        cham_tensor_release(t[i]);
    return dt;
}

/* Times n live tensors: a fresh context whose device holds half of the
 * step's bytes (OOM path alone: no executor), one untimed step to make the
 * allocator's segments, then `repeat` timed steps. */
static result_t run_size(size_t n, int repeat, cham_allocator_mode_t allocator)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += tensor_bytes(i);
    cham_config_t cfg = cham_config_default();
    cfg.device.preset = "a100-80g";
    cfg.device.capacity = total / 2;
    cfg.device.hazard_check = false;
    cfg.pinned_budget = total;
    cfg.executor = false;
    cfg.allocator = allocator;
    cham_context_t *ctx;
    if (cham_context_new(&cfg, &ctx) != CHAM_OK)
        die("context", NULL);
    cham_context_set_log(ctx, ignore_log, NULL);   /* stage changes are expected */
    cham_op_token_t token;
    if (cham_op_token(ctx, "op", &token) != CHAM_OK)
        die("op token", ctx);
    cham_tensor_t **t = malloc(n * sizeof *t);
    uint64_t *ns = malloc((size_t)repeat * sizeof *ns);
    if (!t || !ns) {
        fprintf(stderr, "bench_oom: out of host memory\n");
        exit(1);
    }
    run_step(ctx, token, t, n);
    cham_runtime_stats_t before, after;
    cham_context_get_stats(ctx, &before);
    for (int r = 0; r < repeat; r++)
        ns[r] = run_step(ctx, token, t, n);
    cham_context_get_stats(ctx, &after);
    result_t res = {.tensors = n, .step_ns = bench_median_u64(ns, (size_t)repeat),
                    .passive = (after.passive_swaps_out - before.passive_swaps_out) /
                               (uint64_t)repeat};
    free(ns);
    free(t);
    cham_context_free(ctx);
    return res;
}

static int usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: bench_oom [--repeat N] [--max TENSORS] [--allocator NAME]\n"
            "  --repeat N          timed steps per size, the median is reported (1..1000, "
            "default 5)\n"
            "  --max TENSORS       leave out the sizes above TENSORS (at least 2000)\n"
            "  --allocator NAME    classic or expandable (default: both, one table each)\n");
    return status;
}

/* Times every size under one allocator and prints its table; whether each
 * doubling stayed within the target. */
static bool run_table(cham_allocator_mode_t allocator, long max, int repeat)
{
    result_t res[MAX_SIZES];
    size_t n_res = 0;
    for (size_t k = 0; k < sizeof default_sizes / sizeof default_sizes[0]; k++)
        if ((long)default_sizes[k] <= max)
            res[n_res++] = run_size(default_sizes[k], repeat, allocator);
    printf("\nallocator: %s segments\n", cham_allocator_mode_name(allocator));
    printf("%14s %16s %12s %14s %10s\n", "live tensors", "passive swaps", "step ms",
           "us per op", "x previous");
    bool met = true;
    for (size_t k = 0; k < n_res; k++) {
        printf("%14zu %16llu %12.2f %14.2f", res[k].tensors,
               (unsigned long long)res[k].passive, (double)res[k].step_ns / 1e6,
               (double)res[k].step_ns / 1e3 / (double)res[k].tensors);
        if (k == 0) {
            printf("\n");
            continue;
        }
        double ratio = (double)res[k].step_ns / (double)res[k - 1].step_ns;
        met &= ratio <= TARGET_RATIO;
        printf(" %9.2fx\n", ratio);
    }
    if (n_res < 2)
        printf("target: each doubling at most %.1fx the step time: not measured (one size)\n",
               TARGET_RATIO);
    else
        printf("target: each doubling of the live tensors at most %.1fx the step time: %s\n",
               TARGET_RATIO, bench_verdict(met));
    return met;
}

int main(int argc, char **argv)
{
    bench_output_by_line();
    int repeat = 5;
    long max = 16000;
    cham_allocator_mode_t allocators[2] = {CHAM_ALLOCATOR_CLASSIC, CHAM_ALLOCATOR_EXPANDABLE};
    size_t n_allocators = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
            if (repeat < 1 || repeat > 1000) {
                fprintf(stderr, "bench_oom: --repeat must be 1..1000\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc) {
            max = atol(argv[++i]);
            if (max < 2000) {
                fprintf(stderr, "bench_oom: --max must be at least 2000\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--allocator") == 0 && i + 1 < argc) {
            if (cham_allocator_mode_parse(argv[++i], &allocators[0]) != CHAM_OK ||
                allocators[0] == CHAM_ALLOCATOR_AUTO) {
                fprintf(stderr, "bench_oom: --allocator must be classic or expandable, not "
                        "\"%s\"\n", argv[i]);
                return 2;
            }
            n_allocators = 1;
        } else {
            return usage(strcmp(argv[i], "--help") == 0 ? 0 : 2);
        }
    }
    char cpu[128];
    bench_cpu_model(cpu, sizeof cpu);
    printf("OOM path scaling: one step, every op makes a tensor kept to the step's end, the "
           "device holds half of them\n");
    printf("measured CPU time of the thread (CLOCK_THREAD_CPUTIME_ID) on %s, median of %d "
           "steps per size;\nsim device without data, executor off (passive swaps only)\n",
           cpu, repeat);
    for (size_t k = 0; k < n_allocators; k++)
        run_table(allocators[k], max, repeat);
    return 0;
}
