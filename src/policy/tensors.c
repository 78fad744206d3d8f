/* The idle tensors every planner chooses from (paper §5.3): the tensors
 * idle between their last forward use and their first backward use, and
 * the gaps of model state; the profile's uses sorted by storage. */
#include <stdlib.h>
#include <string.h>

#include "common/order.h"
#include "policy/plan-impl.h"

typedef cham_gen_use_ref_t use_ref_t;

static int cmp_use_ref(const void *a, const void *b)
{
    const use_ref_t *x = a, *y = b;
    if (x->storage != y->storage)
        return x->storage < y->storage ? -1 : 1;
    if (x->op != y->op)
        return x->op < y->op ? -1 : 1;
    return (x->use > y->use) - (x->use < y->use);
}

/* Stable sort of r[0, n) by storage, least significant byte first, skipping
 * the bytes all storages share (ids are usually small: one to three
 * passes). tmp holds n. Returns the sorted array (r or tmp). */
static use_ref_t *radix_by_storage(use_ref_t *r, use_ref_t *tmp, size_t n)
{
    size_t cnt[8][256] = {{0}};
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < 8; d++)
            cnt[d][(r[i].storage >> (8 * d)) & 0xff]++;
    for (int d = 0; d < 8; d++) {
        size_t *c = cnt[d];
        if (n == 0 || c[(r[0].storage >> (8 * d)) & 0xff] == n)
            continue;
        size_t at = 0;
        for (int b = 0; b < 256; b++) {
            size_t k = c[b];
            c[b] = at;
            at += k;
        }
        for (size_t i = 0; i < n; i++)
            tmp[c[(r[i].storage >> (8 * d)) & 0xff]++] = r[i];
        use_ref_t *x = r;
        r = tmp;
        tmp = x;
    }
    return r;
}

/* Stable counting sort of t[0, n) by last_fwd (< n_ops) into out, the
 * links between gaps (kept_after) moved with them. Applied to tensors in
 * storage order it gives (last_fwd, storage) order. false when the host is
 * out of memory. */
static bool sort_by_last_fwd(const cham_gen_tensor_t *t, size_t n, size_t n_ops,
                             cham_gen_tensor_t *out)
{
    size_t *c = calloc(n_ops + 1, sizeof *c);
    uint32_t *moved_to = malloc((n ? n : 1) * sizeof *moved_to);
    if (!c || !moved_to) {
        free(c);
        free(moved_to);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        c[t[i].last_fwd + 1]++;
    for (size_t k = 0; k < n_ops; k++)
        c[k + 1] += c[k];
    for (size_t i = 0; i < n; i++) {
        moved_to[i] = (uint32_t)c[t[i].last_fwd];
        out[c[t[i].last_fwd]++] = t[i];
    }
    for (size_t i = 0; i < n; i++)
        if (out[i].kept_after != CHAM_GEN_NO_GAP)
            out[i].kept_after = moved_to[out[i].kept_after];
    free(c);
    free(moved_to);
    return true;
}

cham_gen_use_ref_t *cham_gen_uses_by_storage(const cham_profile_view_t *v)
{
    size_t n = v->n_uses;
    use_ref_t *buf = malloc((n ? 2 * n : 1) * sizeof *buf), *r = buf;
    if (!buf)
        return NULL;
    bool op_order = true;   /* uses numbered in op order, as the builder does */
    size_t next = 0;
    for (size_t k = 0; k < v->n_ops; k++)
        for (uint32_t j = 0; j < v->ops[k].n_uses; j++) {
            uint32_t u = v->ops[k].first_use + j;
            r[u] = (use_ref_t){.storage = v->uses[u].storage, .op = (uint32_t)k, .use = u};
            op_order = op_order && u == next;
            next = (size_t)u + 1;
        }
    /* Sorted by (storage, op, use): in op order, a stable sort by storage. */
    if (op_order && next == n)
        r = radix_by_storage(r, buf + n, n);
    else
        qsort(r, n, sizeof *r, cmp_use_ref);
    if (r != buf)
        memcpy(buf, r, n * sizeof *buf);
    return buf;
}

/* The first of the uses r[i..] recorded at r[i]'s op. */
static size_t first_at_op(const use_ref_t *r, size_t i)
{
    while (i > 0 && r[i - 1].storage == r[i].storage && r[i - 1].op == r[i].op)
        i--;
    return i;
}

/* Does every use at r[i]'s op have the flag (host_backed or overwrites)? */
static bool all_at_op(const cham_profile_view_t *v, const cham_gen_use_ref_t *r, size_t i,
                      bool overwrites)
{
    for (size_t j = first_at_op(r, i);
         j < v->n_uses && r[j].storage == r[i].storage && r[j].op == r[i].op; j++)
        if (!(overwrites ? v->uses[r[j].use].overwrites : v->uses[r[j].use].host_backed))
            return false;
    return true;
}

bool cham_gen_backed_at(const cham_profile_view_t *v, const cham_gen_use_ref_t *r, size_t i)
{
    return all_at_op(v, r, i, false);
}

bool cham_gen_overwritten_at(const cham_profile_view_t *v, const cham_gen_use_ref_t *r,
                             size_t i)
{
    return all_at_op(v, r, i, true);
}

/* The gaps of the persistent storage of uses r[a, b): between two ops that
 * use it with another op in between, and from its last op across the
 * step's end to its first (also when one op is all it has), unless it
 * stays at the step's end. Appends to t,
 * at t[0] the tensors' first index `base`; at most one per op of the
 * storage. Each gap's kept_after is the one before it, the last (the
 * step's end's, whose copy back comes at the step's start) for the
 * first, when no use in between writes the storage. */
static size_t persistent_gaps(const cham_profile_view_t *v, const use_ref_t *r, size_t a,
                              size_t b, size_t base, bool stays_at_end, cham_gen_tensor_t *t)
{
    size_t nt = 0, prev = a;      /* prev: the first use at the previous op */
    bool written = false, written_first = false;   /* since the last gap; before the first */
    for (size_t i = a + 1; i <= b; i++) {
        written = written || v->uses[r[i - 1].use].output;
        if (i < b && r[i].op == r[prev].op)
            continue;
        bool wraps = i == b;
        size_t next = wraps ? a : i;
        /* Across the step's end unless it stays; bytes the caller's host
         * copy backs leave anyway: with no copy, and they come back every
         * step (an optimizer on the host updates them there). */
        bool gap = wraps ? !stays_at_end || cham_gen_backed_at(v, r, prev)
                         : r[next].op > r[prev].op + 1;
        if (gap) {
            if (nt == 0)
                written_first = written;
            t[nt] = (cham_gen_tensor_t){
                .storage = r[a].storage,
                .bytes = v->uses[r[prev].use].storage_bytes,
                .last_fwd = r[prev].op,
                .first_bwd = r[next].op,
                .out_use = r[prev].use,
                .in_use = r[next].use,
                .wraps = wraps,
                .backed = cham_gen_backed_at(v, r, prev),
                .overwritten = cham_gen_overwritten_at(v, r, next),
                .kept_after = written || nt == 0 ? CHAM_GEN_NO_GAP : (uint32_t)(base + nt - 1)};
            nt++;
            written = false;
        }
        prev = i;
    }
    /* The first gap's bytes come from the last's copy back (the step's
     * start): kept if no use before the first gap writes them. */
    if (nt > 0 && !written_first && t[nt - 1].wraps)
        t[0].kept_after = (uint32_t)(base + nt - 1);
    return nt;
}

bool cham_gen_tensors(const cham_profile_view_t *v, const cham_gen_layers_t *l,
                      uint64_t min_bytes, bool persistent, const uint64_t *resident,
                      size_t n_resident, cham_gen_tensor_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t n = v->n_uses;
    use_ref_t *r = cham_gen_uses_by_storage(v);
    cham_gen_tensor_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!r || !t) {
        free(r);
        free(t);
        return false;
    }
    size_t nt = 0;
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && r[b].storage == r[a].storage)
            b++;
        const cham_tensor_use_t *first = &v->uses[r[a].use];
        if (persistent && first->persistent) {
            bool stays = n_resident && bsearch(&r[a].storage, resident, n_resident,
                                               sizeof *resident, cham_order_u64);
            if (first->storage_bytes >= min_bytes && first->storage_bytes > 0)
                nt += persistent_gaps(v, r, a, b, nt, stays, t + nt);
            a = b;
            continue;
        }
        /* The first backward use, and the use before it on an earlier op. */
        size_t u = a;
        while (u < b && l->phase_of_op[r[u].op] != CHAM_PHASE_BACKWARD)
            u++;
        if (u < b && u > a) {
            size_t f = u - 1;
            while (f > a && r[f].op == r[u].op)
                f--;
            f = first_at_op(r, f);
            const cham_tensor_use_t *fu = &v->uses[r[f].use];
            if (r[f].op < r[u].op && l->phase_of_op[r[f].op] == CHAM_PHASE_FORWARD &&
                fu->storage_bytes >= min_bytes && fu->storage_bytes > 0)
                t[nt++] = (cham_gen_tensor_t){.storage = r[a].storage,
                                              .bytes = fu->storage_bytes,
                                              .last_fwd = r[f].op,
                                              .first_bwd = r[u].op,
                                              .out_use = r[f].use,
                                              .in_use = r[u].use,
                                              .backed = cham_gen_backed_at(v, r, f),
                                              .overwritten = cham_gen_overwritten_at(v, r, u),
                                              .kept_after = CHAM_GEN_NO_GAP};
        }
        a = b;
    }
    free(r);
    /* The groups come in storage order: tensors sorted by (last_fwd,
     * storage) after a stable sort by last_fwd. */
    cham_gen_tensor_t *sorted = malloc((nt ? nt : 1) * sizeof *sorted);
    if (!sorted || !sort_by_last_fwd(t, nt, v->n_ops, sorted)) {
        free(sorted);
        free(t);
        return false;
    }
    free(t);
    t = sorted;
    *out = t;
    *n_out = nt;
    return true;
}

uint32_t *cham_gen_kept_next(const cham_gen_tensor_t *t, size_t n)
{
    uint32_t *next = malloc((n ? n : 1) * sizeof *next);
    if (!next)
        return NULL;
    for (size_t i = 0; i < n; i++)
        next[i] = CHAM_GEN_NO_GAP;
    for (size_t i = 0; i < n; i++)
        if (t[i].kept_after != CHAM_GEN_NO_GAP)
            next[t[i].kept_after] = (uint32_t)i;
    return next;
}
