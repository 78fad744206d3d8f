/* The runtime API: reference counting, views that follow their storage's
 * swaps, swaps that keep data bit-exact without hazards, the rebuilt
 * no-swap memory curve (both curves worked out by hand), a flipped bit in a
 * swapped activation caught by the data check, the stage machine seen
 * through the context, advisor mode, and misuse reported as errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "support/files.h"

#define MiB (1024u * 1024u)
#define KiB 1024u

static cham_context_t *open_ctx(cham_mode_t mode, bool data, uint64_t capacity)
{
    cham_config_t c = cham_config_default();
    c.device.capacity = capacity;
    c.device.data = data;
    c.mode = mode;
    c.pinned_budget = 256 * MiB;
    cham_context_t *ctx = NULL;
    cham_status_t st = cham_context_new(&c, &ctx);
    if (st != CHAM_OK)
        fail_msg("context: %s", cham_context_last_error(NULL));
    return ctx;
}

/* Counts the lines logged. */
static void count_lines(const char *line, void *user)
{
    int *n = user;
    (*n)++;
    (void)line;
}

/* Counts the stage changes logged; other lines are ignored. */
static void quiet(const char *line, void *user)
{
    int *n = user;
    if (strstr(line, "stage "))
        (*n)++;
}

static cham_op_token_t token(cham_context_t *ctx, const char *name)
{
    cham_op_token_t t;
    assert_int_equal(cham_op_token(ctx, name, &t), CHAM_OK);
    return t;
}

static void test_tokens(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 64 * MiB);
    assert_int_equal(token(ctx, "matmul"), 0);
    assert_int_equal(token(ctx, "gelu"), 1);
    assert_int_equal(token(ctx, "matmul"), 0);
    assert_string_equal(cham_op_name(ctx, 1), "gelu");
    assert_null(cham_op_name(ctx, 2));
    cham_op_token_t t;
    assert_int_equal(cham_op_token(ctx, "", &t), CHAM_ERR_INVALID_ARG);
    cham_context_free(ctx);
}

static void test_reference_counting(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 64 * MiB);
    cham_runtime_stats_t st;
    cham_tensor_t *a, *v;
    assert_int_equal(cham_tensor_new(ctx, 3 * MiB, CHAM_DTYPE_F32, "a", &a), CHAM_OK);
    assert_int_equal(cham_tensor_view(a, MiB, MiB, CHAM_DTYPE_F16, "a[1]", &v), CHAM_OK);
    assert_true(cham_tensor_same_storage(a, v));
    assert_ptr_equal(cham_tensor_data(v), (char *)cham_tensor_data(a) + MiB);
    cham_tensor_retain(a);
    cham_context_get_stats(ctx, &st);
    assert_int_equal(st.mem_in_use, 3 * MiB);
    cham_tensor_release(a);               /* a still has one holder */
    cham_tensor_release(a);               /* a gone, the view keeps the storage */
    cham_context_get_stats(ctx, &st);
    assert_int_equal(st.mem_in_use, 3 * MiB);
    assert_non_null(cham_tensor_data(v));
    cham_tensor_release(v);               /* the last holder: storage freed */
    cham_context_get_stats(ctx, &st);
    assert_int_equal(st.mem_in_use, 0);
    /* The device block went back: the whole capacity can be had again. */
    cham_tensor_t *big;
    assert_int_equal(cham_tensor_new(ctx, 60 * MiB, CHAM_DTYPE_U8, "big", &big), CHAM_OK);
    cham_tensor_release(big);
    cham_context_free(ctx);
}

static void test_misuse_is_reported(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 16 * MiB);
    cham_tensor_t *t, *v;
    cham_op_token_t op = token(ctx, "op");
    assert_int_equal(cham_op_end(ctx), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "without op begin"));
    assert_int_equal(cham_op_begin(ctx, 7, NULL, 0, NULL, 0), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "unknown op token 7"));
    assert_int_equal(cham_op_begin(ctx, op, NULL, 0, NULL, 0), CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, op, NULL, 0, NULL, 0), CHAM_ERR_INVALID_ARG);
    assert_int_equal(cham_step_end(ctx), CHAM_ERR_INVALID_ARG);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_new(ctx, 32 * MiB, CHAM_DTYPE_F32, "huge", &t),
                     CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(cham_context_last_error(ctx), "\"huge\""));
    assert_non_null(strstr(cham_context_last_error(ctx), "out of device memory"));
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x1000, 16, CHAM_DTYPE_F32, "w", &t),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "advisor mode"));
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "t", &t), CHAM_OK);
    assert_int_equal(cham_tensor_view(t, MiB - 8, 16, CHAM_DTYPE_F32, "tail", &v),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "not inside"));
    cham_tensor_release(t);
    cham_context_free(ctx);

    cham_config_t c = cham_config_default();
    c.cosine_threshold = 2.0;
    cham_context_t *bad = (cham_context_t *)1;
    assert_int_equal(cham_context_new(&c, &bad), CHAM_ERR_INVALID_ARG);
    assert_null(bad);
    assert_non_null(strstr(cham_context_last_error(NULL), "cosine_threshold"));
}

/* ---- a scripted model ------------------------------------------------------
 * L layers. Forward op i reads act[i-1] and weight w[i] and writes act[i];
 * backward op i reads act[i] and w[i] and writes a gradient that is freed
 * at once. With swaps, act[i] goes to the host after forward op i+1 (its
 * last forward use) and comes back one layer ahead in backward. In data
 * mode every activation carries a pattern that backward checks. */

#define L 6
#define ACT (4 * MiB)

typedef struct kargs {
    uint32_t *out;
    const uint32_t *in;
    size_t words;
    uint32_t seed;
    size_t *bad;
} kargs_t;

static uint32_t pattern(uint32_t seed, size_t i)
{
    return seed * 2654435761u ^ (uint32_t)i;
}

static void fill_fn(void *p)
{
    kargs_t *a = p;
    for (size_t i = 0; i < a->words; i++)
        a->out[i] = pattern(a->seed, i);
}

static void check_fn(void *p)
{
    kargs_t *a = p;
    for (size_t i = 0; i < a->words; i++)
        if (a->in[i] != pattern(a->seed, i))
            (*a->bad)++;
}

/* One op: begin, a kernel touching its tensors, end. */
static void op(cham_context_t *ctx, cham_op_token_t tok, cham_tensor_t **in, size_t n_in,
               cham_tensor_t **out, size_t n_out, void (*fn)(void *), kargs_t *args)
{
    assert_int_equal(cham_op_begin(ctx, tok, in, n_in, out, n_out), CHAM_OK);
    cham_access_t acc[4];
    size_t n = 0;
    for (size_t i = 0; i < n_in; i++)
        acc[n++] = (cham_access_t){cham_tensor_data(in[i]), cham_tensor_bytes(in[i]),
                                   CHAM_ACCESS_READ};
    for (size_t i = 0; i < n_out; i++)
        acc[n++] = (cham_access_t){cham_tensor_data(out[i]), cham_tensor_bytes(out[i]),
                                   CHAM_ACCESS_WRITE};
    if (fn == fill_fn)
        args->out = cham_tensor_data(out[0]);
    if (fn == check_fn)
        args->in = cham_tensor_data(in[0]);
    cham_kernel_t k = {.label = cham_op_name(ctx, tok), .flops = 2e11, .bytes = 1e7,
                       .accesses = acc, .n_accesses = n, .cpu_fn = fn, .arg = args};
    assert_int_equal(cham_kernel_launch(cham_context_compute_stream(ctx), &k), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
}

static void run_step(cham_context_t *ctx, cham_tensor_t **w, bool swap, size_t *bad)
{
    cham_op_token_t fwd = token(ctx, "fwd"), bwd = token(ctx, "bwd"), opt = token(ctx, "sgd");
    cham_tensor_t *act[L];
    kargs_t args[L];
    cham_phase(ctx, CHAM_PHASE_FORWARD);
    for (int i = 0; i < L; i++) {
        char label[16];
        snprintf(label, sizeof label, "act%d", i);
        assert_int_equal(cham_tensor_new(ctx, ACT, CHAM_DTYPE_F32, label, &act[i]), CHAM_OK);
        args[i] = (kargs_t){.words = ACT / 4, .seed = (uint32_t)i + 1, .bad = bad};
        cham_tensor_t *in[2] = {i ? act[i - 1] : w[0], w[i]};
        op(ctx, fwd, in, 2, &act[i], 1, fill_fn, &args[i]);
        if (swap && i >= 1 && i - 1 < L - 2)
            assert_int_equal(cham_tensor_swap_out(act[i - 1], false), CHAM_OK);
    }
    cham_phase(ctx, CHAM_PHASE_BACKWARD);
    for (int i = L - 1; i >= 0; i--) {
        if (swap && i - 1 >= 0 && i - 1 < L - 2)
            assert_int_equal(cham_tensor_swap_in(act[i - 1]), CHAM_OK);
        cham_tensor_t *grad;
        assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "grad", &grad), CHAM_OK);
        cham_tensor_t *in[2] = {act[i], w[i]};
        op(ctx, bwd, in, 2, &grad, 1, check_fn, &args[i]);
        cham_tensor_release(grad);
        cham_tensor_release(act[i]);
    }
    cham_phase(ctx, CHAM_PHASE_OPTIMIZER);
    for (int i = 0; i < L; i++)
        op(ctx, opt, &w[i], 1, &w[i], 1, NULL, NULL);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
}

static void run_profiled(bool swap, uint64_t *actual, uint64_t *rebuilt, size_t *n_samples,
                         size_t *bad, cham_runtime_stats_t *stats, uint64_t *hazards)
{
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 64 * MiB);
    cham_tensor_t *w[L];
    for (int i = 0; i < L; i++)
        assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "w", &w[i]), CHAM_OK);
    cham_context_request_profile(ctx);
    run_step(ctx, w, swap, bad);
    const cham_profile_t *p = cham_context_last_profile(ctx);
    assert_non_null(p);
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    *n_samples = 2 * v.n_ops;
    cham_profile_memory_curve(p, actual, rebuilt);
    cham_context_get_stats(ctx, stats);
    *hazards = cham_device_hazard_count(cham_context_device(ctx));
    assert_int_equal(v.n_swaps, swap ? 2 * (L - 2) : 0);
    assert_int_equal(v.n_ops, 3 * L);
    /* Each op lists its inputs, then its outputs, with features. */
    assert_int_equal(v.ops[0].n_uses, 3);
    assert_true(v.uses[v.ops[0].first_use + 2].output);
    assert_int_equal(v.ops[0].phase, CHAM_PHASE_FORWARD);
    assert_int_equal(v.ops[L].phase, CHAM_PHASE_BACKWARD);
    assert_string_equal(v.token_names[v.ops[2 * L].token], "sgd");
    for (int i = 0; i < L; i++)
        cham_tensor_release(w[i]);
    cham_context_free(ctx);
}

/* The measured curves of run_step, worked out by hand (MiB, one value per
 * op: every tensor is made before its op begins and released after it
 * ends, so an op's two samples are equal). Six 1 MiB weights; forward op i
 * holds act[0..i] of 4 MiB: 6 + 4 (i + 1); backward op i holds act[0..i]
 * and its 1 MiB gradient: 7 + 4 (i + 1); the optimizer ops the weights.
 * With swaps act[i-1] leaves after forward op i for i = 1..4 and comes
 * back just before backward op i: at most two activations and a gradient. */
static const uint64_t CURVE_NO_SWAP[3 * L] = {10, 14, 18, 22, 26, 30, 31, 27, 23,
                                              19, 15, 11, 6,  6,  6,  6,  6,  6};
static const uint64_t CURVE_SWAP[3 * L] = {10, 14, 14, 14, 14, 14, 15, 15, 15,
                                           15, 15, 11, 6,  6,  6,  6,  6,  6};

static void assert_curve(const uint64_t *got, size_t n, const uint64_t *want_mib)
{
    assert_int_equal(n, 6 * L);
    for (size_t i = 0; i < n; i++)
        if (got[i] != want_mib[i / 2] * MiB)
            fail_msg("sample %zu: %llu bytes, worked out %llu MiB", i,
                     (unsigned long long)got[i], (unsigned long long)want_mib[i / 2]);
}

static void test_memory_curve_rebuilt(void **state)
{
    (void)state;
    static uint64_t a0[6 * L], r0[6 * L], a1[6 * L], r1[6 * L];
    size_t n0, n1, bad0 = 0, bad1 = 0;
    cham_runtime_stats_t s0, s1;
    uint64_t hz0, hz1;
    run_profiled(false, a0, r0, &n0, &bad0, &s0, &hz0);
    run_profiled(true, a1, r1, &n1, &bad1, &s1, &hz1);
    /* The measured curves are the ones worked out above. */
    assert_curve(a0, n0, CURVE_NO_SWAP);
    assert_curve(a1, n1, CURVE_SWAP);
    /* Without swaps the rebuilt curve is the measured one; with swaps the
     * rebuilt curve is exactly the curve of the run without swaps. */
    assert_curve(r0, n0, CURVE_NO_SWAP);
    assert_curve(r1, n1, CURVE_NO_SWAP);
    assert_int_equal(s1.swaps_out, L - 2);
    assert_int_equal(s1.swaps_in, L - 2);
    assert_int_equal(s1.on_demand_swaps_in, 0);
    /* Data came back bit-exact and no stream raced another. */
    assert_int_equal(bad0, 0);
    assert_int_equal(bad1, 0);
    assert_int_equal(hz0, 0);
    assert_int_equal(hz1, 0);
}

/* The control of the bit-exact check above: one bit of act2 flipped as it
 * comes back from the host must be seen by the backward's pattern check,
 * as exactly one wrong word. */
static void flip_act2_on_swap_in(const cham_swap_event_t *e, void *user)
{
    int *flipped = user;
    if (e->out || strcmp(e->label, "act2") != 0)
        return;
    /* Data mode: the copy has already run on the CPU. */
    ((unsigned char *)(uintptr_t)e->device_ptr)[5] ^= 0x01;
    (*flipped)++;
}

static void test_corrupted_swap_is_seen(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 64 * MiB);
    cham_tensor_t *w[L];
    for (int i = 0; i < L; i++)
        assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "w", &w[i]), CHAM_OK);
    int flipped = 0;
    size_t bad = 0;
    cham_context_on_swap(ctx, flip_act2_on_swap_in, &flipped);
    run_step(ctx, w, true, &bad);
    assert_int_equal(flipped, 1);
    assert_int_equal(bad, 1);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    for (int i = 0; i < L; i++)
        cham_tensor_release(w[i]);
    cham_context_free(ctx);
}

static void test_views_follow_swaps(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 64 * MiB);
    int lines = 0;
    cham_context_set_log(ctx, count_lines, &lines);
    cham_op_token_t fill = token(ctx, "fill"), use = token(ctx, "use");
    cham_tensor_t *base, *half;
    size_t bad = 0;
    assert_int_equal(cham_tensor_new(ctx, 2 * ACT, CHAM_DTYPE_F32, "base", &base), CHAM_OK);
    assert_int_equal(cham_tensor_view(base, ACT, ACT, CHAM_DTYPE_F32, "half", &half), CHAM_OK);
    kargs_t k = {.words = ACT / 4, .seed = 77, .bad = &bad};
    cham_context_request_profile(ctx);
    op(ctx, fill, NULL, 0, &half, 1, fill_fn, &k);
    /* Swapping out through the base moves the storage: the view follows. */
    assert_int_equal(cham_tensor_swap_out(base, false), CHAM_OK);
    cham_residency_t r = cham_tensor_residency(half);
    assert_true(r == CHAM_RESIDENT_HOST || r == CHAM_RESIDENT_MOVING_OUT);
    assert_null(cham_tensor_data(half));
    /* Using the view while on the host brings it back on demand. */
    op(ctx, use, &half, 1, NULL, 0, check_fn, &k);
    assert_int_equal(cham_tensor_residency(base), CHAM_RESIDENT_DEVICE);
    cham_runtime_stats_t st;
    cham_context_get_stats(ctx, &st);
    assert_int_equal(st.on_demand_swaps_in, 1);
    assert_int_equal(lines, 1);           /* the on-demand swap is logged */
    assert_int_equal(bad, 0);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    /* The swap-out between the ops and the on-demand swap-in while op 1
     * began both change op 1's "before" sample: the rebuilt curve is flat. */
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    const cham_profile_t *p = cham_context_last_profile(ctx);
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    assert_int_equal(v.n_swaps, 2);
    assert_int_equal(v.swaps[0].kind, CHAM_SWAP_OUT);
    assert_int_equal(v.swaps[1].kind, CHAM_SWAP_IN);
    assert_int_equal(v.swaps[0].sample, 2);
    assert_int_equal(v.swaps[1].sample, 2);
    uint64_t actual[4], rebuilt[4];
    cham_profile_memory_curve(p, actual, rebuilt);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(actual[i], 2 * ACT);
        assert_int_equal(rebuilt[i], 2 * ACT);
    }
    cham_tensor_release(base);
    cham_tensor_release(half);
    cham_context_free(ctx);
}

/* A swap-out whose pinned memory is held by the host block of a storage
 * just swapped back in (freed once that copy is done) waits for the copy
 * instead of failing the run: the budget holds both in turn. */
static void test_swap_out_waits_for_pinned_frees(void **state)
{
    (void)state;
    cham_config_t c = cham_config_default();
    c.device.capacity = 256 * MiB;
    c.device.data = true;
    c.device.hazard_check = true;
    c.pinned_budget = 96 * MiB;
    cham_context_t *ctx = NULL;
    assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
    cham_op_token_t fill = token(ctx, "fill"), use = token(ctx, "use");
    cham_tensor_t *a, *b;
    size_t bad = 0;
    assert_int_equal(cham_tensor_new(ctx, 64 * MiB, CHAM_DTYPE_F32, "a", &a), CHAM_OK);
    assert_int_equal(cham_tensor_new(ctx, 64 * MiB, CHAM_DTYPE_F32, "b", &b), CHAM_OK);
    kargs_t ka = {.words = 16 * MiB, .seed = 5, .bad = &bad};
    kargs_t kb = {.words = 16 * MiB, .seed = 6, .bad = &bad};
    op(ctx, fill, NULL, 0, &a, 1, fill_fn, &ka);
    op(ctx, fill, NULL, 0, &b, 1, fill_fn, &kb);
    assert_int_equal(cham_tensor_swap_out(a, false), CHAM_OK);
    assert_int_equal(cham_tensor_swap_in(a), CHAM_OK);
    assert_int_equal(cham_tensor_swap_out(b, false), CHAM_OK);
    op(ctx, use, &a, 1, NULL, 0, check_fn, &ka);
    op(ctx, use, &b, 1, NULL, 0, check_fn, &kb);
    assert_int_equal(bad, 0);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    cham_tensor_release(a);
    cham_tensor_release(b);
    cham_context_free(ctx);
}

/* A profile the runtime recorded is what the planner reads: planned against
 * a device smaller than the step's peak, the policy swaps activations and
 * predicts a peak that fits. */
static void test_recorded_profile_plans(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 64 * MiB);
    cham_tensor_t *w[L];
    size_t bad = 0;
    for (int i = 0; i < L; i++)
        assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "w", &w[i]), CHAM_OK);
    cham_context_request_profile(ctx);
    run_step(ctx, w, false, &bad);
    const cham_profile_t *p = cham_context_last_profile(ctx);
    cham_profile_view_t pv;
    cham_profile_get(p, &pv);
    uint64_t actual[6 * L], rebuilt[6 * L], peak = 0;
    cham_profile_memory_curve(p, actual, rebuilt);
    for (size_t i = 0; i < 2 * pv.n_ops; i++)
        peak = rebuilt[i] > peak ? rebuilt[i] : peak;
    assert_int_equal(peak, 31 * MiB);                  /* CURVE_NO_SWAP's */

    cham_planner_config_t cfg = cham_planner_config_default();
    cfg.capacity = peak - 2 * ACT;
    cfg.reserve = 0;
    cfg.min_swap_bytes = 2 * MiB;                       /* the 1 MiB weights are too small */
    cfg.h2d_bandwidth = cfg.d2h_bandwidth = 32e9;
    cham_policy_t *pol;
    char err[512];
    if (cham_plan_chameleon(p, &cfg, &pol, err, sizeof err) != CHAM_OK)
        fail_msg("plan: %s", err);
    cham_policy_view_t v;
    cham_policy_get(pol, &v);
    assert_true(v.n_items >= 2);
    assert_int_equal(v.peak_without_swaps, peak);
    assert_true(v.predicted_peak <= cfg.capacity);
    for (size_t i = 0; i < v.n_items; i++) {
        assert_int_equal(v.items[i].bytes, ACT);       /* activations only */
        assert_true(v.items[i].swap_out_op < L);        /* out after a forward op */
        assert_true(v.items[i].use_op >= L && v.items[i].use_op < 2 * L);
    }
    cham_policy_free(pol);

    /* The weights were made before the first step: persistent from the
     * second step on (made before it began, alive when it ended); the
     * activations, made and freed within the step, never. */
    for (size_t u = 0; u < pv.n_uses; u++)
        assert_false(pv.uses[u].persistent);
    cham_context_request_profile(ctx);
    run_step(ctx, w, false, &bad);
    cham_profile_get(cham_context_last_profile(ctx), &pv);
    size_t n_persistent = 0;
    for (size_t u = 0; u < pv.n_uses; u++) {
        assert_true(!pv.uses[u].persistent || pv.uses[u].storage_bytes == MiB);
        n_persistent += pv.uses[u].persistent;
    }
    /* run_step's weight uses: L + 1 forward (w[0] twice), L backward, 2 L
     * in the update (read and written); its 1 MiB gradients die young. */
    assert_int_equal(n_persistent, 4 * L + 1);
    assert_int_equal(bad, 0);
    for (int i = 0; i < L; i++)
        cham_tensor_release(w[i]);
    cham_context_free(ctx);
}

/* ---- the stage machine through the context -------------------------------*/

typedef struct seen {
    int n, changes;
    cham_stage_t to[8];
    uint64_t step[8];
    uint64_t last;                        /* the last step's number */
    char line[8][160];                    /* stage-change log lines */
    int lines;
} seen_t;

static void on_step(cham_context_t *ctx, const cham_step_ended_t *e, void *user)
{
    seen_t *s = user;
    /* The hook runs inside cham_step_end, before the number moves on. */
    assert_int_equal(cham_context_step(ctx), e->number);
    s->n++;
    s->last = e->number;
    if (e->to != e->from && s->changes < 8) {
        s->to[s->changes] = e->to;
        s->step[s->changes] = e->number;
        s->changes++;
    }
}

static void stage_lines(const char *line, void *user)
{
    seen_t *s = user;
    if (strstr(line, "stage ") && s->lines < 8)
        snprintf(s->line[s->lines++], sizeof s->line[0], "%s", line);
}

static void ops_step(cham_context_t *ctx, int n_ops)
{
    cham_op_token_t a = token(ctx, "a"), b = token(ctx, "b");
    for (int i = 0; i < n_ops; i++) {
        assert_int_equal(cham_op_begin(ctx, i % 3 ? a : b, NULL, 0, NULL, 0), CHAM_OK);
        assert_int_equal(cham_op_end(ctx), CHAM_OK);
    }
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
}

static void test_stages_through_context(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 16 * MiB);
    seen_t seen = {0};
    cham_context_on_step(ctx, on_step, &seen);
    cham_context_set_log(ctx, stage_lines, &seen);
    assert_int_equal(cham_context_step(ctx), 0);
    for (int s = 0; s < 10; s++)
        ops_step(ctx, 100);
    /* m = 2, n = 5: GenPolicy once steps 0-2 were alike, Stable after
     * five GenPolicy steps (3-7) and the kept policy's step 8... */
    assert_int_equal(seen.n, 10);
    assert_int_equal(seen.changes, 2);
    assert_int_equal(seen.to[0], CHAM_STAGE_GENPOLICY);
    assert_int_equal(seen.step[0], 2);
    assert_int_equal(seen.to[1], CHAM_STAGE_STABLE);
    assert_int_equal(seen.step[1], 8);
    /* ...and the log says so with the same numbers. */
    assert_int_equal(seen.lines, 2);
    assert_non_null(strstr(seen.line[0], "step 2: stage WarmUp -> GenPolicy"));
    assert_non_null(strstr(seen.line[1], "step 8: stage GenPolicy -> Stable"));
    /* GenPolicy steps were profiled in detail; the last was step 8. */
    const cham_profile_t *p = cham_context_last_profile(ctx);
    assert_non_null(p);
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    assert_int_equal(v.n_ops, 100);
    assert_int_equal(v.step, 8);
    ops_step(ctx, 120);                   /* 20% longer: back to WarmUp */
    assert_int_equal(cham_context_stage(ctx), CHAM_STAGE_WARMUP);
    assert_int_equal(seen.changes, 3);
    assert_int_equal(seen.step[2], 10);
    cham_context_free(ctx);
}

/* The caller's numbers are the ones every output shows; steps it does not
 * number count on from the last; the runtime's decisions do not change. */
static void test_caller_numbers_steps(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 16 * MiB);
    seen_t seen = {0};
    cham_context_on_step(ctx, on_step, &seen);
    cham_context_set_log(ctx, stage_lines, &seen);
    for (int s = 0; s < 10; s++) {
        if (s < 5)
            cham_step_set_number(ctx, 1000 + 10 * (uint64_t)s);  /* 1000, 1010, ... 1040 */
        ops_step(ctx, 100);                                     /* then 1041, 1042, ... */
    }
    assert_int_equal(seen.last, 1045);
    assert_int_equal(cham_context_step(ctx), 1046);
    assert_int_equal(seen.changes, 2);
    assert_int_equal(seen.step[0], 1020);                       /* the third step, as before */
    assert_int_equal(seen.step[1], 1044);                       /* the ninth */
    assert_non_null(strstr(seen.line[0], "step 1020: stage WarmUp -> GenPolicy"));
    cham_profile_view_t v;
    cham_profile_get(cham_context_last_profile(ctx), &v);
    assert_int_equal(v.step, 1044);
    cham_context_free(ctx);
}

/* The allocator mode: AUTO is expandable segments on a device of
 * PyTorch's sizes and classic on a scaled-down one; CLASSIC and EXPANDABLE
 * are what they say; the JSON config names them. */
static void test_allocator_mode(void **state)
{
    (void)state;
    const struct {
        cham_allocator_mode_t mode;
        uint32_t shift;
        bool expandable;
    } cases[] = {
        {CHAM_ALLOCATOR_AUTO, 0, true},
        {CHAM_ALLOCATOR_AUTO, 4, false},
        {CHAM_ALLOCATOR_CLASSIC, 0, false},
        {CHAM_ALLOCATOR_EXPANDABLE, 4, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cham_config_t c = cham_config_default();
        c.device.capacity = 64 * MiB;
        c.allocator = cases[i].mode;
        c.allocator_shift = cases[i].shift;
        cham_context_t *ctx;
        assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
        cham_tensor_t *t;
        assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "t", &t), CHAM_OK);
        cham_op_token_t tok;
        assert_int_equal(cham_op_token(ctx, "fill", &tok), CHAM_OK);
        assert_int_equal(cham_op_begin(ctx, tok, NULL, 0, &t, 1), CHAM_OK);
        assert_int_equal(cham_op_end(ctx), CHAM_OK);
        cham_alloc_stats_t as;
        assert_int_equal(cham_context_alloc_stats(ctx, &as), CHAM_OK);
        if ((as.va_reserved > 0) != cases[i].expandable)
            fail_msg("case %zu (%s, shift %u): va_reserved %llu", i,
                     cham_allocator_mode_name(cases[i].mode), cases[i].shift,
                     (unsigned long long)as.va_reserved);
        cham_tensor_release(t);
        cham_context_free(ctx);
    }
    cham_allocator_mode_t m = CHAM_ALLOCATOR_AUTO;
    assert_int_equal(cham_allocator_mode_parse("expandable", &m), CHAM_OK);
    assert_int_equal(m, CHAM_ALLOCATOR_EXPANDABLE);
    assert_int_equal(cham_allocator_mode_parse("buddy", &m), CHAM_ERR_INVALID_ARG);
    assert_string_equal(cham_allocator_mode_name(CHAM_ALLOCATOR_CLASSIC), "classic");
}

/* ---- advisor mode ---------------------------------------------------------*/

static void test_advisor_mode(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_ADVISOR, false, 16 * MiB);
    cham_op_token_t mm = token(ctx, "matmul");
    cham_tensor_t *x, *y;
    assert_int_equal(cham_tensor_new(ctx, 64, CHAM_DTYPE_F32, "x", &x), CHAM_ERR_INVALID_ARG);
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x10000, 4096, CHAM_DTYPE_F32, "x", &x),
                     CHAM_OK);
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x20000, 8192, CHAM_DTYPE_F16, "y", &y),
                     CHAM_OK);
    assert_ptr_equal(cham_tensor_data(x), (void *)0x10000);
    assert_int_equal(cham_tensor_swap_out(x, false), CHAM_ERR_INVALID_ARG);
    cham_context_request_profile(ctx);
    assert_int_equal(cham_op_begin(ctx, mm, &x, 1, &y, 1), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    cham_tensor_release(x);               /* the caller freed x */
    assert_int_equal(cham_op_begin(ctx, mm, &y, 1, NULL, 0), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    cham_profile_view_t v;
    cham_profile_get(cham_context_last_profile(ctx), &v);
    assert_int_equal(v.n_ops, 2);
    assert_int_equal(v.ops[0].mem_before, 4096 + 8192);
    assert_int_equal(v.ops[1].mem_before, 8192);
    assert_int_equal(v.uses[1].data_ptr, 0x20000);
    assert_int_equal(v.uses[2].use_count, 1);      /* y's second use */
    assert_int_equal(v.uses[2].history, (uint64_t)mm); /* used once, by a matmul */
    cham_tensor_release(y);
    cham_context_free(ctx);
}

/* Issue 20: in advisor mode the caller allocates; when its tensors go
 * past the budget (the device's capacity) in a step, the step hook, the
 * stats and one log line say by how much. Within it, nothing is said. */
static void record_step(cham_context_t *ctx, const cham_step_ended_t *e, void *user)
{
    (void)ctx;
    *(cham_step_ended_t *)user = *e;
}

static void test_advisor_over_budget(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_ADVISOR, false, 16 * MiB);
    int lines = 0;
    cham_context_set_log(ctx, count_lines, &lines);
    cham_step_ended_t seen = {0};
    cham_context_on_step(ctx, record_step, &seen);
    cham_op_token_t mm = token(ctx, "matmul");
    cham_tensor_t *x, *y;
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x100000, 12 * MiB, CHAM_DTYPE_F32, "x", &x),
                     CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, mm, &x, 1, NULL, 0), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    assert_int_equal(seen.peak_bytes, 12 * MiB);
    assert_int_equal(seen.over_budget_bytes, 0);
    int before = lines;
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x2000000, 6 * MiB, CHAM_DTYPE_F32, "y", &y),
                     CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, mm, &x, 1, &y, 1), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    cham_tensor_release(y);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    assert_int_equal(seen.peak_bytes, 18 * MiB);
    assert_int_equal(seen.over_budget_bytes, 2 * MiB);
    assert_true(lines > before);
    cham_runtime_stats_t st;
    cham_context_get_stats(ctx, &st);
    assert_int_equal(st.over_budget_steps, 1);
    assert_int_equal(st.over_budget_bytes, 2 * MiB);
    cham_tensor_release(x);
    cham_context_free(ctx);
}

/* Strided views as a framework makes them cover their first to last
 * element; what is outside the base, or not a view, is refused by name. */
static void test_strided_views(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_ADVISOR, false, 16 * MiB);
    cham_tensor_t *m, *v;
    /* A 4 x 6 f32 matrix at element 2 of a 26-element storage view. */
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x100000, 26 * 4, CHAM_DTYPE_F32, "m", &m),
                     CHAM_OK);
    struct {
        size_t offset, ndim;
        int64_t sizes[2], strides[2];
        size_t bytes;
    } ok[] = {
        {2, 2, {6, 4}, {1, 6}, 24 * 4},    /* the transpose: all of it */
        {8, 1, {3, 0}, {2, 0}, 5 * 4},     /* row 1, every other column */
        {8, 2, {5, 6}, {0, 1}, 6 * 4},     /* row 1 expanded to 5 rows */
        {25, 0, {0, 0}, {0, 0}, 4},        /* a scalar: the last element */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(cham_tensor_view_strided(m, ok[i].offset, ok[i].ndim, ok[i].sizes,
                                                  ok[i].strides, CHAM_DTYPE_F32, "v", &v),
                         CHAM_OK);
        assert_int_equal(cham_tensor_bytes(v), ok[i].bytes);
        assert_true(cham_tensor_same_storage(v, m));
        cham_tensor_release(v);
    }
    int64_t sz[1] = {5}, st[1] = {1}, zero[1] = {0}, neg[1] = {-1};
    assert_int_equal(cham_tensor_view_strided(m, 22, 1, sz, st, CHAM_DTYPE_F32, "past", &v),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(cham_context_last_error(ctx), "not inside the 104 bytes");
    assert_null(v);
    assert_int_equal(cham_tensor_view_strided(m, 3, 1, zero, st, CHAM_DTYPE_F32, "empty", &v),
                     CHAM_OK);
    assert_int_equal(cham_tensor_bytes(v), 0);
    cham_tensor_release(v);
    assert_int_equal(cham_tensor_view_strided(m, 0, 1, sz, neg, CHAM_DTYPE_F32, "flip", &v),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(cham_context_last_error(ctx), "stride -1");
    int64_t huge[1] = {INT64_MAX}, big[1] = {INT64_MAX / 2};
    assert_int_equal(cham_tensor_view_strided(m, 0, 1, huge, big, CHAM_DTYPE_F32, "huge", &v),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(cham_context_last_error(ctx), "overflows");
    cham_tensor_release(m);
    cham_context_free(ctx);
}

/* Tensors of no bytes (a framework's empty tensors) are tracked, used by
 * ops, never moved, and hold no memory; in managed mode they still have an
 * address. */
static void test_zero_byte_tensors(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 16 * MiB);
    cham_op_token_t op = token(ctx, "cat");
    cham_tensor_t *e, *x, *v;
    assert_int_equal(cham_tensor_new(ctx, 0, CHAM_DTYPE_F32, "empty", &e), CHAM_OK);
    assert_int_equal(cham_tensor_new(ctx, 4096, CHAM_DTYPE_F32, "x", &x), CHAM_OK);
    assert_non_null(cham_tensor_data(e));
    assert_int_equal(cham_tensor_bytes(e), 0);
    assert_int_equal(cham_tensor_view(x, 4096, 0, CHAM_DTYPE_F32, "x[end:]", &v), CHAM_OK);
    cham_tensor_t *in[2] = {e, v};
    assert_int_equal(cham_op_begin(ctx, op, in, 2, &x, 1), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_swap_out(e, false), CHAM_ERR_INVALID_ARG);
    test_assert_contains(cham_context_last_error(ctx), "no bytes to move");
    cham_runtime_stats_t st;
    cham_context_get_stats(ctx, &st);
    assert_int_equal(st.mem_in_use, 4096);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    cham_tensor_release(v);
    cham_tensor_release(e);
    cham_tensor_release(x);
    cham_context_free(ctx);

    ctx = open_ctx(CHAM_MODE_ADVISOR, false, 16 * MiB);
    assert_int_equal(cham_tensor_wrap(ctx, NULL, 0, CHAM_DTYPE_I64, "idx[0]", &e), CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, token(ctx, "index"), &e, 1, NULL, 0), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_wrap(ctx, NULL, 8, CHAM_DTYPE_I64, "null", &x),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(cham_context_last_error(ctx), "8 bytes at NULL");
    /* More than the device holds is no tensor it could have (and the step
     * hook's totals would overflow with a few). */
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x1000, SIZE_MAX / 2, CHAM_DTYPE_U8, "vast",
                                      &x), CHAM_ERR_INVALID_ARG);
    test_assert_contains(cham_context_last_error(ctx), "is more than the device's 16777216");
    assert_null(x);
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x1000, 16 * MiB, CHAM_DTYPE_U8, "all", &x),
                     CHAM_OK);
    cham_tensor_release(x);
    cham_tensor_release(e);
    cham_context_free(ctx);
}

/* A budget given after a first unconstrained step (a share of its peak,
 * as chameleon.torch's "50%") bounds what policies plan for and what the
 * over-budget signal measures, and sets the smallest tensor worth a swap;
 * once a policy was planned it can no longer change. */
static void test_budget_set_before_the_first_policy(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_ADVISOR, false, 16 * MiB);
    int lines = 0;
    cham_context_set_log(ctx, count_lines, &lines);
    assert_int_equal(cham_context_budget(ctx), 16 * MiB);
    assert_int_equal(cham_context_min_swap(ctx), 16 * KiB);    /* a 1024th */
    assert_int_equal(cham_context_set_memory_budget(ctx, 64 * MiB), CHAM_OK);
    assert_int_equal(cham_context_budget(ctx), 16 * MiB);      /* never past the device */
    assert_int_equal(cham_context_set_memory_budget(ctx, 2 * MiB), CHAM_OK);
    assert_int_equal(cham_context_budget(ctx), 2 * MiB);
    assert_int_equal(cham_context_min_swap(ctx), 4 * KiB);     /* the floor */

    cham_step_ended_t seen = {0};
    cham_context_on_step(ctx, record_step, &seen);
    cham_op_token_t mk = token(ctx, "make"), use = token(ctx, "use");
    cham_runtime_stats_t st = {0};
    for (int step = 0; step < 12 && !st.policies_generated && !st.policy_failures; step++) {
        cham_tensor_t *x;
        assert_int_equal(cham_tensor_wrap(ctx, (void *)0x100000, 3 * MiB, CHAM_DTYPE_F32, "x",
                                          &x), CHAM_OK);
        assert_int_equal(cham_op_begin(ctx, mk, NULL, 0, &x, 1), CHAM_OK);
        assert_int_equal(cham_op_end(ctx), CHAM_OK);
        assert_int_equal(cham_op_begin(ctx, use, &x, 1, NULL, 0), CHAM_OK);
        assert_int_equal(cham_op_end(ctx), CHAM_OK);
        cham_tensor_release(x);
        assert_int_equal(cham_step_end(ctx), CHAM_OK);
        assert_int_equal(seen.over_budget_bytes, 1 * MiB);    /* against 2 MiB, not 16 */
        cham_context_get_stats(ctx, &st);
    }
    assert_true(st.policies_generated || st.policy_failures);
    assert_int_equal(cham_context_set_memory_budget(ctx, 8 * MiB), CHAM_ERR_INVALID_ARG);
    test_assert_contains(cham_context_last_error(ctx), "before the first");
    assert_int_equal(cham_context_budget(ctx), 2 * MiB);
    cham_context_free(ctx);

    cham_config_t c = cham_config_default();
    c.min_swap_bytes = 123;
    c.device.capacity = 16 * MiB;
    assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
    assert_int_equal(cham_context_min_swap(ctx), 123);           /* the config's own */
    cham_context_free(ctx);
}

/* The allocator's granularity follows the device's capacity unless the
 * config gives one: PyTorch's sizes on a big device, finer on a small one. */
static void test_allocator_shift_from_the_capacity(void **state)
{
    (void)state;
    assert_int_equal(cham_allocator_shift_for(80ull << 30), 0);
    assert_int_equal(cham_allocator_shift_for(320 * MiB), 0);
    assert_int_equal(cham_allocator_shift_for(320 * MiB - 1), 1);
    assert_int_equal(cham_allocator_shift_for(16 * MiB), 5);
    assert_int_equal(cham_allocator_shift_for(1), 10);
    struct {
        uint64_t capacity;
        uint32_t shift, want;
    } cases[] = {
        {16 * MiB, CHAM_ALLOCATOR_SHIFT_AUTO, 5},
        {0, CHAM_ALLOCATOR_SHIFT_AUTO, 0},           /* the default preset's 80 GB */
        {16 * MiB, 2, 2},                            /* the config's own */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cham_config_t c = cham_config_default();
        c.device.capacity = cases[i].capacity;
        c.allocator_shift = cases[i].shift;
        cham_context_t *ctx;
        assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
        assert_int_equal(cham_context_config(ctx)->allocator_shift, cases[i].want);
        cham_context_free(ctx);
    }
}

/* ---- record_stream ----------------------------------------------------------------*/

static void count_hazard(const cham_hazard_t *h, void *user)
{
    char buf[400];
    if (getenv("SHOW_HAZARDS"))
        fprintf(stderr, "%s\n", cham_hazard_format(h, buf, sizeof buf));
    (*(int *)user)++;
}

/* An op whose kernel runs on `stream` (a caller's, say for communication)
 * and reads t for a long time, after the compute stream's work so far. */
static void long_read(cham_context_t *ctx, cham_stream_t *stream, cham_tensor_t *t)
{
    cham_tensor_t *in[1] = {t};
    assert_int_equal(cham_op_begin(ctx, token(ctx, "send"), in, 1, NULL, 0), CHAM_OK);
    cham_event_t *ev;
    assert_int_equal(cham_event_new(cham_context_device(ctx), &ev), CHAM_OK);
    assert_int_equal(cham_event_record(ev, cham_context_compute_stream(ctx)), CHAM_OK);
    assert_int_equal(cham_stream_wait_event(stream, ev), CHAM_OK);
    cham_event_free(ev);
    cham_access_t acc = {cham_tensor_data(t), cham_tensor_bytes(t), CHAM_ACCESS_READ};
    cham_kernel_t k = {.label = "send", .flops = 1e14, .accesses = &acc, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(stream, &k), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
}

static void write_op(cham_context_t *ctx, cham_tensor_t *t)
{
    cham_tensor_t *out[1] = {t};
    assert_int_equal(cham_op_begin(ctx, token(ctx, "write"), NULL, 0, out, 1), CHAM_OK);
    cham_access_t acc = {cham_tensor_data(t), cham_tensor_bytes(t), CHAM_ACCESS_WRITE};
    cham_kernel_t k = {.label = "write", .flops = 1e9, .accesses = &acc, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(cham_context_compute_stream(ctx), &k), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
}

/* A block another stream still reads is neither reused (after a release)
 * nor copied out and handed back (after a swap-out) before that read ends;
 * without record_stream both are hazards, so the test can fail. */
static int record_stream_run(bool record, bool swap)
{
    /* Room for one such tensor: the next one must take its block. */
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 12 * MiB);
    cham_context_set_log(ctx, quiet, NULL);
    int hazards = 0;
    cham_device_set_hazard_hook(cham_context_device(ctx), count_hazard, &hazards);
    cham_stream_t *comm;
    assert_int_equal(cham_stream_new(cham_context_device(ctx), "comm", &comm), CHAM_OK);
    cham_tensor_t *a, *b;
    assert_int_equal(cham_tensor_new(ctx, 8 * MiB, CHAM_DTYPE_F32, "a", &a), CHAM_OK);
    write_op(ctx, a);
    long_read(ctx, comm, a);
    if (record)
        assert_int_equal(cham_tensor_record_stream(a, comm), CHAM_OK);
    if (swap)
        assert_int_equal(cham_tensor_swap_out(a, false), CHAM_OK);
    else
        cham_tensor_release(a);
    /* The next tensor of that size takes the block once it may. */
    assert_int_equal(cham_tensor_new(ctx, 8 * MiB, CHAM_DTYPE_F32, "b", &b), CHAM_OK);
    write_op(ctx, b);
    write_op(ctx, b);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    cham_device_synchronize(cham_context_device(ctx));
    cham_tensor_release(b);
    if (swap)
        cham_tensor_release(a);
    cham_stream_free(comm);
    cham_context_free(ctx);
    return hazards;
}

static void test_record_stream(void **state)
{
    (void)state;
    assert_int_equal(record_stream_run(true, false), 0);
    assert_true(record_stream_run(false, false) > 0);
    assert_int_equal(record_stream_run(true, true), 0);
    assert_true(record_stream_run(false, true) > 0);
}

/* A storage whose bytes the caller keeps in pinned host memory leaves
 * without a copy or the runtime's pinned memory and comes back from there,
 * bit for bit; an op's write makes that copy stale (the next swap-out
 * copies); NULL while it is away brings it back first. The hazard
 * detector checks every copy against the caller's. */
static void test_host_copy(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 64 * MiB);
    cham_device_t *dev = cham_context_device(ctx);
    cham_stream_t *compute = cham_context_compute_stream(ctx);
    cham_op_token_t fill = token(ctx, "fill"), check = token(ctx, "check");
    size_t bad = 0;
    cham_tensor_t *t;
    assert_int_equal(cham_tensor_new(ctx, ACT, CHAM_DTYPE_F32, "w", &t), CHAM_OK);
    kargs_t a = {.words = ACT / 4, .seed = 7, .bad = &bad};
    op(ctx, fill, NULL, 0, &t, 1, fill_fn, &a);
    void *host;
    assert_int_equal(cham_device_host_alloc(dev, ACT, &host), CHAM_OK);
    assert_int_equal(cham_copy_async(compute, host, cham_tensor_data(t), ACT, CHAM_COPY_D2H,
                                     "keep"), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(compute), CHAM_OK);
    assert_int_equal(cham_tensor_set_host_copy(t, host), CHAM_OK);

    cham_runtime_stats_t s0, s1;
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.swaps_out, s0.swaps_out + 1);
    assert_int_equal(s1.bytes_out, s0.bytes_out);          /* nothing copied */
    assert_int_equal(s1.mem_in_use, s0.mem_in_use - ACT);  /* the device block is free */
    op(ctx, check, &t, 1, NULL, 0, check_fn, &a);          /* back on demand, from host */
    assert_int_equal(bad, 0);

    /* Written again: the host's copy is stale and a swap-out copies. */
    a.seed = 8;
    op(ctx, fill, NULL, 0, &t, 1, fill_fn, &a);
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.bytes_out, s0.bytes_out + ACT);
    op(ctx, check, &t, 1, NULL, 0, check_fn, &a);
    assert_int_equal(bad, 0);

    /* Away on the host's copy, then that copy is to change: back first. */
    assert_int_equal(cham_copy_async(compute, host, cham_tensor_data(t), ACT, CHAM_COPY_D2H,
                                     "keep"), CHAM_OK);
    assert_int_equal(cham_stream_synchronize(compute), CHAM_OK);
    assert_int_equal(cham_tensor_set_host_copy(t, host), CHAM_OK);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    assert_int_equal(cham_tensor_set_host_copy(t, NULL), CHAM_OK);
    memset(host, 0, ACT);                                   /* the caller's to change now */
    op(ctx, check, &t, 1, NULL, 0, check_fn, &a);
    assert_int_equal(bad, 0);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_tensor_release(t);
    cham_device_host_free(dev, host);
    cham_context_free(ctx);

    /* Advisor mode: the caller moves memory itself. */
    ctx = open_ctx(CHAM_MODE_ADVISOR, false, 64 * MiB);
    assert_int_equal(cham_tensor_wrap(ctx, (void *)0x10000, 4096, CHAM_DTYPE_F32, "w", &t),
                     CHAM_OK);
    assert_int_equal(cham_tensor_set_host_copy(t, (void *)&a), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "advisor"));
    cham_tensor_release(t);
    cham_context_free(ctx);
}

/* A storage swapped back in keeps its pinned copy until its bytes change:
 * going out again unwritten copies nothing, bit-exact; an op's write, the
 * caller's address taken outside an op and a discard each end the copy
 * (the next swap-out copies). */
static void test_kept_copy(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 64 * MiB);
    cham_op_token_t fill = token(ctx, "fill"), check = token(ctx, "check");
    size_t bad = 0;
    cham_tensor_t *t;
    assert_int_equal(cham_tensor_new(ctx, ACT, CHAM_DTYPE_F32, "w", &t), CHAM_OK);
    kargs_t a = {.words = ACT / 4, .seed = 7, .bad = &bad};
    op(ctx, fill, NULL, 0, &t, 1, fill_fn, &a);
    cham_runtime_stats_t s0, s1;
    /* out (copied), back on demand, out again: the second copies nothing */
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    op(ctx, check, &t, 1, NULL, 0, check_fn, &a);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.swaps_out, s0.swaps_out + 2);
    assert_int_equal(s1.bytes_out, s0.bytes_out + ACT);
    assert_int_equal(s1.mem_in_use, s0.mem_in_use - ACT);
    op(ctx, check, &t, 1, NULL, 0, check_fn, &a);
    assert_int_equal(bad, 0);

    /* an op writes it: the kept copy is stale, the swap-out copies */
    a.seed = 8;
    op(ctx, fill, NULL, 0, &t, 1, fill_fn, &a);
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.bytes_out, s0.bytes_out + ACT);
    op(ctx, check, &t, 1, NULL, 0, check_fn, &a);
    assert_int_equal(bad, 0);

    /* the caller takes its address outside an op and writes through it */
    cham_tensor_t *u;
    assert_int_equal(cham_tensor_new(ctx, ACT, CHAM_DTYPE_F32, "u", &u), CHAM_OK);
    kargs_t b = {.words = ACT / 4, .seed = 9, .bad = &bad};
    op(ctx, fill, NULL, 0, &u, 1, fill_fn, &b);
    cham_stream_t *compute = cham_context_compute_stream(ctx);
    assert_int_equal(cham_copy_async(compute, cham_tensor_data(t), cham_tensor_data(u), ACT,
                                     CHAM_COPY_D2D, "caller's write"), CHAM_OK);
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.bytes_out, s0.bytes_out + ACT);
    op(ctx, check, &t, 1, NULL, 0, check_fn, &b);
    assert_int_equal(bad, 0);

    /* discarded while kept: it comes back with no copy, holding nothing
     * to check, and its next fill goes out with a copy */
    assert_int_equal(cham_tensor_discard(t), CHAM_OK);
    a.seed = 10;
    op(ctx, fill, NULL, 0, &t, 1, fill_fn, &a);
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.bytes_out, s0.bytes_out + ACT);
    op(ctx, check, &t, 1, NULL, 0, check_fn, &a);
    assert_int_equal(bad, 0);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    cham_tensor_release(t);
    cham_tensor_release(u);
    cham_context_free(ctx);
}

/* Kept copies are a cache of the pinned pool: a swap-out that finds no
 * free block takes theirs before the pool grows. Four tensors go out and
 * back (each kept), then four others out: the pool holds what the first
 * four needed, no segment more, and all eight keep their bytes. */
static void test_kept_copies_do_not_grow_the_pool(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 64 * MiB);
    cham_device_t *dev = cham_context_device(ctx);
    cham_op_token_t fill = token(ctx, "fill"), check = token(ctx, "check");
    size_t bad = 0;
    enum { N = 8 };
    cham_tensor_t *t[N];
    kargs_t a[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(cham_tensor_new(ctx, ACT, CHAM_DTYPE_F32, "t", &t[i]), CHAM_OK);
        a[i] = (kargs_t){.words = ACT / 4, .seed = 20 + (uint32_t)i, .bad = &bad};
        op(ctx, fill, NULL, 0, &t[i], 1, fill_fn, &a[i]);
    }
    for (int i = 0; i < N / 2; i++)
        assert_int_equal(cham_tensor_swap_out(t[i], false), CHAM_OK);
    for (int i = 0; i < N / 2; i++)
        op(ctx, check, &t[i], 1, NULL, 0, check_fn, &a[i]);   /* back; each kept */
    assert_int_equal(cham_stream_synchronize(cham_context_compute_stream(ctx)), CHAM_OK);
    cham_sim_stats_t d0, d1;
    cham_sim_get_stats(dev, &d0);
    for (int i = N / 2; i < N; i++)
        assert_int_equal(cham_tensor_swap_out(t[i], false), CHAM_OK);
    cham_sim_get_stats(dev, &d1);
    assert_int_equal(d1.host_allocs, d0.host_allocs);
    for (int i = 0; i < N; i++)
        op(ctx, check, &t[i], 1, NULL, 0, check_fn, &a[i]);
    assert_int_equal(bad, 0);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    for (int i = 0; i < N; i++)
        cham_tensor_release(t[i]);
    cham_context_free(ctx);
}

/* The host-side tests': a data-mode context, tensor "w" of ACT bytes
 * filled from seed 7, a host stream "adam" and a pinned buffer of the
 * tensor's size; `a` checks "w" against a seed, counting into `bad`. */
typedef struct host_side {
    cham_context_t *ctx;
    cham_device_t *dev;
    cham_stream_t *adam;
    cham_op_token_t check;
    cham_tensor_t *t;
    void *host;
    size_t bad;
    kargs_t a;
} host_side_t;

static void host_side_open(host_side_t *h)
{
    h->ctx = open_ctx(CHAM_MODE_MANAGED, true, 64 * MiB);
    h->dev = cham_context_device(h->ctx);
    assert_int_equal(cham_stream_new_host(h->dev, "adam", &h->adam), CHAM_OK);
    h->check = token(h->ctx, "check");
    h->bad = 0;
    assert_int_equal(cham_tensor_new(h->ctx, ACT, CHAM_DTYPE_F32, "w", &h->t), CHAM_OK);
    h->a = (kargs_t){.words = ACT / 4, .seed = 7, .bad = &h->bad};
    op(h->ctx, token(h->ctx, "fill"), NULL, 0, &h->t, 1, fill_fn, &h->a);
    assert_int_equal(cham_device_host_alloc(h->dev, ACT, &h->host), CHAM_OK);
}

/* The host writes the buffer from `seed` on its stream (10 ms of FLOPs
 * at the preset's host rate); *b must outlive the kernel. */
static void host_side_write(host_side_t *h, const char *label, uint32_t seed, kargs_t *b,
                            cham_access_t *acc)
{
    *b = (kargs_t){.words = ACT / 4, .seed = seed, .out = h->host};
    *acc = (cham_access_t){h->host, ACT, CHAM_ACCESS_WRITE};
    cham_kernel_t k = {.label = label, .flops = 1e10, .accesses = acc, .n_accesses = 1,
                       .cpu_fn = fill_fn, .arg = b};
    assert_int_equal(cham_kernel_launch(h->adam, &k), CHAM_OK);
}

/* "w" checked against `seed` by an op: nothing differs. */
static void host_side_check(host_side_t *h, uint32_t seed)
{
    h->a.seed = seed;
    op(h->ctx, h->check, &h->t, 1, NULL, 0, check_fn, &h->a);
    assert_int_equal(h->bad, 0);
}

static void host_side_close(host_side_t *h)
{
    assert_int_equal(cham_device_hazard_count(h->dev), 0);
    cham_tensor_release(h->t);
    cham_stream_synchronize(h->adam);
    cham_stream_free(h->adam);
    cham_device_host_free(h->dev, h->host);
    cham_context_free(h->ctx);
}

/* An update on the host (cham_tensor_host_update, cham_tensor_host_ready):
 * the device's bytes leave without a copy, nothing brings them back before
 * the update is queued, and the next use reads the host's new bytes after
 * the host's work (the hazard detector watches the order). */
static void test_host_update(void **state)
{
    (void)state;
    host_side_t h;
    host_side_open(&h);
    cham_context_t *ctx = h.ctx;
    cham_tensor_t *t = h.t;
    assert_int_equal(cham_tensor_host_ready(t, h.adam), CHAM_ERR_INVALID_ARG);   /* none yet */

    cham_runtime_stats_t s0, s1;
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_host_update(t, h.host), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.swaps_out, s0.swaps_out + 1);
    assert_int_equal(s1.bytes_out, s0.bytes_out);          /* nothing copied */
    assert_int_equal(s1.mem_in_use, s0.mem_in_use - ACT);  /* the device block is free */
    assert_int_equal(cham_tensor_residency(t), CHAM_RESIDENT_HOST);
    /* Neither the caller nor a use brings it back before the update is
     * queued: an error naming it, never the old bytes. */
    assert_int_equal(cham_tensor_swap_in(t), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "\"w\""));
    assert_non_null(strstr(cham_context_last_error(ctx), "cham_tensor_host_ready"));
    assert_int_equal(cham_op_begin(ctx, h.check, &t, 1, NULL, 0), CHAM_ERR_INVALID_ARG);

    /* The host writes the new bytes, and the use reads them after. */
    kargs_t b;
    cham_access_t acc;
    host_side_write(&h, "host_adamw", 9, &b, &acc);
    assert_int_equal(cham_tensor_host_ready(t, h.adam), CHAM_OK);
    host_side_check(&h, 9);
    /* Sent away again without a write: still no copy. */
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.bytes_out, s0.bytes_out);
    host_side_check(&h, 9);
    host_side_close(&h);
}

/* A host copy the host's stream makes again (cham_tensor_set_host_copy,
 * then cham_tensor_host_ready: an optimizer on the host whose step was
 * skipped writes the device's weights back over the gradient in its
 * buffer): the device's bytes stay current, sending them away copies
 * nothing, and bringing them back waits for the host's work (the hazard
 * detector watches the order; without the host_ready call the swap-in
 * reads the buffer while the host still writes it). */
static void test_host_copy_made_on_host(void **state)
{
    (void)state;
    host_side_t h;
    host_side_open(&h);
    /* Neither an update nor a host copy: nothing to be ready. */
    assert_int_equal(cham_tensor_host_ready(h.t, h.adam), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(h.ctx), "cham_tensor_set_host_copy"));

    kargs_t b;
    cham_access_t acc;
    host_side_write(&h, "host_weights_restore", 7, &b, &acc);
    assert_int_equal(cham_tensor_set_host_copy(h.t, h.host), CHAM_OK);
    assert_int_equal(cham_tensor_host_ready(h.t, h.adam), CHAM_OK);
    cham_runtime_stats_t s0, s1;
    cham_context_get_stats(h.ctx, &s0);
    assert_int_equal(cham_tensor_swap_out(h.t, false), CHAM_OK);
    cham_context_get_stats(h.ctx, &s1);
    assert_int_equal(s1.bytes_out, s0.bytes_out);          /* nothing copied */
    assert_int_equal(s1.mem_in_use, s0.mem_in_use - ACT);  /* the device block is free */
    host_side_check(&h, 7);
    host_side_close(&h);
}

/* cham_tensor_discard: a storage away on the host whose next op writes it
 * whole comes back into a new block with no copy and holds what that op
 * wrote; an op that reads it first fails naming it, never reads stale
 * bytes; the profile marks the write (overwrites), and its rebuilt curve
 * counts the storage back from there, as its swap-out was counted. A
 * view of part of a storage, and advisor mode, are refused. */
static void test_discard(void **state)
{
    (void)state;
    host_side_t h;
    host_side_open(&h);
    cham_context_t *ctx = h.ctx;
    cham_tensor_t *t = h.t;
    cham_op_token_t fill = token(ctx, "fill");
    assert_int_equal(cham_step_end(ctx), CHAM_OK);          /* the step that filled it */
    cham_context_request_profile(ctx);
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    cham_runtime_stats_t s0, s1;
    cham_context_get_stats(ctx, &s0);
    assert_int_equal(cham_tensor_discard(t), CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, h.check, &t, 1, NULL, 0), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "\"w\""));
    assert_non_null(strstr(cham_context_last_error(ctx), "cham_tensor_discard"));
    kargs_t b = {.words = ACT / 4, .seed = 9, .bad = &h.bad};
    op(ctx, fill, NULL, 0, &t, 1, fill_fn, &b);
    cham_context_get_stats(ctx, &s1);
    assert_int_equal(s1.bytes_in, s0.bytes_in);              /* nothing copied back */
    assert_int_equal(s1.on_demand_swaps_in, s0.on_demand_swaps_in);
    assert_int_equal(s1.mem_in_use, s0.mem_in_use + ACT);
    host_side_check(&h, 9);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);

    const cham_profile_t *p = cham_context_last_profile(ctx);
    assert_non_null(p);
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    assert_int_equal(v.n_ops, 2);                            /* fill, check */
    assert_true(v.uses[v.ops[0].first_use].output);
    assert_true(v.uses[v.ops[0].first_use].overwrites);
    assert_false(v.uses[v.ops[1].first_use].overwrites);
    uint64_t actual[4], rebuilt[4];
    cham_profile_memory_curve(p, actual, rebuilt);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(rebuilt[i], actual[i]);             /* back at the fill */

    /* On the device: the bytes stay until written, then hold the write. */
    assert_int_equal(cham_tensor_discard(t), CHAM_OK);
    b.seed = 11;
    op(ctx, fill, NULL, 0, &t, 1, fill_fn, &b);
    host_side_check(&h, 11);
    cham_tensor_t *half;
    assert_int_equal(cham_tensor_view(t, 0, ACT / 2, CHAM_DTYPE_F32, "w.half", &half), CHAM_OK);
    assert_int_equal(cham_tensor_discard(half), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "whole storage"));
    cham_tensor_release(half);
    host_side_check(&h, 11);
    host_side_close(&h);

    cham_context_t *adv = open_ctx(CHAM_MODE_ADVISOR, false, 64 * MiB);
    assert_int_equal(cham_tensor_wrap(adv, (void *)0x10000, 4096, CHAM_DTYPE_F32, "w", &t),
                     CHAM_OK);
    assert_int_equal(cham_tensor_discard(t), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(adv), "advisor"));
    cham_tensor_release(t);
    cham_context_free(adv);
}

/* Issue 20: the dtypes a framework has (int16, complex, fp8) have sizes
 * and names; a handle carries the caller's pointer and a view does not
 * inherit it. */
static void test_dtypes_and_user_data(void **state)
{
    (void)state;
    const struct {
        cham_dtype_t d;
        const char *name;
        size_t size;
    } want[] = {{CHAM_DTYPE_I16, "i16", 2},         {CHAM_DTYPE_C64, "c64", 8},
                {CHAM_DTYPE_C128, "c128", 16},      {CHAM_DTYPE_F8_E4M3, "f8e4m3", 1},
                {CHAM_DTYPE_F8_E5M2, "f8e5m2", 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_string_equal(cham_dtype_name(want[i].d), want[i].name);
        assert_int_equal(cham_dtype_size(want[i].d), want[i].size);
    }
    assert_string_equal(cham_dtype_name(CHAM_DTYPE_COUNT_), "?");
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, false, 64 * MiB);
    cham_tensor_t *t, *v;
    int mine;
    assert_int_equal(cham_tensor_new(ctx, 4096, CHAM_DTYPE_C64, "z", &t), CHAM_OK);
    assert_null(cham_tensor_user(t));
    cham_tensor_set_user(t, &mine);
    assert_ptr_equal(cham_tensor_user(t), &mine);
    assert_int_equal(cham_tensor_view(t, 0, 1024, CHAM_DTYPE_F8_E4M3, "v", &v), CHAM_OK);
    assert_null(cham_tensor_user(v));
    assert_int_equal(cham_tensor_dtype(v), CHAM_DTYPE_F8_E4M3);
    cham_tensor_release(v);
    cham_tensor_release(t);
    cham_context_free(ctx);
}

/* Issue 20's data-loss bug, first as a regression test: a tensor made
 * before training (a parameter, torch.tensor(host_data)) whose block the
 * OOM path gave back while it was still unwritten (it held nothing then)
 * is filled through cham_tensor_data afterwards. It must get a block
 * again, keep the bytes written there, and reach the op that reads it at
 * an address with those bytes: never NULL, never a fresh block. */
static void test_filled_after_its_block_was_given_back(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, true, 16 * MiB);
    cham_op_token_t op = token(ctx, "read");
    cham_tensor_t *param, *a, *b;
    assert_int_equal(cham_tensor_new(ctx, 4 * MiB, CHAM_DTYPE_F32, "param", &param), CHAM_OK);
    assert_int_equal(cham_tensor_new(ctx, 6 * MiB, CHAM_DTYPE_F32, "a", &a), CHAM_OK);
    memset(cham_tensor_data(a), 0x5a, 6 * MiB);
    /* Does not fit beside param and a: param's block, holding nothing
     * yet, is given back. */
    assert_int_equal(cham_tensor_new(ctx, 8 * MiB, CHAM_DTYPE_F32, "b", &b), CHAM_OK);
    unsigned char *p = cham_tensor_data(param);
    assert_non_null(p);
    for (size_t i = 0; i < 4 * MiB; i++)
        p[i] = (unsigned char)(i * 7);
    cham_tensor_t *in[2] = {param, a};
    assert_int_equal(cham_op_begin(ctx, op, in, 2, NULL, 0), CHAM_OK);
    p = cham_tensor_data(param);
    assert_non_null(p);
    for (size_t i = 0; i < 4 * MiB; i++)
        if (p[i] != (unsigned char)(i * 7))
            fail_msg("param byte %zu lost: %u", i, p[i]);
    const unsigned char *pa = cham_tensor_data(a);
    assert_non_null(pa);
    assert_int_equal(pa[6 * MiB - 1], 0x5a);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    cham_tensor_release(param);
    cham_tensor_release(a);
    cham_tensor_release(b);
    cham_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_reference_counting),
        cmocka_unit_test(test_misuse_is_reported),
        cmocka_unit_test(test_memory_curve_rebuilt),
        cmocka_unit_test(test_corrupted_swap_is_seen),
        cmocka_unit_test(test_views_follow_swaps),
        cmocka_unit_test(test_recorded_profile_plans),
        cmocka_unit_test(test_stages_through_context),
        cmocka_unit_test(test_caller_numbers_steps),
        cmocka_unit_test(test_allocator_mode),
        cmocka_unit_test(test_advisor_mode),
        cmocka_unit_test(test_advisor_over_budget),
        cmocka_unit_test(test_budget_set_before_the_first_policy),
        cmocka_unit_test(test_strided_views),
        cmocka_unit_test(test_zero_byte_tensors),
        cmocka_unit_test(test_allocator_shift_from_the_capacity),
        cmocka_unit_test(test_record_stream),
        cmocka_unit_test(test_host_copy),
        cmocka_unit_test(test_host_update),
        cmocka_unit_test(test_discard),
        cmocka_unit_test(test_host_copy_made_on_host),
        cmocka_unit_test(test_filled_after_its_block_was_given_back),
        cmocka_unit_test(test_dtypes_and_user_data),
        cmocka_unit_test(test_swap_out_waits_for_pinned_frees),
        cmocka_unit_test(test_kept_copy),
        cmocka_unit_test(test_kept_copies_do_not_grow_the_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
