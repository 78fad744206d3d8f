/* The sim backend: an emulated accelerator with virtual, analytic time.
 *
 * Every stream has a ready time. A task starts at max(host time when it is
 * queued, the stream's ready time, the times of events the stream waits on,
 * and for a copy the time its link becomes free) and lasts its cost: a
 * roofline for kernels, latency + bytes / bandwidth for copies. The host
 * clock moves by a dispatch cost per launch and jumps when the host waits
 * (synchronisation, a full launch queue). Everything is integer nanoseconds
 * computed the same way on every machine, so a program always produces the
 * same timeline. With data, kernels' CPU functions and copies also run, in
 * program order, on real memory. docs/device.md describes the model. */
#include "device/backends.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chameleon/sim.h"
#include "common/assert.h"
#include "common/grow.h"
#include "common/output.h"
#include "device/sim_hazard.h"
#include "device/sim_mem.h"
#include "device/sim_vm.h"

/* Defaults for what data sheets do not give (docs/device.md). */
#define SIM_LAUNCH_NS 5000             /* host: dispatch one kernel or copy */
#define SIM_KERNEL_OVERHEAD_NS 2000    /* device: fixed cost per kernel */
#define SIM_COPY_LATENCY_NS 5000       /* device: fixed cost per copy */
#define SIM_EVENT_QUERY_NS 1000        /* host: one event query */
#define SIM_QUEUE_DEPTH 1024           /* tasks in flight before the host blocks */
#define SIM_MEM_ALLOC_NS 30000         /* host: cudaMalloc of a segment */
#define SIM_MEM_FREE_NS 10000          /* host: cudaFree, after the device sync */
#define SIM_HOST_ALLOC_NS 50000        /* host: cudaHostAlloc, plus pinning below */
#define SIM_PIN_BYTES_PER_S 4e9        /* host: page pinning rate */
#define SIM_HOST_FREE_NS 20000
#define SIM_MAX_PRINTED_HAZARDS 20
/* Host time of the virtual memory calls. Not measured here (no GPU): the
 * "few microseconds" a call of CUDA's driver takes, with cuMemCreate and
 * cuMemRelease dearer as they touch the physical allocator
 * (docs/device.md, "Virtual memory"). */
#define SIM_VM_RESERVE_NS 5000         /* cuMemAddressReserve */
#define SIM_VM_RELEASE_NS 5000         /* cuMemAddressFree */
#define SIM_PHYS_CREATE_NS 10000       /* cuMemCreate */
#define SIM_PHYS_RELEASE_NS 10000      /* cuMemRelease */
#define SIM_VM_MAP_NS 5000             /* cuMemMap + cuMemSetAccess */
#define SIM_VM_UNMAP_NS 5000           /* cuMemUnmap */

#define DEVICE_BASE ((uintptr_t)1 << 46)   /* fake addresses without data */
#define HOST_BASE ((uintptr_t)2 << 46)
#define VM_BASE ((uintptr_t)3 << 46)

enum { LINK_H2D, LINK_D2H, N_LINKS };

typedef struct sim_stream {
    int id;
    char name[48];
    uint64_t ready;          /* when the last queued task finishes */
} sim_stream_t;

typedef struct sim_event {
    bool recorded;
    uint64_t time;           /* completion time of the captured work */
} sim_event_t;

/* Min-heap of the end times of tasks not yet finished at host time. */
typedef struct end_heap {
    uint64_t *v;
    size_t n, cap;
} end_heap_t;

typedef struct fault {
    bool armed;
    uint64_t after;
    cham_status_t status;
} fault_t;

typedef struct sim {
    cham_device_t *dev;
    cham_preset_t preset;    /* figures after overrides */
    char name[48];
    uint64_t launch_ns, kernel_overhead_ns, copy_latency_ns, event_query_ns;
    uint32_t queue_depth;
    bool data;

    uint64_t host;           /* the host clock */
    uint64_t link_ready[N_LINKS];
    uint64_t retired_ready;  /* latest end of work on streams already freed */
    end_heap_t inflight;
    sim_stream_t *streams[CHAM_SIM_MAX_STREAMS];
    sim_mem_t *device_mem, *host_mem;
    sim_vm_t *vm;            /* virtual memory; its chunks count in device_mem */
    sim_hazard_t *hazard;    /* NULL when the detector is off */
    struct touch *touch;     /* scratch: a kernel's accesses */
    size_t touch_cap;

    cham_sim_stats_t stats;
    cham_task_hook_t task_hook;
    void *task_hook_user;
    cham_hazard_hook_t hazard_hook;
    void *hazard_hook_user;
    fault_t faults[CHAM_SIM_FAULT_COUNT_];
} sim_t;

static const cham_backend_iface_t sim_iface;

/* ---- helpers ------------------------------------------------------------*/

/* ceil(x) as integer ns; x is seconds * 1e9 already. */
static uint64_t ns_ceil(double x)
{
    return x <= 0 ? 0 : (uint64_t)ceil(x);
}

/* The FLOP/s kernels reach, and the device memory bytes/s kernels and
 * on-device copies reach. */
static double flops_rate(const sim_t *s)
{
    return s->preset.peak_flops * s->preset.flops_efficiency;
}

static double hbm_rate(const sim_t *s)
{
    return s->preset.hbm_bandwidth * s->preset.hbm_efficiency;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static void heap_pop(end_heap_t *h)
{
    h->v[0] = h->v[--h->n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->v[l] < h->v[m])
            m = l;
        if (r < h->n && h->v[r] < h->v[m])
            m = r;
        if (m == i)
            break;
        uint64_t t = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = t;
        i = m;
    }
}

static bool heap_push(end_heap_t *h, uint64_t x)
{
    uint64_t *v = cham_grow(h->v, &h->cap, h->n + 1, sizeof *v, 256);
    if (!v)
        return false;
    h->v = v;
    size_t i = h->n++;
    h->v[i] = x;
    while (i > 0 && h->v[(i - 1) / 2] > h->v[i]) {
        size_t p = (i - 1) / 2;
        uint64_t t = h->v[i];
        h->v[i] = h->v[p];
        h->v[p] = t;
        i = p;
    }
    return true;
}

static void emit(sim_t *s, cham_task_kind_t kind, const sim_stream_t *st, const char *label,
                 uint64_t enqueue, uint64_t start, uint64_t end, uint64_t bytes, double flops)
{
    if (!s->task_hook)
        return;
    cham_task_record_t r = {
        .kind = kind,
        .stream_id = st ? st->id : -1,
        .stream_name = st ? st->name : "host",
        .label = label ? label : "",
        .enqueue_ns = enqueue,
        .start_ns = start,
        .end_ns = end,
        .bytes = bytes,
        .flops = flops,
    };
    s->task_hook(&r, s->task_hook_user);
}

/* The host waits until time t (no-op if t is past). */
static void host_wait_until(sim_t *s, uint64_t t, const char *why)
{
    if (t <= s->host)
        return;
    emit(s, CHAM_TASK_HOST_BLOCKED, NULL, why, s->host, s->host, t, 0, 0);
    s->stats.host_blocked_ns += t - s->host;
    s->host = t;
}

static void report_hazard(const cham_hazard_t *h, void *user)
{
    sim_t *s = user;
    s->stats.hazards++;
    if (s->hazard_hook) {
        s->hazard_hook(h, s->hazard_hook_user);
        return;
    }
    if (s->stats.hazards <= SIM_MAX_PRINTED_HAZARDS) {
        char line[512];
        cham_output("sim %s: %s", s->name, cham_hazard_format(h, line, sizeof line));
    } else if (s->stats.hazards == SIM_MAX_PRINTED_HAZARDS + 1) {
        cham_output("sim %s: further hazards are counted, not printed", s->name);
    }
}

static bool fault_fires(sim_t *s, cham_sim_fault_t kind, cham_status_t *status)
{
    fault_t *f = &s->faults[kind];
    if (!f->armed)
        return false;
    if (f->after > 0) {
        f->after--;
        return false;
    }
    f->armed = false;
    *status = f->status;
    return true;
}

/* ---- memory -------------------------------------------------------------*/

static uint64_t all_streams_ready(const sim_t *s)
{
    uint64_t t = 0;
    for (int i = 0; i < CHAM_SIM_MAX_STREAMS; i++)
        if (s->streams[i])
            t = max_u64(t, s->streams[i]->ready);
    return max_u64(t, s->retired_ready);
}

/* A segment of device memory or of pinned host memory; the host pays what
 * cudaMalloc or cudaHostAlloc would cost. */
static cham_status_t segment_alloc(sim_t *s, bool host, size_t bytes, void **ptr)
{
    const char *what = host ? "pinned host" : "device";
    cham_status_t st;
    if (fault_fires(s, host ? CHAM_SIM_FAULT_HOST_ALLOC : CHAM_SIM_FAULT_MEM_ALLOC, &st)) {
        cham_device_set_error(s->dev, "sim %s: injected fault: %s allocation of %zu bytes "
                              "fails with \"%s\"", s->name, what, bytes, cham_status_string(st));
        return st;
    }
    s->host += host ? SIM_HOST_ALLOC_NS + ns_ceil((double)bytes / SIM_PIN_BYTES_PER_S * 1e9)
                    : SIM_MEM_ALLOC_NS;
    sim_mem_t *mem = host ? s->host_mem : s->device_mem;
    st = sim_mem_alloc(mem, bytes, ptr);
    if (st == CHAM_ERR_OUT_OF_MEMORY)
        cham_device_set_error(s->dev, "sim %s: out of %s memory: requested %zu bytes, %llu of "
                              "%llu in use", s->name, what, bytes,
                              (unsigned long long)sim_mem_in_use(mem),
                              (unsigned long long)sim_mem_capacity(mem));
    else if (st != CHAM_OK)
        cham_device_set_error(s->dev, "sim %s: the host cannot back a %zu-byte %s segment",
                              s->name, bytes, what);
    else if (host)
        s->stats.host_allocs++;
    else
        s->stats.mem_allocs++;
    return st;
}

/* Returns a segment; like cudaFree and cudaFreeHost, waits for the device. */
static void segment_free(sim_t *s, bool host, void *ptr)
{
    host_wait_until(s, all_streams_ready(s), host ? "cudaFreeHost synchronises"
                                                  : "cudaFree synchronises");
    size_t bytes = sim_mem_release(host ? s->host_mem : s->device_mem, ptr);
    CHAM_ASSERT(bytes > 0 && "freeing a pointer that is not a segment of this kind");
    if (s->hazard)
        sim_hazard_forget(s->hazard, (uintptr_t)ptr, bytes);
    if (host) {
        s->host += SIM_HOST_FREE_NS;
        s->stats.host_frees++;
    } else {
        s->host += SIM_MEM_FREE_NS;
        s->stats.mem_frees++;
    }
}

static cham_status_t sim_mem_alloc_slot(void *ctx, size_t bytes, void **ptr)
{
    return segment_alloc(ctx, false, bytes, ptr);
}

static void sim_mem_free_slot(void *ctx, void *ptr)
{
    segment_free(ctx, false, ptr);
}

static cham_status_t sim_host_alloc_slot(void *ctx, size_t bytes, void **ptr)
{
    return segment_alloc(ctx, true, bytes, ptr);
}

static void sim_host_free_slot(void *ctx, void *ptr)
{
    segment_free(ctx, true, ptr);
}

/* ---- streams and events -------------------------------------------------*/

static cham_status_t stream_new(sim_t *s, int id, const char *name, void **out)
{
    if (id >= CHAM_SIM_MAX_STREAMS) {
        cham_device_set_error(s->dev, "sim: at most %d streams", CHAM_SIM_MAX_STREAMS);
        return CHAM_ERR_INVALID_ARG;
    }
    sim_stream_t *st = calloc(1, sizeof *st);
    if (!st)
        return CHAM_ERR_HOST_OOM;
    st->id = id;
    snprintf(st->name, sizeof st->name, "%s", name);
    /* A new stream has no work: it is ready now. */
    st->ready = s->host;
    s->streams[id] = st;
    if (id >= s->stats.n_streams)
        s->stats.n_streams = id + 1;
    if (s->hazard)
        sim_hazard_name_stream(s->hazard, id, name);
    *out = st;
    return CHAM_OK;
}

static cham_status_t sim_stream_new(void *ctx, int id, const char *name, void **out)
{
    return stream_new(ctx, id, name, out);
}

static cham_status_t sim_stream_new_host(void *ctx, int id, const char *name, void **out)
{
    sim_t *s = ctx;
    if (!(s->preset.host_flops > 0 && s->preset.host_mem_bandwidth > 0)) {
        cham_device_set_error(s->dev, "sim %s: no host-compute figures (host_flops %g, "
                              "host_mem_bandwidth %g): the preset names no host, so host "
                              "stream \"%s\" cannot be timed; set both in the device config",
                              s->name, s->preset.host_flops, s->preset.host_mem_bandwidth,
                              name);
        return CHAM_ERR_UNSUPPORTED;
    }
    return stream_new(s, id, name, out);
}

static void sim_stream_free(void *ctx, void *stream)
{
    sim_t *s = ctx;
    sim_stream_t *st = stream;
    /* Queued work still finishes: device-wide syncs still wait for it. */
    s->retired_ready = max_u64(s->retired_ready, st->ready);
    s->streams[st->id] = NULL;
    free(st);
}

static cham_status_t sim_stream_synchronize(void *ctx, void *stream)
{
    sim_t *s = ctx;
    sim_stream_t *st = stream;
    host_wait_until(s, st->ready, "stream synchronize");
    return CHAM_OK;
}

static cham_status_t sim_stream_wait_event(void *ctx, void *stream, void *event)
{
    sim_t *s = ctx;
    sim_stream_t *st = stream;
    sim_event_t *e = event;
    s->stats.event_waits++;
    if (e->recorded)
        st->ready = max_u64(st->ready, e->time);
    return CHAM_OK;
}

static cham_status_t sim_event_new(void *ctx, void **out)
{
    (void)ctx;
    sim_event_t *e = calloc(1, sizeof *e);
    if (!e)
        return CHAM_ERR_HOST_OOM;
    *out = e;
    return CHAM_OK;
}

static void sim_event_free(void *ctx, void *event)
{
    (void)ctx;
    free(event);
}

static cham_status_t sim_event_record(void *ctx, void *event, void *stream)
{
    sim_t *s = ctx;
    sim_event_t *e = event;
    sim_stream_t *st = stream;
    s->stats.event_records++;
    e->recorded = true;
    /* The captured work is everything queued so far; an idle stream's
     * event completes when it is recorded. */
    e->time = max_u64(st->ready, s->host);
    return CHAM_OK;
}

static cham_status_t sim_event_query(void *ctx, void *event)
{
    sim_t *s = ctx;
    sim_event_t *e = event;
    s->stats.event_queries++;
    s->host += s->event_query_ns;
    return !e->recorded || e->time <= s->host ? CHAM_OK : CHAM_NOT_READY;
}

static cham_status_t sim_event_time(void *ctx, void *event, uint64_t *ns)
{
    (void)ctx;
    sim_event_t *e = event;
    *ns = e->recorded ? e->time : 0;
    return CHAM_OK;
}

static cham_status_t sim_event_synchronize(void *ctx, void *event)
{
    sim_t *s = ctx;
    sim_event_t *e = event;
    if (e->recorded)
        host_wait_until(s, e->time, "event synchronize");
    return CHAM_OK;
}

static cham_status_t sim_device_synchronize(void *ctx)
{
    sim_t *s = ctx;
    host_wait_until(s, all_streams_ready(s), "device synchronize");
    return CHAM_OK;
}

/* ---- work ---------------------------------------------------------------*/

/* One memory range a task touches, and which address space it must be in. */
typedef struct touch {
    uintptr_t addr;
    size_t bytes;
    bool write;
    bool host;               /* pinned host memory rather than device memory */
} touch_t;

/* Checks that every range lies in memory of the right kind. */
static cham_status_t check_ranges(sim_t *s, const touch_t *t, size_t n, const char *label)
{
    for (size_t i = 0; i < n; i++) {
        const sim_mem_t *mem = t[i].host ? s->host_mem : s->device_mem;
        if (t[i].bytes && !sim_mem_contains(mem, t[i].addr, t[i].bytes) &&
            (t[i].host || !sim_vm_contains(s->vm, t[i].addr, t[i].bytes))) {
            cham_device_set_error(s->dev, "sim %s: task \"%s\" %s %zu bytes at %p, which is "
                                  "not inside one %s segment or mapping", s->name,
                                  label ? label : "",
                                  t[i].write ? "writes" : "reads", t[i].bytes,
                                  (void *)t[i].addr,
                                  t[i].host ? "pinned host" : "device memory");
            return CHAM_ERR_INVALID_ARG;
        }
    }
    return CHAM_OK;
}

/* Places a task of the given device cost on the timeline: the host pays the
 * dispatch, waits if the launch queue is full, and the task starts when the
 * host, the stream and (for copies) the link allow. */
static cham_status_t enqueue(sim_t *s, sim_stream_t *st, int link, uint64_t cost,
                             const touch_t *t, size_t n, cham_task_kind_t kind,
                             const char *label, uint64_t bytes, double flops)
{
    s->host += s->launch_ns;
    end_heap_t *h = &s->inflight;
    while (h->n && h->v[0] <= s->host)
        heap_pop(h);
    if (h->n >= s->queue_depth) {
        host_wait_until(s, h->v[0], "launch queue full");
        while (h->n && h->v[0] <= s->host)
            heap_pop(h);
    }
    uint64_t enq = s->host;
    uint64_t start = max_u64(enq, st->ready);
    if (link >= 0)
        start = max_u64(start, s->link_ready[link]);
    uint64_t end = start + cost;
    if (!heap_push(h, end))
        return CHAM_ERR_HOST_OOM;
    st->ready = end;
    if (link >= 0)
        s->link_ready[link] = end;
    s->stats.stream_busy_ns[st->id] += cost;
    if (s->hazard)
        for (size_t i = 0; i < n; i++)
            if (sim_hazard_access(s->hazard, t[i].addr, t[i].bytes, t[i].write, st->id, start,
                                  end, label) == SIZE_MAX)
                return CHAM_ERR_HOST_OOM;
    emit(s, kind, st, label, enq, start, end, bytes, flops);
    return CHAM_OK;
}

static cham_status_t sim_copy_async(void *ctx, void *stream, void *dst, const void *src,
                                    size_t bytes, cham_copy_kind_t kind, const char *label)
{
    sim_t *s = ctx;
    touch_t t[2] = {
        {(uintptr_t)src, bytes, false, kind == CHAM_COPY_H2D},
        {(uintptr_t)dst, bytes, true, kind == CHAM_COPY_D2H},
    };
    cham_status_t st = check_ranges(s, t, 2, label);
    if (st != CHAM_OK)
        return st;
    int link = -1;
    uint64_t cost;
    cham_task_kind_t task;
    if (kind == CHAM_COPY_H2D) {
        link = LINK_H2D;
        task = CHAM_TASK_COPY_H2D;
        cost = s->copy_latency_ns + ns_ceil((double)bytes / s->preset.h2d_bandwidth * 1e9);
        s->stats.bytes_h2d += bytes;
    } else if (kind == CHAM_COPY_D2H) {
        link = LINK_D2H;
        task = CHAM_TASK_COPY_D2H;
        cost = s->copy_latency_ns + ns_ceil((double)bytes / s->preset.d2h_bandwidth * 1e9);
        s->stats.bytes_d2h += bytes;
    } else {
        /* Within HBM every byte is read once and written once. */
        task = CHAM_TASK_COPY_D2D;
        cost = s->copy_latency_ns + ns_ceil(2.0 * (double)bytes / hbm_rate(s) * 1e9);
        s->stats.bytes_d2d += bytes;
    }
    st = enqueue(s, stream, link, cost, t, 2, task, label, bytes, 0);
    if (st != CHAM_OK)
        return st;
    if (link == LINK_H2D)
        s->stats.link_busy_h2d_ns += cost;
    else if (link == LINK_D2H)
        s->stats.link_busy_d2h_ns += cost;
    s->stats.copies++;
    if (s->data && bytes) {
        /* The host does what a copy engine does on hardware: timed apart. */
        struct timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        memmove(dst, src, bytes);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        s->stats.data_copy_cpu_ns += (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL +
                                                (t1.tv_nsec - t0.tv_nsec));
    }
    return CHAM_OK;
}

/* A kernel on a device stream, or on a host stream (host: its accesses are
 * pinned host memory and the host's figures time it). */
static cham_status_t launch(sim_t *s, void *stream, const cham_kernel_t *k, bool host)
{
    touch_t *t = cham_grow(s->touch, &s->touch_cap, k->n_accesses, sizeof *t, 16);
    if (!t && k->n_accesses)
        return CHAM_ERR_HOST_OOM;
    s->touch = t;
    for (size_t i = 0; i < k->n_accesses; i++)
        t[i] = (touch_t){(uintptr_t)k->accesses[i].ptr, k->accesses[i].bytes,
                         (k->accesses[i].mode & CHAM_ACCESS_WRITE) != 0, host};
    cham_status_t st = check_ranges(s, t, k->n_accesses, k->label);
    if (st == CHAM_OK) {
        /* The host's share of CPU and DRAM, or the device's roofline. */
        double secs = host ? fmax(k->flops / s->preset.host_flops,
                                  k->bytes / s->preset.host_mem_bandwidth)
                           : fmax(k->flops / flops_rate(s), k->bytes / hbm_rate(s));
        secs = fmax(secs, k->link_bytes / s->preset.p2p_bandwidth);
        uint64_t cost = s->kernel_overhead_ns + ns_ceil(secs * 1e9);
        /* A read-write access is checked as a write: that covers both rules. */
        st = enqueue(s, stream, -1, cost, t, k->n_accesses, CHAM_TASK_KERNEL, k->label,
                     (uint64_t)k->bytes, k->flops);
    }
    if (st != CHAM_OK)
        return st;
    s->stats.kernels++;
    if (s->data && k->cpu_fn)
        k->cpu_fn(k->arg);
    return CHAM_OK;
}

static cham_status_t sim_kernel_launch(void *ctx, void *stream, const cham_kernel_t *k)
{
    return launch(ctx, stream, k, false);
}

static cham_status_t sim_host_launch(void *ctx, void *stream, const cham_kernel_t *k)
{
    return launch(ctx, stream, k, true);
}

/* ---- clock, info, lifetime ---------------------------------------------*/

static uint64_t sim_host_time(void *ctx)
{
    return ((sim_t *)ctx)->host;
}

static void sim_host_work(void *ctx, uint64_t ns)
{
    ((sim_t *)ctx)->host += ns;
}

static void sim_get_info(void *ctx, cham_device_info_t *info)
{
    sim_t *s = ctx;
    info->backend = "sim";
    info->name = s->name;
    info->capacity = s->preset.capacity;
    info->peak_flops = s->preset.peak_flops;
    info->hbm_bandwidth = s->preset.hbm_bandwidth;
    info->h2d_bandwidth = s->preset.h2d_bandwidth;
    info->d2h_bandwidth = s->preset.d2h_bandwidth;
    info->p2p_bandwidth = s->preset.p2p_bandwidth;
    info->host_flops = s->preset.host_flops;
    info->host_mem_bandwidth = s->preset.host_mem_bandwidth;
    info->flops_efficiency = s->preset.flops_efficiency;
    info->hbm_efficiency = s->preset.hbm_efficiency;
    info->data = s->data;
    info->launch_ns = s->launch_ns;
    info->kernel_overhead_ns = s->kernel_overhead_ns;
    info->copy_latency_ns = s->copy_latency_ns;
}

static void sim_attach(void *ctx, cham_device_t *dev)
{
    ((sim_t *)ctx)->dev = dev;
}

static void sim_destroy(void *ctx)
{
    sim_t *s = ctx;
    for (int i = 0; i < CHAM_SIM_MAX_STREAMS; i++)
        free(s->streams[i]);
    sim_vm_free(s->vm);
    sim_mem_free(s->device_mem);
    sim_mem_free(s->host_mem);
    sim_hazard_free(s->hazard);
    free(s->inflight.v);
    free(s->touch);
    free(s);
}

/* ---- virtual memory -------------------------------------------------------*/

static size_t sim_vm_granularity_slot(void *ctx)
{
    return sim_vm_granularity(((sim_t *)ctx)->vm);
}

/* The device's message for a failed virtual memory call. */
static cham_status_t vm_failed(sim_t *s, cham_status_t st, const char *err)
{
    if (st != CHAM_OK)
        cham_device_set_error(s->dev, "sim %s: %s", s->name, err);
    return st;
}

static cham_status_t sim_vm_reserve_slot(void *ctx, size_t bytes, void **va)
{
    sim_t *s = ctx;
    char err[256];
    s->host += SIM_VM_RESERVE_NS;
    return vm_failed(s, sim_vm_reserve(s->vm, bytes, va, err, sizeof err), err);
}

static cham_status_t sim_vm_release_slot(void *ctx, void *va, size_t bytes)
{
    sim_t *s = ctx;
    char err[256];
    s->host += SIM_VM_RELEASE_NS;
    return vm_failed(s, sim_vm_release(s->vm, va, bytes, err, sizeof err), err);
}

static cham_status_t sim_phys_create_slot(void *ctx, size_t bytes, void **phys)
{
    sim_t *s = ctx;
    char err[256];
    s->host += SIM_PHYS_CREATE_NS;
    cham_status_t st = sim_vm_chunk_new(s->vm, bytes, (sim_chunk_t **)phys, err, sizeof err);
    if (st == CHAM_OK)
        s->stats.phys_creates++;
    return vm_failed(s, st, err);
}

static void sim_phys_release_slot(void *ctx, void *phys)
{
    sim_t *s = ctx;
    s->host += SIM_PHYS_RELEASE_NS;
    sim_vm_chunk_free(s->vm, phys);
    s->stats.phys_releases++;
}

static cham_status_t sim_vm_map_slot(void *ctx, void *va, void *phys, size_t bytes)
{
    sim_t *s = ctx;
    char err[256];
    (void)bytes;
    s->host += SIM_VM_MAP_NS;
    cham_status_t st = sim_vm_map(s->vm, va, phys, err, sizeof err);
    if (st == CHAM_OK)
        s->stats.vm_maps++;
    return vm_failed(s, st, err);
}

/* Like cuMemUnmap, does not wait for the device: work still using the
 * bytes is a hazard. */
static cham_status_t sim_vm_unmap_slot(void *ctx, void *va, size_t bytes)
{
    sim_t *s = ctx;
    s->host += SIM_VM_UNMAP_NS;
    if (s->hazard)
        sim_hazard_unmap(s->hazard, (uintptr_t)va, bytes, s->host, "unmap");
    sim_vm_unmap(s->vm, va, bytes);
    s->stats.vm_unmaps++;
    return CHAM_OK;
}

/* ---- watching -----------------------------------------------------------*/

static cham_status_t sim_set_task_hook(void *ctx, cham_task_hook_t hook, void *user)
{
    sim_t *s = ctx;
    s->task_hook = hook;
    s->task_hook_user = user;
    return CHAM_OK;
}

static cham_status_t sim_set_hazard_hook(void *ctx, cham_hazard_hook_t hook, void *user)
{
    sim_t *s = ctx;
    if (!s->hazard) {
        cham_device_set_error(s->dev, "sim %s: the hazard detector is off (hazard_check)",
                              s->preset.name);
        return CHAM_ERR_UNSUPPORTED;
    }
    s->hazard_hook = hook;
    s->hazard_hook_user = user;
    return CHAM_OK;
}

static bool sim_hazards(void *ctx, uint64_t *count)
{
    sim_t *s = ctx;
    *count = s->stats.hazards;
    return s->hazard != NULL;
}

static const cham_backend_iface_t sim_iface = {
    .api_version = CHAM_BACKEND_API_VERSION,
    .name = "sim",
    .attach = sim_attach,                       /* remember the device for errors */
    .destroy = sim_destroy,                     /* frees memory, detector, streams */
    .get_info = sim_get_info,                   /* preset figures after overrides */
    .mem_alloc = sim_mem_alloc_slot,            /* capacity-checked segment, host pays */
    .mem_free = sim_mem_free_slot,              /* syncs the device like cudaFree */
    .host_alloc = sim_host_alloc_slot,          /* pinned: fixed cost + pinning rate */
    .host_free = sim_host_free_slot,            /* syncs like cudaFreeHost */
    .stream_new = sim_stream_new,               /* ready at the current host time */
    .stream_new_host = sim_stream_new_host,     /* only with the host figures */
    .host_launch = sim_host_launch,             /* host figures, pinned memory only */
    .stream_free = sim_stream_free,
    .stream_synchronize = sim_stream_synchronize, /* host jumps to the stream's end */
    .stream_wait_event = sim_stream_wait_event, /* later work starts after the event */
    .event_new = sim_event_new,
    .event_free = sim_event_free,
    .event_record = sim_event_record,           /* completes with the stream's queue */
    .event_query = sim_event_query,             /* costs host time: polling is not free */
    .event_synchronize = sim_event_synchronize, /* host jumps to the event's time */
    .event_time = sim_event_time,
    .copy_async = sim_copy_async,               /* latency + bytes / link bandwidth */
    .kernel_launch = sim_kernel_launch,         /* roofline + overhead */
    .device_synchronize = sim_device_synchronize,
    .host_time = sim_host_time,                 /* virtual ns */
    .host_work = sim_host_work,                 /* the host's own work advances it */
    .set_task_hook = sim_set_task_hook,         /* every task with its virtual times */
    .set_hazard_hook = sim_set_hazard_hook,     /* when the detector is on */
    .hazards = sim_hazards,
    .vm_granularity = sim_vm_granularity_slot,  /* vm_granularity of the config, 2 MiB */
    .vm_reserve = sim_vm_reserve_slot,          /* fake or real inaccessible addresses */
    .vm_release = sim_vm_release_slot,
    .phys_create = sim_phys_create_slot,        /* charged to the capacity */
    .phys_release = sim_phys_release_slot,
    .vm_map = sim_vm_map_slot,                  /* with data: the chunk's own bytes */
    .vm_unmap = sim_vm_unmap_slot,              /* a hazard under running work */
};

/* Overrides a preset figure when the config gives a positive one; rejects
 * negative or NaN figures. */
static bool override(double *field, double value, const char *name)
{
    if (value > 0) {
        *field = value;
        return true;
    }
    if (value == 0)
        return true;
    cham_device_set_open_error("sim: config field %s must be positive, got %g", name, value);
    return false;
}

/* An override of a fraction of a peak: 0 keeps the preset's. */
static bool fraction(double *field, double value, const char *name)
{
    if (value > 1) {
        cham_device_set_open_error("sim: config field %s must be in (0, 1], got %g", name, value);
        return false;
    }
    return override(field, value, name);
}

cham_status_t cham_sim_open(const cham_device_config_t *c, cham_device_t **out)
{
    const char *pname = c->preset ? c->preset : cham_preset_default_name();
    const cham_preset_t *p = cham_preset_find(pname);
    if (!p) {
        char known[512] = "";
        for (size_t i = 0; i < cham_preset_count(); i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, cham_preset_at(i)->name, sizeof known - strlen(known) - 1);
        }
        cham_device_set_open_error("sim: unknown device preset \"%s\" (known: %s)", pname,
                                   known);
        return CHAM_ERR_NOT_FOUND;
    }
    sim_t *s = calloc(1, sizeof *s);
    if (!s) {
        cham_device_set_open_error("sim: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    s->preset = *p;
    snprintf(s->name, sizeof s->name, "%s", p->name);
    if (c->capacity)
        s->preset.capacity = c->capacity;
    if (!override(&s->preset.peak_flops, c->peak_flops, "peak_flops") ||
        !override(&s->preset.hbm_bandwidth, c->hbm_bandwidth, "hbm_bandwidth") ||
        !override(&s->preset.h2d_bandwidth, c->h2d_bandwidth, "h2d_bandwidth") ||
        !override(&s->preset.d2h_bandwidth, c->d2h_bandwidth, "d2h_bandwidth") ||
        !override(&s->preset.p2p_bandwidth, c->p2p_bandwidth, "p2p_bandwidth") ||
        !override(&s->preset.host_flops, c->host_flops, "host_flops") ||
        !override(&s->preset.host_mem_bandwidth, c->host_mem_bandwidth, "host_mem_bandwidth") ||
        !fraction(&s->preset.flops_efficiency, c->flops_efficiency, "flops_efficiency") ||
        !fraction(&s->preset.hbm_efficiency, c->hbm_efficiency, "hbm_efficiency")) {
        free(s);
        return CHAM_ERR_INVALID_ARG;
    }
    s->launch_ns = c->launch_ns ? c->launch_ns : SIM_LAUNCH_NS;
    s->kernel_overhead_ns = c->kernel_overhead_ns ? c->kernel_overhead_ns
                                                  : SIM_KERNEL_OVERHEAD_NS;
    s->copy_latency_ns = c->copy_latency_ns ? c->copy_latency_ns : SIM_COPY_LATENCY_NS;
    s->event_query_ns = c->event_query_ns ? c->event_query_ns : SIM_EVENT_QUERY_NS;
    s->queue_depth = c->queue_depth ? c->queue_depth : SIM_QUEUE_DEPTH;
    s->data = c->data;
    s->device_mem = sim_mem_new(DEVICE_BASE, s->preset.capacity, c->data);
    s->host_mem = sim_mem_new(HOST_BASE, UINT64_MAX, c->data);
    if (c->hazard_check)
        s->hazard = sim_hazard_new(report_hazard, s);
    char err[256] = "out of host memory";
    if (s->device_mem)
        s->vm = sim_vm_new(VM_BASE, s->device_mem,
                           c->vm_granularity ? (size_t)c->vm_granularity : SIM_VM_GRANULARITY, c->data,
                           err, sizeof err);
    if (!s->vm) {
        sim_destroy(s);
        cham_device_set_open_error("sim: %s", err);
        return strstr(err, "host memory") ? CHAM_ERR_HOST_OOM : CHAM_ERR_INVALID_ARG;
    }
    if (!s->device_mem || !s->host_mem || (c->hazard_check && !s->hazard)) {
        sim_destroy(s);
        cham_device_set_open_error("sim: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    cham_status_t st = cham_device_open_iface(&sim_iface, s, out);
    if (st != CHAM_OK)
        sim_destroy(s);
    return st;
}

/* ---- sim-only API -------------------------------------------------------*/

static sim_t *sim_of(const cham_device_t *dev)
{
    return cham_device_backend_ctx(dev, &sim_iface);
}

bool cham_sim_is_sim(const cham_device_t *dev)
{
    return sim_of(dev) != NULL;
}

cham_status_t cham_sim_get_stats(const cham_device_t *dev, cham_sim_stats_t *stats)
{
    sim_t *s = sim_of(dev);
    if (!s)
        return CHAM_ERR_INVALID_ARG;
    *stats = s->stats;
    stats->host_ns = s->host;
    stats->device_end_ns = all_streams_ready(s);
    stats->mem_in_use = sim_mem_in_use(s->device_mem);
    stats->host_in_use = sim_mem_in_use(s->host_mem);
    return CHAM_OK;
}

cham_status_t cham_sim_inject_fault(cham_device_t *dev, cham_sim_fault_t fault, uint64_t after,
                                    cham_status_t status)
{
    sim_t *s = sim_of(dev);
    if (!s || (int)fault < 0 || (int)fault >= (int)CHAM_SIM_FAULT_COUNT_ || status == CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    s->faults[fault] = (fault_t){true, after, status};
    return CHAM_OK;
}
