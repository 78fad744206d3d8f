/* Segments of one sim address space, kept sorted by address. Segment
 * allocation is rare (the caching allocator keeps what it gets), so a sorted
 * array with first-fit placement is enough. */
#include "device/sim_mem.h"

#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"

#define SIM_MEM_ALIGN 256                   /* cudaMalloc's alignment */
#define SIM_MEM_SPAN ((uintptr_t)1 << 46)   /* fake address range per space */

typedef struct segment {
    uintptr_t addr;
    size_t bytes;
} segment_t;

/* Invariant: segs sorted by addr, disjoint; in_use = sum of their bytes
 * plus the bytes charged (sim_mem_charge). */
struct sim_mem {
    uintptr_t base;
    uint64_t capacity, in_use;
    bool data;
    segment_t *segs;
    size_t n, cap;
};

sim_mem_t *sim_mem_new(uintptr_t base, uint64_t capacity, bool data)
{
    sim_mem_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->base = base;
    m->capacity = capacity;
    m->data = data;
    return m;
}

void sim_mem_free(sim_mem_t *m)
{
    if (!m)
        return;
    if (m->data)
        for (size_t i = 0; i < m->n; i++)
            free((void *)m->segs[i].addr);
    free(m->segs);
    free(m);
}

/* Index of the first segment with addr >= a. */
static size_t lower_bound(const sim_mem_t *m, uintptr_t a)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->segs[mid].addr < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A fake address for bytes: the first gap in the span that fits. */
static uintptr_t place_fake(const sim_mem_t *m, size_t bytes)
{
    uintptr_t at = m->base;
    for (size_t i = 0; i < m->n; i++) {
        if (m->segs[i].addr - at >= bytes)
            break;
        at = m->segs[i].addr + m->segs[i].bytes;
        at = (at + SIM_MEM_ALIGN - 1) & ~(uintptr_t)(SIM_MEM_ALIGN - 1);
    }
    return at + bytes <= m->base + SIM_MEM_SPAN ? at : 0;
}

cham_status_t sim_mem_alloc(sim_mem_t *m, size_t bytes, void **ptr)
{
    *ptr = NULL;
    if (bytes > m->capacity - m->in_use)
        return CHAM_ERR_OUT_OF_MEMORY;
    segment_t *segs = cham_grow(m->segs, &m->cap, m->n + 1, sizeof *segs, 16);
    if (!segs)
        return CHAM_ERR_HOST_OOM;
    m->segs = segs;
    uintptr_t addr;
    if (m->data) {
        size_t rounded = (bytes + SIM_MEM_ALIGN - 1) & ~(size_t)(SIM_MEM_ALIGN - 1);
        void *p = aligned_alloc(SIM_MEM_ALIGN, rounded);
        if (!p)
            return CHAM_ERR_HOST_OOM;
        memset(p, SIM_MEM_POISON, rounded);
        addr = (uintptr_t)p;
    } else {
        addr = place_fake(m, bytes);
        if (!addr)
            return CHAM_ERR_OUT_OF_MEMORY;
    }
    size_t i = lower_bound(m, addr);
    memmove(m->segs + i + 1, m->segs + i, (m->n - i) * sizeof *m->segs);
    m->segs[i] = (segment_t){addr, bytes};
    m->n++;
    m->in_use += bytes;
    *ptr = (void *)addr;
    return CHAM_OK;
}

size_t sim_mem_release(sim_mem_t *m, void *ptr)
{
    size_t i = lower_bound(m, (uintptr_t)ptr);
    if (i == m->n || m->segs[i].addr != (uintptr_t)ptr)
        return 0;
    size_t bytes = m->segs[i].bytes;
    if (m->data)
        free(ptr);
    memmove(m->segs + i, m->segs + i + 1, (m->n - i - 1) * sizeof *m->segs);
    m->n--;
    m->in_use -= bytes;
    return bytes;
}

bool sim_mem_contains(const sim_mem_t *m, uintptr_t addr, size_t bytes)
{
    size_t i = lower_bound(m, addr + 1);    /* first segment starting after addr */
    if (i == 0)
        return false;
    const segment_t *s = &m->segs[i - 1];
    return addr >= s->addr && bytes <= s->bytes && addr - s->addr <= s->bytes - bytes;
}

uint64_t sim_mem_in_use(const sim_mem_t *m)
{
    return m->in_use;
}

uint64_t sim_mem_capacity(const sim_mem_t *m)
{
    return m->capacity;
}

cham_status_t sim_mem_charge(sim_mem_t *m, size_t bytes)
{
    if (bytes > m->capacity - m->in_use)
        return CHAM_ERR_OUT_OF_MEMORY;
    m->in_use += bytes;
    return CHAM_OK;
}

void sim_mem_uncharge(sim_mem_t *m, size_t bytes)
{
    CHAM_ASSERT(bytes <= m->in_use);
    m->in_use -= bytes;
}
