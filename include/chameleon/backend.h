/* The device backend interface, for those who implement a backend.
 *
 * A backend is one static const table of function pointers plus a context
 * pointer. The public functions in chameleon/device.h check their arguments,
 * wrap the backend's stream and event objects in handles and then call these
 * slots, so a backend only does the work itself. Users of Chameleon never
 * need this header; runtimes that bring their own accelerator (or a test
 * double) do, through cham_device_open_iface(). */
#ifndef CHAMELEON_BACKEND_H
#define CHAMELEON_BACKEND_H

#include "chameleon/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2 added the optional watching and virtual memory slots, 3 the host
 * streams' slot, 4 event_time, each at the end; tables of older versions
 * are still accepted (as tables without those slots). */
#define CHAM_BACKEND_API_VERSION 4

typedef struct cham_backend_iface {
    int api_version;         /* CHAM_BACKEND_API_VERSION */
    const char *name;

    /* Optional: called once when the device is made, so the backend can
     * report errors with cham_device_set_error(dev, ...). */
    void (*attach)(void *ctx, cham_device_t *dev);
    /* Frees the context; streams and events are already freed. */
    void (*destroy)(void *ctx);
    /* Fills every field of info. */
    void (*get_info)(void *ctx, cham_device_info_t *info);

    /* Device memory segments (cudaMalloc / cudaFree; free synchronises). */
    cham_status_t (*mem_alloc)(void *ctx, size_t bytes, void **ptr);
    void (*mem_free)(void *ctx, void *ptr);
    /* Pinned host memory (cudaHostAlloc / cudaFreeHost). */
    cham_status_t (*host_alloc)(void *ctx, size_t bytes, void **ptr);
    void (*host_free)(void *ctx, void *ptr);

    /* Streams: *stream receives the backend's own object. id is the dense
     * id the device gave the stream (0, 1, ...). */
    cham_status_t (*stream_new)(void *ctx, int id, const char *name, void **stream);
    void (*stream_free)(void *ctx, void *stream);
    cham_status_t (*stream_synchronize)(void *ctx, void *stream);
    cham_status_t (*stream_wait_event)(void *ctx, void *stream, void *event);

    /* Events. */
    cham_status_t (*event_new)(void *ctx, void **event);
    void (*event_free)(void *ctx, void *event);
    cham_status_t (*event_record)(void *ctx, void *event, void *stream);
    cham_status_t (*event_query)(void *ctx, void *event); /* CHAM_OK or CHAM_NOT_READY */
    cham_status_t (*event_synchronize)(void *ctx, void *event);

    /* Work. */
    cham_status_t (*copy_async)(void *ctx, void *stream, void *dst, const void *src,
                                size_t bytes, cham_copy_kind_t kind, const char *label);
    cham_status_t (*kernel_launch)(void *ctx, void *stream, const cham_kernel_t *kernel);
    cham_status_t (*device_synchronize)(void *ctx);

    /* Host clock in ns; host_work is optional (NULL: time passes by itself). */
    uint64_t (*host_time)(void *ctx);
    void (*host_work)(void *ctx, uint64_t ns);

    /* Watching, optional (NULL: not offered; chameleon/device.h). */
    cham_status_t (*set_task_hook)(void *ctx, cham_task_hook_t hook, void *user);
    cham_status_t (*set_hazard_hook)(void *ctx, cham_hazard_hook_t hook, void *user);
    /* Whether the device checks for hazards; if so *count gets the number
     * found so far. */
    bool (*hazards)(void *ctx, uint64_t *count);

    /* Virtual memory, optional (vm_granularity NULL or returning 0: none).
     * The device layer has checked sizes and alignment and that a chunk is
     * mapped at one address at a time, unmapped from there, and released
     * unmapped; the backend checks the rest (a mapping inside a
     * reservation, over nothing mapped; a reservation released with
     * nothing mapped in it) and reports it with cham_device_set_error.
     * *phys receives the backend's own chunk object. */
    size_t (*vm_granularity)(void *ctx);
    cham_status_t (*vm_reserve)(void *ctx, size_t bytes, void **va);
    cham_status_t (*vm_release)(void *ctx, void *va, size_t bytes);
    cham_status_t (*phys_create)(void *ctx, size_t bytes, void **phys);
    void (*phys_release)(void *ctx, void *phys);
    cham_status_t (*vm_map)(void *ctx, void *va, void *phys, size_t bytes);
    cham_status_t (*vm_unmap)(void *ctx, void *va, size_t bytes);

    /* Host streams, optional (both NULL: none; chameleon/device.h,
     * cham_stream_new_host). The device layer refuses copies on them and
     * launches their kernels through host_launch; stream_free, synchronize,
     * wait_event and event_record take them as any stream. */
    cham_status_t (*stream_new_host)(void *ctx, int id, const char *name, void **stream);
    cham_status_t (*host_launch)(void *ctx, void *stream, const cham_kernel_t *kernel);

    /* Optional (version 4): when a recorded event's work completes, for a
     * backend that knows it ahead (the sim's timeline); cham_event_time. */
    cham_status_t (*event_time)(void *ctx, void *event, uint64_t *ns);
} cham_backend_iface_t;

/* Opens a device over a backend table. On success the device owns ctx and
 * calls iface->destroy(ctx) when closed. */
CHAM_API cham_status_t cham_device_open_iface(const cham_backend_iface_t *iface, void *ctx,
                                              cham_device_t **out);

/* The backend context of a device opened over iface, or NULL if the device
 * runs another backend. Lets backend-specific functions find their state. */
CHAM_API void *cham_device_backend_ctx(const cham_device_t *dev,
                                       const cham_backend_iface_t *iface);

/* Records a failure message on the device (printf-style); backends use it
 * so that cham_device_last_error() explains a failed call. */
CHAM_API void cham_device_set_error(cham_device_t *dev, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif
