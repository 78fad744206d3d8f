/* Address spaces of the sim backend: device memory and pinned host memory
 * handed out in segments, as cudaMalloc and cudaHostAlloc do.
 *
 * With data, segments are real host memory filled with a poison byte (so a
 * read of never-written memory gives the same wrong answer every run); without
 * data they are addresses in a reserved range that must never be
 * dereferenced, so a 64 GiB device costs nothing. */
#ifndef CHAM_DEVICE_SIM_MEM_H
#define CHAM_DEVICE_SIM_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/status.h"

#define SIM_MEM_POISON 0xA5

typedef struct sim_mem sim_mem_t;

/* base: first fake address (without data); capacity: most bytes in use. */
sim_mem_t *sim_mem_new(uintptr_t base, uint64_t capacity, bool data);
void sim_mem_free(sim_mem_t *mem);

/* CHAM_ERR_OUT_OF_MEMORY past the capacity, CHAM_ERR_HOST_OOM if the host
 * cannot back a data segment. */
cham_status_t sim_mem_alloc(sim_mem_t *mem, size_t bytes, void **ptr);
/* Releases the segment starting at ptr; returns its size, 0 if unknown. */
size_t sim_mem_release(sim_mem_t *mem, void *ptr);
/* True if [addr, addr + bytes) lies inside one live segment. */
bool sim_mem_contains(const sim_mem_t *mem, uintptr_t addr, size_t bytes);
uint64_t sim_mem_in_use(const sim_mem_t *mem);
/* Counts bytes held outside segments (virtual memory's physical chunks)
 * against the capacity: CHAM_ERR_OUT_OF_MEMORY past it. */
cham_status_t sim_mem_charge(sim_mem_t *mem, size_t bytes);
void sim_mem_uncharge(sim_mem_t *mem, size_t bytes);
uint64_t sim_mem_capacity(const sim_mem_t *mem);

#endif
