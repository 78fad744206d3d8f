/* Recomputation candidates: idle tensors whose producing op the caller
 * declared recomputable and can run again at the tensor's first backward
 * use (its inputs there, or made again from state older than the step),
 * ordered cheapest per byte first (docs/policy.md, "Recomputation"). */
#include <stdlib.h>

#include "common/grow.h"
#include "policy/plan-impl.h"

/* Per storage: where its uses are in the profile. */
typedef struct storage_uses {
    uint64_t storage;
    uint32_t first_use;          /* index of its first use */
    uint32_t first_op;           /* the op of that use */
    uint32_t last_op;            /* the op of its last use */
    uint32_t *write_ops;         /* ops of its output uses after the first use */
    uint32_t n_writes;
} storage_uses_t;

static const storage_uses_t *find(const storage_uses_t *s, size_t n, uint64_t storage)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid].storage < storage)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && s[lo].storage == storage ? &s[lo] : NULL;
}

/* Is the storage written by an op in (after, upto]? write_ops ascend (the
 * uses by storage keep the profile's order): the first after `after`,
 * found by bisection, decides. */
static bool written_in(const storage_uses_t *s, uint32_t after, uint32_t upto)
{
    uint32_t lo = 0, hi = s->n_writes;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->write_ops[mid] <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_writes && s->write_ops[lo] <= upto;
}

/* Is the storage on the device's books at op u? Model state (persistent:
 * there before the step and after it) is, whatever its last use in the
 * step: in an accumulating step the weights' shards are last read by the
 * backward's gathers, before the ops that would re-gather them for a
 * recomputation, yet they stay. */
static bool alive_at(const cham_profile_view_t *v, const storage_uses_t *s, uint32_t u)
{
    return s->last_op >= u || v->uses[s->first_use].persistent;
}

static int cmp_cost(const void *a, const void *b)
{
    const cham_gen_recomp_t *x = a, *y = b;
    double cx = x->cost_ns / (double)x->bytes, cy = y->cost_ns / (double)y->bytes;
    if (cx != cy)
        return cx < cy ? -1 : 1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

/* The cost of making storage s again at op u when it is gone by then (its
 * last use is before u), for the candidate `dropped`: its first use is the
 * output of a recomputable op q no later than `by`, nothing writes it
 * after, and every input of q is alive at u and unchanged since q, and
 * existed before the step (its first use reads it: a weight gathered from
 * its shard) unless through_freed (a ghost's record holds its inputs:
 * attention's scores made again from the projections). -1 when it cannot
 * be made again. */
static double rebuild_cost(const cham_profile_view_t *v, const storage_uses_t *su, size_t n_su,
                           const storage_uses_t *s, uint64_t dropped, uint32_t by, uint32_t u,
                           bool through_freed, double mean_op_ns)
{
    uint32_t q = s->first_op;
    const cham_profile_op_t *op = &v->ops[q];
    if (!v->uses[s->first_use].output || !op->recomputable || q > by || written_in(s, q, u))
        return -1;
    for (uint32_t j = 0; j < op->n_uses; j++) {
        const cham_tensor_use_t *in = &v->uses[op->first_use + j];
        if (in->output)
            continue;
        const storage_uses_t *is = find(su, n_su, in->storage);
        if (!is || in->storage == dropped || in->storage == s->storage ||
            (v->uses[is->first_use].output && !through_freed) || !alive_at(v, is, u) ||
            written_in(is, q, u))
            return -1;
    }
    return cham_gen_op_ns(v, q, mean_op_ns);
}

bool cham_gen_recompute_list(const cham_profile_view_t *v, const cham_gen_tensor_t *t,
                             size_t n_t, bool through_freed, cham_gen_recomp_list_t *out)
{
    *out = (cham_gen_recomp_list_t){0};
    bool any = false;
    for (size_t k = 0; k < v->n_ops && !any; k++)
        any = v->ops[k].recomputable;
    if (!any || n_t == 0)
        return true;

    size_t nu = v->n_uses;
    cham_gen_use_ref_t *refs = cham_gen_uses_by_storage(v);
    storage_uses_t *su = malloc(nu * sizeof *su);
    uint32_t *writes = malloc(nu * sizeof *writes);
    out->v = malloc(n_t * sizeof *out->v);
    size_t cap_in = 0;
    out->inputs = cham_grow(NULL, &cap_in, nu, sizeof *out->inputs, 64);
    bool ok = refs && su && writes && out->v && out->inputs;
    size_t n_su = 0, n_in = 0;
    if (ok) {
        size_t n_w = 0;
        for (size_t i = 0; i < nu; i++) {
            if (i == 0 || refs[i].storage != refs[i - 1].storage) {
                su[n_su++] = (storage_uses_t){.storage = refs[i].storage,
                                              .first_use = refs[i].use,
                                              .first_op = refs[i].op,
                                              .write_ops = writes + n_w};
            } else if (v->uses[refs[i].use].output) {
                writes[n_w++] = refs[i].op;
                su[n_su - 1].n_writes++;
            }
            su[n_su - 1].last_op = refs[i].op;
        }
    }
    double mean_op_ns = v->n_ops ? (double)v->duration_ns / (double)v->n_ops : 0;
    for (size_t i = 0; ok && i < n_t; i++) {
        const cham_gen_tensor_t *x = &t[i];
        const storage_uses_t *s = find(su, n_su, x->storage);
        /* Model state is no op's output of this step: never made again. */
        if (!s || !v->uses[s->first_use].output || v->uses[x->out_use].persistent)
            continue;
        uint32_t p = s->first_op, f = x->last_fwd, u = x->first_bwd;
        const cham_profile_op_t *op = &v->ops[p];
        if (!op->recomputable || p > f || written_in(s, p, u))
            continue;
        bool usable = true;
        size_t mark = n_in;
        double cost = cham_gen_op_ns(v, p, mean_op_ns);
        for (uint32_t j = 0; j < op->n_uses && usable; j++) {
            const cham_tensor_use_t *in = &v->uses[op->first_use + j];
            if (in->output)
                continue;
            const storage_uses_t *is = find(su, n_su, in->storage);
            /* Alive at u and unchanged since p, or made again first: then
             * alive when x is dropped (after f), for the runtime keeps an
             * op's record, and holds its inputs, only from a drop on; or,
             * through_freed, freed before: the runtime keeps it as a ghost
             * (runtime/recompute.c). */
            usable = in->storage != x->storage && is && !written_in(is, p, u);
            bool rebuilt = usable && !alive_at(v, is, u);
            if (rebuilt) {
                usable = through_freed || is->last_op >= f;
                double extra =
                    rebuild_cost(v, su, n_su, is, x->storage, p, u, through_freed, mean_op_ns);
                usable = usable && extra >= 0;
                cost += extra;
            }
            /* A rebuilt input's op's inputs are the re-run's too: what the
             * plan moves of them must be back by then (generate.c). */
            const cham_profile_op_t *q = rebuilt && usable ? &v->ops[is->first_op] : NULL;
            uint64_t *grown = cham_grow(out->inputs, &cap_in, n_in + 1 + (q ? q->n_uses : 0),
                                        sizeof *out->inputs, 64);
            if (!grown) {
                ok = false;
                break;
            }
            out->inputs = grown;
            out->inputs[n_in++] = in->storage;
            for (uint32_t k = 0; q && k < q->n_uses; k++)
                if (!v->uses[q->first_use + k].output)
                    out->inputs[n_in++] = v->uses[q->first_use + k].storage;
        }
        if (!ok)
            break;
        if (!usable) {
            n_in = mark;
            continue;
        }
        out->v[out->n++] = (cham_gen_recomp_t){
            .tensor = (uint32_t)i, .op = p, .storage = x->storage, .bytes = x->bytes,
            .cost_ns = cost,
            .first_input = (uint32_t)mark, .n_inputs = (uint32_t)(n_in - mark)};
    }
    free(refs);
    free(su);
    free(writes);
    if (!ok) {
        cham_gen_recompute_list_free(out);
        return false;
    }
    qsort(out->v, out->n, sizeof *out->v, cmp_cost);   /* cheapest per byte first */
    return true;
}

void cham_gen_recompute_list_free(cham_gen_recomp_list_t *rl)
{
    free(rl->v);
    free(rl->inputs);
    *rl = (cham_gen_recomp_list_t){0};
}
