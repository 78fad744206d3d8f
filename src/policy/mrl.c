/* The memory reduction list (paper §5.2) as a segment tree over the memory
 * samples: range subtraction when a swap is chosen, and the queries the
 * candidate list and the simulator need (entries in a range, the last
 * entry in a range, the largest entry). An entry leaves the tree once its
 * excess reaches 0 and never comes back, so each subtraction costs
 * O(log n) amortised. */
#include <stdlib.h>

#include "common/assert.h"
#include "policy/generate-impl.h"

static void apply(cham_mrl_node_t *x, int64_t d)
{
    if (x->cnt == 0)
        return;
    x->minp += d;
    x->maxp += d;
    x->lazy += d;
}

static void pull(cham_mrl_node_t *t, size_t x)
{
    cham_mrl_node_t *a = &t[2 * x], *b = &t[2 * x + 1], *p = &t[x];
    p->cnt = a->cnt + b->cnt;
    if (a->cnt && b->cnt) {
        p->minp = a->minp < b->minp ? a->minp : b->minp;
        p->maxp = a->maxp > b->maxp ? a->maxp : b->maxp;
    } else {
        const cham_mrl_node_t *c = a->cnt ? a : b;
        p->minp = c->minp;
        p->maxp = c->maxp;
    }
}

static void push(cham_mrl_node_t *t, size_t x)
{
    if (t[x].lazy) {
        apply(&t[2 * x], t[x].lazy);
        apply(&t[2 * x + 1], t[x].lazy);
        t[x].lazy = 0;
    }
}

static void build(cham_mrl_node_t *t, size_t x, size_t l, size_t r, const uint64_t *curve,
                  uint64_t usable)
{
    t[x].lazy = 0;
    if (l + 1 == r) {
        uint64_t c = curve[l];
        uint64_t e = c > usable ? c - usable : 0;
        t[x].cnt = e > 0;
        t[x].minp = t[x].maxp = e > INT64_MAX ? INT64_MAX : (int64_t)e;
        return;
    }
    size_t m = (l + r) / 2;
    build(t, 2 * x, l, m, curve, usable);
    build(t, 2 * x + 1, m, r, curve, usable);
    pull(t, x);
}

bool cham_mrl_init(cham_mrl_t *m, const uint64_t *curve, size_t n, uint64_t usable)
{
    *m = (cham_mrl_t){.n = n};
    if (n == 0)
        return true;
    m->t = calloc(4 * n, sizeof *m->t);
    if (!m->t)
        return false;
    build(m->t, 1, 0, n, curve, usable);
    m->initial = m->t[1].cnt;
    return true;
}

void cham_mrl_free(cham_mrl_t *m)
{
    free(m->t);
    *m = (cham_mrl_t){0};
}

/* d < 0. */
static void add(cham_mrl_node_t *t, size_t x, size_t l, size_t r, size_t lo, size_t hi,
                int64_t d)
{
    if (hi <= l || r <= lo || t[x].cnt == 0)
        return;
    if (lo <= l && r <= hi && t[x].minp + d > 0) {
        apply(&t[x], d);
        return;
    }
    if (l + 1 == r) {
        /* minp + d <= 0: the entry is removed. */
        t[x].cnt = 0;
        t[x].minp = t[x].maxp = 0;
        return;
    }
    push(t, x);
    size_t m = (l + r) / 2;
    add(t, 2 * x, l, m, lo, hi, d);
    add(t, 2 * x + 1, m, r, lo, hi, d);
    pull(t, x);
}

void cham_mrl_subtract(cham_mrl_t *m, size_t lo, size_t hi, uint64_t bytes)
{
    if (lo >= hi || bytes == 0 || m->n == 0)
        return;
    CHAM_ASSERT(hi <= m->n);
    add(m->t, 1, 0, m->n, lo, hi, bytes > INT64_MAX ? -INT64_MAX : -(int64_t)bytes);
}

static size_t count(const cham_mrl_node_t *t, size_t x, size_t l, size_t r, size_t lo, size_t hi)
{
    if (hi <= l || r <= lo || t[x].cnt == 0)
        return 0;
    if (lo <= l && r <= hi)
        return t[x].cnt;
    size_t m = (l + r) / 2;
    return count(t, 2 * x, l, m, lo, hi) + count(t, 2 * x + 1, m, r, lo, hi);
}

size_t cham_mrl_count(cham_mrl_t *m, size_t lo, size_t hi)
{
    if (lo >= hi || m->n == 0)
        return 0;
    return count(m->t, 1, 0, m->n, lo, hi > m->n ? m->n : hi);
}

/* Counts do not depend on pending additions, so the searches need no push. */
static bool last(const cham_mrl_node_t *t, size_t x, size_t l, size_t r, size_t lo, size_t hi,
                 size_t *at)
{
    if (hi <= l || r <= lo || t[x].cnt == 0)
        return false;
    if (l + 1 == r) {
        *at = l;
        return true;
    }
    size_t m = (l + r) / 2;
    return last(t, 2 * x + 1, m, r, lo, hi, at) || last(t, 2 * x, l, m, lo, hi, at);
}

bool cham_mrl_last(cham_mrl_t *m, size_t lo, size_t hi, size_t *at)
{
    if (lo >= hi || m->n == 0)
        return false;
    return last(m->t, 1, 0, m->n, lo, hi > m->n ? m->n : hi, at);
}

uint64_t cham_mrl_max(cham_mrl_t *m, size_t *at)
{
    if (m->n == 0 || m->t[1].cnt == 0)
        return 0;
    cham_mrl_node_t *t = m->t;
    size_t x = 1, l = 0, r = m->n;
    while (l + 1 < r) {
        push(t, x);
        size_t mid = (l + r) / 2;
        const cham_mrl_node_t *a = &t[2 * x];
        if (a->cnt && a->maxp == t[x].maxp) {
            x = 2 * x;
            r = mid;
        } else {
            x = 2 * x + 1;
            l = mid;
        }
    }
    if (at)
        *at = l;
    return (uint64_t)t[x].maxp;
}
