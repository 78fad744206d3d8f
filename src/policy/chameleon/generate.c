/* Chameleon's policy generator, end to end (paper Algorithm 2): check the
 * inputs, build the logical layers, the memory reduction list and the idle
 * tensors, then choose candidates round by round until the list is empty
 * (or fail naming what could not be removed), and write the policy with its
 * predicted peak and step time. The input checks, the capacity rule and the
 * predictions are shared with the other planners (vdnn.c). docs/policy.md. */
#include <math.h>
#include <stdlib.h>

#include "common/message.h"
#include "policy/chameleon/chameleon-impl.h"
#include "policy/policy-impl.h"

static int cmp_item(const void *a, const void *b)
{
    const cham_policy_item_t *x = a, *y = b;
    if (x->swap_out_op != y->swap_out_op)
        return x->swap_out_op < y->swap_out_op ? -1 : 1;
    return (x->storage > y->storage) - (x->storage < y->storage);
}

/* Everything one run of the generator owns. */
typedef struct gen {
    const cham_profile_view_t *v;
    cham_gen_layers_t layers;
    cham_mrl_t mrl;
    cham_gen_sim_t sim;
    cham_gen_tensor_t *t;
    size_t n_t;
    uint32_t *kept_next;         /* n_t: the gap whose kept_after each is */
    cham_gen_cand_t *cl;
    size_t cap_cl, n_cl;
    cham_gen_recomp_list_t rl;
    cham_policy_t *pol;
    uint64_t *curve, *actual;
    uint64_t max_bytes;
} gen_t;

static void gen_free(gen_t *g)
{
    cham_gen_layers_free(&g->layers);
    cham_mrl_free(&g->mrl);
    cham_gen_sim_free(&g->sim);
    free(g->t);
    free(g->kept_next);
    free(g->cl);
    cham_gen_recompute_list_free(&g->rl);
    free(g->curve);
    free(g->actual);
}

/* The fields every item of t shares; t is chosen from now on. */
static cham_policy_item_t choose(gen_t *g, cham_gen_tensor_t *t)
{
    t->chosen = true;
    cham_policy_item_t it = {
        .storage = t->storage,
        .bytes = t->bytes,
        .out_use = g->v->uses[t->out_use],
        .in_use = g->v->uses[t->in_use],
        .swap_out_op = t->last_fwd,
        .use_op = t->first_bwd,
        .made_op = UINT32_MAX,
        .wraps = t->wraps,
    };
    it.out_use.host_backed = t->backed;   /* every use at its op, not the first only */
    it.out_kept = t->out_kept;
    it.in_use.overwrites = t->overwritten;
    return it;
}

/* Whether t's bytes, when it leaves, are still those a swap-in of this
 * step brought: walking back over the storage's gaps while no use writes
 * it, the first chosen one came back by a copy (t's own, from the step
 * before, when it is the only one). A gap left on the device across the
 * step's end ends the walk: the runtime drops its kept copies there. */
static bool kept_copy(const gen_t *g, const cham_gen_tensor_t *t)
{
    for (uint32_t j = t->kept_after, n = 0; j != CHAM_GEN_NO_GAP && n < g->n_t; n++) {
        const cham_gen_tensor_t *x = &g->t[j];
        if (x == t)
            return !t->overwritten;
        if (x->chosen)
            return x->swapped && !x->overwritten;
        if (x->wraps)
            return false;
        j = x->kept_after;
    }
    return false;
}

/* t now comes back by a copy: the chosen gaps after it whose bytes are
 * still those (kept_copy) copy nothing when they leave, their blocks free
 * right after their last use as a backed one's (the bytes off the list
 * from then on too). */
static void keep_after(gen_t *g, const cham_gen_tensor_t *t)
{
    for (uint32_t j = g->kept_next[t - g->t], n = 0; j != CHAM_GEN_NO_GAP && n < g->n_t; n++) {
        cham_gen_tensor_t *x = &g->t[j];
        if (x == t || (!x->chosen && x->wraps))
            return;
        if (x->chosen) {
            if (x->swapped && !x->backed && !x->out_kept) {
                cham_gen_refund_out(&g->sim, x);
                x->out_kept = true;
                cham_policy_item_t *it = &g->pol->items[x->item];
                uint32_t free_op = x->last_fwd + 1 + g->sim.free_delay;
                if (free_op < it->free_op) {
                    cham_mrl_subtract(&g->mrl, 2 * (size_t)free_op, 2 * (size_t)it->free_op,
                                      x->bytes);
                    it->free_op = free_op;
                }
                it->swap_out_done_op = x->last_fwd;
                it->out_kept = true;
            }
            return;
        }
        j = g->kept_next[j];
    }
}

/* One pass of the placement model over the candidate list (§5.4.1): places, in
 * score order, every candidate that still covers an entry; -1 when the host
 * is out of memory, else how many were placed. The fallback pass
 * (allow_stall) does the same, trying each candidate without a stall
 * first: the paper takes one candidate per fallback, we go on down the
 * list in the same order so that a slow link costs one round, not one per
 * item. */
static long simulate_pass(gen_t *g, bool allow_stall)
{
    long placed = 0;
    for (size_t c = 0; c < g->n_cl && cham_mrl_any(&g->mrl); c++) {
        cham_gen_tensor_t *t = &g->t[g->cl[c].tensor];
        t->out_kept = !t->backed && kept_copy(g, t);
        cham_gen_place_t pl;
        if (!cham_gen_place(&g->sim, &g->mrl, t, false, &pl) &&
            !(allow_stall && cham_gen_place(&g->sim, &g->mrl, t, true, &pl)))
            continue;
        if (!cham_gen_commit(&g->sim, &g->mrl, t, &pl))
            return -1;
        cham_policy_item_t it = choose(g, t);
        t->swapped = true;
        t->item = (uint32_t)g->pol->n_items;
        it.swap_out_done_op = pl.done_op;
        it.free_op = pl.free_op;
        it.swap_in_layer = pl.in_layer;
        it.swap_in_op = pl.in_op;
        it.score = g->cl[c].score;
        it.stall_ns = pl.stall_out_ns + pl.stall_in_ns;
        if (!cham_policy_add_item(g->pol, &it))
            return -1;
        if (!t->overwritten)
            keep_after(g, t);
        placed++;
    }
    return placed;
}

typedef struct storage_index {
    uint64_t storage;
    uint32_t tensor;
} storage_index_t;

static int by_storage(const void *a, const void *b)
{
    uint64_t x = ((const storage_index_t *)a)->storage, y = ((const storage_index_t *)b)->storage;
    return (x > y) - (x < y);
}

/* The tensor of a storage idle at op k, a gap across the step's end
 * included (the first of the storage's if none is: a storage that is not
 * model state has one), from the tensors' index sorted by storage. */
static cham_gen_tensor_t *tensor_of(gen_t *g, const storage_index_t *idx, uint64_t storage,
                                    uint32_t k)
{
    size_t lo = 0, hi = g->n_t;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (idx[mid].storage < storage)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == g->n_t || idx[lo].storage != storage)
        return NULL;
    for (size_t i = lo; i < g->n_t && idx[i].storage == storage; i++) {
        cham_gen_tensor_t *x = &g->t[idx[i].tensor];
        bool idle = x->wraps ? (k > x->last_fwd || k < x->first_bwd)
                             : (x->last_fwd < k && k < x->first_bwd);
        if (idle)
            return x;
    }
    return &g->t[idx[lo].tensor];
}

/* A re-run due at op `at` runs before the waited collectives right before
 * it instead (not before op `lo`): each such collective starts only after
 * the compute stream's work before it and the collectives queued ahead of
 * it, so the re-run runs while those still do, where the compute stream
 * would otherwise wait for them (docs/policy.md, "Recomputation"). */
static uint32_t before_collectives(const cham_profile_view_t *v, uint32_t at, uint32_t lo)
{
    while (at > lo && v->ops[at - 1].comm_waited)
        at--;
    return at;
}

/* Chains of chosen candidates, each made again for the next, at most this
 * long: the runtime recurses through one per link, and a ghost between
 * two is one more (it stops at 64, runtime/recompute.c). With ghosts, a
 * residual stream is a chain through every layer: GPT-2 1.5B's 48 adds
 * went past the runtime's limit. */
#define MAX_CHAIN 8

/* The slot of the chosen candidate that candidate i's input j is (the
 * tensor of that storage idle at op at); -1 when it is none. */
static int32_t chosen_input(gen_t *g, const storage_index_t *idx, const int32_t *slot,
                            const bool *in, size_t i, uint32_t j, uint32_t at)
{
    const cham_gen_recomp_t *c = &g->rl.v[i];
    cham_gen_tensor_t *x = tensor_of(g, idx, g->rl.inputs[c->first_input + j], at);
    int32_t s = x ? slot[x - g->t] : -1;
    return s >= 0 && in[s] ? s : -1;
}

/* Leaves out each chosen candidate at the end of a chain longer than
 * MAX_CHAIN; whether any was. */
static bool cut_chains(gen_t *g, size_t k, const storage_index_t *idx, const int32_t *slot,
                       const uint32_t *at, bool *in, uint32_t *depth)
{
    for (size_t i = 0; i < k; i++)
        depth[i] = 1;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < k; i++) {
            for (uint32_t j = 0; in[i] && j < g->rl.v[i].n_inputs; j++) {
                int32_t s = chosen_input(g, idx, slot, in, i, j, at[i]);
                if (s >= 0 && depth[s] + 1 > depth[i] && depth[i] <= MAX_CHAIN) {
                    depth[i] = depth[s] + 1;
                    changed = true;
                }
            }
        }
    }
    bool cut = false;
    for (size_t i = 0; i < k; i++)
        if (in[i] && depth[i] > MAX_CHAIN) {
            in[i] = false;
            cut = true;
        }
    return cut;
}

/* When each of the first k candidates runs again: at its first backward
 * use (before the waited collectives right before it), or earlier when a
 * chosen candidate that reads it runs earlier (the runtime then makes it
 * first: a chain). One whose point would come before its block is free,
 * or at the end of a chain too long, is left out, and the points are
 * worked out again. slot[t]: the candidate index of tensor t, or -1.
 * depth: k of scratch. */
static void recompute_points(gen_t *g, size_t k, const storage_index_t *idx, const int32_t *slot,
                             uint32_t *at, bool *in, uint32_t *depth)
{
    for (;;) {
        for (size_t i = 0; i < k; i++) {
            const cham_gen_tensor_t *t = &g->t[g->rl.v[i].tensor];
            at[i] = before_collectives(g->v, t->first_bwd, t->last_fwd + 2);
        }
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t i = 0; i < k; i++) {
                for (uint32_t j = 0; in[i] && j < g->rl.v[i].n_inputs; j++) {
                    int32_t s = chosen_input(g, idx, slot, in, i, j, at[i]);
                    if (s >= 0 && at[i] < at[s]) {
                        at[s] = at[i];
                        changed = true;
                    }
                }
            }
        }
        bool removed = cut_chains(g, k, idx, slot, at, in, depth);
        for (size_t i = 0; i < k; i++)
            if (in[i] && at[i] < g->t[g->rl.v[i].tensor].last_fwd + 2) {
                in[i] = false;
                removed = true;
            }
        if (!removed)
            return;
    }
}

/* The first n_recompute candidates of the list become items: dropped
 * after their last forward use, made again at their point (above), their
 * bytes off the list in between. An input that is swapped instead must be
 * back by then: its first backward use moves up to the point. false when
 * the host is out of memory. */
static bool choose_recompute(gen_t *g, size_t n_recompute)
{
    size_t k = n_recompute < g->rl.n ? n_recompute : g->rl.n;
    if (k == 0)
        return true;
    storage_index_t *idx = malloc(g->n_t * sizeof *idx);
    int32_t *slot = malloc(g->n_t * sizeof *slot);
    uint32_t *at = malloc(k * sizeof *at);
    bool *in = malloc(k * sizeof *in);
    uint32_t *depth = malloc(k * sizeof *depth);
    bool ok = idx && slot && at && in && depth;
    if (ok) {
        for (size_t i = 0; i < g->n_t; i++) {
            idx[i] = (storage_index_t){g->t[i].storage, (uint32_t)i};
            slot[i] = -1;
        }
        qsort(idx, g->n_t, sizeof *idx, by_storage);
        for (size_t i = 0; i < k; i++) {
            slot[g->rl.v[i].tensor] = (int32_t)i;
            in[i] = true;
        }
        recompute_points(g, k, idx, slot, at, in, depth);
    }
    for (size_t i = 0; ok && i < k; i++) {
        if (!in[i])
            continue;
        const cham_gen_recomp_t *c = &g->rl.v[i];
        cham_gen_tensor_t *t = &g->t[c->tensor];
        uint32_t f = t->last_fwd;
        cham_mrl_subtract(&g->mrl, 2 * ((size_t)f + 1), 2 * (size_t)at[i], t->bytes);
        cham_policy_item_t it = choose(g, t);
        it.swap_out_done_op = f;
        it.free_op = f + 1;
        it.swap_in_layer = g->layers.layer_of_op[at[i]];
        it.swap_in_op = at[i];
        it.recompute = true;
        it.recompute_ns = (uint64_t)(c->cost_ns + 0.5);
        it.made_op = c->op;
        ok = cham_policy_add_item(g->pol, &it);
        for (uint32_t j = 0; ok && j < c->n_inputs; j++) {
            cham_gen_tensor_t *x = tensor_of(g, idx, g->rl.inputs[c->first_input + j], at[i]);
            if (x && x->wraps && (at[i] > x->last_fwd || at[i] < x->first_bwd))
                x->chosen = true;   /* stays: away, it would be fetched on demand */
            else if (x && !(slot[x - g->t] >= 0 && in[slot[x - g->t]]) && at[i] < x->first_bwd &&
                     at[i] > x->last_fwd)
                x->first_bwd = at[i];
        }
    }
    free(idx);
    free(slot);
    free(at);
    free(in);
    free(depth);
    return ok;
}

static cham_status_t oom(gen_t *g, char *err, size_t err_size)
{
    cham_set_err(err, err_size, "planner: out of host memory (%zu ops)", g->v->n_ops);
    return CHAM_ERR_HOST_OOM;
}

static cham_status_t cannot_remove(gen_t *g, const char *why, char *err, size_t err_size)
{
    size_t at = 0;
    uint64_t left = cham_mrl_max(&g->mrl, &at);
    const cham_profile_op_t *op = &g->v->ops[at / 2];
    const char *name = op->token >= 0 && (size_t)op->token < g->v->n_tokens
                           ? g->v->token_names[op->token]
                           : "?";
    cham_set_err(err, err_size,
                 "planner: %llu bytes could not be removed at op %zu (%s, %s; %zu swaps "
                 "chosen): %s",
                 (unsigned long long)left, at / 2, name, at % 2 ? "end" : "begin",
                 g->pol->n_items, why);
    return CHAM_ERR_OUT_OF_MEMORY;
}

static cham_status_t plan_once(const cham_profile_t *profile,
                               const cham_planner_config_t *config, size_t n_recompute,
                               bool queue, bool cover_tails, bool at_use, size_t *n_recomputable,
                               cham_policy_t **out, char *err, size_t err_size)
{
    cham_profile_view_t v;
    uint64_t capacity = 0, usable = 0;
    cham_status_t st = cham_gen_start("planner", profile, config, out, &v, &capacity, &usable,
                                      err, err_size);
    if (st != CHAM_OK)
        return st;

    gen_t g = {.v = &v};
    size_t ns = 2 * v.n_ops;
    g.pol = cham_policy_new("chameleon");
    g.curve = malloc((ns ? ns : 1) * sizeof *g.curve);
    g.actual = malloc((ns ? ns : 1) * sizeof *g.actual);
    if (!g.pol || !g.curve || !g.actual)
        goto host_oom;
    cham_profile_memory_curve(profile, g.actual, g.curve);
    if (!cham_gen_layers_build(&v, config, &g.layers) ||
        !cham_mrl_init(&g.mrl, g.curve, ns, usable) ||
        !cham_gen_tensors(&v, &g.layers, config->min_swap_bytes, config->model_state,
                          config->resident_at_end, config->n_resident_at_end, &g.t, &g.n_t) ||
        !(g.kept_next = cham_gen_kept_next(g.t, g.n_t)) ||
        !cham_gen_sim_init(&g.sim, &g.layers, config->h2d_bandwidth, config->d2h_bandwidth))
        goto host_oom;
    /* The copy queue needs the ops' real times; with Eq. 1's even shares
     * the paper's layer budgets stay (docs/policy.md, "The copy queues"). */
    if (config->recompute && (!cham_gen_recompute_list(&v, g.t, g.n_t, config->through_freed, &g.rl) ||
                              (queue && g.layers.timed && !cham_gen_sim_queue(&g.sim, v.n_ops))))
        goto host_oom;
    if (!config->overwrites)
        for (size_t i = 0; i < g.n_t; i++)
            g.t[i].overwritten = false;
    *n_recomputable = g.rl.n;
    if (!choose_recompute(&g, n_recompute))
        goto host_oom;
    g.sim.free_delay = config->free_delay_ops;
    g.sim.early_in = config->early_swap_in;
    g.sim.cover_tails = cover_tails;
    g.sim.at_use = at_use;
    for (size_t i = 0; i < g.n_t; i++)
        g.max_bytes = g.t[i].bytes > g.max_bytes ? g.t[i].bytes : g.max_bytes;

    /* Algorithm 2. */
    while (cham_mrl_any(&g.mrl)) {
        if (!cham_gen_candidates(&g.layers, g.t, g.n_t, &g.mrl, at_use, config->score_c,
                                 g.max_bytes, &g.cl, &g.cap_cl, &g.n_cl))
            goto host_oom;
        if (g.n_cl == 0) {
            st = cannot_remove(&g, "no tensor left to swap is idle there", err, err_size);
            if (config->partial)
                break;
            goto fail;
        }
        long placed = simulate_pass(&g, false);
        if (placed == 0)
            placed = simulate_pass(&g, true);
        if (placed < 0)
            goto host_oom;
        if (placed == 0) {
            st = cannot_remove(&g, "no candidate's swaps fit the layers", err, err_size);
            if (config->partial)
                break;
            goto fail;
        }
    }

    /* The policy: items in swap-out order, layers, predictions. */
    cham_policy_t *p = g.pol;
    cham_gen_sim_report(&g.sim);
    if (p->n_items > 1)
        qsort(p->items, p->n_items, sizeof *p->items, cmp_item);
    if (!cham_gen_replay(p, &g.layers, v.n_ops, config->h2d_bandwidth, config->d2h_bandwidth) ||
        !cham_gen_finish(p, &g.layers, &v, g.curve, capacity, usable))
        goto host_oom;
    *out = p;
    g.pol = NULL;
    gen_free(&g);
    return CHAM_OK;

host_oom:
    st = oom(&g, err, err_size);
fail:
    cham_policy_free(g.pol);
    gen_free(&g);
    return st;
}

/* Which windows a plan's swaps have (docs/policy.md, "Logical layers" and
 * "Swap-ins at the use"): those of the model's blocks (the default layer
 * count, then 2, 4 and 8 times as many), finer ones (16, 32, ... times,
 * up to one an op), or either ladder with each window running up to its
 * use, the swap-in issued there if need be. */
typedef enum windows {
    WINDOWS_BLOCKS,
    WINDOWS_PER_OP,
    WINDOWS_AT_USE,
} windows_t;

/* With the default layer count, a profile whose memory cannot be brought
 * under the limit at that granularity is planned again with 2, 4 and 8
 * times as many logical layers (at most one an op): a model whose one
 * block holds a large share of the activations needs windows finer than a
 * block (docs/policy.md). With WINDOWS_PER_OP, the counts past those
 * instead: 16, 32, ... times, up to one an op, for model state streamed
 * through an optimizer phase of a few ops, whose groups' states each come
 * back in a window before their own op's (Llama 2's shape on 4 layers at
 * 40% of its peak on the a100-80g found no policy up to 8 times, and one
 * at one an op). With WINDOWS_AT_USE, every count, the first that plans.
 * Then, if the copy queues were used, with the layers' budgets instead:
 * where the link cannot carry what must move, the queues refuse every copy
 * that would make a later one late, while the budgets' fallback places it
 * with a stall (docs/policy.md, "The copy queues"). */
static cham_status_t plan_layered(const cham_profile_t *profile,
                                  const cham_planner_config_t *config, size_t n_recompute,
                                  windows_t windows, bool cover_tails, size_t *n_recomputable,
                                  cham_policy_t **out, char *err, size_t err_size)
{
    cham_planner_config_t whole = *config;
    whole.partial = false;
    bool queue = true, ladder = !config->forward_layers && !config->backward_layers;
    bool at_use = windows == WINDOWS_AT_USE;
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    uint64_t base = ladder ? cham_gen_default_layers(&v) : 0;
    cham_status_t st = CHAM_ERR_OUT_OF_MEMORY;
    for (uint64_t k = 1; st == CHAM_ERR_OUT_OF_MEMORY; k *= 2) {
        uint64_t layers = k * base;
        if (k > 1 && (!ladder || layers / 2 >= v.n_ops))
            break;                               /* one an op was tried */
        bool blocks = k == 1 || (k <= 8 && layers <= v.n_ops);
        if (!at_use && blocks != (windows == WINDOWS_BLOCKS))
            continue;
        if (k > 1)
            whole.forward_layers = whole.backward_layers =
                (uint32_t)(layers < v.n_ops ? layers : v.n_ops);
        st = plan_once(profile, &whole, n_recompute, queue, cover_tails, at_use,
                       n_recomputable, out, err, err_size);
    }
    if (st == CHAM_ERR_OUT_OF_MEMORY && config->recompute) {
        queue = false;
        st = plan_once(profile, &whole, n_recompute, queue, cover_tails, at_use,
                       n_recomputable, out, err, err_size);
    }
    /* Still none: what can be placed, at the finest layering tried. */
    if (st == CHAM_ERR_OUT_OF_MEMORY && config->partial) {
        whole.partial = true;
        st = plan_once(profile, &whole, n_recompute, queue, cover_tails, at_use,
                       n_recomputable, out, err, err_size);
    }
    return st;
}

/* Whether policy a is better than b: one that fits before one that does
 * not, less left over before more, then the faster predicted step. */
static bool better(const cham_policy_t *a, const cham_policy_t *b)
{
    cham_policy_view_t x, y;
    cham_policy_get(a, &x);
    cham_policy_get(b, &y);
    uint64_t ox = x.predicted_peak > x.usable ? x.predicted_peak - x.usable : 0;
    uint64_t oy = y.predicted_peak > y.usable ? y.predicted_peak - y.usable : 0;
    if (ox != oy)
        return ox < oy;
    return x.predicted_step_ns < y.predicted_step_ns;
}

/* Whether p keeps within the usable memory. */
static bool fits(const cham_policy_t *p)
{
    cham_policy_view_t x;
    cham_policy_get(p, &x);
    return x.predicted_peak <= x.usable;
}

/* Plans with the k cheapest recomputations; keeps *best (and its k) if
 * the new one is not better. Errors other than out of memory stop the
 * search. */
static cham_status_t try_k(const cham_profile_t *profile, const cham_planner_config_t *config,
                           size_t k, windows_t windows, cham_policy_t **best, size_t *best_k,
                           size_t *n, char *err, size_t err_size)
{
    cham_policy_t *p = NULL;
    char e[400] = "";
    cham_status_t st = plan_layered(profile, config, k, windows, false, n, &p, e, sizeof e);
    if (st == CHAM_ERR_OUT_OF_MEMORY)
        return CHAM_OK;
    if (st != CHAM_OK) {
        cham_set_err(err, err_size, "%s", e);
        return st;
    }
    if (!*best || better(p, *best)) {
        cham_policy_free(*best);
        *best = p;
        *best_k = k;
    } else {
        cham_policy_free(p);
    }
    return CHAM_OK;
}

/* The kept policy refined against its replay (refine.c), with the ops'
 * times and the curve of the profile it was planned from; an error only
 * when the host is out of memory. */
static cham_status_t refine(const cham_profile_t *profile, const cham_planner_config_t *config,
                            cham_policy_t *p, char *err, size_t err_size)
{
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    size_t ns = 2 * v.n_ops;
    cham_gen_layers_t layers = {0};
    uint64_t *curve = malloc((ns ? ns : 1) * sizeof *curve);
    uint64_t *actual = malloc((ns ? ns : 1) * sizeof *actual);
    bool ok = curve && actual && cham_gen_layers_build(&v, config, &layers);
    if (ok) {
        cham_profile_memory_curve(profile, actual, curve);
        ok = cham_gen_refine(p, &layers, curve, config->h2d_bandwidth, config->d2h_bandwidth);
    }
    cham_gen_layers_free(&layers);
    free(curve);
    free(actual);
    if (ok)
        return CHAM_OK;
    cham_set_err(err, err_size, "planner: out of host memory (refinement)");
    return CHAM_ERR_HOST_OOM;
}

/* Keeps the better of *best and p (either may be NULL); whether p was. */
static bool keep_better(cham_policy_t **best, cham_policy_t *p)
{
    if (p && (!*best || better(p, *best))) {
        cham_policy_free(*best);
        *best = p;
        return true;
    }
    cham_policy_free(p);
    return false;
}

/* Plans the k cheapest recomputations again under `config` (refined),
 * keeping the result in *best if it predicts better; *kept (if not NULL)
 * says whether it did. CHAM_ERR_OUT_OF_MEMORY: none fits (not kept). */
static cham_status_t try_again(const cham_profile_t *profile, const cham_planner_config_t *config,
                               size_t k, windows_t windows, bool cover_tails, cham_policy_t **best,
                               bool *kept, char *err, size_t err_size)
{
    cham_policy_t *p = NULL;
    size_t n;
    char e[400] = "";
    cham_status_t st = plan_layered(profile, config, k, windows, cover_tails, &n, &p, e, sizeof e);
    if (st != CHAM_OK) {
        cham_set_err(err, err_size, "%s", e);
        return st;
    }
    if (config->refine && (st = refine(profile, config, p, err, err_size)) != CHAM_OK) {
        cham_policy_free(p);
        return st;
    }
    bool won = keep_better(best, p);
    if (kept)
        *kept = won;
    return CHAM_OK;
}

/* Whether placement left a swap across the step's end waiting for its
 * copy back: what planning with cover_tails may do better. */
static bool stalls_across_the_end(const cham_policy_t *p)
{
    cham_policy_view_t v;
    cham_policy_get(p, &v);
    for (size_t i = 0; i < v.n_items; i++)
        if (v.items[i].wraps && v.items[i].stall_ns)
            return true;
    return false;
}

/* The prediction is not monotone in the memory: with a little more room
 * placement may move one more tensor whose copies then hold up the
 * others, and refinement settles elsewhere (docs/policy.md, "Less
 * memory").
 * A policy planned for less memory also fits, so the k found is planned
 * again with LESS_MEMORY_STEPS more hundredths of the capacity kept free,
 * one more each time, and the best prediction kept (*best, refined). */
#define LESS_MEMORY_STEPS 2

static cham_status_t with_less_memory(const cham_profile_t *profile,
                                      const cham_planner_config_t *config, size_t k,
                                      windows_t windows, bool cover_tails, cham_policy_t **best,
                                      char *err, size_t err_size)
{
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    uint64_t capacity, usable;
    cham_status_t st = cham_gen_capacity(&v, config, &capacity, &usable, err, err_size);
    for (int i = 1; i <= LESS_MEMORY_STEPS && st == CHAM_OK; i++) {
        cham_planner_config_t less = *config;
        less.reserve = capacity - usable + (uint64_t)i * (capacity / 100);
        if (less.reserve >= capacity)
            break;
        st = try_again(profile, &less, k, windows, cover_tails, best, NULL, err, err_size);
    }
    return st == CHAM_ERR_OUT_OF_MEMORY ? CHAM_OK : st;   /* less does not fit; nor will still less */
}

/* The k cheapest recomputations (cost per byte) for the k that predicts
 * the best policy: a coarse sweep of 16 points over the candidates, then
 * between the best one's neighbours at finer and finer spacing. *best and
 * *best_k: the best so far (NULL: none). */
static cham_status_t sweep(const cham_profile_t *profile, const cham_planner_config_t *config,
                           windows_t windows, cham_policy_t **best, size_t *best_k, char *err,
                           size_t err_size)
{
    size_t n = 0, m;
    cham_status_t st = try_k(profile, config, 0, windows, best, best_k, &n, err, err_size);
    size_t step = n / 16 ? n / 16 : 1;
    for (size_t k = step; n && st == CHAM_OK; k += step) {
        st = try_k(profile, config, k < n ? k : n, windows, best, best_k, &m, err, err_size);
        if (k >= n)
            break;
    }
    /* Between the best one's neighbours a level at a time, each at an
     * eighth of the spacing before, down to every k: about 16 plans a
     * level, log8(n / 16) levels (every k at once would be n / 8 plans of
     * O(n log n) each). With 128 candidates or fewer the first level is
     * every k. */
    for (size_t s = step; n && s > 1 && st == CHAM_OK;) {
        size_t f = s / 8 ? s / 8 : 1, center = *best_k;
        size_t reach = (s - 1) / f * f;                  /* the farthest d < s */
        size_t below = reach < center ? reach : center ? (center - 1) / f * f : 0;
        for (size_t k = center - below; k <= center + reach && k <= n && st == CHAM_OK; k += f)
            if (k != center && (s != step || k % step != 0))
                st = try_k(profile, config, k, windows, best, best_k, &m, err, err_size);
        s = f;
    }
    return st;
}

/* The windows to plan with after w where no policy fit with w's: finer
 * ones when the layer count is the planner's to choose, then (where the
 * config allows) those up to the use; false when none is left. */
static bool next_windows(const cham_planner_config_t *config, windows_t *w)
{
    bool ladder = !config->forward_layers && !config->backward_layers;
    if (*w == WINDOWS_BLOCKS && ladder) {
        *w = WINDOWS_PER_OP;
        return true;
    }
    if (*w != WINDOWS_AT_USE && config->swap_in_at_use) {
        *w = WINDOWS_AT_USE;
        return true;
    }
    return false;
}

/* Swaps only, as the paper plans them: at a model block's windows and,
 * where no policy fits there, at finer ones, then up to the uses, the
 * best kept. */
static cham_status_t swap_only(const cham_profile_t *profile, const cham_planner_config_t *config,
                               cham_policy_t **out, char *err, size_t err_size)
{
    size_t n = 0;
    cham_policy_t *best = NULL;
    windows_t w = WINDOWS_BLOCKS;
    cham_status_t st;
    do {
        cham_policy_t *p = NULL;
        st = plan_layered(profile, config, 0, w, false, &n, &p, err, err_size);
        if (st != CHAM_OK && st != CHAM_ERR_OUT_OF_MEMORY) {
            cham_policy_free(best);
            return st;
        }
        keep_better(&best, p);
    } while (!(best && fits(best)) && next_windows(config, &w));
    *out = best;
    return best ? CHAM_OK : st;
}

/* The paper's swaps alone, at the layers' link budgets, kept in *best
 * (refined, fitting) where it fits and predicts faster, before its own
 * refinement and after: where little must leave, the copy queues may
 * refuse the few large copies that cover it and the sweep settle on many
 * small moves and re-runs. Refined only where it wins unrefined:
 * refining every one cost a run a third more CPU time for a few more
 * wins (docs/policy.md, "Recomputation"). */
static cham_status_t swaps_alone(const cham_profile_t *profile,
                                 const cham_planner_config_t *config, cham_policy_t **best,
                                 char *err, size_t err_size)
{
    cham_planner_config_t plain = *config;
    plain.recompute = false;
    cham_policy_t *p = NULL;
    cham_status_t st = swap_only(profile, &plain, &p, err, err_size);
    if (st == CHAM_ERR_OUT_OF_MEMORY)
        return CHAM_OK;
    if (st != CHAM_OK || !fits(p) || !better(p, *best)) {
        cham_policy_free(p);
        return st;
    }
    if (config->refine && (st = refine(profile, config, p, err, err_size)) != CHAM_OK) {
        cham_policy_free(p);
        return st;
    }
    keep_better(best, p);
    return CHAM_OK;
}

/* Swaps, and the k cheapest recomputations (cost per byte) for the k that
 * predicts the best policy (one that fits before one that does not, then
 * the fastest step, each re-run priced in), planned against the link
 * budgets of the ops' costs (docs/policy.md, "Recomputation"). Where no
 * policy fits at a model block's windows, the search runs again with
 * finer ones, up to one an op (plan_layered), and where none fits there
 * either, with windows up to the uses; the best is kept: only there, as
 * other windows change which k plan at all and so where the sweep
 * looks. */
static cham_status_t search(const cham_profile_t *profile, const cham_planner_config_t *config,
                            cham_policy_t **out, char *err, size_t err_size)
{
    size_t n = 0;
    cham_policy_t *best = NULL;
    size_t best_k = 0;
    windows_t windows = WINDOWS_BLOCKS, w = WINDOWS_BLOCKS;
    cham_status_t st = sweep(profile, config, w, &best, &best_k, err, err_size);
    while (st == CHAM_OK && !(best && fits(best)) && next_windows(config, &w)) {
        cham_policy_t *other = NULL;
        size_t other_k = 0;
        st = sweep(profile, config, w, &other, &other_k, err, err_size);
        if (other && (!best || better(other, best))) {
            best_k = other_k;
            windows = w;
        }
        keep_better(&best, other);
    }
    if (st != CHAM_OK) {
        cham_policy_free(best);
        return st;
    }
    if (!best)     /* none at any k: the swap-only failure says why */
        return plan_layered(profile, config, 0, w, false, &n, out, err, err_size);
    bool tails = config->cover_tails && stalls_across_the_end(best), tails_kept = false;
    if (config->refine)
        st = refine(profile, config, best, err, err_size);
    /* The k found, with swaps across the step's end free to cover this
     * step's tail alone (placement.c, cham_gen_place), kept where it
     * predicts better: not always so, since the next step's entries left
     * to others may cost more than the wait it saves. */
    if (st == CHAM_OK && tails) {
        st = try_again(profile, config, best_k, windows, true, &best, &tails_kept, err, err_size);
        st = st == CHAM_ERR_OUT_OF_MEMORY ? CHAM_OK : st;
    }
    if (st == CHAM_OK && config->less_memory)
        st = with_less_memory(profile, config, best_k, windows, tails_kept, &best, err, err_size);
    if (st == CHAM_OK && config->swaps_alone && fits(best))
        st = swaps_alone(profile, config, &best, err, err_size);
    if (st != CHAM_OK) {
        cham_policy_free(best);
        return st;
    }
    *out = best;
    return CHAM_OK;
}

/* Whether a use of the profile overwrites a storage used before it. */
static bool has_overwrites(const cham_profile_t *profile)
{
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    for (size_t i = 0; i < v.n_uses; i++)
        if (v.uses[i].overwrites && (v.uses[i].use_count > 0 || v.uses[i].persistent))
            return true;
    return false;
}

/* Swaps only, or with recomputation (search); where a use overwrites a
 * storage, planned again without counting on it and the better
 * prediction kept: the copies back it saves make some tensors cheap to
 * move, and Algorithm 2's score (Eq. 2) does not see what a move costs
 * (docs/policy.md, "A use that overwrites"). */
cham_status_t cham_plan_chameleon(const cham_profile_t *profile,
                                  const cham_planner_config_t *config, cham_policy_t **out,
                                  char *err, size_t err_size)
{
    cham_status_t st = config->recompute ? search(profile, config, out, err, err_size)
                                         : swap_only(profile, config, out, err, err_size);
    if (st != CHAM_OK || !config->overwrites || !has_overwrites(profile))
        return st;
    cham_planner_config_t plain = *config;
    plain.overwrites = false;
    cham_policy_t *other = NULL;
    st = config->recompute ? search(profile, &plain, &other, err, err_size)
                           : swap_only(profile, &plain, &other, err, err_size);
    if (st == CHAM_OK)
        keep_better(out, other);
    if (st == CHAM_ERR_OUT_OF_MEMORY)
        st = CHAM_OK;            /* the first stands */
    if (st != CHAM_OK) {
        cham_policy_free(*out);
        *out = NULL;
    }
    return st;
}
