/* The live-block set of a checked replay (live_set.h): a treap of the live
 * blocks keyed by start address, one node per trace slot.
 * Invariant: the blocks in the tree are pairwise disjoint (checked on every
 * insertion against the predecessor and successor). */
#include "lib/live_set.h"

#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

#define NIL LIVE_SET_NONE

bool live_set_init(live_set_t *c, uint32_t n_slots)
{
    memset(c, 0, sizeof *c);
    size_t n = n_slots ? n_slots : 1;
    c->lo = malloc(n * sizeof *c->lo);
    c->hi = malloc(n * sizeof *c->hi);
    c->left = malloc(n * sizeof *c->left);
    c->right = malloc(n * sizeof *c->right);
    c->prio = malloc(n * sizeof *c->prio);
    c->root = NIL;
    c->rng = 0x2545F4914F6CDD1Dull;
    return c->lo && c->hi && c->left && c->right && c->prio;
}

void live_set_release(live_set_t *c)
{
    free(c->lo);
    free(c->hi);
    free(c->left);
    free(c->right);
    free(c->prio);
}

static uint32_t treap_insert(live_set_t *c, uint32_t t, uint32_t s)
{
    if (t == NIL)
        return s;
    /* near: the side s goes to; far: the other one. */
    bool left = c->lo[s] < c->lo[t];
    uint32_t *near = left ? c->left : c->right, *far = left ? c->right : c->left;
    near[t] = treap_insert(c, near[t], s);
    uint32_t k = near[t];
    if (c->prio[k] <= c->prio[t])
        return t;
    near[t] = far[k];        /* rotate k up */
    far[k] = t;
    return k;
}

static uint32_t treap_merge(live_set_t *c, uint32_t a, uint32_t b)
{
    if (a == NIL)
        return b;
    if (b == NIL)
        return a;
    if (c->prio[a] > c->prio[b]) {
        c->right[a] = treap_merge(c, c->right[a], b);
        return a;
    }
    c->left[b] = treap_merge(c, a, c->left[b]);
    return b;
}

static uint32_t treap_erase(live_set_t *c, uint32_t t, uint32_t s)
{
    if (t == NIL)
        return NIL;
    if (t == s)
        return treap_merge(c, c->left[t], c->right[t]);
    if (c->lo[s] < c->lo[t])
        c->left[t] = treap_erase(c, c->left[t], s);
    else
        c->right[t] = treap_erase(c, c->right[t], s);
    return t;
}

uint32_t live_set_add(live_set_t *c, uint32_t s, uint64_t lo, uint64_t size)
{
    uint64_t hi = lo + size;
    uint32_t pred = NIL, succ = NIL;
    for (uint32_t t = c->root; t != NIL;) {
        if (c->lo[t] <= lo) {
            pred = t;
            t = c->right[t];
        } else {
            succ = t;
            t = c->left[t];
        }
    }
    if (pred != NIL && c->hi[pred] > lo)
        return pred;
    if (succ != NIL && c->lo[succ] < hi)
        return succ;
    c->lo[s] = lo;
    c->hi[s] = hi;
    c->left[s] = c->right[s] = NIL;
    c->prio[s] = (uint32_t)cham_xorshift64(&c->rng);
    c->root = treap_insert(c, c->root, s);
    return NIL;
}

void live_set_remove(live_set_t *c, uint32_t s)
{
    c->root = treap_erase(c, c->root, s);
}
