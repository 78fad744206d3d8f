/* Device backends: one accelerator seen through memory, streams, events,
 * asynchronous copies and kernel launches.
 *
 * A device is opened by backend name ("sim" or "cuda"). Everything the rest
 * of Chameleon does to an accelerator goes through the functions below, so
 * the same runtime runs on the simulated device in tests and on a real one
 * in production. See docs/device.md for the sim backend's time model. */
#ifndef CHAMELEON_DEVICE_H
#define CHAMELEON_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cham_device cham_device_t;
typedef struct cham_stream cham_stream_t;
typedef struct cham_event cham_event_t;

/* How a device is opened. Start from cham_device_config_default() and set
 * what you need; a zero numeric override keeps the preset's figure. */
typedef struct cham_device_config {
    const char *backend;     /* "sim" (default) or "cuda" */
    const char *preset;      /* sim: a preset name, see cham_preset_*; NULL = default */
    int ordinal;             /* cuda: device index */

    /* Overrides of the preset's figures (0 = keep the preset's). */
    uint64_t capacity;       /* device memory, bytes */
    double peak_flops;       /* dense fp16/bf16 FLOP/s */
    double hbm_bandwidth;    /* bytes/s */
    double h2d_bandwidth;    /* host-to-device link, bytes/s */
    double d2h_bandwidth;    /* device-to-host link, bytes/s */
    double p2p_bandwidth;    /* device-to-device link for communication, bytes/s */
    double host_flops;       /* fp32 FLOP/s of this device's share of the host CPU */
    double host_mem_bandwidth; /* bytes/s of its share of host DRAM */
    /* Fractions of peak_flops and hbm_bandwidth that training's kernels
     * reach on this device, in (0, 1] (docs/devices.md, "What kernels
     * achieve"). */
    double flops_efficiency;
    double hbm_efficiency;

    /* sim only: the host side of eager dispatch (0 = default). */
    uint64_t launch_ns;      /* host time to dispatch one kernel or copy */
    uint64_t kernel_overhead_ns; /* device time added to every kernel */
    uint64_t copy_latency_ns;    /* device time added to every copy */
    uint64_t event_query_ns; /* host time of one event query */
    uint32_t queue_depth;    /* tasks in flight before the host blocks */
    uint64_t vm_granularity; /* virtual memory's granularity: a power of two
                                (with data at least the page size; 0 = 2 MiB) */

    /* sim only: switches. */
    bool data;               /* real memory; kernels' CPU functions run */
    bool hazard_check;       /* hazard detector (on by default) */
} cham_device_config_t;

/* The defaults: sim backend, default preset, hazard detector on, no data. */
CHAM_API cham_device_config_t cham_device_config_default(void);

/* Opens a device. On failure *out is NULL and the status says why;
 * cham_device_last_error(NULL) then holds a message naming the problem. */
CHAM_API cham_status_t cham_device_open(const cham_device_config_t *config,
                                        cham_device_t **out);
/* Waits for all work, frees streams, events and memory still held. */
CHAM_API void cham_device_close(cham_device_t *dev);

/* The message of the last failure on this device (or of the last failed
 * open when dev is NULL); "" when none. Valid until the next call. */
CHAM_API const char *cham_device_last_error(const cham_device_t *dev);

/* What the device is; all figures after overrides. */
typedef struct cham_device_info {
    const char *backend;     /* "sim" or "cuda" */
    const char *name;        /* preset or hardware name */
    uint64_t capacity;
    double peak_flops;
    double hbm_bandwidth;
    double h2d_bandwidth;
    double d2h_bandwidth;
    double p2p_bandwidth;
    /* This device's share of the host CPU, for work on host streams
     * (cham_stream_new_host): fp32 FLOP/s and DRAM bytes/s; 0 when not
     * known (then the sim offers no host streams). */
    double host_flops;
    double host_mem_bandwidth;
    /* The fractions of peak_flops and hbm_bandwidth kernels reach: a
     * kernel of F FLOPs and B bytes takes at least
     * max(F / (peak_flops * flops_efficiency), B / (hbm_bandwidth *
     * hbm_efficiency)); 1 when not known. */
    double flops_efficiency, hbm_efficiency;
    bool data;               /* memory holds real bytes that copies move */
    /* Fixed costs, when known (0: not): the host's time to dispatch a
     * kernel or copy, the device's per kernel beyond its roofline, and
     * per copy beyond its bytes over the link's bandwidth. */
    uint64_t launch_ns, kernel_overhead_ns, copy_latency_ns;
} cham_device_info_t;
CHAM_API void cham_device_get_info(const cham_device_t *dev, cham_device_info_t *info);

/* ---- memory -------------------------------------------------------------
 * Raw segments of device memory and of pinned host memory, as cudaMalloc and
 * cudaHostAlloc give them. Both are slow and synchronising on real hardware:
 * use them through a caching allocator (chameleon/alloc.h). */
CHAM_API cham_status_t cham_device_mem_alloc(cham_device_t *dev, size_t bytes, void **ptr);
/* Waits for all device work first, like cudaFree. */
CHAM_API void cham_device_mem_free(cham_device_t *dev, void *ptr);
CHAM_API cham_status_t cham_device_host_alloc(cham_device_t *dev, size_t bytes, void **ptr);
CHAM_API void cham_device_host_free(cham_device_t *dev, void *ptr);

/* ---- virtual memory (optional: a backend may not offer it) -----------------
 * CUDA's virtual memory management (cuMemAddressReserve, cuMemCreate,
 * cuMemMap + cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree):
 * address ranges are reserved apart from the physical memory that backs
 * them, so an allocator can grow a segment in place or give a block's
 * physical chunks to another address (docs/allocator.md). Sizes and
 * addresses are multiples of the granularity. Physical chunks count
 * against the device's capacity like segments; reserved addresses do not.
 * Unmapping does not wait for the device: work still using the memory
 * must have finished (the sim's hazard detector reports it if not), as
 * with cuMemUnmap.
 * Every function answers CHAM_ERR_UNSUPPORTED where the device has none. */
typedef struct cham_phys cham_phys_t;

/* The granularity of reservations, chunks and mappings, or 0 when the
 * device has no virtual memory management. */
CHAM_API size_t cham_vm_granularity(const cham_device_t *dev);
/* Reserves bytes of address space (no memory behind it). */
CHAM_API cham_status_t cham_vm_reserve(cham_device_t *dev, size_t bytes, void **va);
/* Gives a reservation back; nothing in it may be mapped. */
CHAM_API cham_status_t cham_vm_release(cham_device_t *dev, void *va, size_t bytes);
/* A physical chunk of bytes of device memory: CHAM_ERR_OUT_OF_MEMORY when
 * the device has no more. */
CHAM_API cham_status_t cham_phys_create(cham_device_t *dev, size_t bytes, cham_phys_t **out);
/* Gives the chunk back; it must not be mapped. NULL is fine. */
CHAM_API void cham_phys_release(cham_phys_t *phys);
CHAM_API size_t cham_phys_size(const cham_phys_t *phys);
/* Maps the whole chunk at va (inside a reservation, over nothing mapped)
 * and makes it readable and writable by the device. A chunk is mapped at
 * one address at a time. Its bytes stay what they were across unmap and
 * map. */
CHAM_API cham_status_t cham_vm_map(cham_phys_t *phys, void *va);
/* Unmaps the chunk from where it is mapped (a chunk not mapped: an error). */
CHAM_API cham_status_t cham_vm_unmap(cham_phys_t *phys);
/* Where the chunk is mapped, or NULL. */
CHAM_API void *cham_phys_mapped_at(const cham_phys_t *phys);

/* ---- streams ------------------------------------------------------------
 * In-order queues of device work. Work on different streams may overlap;
 * order between them only comes from events. */
CHAM_API cham_status_t cham_stream_new(cham_device_t *dev, const char *name,
                                       cham_stream_t **out);
CHAM_API void cham_stream_free(cham_stream_t *stream);
/* Small dense id (0, 1, ...) of the stream within its device. */
/* A host stream: work the host CPU runs in stream order, ordered against
 * device streams by events (an optimizer on the host, ZeRO-Offload style).
 * Kernels launched on it read and write pinned host memory only and run
 * their cpu_fn (on cuda through cudaLaunchHostFunc, so cpu_fn and its arg
 * must live until it has run; native_fn is never called); the sim times
 * them by the host figures (cham_device_info_t host_flops,
 * host_mem_bandwidth) instead of the device's. Copies on it are refused.
 * CHAM_ERR_UNSUPPORTED when the backend has no host streams or, on sim,
 * the device has no host figures (err names the preset). */
CHAM_API cham_status_t cham_stream_new_host(cham_device_t *dev, const char *name,
                                            cham_stream_t **out);
CHAM_API bool cham_stream_on_host(const cham_stream_t *stream);
CHAM_API int cham_stream_id(const cham_stream_t *stream);
CHAM_API const char *cham_stream_name(const cham_stream_t *stream);
CHAM_API cham_device_t *cham_stream_device(const cham_stream_t *stream);
/* Blocks the host until all work queued on the stream has finished. */
CHAM_API cham_status_t cham_stream_synchronize(cham_stream_t *stream);
/* Work queued on stream after this call starts only once event completes.
 * An event never recorded is complete. Does not block the host. */
CHAM_API cham_status_t cham_stream_wait_event(cham_stream_t *stream, cham_event_t *event);

/* ---- events -------------------------------------------------------------*/
CHAM_API cham_status_t cham_event_new(cham_device_t *dev, cham_event_t **out);
CHAM_API void cham_event_free(cham_event_t *event);
/* Captures the work queued on stream so far; re-recording replaces it. */
CHAM_API cham_status_t cham_event_record(cham_event_t *event, cham_stream_t *stream);
/* CHAM_OK if the captured work has finished at the host's current time,
 * CHAM_NOT_READY if not. Costs host time on the sim backend, as on real
 * hardware: polling events is what makes a runtime host-bound. */
CHAM_API cham_status_t cham_event_query(cham_event_t *event);
/* When the event's recorded work will complete, in the device's host clock
 * (cham_device_host_time), on a backend that knows it ahead: the sim,
 * whose timeline is decided as work is queued. CHAM_ERR_UNSUPPORTED
 * elsewhere (cuda: a GPU's completion time is known only once it has
 * passed). An event never recorded completes at 0. Lets a caller model a
 * worker that chooses its next task on its own clock (docs/device.md). */
CHAM_API cham_status_t cham_event_time(cham_event_t *event, uint64_t *ns);
/* Blocks the host until the captured work has finished. */
CHAM_API cham_status_t cham_event_synchronize(cham_event_t *event);

/* ---- work ---------------------------------------------------------------*/
typedef enum cham_copy_kind {
    CHAM_COPY_H2D,           /* pinned host -> device */
    CHAM_COPY_D2H,           /* device -> pinned host */
    CHAM_COPY_D2D,           /* device -> device, same device */
} cham_copy_kind_t;

/* Queues a copy of bytes from src to dst on stream. label names the copy in
 * hazard reports and timelines (for example the tensor's name); may be NULL. */
CHAM_API cham_status_t cham_copy_async(cham_stream_t *stream, void *dst, const void *src,
                                       size_t bytes, cham_copy_kind_t kind,
                                       const char *label);

typedef enum cham_access_mode {
    CHAM_ACCESS_READ = 1,
    CHAM_ACCESS_WRITE = 2,
    CHAM_ACCESS_READ_WRITE = 3,
} cham_access_mode_t;

/* One range of device memory a kernel touches. */
typedef struct cham_access {
    const void *ptr;
    size_t bytes;
    cham_access_mode_t mode;
} cham_access_t;

/* A kernel: what it costs, what memory it touches, and how to run it.
 * The sim backend takes the longest of its compute, memory and link times.
 * cpu_fn runs on the host in program order when the sim device has data;
 * native_fn is called with the backend's native stream (cudaStream_t on
 * cuda) to launch real device code. A kernel with neither only costs time. */
typedef struct cham_kernel {
    const char *label;
    double flops;            /* arithmetic work, for the roofline model */
    double bytes;            /* device memory traffic, for the roofline model */
    double link_bytes;       /* bytes sent over the device-to-device link
                                (collectives): at least link_bytes /
                                p2p_bandwidth of time */
    const cham_access_t *accesses;
    size_t n_accesses;
    void (*cpu_fn)(void *arg);
    void (*native_fn)(void *native_stream, void *arg);
    void *arg;
} cham_kernel_t;

CHAM_API cham_status_t cham_kernel_launch(cham_stream_t *stream, const cham_kernel_t *kernel);

/* Blocks the host until all work on all streams has finished. */
CHAM_API cham_status_t cham_device_synchronize(cham_device_t *dev);

/* ---- host clock ---------------------------------------------------------
 * Nanoseconds on the device's host clock: virtual on sim (starts at 0 and
 * moves only through the calls above and cham_device_host_work), monotonic
 * wall time on real backends. */
CHAM_API uint64_t cham_device_host_time(const cham_device_t *dev);
/* Tells the device the host spent ns on its own work (the framework's
 * per-op overhead, a profiler's hooks). Advances the sim's host clock;
 * no effect on real backends, where time passes by itself. */
CHAM_API void cham_device_host_work(cham_device_t *dev, uint64_t ns);

/* ---- watching (optional: a backend may not offer it) ----------------------
 * The sim backend offers both; cuda neither yet (docs/device.md). */
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

typedef void (*cham_task_hook_t)(const cham_task_record_t *task, void *user);
/* Installs a hook that sees every task with its device start and end (NULL
 * removes it); timelines (chameleon/trace.h) are built on it.
 * CHAM_ERR_UNSUPPORTED when the backend cannot time its tasks. */
CHAM_API cham_status_t cham_device_set_task_hook(cham_device_t *dev, cham_task_hook_t hook,
                                                 void *user);

/* A hazard: two accesses to overlapping bytes on different streams whose
 * times overlap where one of them writes. Strings live for the call. */
typedef struct cham_hazard {
    const char *kind;            /* "read-after-write", "write-after-write",
                                    "write-after-read", or "unmap-while-in-use"
                                    (the later side is the host, stream -1) */
    uintptr_t addr;              /* first overlapping byte */
    size_t bytes;                /* overlapping bytes in the reported range */
    int earlier_stream, later_stream;
    const char *earlier_stream_name, *later_stream_name;
    const char *earlier_label, *later_label;
    uint64_t earlier_end_ns;     /* when the earlier access finishes */
    uint64_t later_start_ns;     /* when the later access starts (too soon) */
} cham_hazard_t;

typedef void (*cham_hazard_hook_t)(const cham_hazard_t *hazard, void *user);
/* A backend with a hazard detector counts every hazard and by default
 * prints it to stderr; a hook replaces the printing (NULL restores it).
 * CHAM_ERR_UNSUPPORTED when the backend has no detector. */
CHAM_API cham_status_t cham_device_set_hazard_hook(cham_device_t *dev, cham_hazard_hook_t hook,
                                                   void *user);
/* Hazards detected so far (0 when the backend has no detector or it is off). */
CHAM_API uint64_t cham_device_hazard_count(const cham_device_t *dev);
/* Whether the device checks for hazards at all: a count of 0 means
 * something only then. */
CHAM_API bool cham_device_checks_hazards(const cham_device_t *dev);
/* Formats a hazard as one line of text into buf; returns buf. */
CHAM_API char *cham_hazard_format(const cham_hazard_t *hazard, char *buf, size_t size);

/* ---- presets (sim) ------------------------------------------------------*/
typedef struct cham_preset {
    const char *name;
    const char *description;
    uint64_t capacity;
    double peak_flops;
    double hbm_bandwidth;
    double h2d_bandwidth;
    double d2h_bandwidth;
    double p2p_bandwidth;
    double host_flops;       /* 0: the preset names no host */
    double host_mem_bandwidth;
    double flops_efficiency; /* fractions of the peaks kernels reach */
    double hbm_efficiency;
} cham_preset_t;

/* Number of built-in presets and the i-th one (NULL past the end). */
CHAM_API size_t cham_preset_count(void);
CHAM_API const cham_preset_t *cham_preset_at(size_t i);
/* The preset named name, or NULL. */
CHAM_API const cham_preset_t *cham_preset_find(const char *name);
/* The preset used when a config names none. */
CHAM_API const char *cham_preset_default_name(void);

#ifdef __cplusplus
}
#endif

#endif
