/* The AVL tree of free blocks (see block_tree.h): insertion and removal
 * with parent pointers and balance factors, retracing upward until a
 * subtree's height stops changing; lower-bound search; in-order stepping;
 * an O(n) checker. */
#include "alloc/block_tree.h"

#include <stdio.h>

#include "common/assert.h"

typedef cham_block_tree_node_t node_t;

/* <0, 0, >0 as node's key is below, equal to, above (stream, size, addr). */
static inline int key_cmp(const node_t *n, int stream, size_t size, uintptr_t addr)
{
    if (n->stream != stream)
        return n->stream < stream ? -1 : 1;
    if (n->size != size)
        return n->size < size ? -1 : 1;
    if (n->addr != addr)
        return n->addr < addr ? -1 : 1;
    return 0;
}

/* Hangs n where old hung under parent (or at the root). */
static inline void link_under(cham_block_tree_t *t, node_t *parent, bool left, node_t *n)
{
    if (!parent)
        t->root = n;
    else if (left)
        parent->left = n;
    else
        parent->right = n;
    if (n)
        n->parent = parent;
}

static inline void set_parent(node_t *child, node_t *parent)
{
    if (child)
        child->parent = parent;
}

/* The four rotations at x, whose subtree is two levels taller on one side
 * (z is x's child on that side). Each returns the subtree's new root, whose
 * parent link the caller sets. Balance updates follow the textbook cases;
 * z->balance == 0 happens only in removals and leaves the height unchanged. */
static node_t *rotate_left(node_t *x, node_t *z)
{
    x->right = z->left;
    set_parent(z->left, x);
    z->left = x;
    x->parent = z;
    if (z->balance == 0) {
        x->balance = 1;
        z->balance = -1;
    } else {
        x->balance = 0;
        z->balance = 0;
    }
    return z;
}

static node_t *rotate_right(node_t *x, node_t *z)
{
    x->left = z->right;
    set_parent(z->right, x);
    z->right = x;
    x->parent = z;
    if (z->balance == 0) {
        x->balance = -1;
        z->balance = 1;
    } else {
        x->balance = 0;
        z->balance = 0;
    }
    return z;
}

/* z = x->right is left-heavy: y = z->left becomes the root. */
static node_t *rotate_right_left(node_t *x, node_t *z)
{
    node_t *y = z->left;
    z->left = y->right;
    set_parent(y->right, z);
    y->right = z;
    z->parent = y;
    x->right = y->left;
    set_parent(y->left, x);
    y->left = x;
    x->parent = y;
    x->balance = y->balance > 0 ? -1 : 0;
    z->balance = y->balance < 0 ? 1 : 0;
    y->balance = 0;
    return y;
}

/* z = x->left is right-heavy: y = z->right becomes the root. */
static node_t *rotate_left_right(node_t *x, node_t *z)
{
    node_t *y = z->right;
    z->right = y->left;
    set_parent(y->left, z);
    y->left = z;
    z->parent = y;
    x->left = y->right;
    set_parent(y->right, x);
    y->right = x;
    x->parent = y;
    x->balance = y->balance < 0 ? 1 : 0;
    z->balance = y->balance > 0 ? -1 : 0;
    y->balance = 0;
    return y;
}

/* After z's subtree grew by one level: walk up until a node absorbs it. */
static void retrace_insert(cham_block_tree_t *t, node_t *z)
{
    for (node_t *x = z->parent; x; x = z->parent) {
        if (z == x->right) {
            if (x->balance > 0) {            /* +2: rotate, height restored */
                node_t *g = x->parent;
                bool left = g && g->left == x;
                node_t *n = z->balance < 0 ? rotate_right_left(x, z) : rotate_left(x, z);
                link_under(t, g, left, n);
                return;
            }
            if (x->balance < 0) {
                x->balance = 0;
                return;
            }
            x->balance = 1;
        } else {
            if (x->balance < 0) {
                node_t *g = x->parent;
                bool left = g && g->left == x;
                node_t *n = z->balance > 0 ? rotate_left_right(x, z) : rotate_right(x, z);
                link_under(t, g, left, n);
                return;
            }
            if (x->balance > 0) {
                x->balance = 0;
                return;
            }
            x->balance = -1;
        }
        z = x;
    }
}

/* After x's left (left_shrank) or right subtree lost a level: walk up until
 * a subtree keeps its height. */
static void retrace_remove(cham_block_tree_t *t, node_t *x, bool left_shrank)
{
    while (x) {
        node_t *g = x->parent;
        bool x_left = g && g->left == x;
        node_t *n;
        int zb;
        if (left_shrank) {
            if (x->balance > 0) {
                node_t *z = x->right;
                zb = z->balance;
                n = zb < 0 ? rotate_right_left(x, z) : rotate_left(x, z);
            } else if (x->balance == 0) {
                x->balance = 1;              /* same height, now right-heavy */
                return;
            } else {
                x->balance = 0;              /* one level lower: go on */
                x = g;
                left_shrank = x_left;
                continue;
            }
        } else {
            if (x->balance < 0) {
                node_t *z = x->left;
                zb = z->balance;
                n = zb > 0 ? rotate_left_right(x, z) : rotate_right(x, z);
            } else if (x->balance == 0) {
                x->balance = -1;
                return;
            } else {
                x->balance = 0;
                x = g;
                left_shrank = x_left;
                continue;
            }
        }
        link_under(t, g, x_left, n);
        if (zb == 0)                         /* the rotation kept the height */
            return;
        x = g;
        left_shrank = x_left;
    }
}

void cham_block_tree_init(cham_block_tree_t *t)
{
    CHAM_ASSERT(t);
    t->root = NULL;
    t->count = 0;
}

void cham_block_tree_insert(cham_block_tree_t *t, node_t *n)
{
    node_t *parent = NULL, **link = &t->root;
    while (*link) {
        parent = *link;
        int c = key_cmp(parent, n->stream, n->size, n->addr);
        CHAM_ASSERT(c != 0 && "key already in the tree");
        link = c > 0 ? &parent->left : &parent->right;
    }
    n->left = n->right = NULL;
    n->parent = parent;
    n->balance = 0;
    *link = n;
    t->count++;
    retrace_insert(t, n);
}

void cham_block_tree_remove(cham_block_tree_t *t, node_t *n)
{
    CHAM_ASSERT(t->count > 0);
    node_t *fix;
    bool left_shrank;
    node_t *p = n->parent;
    bool n_left = p && p->left == n;
    if (n->left && n->right) {
        /* Move the successor s into n's place, with n's balance. */
        node_t *s = n->right;
        while (s->left)
            s = s->left;
        if (s->parent == n) {
            fix = s;                  /* s keeps its right subtree: that side shrank */
            left_shrank = false;
        } else {
            fix = s->parent;          /* s's right subtree takes s's place */
            left_shrank = true;
            fix->left = s->right;
            set_parent(s->right, fix);
            s->right = n->right;
            n->right->parent = s;
        }
        s->left = n->left;
        n->left->parent = s;
        s->balance = n->balance;
        link_under(t, p, n_left, s);
    } else {
        fix = p;
        left_shrank = n_left;
        link_under(t, p, n_left, n->left ? n->left : n->right);
    }
    n->left = n->right = n->parent = NULL;
    t->count--;
    retrace_remove(t, fix, left_shrank);
}

node_t *cham_block_tree_lower_bound(const cham_block_tree_t *t, int stream, size_t size,
                                    uintptr_t addr)
{
    node_t *cur = t->root, *best = NULL;
    while (cur) {
        if (key_cmp(cur, stream, size, addr) >= 0) {
            best = cur;
            cur = cur->left;
        } else {
            cur = cur->right;
        }
    }
    return best;
}

node_t *cham_block_tree_find(const cham_block_tree_t *t, int stream, size_t size,
                             uintptr_t addr)
{
    node_t *n = cham_block_tree_lower_bound(t, stream, size, addr);
    return n && key_cmp(n, stream, size, addr) == 0 ? n : NULL;
}

node_t *cham_block_tree_first(const cham_block_tree_t *t)
{
    node_t *n = t->root;
    while (n && n->left)
        n = n->left;
    return n;
}

node_t *cham_block_tree_last(const cham_block_tree_t *t)
{
    node_t *n = t->root;
    while (n && n->right)
        n = n->right;
    return n;
}

node_t *cham_block_tree_next(const node_t *n)
{
    if (n->right) {
        n = n->right;
        while (n->left)
            n = n->left;
        return (node_t *)n;
    }
    while (n->parent && n->parent->right == n)
        n = n->parent;
    return n->parent;
}

node_t *cham_block_tree_prev(const node_t *n)
{
    if (n->left) {
        n = n->left;
        while (n->right)
            n = n->right;
        return (node_t *)n;
    }
    while (n->parent && n->parent->left == n)
        n = n->parent;
    return n->parent;
}

size_t cham_block_tree_max_size(const cham_block_tree_t *t, int stream)
{
    /* The last node of stream precedes the first node of any later stream. */
    node_t *after = stream == INT32_MAX ? NULL
                                        : cham_block_tree_lower_bound(t, stream + 1, 0, 0);
    node_t *n = after ? cham_block_tree_prev(after) : cham_block_tree_last(t);
    return n && n->stream == stream ? n->size : 0;
}

int cham_block_tree_height(const cham_block_tree_t *t)
{
    int h = 0;
    for (const node_t *n = t->root; n; n = n->balance < 0 ? n->left : n->right)
        h++;
    return h;
}

/* Checks the subtree at n; returns its height, or -1 with why filled. lo and
 * hi are the nearest keys outside it (NULL when unbounded). */
static int check_node(const node_t *n, const node_t *lo, const node_t *hi, size_t *count,
                      char *why, size_t why_size)
{
    if (!n)
        return 0;
    (*count)++;
    if (lo && key_cmp(n, lo->stream, lo->size, lo->addr) <= 0) {
        snprintf(why, why_size, "node (%d, %zu, %#jx) not above its predecessor bound",
                 n->stream, n->size, (uintmax_t)n->addr);
        return -1;
    }
    if (hi && key_cmp(n, hi->stream, hi->size, hi->addr) >= 0) {
        snprintf(why, why_size, "node (%d, %zu, %#jx) not below its successor bound",
                 n->stream, n->size, (uintmax_t)n->addr);
        return -1;
    }
    if ((n->left && n->left->parent != n) || (n->right && n->right->parent != n)) {
        snprintf(why, why_size, "broken parent link under (%d, %zu, %#jx)", n->stream,
                 n->size, (uintmax_t)n->addr);
        return -1;
    }
    int l = check_node(n->left, lo, n, count, why, why_size);
    if (l < 0)
        return -1;
    int r = check_node(n->right, n, hi, count, why, why_size);
    if (r < 0)
        return -1;
    if (r - l > 1 || l - r > 1 || n->balance != r - l) {
        snprintf(why, why_size, "node (%d, %zu, %#jx): heights %d/%d, balance %d",
                 n->stream, n->size, (uintmax_t)n->addr, l, r, n->balance);
        return -1;
    }
    return 1 + (l > r ? l : r);
}

bool cham_block_tree_check(const cham_block_tree_t *t, char *why, size_t why_size)
{
    if (t->root && t->root->parent) {
        snprintf(why, why_size, "root has a parent");
        return false;
    }
    size_t count = 0;
    if (check_node(t->root, NULL, NULL, &count, why, why_size) < 0)
        return false;
    if (count != t->count) {
        snprintf(why, why_size, "tree holds %zu nodes, count says %zu", count, t->count);
        return false;
    }
    return true;
}
