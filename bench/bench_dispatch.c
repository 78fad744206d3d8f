/* bench_dispatch: what the dispatch bracket (cham_op_begin / cham_op_end)
 * costs the host per op, in the profiler's lightweight and detailed modes,
 * against the same loop without the bracket, on a synthetic step of 10,000
 * ops shaped like an LLM's (Llama-2-7B-like layers, batch 4 x 4096 tokens,
 * fp16). The overhead is also put against the step's device time on the
 * ascend-910b preset (simulated) to give the share of a step it would take.
 * Times are measured wall clock on this machine; medians of --repeat steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chameleon/chameleon.h"
#include "common/rng.h"
#include "lib/machine.h"

#define N_OPS 10000
#define N_TENSORS 512

/* One op of the synthetic step: its token, two inputs, one output, and a
 * device cost for the simulated step time. */
typedef struct bench_op {
    cham_op_token_t token;
    int in[2], out;
    double flops, bytes;
} bench_op_t;

static void ignore_log(const char *line, void *user)
{
    (void)line, (void)user;
}

static void die(const char *what, cham_context_t *ctx)
{
    fprintf(stderr, "bench_dispatch: %s: %s\n", what, cham_context_last_error(ctx));
    exit(1);
}

/* A Llama-like layer's ops, repeated: matmuls (2 * b*s*h*h FLOPs), and
 * element-wise ops moving 2-3 activations (b*s*h fp16 values each). */
static void make_ops(cham_context_t *ctx, bench_op_t *ops)
{
    static const char *const names[] = {
        "rms_norm", "matmul_q", "matmul_k", "matmul_v", "rope", "flash_attn", "matmul_o",
        "add", "rms_norm", "matmul_gate", "matmul_up", "silu", "mul", "matmul_down", "add"};
    const size_t per_layer = sizeof names / sizeof names[0];
    const double b = 4, s = 4096, h = 4096, act = b * s * h * 2;
    uint64_t x = 88172645463325252u;     /* xorshift: the same step every run */
    for (size_t i = 0; i < N_OPS; i++) {
        const char *name = names[i % per_layer];
        if (cham_op_token(ctx, name, &ops[i].token) != CHAM_OK)
            die("op token", ctx);
        bool mm = strncmp(name, "matmul", 6) == 0;
        bool attn = strcmp(name, "flash_attn") == 0;
        ops[i].flops = mm ? 2 * b * s * h * h : attn ? 4 * b * s * s * h : 0;
        ops[i].bytes = mm ? 2 * act : 3 * act;
        for (int k = 0; k < 3; k++) {
            int t = (int)(cham_xorshift64(&x) % N_TENSORS);
            if (k < 2)
                ops[i].in[k] = t;
            else
                ops[i].out = t;
        }
    }
}

/* One step's loop and its step end; with bracket false it walks the same
 * arrays without calling the runtime, so the difference is the bracket
 * (and the stage machine's comparison at step end) alone. */
static uint64_t run_step(cham_context_t *ctx, const bench_op_t *ops, cham_tensor_t **tensors,
                         bool bracket)
{
    volatile uintptr_t sink = 0;
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < N_OPS; i++) {
        cham_tensor_t *in[2] = {tensors[ops[i].in[0]], tensors[ops[i].in[1]]};
        cham_tensor_t *out = tensors[ops[i].out];
        if (bracket) {
            if (cham_op_begin(ctx, ops[i].token, in, 2, &out, 1) != CHAM_OK ||
                cham_op_end(ctx) != CHAM_OK)
                die("dispatch", ctx);
        } else {
            sink += (uintptr_t)in[0] ^ (uintptr_t)in[1] ^ (uintptr_t)out ^ (uintptr_t)ops[i].token;
        }
    }
    /* The stage machine's comparison at step end is part of the cost. */
    if (bracket && cham_step_end(ctx) != CHAM_OK)
        die("step end", ctx);
    (void)sink;
    return bench_now_ns() - t0;
}

/* Simulated device time of the step on the preset (kernels only). */
static double simulated_step_ns(const bench_op_t *ops, const char *preset)
{
    cham_device_config_t c = cham_device_config_default();
    c.preset = preset;
    c.hazard_check = false;
    cham_device_t *dev;
    cham_stream_t *s;
    if (cham_device_open(&c, &dev) != CHAM_OK || cham_stream_new(dev, "compute", &s) != CHAM_OK) {
        fprintf(stderr, "bench_dispatch: sim device: %s\n", cham_device_last_error(NULL));
        exit(1);
    }
    for (size_t i = 0; i < N_OPS; i++) {
        cham_kernel_t k = {.label = "op", .flops = ops[i].flops, .bytes = ops[i].bytes};
        cham_kernel_launch(s, &k);
    }
    cham_device_synchronize(dev);
    double t = (double)cham_device_host_time(dev);
    cham_stream_free(s);
    cham_device_close(dev);
    return t;
}

int main(int argc, char **argv)
{
    bench_output_by_line();
    int repeat = 31;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
            if (repeat < 1 || repeat > 10000) {
                fprintf(stderr, "bench_dispatch: --repeat must be 1..10000\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_dispatch [--repeat N]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    cham_config_t cfg = cham_config_default();
    cfg.device.preset = "ascend-910b";
    cfg.device.hazard_check = false;
    cham_context_t *ctx;
    if (cham_context_new(&cfg, &ctx) != CHAM_OK)
        die("context", NULL);
    cham_context_set_log(ctx, ignore_log, NULL);   /* stage changes are expected */
    static bench_op_t ops[N_OPS];
    static cham_tensor_t *tensors[N_TENSORS];
    make_ops(ctx, ops);
    for (int i = 0; i < N_TENSORS; i++)
        if (cham_tensor_new(ctx, 1 << 20, CHAM_DTYPE_F16, "t", &tensors[i]) != CHAM_OK)
            die("tensor", ctx);

    uint64_t *base = calloc((size_t)repeat, sizeof *base);
    uint64_t *light = calloc((size_t)repeat, sizeof *light);
    uint64_t *detail = calloc((size_t)repeat, sizeof *detail);
    if (!base || !light || !detail)
        return 1;
    /* Warm up: settle the stage machine and the caches. */
    for (int r = 0; r < 3; r++)
        run_step(ctx, ops, tensors, true);
    for (int r = 0; r < repeat; r++) {
        base[r] = run_step(ctx, ops, tensors, false);
        light[r] = run_step(ctx, ops, tensors, true);
        cham_context_request_profile(ctx);
        detail[r] = run_step(ctx, ops, tensors, true);
    }
    double b = (double)bench_median_u64(base, (size_t)repeat) / N_OPS;
    double l = (double)bench_median_u64(light, (size_t)repeat) / N_OPS;
    double d = (double)bench_median_u64(detail, (size_t)repeat) / N_OPS;
    double step = simulated_step_ns(ops, "ascend-910b"), per_op = step / N_OPS;

    printf("dispatch bracket cost: %d ops per step, 3 tensors per op, median of %d steps\n",
           N_OPS, repeat);
    printf("measured wall clock (CLOCK_MONOTONIC) on this machine; device time simulated "
           "(ascend-910b preset, %.1f ms per step, %.1f us per op)\n\n", step / 1e6,
           per_op / 1e3);
    printf("%-34s %10s %12s %14s\n", "mode", "ns/op", "overhead/op", "share of step");
    printf("%-34s %10.1f %12s %14s\n", "loop without the bracket", b, "-", "-");
    printf("%-34s %10.1f %12.1f %13.4f%%\n", "lightweight (op tokens, features)", l, l - b,
           100.0 * (l - b) / per_op);
    printf("%-34s %10.1f %12.1f %13.4f%%\n", "detailed (full profile)", d, d - b,
           100.0 * (d - b) / per_op);
    printf("\nthe overhead stays under 1%% of a step whose ops average at least %.1f us "
           "(lightweight) or %.1f us (detailed) of device time\n", (l - b) / 10.0,
           (d - b) / 10.0);
    printf("\ntargets: lightweight < 50 ns/op: %s; < 1%% of step: %s; detailed < 5%% of step: "
           "%s\n", bench_verdict(l - b < 50), bench_verdict((l - b) / per_op < 0.01),
           bench_verdict((d - b) / per_op < 0.05));

    for (int i = 0; i < N_TENSORS; i++)
        cham_tensor_release(tensors[i]);
    cham_context_free(ctx);
    free(base);
    free(light);
    free(detail);
    return 0;
}
