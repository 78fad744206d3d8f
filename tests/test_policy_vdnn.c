/* The vDNN baseline planner (src/policy/vdnn/vdnn.c, docs/policy.md "vDNN
 * baseline") on a hand-built profile whose answers are worked out in the
 * comments: which tensors become items, their ops, the serialized
 * swap-out completions, the layer-boundary and prefetch stalls, the
 * predicted peak from the rebuilt curve (the profile holds swaps of an
 * earlier policy), the same policy whatever the capacity, the JSON round
 * trip, the default layer rule and bad inputs; then a property test over
 * random profiles (fixed seeds) against an oracle that reads the uses
 * and the memory samples the test put into the profile directly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/files.h"
#include "support/rng.h"

#include "chameleon/policy.h"
#include "profile/profile-impl.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define SEC UINT64_C(1000000000)

static char tmpdir[512];

static int group_setup(void **state)
{
    (void)state;
    return test_tmpdir_make(tmpdir, sizeof tmpdir, "cham-test-vdnn");
}

static int group_teardown(void **state)
{
    (void)state;
    return test_tmpdir_remove(tmpdir);
}

/* ---- the hand-built profile --------------------------------------------- */

/* 18 ops of 1 s: 9 forward, 9 backward. With 3 forward and 3 backward
 * logical layers of 3 ops (3 s each):
 *   L0 = ops 0-2, L1 = 3-5, L2 = 6-8 (forward), L3 = 9-11, L4 = 12-14,
 *   L5 = 15-17 (backward).
 * Storages (f = last forward use, u = first backward use):
 *   A  1  300 MiB  written by op 0 (f 0, L0), u 16 (L5): item, free 3 (L1),
 *                  back before op 12 (L4)
 *   B  2  200 MiB  written by op 0 (f 0, L0), u 13 (L4): item, free 3, back
 *                  before op 9 (L3)
 *   C  3  100 MiB  written by op 3, read by op 4 (f 4, L1), u 10 (L3): free
 *                  6 = swap-in 6 (L2): nothing to gain, not an item
 *   D  4  150 MiB  written by op 6, read by op 7 (f 7, L2), u 9 (L3): the
 *                  layer before L3 is f's own: not an item
 *   E  5  512 KiB  written by op 1, u 17: below min_swap_bytes (1 MiB)
 *   F  6   50 MiB  written by op 2, read by op 5 (f 5, L1), u 15 (L5): item,
 *                  free 6 (L2), back before op 12 (L4)
 *   G  7   64 MiB  written by op 1, read by op 2, never again: not idle
 *   H  8   80 MiB  a gradient, written by op 10, read by op 12: not idle
 * Items in swap-out order: A, B (op 0, by storage), F (op 5). */
static const char PH[] = "FFFFFFFFFBBBBBBBBB";

typedef struct use_spec {
    int op;
    uint64_t storage, bytes;
    bool output;
} use_spec_t;

static const use_spec_t USES[] = {
    {0, 1, 300 * MiB, true}, {0, 2, 200 * MiB, true}, {1, 5, 512 * KiB, true},
    {1, 7, 64 * MiB, true},  {2, 7, 64 * MiB, false}, {2, 6, 50 * MiB, true},
    {3, 3, 100 * MiB, true}, {4, 3, 100 * MiB, false}, {5, 6, 50 * MiB, false},
    {6, 4, 150 * MiB, true}, {7, 4, 150 * MiB, false}, {9, 4, 150 * MiB, false},
    {10, 3, 100 * MiB, false}, {10, 8, 80 * MiB, true}, {12, 8, 80 * MiB, false},
    {13, 2, 200 * MiB, false}, {15, 6, 50 * MiB, false}, {16, 1, 300 * MiB, false},
    {17, 5, 512 * KiB, false},
};

/* The curve without swaps (MiB), samples 2k (op k's begin) and 2k + 1 (its
 * end): 100 MiB of weights, then the tensors as they are written and freed
 * after their backward use. Peak 900 MiB at samples 13-18. */
static const uint64_t CURVE[36] = {
    100, 600, 600, 664, 664, 650, 650, 750, 750, 750, 750, 750,   /* ops 0-5 */
    750, 900, 900, 900, 900, 900,                                 /* ops 6-8 */
    900, 750, 750, 730, 730, 730, 730, 650, 650, 450, 450, 450,   /* ops 9-14 */
    450, 400, 400, 100, 100, 100,                                 /* ops 15-17 */
};

/* The profile as measured under an earlier policy that swapped A out at
 * sample 6 and back at sample 24: measured memory is 300 MiB lower over
 * [6, 24), and the planner must plan against CURVE, rebuilt. Capacity
 * 4 GiB. */
static cham_profile_t *hand_profile(void)
{
    cham_profile_t *p = cham_profile_new(1, 4 * GiB);
    assert_non_null(p);
    const char *names[] = {"op"};
    assert_true(cham_profile_set_tokens(p, names, 1));
    size_t n = strlen(PH), u = 0, n_uses = sizeof USES / sizeof USES[0];
    for (size_t k = 0; k < n; k++) {
        uint64_t mem[2];
        for (int e = 0; e < 2; e++) {
            size_t s = 2 * k + (size_t)e;
            mem[e] = (CURVE[s] - (s >= 6 && s < 24 ? 300 : 0)) * MiB;
        }
        if (k == 3)
            assert_true(cham_profile_add_swap(
                p, &(cham_profile_swap_t){.kind = CHAM_SWAP_OUT, .storage = 1,
                                          .bytes = 300 * MiB, .sample = 6}));
        if (k == 12)
            assert_true(cham_profile_add_swap(
                p, &(cham_profile_swap_t){.kind = CHAM_SWAP_IN, .storage = 1,
                                          .bytes = 300 * MiB, .sample = 24}));
        cham_phase_t ph = PH[k] == 'F' ? CHAM_PHASE_FORWARD : CHAM_PHASE_BACKWARD;
        assert_true(cham_profile_begin_op(p, 0, ph, -1, mem[0]));
        for (; u < n_uses && USES[u].op == (int)k; u++) {
            cham_tensor_use_t x = {.storage = USES[u].storage,
                                   .data_ptr = 0x100000 * USES[u].storage,
                                   .bytes = USES[u].bytes,
                                   .storage_bytes = USES[u].bytes,
                                   .dtype = CHAM_DTYPE_F16,
                                   .use_count = (uint32_t)k,
                                   .output = USES[u].output};
            assert_true(cham_profile_add_use(p, &x));
        }
        cham_profile_end_op(p, mem[1]);
    }
    assert_int_equal(u, n_uses);
    cham_profile_set_duration(p, n * SEC);
    return p;
}

/* 3 + 3 logical layers, no reserve, bandwidths in MiB/s. */
static cham_planner_config_t hand_config(double h2d_mib, double d2h_mib)
{
    cham_planner_config_t c = cham_planner_config_default();
    c.forward_layers = 3;
    c.backward_layers = 3;
    c.reserve = 0;
    c.h2d_bandwidth = h2d_mib * (double)MiB;
    c.d2h_bandwidth = d2h_mib * (double)MiB;
    return c;
}

static cham_policy_t *plan_ok(const cham_profile_t *p, const cham_planner_config_t *c,
                              cham_policy_view_t *v)
{
    cham_policy_t *pol = NULL;
    char err[512] = "";
    cham_status_t st = cham_plan_vdnn(p, c, &pol, err, sizeof err);
    if (st != CHAM_OK)
        fail_msg("vdnn plan failed: %s", err);
    cham_policy_get(pol, v);
    return pol;
}

/* The container's invariants (policy-impl.h), checked here directly. */
static void assert_invariants(const cham_policy_view_t *v)
{
    uint32_t next = 0;
    for (size_t k = 0; k < v->n_layers; k++) {
        assert_int_equal(v->layers[k].start_op, next);
        assert_true(v->layers[k].n_ops > 0);
        next += v->layers[k].n_ops;
    }
    assert_int_equal(next, v->n_ops);
    for (size_t i = 0; i < v->n_items; i++) {
        const cham_policy_item_t *it = &v->items[i];
        if (i)
            assert_true(v->items[i - 1].swap_out_op <= it->swap_out_op);
        assert_true(it->swap_out_op < it->free_op);
        assert_true(it->free_op <= it->swap_in_op);
        assert_true(it->swap_in_op <= it->use_op);
        assert_true(it->swap_out_op <= it->swap_out_done_op);
        assert_true(it->swap_out_done_op < it->free_op);
        assert_true(it->use_op < v->n_ops);
        assert_true(it->swap_in_layer < v->n_layers);
        assert_int_equal(v->layers[it->swap_in_layer].start_op, it->swap_in_op);
        assert_true(it->score == 0);
    }
}

/* d2h 400 MiB/s, h2d 200 MiB/s: nothing waits.
 * Swap-outs of L0, serialized from the end of op 0 (1 s): A takes 0.75 s,
 * done at 1.75 s, during op 1; B 0.5 s after it, done at 2.25 s, during op
 * 2 (unserialized it would be op 1). L0 offloads 1.25 s < 3 s: no wait. F
 * (0.125 s from the end of op 5, L1's last op) completes in the boundary
 * wait: op 5. Prefetches: L3 B 1 s, L4 A 1.5 s + F 0.25 s, within 3 s.
 * Predicted peak (MiB): out over [2 free, 2 in): A [6, 24), B [6, 18),
 * F [12, 24): samples 6-11 lose 500 (250 at most), 12-17 lose 550 (350),
 * 18-23 lose 350 (550); sample 24 (op 12's begin, all back) is 730. */
static void test_hand_items(void **state)
{
    (void)state;
    cham_profile_t *p = hand_profile();
    cham_planner_config_t c = hand_config(200, 400);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_string_equal(v.planner, "vdnn");
    assert_invariants(&v);
    assert_int_equal(v.n_layers, 6);
    assert_int_equal(v.n_ops, 18);
    for (size_t k = 0; k < 6; k++) {
        assert_int_equal(v.layers[k].start_op, 3 * k);
        assert_int_equal(v.layers[k].time_ns, 3 * SEC);
    }

    /* (1) every idle tensor of at least min_swap_bytes, with something to
     * gain, is an item; E (512 KiB), G, H, C and D are not. */
    assert_int_equal(v.n_items, 3);
    static const struct {
        uint64_t storage, bytes;
        uint32_t out, done, free, in_layer, in, use;
    } want[] = {
        {1, 300 * MiB, 0, 1, 3, 4, 12, 16},
        {2, 200 * MiB, 0, 2, 3, 3, 9, 13},
        {6, 50 * MiB, 5, 5, 6, 4, 12, 15},
    };
    for (size_t i = 0; i < 3; i++) {
        const cham_policy_item_t *it = &v.items[i];
        assert_int_equal(it->storage, want[i].storage);
        assert_int_equal(it->bytes, want[i].bytes);
        assert_int_equal(it->swap_out_op, want[i].out);
        assert_int_equal(it->swap_out_done_op, want[i].done);
        /* (2) free: the next layer's first op; swap-in: the first op of the
         * layer before the use's. */
        assert_int_equal(it->free_op, want[i].free);
        assert_int_equal(it->swap_in_layer, want[i].in_layer);
        assert_int_equal(it->swap_in_op, want[i].in);
        assert_int_equal(it->use_op, want[i].use);
        assert_int_equal(it->stall_ns, 0);
        /* The features of the uses at f and at u. */
        assert_int_equal(it->out_use.storage, want[i].storage);
        assert_int_equal(it->out_use.use_count, want[i].out);
        assert_int_equal(it->in_use.storage, want[i].storage);
        assert_int_equal(it->in_use.use_count, want[i].use);
    }
    assert_true(v.items[0].out_use.output);
    assert_false(v.items[2].out_use.output);
    assert_false(v.items[0].in_use.output);

    /* (3) the peak, from the rebuilt curve: 900 -> 730 MiB. */
    assert_int_equal(v.peak_without_swaps, 900 * MiB);
    assert_int_equal(v.predicted_peak, 730 * MiB);
    assert_int_equal(v.capacity, 4 * GiB);
    assert_int_equal(v.usable, 4 * GiB);
    assert_int_equal(v.step_ns, 18 * SEC);
    assert_int_equal(v.predicted_step_ns, 18 * SEC);
    /* remaining_ns: what each layer's prefetches leave of it. */
    assert_int_equal(v.layers[3].remaining_ns, 2 * SEC);
    assert_int_equal(v.layers[4].remaining_ns, 3 * SEC - 1750000000u);
    assert_int_equal(v.layers[5].remaining_ns, 3 * SEC);
    cham_policy_free(pol);

    /* min_swap_bytes 100 MiB drops F; 250 MiB keeps A alone, whose
     * interval [6, 24) leaves sample 13 at 600 and sample 24 at 730. */
    c.min_swap_bytes = 100 * MiB;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 2);
    assert_int_equal(v.items[0].storage, 1);
    assert_int_equal(v.items[1].storage, 2);
    cham_policy_free(pol);
    c.min_swap_bytes = 250 * MiB;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    assert_int_equal(v.items[0].storage, 1);
    assert_int_equal(v.predicted_peak, 730 * MiB);
    cham_policy_free(pol);
    /* A smaller bound than E's 512 KiB takes it too (f 1, u 17: free 3,
     * back before op 12). */
    c.min_swap_bytes = 256 * KiB;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 4);
    assert_int_equal(v.items[2].storage, 5);
    assert_int_equal(v.items[2].swap_out_op, 1);
    assert_int_equal(v.items[2].free_op, 3);
    assert_int_equal(v.items[2].swap_in_op, 12);
    cham_policy_free(pol);

    /* Per-op costs place the completions: op 1 costing 4 of 21 units of
     * 18 s runs from 0.86 s to 4.29 s, so B's copy (done at 0.86 + 0.75 +
     * 0.5 s) completes during op 1, not op 2. */
    double cost[18];
    for (size_t k = 0; k < 18; k++)
        cost[k] = 1;
    cost[1] = 4;
    c = hand_config(200, 400);
    c.op_cost_ns = cost;
    c.n_op_costs = 18;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 3);
    assert_int_equal(v.items[0].swap_out_done_op, 1);
    assert_int_equal(v.items[1].swap_out_done_op, 1);
    assert_int_equal(v.layers[0].time_ns, (uint64_t)(18e9 * 6 / 21 + 0.5));
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* 100 MiB/s both ways. L0 offloads A (3 s) and B (2 s): 5 s against a 3 s
 * layer, a 2 s wait at its end, charged to B (L0's last item); A's copy,
 * from 1 s to 4 s, runs past L0: done "at" op 2, as B's. L1: F 0.5 s, no
 * wait. L4 prefetches A (3 s) and F (0.5 s): a 0.5 s wait, charged to F;
 * L3 prefetches B (2 s). Step: 18 + 2 + 0.5 s. */
static void test_hand_stalls(void **state)
{
    (void)state;
    cham_profile_t *p = hand_profile();
    cham_planner_config_t c = hand_config(100, 100);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_invariants(&v);
    assert_int_equal(v.n_items, 3);
    assert_int_equal(v.items[0].swap_out_done_op, 2);
    assert_int_equal(v.items[1].swap_out_done_op, 2);
    assert_int_equal(v.items[0].stall_ns, 0);
    assert_int_equal(v.items[1].stall_ns, 2 * SEC);
    assert_int_equal(v.items[2].stall_ns, SEC / 2);
    assert_int_equal(v.predicted_step_ns, 18 * SEC + 2 * SEC + SEC / 2);
    assert_int_equal(v.layers[3].remaining_ns, SEC);
    assert_int_equal(v.layers[4].remaining_ns, 0);
    /* The items and the peak do not depend on the links. */
    assert_int_equal(v.items[0].free_op, 3);
    assert_int_equal(v.items[0].swap_in_op, 12);
    assert_int_equal(v.predicted_peak, 730 * MiB);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* Memory is not a goal: a capacity below the predicted peak (with the
 * default reserve) gives the same items, and predicted_peak > usable says
 * it will not fit; capacity 0 takes the profile's 4 GiB, whose default
 * reserve is max(5 %, 256 MiB) = 256 MiB. */
static void test_capacity_independent(void **state)
{
    (void)state;
    cham_profile_t *p = hand_profile();
    cham_planner_config_t c = hand_config(200, 400);
    c.reserve = UINT64_MAX;
    cham_policy_view_t big, small;
    cham_policy_t *a = plan_ok(p, &c, &big);
    assert_int_equal(big.capacity, 4 * GiB);
    assert_int_equal(big.usable, 4 * GiB - 256 * MiB);
    c.capacity = 600 * MiB;   /* reserve: 20 % cap, 120 MiB */
    cham_policy_t *b = plan_ok(p, &c, &small);
    assert_int_equal(small.capacity, 600 * MiB);
    assert_int_equal(small.usable, 480 * MiB);
    assert_true(small.predicted_peak > small.usable);
    assert_int_equal(small.n_items, big.n_items);
    for (size_t i = 0; i < big.n_items; i++) {
        assert_int_equal(small.items[i].storage, big.items[i].storage);
        assert_int_equal(small.items[i].free_op, big.items[i].free_op);
        assert_int_equal(small.items[i].swap_in_op, big.items[i].swap_in_op);
        assert_int_equal(small.items[i].swap_out_done_op, big.items[i].swap_out_done_op);
        assert_int_equal(small.items[i].stall_ns, big.items[i].stall_ns);
    }
    assert_int_equal(small.predicted_peak, big.predicted_peak);
    cham_policy_free(a);
    cham_policy_free(b);
    cham_profile_free(p);
}

/* (4) the policy saves and loads field for field, planner name included. */
static void test_json_round_trip(void **state)
{
    (void)state;
    cham_profile_t *p = hand_profile();
    cham_planner_config_t c = hand_config(100, 100);
    cham_policy_view_t v, w;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    char path[600], err[512] = "";
    test_path(path, sizeof path, tmpdir, "vdnn.json");
    assert_int_equal(cham_policy_save_json(pol, path, err, sizeof err), CHAM_OK);
    char *text = test_read_text(path);
    test_assert_contains(text, "\"planner\": \"vdnn\"");
    free(text);
    cham_policy_t *back = NULL;
    if (cham_policy_load_json(path, &back, err, sizeof err) != CHAM_OK)
        fail_msg("load: %s", err);
    cham_policy_get(back, &w);
    assert_string_equal(w.planner, "vdnn");
    assert_int_equal(w.n_ops, v.n_ops);
    assert_int_equal(w.capacity, v.capacity);
    assert_int_equal(w.usable, v.usable);
    assert_int_equal(w.peak_without_swaps, v.peak_without_swaps);
    assert_int_equal(w.predicted_peak, v.predicted_peak);
    assert_int_equal(w.step_ns, v.step_ns);
    assert_int_equal(w.predicted_step_ns, v.predicted_step_ns);
    assert_int_equal(w.n_layers, v.n_layers);
    for (size_t k = 0; k < v.n_layers; k++) {
        assert_int_equal(w.layers[k].start_op, v.layers[k].start_op);
        assert_int_equal(w.layers[k].n_ops, v.layers[k].n_ops);
        assert_int_equal(w.layers[k].phase, v.layers[k].phase);
        assert_int_equal(w.layers[k].time_ns, v.layers[k].time_ns);
        assert_int_equal(w.layers[k].remaining_ns, v.layers[k].remaining_ns);
    }
    assert_int_equal(w.n_items, v.n_items);
    for (size_t i = 0; i < v.n_items; i++) {
        const cham_policy_item_t *x = &v.items[i], *y = &w.items[i];
        assert_int_equal(y->storage, x->storage);
        assert_int_equal(y->bytes, x->bytes);
        assert_int_equal(y->swap_out_op, x->swap_out_op);
        assert_int_equal(y->swap_out_done_op, x->swap_out_done_op);
        assert_int_equal(y->free_op, x->free_op);
        assert_int_equal(y->swap_in_layer, x->swap_in_layer);
        assert_int_equal(y->swap_in_op, x->swap_in_op);
        assert_int_equal(y->use_op, x->use_op);
        assert_int_equal(y->stall_ns, x->stall_ns);
        assert_true(y->score == x->score);
        assert_int_equal(y->out_use.data_ptr, x->out_use.data_ptr);
        assert_int_equal(y->out_use.use_count, x->out_use.use_count);
        assert_int_equal(y->in_use.use_count, x->in_use.use_count);
        assert_int_equal(y->out_use.output, x->out_use.output);
    }
    cham_policy_free(back);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* With both counts 0 the default rule applies: the one token repeats 9
 * times in the forward ops, so 9 forward and 9 backward layers of one op.
 * Then C (f 4, u 10) gains: free 5, back before op 9; D (f 7, u 9) still
 * does not: the layer before u's is f's next one, free 8 = swap-in 8. */
static void test_default_layers(void **state)
{
    (void)state;
    cham_profile_t *p = hand_profile();
    cham_planner_config_t c = hand_config(200, 400);
    c.forward_layers = c.backward_layers = 0;
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_invariants(&v);
    assert_int_equal(v.n_layers, 18);
    assert_int_equal(v.n_items, 4);
    static const uint64_t storage[] = {1, 2, 3, 6};
    static const uint32_t free_op[] = {1, 1, 5, 6}, in_op[] = {15, 12, 9, 14};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(v.items[i].storage, storage[i]);
        assert_int_equal(v.items[i].free_op, free_op[i]);
        assert_int_equal(v.items[i].swap_in_op, in_op[i]);
    }
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* (5) bad inputs: CHAM_ERR_INVALID_ARG, a message, *out NULL. */
static void test_bad_inputs(void **state)
{
    (void)state;
    cham_profile_t *p = hand_profile();
    cham_planner_config_t c = hand_config(200, 0);
    cham_policy_t *pol = (cham_policy_t *)&c;   /* must be reset to NULL */
    char err[512] = "";
    assert_int_equal(cham_plan_vdnn(p, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_null(pol);
    test_assert_contains(err, "d2h_bandwidth must be positive");

    c = hand_config(0, 400);
    err[0] = '\0';
    assert_int_equal(cham_plan_vdnn(p, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "h2d_bandwidth");

    c = hand_config(200, 400);
    c.reserve = 4 * GiB;
    err[0] = '\0';
    assert_int_equal(cham_plan_vdnn(p, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "leaves nothing usable");

    c = hand_config(200, 400);
    double cost[17] = {0};
    c.op_cost_ns = cost;
    c.n_op_costs = 17;
    err[0] = '\0';
    assert_int_equal(cham_plan_vdnn(p, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "17 op costs for a profile of 18 ops");

    err[0] = '\0';
    assert_int_equal(cham_plan_vdnn(NULL, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "NULL");
    cham_profile_free(p);
}

/* ---- property test ----------------------------------------------------- */

/* A random step: nf forward then nb backward ops, storages used by random
 * distinct ops (some only forward, some only backward, sizes around the
 * 1 MiB bound), a random curve and step time. */
typedef struct rand_storage {
    uint64_t bytes;
    int n;
    uint32_t ops[4];   /* ascending */
} rand_storage_t;

#define MAX_ST 24

/* The memory samples it records (no swaps: the curve without swaps) go
 * to samples, 2 per op, so the test needs no profile code to know the
 * curve. */
#define MAX_SAMPLES 64

static cham_profile_t *random_profile(test_rng_t *r, rand_storage_t *st, size_t *n_st,
                                      uint32_t *nf_out, uint64_t *samples)
{
    uint32_t nf = 2 + (uint32_t)test_rng_below(r, 14), nb = 2 + (uint32_t)test_rng_below(r, 14);
    uint32_t n = nf + nb;
    assert_true(2 * (size_t)n <= MAX_SAMPLES);
    *nf_out = nf;
    *n_st = 1 + test_rng_below(r, MAX_ST);
    for (size_t s = 0; s < *n_st; s++) {
        st[s].bytes = test_rng_below(r, 4) == 0 ? (1 + test_rng_below(r, 1023)) * KiB
                                                : (1 + test_rng_below(r, 64)) * MiB;
        st[s].n = 1 + (int)test_rng_below(r, 4);
        for (int j = 0; j < st[s].n; j++) {
            uint32_t op;
            bool dup;
            do {
                op = (uint32_t)test_rng_below(r, n);
                dup = false;
                for (int q = 0; q < j; q++)
                    dup = dup || st[s].ops[q] == op;
            } while (dup);
            st[s].ops[j] = op;
        }
        for (int a = 1; a < st[s].n; a++)   /* insertion sort */
            for (int b = a; b > 0 && st[s].ops[b - 1] > st[s].ops[b]; b--) {
                uint32_t x = st[s].ops[b];
                st[s].ops[b] = st[s].ops[b - 1];
                st[s].ops[b - 1] = x;
            }
    }
    cham_profile_t *p = cham_profile_new(1, 8 * GiB);
    const char *names[] = {"t0", "t1", "t2"};
    assert_true(cham_profile_set_tokens(p, names, 3));
    for (uint32_t k = 0; k < n; k++) {
        cham_phase_t ph = k < nf ? CHAM_PHASE_FORWARD : CHAM_PHASE_BACKWARD;
        int token = (int)test_rng_below(r, 3);
        samples[2 * k] = test_rng_below(r, 4096) * MiB;
        assert_true(cham_profile_begin_op(p, token, ph, -1, samples[2 * k]));
        for (size_t s = 0; s < *n_st; s++)
            for (int j = 0; j < st[s].n; j++)
                if (st[s].ops[j] == k) {
                    cham_tensor_use_t x = {.storage = 100 + s, .bytes = st[s].bytes,
                                           .storage_bytes = st[s].bytes,
                                           .use_count = (uint32_t)j, .output = j == 0};
                    assert_true(cham_profile_add_use(p, &x));
                }
        samples[2 * k + 1] = test_rng_below(r, 4096) * MiB;
        cham_profile_end_op(p, samples[2 * k + 1]);
    }
    cham_profile_set_duration(p, (1 + test_rng_below(r, 1000)) * 1000000u);
    return p;
}

static uint32_t layer_of(const cham_policy_view_t *v, uint32_t op)
{
    for (uint32_t k = 0; k < v->n_layers; k++)
        if (op < v->layers[k].start_op + v->layers[k].n_ops)
            return k;
    fail_msg("op %u in no layer", op);
    return 0;
}

static uint64_t t_ns(uint64_t bytes, double bw)
{
    double t = (double)bytes / bw * 1e9;
    uint64_t n = (uint64_t)t;
    return (double)n < t ? n + 1 : n;
}

static void test_property_random(void **state)
{
    (void)state;
    size_t total_items = 0, with_stalls = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        test_rng_t r = {.state = seed * 0x9E3779B97F4A7C15u};
        rand_storage_t st[MAX_ST];
        size_t n_st;
        uint32_t nf;
        uint64_t curve[MAX_SAMPLES];
        cham_profile_t *p = random_profile(&r, st, &n_st, &nf, curve);
        cham_profile_view_t pv;
        cham_profile_get(p, &pv);
        cham_planner_config_t c = cham_planner_config_default();
        c.capacity = test_rng_below(&r, 2) ? 0 : (1 + test_rng_below(&r, 8)) * GiB;
        c.h2d_bandwidth = (double)(1 + test_rng_below(&r, 64)) * 1e8;
        c.d2h_bandwidth = (double)(1 + test_rng_below(&r, 64)) * 1e8;
        c.forward_layers = (uint32_t)test_rng_below(&r, nf + 1);
        c.backward_layers = (uint32_t)test_rng_below(&r, 8);
        c.min_swap_bytes = test_rng_below(&r, 2) ? MiB : 16 * MiB;
        cham_policy_view_t v;
        cham_policy_t *pol = plan_ok(p, &c, &v);
        assert_invariants(&v);
        total_items += v.n_items;

        /* The oracle: storage by storage, from its uses. */
        size_t expect = 0;
        for (size_t s = 0; s < n_st; s++) {
            int u = 0;
            while (u < st[s].n && st[s].ops[u] < nf)
                u++;
            const cham_policy_item_t *it = NULL;
            for (size_t i = 0; i < v.n_items; i++)
                if (v.items[i].storage == 100 + s)
                    it = &v.items[i];
            bool idle = u > 0 && u < st[s].n && st[s].bytes >= c.min_swap_bytes;
            uint32_t f = idle ? st[s].ops[u - 1] : 0, b = idle ? st[s].ops[u] : 0;
            uint32_t lf = idle ? layer_of(&v, f) : 0, lu = idle ? layer_of(&v, b) : 0;
            if (!idle || lu < lf + 3) {
                assert_null(it);
                continue;
            }
            expect++;
            assert_non_null(it);
            assert_int_equal(it->bytes, st[s].bytes);
            assert_int_equal(it->swap_out_op, f);
            assert_int_equal(it->use_op, b);
            assert_int_equal(it->free_op, v.layers[lf + 1].start_op);
            assert_int_equal(it->swap_in_layer, lu - 1);
            assert_int_equal(it->swap_in_op, v.layers[lu - 1].start_op);
            assert_true(it->swap_out_done_op < v.layers[lf].start_op + v.layers[lf].n_ops);
            assert_int_equal(it->out_use.use_count, (uint32_t)u - 1);
            assert_int_equal(it->in_use.use_count, (uint32_t)u);
        }
        assert_int_equal(v.n_items, expect);

        /* Stalls: per forward layer max(0, offloads - time), per layer
         * max(0, prefetches - time). */
        uint64_t out_ns[64] = {0}, in_ns[64] = {0}, stalls = 0, item_stalls = 0;
        assert_true(v.n_layers <= 64);
        for (size_t i = 0; i < v.n_items; i++) {
            out_ns[layer_of(&v, v.items[i].swap_out_op)] +=
                t_ns(v.items[i].bytes, c.d2h_bandwidth);
            in_ns[v.items[i].swap_in_layer] += t_ns(v.items[i].bytes, c.h2d_bandwidth);
            item_stalls += v.items[i].stall_ns;
        }
        for (size_t k = 0; k < v.n_layers; k++) {
            uint64_t time = v.layers[k].time_ns;
            stalls += out_ns[k] > time ? out_ns[k] - time : 0;
            stalls += in_ns[k] > time ? in_ns[k] - time : 0;
            assert_int_equal(v.layers[k].remaining_ns, time > in_ns[k] ? time - in_ns[k] : 0);
        }
        with_stalls += stalls > 0;
        assert_int_equal(item_stalls, stalls);
        assert_int_equal(v.predicted_step_ns, pv.duration_ns + stalls);

        /* The peaks, from the samples the profile was built with. */
        size_t ns = 2 * pv.n_ops;
        assert_true(ns <= MAX_SAMPLES);
        uint64_t top = 0, top_swapped = 0;
        for (size_t smp = 0; smp < ns; smp++) {
            uint64_t m = curve[smp];
            top = m > top ? m : top;
            for (size_t i = 0; i < v.n_items; i++)
                if (smp >= 2 * (size_t)v.items[i].free_op &&
                    smp < 2 * (size_t)v.items[i].swap_in_op)
                    m -= v.items[i].bytes < m ? v.items[i].bytes : m;
            top_swapped = m > top_swapped ? m : top_swapped;
        }
        assert_int_equal(v.peak_without_swaps, top);
        assert_int_equal(v.predicted_peak, top_swapped);
        assert_int_equal(v.capacity, c.capacity ? c.capacity : 8 * GiB);
        cham_policy_free(pol);
        cham_profile_free(p);
    }
    printf("property: %zu items, %zu policies with stalls\n", total_items, with_stalls);
    assert_true(total_items > 300);
    assert_true(with_stalls > 50);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_items),
        cmocka_unit_test(test_hand_stalls),
        cmocka_unit_test(test_capacity_independent),
        cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_default_layers),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_property_random),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
