/* What only the simulated device offers: statistics of its virtual
 * timeline, the hazard detector's findings, a hook that sees every task, and
 * fault injection for tests. Each function returns CHAM_ERR_INVALID_ARG (or
 * does nothing) when the device is not a sim device. */
#ifndef CHAMELEON_SIM_H
#define CHAMELEON_SIM_H

#include "chameleon/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True if dev runs the sim backend. */
bool cham_sim_is_sim(const cham_device_t *dev);

typedef enum cham_task_kind {
    CHAM_TASK_KERNEL,
    CHAM_TASK_COPY_H2D,
    CHAM_TASK_COPY_D2H,
    CHAM_TASK_COPY_D2D,
    CHAM_TASK_HOST_BLOCKED,  /* the host waited: sync or full launch queue */
} cham_task_kind_t;

/* One task on the virtual timeline, as the hook receives it. Strings live
 * only for the duration of the call. stream_id is -1 for host records. */
typedef struct cham_task_record {
    cham_task_kind_t kind;
    int stream_id;
    const char *stream_name;
    const char *label;
    uint64_t enqueue_ns;     /* host time when the task was queued */
    uint64_t start_ns;
    uint64_t end_ns;
    uint64_t bytes;          /* copies: bytes moved; kernels: memory traffic */
    double flops;
} cham_task_record_t;

typedef void (*cham_sim_task_hook_t)(const cham_task_record_t *task, void *user);
/* Installs the hook (NULL removes it). Used for timelines and traces. */
cham_status_t cham_sim_set_task_hook(cham_device_t *dev, cham_sim_task_hook_t hook,
                                     void *user);

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
    uint64_t data_copy_cpu_ns;   /* data mode: host CPU time moving the bytes of
                                    copies (a copy engine's work on hardware) */
    int n_streams;               /* streams ever made; ids < n_streams */
    uint64_t stream_busy_ns[CHAM_SIM_MAX_STREAMS];
} cham_sim_stats_t;
cham_status_t cham_sim_get_stats(const cham_device_t *dev, cham_sim_stats_t *stats);

/* A hazard: two accesses to overlapping bytes on different streams whose
 * times overlap where one of them writes. Strings live for the call. */
typedef struct cham_hazard {
    const char *kind;            /* "read-after-write", "write-after-write" or
                                    "write-after-read" */
    uintptr_t addr;              /* first overlapping byte */
    size_t bytes;                /* overlapping bytes in the reported range */
    int earlier_stream, later_stream;
    const char *earlier_stream_name, *later_stream_name;
    const char *earlier_label, *later_label;
    uint64_t earlier_end_ns;     /* when the earlier access finishes */
    uint64_t later_start_ns;     /* when the later access starts (too soon) */
} cham_hazard_t;

typedef void (*cham_sim_hazard_hook_t)(const cham_hazard_t *hazard, void *user);
/* Every hazard is counted; by default it is also printed to stderr. A hook
 * replaces the printing (NULL restores it). */
cham_status_t cham_sim_set_hazard_hook(cham_device_t *dev, cham_sim_hazard_hook_t hook,
                                       void *user);
/* Number of hazards detected so far (0 for other backends). */
uint64_t cham_sim_hazard_count(const cham_device_t *dev);
/* Formats a hazard as one line of text into buf; returns buf. */
char *cham_hazard_format(const cham_hazard_t *hazard, char *buf, size_t size);

/* Fault injection: the next `after`-th call (0 = the very next) of the given
 * kind fails with the given status, once. */
typedef enum cham_sim_fault {
    CHAM_SIM_FAULT_MEM_ALLOC,
    CHAM_SIM_FAULT_HOST_ALLOC,
    CHAM_SIM_FAULT_COUNT_
} cham_sim_fault_t;
cham_status_t cham_sim_inject_fault(cham_device_t *dev, cham_sim_fault_t fault,
                                    uint64_t after, cham_status_t status);

#ifdef __cplusplus
}
#endif

#endif
