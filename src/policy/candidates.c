/* The candidate list (paper §5.3): the tensors idle between their last
 * forward use and their first backward use, and, each round of Algorithm 2,
 * those whose idle window still holds memory reduction entries, scored
 * with Eq. 2. */
#include <stdlib.h>

#include "common/grow.h"
#include "policy/generate-impl.h"

typedef struct use_ref {
    uint64_t storage;
    uint32_t op, use;
} use_ref_t;

static int cmp_use_ref(const void *a, const void *b)
{
    const use_ref_t *x = a, *y = b;
    if (x->storage != y->storage)
        return x->storage < y->storage ? -1 : 1;
    if (x->op != y->op)
        return x->op < y->op ? -1 : 1;
    return (x->use > y->use) - (x->use < y->use);
}

static int cmp_tensor(const void *a, const void *b)
{
    const cham_gen_tensor_t *x = a, *y = b;
    if (x->last_fwd != y->last_fwd)
        return x->last_fwd < y->last_fwd ? -1 : 1;
    return (x->storage > y->storage) - (x->storage < y->storage);
}

bool cham_gen_tensors(const cham_profile_view_t *v, const cham_gen_layers_t *l,
                      uint64_t min_bytes, cham_gen_tensor_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t n = v->n_uses;
    use_ref_t *r = malloc((n ? n : 1) * sizeof *r);
    cham_gen_tensor_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!r || !t) {
        free(r);
        free(t);
        return false;
    }
    for (size_t k = 0; k < v->n_ops; k++)
        for (uint32_t j = 0; j < v->ops[k].n_uses; j++) {
            uint32_t u = v->ops[k].first_use + j;
            r[u] = (use_ref_t){.storage = v->uses[u].storage, .op = (uint32_t)k, .use = u};
        }
    qsort(r, n, sizeof *r, cmp_use_ref);
    size_t nt = 0;
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && r[b].storage == r[a].storage)
            b++;
        /* The first backward use, and the use before it on an earlier op. */
        size_t u = a;
        while (u < b && l->phase_of_op[r[u].op] != CHAM_PHASE_BACKWARD)
            u++;
        if (u < b && u > a) {
            size_t f = u - 1;
            while (f > a && r[f].op == r[u].op)
                f--;
            /* Take the first use recorded at op f. */
            while (f > a && r[f - 1].op == r[f].op)
                f--;
            const cham_tensor_use_t *fu = &v->uses[r[f].use];
            if (r[f].op < r[u].op && l->phase_of_op[r[f].op] == CHAM_PHASE_FORWARD &&
                fu->storage_bytes >= min_bytes && fu->storage_bytes > 0)
                t[nt++] = (cham_gen_tensor_t){.storage = r[a].storage,
                                              .bytes = fu->storage_bytes,
                                              .last_fwd = r[f].op,
                                              .first_bwd = r[u].op,
                                              .out_use = r[f].use,
                                              .in_use = r[u].use};
        }
        a = b;
    }
    free(r);
    qsort(t, nt, sizeof *t, cmp_tensor);
    *out = t;
    *n_out = nt;
    return true;
}

void cham_gen_window(const cham_gen_layers_t *l, const cham_gen_tensor_t *t, size_t *lo,
                     size_t *hi)
{
    uint32_t lu = l->layer_of_op[t->first_bwd];
    *lo = 2 * ((size_t)t->last_fwd + 1);
    *hi = lu == 0 ? 0 : 2 * (size_t)l->v[lu - 1].start_op;
}

static int cmp_cand(const void *a, const void *b)
{
    const cham_gen_cand_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

bool cham_gen_candidates(const cham_gen_layers_t *l, const cham_gen_tensor_t *t, size_t n_t,
                         cham_mrl_t *mrl, double score_c, uint64_t max_bytes,
                         cham_gen_cand_t **cl, size_t *cap, size_t *n_cl)
{
    *n_cl = 0;
    double n_norm = mrl->initial ? (double)mrl->initial : 1.0;
    double s_norm = max_bytes ? (double)max_bytes : 1.0;
    for (size_t i = 0; i < n_t; i++) {
        if (t[i].chosen)
            continue;
        size_t lo, hi;
        cham_gen_window(l, &t[i], &lo, &hi);
        size_t c = lo < hi ? cham_mrl_count(mrl, lo, hi) : 0;
        if (c == 0)
            continue;
        cham_gen_cand_t *v = cham_grow(*cl, cap, *n_cl + 1, sizeof *v, 64);
        if (!v)
            return false;
        *cl = v;
        v[(*n_cl)++] = (cham_gen_cand_t){
            .tensor = (uint32_t)i,
            .n_mre = (uint32_t)c,
            .score = (double)c / n_norm + score_c * ((double)t[i].bytes / s_norm),
        };
    }
    if (*n_cl > 1)
        qsort(*cl, *n_cl, sizeof **cl, cmp_cand);
    return true;
}
