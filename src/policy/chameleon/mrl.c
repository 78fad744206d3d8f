/* The memory reduction list (paper §5.2) as a segment tree over the samples
 * that are entries when it is built (the others never become one): range
 * subtraction when a swap is chosen, and the queries the candidate list
 * and the placement model need (entries in a range, the last entry in a range,
 * the largest entry), sample ranges mapped to entry ranges through a
 * prefix count. An entry leaves the tree once its excess reaches 0 and
 * never comes back, so each subtraction costs O(log n) amortised. */
#include <stdlib.h>

#include "common/assert.h"
#include "policy/chameleon/chameleon-impl.h"

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

static void build(cham_mrl_node_t *t, size_t x, size_t l, size_t r, const int64_t *ex)
{
    t[x].lazy = 0;
    if (l + 1 == r) {
        t[x].cnt = 1;
        t[x].minp = t[x].maxp = ex[l];
        return;
    }
    size_t m = (l + r) / 2;
    build(t, 2 * x, l, m, ex);
    build(t, 2 * x + 1, m, r, ex);
    pull(t, x);
}

bool cham_mrl_init(cham_mrl_t *m, const uint64_t *curve, size_t n, uint64_t usable)
{
    *m = (cham_mrl_t){.samples = n};
    m->below = malloc((n + 1) * sizeof *m->below);
    if (!m->below)
        return false;
    size_t e = 0;
    for (size_t s = 0; s < n; s++) {
        m->below[s] = (uint32_t)e;
        e += curve[s] > usable;
    }
    m->below[n] = (uint32_t)e;
    m->initial = e;
    if (e == 0)
        return true;
    m->sample = malloc(e * sizeof *m->sample);
    int64_t *ex = malloc(e * sizeof *ex);
    m->t = malloc(4 * e * sizeof *m->t);
    if (!m->sample || !ex || !m->t) {
        free(ex);
        cham_mrl_free(m);
        return false;
    }
    for (size_t s = 0, k = 0; s < n; s++)
        if (curve[s] > usable) {
            uint64_t x = curve[s] - usable;
            m->sample[k] = (uint32_t)s;
            ex[k++] = x > INT64_MAX ? INT64_MAX : (int64_t)x;
        }
    m->n = e;
    build(m->t, 1, 0, e, ex);
    free(ex);
    return true;
}

void cham_mrl_free(cham_mrl_t *m)
{
    free(m->t);
    free(m->below);
    free(m->sample);
    *m = (cham_mrl_t){0};
}

/* Samples [lo, hi) as entries [*a, *b); false when that holds none. */
static bool entries_of(const cham_mrl_t *m, size_t lo, size_t hi, size_t *a, size_t *b)
{
    if (lo >= hi || m->n == 0)
        return false;
    *a = m->below[lo < m->samples ? lo : m->samples];
    *b = m->below[hi < m->samples ? hi : m->samples];
    return *a < *b;
}

/* d < 0. A node whose every entry reaches 0 is emptied whole (cnt 0): the
 * nodes below it are never read again, since every walk stops at a node
 * with no entries, and a node's children are valid while it has some. */
static void add(cham_mrl_node_t *t, size_t x, size_t l, size_t r, size_t lo, size_t hi,
                int64_t d)
{
    if (hi <= l || r <= lo || t[x].cnt == 0)
        return;
    if (lo <= l && r <= hi) {
        if (t[x].minp + d > 0) {
            apply(&t[x], d);
            return;
        }
        if (t[x].maxp + d <= 0 || l + 1 == r) {
            /* maxp + d <= 0: every entry below is removed. */
            t[x].cnt = 0;
            t[x].minp = t[x].maxp = t[x].lazy = 0;
            return;
        }
    }
    push(t, x);
    size_t m = (l + r) / 2;
    add(t, 2 * x, l, m, lo, hi, d);
    add(t, 2 * x + 1, m, r, lo, hi, d);
    pull(t, x);
}

void cham_mrl_subtract(cham_mrl_t *m, size_t lo, size_t hi, uint64_t bytes)
{
    size_t a, b;
    if (bytes == 0 || !entries_of(m, lo, hi, &a, &b))
        return;
    CHAM_ASSERT(hi <= m->samples);
    add(m->t, 1, 0, m->n, a, b, bytes > INT64_MAX ? -INT64_MAX : -(int64_t)bytes);
}

/* Positive entries among entries [0, p): one walk from the root. Counts do not depend
 * on pending additions, so the walks need no push. */
static size_t rank(const cham_mrl_t *m, size_t p)
{
    const cham_mrl_node_t *t = m->t;
    size_t x = 1, l = 0, r = m->n, below = 0;
    /* Node x covers [l, r) and l <= p <= r. */
    for (;;) {
        if (p <= l || t[x].cnt == 0)
            return below;
        if (p >= r)
            return below + t[x].cnt;
        size_t mid = (l + r) / 2;
        if (p <= mid) {
            x = 2 * x;
            r = mid;
        } else {
            below += t[2 * x].cnt;
            x = 2 * x + 1;
            l = mid;
        }
    }
}

/* The entry of the k-th positive entry (0-based, k < positive entries). */
static size_t select_entry(const cham_mrl_t *m, size_t k)
{
    const cham_mrl_node_t *t = m->t;
    size_t x = 1, l = 0, r = m->n;
    while (l + 1 < r) {
        size_t mid = (l + r) / 2;
        if (k < t[2 * x].cnt) {
            x = 2 * x;
            r = mid;
        } else {
            k -= t[2 * x].cnt;
            x = 2 * x + 1;
            l = mid;
        }
    }
    return l;
}

size_t cham_mrl_count(cham_mrl_t *m, size_t lo, size_t hi)
{
    size_t a, b;
    if (!entries_of(m, lo, hi, &a, &b))
        return 0;
    return rank(m, b) - rank(m, a);
}

void cham_mrl_subtract_span(cham_mrl_t *m, size_t lo, size_t hi, bool wraps, uint64_t bytes)
{
    cham_mrl_subtract(m, lo, wraps ? m->samples : hi, bytes);
    if (wraps)
        cham_mrl_subtract(m, 0, hi, bytes);
}

size_t cham_mrl_count_span(cham_mrl_t *m, size_t lo, size_t hi, bool wraps)
{
    return cham_mrl_count(m, lo, wraps ? m->samples : hi) + (wraps ? cham_mrl_count(m, 0, hi) : 0);
}

bool cham_mrl_last(cham_mrl_t *m, size_t lo, size_t hi, size_t *at)
{
    size_t a, b;
    if (!entries_of(m, lo, hi, &a, &b))
        return false;
    size_t k = rank(m, b);
    if (k == 0 || k == rank(m, a))
        return false;
    *at = m->sample[select_entry(m, k - 1)];
    return true;
}

bool cham_mrl_any(const cham_mrl_t *m)
{
    return m->n && m->t[1].cnt;
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
        *at = m->sample[l];
    return (uint64_t)t[x].maxp;
}
