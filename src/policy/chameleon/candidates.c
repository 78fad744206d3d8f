/* The candidate list (paper §5.3): each round of Algorithm 2, the idle
 * tensors (policy/tensors.c) whose window still holds memory reduction
 * entries, scored with Eq. 2. */
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "policy/chameleon/chameleon-impl.h"

void cham_gen_window(const cham_gen_layers_t *l, const cham_gen_tensor_t *t, bool at_use,
                     size_t *lo, size_t *hi)
{
    uint32_t lu = l->layer_of_op[t->first_bwd];
    *lo = 2 * ((size_t)t->last_fwd + 1);
    if (at_use)
        *hi = 2 * (size_t)t->first_bwd;
    else
        *hi = lu == 0 ? 0 : 2 * (size_t)l->v[lu - 1].start_op;
}

/* Descending score, then ascending tensor index (swap-out order). */
static bool cand_before(const cham_gen_cand_t *x, const cham_gen_cand_t *y)
{
    if (x->score != y->score)
        return x->score > y->score;
    return x->tensor < y->tensor;
}

/* Bottom-up merge sort of a[0, n) with tmp[0, n); the result ends in a. */
static void sort_cands(cham_gen_cand_t *a, cham_gen_cand_t *tmp, size_t n)
{
    cham_gen_cand_t *src = a, *dst = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = cand_before(&src[j], &src[i]) ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        cham_gen_cand_t *x = src;
        src = dst;
        dst = x;
    }
    if (src != a)
        for (size_t i = 0; i < n; i++)
            a[i] = src[i];
}

bool cham_gen_candidates(const cham_gen_layers_t *l, const cham_gen_tensor_t *t, size_t n_t,
                         cham_mrl_t *mrl, bool at_use, double score_c, uint64_t max_bytes,
                         cham_gen_cand_t **cl, size_t *cap, size_t *n_cl)
{
    *n_cl = 0;
    /* Room for every tensor twice: the list and the sort's scratch. */
    cham_gen_cand_t *v = cham_grow(*cl, cap, 2 * (n_t ? n_t : 1), sizeof *v, 64);
    if (!v)
        return false;
    *cl = v;
    double n_norm = mrl->initial ? (double)mrl->initial : 1.0;
    double s_norm = max_bytes ? (double)max_bytes : 1.0;
    for (size_t i = 0; i < n_t; i++) {
        if (t[i].chosen)
            continue;
        size_t lo, hi;
        cham_gen_window(l, &t[i], at_use, &lo, &hi);
        size_t c = cham_mrl_count_span(mrl, lo, hi, t[i].wraps);
        if (c == 0)
            continue;
        v[(*n_cl)++] = (cham_gen_cand_t){
            .tensor = (uint32_t)i,
            .n_mre = (uint32_t)c,
            .score = (double)c / n_norm + score_c * ((double)t[i].bytes / s_norm),
        };
    }
    sort_cands(v, v + *n_cl, *n_cl);
    return true;
}
