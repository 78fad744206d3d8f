/* The GPT trainer through its library API (examples/gpt/train.h): runs
 * under a budget are bit-exact against an unconstrained copy with no
 * hazards, the loss falls, each dynamic behaviour fires and changes the op
 * sequence, and the native policy fails with the out-of-memory report.
 * Negative controls: one flipped bit in an activation brought back for the
 * backward turns the verification false, and a planted race on a swapped
 * block is counted in the run's hazards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"
#include "support/cases.h"
#include "support/gpt_train.h"
#include "train.h"

typedef struct seen {
    int steps, validations, overflows, skipping_steps;
} seen_t;

static void count(const gpt_step_info_t *i, void *user)
{
    seen_t *s = user;
    if (i->validation) {
        s->validations++;
        return;
    }
    s->steps++;
    s->overflows += i->skipped_update;
    s->skipping_steps += i->layers_skipped > 0;
    if (!i->verified)
        fail_msg("step %d: loss %.9f differs from the unconstrained run's", i->step, i->loss);
}

static void verified_run(double fraction, int steps, bool host_optimizer)
{
    gpt_train_config_t c = test_train_dynamic_config(CHAM_STRATEGY_CHAMELEON, fraction, steps);
    c.host_optimizer = host_optimizer;
    seen_t s = {0};
    gpt_train_result_t r = test_train_verified(&c, count, &s);
    assert_int_equal(r.oom, 0);
    assert_int_equal(r.steps, steps);
    assert_true(r.peak_device_bytes <= r.budget_bytes);
    assert_true(r.budget_bytes <= (uint64_t)(fraction * (double)r.unconstrained_peak_bytes));
    assert_true(r.swapped_bytes > 0);
    /* Every dynamic behaviour fired, and the runtime saw the sequence change. */
    assert_int_equal(s.overflows, 2);
    assert_int_equal(r.skipped_updates, 2);
    assert_int_equal(s.validations, steps / 20);
    assert_true(s.skipping_steps > 0);
    assert_true(r.stage_changes > 1);
}

/* 60 steps; 40 under a sanitizer (CHAM_SANITIZED, tests/CMakeLists.txt),
 * where a step costs about three times as much: both overflows (steps 12
 * and 33), two validations and skipped blocks still happen, so
 * verified_run asserts all it does at 60, as the quarter budget's 40 steps
 * do in every build. */
#ifdef CHAM_SANITIZED
enum { HALF_BUDGET_STEPS = 40 };
#else
enum { HALF_BUDGET_STEPS = 60 };
#endif

static void test_half_budget(void **state)
{
    (void)state;
    verified_run(0.5, HALF_BUDGET_STEPS, false);
}

static void test_quarter_budget(void **state)
{
    (void)state;
    verified_run(0.25, 40, false);
}

/* Issue 18: near a quarter of the peak, once Stable the kept policy covers
 * every step of a loop whose sequence does not change: no passive swap, no
 * on-demand swap-in, bit-exact. Its first Stable steps may still try
 * another trial's policy: a kept trial that runs out of memory in Stable
 * is replaced by the next (docs/executor.md, "The kept policy checked in
 * Stable"), so the last LAST_CLEAN steps are the ones that must be clean.
 * At 32%: at 25% and at 30% the gcc build keeps such a policy too, but
 * the clang (sanitizer) build plans differently, and there every policy
 * the check tries needs one passive swap a step in Stable, where its
 * trial needed none; the fastest of them is kept (docs/train.md; 28% and
 * 35% are clean in both builds). */
enum { LAST_CLEAN = 20 };

typedef struct {
    int steps;
    int unclean_at;                   /* the last step with a passive or on-demand swap */
    bool stable_at[40];
} clean_tail_t;

static void note_clean(const gpt_step_info_t *info, void *user)
{
    clean_tail_t *t = user;
    if (info->step < 0 || info->step >= 40)
        return;
    t->steps = info->step + 1;
    t->stable_at[info->step] = info->stable;
    if (info->passive || info->on_demand)
        t->unclean_at = info->step;
}

static void test_quarter_budget_stable_is_clean(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 40;
    c.budget_fraction = 0.32;
    c.verify = true;
    c.validate_every = 0;
    c.drop_prob = 0;
    clean_tail_t t = {.unclean_at = -1};
    gpt_train_result_t r = test_train_verified(&c, note_clean, &t);
    assert_int_equal(t.steps, 40);
    for (int i = 40 - LAST_CLEAN; i < 40; i++)
        assert_true(t.stable_at[i]);
    if (t.unclean_at >= 40 - LAST_CLEAN)
        fail_msg("a passive or on-demand swap at step %d, in the last %d (Stable)", t.unclean_at,
                 LAST_CLEAN);
    assert_true(r.passive_swapouts > 0);       /* the budget was tight before Stable */
}

/* The synthetic language is learnable: the loss falls well below ln(64). */
static void test_loss_falls(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 80;
    c.budget_fraction = 0;          /* unconstrained: this is about learning */
    c.validate_every = 40;
    gpt_train_result_t r;
    char err[600] = "";
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err), CHAM_OK);
    assert_true(r.first_train_loss > 3.9);                 /* ln 64 = 4.16 */
    assert_true(r.final_train_loss < r.first_train_loss - 1.0);
    assert_true(r.final_val_loss < r.first_train_loss - 1.0);
}

/* ---- negative controls ---------------------------------------------------
 * The verdicts above (bit_exact, hazards 0) come from the trainer itself; a
 * verdict that cannot turn false proves nothing. The tamper hook below
 * (installed through gpt_train_config_t.on_context) waits for the training
 * step `step`, then acts on the first swap-in of a block's GELU output
 * "l<k>.fc_gelu": that tensor is read once in the forward (by the op right
 * after the one that makes it) and once more in the backward (fcproj's
 * weight gradient), so once it has gone to the host and comes back, only
 * the backward reads it. The test does not take that on trust: the step is
 * profiled, and the first op at or after the swap-in that uses the storage
 * must read it in the backward phase. */

typedef enum tamper_kind {
    TAMPER_NONE,             /* find the target only: the control's twin */
    TAMPER_FLIP,             /* flip one bit of it as it lands on the device */
    TAMPER_RACE,             /* read it on another stream before the copy ends */
} tamper_kind_t;

typedef struct tamper {
    tamper_kind_t kind;
    int step;                /* training step to act in */
    cham_context_t *ctx;     /* the constrained run's */
    cham_stream_t *rogue;    /* TAMPER_RACE: a stream with no event waits */
    bool armed;
    int hits;                /* swap-ins acted on (1 when all went well) */
    char label[48];
    uint64_t storage;
    uint32_t op;             /* ops begun in the step at the swap-in */
    uint64_t ctx_step;       /* the runtime's step number of the swap-in */
    bool checked;            /* the step's profile was read */
    bool read_in_backward;   /* it showed a backward op reading the storage next */
    int first_mismatch;      /* first step whose loss differs from the reference's */
    int steps_seen;
    int hazards_seen;
    char hazard_kind[32], hazard_later[32];
} tamper_t;

static bool is_fc_gelu(const char *label)
{
    const char *dot = strchr(label, '.');
    return label[0] == 'l' && dot && strcmp(dot, ".fc_gelu") == 0;
}

static void tamper_swap(const cham_swap_event_t *e, void *user)
{
    tamper_t *t = user;
    if (!t->armed || e->out || !is_fc_gelu(e->label))
        return;
    t->armed = false;
    t->hits++;
    snprintf(t->label, sizeof t->label, "%s", e->label);
    t->storage = e->storage;
    t->op = e->op;
    t->ctx_step = e->step;
    assert_true(e->bytes >= 4);
    if (t->kind == TAMPER_FLIP) {
        /* The sim in data mode has already copied the bytes (copies run in
         * program order on the CPU): flip the top mantissa bit of the first
         * float (little-endian byte 2). The value changes by a factor in
         * [0.75, 1.5) and stays finite, so no overflow check can hide it. */
        unsigned char *p = (unsigned char *)(uintptr_t)e->device_ptr;
        p[2] ^= 0x40;
    } else if (t->kind == TAMPER_RACE) {
        /* A read of the block on a stream that never waited for the
         * swap-in's event: it starts while the copy still writes. */
        cham_access_t a = {(void *)(uintptr_t)e->device_ptr, (size_t)e->bytes,
                           CHAM_ACCESS_READ};
        cham_kernel_t k = {.label = "rogue read", .flops = 1e6, .bytes = (double)e->bytes,
                           .accesses = &a, .n_accesses = 1};
        assert_int_equal(cham_kernel_launch(t->rogue, &k), CHAM_OK);
    }
}

static void tamper_hazard(const cham_hazard_t *h, void *user)
{
    tamper_t *t = user;
    if (t->hazards_seen++ == 0) {
        snprintf(t->hazard_kind, sizeof t->hazard_kind, "%s", h->kind);
        snprintf(t->hazard_later, sizeof t->hazard_later, "%s", h->later_label);
    }
}

static void tamper_install(cham_context_t *ctx, void *user)
{
    tamper_t *t = user;
    t->ctx = ctx;
    cham_context_on_swap(ctx, tamper_swap, t);
    cham_device_t *dev = cham_context_device(ctx);
    assert_int_equal(cham_device_set_hazard_hook(dev, tamper_hazard, t), CHAM_OK);
    if (t->kind == TAMPER_RACE)   /* freed after the step, before the device closes */
        assert_int_equal(cham_stream_new(dev, "rogue", &t->rogue), CHAM_OK);
}

/* After step t->step: which op used the tampered storage next, in which phase. */
static void tamper_check_profile(tamper_t *t)
{
    const cham_profile_t *p = cham_context_last_profile(t->ctx);
    assert_non_null(p);
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    assert_int_equal(v.step, t->ctx_step);
    t->checked = true;
    for (size_t o = t->op; o < v.n_ops; o++) {
        const cham_profile_op_t *op = &v.ops[o];
        for (uint32_t k = 0; k < op->n_uses; k++) {
            const cham_tensor_use_t *u = &v.uses[op->first_use + k];
            if (u->storage == t->storage) {
                t->read_in_backward = !u->output && op->phase == CHAM_PHASE_BACKWARD;
                return;
            }
        }
    }
}

static void tamper_progress(const gpt_step_info_t *i, void *user)
{
    tamper_t *t = user;
    if (!i->verified && t->first_mismatch < 0)
        t->first_mismatch = i->step;
    if (i->validation)
        return;
    t->steps_seen++;
    if (i->step + 1 == t->step) {
        /* Between steps: arm, and profile the coming step in detail. */
        t->armed = true;
        cham_context_request_profile(t->ctx);
    } else if (i->step == t->step) {
        assert_false(t->armed);   /* the step had a swap-in to act on */
        tamper_check_profile(t);
        cham_stream_free(t->rogue);
        t->rogue = NULL;
    }
}

static gpt_train_result_t tampered_run(tamper_t *t, tamper_kind_t kind)
{
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->step = 5;
    t->first_mismatch = -1;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 10;
    c.budget_fraction = 0.5;
    c.verify = true;
    c.validate_every = 0;
    c.drop_prob = 0;
    c.strategy = CHAM_STRATEGY_CHAMELEON_SWAP;   /* the activation is swapped, not recomputed */
    c.on_context = tamper_install;
    c.on_context_user = t;
    gpt_train_result_t r;
    char err[600] = "";
    if (gpt_train(&c, &test_data, tamper_progress, t, &r, err, sizeof err) != CHAM_OK)
        fail_msg("%s", err);
    assert_int_equal(r.steps, 10);
    assert_int_equal(t->steps_seen, 10);
    /* Not vacuous: one activation read in the backward was acted on. */
    assert_int_equal(t->hits, 1);
    assert_true(is_fc_gelu(t->label));
    assert_true(t->checked);
    assert_true(t->read_in_backward);
    return r;
}

/* A flipped bit in one swapped activation must turn the verification
 * false; the same run with the hook but without the flip stays bit-exact. */
static void test_corrupted_swap_is_caught(void **state)
{
    (void)state;
    tamper_t clean, bad;
    gpt_train_result_t rc = tampered_run(&clean, TAMPER_NONE);
    assert_true(rc.bit_exact);
    assert_int_equal(clean.first_mismatch, -1);
    assert_int_equal(rc.hazards, 0);

    gpt_train_result_t rb = tampered_run(&bad, TAMPER_FLIP);
    /* The same swap-in was hit: the flip is the runs' only difference. */
    assert_string_equal(bad.label, clean.label);
    assert_int_equal(bad.op, clean.op);
    assert_int_equal(bad.ctx_step, clean.ctx_step);
    assert_false(rb.bit_exact);
    /* Losses agree up to the corrupted step (its loss was computed before
     * its backward); its update differs, so the next step's loss does. */
    assert_int_equal(bad.first_mismatch, bad.step + 1);
    assert_int_equal(rb.hazards, 0);   /* a wrong value, not a race */
}

/* A read racing a swap-in must show in the run's hazard count, reported by
 * the detector of the constrained run's device. */
static void test_planted_race_is_counted(void **state)
{
    (void)state;
    tamper_t t;
    gpt_train_result_t r = tampered_run(&t, TAMPER_RACE);
    assert_true(t.hazards_seen >= 1);
    assert_int_equal(r.hazards, (uint64_t)t.hazards_seen);
    assert_string_equal(t.hazard_kind, "read-after-write");
    assert_string_equal(t.hazard_later, "rogue read");
    assert_true(r.bit_exact);          /* the rogue kernel touches no data */
}

static void test_native_fails_clearly(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 3;
    c.strategy = CHAM_STRATEGY_NATIVE;
    gpt_train_result_t r;
    char err[600] = "";
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "step 0 (training)"));
    assert_non_null(strstr(err, "out of device memory"));
    assert_int_equal(r.oom, 1);
}

/* Sequences longer than the data: refused with a message, never a
 * division by zero or a read past the tokens (issue 14: --seq 20000 on the
 * 200,000 built-in tokens crashed at the first validation). */
static void test_seq_longer_than_data(void **state)
{
    (void)state;
    assert_int_equal(gpt_data_max_seq(&test_data), 19999);    /* the validation tenth: 20000 */
    assert_int_equal(gpt_data_min_tokens(19999), 200000);
    gpt_train_config_t c = gpt_train_config_default();
    c.shape = (gpt_shape_t){.seq = 20000, .layers = 1, .hidden = 1, .heads = 1, .batch = 1};
    c.steps = 2;
    c.validate_every = 1;
    c.budget_fraction = 1;
    gpt_train_result_t r;
    char err[600] = "";
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "seq: 20000 is longer than the data allows"));
    assert_non_null(strstr(err, "at most 19999"));
    c.shape.seq = 180001;                                  /* longer than the training part */
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);

    /* A file's bytes: ten sequences' worth is the least that works. */
    static unsigned char bytes[1290];
    memset(bytes, 'a', sizeof bytes);
    gpt_data_t d;
    assert_int_equal(gpt_data_from_bytes(&d, bytes, sizeof bytes), 0);
    assert_int_equal(d.vocab, 256);
    assert_int_equal(gpt_data_max_seq(&d), 128);
    gpt_data_free(&d);
    assert_int_equal(gpt_data_from_bytes(&d, bytes, sizeof bytes - 1), 0);
    assert_int_equal(gpt_data_max_seq(&d), 127);
    gpt_data_free(&d);
    assert_int_equal(gpt_data_from_bytes(&d, bytes, 0), 0);
    assert_int_equal(gpt_data_max_seq(&d), -1);
    gpt_data_free(&d);
}

/* Decoding after training (decode.h): with the KV caches offloaded under
 * Chameleon, and on the device under HyperOffload's planner at a quarter
 * of the memory, the tokens chosen equal the unconstrained reference's
 * (caches on the device), with no hazard; they are not all one token. */
static void decoded(cham_strategy_t strategy, double fraction, bool offload)
{
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 30;
    c.strategy = strategy;
    c.budget_fraction = fraction;
    c.verify = true;
    c.generate = 24;
    c.kv_offload = offload;
    gpt_train_result_t r = test_train_verified(&c, NULL, NULL);
    assert_int_equal(r.decoded, 24);
    assert_true(r.decode_bit_exact);
    int distinct = 0;
    for (int i = 1; i < 8; i++)
        distinct += r.first_tokens[i] != r.first_tokens[0];
    assert_true(distinct > 0);
}

static void test_decode_bit_exact(void **state)
{
    (void)state;
    decoded(CHAM_STRATEGY_CHAMELEON, 0.5, true);
    decoded(CHAM_STRATEGY_HYPEROFFLOAD, 0.25, false);
}

/* Lengths the model cannot hold are refused before training, naming them. */
static void test_decode_bad_lengths(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.prompt = 100;
    c.generate = 100;
    gpt_train_result_t r;
    char err[600] = "";
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "prompt 100 + generate 100 needs 199 positions, more than the "
                                "model's seq of 128"));
    assert_int_equal(r.steps, 0);
    c.prompt = 0;
    c.generate = 4;
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "prompt 0 is not valid"));
}

/* AdamW on the host (host_adam.h): bit-exact against the reference's
 * device optimizer, overflow steps included, under a quarter budget. */
static void test_host_optimizer(void **state)
{
    (void)state;
    verified_run(0.25, 40, true);
}

/* A small model (vocab 64, seq 16, hidden 32, batch 2) on a fresh 64 MiB
 * data-mode context set up for strategy s, and its token batch. */
static gpt_model_t *small_model(cham_strategy_t s, int layers, bool host_optimizer,
                                cham_context_t **ctx, gpt_ops_t *ops, int32_t *tok,
                                int32_t *tgt)
{
    cham_config_t cfg = cham_config_default();
    cfg.device.data = true;
    cfg.device.capacity = 64u << 20;
    assert_int_equal(cham_strategy_apply(s, &cfg), CHAM_OK);
    assert_int_equal(cham_context_new(&cfg, ctx), CHAM_OK);
    assert_int_equal(gpt_ops_init(ops, *ctx), CHAM_OK);
    gpt_shape_t shape = {.vocab = 64, .seq = 16, .layers = layers, .hidden = 32, .heads = 2,
                         .batch = 2};
    gpt_model_t *m;
    char err[300];
    assert_int_equal(gpt_model_new(ops, &shape, 7, host_optimizer, &m, err, sizeof err),
                     CHAM_OK);
    for (int i = 0; i < 32; i++)
        tok[i] = i % 64, tgt[i] = (i * 7 + 3) % 64;
    return m;
}

/* The host optimizer's state through the model API: an overflow step
 * leaves the master weights and the parameters untouched; an update
 * changes the master weights and brings them to the parameters. */
static void test_host_optimizer_skips_overflow(void **state)
{
    (void)state;
    cham_context_t *ctx;
    gpt_ops_t ops;
    int32_t tok[32], tgt[32];
    gpt_model_t *m = small_model(CHAM_STRATEGY_CHAMELEON, 2, true, &ctx, &ops, tok, tgt);
    size_t n = gpt_param_count(m);
    float *master = calloc(n, sizeof *master), *params = calloc(n, sizeof *params),
          *before = calloc(n, sizeof *before);
    assert_non_null(master && params && before);
    assert_int_equal(gpt_read_master(m, before), CHAM_OK);
    assert_int_equal(gpt_read_params(m, params), CHAM_OK);
    assert_memory_equal(before, params, n * sizeof *params);
    double loss, sumsq;
    bool overflow;
    for (int step = 0; step < 2; step++) {
        assert_int_equal(gpt_forward(m, tok, tgt, NULL, true, &loss), CHAM_OK);
        assert_int_equal(gpt_backward(m, 1.0f), CHAM_OK);
        if (step == 0)
            assert_int_equal(gpt_inject_overflow(m), CHAM_OK);
        assert_int_equal(gpt_check_grads(m, &overflow, &sumsq), CHAM_OK);
        assert_int_equal(overflow, step == 0);
        if (overflow) {
            assert_int_equal(gpt_zero_grads(m), CHAM_OK);
            assert_int_equal(gpt_read_master(m, master), CHAM_OK);
            assert_memory_equal(master, before, n * sizeof *master);
        } else {
            assert_true(sumsq > 0);
            assert_int_equal(gpt_optimizer_step(m, 1.0f, 1, 1e-2f, 0.01f), CHAM_OK);
            assert_int_equal(gpt_read_master(m, master), CHAM_OK);
            assert_memory_not_equal(master, before, n * sizeof *master);
        }
        assert_int_equal(gpt_read_params(m, params), CHAM_OK);
        assert_memory_equal(master, params, n * sizeof *params);
    }
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    free(master);
    free(params);
    free(before);
    gpt_model_free(m);
    cham_context_free(ctx);
}

/* The model's parameters after `steps` steps with ProTrain's block
 * layout c (NULL: every block keeps what it saves), on a fresh context. */
static float *train_blocks(const cham_protrain_config_t *c, int steps, size_t *n)
{
    cham_context_t *ctx;
    gpt_ops_t ops;
    int32_t tok[32], tgt[32];
    gpt_model_t *m = small_model(CHAM_STRATEGY_PROTRAIN, 5, false, &ctx, &ops, tok, tgt);
    if (c)
        gpt_model_set_blocks(m, c);
    double loss, sumsq;
    bool overflow;
    for (int step = 0; step < steps; step++) {
        assert_int_equal(gpt_forward(m, tok, tgt, NULL, true, &loss), CHAM_OK);
        assert_int_equal(gpt_backward(m, 1.0f), CHAM_OK);
        assert_int_equal(gpt_check_grads(m, &overflow, &sumsq), CHAM_OK);
        assert_int_equal(gpt_optimizer_step(m, 1.0f, step + 1, 1e-2f, 0.01f), CHAM_OK);
        assert_int_equal(cham_step_end(ctx), CHAM_OK);
    }
    *n = gpt_param_count(m);
    float *params = calloc(*n, sizeof *params);
    assert_non_null(params);
    assert_int_equal(gpt_read_params(m, params), CHAM_OK);
    cham_runtime_stats_t s;
    cham_context_get_stats(ctx, &s);
    if (c && c->n_swap)                  /* the swapped blocks did go to the host */
        assert_true(s.swaps_out > 0 && s.swaps_in >= s.swaps_out);
    assert_int_equal(s.on_demand_swaps_in, 0);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    gpt_model_free(m);
    cham_context_free(ctx);
    return params;
}

/* ProTrain's blocks with real kernels: swapped blocks' tensors come back
 * bit for bit, checkpointed blocks recompute them bit for bit, in every
 * layout, whatever the interval. */
static void test_protrain_blocks_bit_exact(void **state)
{
    (void)state;
    size_t n, n2;
    float *plain = train_blocks(NULL, 3, &n);
    static const cham_protrain_config_t layouts[] = {
        {.n_swap = 2, .n_checkpoint = 2, .swap_interval = 1},
        {.n_swap = 1, .n_checkpoint = 4, .swap_interval = 2},
        {.n_swap = 5, .swap_interval = 3},
        {.n_checkpoint = 5},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        float *p = train_blocks(&layouts[i], 3, &n2);
        assert_int_equal(n, n2);
        assert_memory_equal(plain, p, n * sizeof *p);
        free(p);
    }
    free(plain);
}

/* `train --strategy protrain`: the block plan searched for the budget
 * from the unconstrained step's profile, bit-exact against the reference,
 * its step estimated within 10% of the simulated one; refusals for what
 * the trainer cannot do. */
static void test_protrain_strategy(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 12;
    c.strategy = CHAM_STRATEGY_PROTRAIN;
    c.budget_fraction = 0.5;
    c.verify = true;
    gpt_train_result_t r = test_train_verified(&c, NULL, NULL);
    char err[600] = "";
    assert_true(r.has_protrain);
    assert_true(r.protrain.n_swap + r.protrain.n_checkpoint > 0);
    assert_true(r.peak_device_bytes <= r.budget_bytes);
    assert_true(fabs(r.predicted_step_s / r.sim_step_time_s - 1) < 0.10);
    c.host_optimizer = true;
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "--optimizer host"));
    c.host_optimizer = false;
    c.strategy = CHAM_STRATEGY_ZERO_OFFLOAD;
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "zero-offload"));
}

/* A device whose preset names no host cannot time the host's optimizer:
 * a clear error, before any step. */
static void test_host_optimizer_needs_host_figures(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 2;
    c.preset = "rtx3090-24g";
    c.host_optimizer = true;
    gpt_train_result_t r;
    char err[600] = "";
    assert_int_equal(gpt_train(&c, &test_data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "rtx3090-24g"));
    assert_non_null(strstr(err, "host_flops"));
    assert_int_equal(r.steps, 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_longer_than_data),
        cmocka_unit_test(test_half_budget),
        cmocka_unit_test(test_quarter_budget),
        cmocka_unit_test(test_quarter_budget_stable_is_clean),
        cmocka_unit_test(test_host_optimizer),
        cmocka_unit_test(test_host_optimizer_skips_overflow),
        cmocka_unit_test(test_protrain_blocks_bit_exact),
        cmocka_unit_test(test_protrain_strategy),
        cmocka_unit_test(test_host_optimizer_needs_host_figures),
        cmocka_unit_test(test_loss_falls),
        cmocka_unit_test(test_decode_bit_exact),
        cmocka_unit_test(test_decode_bad_lengths),
        cmocka_unit_test(test_native_fails_clearly),
        cmocka_unit_test(test_corrupted_swap_is_caught),
        cmocka_unit_test(test_planted_race_is_counted),
    };
    /* CTest runs one case a test (tests/CMakeLists.txt, CHAM_SPLIT_TESTS). */
    return test_run_cases(tests, argc, argv, test_data_setup, test_data_teardown);
}
