/* An intrusive AVL tree of free blocks, ordered by (stream id, size,
 * address): the caching allocator's free sets. A lower-bound search on
 * (stream, size, 0) finds the best fit, the smallest free block of that
 * stream with at least size bytes, the lowest address first among equals.
 *
 * Intrusive: the node lives inside the block it orders, so inserting and
 * removing never allocate. Hand-written because no library in Debian fits
 * (libbsd's sys/tree.h fails -Wpedantic -Werror here); see docs/allocator.md. */
#ifndef CHAM_ALLOC_BLOCK_TREE_H
#define CHAM_ALLOC_BLOCK_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A node and its key. The key fields are set by the owner before insertion
 * and must not change while the node is in a tree.
 * Invariants (checked by cham_block_tree_check): in-order keys strictly
 * increase; balance = height(right) - height(left), a missing subtree
 * having height 0, and it is -1, 0 or +1 at every node; every child's parent
 * pointer names its parent and the root's is NULL. Balance factors rather
 * than heights: retracing then never reads a sibling, which is a cache miss
 * in a tree of blocks scattered over memory. */
typedef struct cham_block_tree_node {
    struct cham_block_tree_node *left, *right, *parent;
    int balance;
    int stream;              /* key, most significant */
    size_t size;             /* key */
    uintptr_t addr;          /* key, least significant */
} cham_block_tree_node_t;

typedef struct cham_block_tree {
    cham_block_tree_node_t *root;
    size_t count;
} cham_block_tree_t;

void cham_block_tree_init(cham_block_tree_t *tree);
/* Inserts node, whose key must not be in the tree yet (asserted). */
void cham_block_tree_insert(cham_block_tree_t *tree, cham_block_tree_node_t *node);
/* Removes node, which must be in tree. */
void cham_block_tree_remove(cham_block_tree_t *tree, cham_block_tree_node_t *node);

/* The first node whose key is >= (stream, size, addr), or NULL. */
cham_block_tree_node_t *cham_block_tree_lower_bound(const cham_block_tree_t *tree, int stream,
                                                    size_t size, uintptr_t addr);
/* The node with exactly this key, or NULL. */
cham_block_tree_node_t *cham_block_tree_find(const cham_block_tree_t *tree, int stream,
                                             size_t size, uintptr_t addr);
cham_block_tree_node_t *cham_block_tree_first(const cham_block_tree_t *tree);
cham_block_tree_node_t *cham_block_tree_last(const cham_block_tree_t *tree);
/* In-order neighbours, NULL past either end. */
cham_block_tree_node_t *cham_block_tree_next(const cham_block_tree_node_t *node);
cham_block_tree_node_t *cham_block_tree_prev(const cham_block_tree_node_t *node);

/* Height of the tree (0 when empty), following the taller side. O(log n). */
int cham_block_tree_height(const cham_block_tree_t *tree);

/* The largest size among nodes of stream, 0 if it has none. O(log n). */
size_t cham_block_tree_max_size(const cham_block_tree_t *tree, int stream);

/* Walks the whole tree and checks every invariant above and the count.
 * Returns true if all hold; otherwise false and a reason in why. O(n). */
bool cham_block_tree_check(const cham_block_tree_t *tree, char *why, size_t why_size);

#endif
