/* The stage machine (src/profile/stage.c, paper Algorithm 1) on scripted
 * op-token sequences shaped like a transformer training step: forward,
 * backward, a loss-scaled optimizer update, and the variations the paper
 * names (loss-scale skips, on-the-fly validation, small changes, reordering).
 * Also the sequence cosine's definition and edge cases, and determinism.
 *
 * The modelled step (tokens interned in first-use order, as the runtime does):
 *   forward     embed, add, 24 layers x 12 ops, ln, lm_head, loss   = 293
 *   backward    loss_bwd, lm_head_bwd, ln_bwd, 24 layers x 24, embed_bwd = 580
 *   optimizer   unscale, found_inf, A update ops, update_scale       = A + 3
 * With A = 24 (a fused Adam, one op per layer's parameter group) a step has
 * 900 ops and the update is 2.7% of them; with A = 72 (three ops per group)
 * 948 ops and 7.6%. A validation pass is the forward alone: 293 ops, 32.6% of
 * a 900-op step. A loss-scale skip keeps unscale, found_inf and update_scale
 * and drops the A update ops. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "profile/stage.h"

enum {
    /* forward */
    EMBED, ADD, LN, ADDMM, BMM, SOFTMAX, GELU, LM_HEAD, LOSS,
    /* backward */
    LOSS_BWD, LM_HEAD_BWD, LN_BWD, ADD_BWD, ADDMM_BWD, MM, SUM, GELU_BWD, BMM_BWD,
    SOFTMAX_BWD, ACC_GRAD, EMBED_BWD,
    /* optimizer with loss scaling */
    UNSCALE, FOUND_INF, ADAM_M, ADAM_V, ADAM_STEP, UPDATE_SCALE,
    /* extra ops of a conditional branch */
    DROPOUT, MUL,
};

enum { LAYERS = 24, FWD_OPS = 293, BODY_OPS = 873, MAX_OPS = 4096 };

static const cham_op_token_t fwd_layer[12] = {
    LN, ADDMM, BMM, SOFTMAX, BMM, ADDMM, ADD, LN, ADDMM, GELU, ADDMM, ADD,
};
static const cham_op_token_t bwd_layer[24] = {
    ADD_BWD, ADDMM_BWD, MM, SUM, GELU_BWD, ADDMM_BWD, MM, SUM,
    LN_BWD, ADD_BWD, ADDMM_BWD, MM, SUM, BMM_BWD, BMM, SOFTMAX_BWD,
    BMM_BWD, BMM, ADDMM_BWD, MM, SUM, LN_BWD, ADD_BWD, ACC_GRAD,
};

typedef struct seq {
    cham_op_token_t t[MAX_OPS];
    size_t n;
} seq_t;

static void put(seq_t *s, cham_op_token_t tok)
{
    assert_true(s->n < MAX_OPS);
    s->t[s->n++] = tok;
}

static void put_forward(seq_t *s)
{
    put(s, EMBED);
    put(s, ADD);
    for (int l = 0; l < LAYERS; l++)
        for (size_t i = 0; i < 12; i++)
            put(s, fwd_layer[i]);
    put(s, LN);
    put(s, LM_HEAD);
    put(s, LOSS);
}

/* A training step with adam_ops update ops; skip_update: loss scaling found
 * an overflow and skipped them; validation: a forward-only pass appended. */
static void build(seq_t *s, size_t adam_ops, bool skip_update, bool validation)
{
    static const cham_op_token_t adam[3] = {ADAM_M, ADAM_V, ADAM_STEP};
    s->n = 0;
    put_forward(s);
    put(s, LOSS_BWD);
    put(s, LM_HEAD_BWD);
    put(s, LN_BWD);
    for (int l = 0; l < LAYERS; l++)
        for (size_t i = 0; i < 24; i++)
            put(s, bwd_layer[i]);
    put(s, EMBED_BWD);
    put(s, UNSCALE);
    put(s, FOUND_INF);
    if (!skip_update)
        for (size_t i = 0; i < adam_ops; i++)
            put(s, adam[i % 3]);
    put(s, UPDATE_SCALE);
    if (validation)
        put_forward(s);
}

/* Inserts count ops (dropout, mul, dropout, ...) before position at. */
static void insert_ops(seq_t *s, size_t at, size_t count)
{
    assert_true(at <= s->n && s->n + count <= MAX_OPS);
    memmove(s->t + at + count, s->t + at, (s->n - at) * sizeof s->t[0]);
    for (size_t i = 0; i < count; i++)
        s->t[at + i] = i % 2 ? MUL : DROPOUT;
    s->n += count;
}

static void remove_ops(seq_t *s, size_t at, size_t count)
{
    assert_true(at + count <= s->n);
    memmove(s->t + at, s->t + at + count, (s->n - at - count) * sizeof s->t[0]);
    s->n -= count;
}

/* Swaps ops 2 and 3 (mm, sum) of the backward of the first `layers` layers:
 * a same-length reordering that moves 2 * layers ops. */
static void reorder_backward(seq_t *s, int layers)
{
    for (int l = 0; l < layers; l++) {
        size_t i = FWD_OPS + 3 + (size_t)l * 24 + 2;
        assert_int_equal(s->t[i], MM);
        assert_int_equal(s->t[i + 1], SUM);
        s->t[i] = SUM;
        s->t[i + 1] = MM;
    }
}

#define assert_near(x, y)                                                          \
    do {                                                                           \
        double x_ = (x), y_ = (y);                                                 \
        if (!(fabs(x_ - y_) <= 1e-12)) {                                           \
            print_error("%s = %.17g, expected %.17g\n", #x, x_, y_);               \
            fail();                                                                \
        }                                                                          \
    } while (0)

static char stage_char(cham_stage_t st)
{
    return st == CHAM_STAGE_WARMUP ? 'W' : st == CHAM_STAGE_GENPOLICY ? 'G' : 'S';
}

/* One step; checks the stage it returns (W, G or S) and StableStep after it. */
static void step(cham_stage_machine_t *sm, const seq_t *s, char want, uint32_t want_count)
{
    bool ok = false;
    cham_stage_t st = cham_stage_machine_step(sm, s->t, s->n, NULL, 0, &ok);
    assert_true(ok);
    assert_int_equal(st, sm->stage);
    if (stage_char(st) != want || sm->stable_steps != want_count) {
        print_error("stage %c count %u, expected %c count %u (length change %.4f, cosine "
                    "%.4f)\n", stage_char(st), sm->stable_steps, want, want_count,
                    sm->last_length_change, sm->last_cosine);
        fail();
    }
}

static void init(cham_stage_machine_t *sm)
{
    cham_stage_machine_init(sm, 2, 5, 0.05, 0.95);   /* the paper's knobs */
}

/* Identical steps until Stable: after 9 steps, StableStep = 6. */
static void walk_to_stable(cham_stage_machine_t *sm, const seq_t *s)
{
    static const char want[] = "WWGGGGGGS";
    static const uint32_t count[] = {1, 2, 0, 1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 9; i++)
        step(sm, s, want[i], count[i]);
}

/* ---- the model itself ---------------------------------------------------*/

static void test_model_proportions(void **state)
{
    (void)state;
    static seq_t s;
    build(&s, 24, false, false);
    assert_int_equal(s.n, 900);
    build(&s, 24, true, false);
    assert_int_equal(s.n, BODY_OPS + 3);
    build(&s, 72, false, false);
    assert_int_equal(s.n, 948);
    build(&s, 24, false, true);
    assert_int_equal(s.n, 900 + FWD_OPS);
}

/* ---- Algorithm 1 on identical steps ----------------------------------------
 * m = 2, n = 5. Step 1 compares with itself (PrevOpSeq <- OpSeq): stable,
 * StableStep 1, and 1 > 2 is false, so WarmUp. Step 2: 2 > 2 false, WarmUp.
 * Step 3: 3 > 2: GenPolicy, StableStep 0. Steps 4..8: StableStep 1..5, and
 * 5 > 5 is false, so GenPolicy. Step 9: 6 > 5: Stable. From then on neither
 * branch fires and the count goes on (7, 8, ...). So GenPolicy at step 3,
 * Stable at step 9: m + 1 stable comparisons, then n + 1 more. */
static void test_identical_steps(void **state)
{
    (void)state;
    static seq_t s;
    build(&s, 24, false, false);
    cham_stage_machine_t sm;
    init(&sm);
    assert_int_equal(sm.stage, CHAM_STAGE_WARMUP);
    walk_to_stable(&sm, &s);
    step(&sm, &s, 'S', 7);
    step(&sm, &s, 'S', 8);
    step(&sm, &s, 'S', 9);
    assert_near(sm.last_cosine, 1.0);
    assert_near(sm.last_length_change, 0.0);
    cham_stage_machine_free(&sm);
}

static void test_first_step_compares_with_itself(void **state)
{
    (void)state;
    static seq_t s;
    build(&s, 24, false, false);
    cham_stage_machine_t sm;
    init(&sm);
    step(&sm, &s, 'W', 1);
    assert_true(sm.last_cosine == 1.0);
    assert_true(sm.last_length_change == 0.0);
    assert_true(sm.have_prev);
    assert_int_equal(sm.prev_len, 900);
    cham_stage_machine_free(&sm);

    /* An empty first step too; then ops after an empty step are a change of
     * infinite relative length. */
    static const seq_t empty = {.n = 0};
    init(&sm);
    step(&sm, &empty, 'W', 1);
    step(&sm, &empty, 'W', 2);
    step(&sm, &s, 'W', 0);
    assert_true(isinf(sm.last_length_change));
    assert_true(sm.last_cosine == 0.0);
    /* and from ops to nothing: a 100% change */
    step(&sm, &empty, 'W', 0);
    assert_true(sm.last_length_change == 1.0);
    cham_stage_machine_free(&sm);
}

static void test_other_knobs(void **state)
{
    (void)state;
    static seq_t s;
    build(&s, 24, false, false);
    cham_stage_machine_t sm;
    cham_stage_machine_init(&sm, 0, 0, 0.05, 0.95);
    step(&sm, &s, 'G', 0);   /* 1 > 0 */
    step(&sm, &s, 'S', 1);   /* 1 > 0 */
    step(&sm, &s, 'S', 2);
    cham_stage_machine_free(&sm);

    cham_stage_machine_init(&sm, 1, 1, 0.05, 0.95);
    step(&sm, &s, 'W', 1);
    step(&sm, &s, 'G', 0);
    step(&sm, &s, 'G', 1);
    step(&sm, &s, 'S', 2);
    cham_stage_machine_free(&sm);
}

/* ---- length ---------------------------------------------------------------*/

/* 27 extra ops (a conditional branch) make a 900-op step 3% longer: the
 * stage stays and the count goes on, wherever the block sits, and the step
 * back is 2.9% shorter and stable too. GenPolicy and Stable come at steps 3
 * and 9 as if nothing had varied. */
static void test_three_percent_longer_keeps_stage(void **state)
{
    (void)state;
    static seq_t s, longer;
    build(&s, 24, false, false);
    const size_t where[] = {0, FWD_OPS + 3 + 12 * 24, 900};   /* start, mid-backward, end */
    for (size_t w = 0; w < 3; w++) {
        longer = s;
        insert_ops(&longer, where[w], 27);
        cham_stage_machine_t sm;
        init(&sm);
        step(&sm, &s, 'W', 1);
        step(&sm, &s, 'W', 2);
        step(&sm, &s, 'G', 0);
        step(&sm, &s, 'G', 1);
        step(&sm, &longer, 'G', 2);
        assert_near(sm.last_length_change, 27.0 / 900.0);
        assert_near(sm.last_cosine, sqrt(900.0 / 927.0));   /* 0.985 */
        step(&sm, &s, 'G', 3);
        assert_near(sm.last_length_change, 27.0 / 927.0);
        step(&sm, &s, 'G', 4);
        step(&sm, &s, 'G', 5);
        step(&sm, &s, 'S', 6);
        step(&sm, &longer, 'S', 7);
        step(&sm, &longer, 'S', 8);
        step(&sm, &s, 'S', 9);
        cham_stage_machine_free(&sm);
    }
}

/* 54 ops more or fewer (6%) go back to WarmUp with StableStep 0; the step
 * after, back to normal, differs by more than 5% again and so is WarmUp
 * too; a lasting change counts from its second step. */
static void test_six_percent_returns_to_warmup(void **state)
{
    (void)state;
    static seq_t s, longer, shorter;
    build(&s, 24, false, false);
    longer = s;
    insert_ops(&longer, FWD_OPS + 100, 54);
    shorter = s;
    remove_ops(&shorter, FWD_OPS + 3 + 24, 54);   /* backward of layers 2-3 and a bit */

    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    step(&sm, &longer, 'W', 0);
    assert_near(sm.last_length_change, 0.06);
    step(&sm, &s, 'W', 0);                       /* 54 / 954 = 5.7% shorter */
    assert_near(sm.last_length_change, 54.0 / 954.0);
    step(&sm, &s, 'W', 1);
    step(&sm, &s, 'W', 2);
    step(&sm, &s, 'G', 0);
    step(&sm, &shorter, 'W', 0);                 /* 6% shorter, from GenPolicy */
    assert_near(sm.last_length_change, 0.06);
    step(&sm, &shorter, 'W', 1);                 /* the new length is the norm now */
    step(&sm, &shorter, 'W', 2);
    step(&sm, &shorter, 'G', 0);
    cham_stage_machine_free(&sm);
}

/* The length test is strict (diff < 5%): 45 ops on 900 is exactly 5% and
 * goes back to WarmUp; 44 ops (4.9%) does not. */
static void test_length_boundary(void **state)
{
    (void)state;
    static seq_t s, plus44, plus45;
    build(&s, 24, false, false);
    plus44 = s;
    insert_ops(&plus44, 900, 44);
    plus45 = s;
    insert_ops(&plus45, 900, 45);
    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    step(&sm, &plus44, 'S', 7);
    step(&sm, &s, 'S', 8);
    step(&sm, &plus45, 'W', 0);
    assert_true(sm.last_length_change == 0.05);
    cham_stage_machine_free(&sm);
}

/* ---- reordering -----------------------------------------------------------*/

/* Same length, ops moved: the cosine is the fraction of positions holding
 * the same op. 10 swapped pairs move 20 of 900 ops (cosine 0.978, stays);
 * 23 pairs move 46 (0.949, back to WarmUp). */
static void test_reordering(void **state)
{
    (void)state;
    static seq_t s, small, large, one;
    build(&s, 24, false, false);
    one = s;
    reorder_backward(&one, 1);
    small = s;
    reorder_backward(&small, 10);
    large = s;
    reorder_backward(&large, 23);
    assert_int_equal(small.n, s.n);
    assert_int_equal(large.n, s.n);

    /* any reordering lowers the cosine */
    assert_true(cham_sequence_cosine(one.t, one.n, s.t, s.n) < 1.0);
    assert_near(cham_sequence_cosine(one.t, one.n, s.t, s.n), 898.0 / 900.0);

    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    step(&sm, &small, 'S', 7);
    assert_near(sm.last_cosine, 880.0 / 900.0);
    assert_true(sm.last_length_change == 0.0);
    step(&sm, &s, 'S', 8);
    step(&sm, &large, 'W', 0);
    assert_near(sm.last_cosine, 854.0 / 900.0);
    assert_true(sm.last_length_change == 0.0);
    cham_stage_machine_free(&sm);
}

/* ---- loss scaling -----------------------------------------------------------
 * A skipped update drops the A update ops from the end of the step (only
 * update_scale follows them). */

/* A = 24 of 900 ops (2.7%): the skip (2.7% shorter, cosine 0.987) and the
 * step after it (2.7% longer) are tolerated; Stable stays, the count goes on. */
static void test_loss_scale_skip_small_update(void **state)
{
    (void)state;
    static seq_t s, skip;
    build(&s, 24, false, false);
    build(&skip, 24, true, false);
    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    step(&sm, &skip, 'S', 7);
    assert_near(sm.last_length_change, 24.0 / 900.0);
    assert_near(sm.last_cosine, sqrt(876.0 / 900.0));
    step(&sm, &s, 'S', 8);
    assert_near(sm.last_length_change, 24.0 / 876.0);
    step(&sm, &skip, 'S', 9);      /* two skips in a row: the same */
    step(&sm, &skip, 'S', 10);
    assert_true(sm.last_cosine == 1.0);
    step(&sm, &s, 'S', 11);
    cham_stage_machine_free(&sm);

    /* During GenPolicy too: the skip does not delay Stable. */
    init(&sm);
    step(&sm, &s, 'W', 1);
    step(&sm, &s, 'W', 2);
    step(&sm, &s, 'G', 0);
    step(&sm, &skip, 'G', 1);
    step(&sm, &s, 'G', 2);
    step(&sm, &s, 'G', 3);
    step(&sm, &s, 'G', 4);
    step(&sm, &s, 'G', 5);
    step(&sm, &s, 'S', 6);
    cham_stage_machine_free(&sm);
}

/* A = 72 of 948 ops (7.6%, an update of several ops per parameter group):
 * the skip is a 7.6% change and the step after it an 8.2% one, so both are
 * WarmUp; GenPolicy comes three steps after the update is back and Stable
 * nine steps after: the policy is generated again. */
static void test_loss_scale_skip_large_update(void **state)
{
    (void)state;
    static seq_t s, skip;
    build(&s, 72, false, false);
    build(&skip, 72, true, false);
    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    step(&sm, &skip, 'W', 0);
    assert_near(sm.last_length_change, 72.0 / 948.0);
    assert_near(sm.last_cosine, sqrt(876.0 / 948.0));   /* 0.961: the length decides */
    step(&sm, &s, 'W', 0);
    assert_near(sm.last_length_change, 72.0 / 876.0);
    static const char want[] = "WWGGGGGGS";
    static const uint32_t count[] = {1, 2, 0, 1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 9; i++)
        step(&sm, &s, want[i], count[i]);
    cham_stage_machine_free(&sm);
}

/* The length change is relative to the previous step, so it is not
 * symmetric: A = 45 of 921 ops; skipping is 4.89% shorter (tolerated), the
 * update coming back is 45 / 876 = 5.14% longer (WarmUp). */
static void test_loss_scale_asymmetry(void **state)
{
    (void)state;
    static seq_t s, skip;
    build(&s, 45, false, false);
    build(&skip, 45, true, false);
    assert_int_equal(s.n, 921);
    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    step(&sm, &skip, 'S', 7);
    step(&sm, &s, 'W', 0);
    assert_near(sm.last_length_change, 45.0 / 876.0);
    cham_stage_machine_free(&sm);
}

/* ---- on-the-fly validation ------------------------------------------------
 * A forward-only pass of 293 ops appended to a 900-op step: 32.6% longer
 * (cosine sqrt(900 / 1193) = 0.869), then 24.6% shorter when training goes
 * on: two WarmUp steps, and the policy is generated again. */
static void test_validation_appended(void **state)
{
    (void)state;
    static seq_t s, val;
    build(&s, 24, false, false);
    build(&val, 24, false, true);
    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    step(&sm, &val, 'W', 0);
    assert_near(sm.last_length_change, 293.0 / 900.0);
    assert_near(sm.last_cosine, sqrt(900.0 / 1193.0));
    step(&sm, &s, 'W', 0);
    assert_near(sm.last_length_change, 293.0 / 1193.0);
    static const char want[] = "WWGGGGGGS";
    static const uint32_t count[] = {1, 2, 0, 1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 9; i++)
        step(&sm, &s, want[i], count[i]);
    cham_stage_machine_free(&sm);
}

/* ---- a run ------------------------------------------------------------------
 * 40 steps with A = 24: loss-scale skips at steps 12 and 13, validation at
 * step 20, skip at step 25 (during GenPolicy). docs/profiler.md tabulates it. */
static const char run_want[] = "WWGGGGGGSSSSSSSSSSSWWWWGGGGGGSSSSSSSSSSS";

static void run_scenario(cham_stage_machine_t *sm, char *got, double *cosine, double *change)
{
    static seq_t s, skip, val;
    build(&s, 24, false, false);
    build(&skip, 24, true, false);
    build(&val, 24, false, true);
    for (int i = 1; i <= 40; i++) {
        const seq_t *x = (i == 12 || i == 13 || i == 25) ? &skip : i == 20 ? &val : &s;
        bool ok = false;
        got[i - 1] = stage_char(cham_stage_machine_step(sm, x->t, x->n, NULL, 0, &ok));
        assert_true(ok);
        cosine[i - 1] = sm->last_cosine;
        change[i - 1] = sm->last_length_change;
    }
    got[40] = '\0';
}

static void test_run(void **state)
{
    (void)state;
    char got[41];
    double cosine[40], change[40];
    cham_stage_machine_t sm;
    init(&sm);
    run_scenario(&sm, got, cosine, change);
    assert_string_equal(got, run_want);
    cham_stage_machine_free(&sm);
}

/* ---- determinism ------------------------------------------------------------*/

static void test_deterministic(void **state)
{
    (void)state;
    char got1[41], got2[41];
    double cos1[40], cos2[40], ch1[40], ch2[40];
    cham_stage_machine_t a, b;
    init(&a);
    init(&b);
    run_scenario(&a, got1, cos1, ch1);
    run_scenario(&b, got2, cos2, ch2);
    assert_string_equal(got1, got2);
    assert_memory_equal(cos1, cos2, sizeof cos1);
    assert_memory_equal(ch1, ch2, sizeof ch1);
    assert_int_equal(a.stable_steps, b.stable_steps);
    cham_stage_machine_free(&a);
    cham_stage_machine_free(&b);

    static seq_t s, t;
    build(&s, 24, false, true);
    build(&t, 72, true, false);
    reorder_backward(&t, 5);
    double c1 = cham_sequence_cosine(s.t, s.n, t.t, t.n);
    for (int i = 0; i < 100; i++) {
        double c = cham_sequence_cosine(s.t, s.n, t.t, t.n);
        assert_memory_equal(&c, &c1, sizeof c);
        c = cham_sequence_cosine(t.t, t.n, s.t, s.n);    /* symmetric, bit for bit */
        assert_memory_equal(&c, &c1, sizeof c);
    }
}

/* The machine keeps its own copy: the caller reuses its buffer. */
static void test_keeps_a_copy(void **state)
{
    (void)state;
    static seq_t s, buf;
    build(&s, 24, false, false);
    buf = s;
    cham_stage_machine_t sm;
    init(&sm);
    step(&sm, &buf, 'W', 1);
    reorder_backward(&buf, 24);        /* scribble over the caller's buffer */
    step(&sm, &s, 'W', 2);             /* compared with the copy: identical */
    assert_true(sm.last_cosine == 1.0);
    assert_memory_equal(sm.prev, s.t, s.n * sizeof s.t[0]);
    cham_stage_machine_free(&sm);
}

/* Out of memory (here: a length whose copy cannot be sized) leaves the
 * machine as it was and says so. */
static void test_out_of_memory(void **state)
{
    (void)state;
    static seq_t s;
    build(&s, 24, false, false);
    cham_stage_machine_t sm;
    init(&sm);
    walk_to_stable(&sm, &s);
    double cos = sm.last_cosine, change = sm.last_length_change;
    bool ok = true;
    cham_stage_t st = cham_stage_machine_step(&sm, s.t, SIZE_MAX / 2, NULL, 0, &ok);
    assert_false(ok);
    assert_int_equal(st, CHAM_STAGE_STABLE);
    assert_int_equal(sm.stage, CHAM_STAGE_STABLE);
    assert_int_equal(sm.stable_steps, 6);
    assert_int_equal(sm.prev_len, 900);
    assert_true(sm.last_cosine == cos && sm.last_length_change == change);
    step(&sm, &s, 'S', 7);
    cham_stage_machine_free(&sm);
}

/* ---- the cosine ------------------------------------------------------------*/

static void test_cosine_edges(void **state)
{
    (void)state;
    static const cham_op_token_t zero[2] = {0, 0}, one[1] = {1}, abc[3] = {0, 1, 2};
    static const cham_op_token_t cba[3] = {2, 1, 0}, bca[3] = {1, 2, 0};

    /* empty sequences (NULL is allowed with length 0) */
    assert_true(cham_sequence_cosine(NULL, 0, NULL, 0) == 1.0);
    assert_true(cham_sequence_cosine(abc, 0, cba, 0) == 1.0);
    assert_true(cham_sequence_cosine(NULL, 0, abc, 3) == 0.0);
    assert_true(cham_sequence_cosine(abc, 3, NULL, 0) == 0.0);

    /* identical: exactly 1; token 0 counts like any other */
    assert_true(cham_sequence_cosine(zero, 1, zero, 1) == 1.0);
    assert_true(cham_sequence_cosine(zero, 2, zero, 2) == 1.0);
    assert_true(cham_sequence_cosine(abc, 3, abc, 3) == 1.0);
    assert_true(cham_sequence_cosine(zero, 1, one, 1) == 0.0);
    assert_near(cham_sequence_cosine(zero, 2, zero, 1), 1.0 / sqrt(2.0));

    /* only equality of tokens matters, not their numbers */
    assert_near(cham_sequence_cosine(abc, 3, cba, 3), 1.0 / 3.0);   /* the middle stays */
    assert_true(cham_sequence_cosine(abc, 3, bca, 3) == 0.0);       /* every op moved */

    static seq_t s, t;
    build(&s, 24, false, false);
    /* a tail cut off or a block inserted anywhere: sqrt(n / (n + k)) */
    assert_near(cham_sequence_cosine(s.t, 850, s.t, 900), sqrt(850.0 / 900.0));
    for (size_t at = 0; at <= 900; at += 150) {
        t = s;
        insert_ops(&t, at, 10);
        assert_near(cham_sequence_cosine(s.t, s.n, t.t, t.n), sqrt(900.0 / 910.0));
        t = s;
        remove_ops(&t, at < 890 ? at : 890, 10);
        assert_near(cham_sequence_cosine(s.t, s.n, t.t, t.n), sqrt(890.0 / 900.0));
    }
    /* two separate insertions shift what lies between them */
    t = s;
    insert_ops(&t, 700, 1);
    insert_ops(&t, 100, 1);
    double two = cham_sequence_cosine(s.t, s.n, t.t, t.n);
    assert_true(two < 0.95);
    assert_true(two > 0.0);

    /* never above 1, symmetric */
    build(&t, 72, true, true);
    double c = cham_sequence_cosine(s.t, s.n, t.t, t.n);
    assert_true(c >= 0.0 && c <= 1.0);
    assert_true(c == cham_sequence_cosine(t.t, t.n, s.t, s.n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_proportions),
        cmocka_unit_test(test_identical_steps),
        cmocka_unit_test(test_first_step_compares_with_itself),
        cmocka_unit_test(test_other_knobs),
        cmocka_unit_test(test_three_percent_longer_keeps_stage),
        cmocka_unit_test(test_six_percent_returns_to_warmup),
        cmocka_unit_test(test_length_boundary),
        cmocka_unit_test(test_reordering),
        cmocka_unit_test(test_loss_scale_skip_small_update),
        cmocka_unit_test(test_loss_scale_skip_large_update),
        cmocka_unit_test(test_loss_scale_asymmetry),
        cmocka_unit_test(test_validation_appended),
        cmocka_unit_test(test_run),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_keeps_a_copy),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_cosine_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
