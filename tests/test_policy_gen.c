/* Chameleon's policy generator (src/policy/{layers,mrl,candidates,
 * simulate,generate}.c) on hand-built profiles whose answers are worked out
 * in the comments: one peak and one candidate, Eq. 2 deciding the order, a
 * swap-in pushed two layers before its nearest slot, the fallback with an
 * accepted stall, the impossible case, Eq. 1 and the default layer count,
 * per-op costs moving a swap-in, a swap across the step's end covering the
 * step's tail alone, the replay's queues; then a property test over random profiles
 * (fixed seeds) that recomputes the peak from the items and the memory
 * samples the test itself put into the profile. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/profile_build.h"
#include "support/rng.h"

#include "chameleon/policy.h"
#include "policy/plan-impl.h"
#include "policy/policy-impl.h"
#include "profile/profile-impl.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define SEC UINT64_C(1000000000)

/* ---- building profiles -------------------------------------------------- */

/* One layer per op, no reserve, capacity in MiB, bandwidths in MiB/s. */
static cham_planner_config_t cfg_for(const char *ph, uint64_t cap_mib, double h2d_mib,
                                     double d2h_mib)
{
    cham_planner_config_t c = cham_planner_config_default();
    uint32_t f = 0, b = 0;
    for (const char *s = ph; *s; s++) {
        f += *s == 'F';
        b += *s == 'B';
    }
    c.capacity = cap_mib * MiB;
    c.reserve = 0;
    c.forward_layers = f;
    c.backward_layers = b;
    c.h2d_bandwidth = h2d_mib * (double)MiB;
    c.d2h_bandwidth = d2h_mib * (double)MiB;
    return c;
}

static cham_policy_t *plan_ok(const cham_profile_t *p, const cham_planner_config_t *c,
                              cham_policy_view_t *v)
{
    cham_policy_t *pol = NULL;
    char err[512] = "";
    cham_status_t st = cham_plan_chameleon(p, c, &pol, err, sizeof err);
    if (st != CHAM_OK)
        fail_msg("plan failed: %s", err);
    cham_policy_get(pol, v);
    return pol;
}

/* ---- one peak, one candidate ------------------------------------------- */

/* Ops 0-3 forward, 4-7 backward, 1 s each. A (400 MiB) is written by op 0,
 * read by op 1 (last forward use) and op 6 (first backward use). Memory
 * peaks at 900 MiB at samples 5 and 6; capacity 800 leaves 100 MiB at each.
 * A's swap-out (0.39 s at 1 GiB/s) completes in layer 1, so the block is
 * free from op 2 (sample 4); the last entry is sample 6, so the swap-in
 * may start at op 4 at the earliest; the nearest layer before the use's
 * (layer 6) is layer 5: swap-in before op 5, memory lower by 400 MiB over
 * samples [4, 10), predicted peak 500 MiB. */
static const char PH1[] = "FFFFBBBB";
static const uint64_t MEM1[] = {100, 500, 500, 500, 500, 900, 900, 500,
                                500, 500, 500, 500, 500, 100, 100, 100};
static const use_spec_t USES1[] = {
    {0, 1, 400, true},
    {1, 1, 400, false},
    {6, 1, 400, false},
};

static void test_single_peak(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH1, MEM1, USES1, 3);
    cham_planner_config_t c = cfg_for(PH1, 800, 1024, 1024);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    const cham_policy_item_t *it = &v.items[0];
    assert_int_equal(it->storage, 1);
    assert_int_equal(it->bytes, 400 * MiB);
    assert_int_equal(it->swap_out_op, 1);
    assert_int_equal(it->swap_out_done_op, 1);
    assert_int_equal(it->free_op, 2);
    assert_int_equal(it->swap_in_layer, 5);
    assert_int_equal(it->swap_in_op, 5);
    assert_int_equal(it->use_op, 6);
    assert_int_equal(it->stall_ns, 0);
    assert_int_equal(it->out_use.use_count, 0);
    assert_int_equal(v.peak_without_swaps, 900 * MiB);
    assert_int_equal(v.predicted_peak, 500 * MiB);
    assert_int_equal(v.usable, 800 * MiB);
    assert_int_equal(v.predicted_step_ns, 8 * SEC);
    assert_int_equal(v.n_layers, 8);
    /* 400 MiB at 1 GiB/s = 0.390625 s taken from layer 5. */
    assert_int_equal(v.layers[5].remaining_ns, SEC - 390625000);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- model state across the step's end --------------------------------- */

/* Issue 18. Ops 0-3 forward, 4-7 backward, 8 the optimizer, 1 s each. S
 * (300 MiB) is optimizer state: persistent, used by op 8 alone. Memory is
 * 400 MiB (S and 100 of other state) but 600 over ops 3-5, where nothing
 * else can move; capacity 450. Only S, away from its update to just
 * before the next one, covers ops 3-5: out after op 8 (its copy done in
 * op 8's layer, the block given back at the next step's first op, 9), in
 * before op 7 of the next step (the layer before the use's). Predicted:
 * 600 - 300 over samples [0, 14), 400 after: peak 400. The copy out ends
 * 0.29 s after the step's last op: the step waits for it. Without model
 * state the planner cannot fit. */
static const char PH_MS[] = "FFFFBBBBO";
static const uint64_t MEM_MS[] = {400, 400, 400, 400, 400, 400, 600, 600, 600, 600,
                                  600, 600, 400, 400, 400, 400, 400, 400};
static const use_spec_t USES_MS[] = {
    {8, 7, 300, true},
};

static void test_model_state_wraps(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH_MS, MEM_MS, USES_MS, 1);
    test_mark_persistent(p, 7);
    cham_planner_config_t c = cfg_for(PH_MS, 450, 1024, 1024);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    const cham_policy_item_t *it = &v.items[0];
    assert_true(it->wraps);
    assert_int_equal(it->swap_out_op, 8);
    assert_int_equal(it->free_op, 9);
    assert_int_equal(it->swap_in_op, 7);
    assert_int_equal(it->use_op, 8);
    assert_int_equal(v.predicted_peak, 400 * MiB);
    assert_int_equal(v.predicted_step_ns, 9 * SEC + 292968750);
    cham_policy_free(pol);

    c.model_state = false;
    char err[512];
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "no tensor left to swap is idle there"));
    cham_profile_free(p);
}

/* The same step, followed by another class's whose plan wants S on the
 * device at its start (resident_at_end): S may not be away across the
 * step's end, and nothing else covers ops 3-5. A list naming other
 * storages changes nothing. */
static void test_resident_at_end_does_not_wrap(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH_MS, MEM_MS, USES_MS, 1);
    test_mark_persistent(p, 7);
    cham_planner_config_t c = cfg_for(PH_MS, 450, 1024, 1024);
    const uint64_t others[] = {3, 9}, s_too[] = {3, 7, 9};
    c.resident_at_end = others;
    c.n_resident_at_end = 2;
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    assert_true(v.items[0].wraps);
    cham_policy_free(pol);

    c.resident_at_end = s_too;
    c.n_resident_at_end = 3;
    char err[512];
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "no tensor left to swap is idle there"));
    cham_profile_free(p);
}

/* ---- a host copy the caller keeps -------------------------------------- */

/* W (300 MiB) is read by op 0 and op 6; the other tensors peak at ops 2-4
 * (700 MiB with W, capacity 450). The link out carries 100 MiB/s: a copy
 * of W takes 3 s and ends too late for the peak, so no plan fits, and the
 * bound (its ops have no costs given, so the copies alone count) is the
 * 2.5 s of copies the peak needs. When the caller keeps W's bytes on the
 * host (weights under an optimizer on the host), W leaves at once: no
 * stall, 8 s, and the bound counts no copy. */
static const char PH_B[] = "FFFFBBBB";
static const uint64_t MEM_B[] = {400, 400, 400, 400, 700, 700, 700, 700,
                                 700, 700, 400, 400, 400, 400, 400, 400};
static const use_spec_t USES_B[] = {
    {0, 1, 300, false},
    {6, 1, 300, false},
};

static void test_backed_leaves_free(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH_B, MEM_B, USES_B, 2);
    cham_planner_config_t c = cfg_for(PH_B, 450, 1024, 100);
    cham_step_bound_t b;
    char err[512];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.bound_ns, 2 * SEC + SEC / 2);
    cham_policy_t *pol;
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_OUT_OF_MEMORY);

    test_mark_backed(p, 1);
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.bound_ns, 0);
    cham_policy_view_t v;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    const cham_policy_item_t *it = &v.items[0];
    assert_true(it->out_use.host_backed);
    assert_int_equal(it->swap_out_op, 0);
    assert_int_equal(it->swap_out_done_op, 0);
    assert_int_equal(it->free_op, 1);
    assert_int_equal(it->stall_ns, 0);
    assert_int_equal(v.predicted_peak, 400 * MiB);
    assert_int_equal(v.predicted_step_ns, 8 * SEC);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- a copy the runtime keeps ------------------------------------------- */

/* W (300 MiB, model state the step only reads) is read by op 1 and op 6;
 * the other tensors peak at ops 2-4 and at op 9 (700 MiB with W, capacity
 * 450). The link out carries 200 MiB/s: a copy of W takes 1.5 s. Sent out
 * after op 1, it would end in op 3, too late for the peak at op 2: no
 * plan without a stall. Away across the step's end (out after op 6, done
 * in op 8, back before op 1), W covers op 9 and comes back by a copy; the
 * runtime keeps that copy (executor.md, "Copies kept after a swap-in"),
 * so W, unchanged, leaves again after op 1 copying nothing: both gaps
 * chosen, no stall, 10 s. Written by op 1, W must leave with a copy
 * there: no plan. */
static const char PH_K[] = "FFFFBBBBOO";
static const uint64_t MEM_K[] = {400, 400, 400, 400, 700, 700, 700, 700, 700, 700,
                                 400, 400, 400, 400, 400, 400, 400, 400, 700, 700};

static void test_kept_copy_leaves_free(void **state)
{
    (void)state;
    const use_spec_t uses[] = {{1, 1, 300, false}, {6, 1, 300, false}};
    cham_profile_t *p = test_build_profile(PH_K, MEM_K, uses, 2);
    test_mark_persistent(p, 1);
    cham_planner_config_t c = cfg_for(PH_K, 450, 1024, 200);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 2);
    const cham_policy_item_t *fwd = &v.items[0], *wrap = &v.items[1];
    assert_true(wrap->wraps && !fwd->wraps);
    assert_int_equal(fwd->swap_out_op, 1);
    assert_true(fwd->out_kept);
    assert_int_equal(fwd->swap_out_done_op, 1);
    assert_int_equal(fwd->free_op, 2);
    assert_int_equal(fwd->stall_ns, 0);
    /* Back by a copy before op 6, W leaves after it as it came. */
    assert_int_equal(wrap->swap_out_op, 6);
    assert_true(wrap->out_kept);
    assert_int_equal(v.predicted_peak, 400 * MiB);
    assert_int_equal(v.predicted_step_ns, 10 * SEC);
    cham_policy_free(pol);
    cham_profile_free(p);

    /* Written by op 1: no copy of those bytes on the host yet. */
    const use_spec_t written[] = {{1, 1, 300, true}, {6, 1, 300, false}};
    p = test_build_profile(PH_K, MEM_K, written, 2);
    test_mark_persistent(p, 1);
    char err[512];
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_OUT_OF_MEMORY);
    cham_profile_free(p);
}

/* ---- a use that overwrites ---------------------------------------------- */

/* As above, but W's use at op 6 writes it whole (an optimizer's new
 * weights after the caller's cham_tensor_discard) and the link back is
 * the slow one (100 MiB/s): copying W back (3 s) could start only after
 * the peak, so the plan waits for it and the bound counts it. When
 * the profile marks the write (overwrites), nothing comes back: the swap-in
 * is at the use, no stall, 8 s, and the bound counts the copy out of the
 * 250 MiB over the capacity only (0.24 s at 1 GiB/s). */
static const use_spec_t USES_O[] = {
    {0, 1, 300, false},
    {6, 1, 300, true},
};

static void test_overwritten_comes_back_free(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH_B, MEM_B, USES_O, 2);
    cham_planner_config_t c = cfg_for(PH_B, 450, 100, 1024);
    cham_step_bound_t b;
    char err[512];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_true(b.bound_ns > 0);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_true(v.predicted_step_ns > 8 * SEC);
    cham_policy_free(pol);

    test_mark_overwrites(p, 1);
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    /* The excess copied out only (to the nanosecond, rounded down). */
    assert_true(b.bound_ns <= SEC * 250 / 1024 && b.bound_ns + 1 >= SEC * 250 / 1024);
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    const cham_policy_item_t *it = &v.items[0];
    assert_true(it->in_use.overwrites);
    assert_int_equal(it->swap_in_op, 6);
    assert_int_equal(it->use_op, 6);
    assert_int_equal(it->stall_ns, 0);
    assert_int_equal(v.predicted_peak, 400 * MiB);
    assert_int_equal(v.predicted_step_ns, 8 * SEC);
    cham_policy_free(pol);
    /* Told not to count on it, the planner copies W back. */
    c.overwrites = false;
    pol = plan_ok(p, &c, &v);
    assert_true(v.predicted_step_ns > 8 * SEC);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- Eq. 2 decides ----------------------------------------------------- */

/* Entries at samples 3-6 (100 MiB each). B (200 MiB, last forward use op 0,
 * used again by op 5) can cover all four; A (400 MiB, last forward use op 2,
 * used by op 6) only sample 6. Score = N/4 + C * S/400:
 * C = 1: B = 1 + 0.5 = 1.5 > A = 0.25 + 1 = 1.25, B alone empties the list.
 * C = 4: A = 4.25 > B = 3, A goes first and B is still needed. */
static const char PH2[] = "FFFFBBBB";
static const uint64_t MEM2[] = {100, 300, 300, 900, 900, 900, 900, 500,
                                500, 500, 500, 500, 500, 300, 300, 100};
static const use_spec_t USES2[] = {
    {0, 2, 200, true},
    {1, 1, 400, true},
    {2, 1, 400, false},
    {5, 2, 200, false},
    {6, 1, 400, false},
};

static void test_score_order(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH2, MEM2, USES2, 5);
    cham_planner_config_t c = cfg_for(PH2, 800, 1024, 1024);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    assert_int_equal(v.items[0].storage, 2);
    assert_true(fabs(v.items[0].score - 1.5) < 1e-9);
    assert_int_equal(v.items[0].free_op, 1);
    assert_int_equal(v.items[0].swap_in_op, 4);
    cham_policy_free(pol);

    c.score_c = 4;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 2);
    /* Items are in swap-out order: B (op 0), then A (op 2). */
    assert_int_equal(v.items[0].storage, 2);
    assert_int_equal(v.items[1].storage, 1);
    assert_true(fabs(v.items[1].score - 4.25) < 1e-9);
    assert_true(v.items[1].score > v.items[0].score);
    /* Samples 3-5: 900 - 200; sample 6: 900 - 600. */
    assert_int_equal(v.predicted_peak, 700 * MiB);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- a swap-in moved two layers earlier --------------------------------- */

/* 4 forward, 8 backward ops. T1, T2, T3 (600 MiB, 0.586 s at 1 GiB/s: two
 * do not fit one 1 s layer) have last forward uses at ops 0, 1, 2 and are
 * all first used by op 10. The peak (excess 1500 MiB at samples 7 and 8)
 * (capacity 1900) needs all three. Equal scores: swap-out order. T1 takes layer 9, whose
 * remaining 0.41 s is too little for T2, which takes layer 8; T3 lands in
 * layer 7, two layers before its nearest slot. */
static const char PH3[] = "FFFFBBBBBBBB";
static const uint64_t MEM3[] = {100,  700,  700,  1300, 1300, 1900, 1900, 3400, 3400, 1900,
                                1900, 1900, 1900, 1900, 1900, 1900, 1900, 1900, 1900, 1900,
                                1900, 100,  100,  100};
static const use_spec_t USES3[] = {
    {0, 1, 600, true},  {1, 2, 600, true},  {2, 3, 600, true},
    {10, 1, 600, false}, {10, 2, 600, false}, {10, 3, 600, false},
};

static void test_swap_in_moves_earlier(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH3, MEM3, USES3, 6);
    cham_planner_config_t c = cfg_for(PH3, 1900, 1024, 1024);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(v.items[i].storage, (uint64_t)i + 1);
        assert_int_equal(v.items[i].swap_out_op, i);
        assert_int_equal(v.items[i].free_op, i + 1);
        assert_int_equal(v.items[i].use_op, 10);
        assert_int_equal(v.items[i].swap_in_op, 9 - i);
        assert_int_equal(v.items[i].stall_ns, 0);
    }
    /* Samples 7, 8: 3400 - 1800; from op 9 all three are back: 1900. */
    assert_int_equal(v.predicted_peak, 1900 * MiB);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- fallback: an accepted stall --------------------------------------- */

/* Profile 1 with a slow host-to-device link: 400 MiB at 160 MiB/s = 2.5 s.
 * The swap-in may start at op 4 at the earliest (entry at sample 6) and
 * layers 4 and 5 hold 2 s: nothing fits. Fallback: layer 5 (before the
 * use's), stall 2.5 - 1 = 1.5 s. */
static void test_fallback_stall(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH1, MEM1, USES1, 3);
    cham_planner_config_t c = cfg_for(PH1, 800, 160, 1024);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 1);
    assert_int_equal(v.items[0].swap_in_op, 5);
    assert_int_equal(v.items[0].stall_ns, 1500000000u);
    assert_int_equal(v.predicted_step_ns, 8 * SEC + 1500000000u);
    assert_int_equal(v.layers[5].remaining_ns, 0);
    assert_int_equal(v.predicted_peak, 500 * MiB);
    cham_policy_free(pol);

    /* At 256 MiB/s (1.5625 s) layers 4 and 5 together hold it: the swap-in
     * starts at op 4 with no stall. */
    c.h2d_bandwidth = 256.0 * MiB;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.items[0].swap_in_op, 4);
    assert_int_equal(v.items[0].stall_ns, 0);
    cham_policy_free(pol);

    /* The device's fixed time per copy (the profile's copy_latency_ns) is
     * part of each copy: at 160 MiB/s the swap-in takes 2.5 s + 0.25 s,
     * and the stall grows by as much. */
    c.h2d_bandwidth = 160.0 * MiB;
    cham_profile_set_fixed_costs(p, 0, 250000000u);
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.items[0].swap_in_op, 5);
    assert_int_equal(v.items[0].stall_ns, 1750000000u);
    assert_int_equal(v.predicted_step_ns, 8 * SEC + 1750000000u);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- the impossible case ----------------------------------------------- */

/* Excess 450 MiB at samples 5 and 6 (op 2's end, op 3's begin); A removes
 * 400 MiB, leaving 50 MiB = 52428800 bytes, first at op 2. */
static void test_impossible(void **state)
{
    (void)state;
    static const uint64_t mem[] = {100, 400, 400, 400, 400, 900, 900, 500,
                                   400, 400, 400, 400, 400, 100, 100, 100};
    cham_profile_t *p = test_build_profile(PH1, mem, USES1, 3);
    cham_planner_config_t c = cfg_for(PH1, 450, 1024, 1024);
    cham_policy_t *pol = (cham_policy_t *)&c;   /* must be reset to NULL */
    char err[512] = "";
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_OUT_OF_MEMORY);
    assert_null(pol);
    assert_non_null(strstr(err, "52428800 bytes could not be removed at op 2 "));
    assert_non_null(strstr(err, "1 swaps chosen"));

    /* With A below min_swap_bytes there is no candidate at all: 450 MiB. */
    c.min_swap_bytes = 512 * MiB;
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "471859200 bytes could not be removed at op 2 "));
    assert_non_null(strstr(err, "0 swaps chosen"));

    /* Bad configurations. */
    c = cfg_for(PH1, 450, 0, 1024);
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    c = cfg_for(PH1, 450, 1024, 1024);
    c.reserve = 450 * MiB;
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    cham_profile_free(p);
}

/* ---- Eq. 1 and the default rules --------------------------------------- */

static void test_eq1_layers(void **state)
{
    (void)state;
    /* 7 forward ops (one "other" among them), 6 backward, 2 optimizer: 15 s.
     * 3 forward layers of 2, 2, 3 ops (the "other" op 3 counts as forward),
     * 2 backward of 3, 3 ops, one optimizer layer of 2: Eq. 1 gives 1 s per
     * op. */
    static const char ph[] = "FFFXFFFBBBBBBOO";
    uint64_t mem[30];
    for (int i = 0; i < 30; i++)
        mem[i] = 10;
    cham_profile_t *p = test_build_profile(ph, mem, NULL, 0);
    cham_planner_config_t c = cfg_for(ph, 100, 1024, 1024);
    c.forward_layers = 3;
    c.backward_layers = 2;
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 0);
    assert_int_equal(v.n_layers, 6);
    static const uint32_t start[] = {0, 2, 4, 7, 10, 13}, len[] = {2, 2, 3, 3, 3, 2};
    static const cham_phase_t phase[] = {CHAM_PHASE_FORWARD, CHAM_PHASE_FORWARD,
                                         CHAM_PHASE_FORWARD, CHAM_PHASE_BACKWARD,
                                         CHAM_PHASE_BACKWARD, CHAM_PHASE_OPTIMIZER};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(v.layers[i].start_op, start[i]);
        assert_int_equal(v.layers[i].n_ops, len[i]);
        assert_int_equal(v.layers[i].phase, phase[i]);
        assert_int_equal(v.layers[i].time_ns, len[i] * SEC);
    }
    assert_int_equal(v.peak_without_swaps, 10 * MiB);
    assert_int_equal(v.predicted_peak, 10 * MiB);
    cham_policy_free(pol);

    /* Per-op costs as weights of the same step time: op 0 costs 14 of 28. */
    double cost[15];
    for (int i = 0; i < 15; i++)
        cost[i] = 1;
    cost[0] = 14;
    c.op_cost_ns = cost;
    c.n_op_costs = 15;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.layers[0].time_ns, (uint64_t)(15e9 * 15 / 28 + 0.5));
    assert_int_equal(v.layers[1].time_ns, (uint64_t)(15e9 * 2 / 28 + 0.5));
    cham_policy_free(pol);
    c.n_op_costs = 14;
    char err[256];
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_INVALID_ARG);
    cham_profile_free(p);

    /* Default reserve: max(5%, 256 MiB) capped at 20%. */
    cham_planner_config_t d = cham_planner_config_default();
    assert_int_equal(d.reserve, UINT64_MAX);
    assert_int_equal(d.min_swap_bytes, MiB);
    assert_true(d.score_c == 1.0);
}

static void test_default_layer_count(void **state)
{
    (void)state;
    /* Tokens: embed, then (norm, attn, mlp) x 4, then norm, head: norm
     * occurs 5 times, attn and mlp 4: the repeat count is 4. */
    cham_profile_t *p = cham_profile_new(1, 0);
    static const char *names[] = {"embed", "norm", "attn", "mlp", "head"};
    assert_true(cham_profile_set_tokens(p, names, 5));
    int seq[16] = {0}, n = 0;
    seq[n++] = 0;
    for (int l = 0; l < 4; l++) {
        seq[n++] = 1;
        seq[n++] = 2;
        seq[n++] = 3;
    }
    seq[n++] = 1;
    seq[n++] = 4;
    for (int i = 0; i < n; i++) {
        assert_true(cham_profile_begin_op(p, seq[i], CHAM_PHASE_FORWARD, -1, 0));
        cham_profile_end_op(p, 0);
    }
    cham_profile_view_t pv;
    cham_profile_get(p, &pv);
    assert_int_equal(cham_gen_default_layers(&pv), 4);
    cham_profile_free(p);

    /* All tokens distinct: ceil(sqrt(10)) = 4. */
    p = cham_profile_new(1, 0);
    for (int i = 0; i < 10; i++) {
        assert_true(cham_profile_begin_op(p, i, CHAM_PHASE_FORWARD, -1, 0));
        cham_profile_end_op(p, 0);
    }
    cham_profile_get(p, &pv);
    assert_int_equal(cham_gen_default_layers(&pv), 4);
    cham_profile_free(p);
}

/* ---- per-op costs move a swap-in --------------------------------------- */

/* Profile 1: uniform, the swap-in goes before op 5. With op 5 costing 0.1
 * of the others, layer 5 has 8 s * 0.1 / 7.1 = 0.11 s < 0.39 s, so the
 * swap-in moves to layer 4. */
static void test_op_costs_move_swap_in(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH1, MEM1, USES1, 3);
    cham_planner_config_t c = cfg_for(PH1, 800, 1024, 1024);
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    assert_int_equal(v.items[0].swap_in_op, 5);
    cham_policy_free(pol);
    double cost[8] = {1, 1, 1, 1, 1, 0.1, 1, 1};
    c.op_cost_ns = cost;
    c.n_op_costs = 8;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.items[0].swap_in_op, 4);
    assert_int_equal(v.items[0].stall_ns, 0);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- a swap across the step's end covers the tail alone ---------------- */

/* Ops 0-3 forward, 4-7 backward, 8-9 the optimizer, 1 s each; 600 MiB
 * live throughout, capacity 400: 200 over at every sample. Model state:
 * W (400 MiB), a weight whose host copy the caller keeps, read by ops 2
 * and 6; optimizer states S1 and S2 (100 MiB each), used by ops 8 and 9.
 * Both directions carry 200 MiB/s, so W's copy back takes 2 s. Placed
 * first (the largest), W away from op 6 to the next step's op 2 would
 * cover the entries of ops 7-9 and, in the next step, op 0; its copy back
 * may then start only after op 0, at 1 s, and ends at 3 s, 1 s into its
 * use (12.5 s predicted without refinement). With cover_tails W covers
 * ops 7-9 alone, its copy back starts with the next step and ends at
 * 2 s, in time; op 0's entry falls to the states, which are away there
 * anyway (11.5 s). The other waits (W's own copy back before op 6, 1 s,
 * and S2's, 0.5 s) are the same in both. */
static const char PH_T[] = "FFFFBBBBOO";
static const uint64_t MEM_T[] = {600, 600, 600, 600, 600, 600, 600, 600, 600, 600,
                                 600, 600, 600, 600, 600, 600, 600, 600, 600, 600};
static const use_spec_t USES_T[] = {
    {2, 2, 400, false}, {6, 2, 400, false}, {8, 3, 100, true}, {9, 4, 100, true},
};

/* The item of storage 2 (W) that wraps. */
static const cham_policy_item_t *wrapping_w(const cham_policy_view_t *v)
{
    for (size_t i = 0; i < v->n_items; i++)
        if (v->items[i].storage == 2 && v->items[i].wraps)
            return &v->items[i];
    fail_msg("W does not wrap");
    return NULL;
}

static void test_swap_covers_the_tail_alone(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH_T, MEM_T, USES_T, 4);
    for (uint64_t s = 2; s <= 4; s++)
        test_mark_persistent(p, s);
    test_mark_backed(p, 2);
    cham_planner_config_t c = cfg_for(PH_T, 400, 200, 200);
    double cost[10];
    for (size_t k = 0; k < 10; k++)
        cost[k] = 1e9;
    c.op_cost_ns = cost;
    c.n_op_costs = 10;
    c.refine = c.less_memory = c.cover_tails = c.swaps_alone = false;
    cham_policy_view_t v;
    cham_policy_t *pol = plan_ok(p, &c, &v);
    const cham_policy_item_t *w = wrapping_w(&v);
    assert_int_equal(w->swap_in_op, 1);
    assert_int_equal(w->stall_ns, SEC);
    assert_int_equal(v.predicted_step_ns, 12 * SEC + SEC / 2);
    cham_policy_free(pol);

    c.cover_tails = true;
    pol = plan_ok(p, &c, &v);
    w = wrapping_w(&v);
    assert_int_equal(w->swap_in_op, 0);
    assert_int_equal(w->stall_ns, 0);
    assert_int_equal(v.predicted_step_ns, 11 * SEC + SEC / 2);
    assert_int_equal(v.predicted_peak, 400 * MiB);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- a swap-in at its use ---------------------------------------------- */

/* Two optimizer ops (4 and 5, 1 s each after 2 forward and 2 backward
 * ops) each update their own state: S1 (storage 1) and S2 (storage 2),
 * 300 MiB each, persistent; 100 MiB of other memory stays. Capacity 450:
 * at op 4 S2 must be away, at op 5 S1. A window ends a layer before its
 * use (one an op here), so S2's ends before op 4 begins and nothing idle
 * at op 4 can leave: no plan. Windows up to the use let S2 come back when
 * op 5 begins, the op waiting for its copy (300 MiB at 1 GiB/s, 0.29 s),
 * and S1 leave after op 4 with its block given back when op 5 begins
 * (the compute stream waiting for that copy too). Each is away exactly
 * while the other is in use: peak 400 MiB. */
static const char PH_U[] = "FFBBOO";
static const uint64_t MEM_U[] = {700, 700, 700, 700, 700, 700, 700, 700, 700, 700, 700, 700};
static const use_spec_t USES_U[] = {
    {4, 1, 300, false},
    {5, 2, 300, false},
};

static void test_swap_in_at_the_use(void **state)
{
    (void)state;
    cham_profile_t *p = test_build_profile(PH_U, MEM_U, USES_U, 2);
    test_mark_persistent(p, 1);
    test_mark_persistent(p, 2);
    cham_planner_config_t c = cfg_for(PH_U, 450, 1024, 1024);
    c.swap_in_at_use = false;
    cham_policy_t *pol = NULL;
    char err[512] = "";
    assert_int_equal(cham_plan_chameleon(p, &c, &pol, err, sizeof err), CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "could not be removed at op 4 "));

    c.swap_in_at_use = true;
    cham_policy_view_t v;
    pol = plan_ok(p, &c, &v);
    assert_int_equal(v.n_items, 2);
    for (size_t i = 0; i < 2; i++) {
        const cham_policy_item_t *it = &v.items[i];
        assert_true(it->wraps);
        if (it->storage == 2) {
            assert_int_equal(it->use_op, 5);
            assert_int_equal(it->swap_in_op, 5);     /* at its use */
            assert_true(it->stall_ns >= 292968750);  /* the whole copy */
        } else {
            assert_int_equal(it->storage, 1);
            assert_int_equal(it->use_op, 4);
            assert_int_equal(it->free_op, 5);        /* before op 5's swap-in */
            assert_true(it->swap_in_op <= 4);
        }
    }
    assert_int_equal(v.predicted_peak, 400 * MiB);
    /* Both copies stand between op 4 and op 5: the step is 6 s and at
     * least one copy's time longer. */
    assert_true(v.predicted_step_ns >= 6 * SEC + 292968750);
    cham_policy_free(pol);
    cham_profile_free(p);
}

/* ---- property test ----------------------------------------------------- */

/* A random transformer-like step: L model layers of k forward ops, each
 * writing an activation read by the next op and by the mirrored backward
 * op, with random transient spikes; optimizer ops at the end. The memory
 * samples it records (no swaps: the curve without swaps) go to samples,
 * at most MAX_SAMPLES of them, so the test needs no profile code to know
 * the curve. */
#define MAX_SAMPLES 128

static cham_profile_t *random_profile(test_rng_t *r, uint64_t *peak, uint64_t *samples,
                                      size_t *n_samples)
{
    size_t ns = 0;
    uint32_t L = 2 + (uint32_t)test_rng_below(r, 6), k = 1 + (uint32_t)test_rng_below(r, 4);
    uint32_t n_act = L * k;
    assert_true(2 * (2 * (size_t)n_act + 3) <= MAX_SAMPLES);   /* 2 samples an op */
    uint64_t *act = malloc(n_act * sizeof *act);
    cham_profile_t *p = cham_profile_new(1, 0);
    const char *names[] = {"f", "b", "o"};
    assert_true(cham_profile_set_tokens(p, names, 3));
    uint64_t mem = (64 + test_rng_below(r, 512)) * MiB, top = mem;
    for (uint32_t i = 0; i < n_act; i++) {
        act[i] = (1 + test_rng_below(r, 128)) * MiB;
        uint64_t spike = test_rng_below(r, 3) == 0 ? test_rng_below(r, 256) * MiB : 0;
        assert_true(cham_profile_begin_op(p, 0, CHAM_PHASE_FORWARD, -1, mem + spike));
        samples[ns++] = mem + spike;
        if (i > 0) {
            cham_tensor_use_t in = {.storage = i - 1, .bytes = act[i - 1],
                                    .storage_bytes = act[i - 1], .use_count = 1};
            assert_true(cham_profile_add_use(p, &in));
        }
        cham_tensor_use_t o = {.storage = i, .bytes = act[i], .storage_bytes = act[i],
                               .output = true};
        assert_true(cham_profile_add_use(p, &o));
        mem += act[i];
        top = mem + spike > top ? mem + spike : top;
        cham_profile_end_op(p, mem);
        samples[ns++] = mem;
    }
    for (uint32_t j = 0; j < n_act; j++) {
        uint32_t s = n_act - 1 - j;
        assert_true(cham_profile_begin_op(p, 1, CHAM_PHASE_BACKWARD, -1, mem));
        samples[ns++] = mem;
        cham_tensor_use_t in = {.storage = s, .bytes = act[s], .storage_bytes = act[s],
                                .use_count = 2};
        assert_true(cham_profile_add_use(p, &in));
        mem -= act[s];
        cham_profile_end_op(p, mem);
        samples[ns++] = mem;
    }
    for (uint32_t l = 0; l < 1 + test_rng_below(r, 3); l++) {
        assert_true(cham_profile_begin_op(p, 2, CHAM_PHASE_OPTIMIZER, -1, mem));
        cham_profile_end_op(p, mem);
        samples[ns++] = mem;
        samples[ns++] = mem;
    }
    *n_samples = ns;
    cham_profile_set_duration(p, (1 + test_rng_below(r, 100)) * 1000000u);
    free(act);
    *peak = top;
    return p;
}

/* ---- the replay -------------------------------------------------------- */

/* Six ops of 1 s; both link directions 1 GiB/s. A (2 GiB) goes out after
 * op 0, B (1 GiB) after op 1, C (recomputed, 0.5 s) is dropped after op 1;
 * all three blocks come back after op 2 and are made again before op 4;
 * all are used by op 5. The swap-out queue: A [1, 3] s, B behind it [3, 4],
 * so compute waits 1 s for B's block before op 3 (which then runs [4, 5]).
 * Before op 4 the swap-ins queue A [5, 7], B [7, 8], and C runs on the
 * compute stream [5, 5.5]; op 4 runs [5.5, 6.5]; op 5 waits for A (0.5 s)
 * and then for B (1 s). Placed per layer by score, B could have looked
 * free from op 2: the queue is what the executor meets. */
static void test_replay_queues(void **state)
{
    (void)state;
    cham_policy_t *p = cham_policy_new("chameleon");
    assert_non_null(p);
    const cham_policy_item_t items[] = {
        {.storage = 1, .bytes = 2 * GiB, .swap_out_op = 0, .swap_out_done_op = 1, .free_op = 2,
         .swap_in_op = 4, .use_op = 5},
        {.storage = 2, .bytes = 1 * GiB, .swap_out_op = 1, .swap_out_done_op = 1, .free_op = 2,
         .swap_in_op = 4, .use_op = 5},
        {.storage = 3, .bytes = 1 * GiB, .swap_out_op = 1, .swap_out_done_op = 1, .free_op = 2,
         .swap_in_op = 4, .use_op = 5, .recompute = true, .recompute_ns = SEC / 2},
    };
    for (size_t i = 0; i < 3; i++)
        assert_true(cham_policy_add_item(p, &items[i]));
    double op_ns[6] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
    cham_gen_layers_t l = {.op_ns = op_ns};
    assert_true(cham_gen_replay(p, &l, 6, (double)GiB, (double)GiB));
    cham_policy_view_t v;
    cham_policy_get(p, &v);
    assert_int_equal(v.items[0].stall_ns, SEC / 2);
    assert_int_equal(v.items[1].stall_ns, SEC + SEC);
    assert_int_equal(v.items[2].stall_ns, 0);
    cham_policy_free(p);
}

/* Four ops of 1 s; both link directions 1 GiB/s. X (1 GiB) goes out after
 * op 0, its block back after op 1, in before op 2 for op 3. W (3 GiB,
 * model state) goes out after op 3, the step's last, and its block comes
 * free at op 2 of the next step (free_op n + 2), its copy running on; it
 * comes back before op 2 for op 3 there. Alone (from an idle device) the
 * step waits 3 s for W's copy in only and ends at 7 s, W's copy out done
 * at 10. In the steady state that copy holds the link for the first 3 s:
 * X's copy out runs [3, 4] and op 2 waits 2 s for X's block; W's copy in
 * starts after its copy out (3 s) and the one of X: [5, 8], 3 s of
 * waiting again. The replay predicts the second step; the carry is the
 * 2 s the step before's copy cost. */
static void test_replay_runs_on(void **state)
{
    (void)state;
    cham_policy_t *p = cham_policy_new("chameleon");
    assert_non_null(p);
    const cham_policy_item_t items[] = {
        {.storage = 1, .bytes = 1 * GiB, .swap_out_op = 0, .swap_out_done_op = 1, .free_op = 1,
         .swap_in_op = 2, .use_op = 3},
        {.storage = 2, .bytes = 3 * GiB, .swap_out_op = 3, .swap_out_done_op = 5, .free_op = 6,
         .swap_in_op = 2, .use_op = 3, .wraps = true},
    };
    for (size_t i = 0; i < 2; i++)
        assert_true(cham_policy_add_item(p, &items[i]));
    double op_ns[4] = {1e9, 1e9, 1e9, 1e9};
    cham_gen_layers_t l = {.op_ns = op_ns};
    assert_true(cham_gen_replay(p, &l, 4, (double)GiB, (double)GiB));
    cham_policy_view_t v;
    cham_policy_get(p, &v);
    assert_int_equal(v.items[0].stall_ns, 2 * SEC);
    assert_int_equal(v.items[1].stall_ns, 3 * SEC);
    assert_int_equal(v.predicted_carry_ns, 2 * SEC);
    cham_policy_free(p);
}

/* Ops of 1 s; op 0 starts a collective of 3 s the compute stream does not
 * wait for, op 2 one of 0.5 s it waits for: that one queues behind the
 * first (3 s -> 3.5 s), so op 2 ends at 3.5 s, not 3: the replay waits
 * 0.5 s, which the predicted step counts. Without costs of their own the
 * ops' times are shares of a measured step, which already holds its
 * waits: no collective is run. */
static void test_replay_waits_for_collectives(void **state)
{
    (void)state;
    cham_policy_t *p = cham_policy_new("chameleon");
    assert_non_null(p);
    double op_ns[4] = {1e9, 1e9, 1e9, 1e9};
    cham_profile_op_t ops[4] = {{.comm_ns = 3e9}, {0}, {.comm_ns = 0.5e9, .comm_waited = true},
                                {0}};
    cham_gen_layers_t l = {.op_ns = op_ns, .comm = ops};
    assert_true(cham_gen_replay(p, &l, 4, (double)GiB, (double)GiB));
    assert_int_equal(cham_gen_total_stall(p), SEC / 2);
    ops[0].comm_ns = 1.5e9;            /* done before op 2 starts: no wait */
    assert_true(cham_gen_replay(p, &l, 4, (double)GiB, (double)GiB));
    assert_int_equal(cham_gen_total_stall(p), 0);
    ops[0].comm_ns = 3e9;
    ops[2].comm_waited = false;        /* nothing waits for either */
    assert_true(cham_gen_replay(p, &l, 4, (double)GiB, (double)GiB));
    assert_int_equal(cham_gen_total_stall(p), 0);
    ops[2].comm_waited = true;
    l.comm = NULL;
    assert_true(cham_gen_replay(p, &l, 4, (double)GiB, (double)GiB));
    assert_int_equal(cham_gen_total_stall(p), 0);
    cham_policy_free(p);
}

static void test_property_random(void **state)
{
    (void)state;
    int ok = 0, oom = 0, with_items = 0, at_use = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        test_rng_t r = {.state = seed * 0x9E3779B97F4A7C15u};
        uint64_t peak, curve[MAX_SAMPLES];
        size_t ns;
        cham_profile_t *p = random_profile(&r, &peak, curve, &ns);
        cham_profile_view_t pv;
        cham_profile_get(p, &pv);
        assert_int_equal(ns, 2 * pv.n_ops);
        cham_planner_config_t c = cham_planner_config_default();
        c.capacity = peak / 100 * (55 + test_rng_below(&r, 50));
        c.reserve = test_rng_below(&r, 2) ? UINT64_MAX : test_rng_below(&r, 64) * MiB;
        c.h2d_bandwidth = (double)(1 + test_rng_below(&r, 64)) * 1e9;
        c.d2h_bandwidth = (double)(1 + test_rng_below(&r, 64)) * 1e9;
        c.forward_layers = (uint32_t)test_rng_below(&r, 8);
        c.backward_layers = (uint32_t)test_rng_below(&r, 8);
        cham_policy_t *pol = NULL;
        char err[512] = "";
        cham_status_t st = cham_plan_chameleon(p, &c, &pol, err, sizeof err);
        if (st != CHAM_OK) {
            assert_int_equal(st, CHAM_ERR_OUT_OF_MEMORY);
            assert_non_null(strstr(err, "bytes could not be removed at op"));
            oom++;
            cham_profile_free(p);
            continue;
        }
        ok++;
        cham_policy_view_t v;
        cham_policy_get(pol, &v);
        with_items += v.n_items > 0;
        int64_t *diff = calloc(ns + 1, sizeof *diff);
        assert_non_null(diff);
        uint64_t stalls = 0;
        for (size_t i = 0; i < v.n_items; i++) {
            const cham_policy_item_t *it = &v.items[i];
            /* Out before in, in order, in the right layer. */
            assert_true(it->swap_out_op < it->free_op);
            assert_true(it->free_op < it->swap_in_op);
            assert_true(it->swap_in_op <= it->use_op);
            assert_true(it->swap_out_op <= it->swap_out_done_op);
            assert_true(it->swap_in_layer < v.n_layers);
            if (it->swap_in_op == it->use_op) {   /* at its use: the whole copy waited for */
                assert_true(it->stall_ns > 0);
                at_use++;
            } else {
                assert_int_equal(v.layers[it->swap_in_layer].start_op, it->swap_in_op);
            }
            if (i)
                assert_true(v.items[i - 1].swap_out_op <= it->swap_out_op);
            diff[2 * it->free_op] += (int64_t)it->bytes;
            diff[2 * it->swap_in_op] -= (int64_t)it->bytes;
            stalls += it->stall_ns;
        }
        uint64_t out = 0, top = 0, top_without = 0;
        for (size_t s = 0; s < ns; s++) {
            out += (uint64_t)diff[s];
            uint64_t m = curve[s] - out;
            assert_true(m <= v.usable);
            top = m > top ? m : top;
            top_without = curve[s] > top_without ? curve[s] : top_without;
        }
        assert_int_equal(top, v.predicted_peak);
        assert_int_equal(top_without, v.peak_without_swaps);
        assert_int_equal(v.predicted_step_ns, pv.duration_ns + stalls);
        free(diff);
        cham_policy_free(pol);
        cham_profile_free(p);
    }
    printf("property: %d planned (%d with swaps, %d swap-ins at their use), %d impossible\n", ok,
           with_items, at_use, oom);
    assert_true(with_items > 50);
    assert_true(at_use > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_peak),
        cmocka_unit_test(test_model_state_wraps),
        cmocka_unit_test(test_resident_at_end_does_not_wrap),
        cmocka_unit_test(test_backed_leaves_free),
        cmocka_unit_test(test_kept_copy_leaves_free),
        cmocka_unit_test(test_overwritten_comes_back_free),
        cmocka_unit_test(test_score_order),
        cmocka_unit_test(test_swap_in_moves_earlier),
        cmocka_unit_test(test_fallback_stall),
        cmocka_unit_test(test_impossible),
        cmocka_unit_test(test_eq1_layers),
        cmocka_unit_test(test_default_layer_count),
        cmocka_unit_test(test_op_costs_move_swap_in),
        cmocka_unit_test(test_swap_covers_the_tail_alone),
        cmocka_unit_test(test_swap_in_at_the_use),
        cmocka_unit_test(test_replay_queues),
        cmocka_unit_test(test_replay_runs_on),
        cmocka_unit_test(test_replay_waits_for_collectives),
        cmocka_unit_test(test_property_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
