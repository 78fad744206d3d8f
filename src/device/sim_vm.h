/* Virtual memory of the sim backend: address reservations, physical chunks
 * and the mappings between them, as CUDA's cuMemAddressReserve, cuMemCreate
 * and cuMemMap give them (docs/device.md, "Virtual memory").
 *
 * Chunks count against the device's capacity (sim_mem_charge), as
 * segments do. With data, a reservation is real inaccessible address space
 * and a chunk is a set of granule-sized slots of one shared-memory file,
 * mapped into the reservation where the chunk is mapped: the bytes are the
 * same bytes wherever the chunk goes, as on hardware. Without data,
 * reservations are fake addresses and chunks only bookkeeping. */
#ifndef CHAM_DEVICE_SIM_VM_H
#define CHAM_DEVICE_SIM_VM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/status.h"
#include "device/sim_mem.h"

#define SIM_VM_GRANULARITY ((size_t)2 << 20)   /* cuMemGetAllocationGranularity's 2 MiB */

typedef struct sim_vm sim_vm_t;
typedef struct sim_chunk sim_chunk_t;

/* fake_base: first fake address (without data); phys: the address space
 * whose capacity chunks are charged to; granularity: a power of two, at
 * least the host's page size with data. NULL with err on failure. */
sim_vm_t *sim_vm_new(uintptr_t fake_base, sim_mem_t *phys, size_t granularity, bool data,
                     char *err, size_t err_size);
void sim_vm_free(sim_vm_t *vm);
size_t sim_vm_granularity(const sim_vm_t *vm);

/* Sizes and addresses are multiples of the granularity (the device layer
 * checked). Failures set err. */
cham_status_t sim_vm_reserve(sim_vm_t *vm, size_t bytes, void **va, char *err, size_t err_size);
/* The reservation starting at va of exactly bytes, with nothing mapped. */
cham_status_t sim_vm_release(sim_vm_t *vm, void *va, size_t bytes, char *err, size_t err_size);
/* CHAM_ERR_OUT_OF_MEMORY past the capacity. */
cham_status_t sim_vm_chunk_new(sim_vm_t *vm, size_t bytes, sim_chunk_t **out, char *err,
                               size_t err_size);
void sim_vm_chunk_free(sim_vm_t *vm, sim_chunk_t *chunk);
/* Maps the chunk at va: inside one reservation, over nothing mapped. */
cham_status_t sim_vm_map(sim_vm_t *vm, void *va, sim_chunk_t *chunk, char *err,
                         size_t err_size);
/* Unmaps the mapping at va of bytes (the device layer knows it exists). */
void sim_vm_unmap(sim_vm_t *vm, void *va, size_t bytes);
/* True if [addr, addr + bytes) is mapped, by one or several adjacent
 * mappings. */
bool sim_vm_contains(const sim_vm_t *vm, uintptr_t addr, size_t bytes);

#endif
