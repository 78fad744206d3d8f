/* SwapAdvisor as a planner (docs/swapadvisor.md): the dataflow graph keeps
 * what any legal schedule must keep, the genetic operators only make legal
 * schedules, Belady's planning is optimal where it should be, the
 * simulator's timings match a hand computation, the search is
 * deterministic with its seed, the runtime applies its plans bit-exactly
 * and says clearly when a changed op sequence leaves it without one. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "chameleon/swapadvisor.h"
#include "chameleon/workload.h"
#include "policy/swapadvisor/swapadvisor-impl.h"
#include "profile/profile-impl.h"
#include "support/cases.h"
#include "support/gpt_train.h"
#include "support/profile_build.h"
#include "support/rng.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* ---- random profiles ----------------------------------------------------- */

typedef struct rand_prog {
    use_spec_t uses[256];
    size_t n_uses;
    int n_ops;
} rand_prog_t;

/* n_ops ops over a few storages: each op reads or writes one to three of
 * them (writes create what was not there, unless pre: then a first use may
 * read a tensor on the device since before the step), now and then an op
 * using none. */
static void random_prog_pre(test_rng_t *r, int n_ops, bool pre, rand_prog_t *p)
{
    p->n_ops = n_ops;
    p->n_uses = 0;
    bool made[6] = {false};
    for (int k = 0; k < n_ops; k++) {
        if (test_rng_below(r, 8) == 0)
            continue;                      /* no tensor: stays between its neighbours */
        int n = 1 + (int)test_rng_below(r, 3);
        bool used[6] = {false};
        for (int j = 0; j < n; j++) {
            uint64_t s = test_rng_below(r, 6);
            if (used[s])
                continue;
            used[s] = true;
            bool write = !made[s] ? !(pre && test_rng_below(r, 3) == 0)
                                  : test_rng_below(r, 3) == 0;
            made[s] = true;
            p->uses[p->n_uses++] = (use_spec_t){.op = k, .storage = s + 1, .bytes = 1 + s % 3,
                                                .output = write};
        }
    }
}

static void random_prog(test_rng_t *r, int n_ops, rand_prog_t *p)
{
    random_prog_pre(r, n_ops, false, p);
}

static cham_profile_t *prog_profile(const rand_prog_t *p)
{
    char ph[64];
    uint64_t mem[128] = {0};
    for (int k = 0; k < p->n_ops; k++)
        ph[k] = 'F';
    ph[p->n_ops] = '\0';
    return test_build_profile(ph, mem, p->uses, p->n_uses);
}

static void graph_of(const cham_profile_t *prof, double bw, uint64_t usable, sa_graph_t *g)
{
    cham_profile_view_t v;
    cham_profile_get(prof, &v);
    double cost[64];
    for (size_t k = 0; k < v.n_ops; k++)
        cost[k] = 1e9;
    assert_true(sa_graph_build(&v, cost, bw, bw, usable, g));
}

/* Per use in schedule order: the op that last wrote the storage before it
 * (reads) and, per storage, the last writer: what a legal reordering keeps. */
static void reads_from(const cham_profile_view_t *v, const uint32_t *order, int *seen)
{
    int writer[8];
    for (int s = 0; s < 8; s++)
        writer[s] = -1;
    for (size_t u = 0; u < v->n_uses; u++)
        seen[u] = -2;   /* writes */
    for (size_t i = 0; i < v->n_ops; i++) {
        const cham_profile_op_t *op = &v->ops[order[i]];
        for (uint32_t u = op->first_use; u < op->first_use + op->n_uses; u++)
            if (!v->uses[u].output)
                seen[u] = writer[v->uses[u].storage];
        for (uint32_t u = op->first_use; u < op->first_use + op->n_uses; u++)
            if (v->uses[u].output)
                writer[v->uses[u].storage] = (int)order[i];
    }
    for (int s = 0; s < 8; s++)
        seen[v->n_uses + s] = writer[s];
}

/* Mutation and crossover only make legal schedules, and every legal
 * schedule reads what the profile's order read. */
static void test_schedules_stay_legal(void **state)
{
    (void)state;
    test_rng_t r = {.state = 7};
    for (int seed = 0; seed < 200; seed++) {
        rand_prog_t p;
        random_prog(&r, 4 + (int)test_rng_below(&r, 20), &p);
        cham_profile_t *prof = prog_profile(&p);
        cham_profile_view_t v;
        cham_profile_get(prof, &v);
        sa_graph_t g;
        graph_of(prof, 1e9, 100 * MiB, &g);
        uint32_t id[32], a[32], b[32], c[32], scratch[128];
        for (size_t k = 0; k < g.n_ops; k++)
            id[k] = (uint32_t)k;
        int want[300], got[300];
        reads_from(&v, id, want);
        sa_rng_t rng = {.s = (uint64_t)seed};
        sa_schedule_mutate(&g, id, a, 1.0, &rng, scratch);
        sa_schedule_mutate(&g, a, b, 0.3, &rng, scratch);
        sa_genes_t x;
        assert_true(sa_genes_init(&x, &g, 0.1, 0.5));
        sa_chrom_t ca, cb, o1, o2;
        assert_true(sa_chrom_alloc(&g, &ca) && sa_chrom_alloc(&g, &cb) &&
                    sa_chrom_alloc(&g, &o1) && sa_chrom_alloc(&g, &o2));
        memcpy(ca.order, a, g.n_ops * sizeof *a);
        memcpy(cb.order, b, g.n_ops * sizeof *b);
        sa_genes_cross(&x, &ca, &cb, &o1, &o2, &rng, true);
        sa_genes_mutate(&x, &o2, &rng, true);
        const uint32_t *all[] = {a, b, o1.order, o2.order};
        char why[200];
        for (int i = 0; i < 4; i++) {
            if (!sa_schedule_legal(&g, all[i], why, sizeof why))
                fail_msg("seed %d, schedule %d: %s", seed, i, why);
            reads_from(&v, all[i], got);
            assert_memory_equal(got, want, (v.n_uses + 8) * sizeof *got);
        }
        /* The check itself: swapping an op with the one it depends on is
         * caught, a permutation that repeats an op too. */
        for (size_t k = 0; k + 1 < g.n_ops; k++) {
            memcpy(c, id, g.n_ops * sizeof *c);
            c[k] = id[k + 1];
            c[k + 1] = id[k];
            bool dep = false;
            for (uint32_t e = g.pred_start[k + 1]; e < g.pred_start[k + 2]; e++)
                dep = dep || g.preds[e] == k;
            assert_int_equal(sa_schedule_legal(&g, c, why, sizeof why), !dep);
            if (dep)
                assert_non_null(strstr(why, "which it depends on"));
        }
        memcpy(c, id, g.n_ops * sizeof *c);
        c[g.n_ops - 1] = c[0];
        assert_false(sa_schedule_legal(&g, c, why, sizeof why));
        assert_non_null(strstr(why, "scheduled twice"));
        sa_chrom_free(&ca);
        sa_chrom_free(&cb);
        sa_chrom_free(&o1);
        sa_chrom_free(&o2);
        sa_genes_free(&x);
        sa_graph_free(&g);
        cham_profile_free(prof);
    }
}

/* ---- Belady against brute force ------------------------------------------ */

typedef struct paging {
    int n_ops;
    int op_t[16][2];             /* tensors of each op, -1 none */
    bool op_w[16][2];            /* written (created) there */
    int last[16];                /* per tensor, its last op */
    int slots;
} paging_t;

/* The fewest swap-ins any eviction choice needs from op k's j-th tensor on. */
static int brute(const paging_t *p, int k, int j, unsigned resident)
{
    if (k == p->n_ops)
        return 0;
    if (j == 2) {   /* the op runs; tensors at their last use die */
        for (int i = 0; i < 2; i++)
            if (p->op_t[k][i] >= 0 && p->last[p->op_t[k][i]] == k)
                resident &= ~(1u << p->op_t[k][i]);
        return brute(p, k + 1, 0, resident);
    }
    int t = p->op_t[k][j];
    if (t < 0 || (resident >> t & 1))
        return brute(p, k, j + 1, resident);
    int cost = !p->op_w[k][j];
    if (__builtin_popcount(resident) < p->slots)
        return cost + brute(p, k, j + 1, resident | 1u << t);
    int best = 1 << 20;
    for (int v = 0; v < 16; v++) {
        if (!(resident >> v & 1) || v == p->op_t[k][0] || v == p->op_t[k][1])
            continue;
        int c = cost + brute(p, k, j + 1, (resident & ~(1u << v)) | 1u << t);
        best = c < best ? c : best;
    }
    return best;
}

/* With copies too fast to matter, the planner's farthest-next-use choice
 * needs as few swap-ins as the best of all eviction choices. */
static void test_belady_is_optimal(void **state)
{
    (void)state;
    test_rng_t r = {.state = 11};
    int checked = 0;
    for (int seed = 0; seed < 300; seed++) {
        paging_t p = {.n_ops = 6 + (int)test_rng_below(&r, 7), .slots = 2 + (int)test_rng_below(&r, 2)};
        rand_prog_t prog = {.n_ops = p.n_ops};
        int n_t = 0;
        for (int k = 0; k < p.n_ops; k++) {
            p.op_t[k][0] = p.op_t[k][1] = -1;
            int j = 0;
            if (n_t > 0 && test_rng_below(&r, 3) != 0) {
                p.op_t[k][j] = (int)test_rng_below(&r, (uint64_t)n_t);
                p.op_w[k][j++] = false;
            }
            if ((j == 0 || test_rng_below(&r, 2) == 0) && n_t < 12) {
                p.op_t[k][j] = n_t++;
                p.op_w[k][j++] = true;
            }
            for (int i = 0; i < j; i++) {
                p.last[p.op_t[k][i]] = k;
                prog.uses[prog.n_uses++] = (use_spec_t){
                    .op = k, .storage = (uint64_t)p.op_t[k][i] + 1, .bytes = 1,
                    .output = p.op_w[k][i]};
            }
        }
        if (n_t < p.slots)
            continue;
        cham_profile_t *prof = prog_profile(&prog);
        sa_graph_t g;
        graph_of(prof, 1e30, 100 * MiB, &g);
        assert_int_equal(g.n_sizes, 1);
        sa_chrom_t c;
        assert_true(sa_chrom_alloc(&g, &c));
        for (size_t k = 0; k < g.n_ops; k++)
            c.order[k] = (uint32_t)k;
        c.cnt[0] = (uint32_t)p.slots;
        sa_work_t *w = sa_work_new(&g);
        assert_non_null(w);
        sa_eval_result_t res;
        sa_eval(&g, &c, w, &res, NULL, NULL, NULL, NULL);
        int best = brute(&p, 0, 0, 0);
        if ((int)res.n_in != best)
            fail_msg("seed %d: Belady swapped in %u times, the best choice %d", seed, res.n_in,
                     best);
        checked += best > 0;
        sa_work_free(w);
        sa_chrom_free(&c);
        sa_graph_free(&g);
        cham_profile_free(prof);
    }
    assert_true(checked > 50);   /* most cases needed swaps */
}

/* ---- the simulator and the policy, by hand ------------------------------- */

/* Five ops of 1 s, tensors of 1 MiB, a pool of two, copies of 2 s:
 *   op0 writes A, op1 writes B, op2 writes C (room: A leaves, used last),
 *   op3 reads B, op4 reads A.
 * A's copy out runs 1-3 s, so op2 waits from 2 to 3 s; C dies at 4 s and
 * its object takes A back 4-6 s; op3 runs 4-5, op4 waits until 6: 7 s. */
static const use_spec_t hand_uses[] = {
    {0, 1, 1, true}, {1, 2, 1, true}, {2, 3, 1, true}, {3, 2, 1, false}, {4, 1, 1, false},
};

static cham_profile_t *hand_profile(void)
{
    static const uint64_t mem[10] = {0, 1, 1, 2, 2, 2, 2, 1, 1, 0};
    return test_build_profile("FFFBB", mem, hand_uses, 5);
}

static void test_simulator_by_hand(void **state)
{
    (void)state;
    cham_profile_t *prof = hand_profile();
    sa_graph_t g;
    graph_of(prof, 0.5 * (double)MiB, 2 * MiB, &g);
    sa_chrom_t c;
    assert_true(sa_chrom_alloc(&g, &c));
    for (uint32_t k = 0; k < 5; k++)
        c.order[k] = k;
    c.cnt[0] = 2;
    sa_work_t *w = sa_work_new(&g);
    sa_event_t *ev = NULL;
    size_t n_ev = 0;
    double start[5], end[5];
    sa_eval_result_t res;
    assert_true(sa_eval(&g, &c, w, &res, &ev, &n_ev, start, end));
    assert_true(fabs(res.time_ns - 7e9) < 1);
    assert_int_equal(res.n_out, 1);
    assert_int_equal(res.n_in, 1);
    assert_int_equal(res.out_bytes, MiB);
    static const double want_start[5] = {0, 1e9, 3e9, 4e9, 6e9};
    for (int k = 0; k < 5; k++)
        assert_true(fabs(start[k] - want_start[k]) < 1);
    assert_int_equal(n_ev, 2);
    assert_int_equal(ev[0].kind, SA_OUT);
    assert_int_equal(g.storage[ev[0].tensor], 1);
    assert_true(fabs(ev[0].start - 1e9) < 1 && fabs(ev[0].end - 3e9) < 1);
    assert_int_equal(ev[1].kind, SA_IN);
    assert_true(fabs(ev[1].start - 4e9) < 1 && fabs(ev[1].end - 6e9) < 1);
    free(ev);
    sa_work_free(w);
    sa_chrom_free(&c);
    sa_graph_free(&g);

    /* The planner end to end: one pool fits, and its policy says the same
     * in ops: A out after op0, copy done during op2, its block reused from
     * op2 (op2 waited for it), back before op3, used by op4. */
    cham_planner_config_t pc = cham_planner_config_default();
    pc.capacity = 2 * MiB;
    pc.reserve = 0;
    pc.h2d_bandwidth = pc.d2h_bandwidth = 0.5 * (double)MiB;
    cham_swapadvisor_options_t o = cham_swapadvisor_options_default();
    o.generations = 5;
    o.reorder = false;
    cham_policy_t *pol;
    cham_swapadvisor_result_t sr;
    char err[300];
    assert_int_equal(cham_plan_swapadvisor(prof, &pc, &o, &pol, &sr, err, sizeof err), CHAM_OK);
    assert_int_equal(sr.step_ns, 7000000000ull);
    assert_int_equal(sr.ideal_ns, 5000000000ull);
    assert_false(sr.reordered);
    cham_policy_view_t v;
    cham_policy_get(pol, &v);
    assert_string_equal(v.planner, "swapadvisor");
    assert_int_equal(v.n_items, 1);
    const cham_policy_item_t *it = &v.items[0];
    assert_int_equal(it->storage, 1);
    assert_int_equal(it->swap_out_op, 0);
    assert_int_equal(it->swap_out_done_op, 2);
    assert_int_equal(it->free_op, 2);
    assert_int_equal(it->swap_in_op, 3);
    assert_int_equal(it->use_op, 4);
    assert_false(it->wraps);
    cham_policy_free(pol);
    cham_swapadvisor_result_free(&sr);
    cham_profile_free(prof);
}

/* ---- the search ------------------------------------------------------------ */

/* A training step of a few layers from the workload generator. */
static cham_profile_t *llama_profile(uint64_t *peak)
{
    cham_run_config_t c = cham_run_config_default();
    assert_int_equal(cham_model_preset("llama2-7b", &c.model), CHAM_OK);
    c.model.layers = 4;
    c.model.seq = 1024;
    c.model.mbs = 2;
    c.runtime.device.preset = "a100-80g";
    return test_workload_profile(c, "test_swapadvisor_profile.json", peak);
}

static cham_planner_config_t a100(uint64_t capacity)
{
    return test_preset_planner("a100-80g", capacity);
}

/* One seed, one result, however many threads score; bad options and a
 * capacity no pool fits are clear errors. */
static void test_search_deterministic_and_checked(void **state)
{
    (void)state;
    uint64_t peak;
    cham_profile_t *prof = llama_profile(&peak);
    cham_planner_config_t pc = a100(peak / 2);
    cham_swapadvisor_options_t o = cham_swapadvisor_options_default();
    o.generations = 6;
    o.search_seconds = 1e6;   /* the generations end it */
    cham_swapadvisor_result_t r[3];
    char err[400];
    for (int i = 0; i < 3; i++) {
        o.threads = i == 2 ? 1 : 2;
        assert_int_equal(cham_plan_swapadvisor(prof, &pc, &o, NULL, &r[i], err, sizeof err),
                         CHAM_OK);
        assert_false(r[i].stopped_by_time);
        assert_int_equal(r[i].generations, 6);
    }
    for (int i = 1; i < 3; i++) {
        assert_int_equal(r[i].step_ns, r[0].step_ns);
        assert_int_equal(r[i].pool_bytes, r[0].pool_bytes);
        assert_memory_equal(r[i].schedule, r[0].schedule, r[0].n_ops * sizeof *r[0].schedule);
    }
    assert_true(r[0].step_ns >= r[0].ideal_ns);
    assert_true(r[0].swaps_in > 0);
    assert_true(r[0].pool_bytes <= peak / 2);
    for (int i = 0; i < 3; i++)
        cham_swapadvisor_result_free(&r[i]);

    /* Its policy keeps the format's invariants: it reads back. */
    cham_policy_t *pol, *back;
    assert_int_equal(cham_plan_swapadvisor(prof, &pc, &o, &pol, NULL, err, sizeof err), CHAM_OK);
    assert_int_equal(cham_policy_save_json(pol, "test_swapadvisor_policy.json", err, sizeof err),
                     CHAM_OK);
    if (cham_policy_load_json("test_swapadvisor_policy.json", &back, err, sizeof err) != CHAM_OK)
        fail_msg("%s", err);
    remove("test_swapadvisor_policy.json");
    cham_policy_view_t a, b;
    cham_policy_get(pol, &a);
    cham_policy_get(back, &b);
    assert_true(a.n_items > 0);
    assert_int_equal(b.n_items, a.n_items);
    assert_true(a.predicted_peak <= a.capacity);
    cham_policy_free(pol);
    cham_policy_free(back);

    o.population = 1;
    assert_int_equal(cham_plan_swapadvisor(prof, &pc, &o, NULL, NULL, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "population"));
    o = cham_swapadvisor_options_default();
    o.search_seconds = NAN;
    assert_int_equal(cham_plan_swapadvisor(prof, &pc, &o, NULL, NULL, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "search_seconds"));
    o = cham_swapadvisor_options_default();
    pc.capacity = 64 * MiB;
    pol = (cham_policy_t *)&pc;   /* must come back NULL */
    assert_int_equal(cham_plan_swapadvisor(prof, &pc, &o, &pol, NULL, err, sizeof err),
                     CHAM_ERR_OUT_OF_MEMORY);
    assert_null(pol);
    assert_non_null(strstr(err, "no memory pool of 67108864 usable bytes"));
    assert_non_null(strstr(err, "holds every op's tensors at once; op "));
    cham_profile_free(prof);
}

/* ---- tiny profiles, waiting tensors, early stops ------------------------- */

/* Tensors on the device since before the step (read before any write) stay
 * until their first use: A, B, C (1 MiB each) are read first by ops 0, 1
 * and 2; D, E, F, G are written by ops 0-3. No op uses more than three
 * tensors, but op 0 needs four objects at once: A and D, and B and C
 * waiting for ops 1 and 2. */
static const use_spec_t waiting_uses[] = {
    {0, 1, 1, false}, {0, 4, 1, true},  {1, 2, 1, false}, {1, 5, 1, true},
    {2, 3, 1, false}, {2, 4, 1, false}, {2, 6, 1, true},  {3, 5, 1, false},
    {3, 6, 1, false}, {3, 7, 1, true},  {4, 7, 1, false},
};

static cham_profile_t *waiting_profile(void)
{
    static const uint64_t mem[10] = {3, 4, 4, 4, 4, 4, 4, 3, 3, 0};
    return test_build_profile("FFFBB", mem, waiting_uses, 11);
}

/* Search settings the tests cycle through: the defaults, no generation
 * after the first, one, a few, and a time limit the first generation
 * already passes. */
static cham_swapadvisor_options_t early_stop(int i)
{
    cham_swapadvisor_options_t o = cham_swapadvisor_options_default();
    o.threads = 1;
    switch (i % 5) {
    case 1: o.generations = 0; break;
    case 2: o.generations = 1; break;
    case 3: o.generations = 1 + (uint32_t)(i % 10); break;
    case 4: o.search_seconds = 1e-9; break;
    default: break;
    }
    return o;
}

/* A pool one object short of what op 0 needs is refused with the reason;
 * one that fits is found however early the search stops, and its
 * schedule's pool is the four objects. (Before: every candidate failed,
 * the search kept an uninitialised best and crashed reading it.) */
static void test_waiting_tensors_need_room(void **state)
{
    (void)state;
    cham_profile_t *prof = waiting_profile();
    char err[512];
    for (int i = 0; i < 5; i++) {
        cham_swapadvisor_options_t o = early_stop(i);
        cham_planner_config_t pc = a100(3 * MiB);
        cham_policy_t *pol = (cham_policy_t *)&pc;   /* must come back NULL */
        cham_swapadvisor_result_t r;
        assert_int_equal(cham_plan_swapadvisor(prof, &pc, &o, &pol, &r, err, sizeof err),
                         CHAM_ERR_OUT_OF_MEMORY);
        assert_null(pol);
        if (!strstr(err, "no memory pool of 3145728 usable bytes") ||
            !strstr(err, "op 0 (") || !strstr(err, "4194304 bytes on the device at once") ||
            !strstr(err, "wait for their first use"))
            fail_msg("case %d: unexpected message: %s", i, err);

        pc = a100(4 * MiB);
        if (cham_plan_swapadvisor(prof, &pc, &o, &pol, &r, err, sizeof err) != CHAM_OK)
            fail_msg("case %d: %s", i, err);
        assert_int_equal(r.pool_bytes, 4 * MiB);
        assert_true(r.profile_order_ns != UINT64_MAX);
        cham_policy_view_t v;
        cham_policy_get(pol, &v);
        assert_true(v.predicted_peak <= v.usable);
        cham_policy_free(pol);
        cham_swapadvisor_result_free(&r);
    }
    cham_profile_free(prof);
}

/* The repair's minimum is what a schedule needs: a pool it leaves within
 * the usable bytes runs the chromosome's schedule (the search relies on
 * it, and on a best that is always a whole chromosome). */
static void test_repaired_pools_run(void **state)
{
    (void)state;
    test_rng_t r = {.state = 23};
    int fitted = 0;
    for (int seed = 0; seed < 300; seed++) {
        rand_prog_t p;
        random_prog_pre(&r, 1 + (int)test_rng_below(&r, 12), true, &p);
        cham_profile_t *prof = prog_profile(&p);
        if (test_rng_below(&r, 2))
            test_mark_persistent(prof, 1 + test_rng_below(&r, 6));
        sa_graph_t g;
        graph_of(prof, 1e9, (2 + test_rng_below(&r, 10)) * MiB, &g);
        sa_genes_t x;
        assert_true(sa_genes_init(&x, &g, 0.1, 0.5));
        sa_work_t *w = sa_work_new(&g);
        sa_chrom_t c;
        assert_true(w && sa_chrom_alloc(&g, &c));
        sa_rng_t rng = {.s = (uint64_t)seed};
        for (int i = 0; i < 8; i++) {
            sa_genes_random(&x, &c, &rng, i % 2 ? 0.5 : 0, i == 0);
            if (!sa_genes_repair(&x, &c))
                continue;
            sa_eval_result_t res;
            sa_eval(&g, &c, w, &res, NULL, NULL, NULL, NULL);
            if (!isfinite(res.time_ns))
                fail_msg("seed %d, chromosome %d: a repaired pool cannot run its schedule",
                         seed, i);
            fitted++;
        }
        sa_chrom_free(&c);
        sa_work_free(w);
        sa_genes_free(&x);
        sa_graph_free(&g);
        cham_profile_free(prof);
    }
    assert_true(fitted > 500);
}

/* Profiles of 1, 3 and 5 ops (some with an op that uses no tensor, or no
 * tensor at all, model state and tensors there since before the step) at
 * capacities from too small to ample, the search stopped early or not:
 * a policy that fits and reads back, or the reason no pool does. Never a
 * crash. */
static void test_tiny_profiles(void **state)
{
    (void)state;
    test_rng_t r = {.state = 5};
    char err[512];
    int planned = 0, refused = 0;
    for (int i = 0; i < 150; i++) {
        static const int sizes[] = {1, 3, 5};
        rand_prog_t p;
        random_prog_pre(&r, sizes[i % 3], i % 4 != 0, &p);
        if (i % 7 == 0)
            p.n_uses = 0;                      /* ops without tensors */
        cham_profile_t *prof = prog_profile(&p);
        if (i % 2)
            test_mark_persistent(prof, 1 + test_rng_below(&r, 6));
        cham_planner_config_t pc = a100((1 + test_rng_below(&r, 8)) * MiB);
        cham_swapadvisor_options_t o = early_stop(i);
        cham_policy_t *pol = NULL;
        cham_swapadvisor_result_t res;
        cham_status_t st = cham_plan_swapadvisor(prof, &pc, &o, &pol, &res, err, sizeof err);
        if (st == CHAM_OK) {
            cham_policy_view_t v;
            cham_policy_get(pol, &v);
            if (res.profile_order_ns == UINT64_MAX || res.pool_bytes > v.usable)
                fail_msg("case %d: a pool over the memory: %llu of %llu usable bytes", i,
                         (unsigned long long)res.pool_bytes, (unsigned long long)v.usable);
            cham_policy_t *back;
            assert_int_equal(cham_policy_save_json(pol, "test_swapadvisor_tiny.json", err,
                                                   sizeof err), CHAM_OK);
            if (cham_policy_load_json("test_swapadvisor_tiny.json", &back, err, sizeof err) !=
                CHAM_OK)
                fail_msg("case %d: %s", i, err);
            cham_policy_free(back);
            cham_policy_free(pol);
            cham_swapadvisor_result_free(&res);
            planned++;
        } else {
            assert_int_equal(st, CHAM_ERR_OUT_OF_MEMORY);
            assert_null(pol);
            if (strncmp(err, "swapadvisor planner: no memory pool of ", 39) != 0)
                fail_msg("case %d: unexpected message: %s", i, err);
            refused++;
        }
        cham_profile_free(prof);
    }
    remove("test_swapadvisor_tiny.json");
    assert_true(planned > 50 && refused > 5);
}

/* A three-op training step replayed through the runtime, as a framework
 * runs it: W (model state) persists; X and Y, filled by the host before
 * the step, are read by the forward and the backward op; the optimizer
 * updates W. At 4 MiB the default search found no candidate (Y waits
 * through op 0) and crashed in cham_step_end; at every capacity each
 * step now ends OK, planned or not, with no hazard. */
static void test_runtime_three_ops(void **state)
{
    (void)state;
    for (uint64_t cap = 4; cap <= 6; cap++) {
        cham_config_t c = cham_config_default();
        c.device.capacity = cap * MiB;
        c.device.hazard_check = true;
        c.planner = CHAM_PLANNER_SWAPADVISOR;
        c.swapadvisor.threads = 1;
        cham_context_t *ctx;
        assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
        cham_op_token_t tok[3];
        const char *names[] = {"fwd", "bwd", "opt"};
        for (int k = 0; k < 3; k++)
            assert_int_equal(cham_op_token(ctx, names[k], &tok[k]), CHAM_OK);
        cham_tensor_t *w;
        assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "W", &w), CHAM_OK);
        assert_non_null(cham_tensor_data(w));
        for (int step = 0; step < 10; step++) {
            cham_tensor_t *x, *y, *a, *g;
            assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "X", &x), CHAM_OK);
            assert_non_null(cham_tensor_data(x));
            assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "Y", &y), CHAM_OK);
            assert_non_null(cham_tensor_data(y));
            assert_int_equal(cham_phase(ctx, CHAM_PHASE_FORWARD), CHAM_OK);
            assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "A", &a), CHAM_OK);
            cham_tensor_t *in0[] = {x, w};
            assert_int_equal(cham_op_begin(ctx, tok[0], in0, 2, &a, 1), CHAM_OK);
            assert_int_equal(cham_op_end(ctx), CHAM_OK);
            cham_tensor_release(x);
            assert_int_equal(cham_phase(ctx, CHAM_PHASE_BACKWARD), CHAM_OK);
            assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "G", &g), CHAM_OK);
            cham_tensor_t *in1[] = {a, y};
            assert_int_equal(cham_op_begin(ctx, tok[1], in1, 2, &g, 1), CHAM_OK);
            assert_int_equal(cham_op_end(ctx), CHAM_OK);
            cham_tensor_release(a);
            cham_tensor_release(y);
            assert_int_equal(cham_phase(ctx, CHAM_PHASE_OPTIMIZER), CHAM_OK);
            cham_tensor_t *in2[] = {g, w};
            assert_int_equal(cham_op_begin(ctx, tok[2], in2, 2, &w, 1), CHAM_OK);
            assert_int_equal(cham_op_end(ctx), CHAM_OK);
            cham_tensor_release(g);
            if (cham_step_end(ctx) != CHAM_OK)
                fail_msg("%llu MiB, step %d: %s", (unsigned long long)cap, step,
                         cham_context_last_error(ctx));
        }
        assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
        cham_tensor_release(w);
        cham_context_free(ctx);
    }
}

/* ---- applied by the runtime ------------------------------------------------ */

/* The GPT trainer at half its memory, with validations, skipped layers and
 * overflows changing the op sequence: every loss and parameter byte equal
 * the unconstrained run's, no hazard, and each change searched again. */
static void test_trainer_bit_exact(void **state)
{
    (void)state;
    test_train_dynamic_bit_exact(CHAM_STRATEGY_SWAPADVISOR);
}

/* With swapadvisor_fail_on_change, the first step whose sequence differs
 * from the one searched stops the run with a message that says so. */
static void test_changed_sequence_fails_clearly(void **state)
{
    (void)state;
    cham_run_config_t c = cham_run_config_default();
    assert_int_equal(cham_model_preset("llama2-7b", &c.model), CHAM_OK);
    c.model.layers = 4;
    c.model.seq = 1024;
    c.model.mbs = 2;
    c.model.validate_every = 6;
    c.strategy = CHAM_STRATEGY_SWAPADVISOR;
    c.runtime.device.preset = "a100-80g";
    c.runtime.device.capacity = 12 * GiB;
    c.runtime.swapadvisor.generations = 4;
    c.runtime.swapadvisor_fail_on_change = true;
    c.steps = 12;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_ERR_POLICY_MISMATCH);
    if (!strstr(r.error, "swapadvisor plans one static op sequence") ||
        !strstr(r.error, "differs from the one it searched"))
        fail_msg("unexpected message: %s", r.error);
    assert_int_equal(r.fail_step, 6);   /* the first with an evaluation */

    /* Searching again instead: the run completes. */
    c.runtime.swapadvisor_fail_on_change = false;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_OK);
    assert_int_equal(r.hazards, 0);
    assert_true(r.policy_regenerations >= 2);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedules_stay_legal),
        cmocka_unit_test(test_belady_is_optimal),
        cmocka_unit_test(test_simulator_by_hand),
        cmocka_unit_test(test_search_deterministic_and_checked),
        cmocka_unit_test(test_waiting_tensors_need_room),
        cmocka_unit_test(test_repaired_pools_run),
        cmocka_unit_test(test_tiny_profiles),
        cmocka_unit_test(test_runtime_three_ops),
        cmocka_unit_test(test_trainer_bit_exact),
        cmocka_unit_test(test_changed_sequence_fails_clearly),
    };
    /* CTest runs one case a test (tests/CMakeLists.txt, CHAM_SPLIT_TESTS). */
    return test_run_cases(tests, argc, argv, test_data_setup, test_data_teardown);
}
