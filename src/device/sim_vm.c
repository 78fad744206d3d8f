/* Virtual memory of the sim backend (sim_vm.h). Reservations are a sorted
 * array searched by bisection (an allocator makes a few); each has a table
 * of the chunk mapped at every granule, so that a map or unmap is O(log r +
 * its granules) and checking a kernel's range O(log r + its granules),
 * however many chunks an allocator keeps moving. */
#define _GNU_SOURCE                 /* MAP_ANONYMOUS, MAP_POPULATE, memfd_create */
#include "device/sim_vm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/message.h"

#define SIM_VM_SPAN ((uintptr_t)1 << 46)   /* fake address range for reservations */

typedef struct range {
    uintptr_t va;
    size_t bytes;
    sim_chunk_t **granule;       /* the chunk mapped at each granule, or NULL */
} range_t;

/* With data, slot[i] is the file offset / granularity of the chunk's i-th
 * granule; the slots of a chunk need not be adjacent in the file. */
struct sim_chunk {
    size_t bytes;
    uint32_t *slot;
};

/* Invariants: res sorted by va and disjoint; a mapped chunk fills
 * consecutive granules of one reservation; with data, free_slots holds
 * exactly the slots no chunk has, and the file is n_slots granules long. */
struct sim_vm {
    uintptr_t fake_base;
    sim_mem_t *phys;
    size_t granularity;
    bool data;
    range_t *res;
    size_t n_res, cap_res;
    int fd;                      /* data: the shared-memory file of the chunks */
    uint32_t *free_slots;
    size_t n_free, n_slots;
};

sim_vm_t *sim_vm_new(uintptr_t fake_base, sim_mem_t *phys, size_t granularity, bool data,
                     char *err, size_t err_size)
{
    long page = sysconf(_SC_PAGESIZE);
    if (granularity == 0 || (granularity & (granularity - 1)) ||
        (data && page > 0 && granularity < (size_t)page)) {
        cham_set_err(err, err_size, "vm_granularity must be a power of two%s, got %zu",
                     data ? " of at least the host's page size with data" : "", granularity);
        return NULL;
    }
    sim_vm_t *vm = calloc(1, sizeof *vm);
    if (!vm) {
        cham_set_err(err, err_size, "out of host memory");
        return NULL;
    }
    vm->fake_base = fake_base;
    vm->phys = phys;
    vm->granularity = granularity;
    vm->data = data;
    vm->fd = -1;
    if (!data)
        return vm;
    /* One anonymous memory file for every chunk the capacity allows:
     * sparse until written (memfd, not /dev/shm, whose size a container
     * may cap). */
    uint64_t slots = (sim_mem_capacity(phys) + granularity - 1) / granularity;
    vm->fd = memfd_create("chameleon-sim", MFD_CLOEXEC);
    vm->free_slots = slots <= UINT32_MAX ? malloc(slots * sizeof *vm->free_slots) : NULL;
    if (vm->fd < 0 || !vm->free_slots || ftruncate(vm->fd, (off_t)(slots * granularity)) != 0) {
        cham_set_err(err, err_size, "cannot make the memory file of the virtual memory: %s",
                     vm->free_slots ? strerror(errno) : "out of host memory");
        sim_vm_free(vm);
        return NULL;
    }
    vm->n_slots = slots;
    for (size_t i = 0; i < slots; i++)       /* handed out from the end: slot 0 first */
        vm->free_slots[i] = (uint32_t)(slots - 1 - i);
    vm->n_free = slots;
    return vm;
}

void sim_vm_free(sim_vm_t *vm)
{
    if (!vm)
        return;
    for (size_t i = 0; i < vm->n_res; i++) {
        if (vm->data)
            munmap((void *)vm->res[i].va, vm->res[i].bytes);
        free(vm->res[i].granule);
    }
    if (vm->fd >= 0)
        close(vm->fd);
    free(vm->res);
    free(vm->free_slots);
    free(vm);
}

size_t sim_vm_granularity(const sim_vm_t *vm)
{
    return vm->granularity;
}

/* Index of the first range with va > a. */
static size_t upper_bound(const range_t *r, size_t n, uintptr_t a)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].va <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The range holding address a, or NULL. */
static range_t *holding(range_t *r, size_t n, uintptr_t a)
{
    size_t i = upper_bound(r, n, a);
    return i && a - r[i - 1].va < r[i - 1].bytes ? &r[i - 1] : NULL;
}

static bool insert(range_t **r, size_t *n, size_t *cap, range_t x)
{
    range_t *grown = cham_grow(*r, cap, *n + 1, sizeof **r, 16);
    if (!grown)
        return false;
    *r = grown;
    size_t i = upper_bound(*r, *n, x.va);
    memmove(*r + i + 1, *r + i, (*n - i) * sizeof **r);
    (*r)[i] = x;
    (*n)++;
    return true;
}

static void erase(range_t *r, size_t *n, const range_t *at)
{
    size_t i = (size_t)(at - r);
    memmove(r + i, r + i + 1, (*n - i - 1) * sizeof *r);
    (*n)--;
}

/* A fake address for bytes: the first gap between reservations that fits. */
static uintptr_t place_fake(const sim_vm_t *vm, size_t bytes)
{
    uintptr_t at = vm->fake_base;
    for (size_t i = 0; i < vm->n_res; i++) {
        if (vm->res[i].va - at >= bytes)
            break;
        at = vm->res[i].va + vm->res[i].bytes;
    }
    return bytes <= SIM_VM_SPAN && at - vm->fake_base <= SIM_VM_SPAN - bytes ? at : 0;
}

/* Real inaccessible address space, aligned to the granularity. */
static uintptr_t place_real(const sim_vm_t *vm, size_t bytes)
{
    size_t g = vm->granularity;
    if (bytes > SIZE_MAX - g)
        return 0;
    char *p = mmap(NULL, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    uintptr_t at = ((uintptr_t)p + g - 1) & ~(uintptr_t)(g - 1);
    size_t head = at - (uintptr_t)p;
    if (head)
        munmap(p, head);
    if (g - head)
        munmap((char *)at + bytes, g - head);
    return at;
}

cham_status_t sim_vm_reserve(sim_vm_t *vm, size_t bytes, void **va, char *err, size_t err_size)
{
    uintptr_t at = vm->data ? place_real(vm, bytes) : place_fake(vm, bytes);
    if (!at) {
        cham_set_err(err, err_size, "no room for a reservation of %zu bytes of addresses", bytes);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    sim_chunk_t **granule = calloc(bytes / vm->granularity, sizeof *granule);
    if (!granule || !insert(&vm->res, &vm->n_res, &vm->cap_res, (range_t){at, bytes, granule})) {
        free(granule);
        if (vm->data)
            munmap((void *)at, bytes);
        cham_set_err(err, err_size, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    *va = (void *)at;
    return CHAM_OK;
}

cham_status_t sim_vm_release(sim_vm_t *vm, void *va, size_t bytes, char *err, size_t err_size)
{
    range_t *r = holding(vm->res, vm->n_res, (uintptr_t)va);
    if (!r || r->va != (uintptr_t)va || r->bytes != bytes) {
        cham_set_err(err, err_size, "releasing %zu bytes at %p, which is not a reservation",
                     bytes, va);
        return CHAM_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < bytes / vm->granularity; i++) {
        if (r->granule[i]) {
            cham_set_err(err, err_size, "releasing the reservation at %p while a chunk is "
                         "mapped at %p in it", va, (void *)(r->va + i * vm->granularity));
            return CHAM_ERR_INVALID_ARG;
        }
    }
    if (vm->data)
        munmap(va, bytes);
    free(r->granule);
    erase(vm->res, &vm->n_res, r);
    return CHAM_OK;
}

cham_status_t sim_vm_chunk_new(sim_vm_t *vm, size_t bytes, sim_chunk_t **out, char *err,
                               size_t err_size)
{
    *out = NULL;
    size_t n = bytes / vm->granularity;
    if (sim_mem_charge(vm->phys, bytes) != CHAM_OK) {
        cham_set_err(err, err_size, "out of device memory: a chunk of %zu bytes, %llu of %llu "
                     "in use", bytes, (unsigned long long)sim_mem_in_use(vm->phys),
                     (unsigned long long)sim_mem_capacity(vm->phys));
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    sim_chunk_t *c = calloc(1, sizeof *c);
    if (c && vm->data && !(c->slot = malloc(n * sizeof *c->slot))) {
        free(c);
        c = NULL;
    }
    if (!c) {
        sim_mem_uncharge(vm->phys, bytes);
        cham_set_err(err, err_size, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    c->bytes = bytes;
    /* The charge keeps the chunks within the file: slots never run out. */
    for (size_t i = 0; vm->data && i < n; i++) {
        CHAM_ASSERT(vm->n_free > 0);
        c->slot[i] = vm->free_slots[--vm->n_free];
        /* A new chunk reads as poison, like a new segment. MAP_POPULATE maps
         * its pages in one call rather than one fault per page. */
        void *p = mmap(NULL, vm->granularity, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, vm->fd,
                       (off_t)c->slot[i] * (off_t)vm->granularity);
        if (p != MAP_FAILED) {
            memset(p, SIM_MEM_POISON, vm->granularity);
            munmap(p, vm->granularity);
        }
    }
    *out = c;
    return CHAM_OK;
}

void sim_vm_chunk_free(sim_vm_t *vm, sim_chunk_t *c)
{
    size_t n = c->bytes / vm->granularity;
    for (size_t i = 0; vm->data && i < n; i++)
        vm->free_slots[vm->n_free++] = c->slot[i];
    sim_mem_uncharge(vm->phys, c->bytes);
    free(c->slot);
    free(c);
}

cham_status_t sim_vm_map(sim_vm_t *vm, void *va, sim_chunk_t *c, char *err, size_t err_size)
{
    uintptr_t a = (uintptr_t)va;
    const range_t *r = holding(vm->res, vm->n_res, a);
    if (!r || c->bytes > r->bytes - (a - r->va)) {
        cham_set_err(err, err_size, "mapping %zu bytes at %p, which is not inside one "
                     "reservation", c->bytes, va);
        return CHAM_ERR_INVALID_ARG;
    }
    size_t g = vm->granularity, first = (a - r->va) / g, n = c->bytes / g;
    for (size_t k = 0; k < n; k++) {
        if (r->granule[first + k]) {
            cham_set_err(err, err_size, "mapping %zu bytes at %p over the chunk mapped at %p",
                         c->bytes, va, (void *)(r->va + (first + k) * g));
            return CHAM_ERR_INVALID_ARG;
        }
    }
    for (size_t k = 0; k < n; k++)
        r->granule[first + k] = c;
    for (size_t k = 0; vm->data && k < c->bytes / g; k++) {
        void *p = mmap((char *)va + k * g, g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       vm->fd, (off_t)c->slot[k] * (off_t)g);
        CHAM_ASSERT(p != MAP_FAILED && "mapping a slot of the sim's memory file");
    }
    return CHAM_OK;
}

void sim_vm_unmap(sim_vm_t *vm, void *va, size_t bytes)
{
    range_t *r = holding(vm->res, vm->n_res, (uintptr_t)va);
    size_t g = vm->granularity, first = r ? ((uintptr_t)va - r->va) / g : 0;
    CHAM_ASSERT(r && r->granule[first] && r->granule[first]->bytes == bytes);
    for (size_t k = 0; k < bytes / g; k++)
        r->granule[first + k] = NULL;
    if (vm->data) {
        /* Back to inaccessible addresses, still reserved. */
        void *p = mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        CHAM_ASSERT(p != MAP_FAILED);
    }
}

bool sim_vm_contains(const sim_vm_t *vm, uintptr_t addr, size_t bytes)
{
    const range_t *r = holding(vm->res, vm->n_res, addr);
    if (!r || bytes > r->bytes - (addr - r->va))
        return false;
    size_t g = vm->granularity;
    for (size_t i = (addr - r->va) / g; i <= (addr - r->va + bytes - 1) / g; i++)
        if (!r->granule[i])
            return false;
    return true;
}
