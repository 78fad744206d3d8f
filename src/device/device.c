/* The public device API: finds a backend by name, checks arguments, wraps
 * the backend's stream and event objects in handles with dense ids, and
 * forwards every call to the backend's table. */
#include "chameleon/backend.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "device/backends.h"

#define CHAM_MAX_STREAMS 64
#define CHAM_NAME_MAX 48

/* Invariant: stream_used has bit i set iff a live stream has id i. */
struct cham_device {
    const cham_backend_iface_t *iface;
    void *ctx;
    bool watchable;               /* the table has the watching slots */
    bool host_streams;            /* the table has the host streams' slot */
    bool event_times;             /* the table has event_time (version 4) */
    uint64_t stream_used;
    int live_events;
    char error[512];
};

struct cham_stream {
    cham_device_t *dev;
    void *impl;
    int id;
    bool host;               /* the host CPU runs its work (cham_stream_new_host) */
    char name[CHAM_NAME_MAX];
};

struct cham_event {
    cham_device_t *dev;
    void *impl;
};

static _Thread_local char open_error[512];

void cham_device_set_open_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(open_error, sizeof open_error, fmt, ap);
    va_end(ap);
}

void cham_device_set_error(cham_device_t *dev, const char *fmt, ...)
{
    CHAM_ASSERT(dev);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dev->error, sizeof dev->error, fmt, ap);
    va_end(ap);
}

const char *cham_device_last_error(const cham_device_t *dev)
{
    return dev ? dev->error : open_error;
}

cham_device_config_t cham_device_config_default(void)
{
    cham_device_config_t c;
    memset(&c, 0, sizeof c);
    c.backend = "sim";
    c.hazard_check = true;
    return c;
}

cham_status_t cham_device_open(const cham_device_config_t *config, cham_device_t **out)
{
    CHAM_ASSERT(out);
    *out = NULL;
    open_error[0] = '\0';
    cham_device_config_t defaults = cham_device_config_default();
    if (!config)
        config = &defaults;
    const char *backend = config->backend ? config->backend : "sim";
    if (strcmp(backend, "sim") == 0)
        return cham_sim_open(config, out);
    if (strcmp(backend, "cuda") == 0)
        return cham_cuda_open(config, out);
    cham_device_set_open_error("unknown backend \"%s\" (known: sim, cuda)", backend);
    return CHAM_ERR_NOT_FOUND;
}

cham_status_t cham_device_open_iface(const cham_backend_iface_t *iface, void *ctx,
                                     cham_device_t **out)
{
    CHAM_ASSERT(iface && out);
    *out = NULL;
    if (iface->api_version < 1 || iface->api_version > CHAM_BACKEND_API_VERSION) {
        cham_device_set_open_error("backend \"%s\" has api_version %d, this library "
                                   "speaks %d", iface->name ? iface->name : "?",
                                   iface->api_version, CHAM_BACKEND_API_VERSION);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_device_t *dev = calloc(1, sizeof *dev);
    if (!dev) {
        cham_device_set_open_error("out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    dev->iface = iface;
    dev->ctx = ctx;
    dev->watchable = iface->api_version >= 2;   /* version 1 tables end before those slots */
    dev->host_streams = iface->api_version >= 3 && iface->stream_new_host && iface->host_launch;
    dev->event_times = iface->api_version >= 4 && iface->event_time;
    if (iface->attach)
        iface->attach(ctx, dev);
    *out = dev;
    return CHAM_OK;
}

void *cham_device_backend_ctx(const cham_device_t *dev, const cham_backend_iface_t *iface)
{
    return dev && dev->iface == iface ? dev->ctx : NULL;
}

void cham_device_close(cham_device_t *dev)
{
    if (!dev)
        return;
    CHAM_ASSERT(dev->stream_used == 0 && dev->live_events == 0 &&
                "free every stream and event before closing the device");
    dev->iface->device_synchronize(dev->ctx);
    dev->iface->destroy(dev->ctx);
    free(dev);
}

void cham_device_get_info(const cham_device_t *dev, cham_device_info_t *info)
{
    CHAM_ASSERT(dev && info);
    memset(info, 0, sizeof *info);
    dev->iface->get_info(dev->ctx, info);
}

/* ---- memory -------------------------------------------------------------*/

cham_status_t cham_device_mem_alloc(cham_device_t *dev, size_t bytes, void **ptr)
{
    CHAM_ASSERT(dev && ptr);
    *ptr = NULL;
    if (bytes == 0) {
        cham_device_set_error(dev, "device allocation of 0 bytes");
        return CHAM_ERR_INVALID_ARG;
    }
    return dev->iface->mem_alloc(dev->ctx, bytes, ptr);
}

void cham_device_mem_free(cham_device_t *dev, void *ptr)
{
    CHAM_ASSERT(dev);
    if (ptr)
        dev->iface->mem_free(dev->ctx, ptr);
}

cham_status_t cham_device_host_alloc(cham_device_t *dev, size_t bytes, void **ptr)
{
    CHAM_ASSERT(dev && ptr);
    *ptr = NULL;
    if (bytes == 0) {
        cham_device_set_error(dev, "pinned host allocation of 0 bytes");
        return CHAM_ERR_INVALID_ARG;
    }
    return dev->iface->host_alloc(dev->ctx, bytes, ptr);
}

void cham_device_host_free(cham_device_t *dev, void *ptr)
{
    CHAM_ASSERT(dev);
    if (ptr)
        dev->iface->host_free(dev->ctx, ptr);
}

/* ---- streams ------------------------------------------------------------*/

static cham_status_t stream_new(cham_device_t *dev, const char *name, bool host,
                                cham_stream_t **out)
{
    CHAM_ASSERT(dev && out);
    *out = NULL;
    if (host && !dev->host_streams) {
        cham_device_set_error(dev, "the %s backend has no host streams", dev->iface->name);
        return CHAM_ERR_UNSUPPORTED;
    }
    if (dev->stream_used == UINT64_MAX) {
        cham_device_set_error(dev, "too many streams: at most %d may be live at once",
                              CHAM_MAX_STREAMS);
        return CHAM_ERR_INVALID_ARG;
    }
    int id = 0;
    while (dev->stream_used & (UINT64_C(1) << id))
        id++;
    cham_stream_t *s = calloc(1, sizeof *s);
    if (!s) {
        cham_device_set_error(dev, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    s->dev = dev;
    s->id = id;
    s->host = host;
    if (name && *name)
        snprintf(s->name, sizeof s->name, "%s", name);
    else
        snprintf(s->name, sizeof s->name, "stream%d", id);
    cham_status_t st = (host ? dev->iface->stream_new_host
                             : dev->iface->stream_new)(dev->ctx, id, s->name, &s->impl);
    if (st != CHAM_OK) {
        free(s);
        return st;
    }
    dev->stream_used |= UINT64_C(1) << id;
    *out = s;
    return CHAM_OK;
}

cham_status_t cham_stream_new(cham_device_t *dev, const char *name, cham_stream_t **out)
{
    return stream_new(dev, name, false, out);
}

cham_status_t cham_stream_new_host(cham_device_t *dev, const char *name, cham_stream_t **out)
{
    return stream_new(dev, name, true, out);
}

bool cham_stream_on_host(const cham_stream_t *s)
{
    CHAM_ASSERT(s);
    return s->host;
}

void cham_stream_free(cham_stream_t *s)
{
    if (!s)
        return;
    cham_device_t *dev = s->dev;
    dev->iface->stream_free(dev->ctx, s->impl);
    dev->stream_used &= ~(UINT64_C(1) << s->id);
    free(s);
}

int cham_stream_id(const cham_stream_t *s)
{
    CHAM_ASSERT(s);
    return s->id;
}

const char *cham_stream_name(const cham_stream_t *s)
{
    CHAM_ASSERT(s);
    return s->name;
}

cham_device_t *cham_stream_device(const cham_stream_t *s)
{
    CHAM_ASSERT(s);
    return s->dev;
}

cham_status_t cham_stream_synchronize(cham_stream_t *s)
{
    CHAM_ASSERT(s);
    return s->dev->iface->stream_synchronize(s->dev->ctx, s->impl);
}

cham_status_t cham_stream_wait_event(cham_stream_t *s, cham_event_t *e)
{
    CHAM_ASSERT(s && e && s->dev == e->dev);
    return s->dev->iface->stream_wait_event(s->dev->ctx, s->impl, e->impl);
}

/* ---- events -------------------------------------------------------------*/

cham_status_t cham_event_new(cham_device_t *dev, cham_event_t **out)
{
    CHAM_ASSERT(dev && out);
    *out = NULL;
    cham_event_t *e = calloc(1, sizeof *e);
    if (!e) {
        cham_device_set_error(dev, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    e->dev = dev;
    cham_status_t st = dev->iface->event_new(dev->ctx, &e->impl);
    if (st != CHAM_OK) {
        free(e);
        return st;
    }
    dev->live_events++;
    *out = e;
    return CHAM_OK;
}

void cham_event_free(cham_event_t *e)
{
    if (!e)
        return;
    e->dev->iface->event_free(e->dev->ctx, e->impl);
    e->dev->live_events--;
    free(e);
}

cham_status_t cham_event_record(cham_event_t *e, cham_stream_t *s)
{
    CHAM_ASSERT(e && s && e->dev == s->dev);
    return e->dev->iface->event_record(e->dev->ctx, e->impl, s->impl);
}

cham_status_t cham_event_query(cham_event_t *e)
{
    CHAM_ASSERT(e);
    return e->dev->iface->event_query(e->dev->ctx, e->impl);
}

cham_status_t cham_event_time(cham_event_t *e, uint64_t *ns)
{
    CHAM_ASSERT(e && ns);
    if (!e->dev->event_times)
        return CHAM_ERR_UNSUPPORTED;
    return e->dev->iface->event_time(e->dev->ctx, e->impl, ns);
}

cham_status_t cham_event_synchronize(cham_event_t *e)
{
    CHAM_ASSERT(e);
    return e->dev->iface->event_synchronize(e->dev->ctx, e->impl);
}

/* ---- work ---------------------------------------------------------------*/

cham_status_t cham_copy_async(cham_stream_t *s, void *dst, const void *src, size_t bytes,
                              cham_copy_kind_t kind, const char *label)
{
    CHAM_ASSERT(s);
    if (kind != CHAM_COPY_H2D && kind != CHAM_COPY_D2H && kind != CHAM_COPY_D2D) {
        cham_device_set_error(s->dev, "copy kind %d is not one of H2D, D2H, D2D", (int)kind);
        return CHAM_ERR_INVALID_ARG;
    }
    if (s->host) {
        cham_device_set_error(s->dev, "copy \"%s\" on host stream \"%s\": copies run on "
                              "device streams only", label ? label : "", s->name);
        return CHAM_ERR_INVALID_ARG;
    }
    if (bytes > 0 && (!dst || !src)) {
        cham_device_set_error(s->dev, "copy \"%s\" of %zu bytes with a NULL %s pointer",
                              label ? label : "", bytes, dst ? "source" : "destination");
        return CHAM_ERR_INVALID_ARG;
    }
    return s->dev->iface->copy_async(s->dev->ctx, s->impl, dst, src, bytes, kind, label);
}

cham_status_t cham_kernel_launch(cham_stream_t *s, const cham_kernel_t *k)
{
    CHAM_ASSERT(s && k);
    CHAM_ASSERT(k->n_accesses == 0 || k->accesses);
    if (!(k->flops >= 0) || !(k->bytes >= 0)) {
        cham_device_set_error(s->dev, "kernel \"%s\" has a negative or NaN cost "
                              "(flops %g, bytes %g)", k->label ? k->label : "",
                              k->flops, k->bytes);
        return CHAM_ERR_INVALID_ARG;
    }
    return (s->host ? s->dev->iface->host_launch
                    : s->dev->iface->kernel_launch)(s->dev->ctx, s->impl, k);
}

cham_status_t cham_device_synchronize(cham_device_t *dev)
{
    CHAM_ASSERT(dev);
    return dev->iface->device_synchronize(dev->ctx);
}

/* ---- host clock ---------------------------------------------------------*/

uint64_t cham_device_host_time(const cham_device_t *dev)
{
    CHAM_ASSERT(dev);
    return dev->iface->host_time(dev->ctx);
}

void cham_device_host_work(cham_device_t *dev, uint64_t ns)
{
    CHAM_ASSERT(dev);
    if (dev->iface->host_work)
        dev->iface->host_work(dev->ctx, ns);
}

/* ---- watching -----------------------------------------------------------*/

cham_status_t cham_device_set_task_hook(cham_device_t *dev, cham_task_hook_t hook, void *user)
{
    CHAM_ASSERT(dev);
    if (!dev->watchable || !dev->iface->set_task_hook) {
        cham_device_set_error(dev, "the %s backend does not time its tasks", dev->iface->name);
        return CHAM_ERR_UNSUPPORTED;
    }
    return dev->iface->set_task_hook(dev->ctx, hook, user);
}

cham_status_t cham_device_set_hazard_hook(cham_device_t *dev, cham_hazard_hook_t hook,
                                          void *user)
{
    CHAM_ASSERT(dev);
    if (!dev->watchable || !dev->iface->set_hazard_hook) {
        cham_device_set_error(dev, "the %s backend has no hazard detector", dev->iface->name);
        return CHAM_ERR_UNSUPPORTED;
    }
    return dev->iface->set_hazard_hook(dev->ctx, hook, user);
}

uint64_t cham_device_hazard_count(const cham_device_t *dev)
{
    uint64_t n = 0;
    return cham_device_checks_hazards(dev) && dev->iface->hazards(dev->ctx, &n) ? n : 0;
}

bool cham_device_checks_hazards(const cham_device_t *dev)
{
    uint64_t n;
    CHAM_ASSERT(dev);
    return dev->watchable && dev->iface->hazards && dev->iface->hazards(dev->ctx, &n);
}

char *cham_hazard_format(const cham_hazard_t *h, char *buf, size_t size)
{
    snprintf(buf, size,
             "hazard %s at 0x%" PRIxPTR " (%zu bytes): \"%s\" on stream %s starts at %" PRIu64
             " ns, before \"%s\" on stream %s finishes at %" PRIu64 " ns",
             h->kind, h->addr, h->bytes, h->later_label, h->later_stream_name,
             h->later_start_ns, h->earlier_label, h->earlier_stream_name, h->earlier_end_ns);
    return buf;
}

/* ---- virtual memory -------------------------------------------------------*/

struct cham_phys {
    cham_device_t *dev;
    void *impl;
    size_t bytes;
    void *mapped_at;              /* NULL while unmapped */
};

size_t cham_vm_granularity(const cham_device_t *dev)
{
    CHAM_ASSERT(dev);
    return dev->watchable && dev->iface->vm_granularity ? dev->iface->vm_granularity(dev->ctx)
                                                        : 0;
}

/* CHAM_OK when the device has virtual memory and bytes (> 0) and va are
 * multiples of its granularity; else the error, set on the device. */
static cham_status_t vm_check(cham_device_t *dev, const char *what, const void *va,
                              size_t bytes)
{
    size_t g = cham_vm_granularity(dev);
    if (!g) {
        cham_device_set_error(dev, "the %s backend has no virtual memory management",
                              dev->iface->name);
        return CHAM_ERR_UNSUPPORTED;
    }
    if (bytes == 0 || bytes % g || (uintptr_t)va % g) {
        cham_device_set_error(dev, "%s: %zu bytes at %p: both must be multiples of the "
                              "granularity, %zu bytes (and the size above 0)", what, bytes, va, g);
        return CHAM_ERR_INVALID_ARG;
    }
    return CHAM_OK;
}

cham_status_t cham_vm_reserve(cham_device_t *dev, size_t bytes, void **va)
{
    CHAM_ASSERT(dev && va);
    *va = NULL;
    cham_status_t st = vm_check(dev, "address reservation", NULL, bytes);
    return st != CHAM_OK ? st : dev->iface->vm_reserve(dev->ctx, bytes, va);
}

cham_status_t cham_vm_release(cham_device_t *dev, void *va, size_t bytes)
{
    CHAM_ASSERT(dev);
    cham_status_t st = vm_check(dev, "address release", va, bytes);
    return st != CHAM_OK ? st : dev->iface->vm_release(dev->ctx, va, bytes);
}

cham_status_t cham_phys_create(cham_device_t *dev, size_t bytes, cham_phys_t **out)
{
    CHAM_ASSERT(dev && out);
    *out = NULL;
    cham_status_t st = vm_check(dev, "physical chunk", NULL, bytes);
    if (st != CHAM_OK)
        return st;
    cham_phys_t *p = calloc(1, sizeof *p);
    if (!p) {
        cham_device_set_error(dev, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    if ((st = dev->iface->phys_create(dev->ctx, bytes, &p->impl)) != CHAM_OK) {
        free(p);
        return st;
    }
    p->dev = dev;
    p->bytes = bytes;
    *out = p;
    return CHAM_OK;
}

void cham_phys_release(cham_phys_t *p)
{
    if (!p)
        return;
    CHAM_ASSERT(!p->mapped_at && "releasing a physical chunk that is still mapped");
    p->dev->iface->phys_release(p->dev->ctx, p->impl);
    free(p);
}

size_t cham_phys_size(const cham_phys_t *p)
{
    CHAM_ASSERT(p);
    return p->bytes;
}

cham_status_t cham_vm_map(cham_phys_t *p, void *va)
{
    CHAM_ASSERT(p);
    cham_status_t st = vm_check(p->dev, "mapping", va, p->bytes);
    if (st != CHAM_OK)
        return st;
    if (p->mapped_at) {
        cham_device_set_error(p->dev, "mapping a chunk at %p that is already mapped at %p", va,
                              p->mapped_at);
        return CHAM_ERR_INVALID_ARG;
    }
    if ((st = p->dev->iface->vm_map(p->dev->ctx, va, p->impl, p->bytes)) == CHAM_OK)
        p->mapped_at = va;
    return st;
}

cham_status_t cham_vm_unmap(cham_phys_t *p)
{
    CHAM_ASSERT(p);
    if (!p->mapped_at) {
        cham_device_set_error(p->dev, "unmapping a chunk of %zu bytes that is not mapped",
                              p->bytes);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_status_t st = p->dev->iface->vm_unmap(p->dev->ctx, p->mapped_at, p->bytes);
    if (st == CHAM_OK)
        p->mapped_at = NULL;
    return st;
}

void *cham_phys_mapped_at(const cham_phys_t *p)
{
    CHAM_ASSERT(p);
    return p->mapped_at;
}
