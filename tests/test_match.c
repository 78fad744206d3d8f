/* Multi-feature fuzzy matching (src/match/match.h) called directly: a
 * running step's uses against the index built from a hand-made profile
 * and policy. A use whose strict key the profile knew (the key of an
 * item's out use) is judged by that key only; a use the profile never saw
 * strictly falls back to the loose key. A wrong match costs time, not bytes (the wrong tensor is swapped,
 * the planned one stays), so bit-exact runs cannot see it: these can. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "match/match.h"
#include "policy/policy-impl.h"
#include "profile/profile-impl.h"

enum { TOK_G, TOK_F, TOK_B, N_TOKENS };
#define BYTES UINT64_C(1048576)

typedef struct op_spec {
    int token;
    uint64_t storage;            /* 0: none */
    bool output;
} op_spec_t;

/* A profile of one use per op, every tensor 1 MiB of f16, ops in the
 * forward; or every tensor model state, and the ops of b in the backward,
 * those of g in the optimizer phase. */
static cham_profile_t *profile_with(const op_spec_t *ops, size_t n, bool persistent)
{
    cham_profile_t *p = cham_profile_new(1, 0);
    assert_non_null(p);
    const char *names[N_TOKENS] = {"g", "f", "b"};
    assert_true(cham_profile_set_tokens(p, names, N_TOKENS));
    for (size_t k = 0; k < n; k++) {
        cham_phase_t phase = !persistent || ops[k].token == TOK_F ? CHAM_PHASE_FORWARD
                             : ops[k].token == TOK_B            ? CHAM_PHASE_BACKWARD
                                                                : CHAM_PHASE_OPTIMIZER;
        assert_true(cham_profile_begin_op(p, ops[k].token, phase, -1, 0));
        cham_tensor_use_t u = {.storage = ops[k].storage, .data_ptr = 0x1000 * ops[k].storage,
                               .bytes = BYTES, .storage_bytes = BYTES,
                               .dtype = CHAM_DTYPE_F16, .output = ops[k].output,
                               .persistent = persistent};
        assert_true(cham_profile_add_use(p, &u));
        cham_profile_end_op(p, 0);
    }
    cham_profile_set_duration(p, n * 1000);
    return p;
}

/* The same, no tensor model state. */
static cham_profile_t *profile_of(const op_spec_t *ops, size_t n)
{
    return profile_with(ops, n, false);
}

/* A policy item: storage swapped out after op out, back for op use. */
static void add_item(cham_policy_t *pol, uint64_t storage, uint32_t out, uint32_t use)
{
    cham_policy_item_t it = {.storage = storage, .bytes = BYTES, .swap_out_op = out,
                             .swap_out_done_op = out, .free_op = out + 1,
                             .swap_in_op = use, .use_op = use};
    assert_true(cham_policy_add_item(pol, &it));
}

/* A policy of one item. */
static cham_policy_t *one_item(uint64_t storage, uint32_t out, uint32_t use)
{
    cham_policy_t *pol = cham_policy_new("test");
    assert_non_null(pol);
    add_item(pol, storage, out, use);
    return pol;
}

/* A tensor of the running step, as the runtime tracks it. */
static cham_features_t fresh(void)
{
    return (cham_features_t){.bytes = BYTES, .dtype = CHAM_DTYPE_F16};
}

/* A use by token of storage id whose features are f: the item matched. */
static uint32_t use_of(cham_match_t *m, cham_features_t *f, int token, uint64_t id)
{
    cham_features_advance(f, token, cham_match_tag_bit(m, token));
    return cham_match_use(m, f, token, id);
}

/* The same for a storage made this step. */
static uint32_t use(cham_match_t *m, cham_features_t *f, int token)
{
    return use_of(m, f, token, CHAM_MATCH_NEW);
}

/* The index holds the keys of the items' out uses; a use's rank counts
 * every use of the profile with its key.
 *
 * The profile: op 0 (g) writes A, op 1 (f) reads A, which goes to the host
 * after it (item 0), op 2 (f) writes C, op 3 (f) writes E, which goes to
 * the host after it (item 1); ops 4 and 5 (b) read A and E back. C's and
 * E's first uses (by f) share a strict key: C is its rank 0 (no item), E
 * its rank 1 (item 1). A's out use, C's and E's share the loose key
 * (bytes, dtype, op f): A is loose rank 0.
 *
 * The running step first writes a new tensor X with f, as C was written:
 * its strict key is one the profile knew (E's), at a rank with no item, so
 * it gets nothing, though its loose rank 0 is A's item. Then A is written
 * and read and gets its item, and Y, written with f, gets E's (strict rank
 * 1). Falling back to the loose key would give A's item to X, and A would
 * stay on the device. */
static void test_strict_key_known_no_loose_fallback(void **state)
{
    (void)state;
    const op_spec_t ops[] = {{TOK_G, 1, true}, {TOK_F, 1, false}, {TOK_F, 3, true},
                             {TOK_F, 4, true}, {TOK_B, 1, false}, {TOK_B, 4, false}};
    cham_profile_t *prof = profile_of(ops, 6);
    cham_policy_t *pol = one_item(1, 1, 4);
    add_item(pol, 4, 3, 5);
    cham_match_t m;
    assert_true(cham_match_build(&m, pol, prof));
    for (int step = 0; step < 2; step++) {       /* the same every step */
        cham_match_step_start(&m);
        cham_features_t x = fresh(), a = fresh(), y = fresh();
        assert_int_equal(use(&m, &x, TOK_F), CHAM_MATCH_NONE);      /* X: not A's item */
        assert_int_equal(use(&m, &a, TOK_G), CHAM_MATCH_NONE);
        assert_int_equal(use(&m, &a, TOK_F), 0);                     /* A: its item */
        assert_int_equal(use(&m, &y, TOK_F), 1);                     /* Y: E's */
        assert_int_equal(m.hits_strict, 2);
        assert_int_equal(m.hits_loose, 0);
        assert_int_equal(use(&m, &a, TOK_B), CHAM_MATCH_NONE);
        assert_int_equal(use(&m, &y, TOK_B), CHAM_MATCH_NONE);
    }
    cham_match_free(&m);
    cham_policy_free(pol);
    cham_profile_free(prof);
}

/* The fallback itself: when A was also read by an extra op the profile
 * never had (op b before its out use), its history differs, its strict
 * key is one the profile never saw, and the loose key (bytes, dtype, op f)
 * still finds its item. */
static void test_unknown_strict_key_falls_back_to_loose(void **state)
{
    (void)state;
    const op_spec_t ops[] = {{TOK_G, 1, true}, {TOK_F, 1, false}, {TOK_F, 3, true},
                             {TOK_B, 1, false}};
    cham_profile_t *prof = profile_of(ops, 4);
    cham_policy_t *pol = one_item(1, 1, 3);
    cham_match_t m;
    assert_true(cham_match_build(&m, pol, prof));
    cham_match_step_start(&m);
    cham_features_t a = fresh();
    assert_int_equal(use(&m, &a, TOK_G), CHAM_MATCH_NONE);
    assert_int_equal(use(&m, &a, TOK_B), CHAM_MATCH_NONE);           /* the extra read */
    assert_int_equal(use(&m, &a, TOK_F), 0);
    assert_int_equal(m.hits_loose, 1);
    assert_int_equal(m.hits_strict, 0);
    cham_features_t c = fresh();                 /* C: loose rank 1, no item */
    assert_int_equal(use(&m, &c, TOK_F), CHAM_MATCH_NONE);
    cham_match_free(&m);
    cham_policy_free(pol);
    cham_profile_free(prof);
}

/* Two tensors alike in every feature (the same activation of two layers)
 * are told apart by rank: the item of the second goes to the second, and
 * an item matches at most once a step. */
static void test_look_alikes_by_rank(void **state)
{
    (void)state;
    const op_spec_t ops[] = {{TOK_F, 1, true}, {TOK_F, 2, true}, {TOK_B, 2, false},
                             {TOK_B, 1, false}};
    cham_profile_t *prof = profile_of(ops, 4);
    cham_policy_t *pol = one_item(2, 1, 2);
    cham_match_t m;
    assert_true(cham_match_build(&m, pol, prof));
    cham_match_step_start(&m);
    cham_features_t t1 = fresh(), t2 = fresh(), t3 = fresh();
    assert_int_equal(use(&m, &t1, TOK_F), CHAM_MATCH_NONE);
    assert_int_equal(use(&m, &t2, TOK_F), 0);
    assert_int_equal(use(&m, &t3, TOK_F), CHAM_MATCH_NONE);          /* a third: nothing */
    cham_match_step_start(&m);                   /* a new step counts from 0 again */
    t1 = fresh(), t2 = fresh();
    assert_int_equal(use(&m, &t1, TOK_F), CHAM_MATCH_NONE);
    assert_int_equal(use(&m, &t2, TOK_F), 0);
    cham_match_free(&m);
    cham_policy_free(pol);
    cham_profile_free(prof);
}

/* Three look-alikes, each written by g and last read by f (items 0-2).
 * In the running step the second is also read by an extra op b first: its
 * strict key is unknown and the loose key finds its item. The third then
 * keeps its own item: the loose match took the second's strict rank too.
 * Without that the third took rank 1, the second's item, already matched
 * (nothing), and in a whole step every look-alike after an extra read took
 * the item of the one before it, swapped in one layer late. */
static void test_loose_match_keeps_the_ranks_after_it(void **state)
{
    (void)state;
    const op_spec_t ops[] = {{TOK_G, 1, true}, {TOK_F, 1, false}, {TOK_G, 2, true},
                             {TOK_F, 2, false}, {TOK_G, 3, true}, {TOK_F, 3, false},
                             {TOK_B, 3, false}, {TOK_B, 2, false}, {TOK_B, 1, false}};
    cham_profile_t *prof = profile_of(ops, 9);
    cham_policy_t *pol = one_item(1, 1, 8);
    add_item(pol, 2, 3, 7);
    add_item(pol, 3, 5, 6);
    cham_match_t m;
    assert_true(cham_match_build(&m, pol, prof));
    for (int step = 0; step < 2; step++) {
        cham_match_step_start(&m);
        cham_features_t t[3] = {fresh(), fresh(), fresh()};
        for (uint32_t i = 0; i < 3; i++) {
            assert_int_equal(use(&m, &t[i], TOK_G), CHAM_MATCH_NONE);
            if (i == 1 && step == 1)
                assert_int_equal(use(&m, &t[i], TOK_B), CHAM_MATCH_NONE);   /* extra */
            assert_int_equal(use(&m, &t[i], TOK_F), i);
        }
        assert_int_equal(m.hits_loose, step == 1);
        assert_int_equal(m.hits_strict, step == 1 ? 2 : 3);
    }
    cham_match_free(&m);
    cham_policy_free(pol);
    cham_profile_free(prof);
}

/* Model state back for the optimizer is matched by storage id, never by
 * rank. Three look-alike weights W1-W3 (storages 11-13, persistent), read
 * by f in the forward, by b in the backward (in reverse) and by g in the
 * optimizer phase; W3 goes away after its backward read (item 0, back for
 * its g), W2 too (item 1). A step that skips layer 3 reads W2 in the
 * backward at the rank of W3's read: W2 gets its own item, not W3's (which
 * stays unmatched). A step that skips layer 2 reads W1 at W2's rank: W1
 * gets nothing (the profile planned it resident), and W2's item stays
 * unmatched. Matched by rank, W2 took W3's item and went away when W3 was
 * to come back, so W2 came back on demand at its update, and W1 went away
 * though planned resident (GPT-2 24x1600 with layer drop: on-demand
 * swap-ins of weights in 38 of 40 steps). */
static void test_model_state_by_id_not_rank(void **state)
{
    (void)state;
    const op_spec_t ops[] = {{TOK_F, 11, false}, {TOK_F, 12, false}, {TOK_F, 13, false},
                             {TOK_B, 13, false}, {TOK_B, 12, false}, {TOK_B, 11, false},
                             {TOK_G, 11, true},  {TOK_G, 12, true},  {TOK_G, 13, true}};
    cham_profile_t *prof = profile_with(ops, 9, true);
    cham_policy_t *pol = one_item(13, 3, 8);
    add_item(pol, 12, 4, 7);
    cham_match_t m;
    assert_true(cham_match_build(&m, pol, prof));
    const uint64_t skips[] = {0, 12, 13};        /* none, layer 2's, layer 3's */
    for (size_t k = 0; k < sizeof skips / sizeof skips[0]; k++) {
        uint64_t skipped = skips[k];
        cham_match_step_start(&m);
        cham_features_t w[3] = {fresh(), fresh(), fresh()};
        for (uint64_t id = 11; id <= 13; id++)
            if (id != skipped)
                assert_int_equal(use_of(&m, &w[id - 11], TOK_F, id), CHAM_MATCH_NONE);
        for (uint64_t id = 13; id >= 11; id--) {
            uint32_t want = id == 13 ? 0 : id == 12 ? 1 : CHAM_MATCH_NONE;
            if (id != skipped)
                assert_int_equal(use_of(&m, &w[id - 11], TOK_B, id), want);
        }
        for (uint64_t id = 11; id <= 13; id++)
            assert_int_equal(use_of(&m, &w[id - 11], TOK_G, id), CHAM_MATCH_NONE);
        assert_int_equal(m.hits_strict, skipped == 12 || skipped == 13 ? 1 : 2);
        assert_int_equal(m.matched[0], skipped != 13);
        assert_int_equal(m.matched[1], skipped != 12);
    }
    /* Nor does a storage new this step with W3's features take its item. */
    cham_match_step_start(&m);
    cham_features_t n = fresh();
    assert_int_equal(use(&m, &n, TOK_F), CHAM_MATCH_NONE);
    assert_int_equal(use(&m, &n, TOK_B), CHAM_MATCH_NONE);
    cham_match_free(&m);
    cham_policy_free(pol);
    cham_profile_free(prof);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strict_key_known_no_loose_fallback),
        cmocka_unit_test(test_unknown_strict_key_falls_back_to_loose),
        cmocka_unit_test(test_look_alikes_by_rank),
        cmocka_unit_test(test_loose_match_keeps_the_ranks_after_it),
        cmocka_unit_test(test_model_state_by_id_not_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
