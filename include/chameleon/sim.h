/* What only the simulated device offers: statistics of its virtual
 * timeline and fault injection for tests. Each function returns
 * CHAM_ERR_INVALID_ARG when the device is not a sim device. (Its task hook
 * and hazard detector are reached through chameleon/device.h, which any
 * backend may implement.) */
#ifndef CHAMELEON_SIM_H
#define CHAMELEON_SIM_H

#include "chameleon/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True if dev runs the sim backend. */
CHAM_API bool cham_sim_is_sim(const cham_device_t *dev);

#define CHAM_SIM_MAX_STREAMS 64

typedef struct cham_sim_stats {
    uint64_t host_ns;            /* host clock now */
    uint64_t host_blocked_ns;    /* host time spent waiting on the device */
    uint64_t device_end_ns;      /* when the last queued task finishes */
    uint64_t kernels, copies, event_records, event_waits, event_queries;
    uint64_t bytes_h2d, bytes_d2h, bytes_d2d;
    uint64_t link_busy_h2d_ns, link_busy_d2h_ns;
    uint64_t mem_allocs, mem_frees, host_allocs, host_frees;
    uint64_t mem_in_use;         /* bytes of device segments held */
    uint64_t host_in_use;        /* bytes of pinned host memory held */
    uint64_t hazards;            /* hazards detected so far */
    uint64_t vm_maps, vm_unmaps;     /* virtual memory: map and unmap calls */
    uint64_t phys_creates, phys_releases; /* physical chunks made and given back */
    uint64_t data_copy_cpu_ns;   /* data mode: host CPU time moving the bytes of
                                    copies (a copy engine's work on hardware) */
    int n_streams;               /* streams ever made; ids < n_streams */
    uint64_t stream_busy_ns[CHAM_SIM_MAX_STREAMS];
} cham_sim_stats_t;
CHAM_API cham_status_t cham_sim_get_stats(const cham_device_t *dev, cham_sim_stats_t *stats);

/* Fault injection: the next `after`-th call (0 = the very next) of the given
 * kind fails with the given status, once. */
typedef enum cham_sim_fault {
    CHAM_SIM_FAULT_MEM_ALLOC,
    CHAM_SIM_FAULT_HOST_ALLOC,
    CHAM_SIM_FAULT_COUNT_
} cham_sim_fault_t;
CHAM_API cham_status_t cham_sim_inject_fault(cham_device_t *dev, cham_sim_fault_t fault,
                                             uint64_t after, cham_status_t status);

#ifdef __cplusplus
}
#endif

#endif
