/* Sequence classes (src/runtime/classes.c, issue 19) on synthetic op-token
 * sequences: a step's class by its sequence (the same, or alike by the
 * stage machine's test), a longer sequence a class of its own, the next
 * class predicted from the history of interleaved classes, and the least
 * recently used class forgotten when there are more than the cache keeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/runtime-impl.h"

enum { LEN = 200 };

/* A training step of 200 ops: tokens 0..9 repeated. */
static void train_seq(cham_op_token_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s[i] = (cham_op_token_t)(i % 10);
}

static void silent(const char *line, void *user)
{
    (void)line;
    (void)user;
}

static cham_context_t *open_ctx(uint32_t classes)
{
    cham_config_t c = cham_config_default();
    c.policy_cache = classes;
    cham_context_t *ctx = NULL;
    if (cham_context_new(&c, &ctx) != CHAM_OK)
        fail_msg("context: %s", cham_context_last_error(NULL));
    cham_context_set_log(ctx, silent, NULL);
    return ctx;
}

/* One step of sequence seq: its class, counted and in the history. */
static cham_class_t *see(cham_context_t *ctx, const cham_op_token_t *seq, size_t len)
{
    cham_class_t *c = cham_class_of(ctx, seq, len, seq, len);
    assert_non_null(c);
    cham_class_seen(ctx, c);
    ctx->step++;
    return c;
}

static void test_same_alike_and_longer(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(8);
    cham_op_token_t a[LEN + 40], b[LEN];
    train_seq(a, LEN);
    uint32_t id = see(ctx, a, LEN)->id;
    assert_int_equal(see(ctx, a, LEN)->id, id);              /* the same */
    memcpy(b, a, sizeof b);
    b[100] = 77;                                              /* one op differs: alike */
    assert_int_equal(see(ctx, b, LEN)->id, id);
    train_seq(a, LEN + 40);                                   /* 20% longer: its own */
    cham_class_t *longer = see(ctx, a, LEN + 40);
    assert_true(longer->id != id);
    assert_int_equal(longer->seen, 1);
    assert_int_equal(cham_class_by_id(ctx, id)->seen, 3);
    cham_context_free(ctx);
}

/* Two sequences whose lengths differ by 4.8% of the longer and 5.05% of
 * the shorter are the stage machine's same sequence one way and a change
 * the other (its length change is relative to the step before): they are
 * two classes, seen in either order, not one (Llama 2 8 layers, PP 2,
 * main-grads, an overflow every 4 steps: 104 and 99 ops shared a class,
 * while Algorithm 1 went back to WarmUp after every overflow step and no
 * policy was ever kept). */
static void test_alike_both_ways(void **state)
{
    (void)state;
    for (int shorter_first = 0; shorter_first < 2; shorter_first++) {
        cham_context_t *ctx = open_ctx(8);
        cham_op_token_t a[104];
        train_seq(a, 104);
        uint32_t first = see(ctx, a, shorter_first ? 99 : 104)->id;
        uint32_t second = see(ctx, a, shorter_first ? 104 : 99)->id;
        assert_true(first != second);
        cham_context_free(ctx);
    }
}

/* Three classes, period 5: T T T V U (training, evaluation, an update
 * skipped). From the fourth period on each next class is predicted right,
 * the three training steps told apart by the classes before them (a run
 * of classes decides once it has been followed alike twice). */
static void test_prediction_interleaved(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(8);
    cham_op_token_t t[LEN], v[LEN / 3], u[LEN - 20];
    train_seq(t, LEN);
    train_seq(v, LEN / 3);
    train_seq(u, LEN - 20);
    const cham_op_token_t *seqs[] = {t, v, u};
    const size_t lens[] = {LEN, LEN / 3, LEN - 20};
    const int pattern[] = {0, 0, 0, 1, 2};
    uint32_t ids[3] = {0};
    int right = 0;
    for (int s = 0; s < 40; s++) {
        int k = pattern[s % 5];
        uint32_t context, period;
        cham_class_t *predicted = cham_class_predict(ctx, &context, &period);
        cham_class_t *c = see(ctx, seqs[k], lens[k]);
        if (!ids[k])
            ids[k] = c->id;
        assert_int_equal(c->id, ids[k]);
        if (s >= 15) {
            assert_non_null(predicted);
            assert_int_equal(predicted->id, c->id);
            right++;
        }
    }
    assert_int_equal(right, 25);
    assert_true(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    cham_context_free(ctx);
}

/* Steps 0..n-1 of a loop whose step s is of sequence kind(s) (0: a first
 * step unlike the others, 1: training, 2.. the rarer ones), predicted
 * before each step. Returns how many steps from `from` on were predicted
 * wrong, and in *wrong_by_period how many of those predictions were made
 * from a period. */
static int replay(int n, int from, int (*kind)(int), int *wrong_by_period)
{
    cham_context_t *ctx = open_ctx(8);
    static cham_op_token_t seqs[5][LEN];
    static const size_t lens[5] = {LEN / 4, LEN, LEN / 3, LEN / 2, LEN * 2 / 3};
    for (int k = 0; k < 5; k++)
        for (size_t i = 0; i < lens[k]; i++)
            seqs[k][i] = (cham_op_token_t)(k * 100 + (int)(i % 10));
    uint32_t ids[5] = {0};
    int wrong = 0;
    *wrong_by_period = 0;
    for (int s = 0; s < n; s++) {
        int k = kind(s);
        uint32_t context, period;
        cham_class_t *predicted = cham_class_predict(ctx, &context, &period);
        uint32_t predicted_id = predicted ? predicted->id : 0;
        cham_class_t *c = see(ctx, seqs[k], lens[k]);
        if (!ids[k])
            ids[k] = c->id;
        assert_int_equal(c->id, ids[k]);
        if (s >= from && predicted_id != c->id) {
            wrong++;
            *wrong_by_period += period != 0;
        }
    }
    cham_context_free(ctx);
    return wrong;
}

/* The zoo's LM: a first step of its own, an evaluation every 5th step. */
static int eval_every_5(int s)
{
    return s == 0 ? 0 : s % 5 == 4 ? 2 : 1;
}

/* The zoo's skip loop: an update skipped every 7th step, a validation
 * every 10th. */
static int skip_7_validate_10(int s)
{
    return s == 0 ? 0 : s % 7 == 6 ? 2 : s % 10 == 9 ? 3 : 1;
}

/* A class at irregular steps (a loss-scale overflow now and then). */
static int irregular(int s)
{
    return s == 0 ? 0 : (s == 3 || s == 5 || s == 12 || s == 14 || s == 20 || s == 31) ? 2 : 1;
}

/* A class that recurs every k steps is predicted from its third
 * appearance on (the first two give its period), whatever the context:
 * the evaluation every 5 steps from step 14, and every training step
 * between (the context alone took the run of training steps before an
 * evaluation for the evaluation's beat: wrong at steps 13 and 14). Two
 * periods over one another are each predicted: an update skipped every
 * 7 steps from step 20, a validation every 10 from step 29. */
static void test_prediction_periodic(void **state)
{
    (void)state;
    int by_period;
    assert_int_equal(replay(40, 10, eval_every_5, &by_period), 0);
    assert_int_equal(replay(60, 20, skip_7_validate_10, &by_period), 0);
}

/* A class at irregular steps is taken for periodic once (seen twice, at
 * steps 3 and 5: due at 7), then no longer. */
static void test_prediction_irregular(void **state)
{
    (void)state;
    int by_period;
    replay(40, 1, irregular, &by_period);
    assert_int_equal(by_period, 1);
}

/* The context and the most frequent class as good as each other so far:
 * the context decides (the rules the tests below are about). */
static void level_the_scores(cham_context_t *ctx)
{
    ctx->context_hits = ctx->frequent_hits = 0;
}

/* A one-off change: the most frequent successor wins over the latest. */
static void test_prediction_votes(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(8);
    cham_op_token_t t[LEN], v[LEN / 3];
    train_seq(t, LEN);
    train_seq(v, LEN / 3);
    for (int s = 0; s < 10; s++)
        see(ctx, t, LEN);
    cham_class_t *once = see(ctx, v, LEN / 3);
    uint32_t context = 7, period = 7;
    level_the_scores(ctx);
    assert_null(cham_class_predict(ctx, &context, &period));          /* never followed before */
    cham_class_t *train = see(ctx, t, LEN);
    level_the_scores(ctx);
    cham_class_t *next = cham_class_predict(ctx, &context, &period);
    assert_non_null(next);
    assert_int_equal(next->id, train->id);                    /* 9 votes against 1 */
    assert_true(once->id != train->id);
    cham_context_free(ctx);
}

/* Four classes through a cache of three: the least recently used goes,
 * and the history no longer predicts it. */
static void test_eviction(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(3);
    cham_op_token_t s[4][LEN];
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < LEN; i++)
            s[k][i] = (cham_op_token_t)(k * 100 + (int)(i % 7));
    uint32_t first = see(ctx, s[0], LEN)->id;
    see(ctx, s[1], LEN);
    see(ctx, s[2], LEN);
    see(ctx, s[1], LEN);
    see(ctx, s[2], LEN);
    assert_int_equal(ctx->n_classes, 3);
    uint32_t fourth = see(ctx, s[3], LEN)->id;
    assert_int_equal(ctx->n_classes, 3);
    assert_null(cham_class_by_id(ctx, first));               /* the least recently used */
    assert_non_null(cham_class_by_id(ctx, fourth));
    cham_class_t *again = see(ctx, s[0], LEN);                /* back: a new class */
    assert_true(again->id != first);
    assert_int_equal(again->seen, 1);
    cham_context_free(ctx);
}

/* A longer run of classes followed by a class once is chance: it does not
 * decide, a shorter run seen more often does. Training steps T with a
 * rarer step R at irregular steps (2 and 11, so R is periodic with period
 * 9 and not due at step 15) and one step of a one-off class O at step 6:
 * T T R T T T O T T T T R T T T. The last six classes (T T R T T T) were
 * seen once before (steps 0-5), followed by O; the last two (T T) were
 * followed by T four times, by O once (R's votes are its beat). The next
 * class is T, from the run of two; a run followed once would predict O. */
static void test_prediction_longer_run_once(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(8);
    static cham_op_token_t seqs[3][LEN];
    static const size_t lens[3] = {LEN, LEN / 3, LEN / 2};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < lens[k]; i++)
            seqs[k][i] = (cham_op_token_t)(k * 100 + (int)(i % 10));
    const char *history = "TTRTTTOTTTTRTTT";
    uint32_t ids[3] = {0};
    for (const char *h = history; *h; h++) {
        int k = *h == 'T' ? 0 : *h == 'R' ? 1 : 2;
        cham_class_t *c = see(ctx, seqs[k], lens[k]);
        if (!ids[k])
            ids[k] = c->id;
        assert_int_equal(c->id, ids[k]);
    }
    uint32_t context = 0, period = 7;
    level_the_scores(ctx);
    cham_class_t *next = cham_class_predict(ctx, &context, &period);
    assert_non_null(next);
    assert_int_equal(next->id, ids[0]);          /* T, not the one-off O */
    assert_int_equal(context, 2);
    assert_int_equal(period, 0);
    cham_class_t *t = see(ctx, seqs[0], lens[0]);    /* and T it is */
    assert_int_equal(t->id, ids[0]);
    cham_context_free(ctx);
}

/* Classes at random (layers skipped at random): T in 60% of the steps, A
 * in 25%, B in 15%, from a seeded draw. A run of classes followed alike
 * twice is chance there, and the context predicts worse than the most
 * frequent class; the prediction then is the most frequent class, and
 * over steps 20-79 it is wrong no more often than always predicting T
 * (14 of 60; the context alone: 17). */
static int at_random(int s)
{
    uint64_t z = (uint64_t)s * UINT64_C(0x9e3779b97f4a7c15) + 12345;
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    double u = (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    return s == 0 ? 0 : u < 0.6 ? 1 : u < 0.85 ? 2 : 3;
}

static void test_prediction_at_random(void **state)
{
    (void)state;
    int by_period, always_t = 0;
    for (int s = 20; s < 80; s++)
        always_t += at_random(s) != 1;
    int wrong = replay(80, 20, at_random, &by_period);
    if (wrong > always_t)
        fail_msg("%d wrong of 60, always the most frequent: %d", wrong, always_t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_alike_and_longer),
        cmocka_unit_test(test_alike_both_ways),
        cmocka_unit_test(test_prediction_interleaved),
        cmocka_unit_test(test_prediction_votes),
        cmocka_unit_test(test_prediction_periodic),
        cmocka_unit_test(test_prediction_irregular),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_prediction_longer_run_once),
        cmocka_unit_test(test_prediction_at_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
