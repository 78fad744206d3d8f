/* The OOM path's index of storages on the device (issue 47): a passive
 * swap finds its victim, and the path finds the blocks it can give back
 * without a copy, in O(log n) instead of a walk of every live storage.
 *
 * Two AVL trees (the allocator's intrusive block tree, alloc/block_tree.h,
 * keyed here by storage instead of by block):
 *   data    storages with a device block that hold data and have bytes,
 *           by (bytes, newest first): the passive swap's candidates;
 *   unused  storages with a device block that hold no data, newest first:
 *           what oom.c's release_unused gives back.
 * Newest first is the order of ctx->storages, which the walks this
 * replaces followed: ties go the way they went (docs/executor.md, "The OOM
 * path"). Membership follows block, residency and holds_data, which
 * tensor.c, recompute.c and dispatch.c report by calling
 * cham_victims_update after changing them; pins change every op and are
 * not part of it: the queries skip pinned storages, few by construction
 * (the operands of one op). */
#include <stddef.h>
#include <stdio.h>

#include "common/assert.h"
#include "common/output.h"
#include "runtime/runtime-impl.h"

/* The tie key is the storage id, complemented so that ascending order is
 * newest first; it must fit the tree's address field. */
_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t),
               "victims.c keys storages by their 64-bit id in a uintptr_t");

enum { SET_NONE, SET_DATA, SET_UNUSED };

/* The set s belongs in, from its fields alone. */
static uint8_t set_of(const cham_storage_t *s)
{
    if (!s->block ||
        (s->residency != CHAM_RESIDENT_DEVICE && s->residency != CHAM_RESIDENT_MOVING_IN))
        return SET_NONE;
    if (!s->holds_data)
        return SET_UNUSED;
    return s->bytes ? SET_DATA : SET_NONE;
}

static cham_block_tree_t *tree_of(cham_context_t *ctx, uint8_t set)
{
    return set == SET_DATA ? &ctx->oom.data : &ctx->oom.unused;
}

static cham_storage_t *owner(const cham_block_tree_node_t *n)
{
    return n ? (cham_storage_t *)((char *)n - offsetof(cham_storage_t, victim.node)) : NULL;
}

void cham_victims_forget(cham_storage_t *s)
{
    if (s->victim.set == SET_NONE)
        return;
    cham_block_tree_remove(tree_of(s->ctx, s->victim.set), &s->victim.node);
    s->victim.set = SET_NONE;
}

void cham_victims_update(cham_storage_t *s)
{
    uint8_t set = set_of(s);
    if (set == s->victim.set)
        return;
    cham_victims_forget(s);
    if (set == SET_NONE)
        return;
    /* Unused storages are given back all at once: their size is no key. */
    s->victim.node.stream = 0;
    s->victim.node.size = set == SET_DATA ? s->bytes : 0;
    s->victim.node.addr = (uintptr_t)~s->id;
    cham_block_tree_insert(tree_of(s->ctx, set), &s->victim.node);
    s->victim.set = set;
}

bool cham_victims_movable(const cham_context_t *ctx, const cham_storage_t *s)
{
    return set_of(s) == SET_DATA && s->pin != ctx->pin;
}

/* The first movable storage from n on, within storages of `bytes` when
 * same_size, else to the end; NULL if none. */
static cham_storage_t *first_movable(const cham_context_t *ctx, const cham_block_tree_node_t *n,
                                     bool same_size, size_t bytes)
{
    for (; n && (!same_size || n->size == bytes); n = cham_block_tree_next(n))
        if (cham_victims_movable(ctx, owner(n)))
            return owner(n);
    return NULL;
}

cham_storage_t *cham_victims_closest(const cham_context_t *ctx, size_t bytes, bool *enough)
{
    const cham_block_tree_t *t = &ctx->oom.data;
    /* The smallest of at least `bytes`: in-order from the lower bound. */
    const cham_block_tree_node_t *lb = cham_block_tree_lower_bound(t, 0, bytes, 0);
    cham_storage_t *s = first_movable(ctx, lb, false, bytes);
    *enough = s != NULL;
    if (s)
        return s;
    /* Else the largest: size by size downwards, each size newest first,
     * which is in-order from the size's lower bound. */
    const cham_block_tree_node_t *below = lb ? cham_block_tree_prev(lb) : cham_block_tree_last(t);
    while (below) {
        const cham_block_tree_node_t *group = cham_block_tree_lower_bound(t, 0, below->size, 0);
        if ((s = first_movable(ctx, group, true, below->size)))
            return s;
        below = cham_block_tree_prev(group);
    }
    return NULL;
}

cham_storage_t *cham_victims_unused_first(const cham_context_t *ctx)
{
    return owner(cham_block_tree_first(&ctx->oom.unused));
}

cham_storage_t *cham_victims_unused_next(const cham_storage_t *s)
{
    CHAM_ASSERT(s->victim.set == SET_UNUSED);
    return owner(cham_block_tree_next(&s->victim.node));
}

bool cham_victims_valid(const cham_context_t *ctx, char *why, size_t why_size)
{
    size_t n[3] = {0, 0, 0};
    for (const cham_storage_t *s = ctx->storages; s; s = s->next) {
        uint8_t set = set_of(s);
        if (s->victim.set != set) {
            snprintf(why, why_size, "storage %llu \"%s\" is in set %d, belongs in %d",
                     (unsigned long long)s->id, s->label, s->victim.set, set);
            return false;
        }
        n[set]++;
        const cham_block_tree_t *t = set == SET_DATA ? &ctx->oom.data : &ctx->oom.unused;
        if (set != SET_NONE &&
            cham_block_tree_find(t, 0, set == SET_DATA ? s->bytes : 0, (uintptr_t)~s->id) !=
                &s->victim.node) {
            snprintf(why, why_size, "storage %llu \"%s\" is not in its tree under its key",
                     (unsigned long long)s->id, s->label);
            return false;
        }
    }
    if (ctx->oom.data.count != n[SET_DATA] || ctx->oom.unused.count != n[SET_UNUSED]) {
        snprintf(why, why_size, "the trees hold %zu and %zu storages, %zu and %zu belong",
                 ctx->oom.data.count, ctx->oom.unused.count, n[SET_DATA], n[SET_UNUSED]);
        return false;
    }
    return cham_block_tree_check(&ctx->oom.data, why, why_size) &&
           cham_block_tree_check(&ctx->oom.unused, why, why_size);
}

void cham_victims_debug_check(const cham_context_t *ctx)
{
#if CHAM_DEBUG_CHECKS
    char why[256];
    if (!cham_victims_valid(ctx, why, sizeof why)) {
        cham_output("victim index broken: %s", why);
        CHAM_ASSERT(!"victim index broken");
    }
#else
    (void)ctx;
#endif
}
