/* The naive first-fit baseline (see firstfit.h). */
#include "lib/firstfit.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

/* A run of the arena: free (in the list) or handed out as a block.
 * Invariants: the free list is sorted by offset; free runs neither overlap
 * nor touch (adjacent runs are merged at once); every size is a non-zero
 * multiple of align; free runs and allocated blocks tile the arena. */
struct firstfit_block {
    uint64_t off, size;
    firstfit_block_t *prev, *next;  /* free list; next also links spares */
    bool allocated;
};

#define SLAB_BLOCKS 1024

struct firstfit {
    uint64_t capacity, align;
    firstfit_block_t *head;         /* lowest free run */
    firstfit_block_t *spare;        /* unused structs */
    void **slabs;
    size_t n_slabs, cap_slabs;
    uint64_t allocated, peak_allocated, high_water;
    uint64_t n_allocs, n_frees, n_failed;
    char error[256];
};

static firstfit_block_t *get_node(firstfit_t *ff)
{
    if (!ff->spare) {
        void **s = cham_grow(ff->slabs, &ff->cap_slabs, ff->n_slabs + 1, sizeof *s, 16);
        if (!s)
            return NULL;
        ff->slabs = s;
        firstfit_block_t *slab = malloc(SLAB_BLOCKS * sizeof *slab);
        if (!slab)
            return NULL;
        ff->slabs[ff->n_slabs++] = slab;
        for (size_t i = 0; i < SLAB_BLOCKS; i++) {
            slab[i].next = ff->spare;
            ff->spare = &slab[i];
        }
    }
    firstfit_block_t *b = ff->spare;
    ff->spare = b->next;
    return b;
}

static void put_node(firstfit_t *ff, firstfit_block_t *b)
{
    b->allocated = false;
    b->next = ff->spare;
    ff->spare = b;
}

static void die(const char *msg)
{
    fprintf(stderr, "first-fit: %s\n", msg);
    abort();
}

firstfit_t *firstfit_new(uint64_t capacity, uint64_t align)
{
    if (align == 0 || (align & (align - 1)) != 0 || capacity < align)
        return NULL;
    firstfit_t *ff = calloc(1, sizeof *ff);
    if (!ff)
        return NULL;
    ff->capacity = capacity / align * align;
    ff->align = align;
    firstfit_block_t *all = get_node(ff);
    if (!all) {
        firstfit_destroy(ff);
        return NULL;
    }
    *all = (firstfit_block_t){.off = 0, .size = ff->capacity};
    ff->head = all;
    return ff;
}

void firstfit_destroy(firstfit_t *ff)
{
    if (!ff)
        return;
    for (size_t i = 0; i < ff->n_slabs; i++)
        free(ff->slabs[i]);
    free(ff->slabs);
    free(ff);
}

firstfit_block_t *firstfit_alloc(firstfit_t *ff, uint64_t bytes)
{
    uint64_t need = (bytes + ff->align - 1) & ~(ff->align - 1);
    if (bytes == 0 || need < bytes) {
        snprintf(ff->error, sizeof ff->error, "first-fit: invalid size %" PRIu64, bytes);
        ff->n_failed++;
        return NULL;
    }
    firstfit_block_t *run = ff->head;
    while (run && run->size < need)
        run = run->next;
    if (!run) {
        firstfit_stats_t s;
        firstfit_get_stats(ff, &s);
        snprintf(ff->error, sizeof ff->error,
                 "first-fit: out of memory: %" PRIu64 " bytes requested (%" PRIu64
                 " rounded); %" PRIu64 " bytes free in %" PRIu64 " runs, the largest %" PRIu64
                 " bytes (capacity %" PRIu64 ")",
                 bytes, need, s.free_bytes, s.free_runs, s.largest_free, ff->capacity);
        ff->n_failed++;
        return NULL;
    }
    firstfit_block_t *b;
    if (run->size == need) {         /* the whole run: unlink it */
        if (run->prev)
            run->prev->next = run->next;
        else
            ff->head = run->next;
        if (run->next)
            run->next->prev = run->prev;
        b = run;
    } else {                         /* split: the block takes the front */
        b = get_node(ff);
        if (!b) {
            snprintf(ff->error, sizeof ff->error, "first-fit: out of host memory");
            ff->n_failed++;
            return NULL;
        }
        b->off = run->off;
        b->size = need;
        run->off += need;
        run->size -= need;
    }
    b->allocated = true;
    b->prev = b->next = NULL;
    ff->allocated += need;
    if (ff->allocated > ff->peak_allocated)
        ff->peak_allocated = ff->allocated;
    if (b->off + need > ff->high_water)
        ff->high_water = b->off + need;
    ff->n_allocs++;
    return b;
}

void firstfit_free(firstfit_t *ff, firstfit_block_t *b)
{
    if (!b || !b->allocated)
        die("free of a block that is not allocated");
    if (b->off + b->size > ff->capacity || b->size > ff->allocated)
        die("free of a block of another arena");
    b->allocated = false;
    ff->allocated -= b->size;
    ff->n_frees++;
    /* Find the free runs on either side. */
    firstfit_block_t *prev = NULL, *next = ff->head;
    while (next && next->off < b->off) {
        prev = next;
        next = next->next;
    }
    if ((prev && prev->off + prev->size > b->off) || (next && b->off + b->size > next->off))
        die("freed block overlaps a free run (double free?)");
    firstfit_block_t *cur;
    if (prev && prev->off + prev->size == b->off) {
        prev->size += b->size;
        put_node(ff, b);
        cur = prev;
    } else {
        b->prev = prev;
        b->next = next;
        if (prev)
            prev->next = b;
        else
            ff->head = b;
        if (next)
            next->prev = b;
        cur = b;
    }
    if (next && cur->off + cur->size == next->off) {
        cur->size += next->size;
        cur->next = next->next;
        if (next->next)
            next->next->prev = cur;
        put_node(ff, next);
    }
}

uint64_t firstfit_block_offset(const firstfit_block_t *block)
{
    return block->off;
}

uint64_t firstfit_block_size(const firstfit_block_t *block)
{
    return block->size;
}

void firstfit_get_stats(const firstfit_t *ff, firstfit_stats_t *s)
{
    memset(s, 0, sizeof *s);
    s->capacity = ff->capacity;
    s->allocated = ff->allocated;
    s->peak_allocated = ff->peak_allocated;
    s->high_water = ff->high_water;
    s->free_bytes = ff->capacity - ff->allocated;
    for (const firstfit_block_t *r = ff->head; r; r = r->next) {
        s->free_runs++;
        if (r->size > s->largest_free)
            s->largest_free = r->size;
    }
    s->fragmentation = s->free_bytes ? 1.0 - (double)s->largest_free / (double)s->free_bytes
                                     : 0.0;
    s->n_allocs = ff->n_allocs;
    s->n_frees = ff->n_frees;
    s->n_failed = ff->n_failed;
}

const char *firstfit_last_error(const firstfit_t *ff)
{
    return ff->error;
}
