/* Canonical op sequences (src/profile/canon.c) and what the stage machine
 * and the sequence classes make of them: a step that skips layers at
 * random (stochastic depth) runs another op sequence than the one before
 * but the same canonical one, and is the same step to the loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/runtime.h"
#include "profile/stage.h"
#include "runtime/runtime-impl.h"

enum { EMBED, NORM, ATTN, MLP, HEAD, LOSS, ATTN_BWD, MLP_BWD, NORM_BWD, EMBED_BWD, ADAM, MAX_OPS = 1024 };

/* A step's ops and each op's block (-1: none). */
typedef struct step {
    cham_op_token_t t[MAX_OPS];
    int32_t block[MAX_OPS];
    size_t n;
} step_t;

static void put(step_t *s, cham_op_token_t tok, int32_t block)
{
    assert_true(s->n < MAX_OPS);
    s->t[s->n] = tok;
    s->block[s->n++] = block;
}

/* A training step over the layers whose bit in `kept` is set (of
 * `layers`): embedding, each kept layer's norm, attention and MLP as its
 * block, the head and loss; the backward in reverse; one Adam op a layer
 * (the update runs for all, as an optimizer over every parameter does). */
static void build(step_t *s, int layers, uint64_t kept)
{
    s->n = 0;
    put(s, EMBED, -1);
    for (int l = 0; l < layers; l++)
        if (kept >> l & 1) {
            put(s, NORM, l);
            put(s, ATTN, l);
            put(s, MLP, l);
        }
    put(s, HEAD, -1);
    put(s, LOSS, -1);
    for (int l = layers; l-- > 0;)
        if (kept >> l & 1) {
            put(s, MLP_BWD, l);
            put(s, ATTN_BWD, l);
            put(s, NORM_BWD, l);
        }
    put(s, EMBED_BWD, -1);
    for (int l = 0; l < layers; l++)
        put(s, ADAM, l);
}

static size_t canonical(const step_t *s, cham_op_token_t *out)
{
    return cham_sequence_canonical(s->t, s->block, s->n, out);
}

/* Consecutive blocks that run the same ops are written once; what runs
 * outside blocks and blocks that differ stay. */
static void test_repeated_blocks_written_once(void **state)
{
    (void)state;
    step_t s;
    build(&s, 8, 0xff);
    cham_op_token_t c[MAX_OPS];
    size_t n = canonical(&s, c);
    const cham_op_token_t want[] = {EMBED, NORM, ATTN, MLP, HEAD, LOSS, MLP_BWD, ATTN_BWD,
                                    NORM_BWD, EMBED_BWD, ADAM};
    assert_int_equal(n, sizeof want / sizeof want[0]);
    assert_memory_equal(c, want, sizeof want);

    /* A block that differs (an extra op in layer 3) is its own run: the
     * blocks after it are written once more. */
    step_t d = {.n = 0};
    for (size_t i = 0; i < s.n; i++) {
        put(&d, s.t[i], s.block[i]);
        if (s.t[i] == ATTN && s.block[i] == 3)
            put(&d, LOSS, 3);
    }
    n = canonical(&d, c);
    const cham_op_token_t want_d[] = {EMBED, NORM, ATTN, MLP, NORM, ATTN, LOSS, MLP, NORM,
                                      ATTN, MLP, HEAD, LOSS, MLP_BWD, ATTN_BWD, NORM_BWD,
                                      EMBED_BWD, ADAM};
    assert_int_equal(n, sizeof want_d / sizeof want_d[0]);
    assert_memory_equal(c, want_d, sizeof want_d);

    /* An op outside any block between two blocks alike keeps both. */
    step_t e = {.n = 0};
    put(&e, NORM, 0);
    put(&e, EMBED, -1);
    put(&e, NORM, 1);
    assert_int_equal(canonical(&e, c), 3);

    /* Without blocks the sequence is its own canonical one. */
    for (size_t i = 0; i < s.n; i++)
        s.block[i] = -1;
    assert_int_equal(canonical(&s, c), s.n);
    assert_memory_equal(c, s.t, s.n * sizeof *c);
    assert_int_equal(cham_sequence_canonical(NULL, NULL, 0, NULL), 0);
}

/* Steps that skip different layers have the same canonical sequence;
 * one whose ops differ (an evaluation: the forward alone) does not. */
static void test_skipped_layers_same_canonical(void **state)
{
    (void)state;
    step_t a, b, eval;
    build(&a, 16, 0xffff);
    build(&b, 16, 0x5a3f);    /* 6 of 16 layers skipped */
    cham_op_token_t ca[MAX_OPS], cb[MAX_OPS], ce[MAX_OPS];
    size_t na = canonical(&a, ca), nb = canonical(&b, cb);
    assert_true(a.n != b.n);
    assert_int_equal(na, nb);
    assert_memory_equal(ca, cb, na * sizeof *ca);

    build(&eval, 16, 0xffff);
    eval.n = 1 + 3 * 16 + 2;    /* the forward alone */
    size_t ne = canonical(&eval, ce);
    assert_true(ne != na || memcmp(ce, ca, na * sizeof *ca) != 0);
}

static cham_stage_t step_machine(cham_stage_machine_t *sm, const step_t *s)
{
    cham_op_token_t c[MAX_OPS];
    size_t n = canonical(s, c);
    bool ok = false;
    cham_stage_t st = cham_stage_machine_step(sm, s->t, s->n, c, n, &ok);
    assert_true(ok);
    return st;
}

/* Algorithm 1 counts a step whose sequence is 30% shorter as a change
 * (WarmUp again), unless its canonical sequence is the step before's:
 * then the stage goes on to Stable as for identical steps. */
static void test_stage_machine_sees_one_loop(void **state)
{
    (void)state;
    static const uint64_t kept[] = {0xffff, 0x5a3f, 0xfff0, 0x0fff, 0xbeef, 0xffff, 0x7777};
    step_t s;
    cham_stage_machine_t sm;
    cham_stage_machine_init(&sm, 1, 2, 0.05, 0.95);
    cham_stage_t st = CHAM_STAGE_WARMUP;
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        build(&s, 16, kept[i]);
        st = step_machine(&sm, &s);
    }
    assert_int_equal(st, CHAM_STAGE_STABLE);
    assert_true(sm.last_length_change > 0.05);    /* by its sequence, a change */

    /* The evaluation's forward is another canonical sequence: WarmUp. */
    build(&s, 16, 0xffff);
    s.n = 1 + 3 * 16 + 2;
    assert_int_equal(step_machine(&sm, &s), CHAM_STAGE_WARMUP);

    /* Without canonical sequences (none given), the paper's test alone. */
    cham_stage_machine_t paper;
    cham_stage_machine_init(&paper, 1, 2, 0.05, 0.95);
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        build(&s, 16, kept[i]);
        bool ok = false;
        st = cham_stage_machine_step(&paper, s.t, s.n, NULL, 0, &ok);
    }
    assert_int_equal(st, CHAM_STAGE_WARMUP);
    cham_stage_machine_free(&sm);
    cham_stage_machine_free(&paper);
}

static void silent(const char *line, void *user)
{
    (void)line;
    (void)user;
}

/* A class holds the steps of its canonical sequence, and knows its steps
 * vary once one of another sequence came; a step of another canonical
 * sequence is another class. */
static void test_class_of_canonical(void **state)
{
    (void)state;
    cham_config_t cfg = cham_config_default();
    cham_context_t *ctx = NULL;
    assert_int_equal(cham_context_new(&cfg, &ctx), CHAM_OK);
    cham_context_set_log(ctx, silent, NULL);
    step_t a, b, eval;
    cham_op_token_t ca[MAX_OPS], cb[MAX_OPS], ce[MAX_OPS];
    build(&a, 16, 0xffff);
    build(&b, 16, 0x5a3f);
    build(&eval, 16, 0xffff);
    eval.n = 1 + 3 * 16 + 2;
    size_t na = canonical(&a, ca), nb = canonical(&b, cb), ne = canonical(&eval, ce);

    cham_class_t *c = cham_class_of(ctx, a.t, a.n, ca, na);
    assert_non_null(c);
    uint32_t id = c->id;
    assert_false(c->varies);
    assert_int_equal(cham_class_of(ctx, a.t, a.n, ca, na)->id, id);
    assert_false(c->varies);                     /* the same sequence */
    c = cham_class_of(ctx, b.t, b.n, cb, nb);
    assert_int_equal(c->id, id);
    assert_true(c->varies);                      /* another, the same canonical one */
    assert_true(cham_class_of(ctx, eval.t, eval.n, ce, ne)->id != id);
    cham_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeated_blocks_written_once),
        cmocka_unit_test(test_skipped_layers_same_canonical),
        cmocka_unit_test(test_stage_machine_sees_one_loop),
        cmocka_unit_test(test_class_of_canonical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
