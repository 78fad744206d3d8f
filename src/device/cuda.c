/* The cuda device backend: the interface of chameleon/backend.h over the
 * CUDA runtime API (cudaMalloc segments, cudaHostAlloc pinned memory,
 * non-blocking streams, timing-free events, cudaMemcpyAsync).
 *
 * Always built, with no CUDA header or library: the runtime's functions are
 * declared in cuda_api.h and loaded by cham_cuda_open() with dlopen
 * (cuda_api.c); libcudart loads libcuda (the driver) itself. So any program
 * linked with Chameleon starts without CUDA, and opening a "cuda" device
 * fails with CHAM_ERR_DEVICE_UNAVAILABLE and a message saying why: the
 * runtime could not be loaded (the library tried and dlerror's text), or
 * the runtime refused (the CUDA error, e.g. cudaErrorInsufficientDriver).
 *
 * Every CUDA call goes through CHAM_CUDA_CHECK, which records
 * "cuda: <context>: cudaXxx failed: <description> (<cudaErrorName>)" on the
 * device and maps the error to a cham_status_t. See docs/cuda.md. */
#include "chameleon/backend.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/assert.h"
#include "common/grow.h"
#include "device/backends.h"
#include "device/cuda_api.h"
#include "device/cuda_vmm.h"

/* One live allocation: a cudaMalloc segment or a cudaHostAlloc block. */
typedef struct cuda_seg {
    void *ptr;
    size_t bytes;
} cuda_seg_t;

/* A list of live allocations, so that a capacity cap can be enforced, a
 * pointer the backend never gave out is caught, and close frees what is left.
 * Segments are few (a caching allocator keeps them), so a linear search is
 * cheap next to cudaMalloc/cudaFree.
 * Invariant: bytes == sum of segs[i].bytes for i < n; n <= room. */
typedef struct cuda_seg_list {
    cuda_seg_t *segs;
    size_t n;
    size_t room;
    uint64_t bytes;
} cuda_seg_list_t;

/* The backend context of one open cuda device.
 * Invariant: cap == 0 or mem.bytes <= cap; cap < total_mem when nonzero. */
typedef struct cuda_ctx {
    cham_cudart_t rt;        /* the runtime's functions, loaded at open */
    cham_device_t *dev;      /* set by attach; NULL while opening */
    int ordinal;             /* CUDA device index, made current before device work */
    char name[256];          /* cudaDeviceProp.name */
    uint64_t total_mem;      /* cudaDeviceProp.totalGlobalMem */
    uint64_t cap;            /* config->capacity when smaller than total_mem, else 0 */
    double peak_flops;       /* config override, 0 = unknown */
    double flops_efficiency, hbm_efficiency; /* config's, or 1 */
    double hbm_bandwidth;    /* config override or from the memory clock and bus */
    double h2d_bandwidth;    /* config overrides, 0 = unknown */
    double d2h_bandwidth;
    double p2p_bandwidth;
    double host_flops, host_mem_bandwidth;   /* the config's (0: not known) */
    cuda_seg_list_t mem;     /* device segments */
    cuda_seg_list_t host;    /* pinned host blocks */
    cham_cuda_vmm_t vmm;     /* the driver's virtual memory functions */
    size_t granularity;      /* cuMemGetAllocationGranularity; 0 = no virtual memory */
    uint64_t phys_bytes;     /* physical chunks held: count against cap with mem */
} cuda_ctx_t;

/* ---- errors -------------------------------------------------------------*/

/* How a CUDA error maps to a status callers can act on. */
static cham_status_t cuda_status(cudaError_t err)
{
    switch (err) {
    case cudaSuccess:
        return CHAM_OK;
    case cudaErrorMemoryAllocation:
        return CHAM_ERR_OUT_OF_MEMORY;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
        return CHAM_ERR_DEVICE_UNAVAILABLE;
    default:
        return CHAM_ERR_BACKEND;
    }
}

static cham_status_t cuda_check(cuda_ctx_t *ctx, cudaError_t err, const char *call,
                                const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* The name of the CUDA function in a stringified call such as
 * "ctx->rt.cudaMalloc(ptr, bytes)": the identifier just before the first
 * '('. Sets *len to its length. */
static const char *call_name(const char *call, int *len)
{
    const char *open = strchr(call, '(');
    if (!open)
        open = call + strlen(call);
    const char *start = open;
    while (start > call && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
        start--;
    *len = (int)(open - start);
    return start;
}

/* Returns CHAM_OK for cudaSuccess. Otherwise records the failure on the
 * device (or as the open error while the device is being opened, when
 * ctx->dev is still NULL), clears the runtime's per-thread last error so
 * that a later cudaGetLastError() does not report it again, and returns the
 * mapped status. call is the stringified call; only the CUDA function's
 * name is printed. */
static cham_status_t cuda_check(cuda_ctx_t *ctx, cudaError_t err, const char *call,
                                const char *fmt, ...)
{
    CHAM_ASSERT(ctx);
    if (err == cudaSuccess)
        return CHAM_OK;
    char where[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    int fn_len;
    const char *fn = call_name(call, &fn_len);
    const char *desc = ctx->rt.cudaGetErrorString(err);
    const char *name = ctx->rt.cudaGetErrorName(err);
    if (ctx->dev)
        cham_device_set_error(ctx->dev, "cuda: %s: %.*s failed: %s (%s)", where, fn_len,
                              fn, desc ? desc : "?", name ? name : "?");
    else
        cham_device_set_open_error("cuda: %s: %.*s failed: %s (%s)", where, fn_len, fn,
                                   desc ? desc : "?", name ? name : "?");
    (void)ctx->rt.cudaGetLastError();
    return cuda_status(err);
}

/* Runs call (a CUDA runtime call) and checks it; the format and arguments
 * after it say what the call was for, for the message. */
#define CHAM_CUDA_CHECK(ctx, call, ...) cuda_check((ctx), (call), #call, __VA_ARGS__)

/* Makes the device current on the calling thread. Needed before calls that
 * create or free resources or launch work, since the current device is
 * per host thread and the caller may use several devices or threads. */
static cham_status_t cuda_enter(cuda_ctx_t *ctx)
{
    return CHAM_CUDA_CHECK(ctx, ctx->rt.cudaSetDevice(ctx->ordinal), "device %d",
                           ctx->ordinal);
}

/* ---- segment lists ------------------------------------------------------*/

/* Makes room for one more entry, so that a pointer just allocated can
 * always be recorded. */
static cham_status_t seg_reserve(cuda_ctx_t *ctx, cuda_seg_list_t *list)
{
    cuda_seg_t *segs = cham_grow(list->segs, &list->room, list->n + 1, sizeof *segs, 16);
    if (!segs) {
        cham_device_set_error(ctx->dev, "cuda: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    list->segs = segs;
    return CHAM_OK;
}

static void seg_add(cuda_seg_list_t *list, void *ptr, size_t bytes)
{
    CHAM_ASSERT(list->n < list->room);
    list->segs[list->n].ptr = ptr;
    list->segs[list->n].bytes = bytes;
    list->n++;
    list->bytes += bytes;
}

/* Removes ptr; a pointer this device never gave out is a programmer error. */
static void seg_remove(cuda_seg_list_t *list, void *ptr)
{
    for (size_t i = 0; i < list->n; i++) {
        if (list->segs[i].ptr == ptr) {
            list->bytes -= list->segs[i].bytes;
            list->segs[i] = list->segs[--list->n];
            return;
        }
    }
    CHAM_ASSERT(0 && "pointer freed on a cuda device that did not allocate it (or freed twice)");
}

/* ---- device -------------------------------------------------------------*/

static void cuda_attach(void *vctx, cham_device_t *dev)
{
    cuda_ctx_t *ctx = vctx;
    ctx->dev = dev;
}

static void cuda_destroy(void *vctx)
{
    cuda_ctx_t *ctx = vctx;
    /* Frees what the user still holds, as cham_device_close promises. The
     * primary context is left alone: other code in the process may use it. */
    if (ctx->mem.n + ctx->host.n > 0 && cuda_enter(ctx) == CHAM_OK) {
        for (size_t i = 0; i < ctx->mem.n; i++)
            CHAM_CUDA_CHECK(ctx, ctx->rt.cudaFree(ctx->mem.segs[i].ptr),
                            "close: device segment of %zu bytes", ctx->mem.segs[i].bytes);
        for (size_t i = 0; i < ctx->host.n; i++)
            CHAM_CUDA_CHECK(ctx, ctx->rt.cudaFreeHost(ctx->host.segs[i].ptr),
                            "close: pinned block of %zu bytes", ctx->host.segs[i].bytes);
    }
    free(ctx->mem.segs);
    free(ctx->host.segs);
    free(ctx);
}

static void cuda_get_info(void *vctx, cham_device_info_t *info)
{
    const cuda_ctx_t *ctx = vctx;
    info->backend = "cuda";
    info->name = ctx->name;
    info->capacity = ctx->cap ? ctx->cap : ctx->total_mem;
    info->peak_flops = ctx->peak_flops;
    info->hbm_bandwidth = ctx->hbm_bandwidth;
    info->h2d_bandwidth = ctx->h2d_bandwidth;
    info->d2h_bandwidth = ctx->d2h_bandwidth;
    info->p2p_bandwidth = ctx->p2p_bandwidth;
    info->host_flops = ctx->host_flops;
    info->host_mem_bandwidth = ctx->host_mem_bandwidth;
    /* A real device's kernels take what they take: the fractions only
     * scale estimates made from the peaks (a config's, or 1). */
    info->flops_efficiency = ctx->flops_efficiency;
    info->hbm_efficiency = ctx->hbm_efficiency;
    info->data = true;
}

/* ---- memory -------------------------------------------------------------*/

static cham_status_t cuda_mem_alloc(void *vctx, size_t bytes, void **ptr)
{
    cuda_ctx_t *ctx = vctx;
    if (ctx->cap && bytes > ctx->cap - ctx->mem.bytes - ctx->phys_bytes) {
        cham_device_set_error(ctx->dev, "cuda: device allocation of %zu bytes exceeds the "
                              "capacity cap: %llu of %llu bytes in use", bytes,
                              (unsigned long long)ctx->mem.bytes,
                              (unsigned long long)ctx->cap);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    cham_status_t st = seg_reserve(ctx, &ctx->mem);
    if (st == CHAM_OK)
        st = cuda_enter(ctx);
    if (st == CHAM_OK)
        st = CHAM_CUDA_CHECK(ctx, ctx->rt.cudaMalloc(ptr, bytes),
                             "device allocation of %zu bytes", bytes);
    if (st != CHAM_OK) {
        *ptr = NULL;
        return st;
    }
    seg_add(&ctx->mem, *ptr, bytes);
    return CHAM_OK;
}

static void cuda_mem_free(void *vctx, void *ptr)
{
    cuda_ctx_t *ctx = vctx;
    seg_remove(&ctx->mem, ptr);
    if (cuda_enter(ctx) == CHAM_OK)
        CHAM_CUDA_CHECK(ctx, ctx->rt.cudaFree(ptr), "device free of %p", ptr);
}

static cham_status_t cuda_host_alloc(void *vctx, size_t bytes, void **ptr)
{
    cuda_ctx_t *ctx = vctx;
    cham_status_t st = seg_reserve(ctx, &ctx->host);
    if (st == CHAM_OK)
        st = cuda_enter(ctx);
    if (st == CHAM_OK)
        st = CHAM_CUDA_CHECK(ctx, ctx->rt.cudaHostAlloc(ptr, bytes, cudaHostAllocDefault),
                             "pinned host allocation of %zu bytes", bytes);
    if (st != CHAM_OK) {
        *ptr = NULL;
        return st;
    }
    seg_add(&ctx->host, *ptr, bytes);
    return CHAM_OK;
}

static void cuda_host_free(void *vctx, void *ptr)
{
    cuda_ctx_t *ctx = vctx;
    seg_remove(&ctx->host, ptr);
    if (cuda_enter(ctx) == CHAM_OK)
        CHAM_CUDA_CHECK(ctx, ctx->rt.cudaFreeHost(ptr), "pinned host free of %p", ptr);
}

/* ---- streams ------------------------------------------------------------
 * The backend's stream object is the cudaStream_t itself (a pointer). */

static cham_status_t cuda_stream_new(void *vctx, int id, const char *name, void **stream)
{
    cuda_ctx_t *ctx = vctx;
    (void)id;
    cudaStream_t s = NULL;
    cham_status_t st = cuda_enter(ctx);
    if (st == CHAM_OK)
        st = CHAM_CUDA_CHECK(ctx,
                             ctx->rt.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                             "stream \"%s\"", name);
    *stream = st == CHAM_OK ? (void *)s : NULL;
    return st;
}

static void cuda_stream_free(void *vctx, void *stream)
{
    cuda_ctx_t *ctx = vctx;
    if (cuda_enter(ctx) == CHAM_OK)
        CHAM_CUDA_CHECK(ctx, ctx->rt.cudaStreamDestroy((cudaStream_t)stream), "stream free");
}

static cham_status_t cuda_stream_synchronize(void *vctx, void *stream)
{
    cuda_ctx_t *ctx = vctx;
    return CHAM_CUDA_CHECK(ctx, ctx->rt.cudaStreamSynchronize((cudaStream_t)stream),
                           "stream synchronize");
}

static cham_status_t cuda_stream_wait_event(void *vctx, void *stream, void *event)
{
    cuda_ctx_t *ctx = vctx;
    return CHAM_CUDA_CHECK(ctx,
                           ctx->rt.cudaStreamWaitEvent((cudaStream_t)stream,
                                                       (cudaEvent_t)event, 0),
                           "stream wait");
}

/* ---- events -------------------------------------------------------------
 * The backend's event object is the cudaEvent_t itself (a pointer). */

static cham_status_t cuda_event_new(void *vctx, void **event)
{
    cuda_ctx_t *ctx = vctx;
    cudaEvent_t e = NULL;
    cham_status_t st = cuda_enter(ctx);
    if (st == CHAM_OK)
        st = CHAM_CUDA_CHECK(ctx,
                             ctx->rt.cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                             "event new");
    *event = st == CHAM_OK ? (void *)e : NULL;
    return st;
}

static void cuda_event_free(void *vctx, void *event)
{
    cuda_ctx_t *ctx = vctx;
    if (cuda_enter(ctx) == CHAM_OK)
        CHAM_CUDA_CHECK(ctx, ctx->rt.cudaEventDestroy((cudaEvent_t)event), "event free");
}

static cham_status_t cuda_event_record(void *vctx, void *event, void *stream)
{
    cuda_ctx_t *ctx = vctx;
    return CHAM_CUDA_CHECK(ctx,
                           ctx->rt.cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream),
                           "event record");
}

static cham_status_t cuda_event_query(void *vctx, void *event)
{
    cuda_ctx_t *ctx = vctx;
    cudaError_t err = ctx->rt.cudaEventQuery((cudaEvent_t)event);
    if (err == cudaErrorNotReady) {
        /* Not a failure: clear it so cudaGetLastError() does not see it. */
        (void)ctx->rt.cudaGetLastError();
        return CHAM_NOT_READY;
    }
    return CHAM_CUDA_CHECK(ctx, err, "event query");
}

static cham_status_t cuda_event_synchronize(void *vctx, void *event)
{
    cuda_ctx_t *ctx = vctx;
    return CHAM_CUDA_CHECK(ctx, ctx->rt.cudaEventSynchronize((cudaEvent_t)event),
                           "event synchronize");
}

/* ---- work ---------------------------------------------------------------*/

static cham_status_t cuda_copy_async(void *vctx, void *stream, void *dst, const void *src,
                                     size_t bytes, cham_copy_kind_t kind, const char *label)
{
    cuda_ctx_t *ctx = vctx;
    int ck = kind == CHAM_COPY_H2D   ? cudaMemcpyHostToDevice
                             : kind == CHAM_COPY_D2H ? cudaMemcpyDeviceToHost
                                                     : cudaMemcpyDeviceToDevice;
    if (bytes == 0)
        return CHAM_OK;
    cham_status_t st = cuda_enter(ctx);
    if (st != CHAM_OK)
        return st;
    return CHAM_CUDA_CHECK(ctx,
                           ctx->rt.cudaMemcpyAsync(dst, src, bytes, ck, (cudaStream_t)stream),
                           "copy \"%s\" of %zu bytes", label ? label : "", bytes);
}

static cham_status_t cuda_kernel_launch(void *vctx, void *stream, const cham_kernel_t *k)
{
    cuda_ctx_t *ctx = vctx;
    const char *label = k->label ? k->label : "";
    if (!k->native_fn) {
        cham_device_set_error(ctx->dev, "cuda: kernel \"%s\": the cuda backend runs kernels "
                              "only through native_fn, and this kernel has %s", label,
                              k->cpu_fn ? "only a cpu_fn" : "neither cpu_fn nor native_fn");
        return CHAM_ERR_UNSUPPORTED;
    }
    cham_status_t st = cuda_enter(ctx);
    if (st != CHAM_OK)
        return st;
    k->native_fn(stream, k->arg);
    /* A launch error (or any runtime error native_fn left behind) shows up
     * here; errors inside the kernel surface at a later synchronisation. */
    return CHAM_CUDA_CHECK(ctx, ctx->rt.cudaGetLastError(), "kernel \"%s\"", label);
}

/* Work on a host stream: the CPU function, queued in stream order. The
 * caller keeps k->arg alive until it has run (chameleon/device.h). */
static cham_status_t cuda_host_launch(void *vctx, void *stream, const cham_kernel_t *k)
{
    cuda_ctx_t *ctx = vctx;
    const char *label = k->label ? k->label : "";
    if (!k->cpu_fn) {
        cham_device_set_error(ctx->dev, "cuda: host kernel \"%s\" has no cpu_fn: work on a "
                              "host stream runs through cudaLaunchHostFunc", label);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_status_t st = cuda_enter(ctx);
    if (st != CHAM_OK)
        return st;
    return CHAM_CUDA_CHECK(ctx, ctx->rt.cudaLaunchHostFunc((cudaStream_t)stream, k->cpu_fn,
                                                           k->arg),
                           "host kernel \"%s\"", label);
}

static cham_status_t cuda_device_synchronize(void *vctx)
{
    cuda_ctx_t *ctx = vctx;
    cham_status_t st = cuda_enter(ctx);
    if (st != CHAM_OK)
        return st;
    return CHAM_CUDA_CHECK(ctx, ctx->rt.cudaDeviceSynchronize(), "device synchronize");
}

/* ---- host clock ---------------------------------------------------------*/

static uint64_t cuda_host_time(void *vctx)
{
    (void)vctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* ---- virtual memory (the driver's cuMem* functions) ------------------------*/

/* A failed driver call: the status, and the message on the device. */
static cham_status_t vmm_check(cuda_ctx_t *ctx, CUresult r, const char *call, size_t bytes)
{
    if (r == CUDA_SUCCESS)
        return CHAM_OK;
    cham_device_set_error(ctx->dev, "cuda: %s of %zu bytes failed (CUresult %d)", call, bytes,
                          r);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? CHAM_ERR_OUT_OF_MEMORY : CHAM_ERR_BACKEND;
}

/* Device memory on this device, for cuMemCreate and the granularity. */
static CUmemAllocationProp vmm_prop(const cuda_ctx_t *ctx)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ctx->ordinal;
    return prop;
}

static size_t cuda_vm_granularity(void *vctx)
{
    return ((cuda_ctx_t *)vctx)->granularity;
}

static cham_status_t cuda_vm_reserve(void *vctx, size_t bytes, void **va)
{
    cuda_ctx_t *ctx = vctx;
    CUdeviceptr p = 0;
    cham_status_t st = cuda_enter(ctx);
    if (st == CHAM_OK)
        st = vmm_check(ctx, ctx->vmm.cuMemAddressReserve(&p, bytes, ctx->granularity, 0, 0),
                       "cuMemAddressReserve", bytes);
    *va = (void *)(uintptr_t)p;
    return st;
}

static cham_status_t cuda_vm_release(void *vctx, void *va, size_t bytes)
{
    cuda_ctx_t *ctx = vctx;
    return vmm_check(ctx, ctx->vmm.cuMemAddressFree((CUdeviceptr)(uintptr_t)va, bytes),
                     "cuMemAddressFree", bytes);
}

typedef struct cuda_chunk {
    CUmemGenericAllocationHandle handle;
    size_t bytes;
} cuda_chunk_t;

static cham_status_t cuda_phys_create(void *vctx, size_t bytes, void **phys)
{
    cuda_ctx_t *ctx = vctx;
    *phys = NULL;
    if (ctx->cap && bytes > ctx->cap - ctx->mem.bytes - ctx->phys_bytes) {
        cham_device_set_error(ctx->dev, "cuda: a chunk of %zu bytes exceeds the capacity cap: "
                              "%llu of %llu bytes in use", bytes,
                              (unsigned long long)(ctx->mem.bytes + ctx->phys_bytes),
                              (unsigned long long)ctx->cap);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    cuda_chunk_t *c = calloc(1, sizeof *c);
    if (!c) {
        cham_device_set_error(ctx->dev, "cuda: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    CUmemAllocationProp prop = vmm_prop(ctx);
    cham_status_t st = cuda_enter(ctx);
    if (st == CHAM_OK)
        st = vmm_check(ctx, ctx->vmm.cuMemCreate(&c->handle, bytes, &prop, 0), "cuMemCreate",
                       bytes);
    if (st != CHAM_OK) {
        free(c);
        return st;
    }
    c->bytes = bytes;
    ctx->phys_bytes += bytes;
    *phys = c;
    return CHAM_OK;
}

static void cuda_phys_release(void *vctx, void *phys)
{
    cuda_ctx_t *ctx = vctx;
    cuda_chunk_t *c = phys;
    vmm_check(ctx, ctx->vmm.cuMemRelease(c->handle), "cuMemRelease", c->bytes);
    ctx->phys_bytes -= c->bytes;
    free(c);
}

static cham_status_t cuda_vm_map(void *vctx, void *va, void *phys, size_t bytes)
{
    cuda_ctx_t *ctx = vctx;
    const cuda_chunk_t *c = phys;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)va;
    CUmemAccessDesc access = {.location = vmm_prop(ctx).location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    cham_status_t st = vmm_check(ctx, ctx->vmm.cuMemMap(p, bytes, 0, c->handle, 0), "cuMemMap",
                                 bytes);
    if (st == CHAM_OK &&
        (st = vmm_check(ctx, ctx->vmm.cuMemSetAccess(p, bytes, &access, 1), "cuMemSetAccess",
                        bytes)) != CHAM_OK)
        ctx->vmm.cuMemUnmap(p, bytes);
    return st;
}

static cham_status_t cuda_vm_unmap(void *vctx, void *va, size_t bytes)
{
    cuda_ctx_t *ctx = vctx;
    return vmm_check(ctx, ctx->vmm.cuMemUnmap((CUdeviceptr)(uintptr_t)va, bytes), "cuMemUnmap",
                     bytes);
}

static const cham_backend_iface_t cuda_iface = {
    /* .api_version: the interface version this table was written for. */
    .api_version = CHAM_BACKEND_API_VERSION,
    /* .name: matches cham_device_config_t.backend. */
    .name = "cuda",
    /* .attach: keeps the device so failures can be recorded on it. */
    .attach = cuda_attach,
    /* .destroy: frees segments and pinned blocks still held, then the context;
     * the CUDA primary context is not reset. */
    .destroy = cuda_destroy,
    /* .get_info: figures read at open (cudaGetDeviceProperties and
     * cudaDeviceGetAttribute) after config overrides; data is always true. */
    .get_info = cuda_get_info,
    /* .mem_alloc: cudaMalloc on the chosen ordinal, refused beyond a
     * config->capacity cap. */
    .mem_alloc = cuda_mem_alloc,
    /* .mem_free: cudaFree (synchronises the device). */
    .mem_free = cuda_mem_free,
    /* .host_alloc: cudaHostAlloc(cudaHostAllocDefault), pinned for this device. */
    .host_alloc = cuda_host_alloc,
    /* .host_free: cudaFreeHost. */
    .host_free = cuda_host_free,
    /* .stream_new: cudaStreamCreateWithFlags(cudaStreamNonBlocking), so the
     * legacy default stream never serialises our streams. */
    .stream_new = cuda_stream_new,
    /* .stream_new_host: a stream as above whose kernels host_launch queues
     * with cudaLaunchHostFunc: the CPU runs them in stream order. */
    .stream_new_host = cuda_stream_new,
    .host_launch = cuda_host_launch,
    /* .stream_free: cudaStreamDestroy (queued work still completes). */
    .stream_free = cuda_stream_free,
    /* .stream_synchronize: cudaStreamSynchronize. */
    .stream_synchronize = cuda_stream_synchronize,
    /* .stream_wait_event: cudaStreamWaitEvent; never-recorded events are
     * complete, as the interface requires. */
    .stream_wait_event = cuda_stream_wait_event,
    /* .event_new: cudaEventCreateWithFlags(cudaEventDisableTiming), the
     * cheapest kind to record and query. */
    .event_new = cuda_event_new,
    /* .event_free: cudaEventDestroy. */
    .event_free = cuda_event_free,
    /* .event_record: cudaEventRecord. */
    .event_record = cuda_event_record,
    /* .event_query: cudaEventQuery; cudaErrorNotReady becomes CHAM_NOT_READY. */
    .event_query = cuda_event_query,
    /* .event_synchronize: cudaEventSynchronize. */
    .event_synchronize = cuda_event_synchronize,
    /* .copy_async: cudaMemcpyAsync with the matching cudaMemcpyKind. */
    .copy_async = cuda_copy_async,
    /* .kernel_launch: native_fn(cudaStream_t, arg), then cudaGetLastError;
     * kernels without native_fn are CHAM_ERR_UNSUPPORTED. */
    .kernel_launch = cuda_kernel_launch,
    /* .device_synchronize: cudaDeviceSynchronize on the ordinal. */
    .device_synchronize = cuda_device_synchronize,
    /* .host_time: CLOCK_MONOTONIC in ns. */
    .host_time = cuda_host_time,
    /* .host_work: NULL, real time passes by itself. */
    .host_work = NULL,
    /* Task and hazard hooks: not offered (docs/device.md). */
    /* Virtual memory through the driver's cuMem* functions (cuda_vmm.h),
     * when libcuda offers them; else vm_granularity reports 0. */
    .vm_granularity = cuda_vm_granularity,
    .vm_reserve = cuda_vm_reserve,
    .vm_release = cuda_vm_release,
    .phys_create = cuda_phys_create,
    .phys_release = cuda_phys_release,
    .vm_map = cuda_vm_map,
    .vm_unmap = cuda_vm_unmap,
};

/* ---- open ---------------------------------------------------------------*/

cham_status_t cham_cuda_open(const cham_device_config_t *config, cham_device_t **out)
{
    CHAM_ASSERT(config && out);
    *out = NULL;
    const int ordinal = config->ordinal;
    if (ordinal < 0) {
        cham_device_set_open_error("cuda: device ordinal %d is negative", ordinal);
        return CHAM_ERR_INVALID_ARG;
    }

    cuda_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        cham_device_set_open_error("cuda: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    char why[512];
    cham_status_t st = cham_cudart_load(&ctx->rt, why, sizeof why);
    if (st != CHAM_OK) {
        cham_device_set_open_error("%s", why);
        free(ctx);
        return st;
    }
    ctx->ordinal = ordinal;

    /* Any failure below means this device cannot be used: every CUDA error
     * while opening is reported as CHAM_ERR_DEVICE_UNAVAILABLE, with the
     * CUDA error's name in the message (ctx->dev is NULL until
     * cham_device_open_iface, so CHAM_CUDA_CHECK records open errors). */
    int count = 0;
    st = CHAM_CUDA_CHECK(ctx, ctx->rt.cudaGetDeviceCount(&count), "no usable device");
    if (st == CHAM_OK && count <= 0) {
        cham_device_set_open_error("cuda: no usable device: the CUDA runtime reports "
                                   "no devices");
        st = CHAM_ERR_DEVICE_UNAVAILABLE;
    } else if (st == CHAM_OK && ordinal >= count) {
        cham_device_set_open_error("cuda: no usable device: ordinal %d requested but "
                                   "only %d device%s present", ordinal, count,
                                   count == 1 ? " is" : "s are");
        st = CHAM_ERR_DEVICE_UNAVAILABLE;
    }
    /* Since CUDA 12, cudaSetDevice also creates the primary context, so a
     * device that cannot be used fails here rather than at the first alloc.
     * cudaDeviceProp.memoryClockRate is gone in CUDA 13 (and memoryBusWidth
     * lies past the head cuda_api.h declares): both come from attributes. */
    cham_cuda_device_prop_t prop;
    memset(&prop, 0, sizeof prop);
    int mem_khz = 0, bus_bits = 0;
    if (st == CHAM_OK &&
        (CHAM_CUDA_CHECK(ctx, ctx->rt.cudaSetDevice(ordinal), "device %d unusable",
                         ordinal) != CHAM_OK ||
         CHAM_CUDA_CHECK(ctx, ctx->rt.cudaGetDeviceProperties(&prop, ordinal),
                         "device %d unusable", ordinal) != CHAM_OK ||
         CHAM_CUDA_CHECK(ctx,
                         ctx->rt.cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate,
                                                        ordinal),
                         "device %d unusable", ordinal) != CHAM_OK ||
         CHAM_CUDA_CHECK(ctx,
                         ctx->rt.cudaDeviceGetAttribute(&bus_bits,
                                                        cudaDevAttrGlobalMemoryBusWidth, ordinal),
                         "device %d unusable", ordinal) != CHAM_OK))
        st = CHAM_ERR_DEVICE_UNAVAILABLE;
    if (st != CHAM_OK) {
        free(ctx);
        return CHAM_ERR_DEVICE_UNAVAILABLE;
    }

    snprintf(ctx->name, sizeof ctx->name, "%.*s", (int)sizeof prop.head.name,
             prop.head.name);
    ctx->total_mem = (uint64_t)prop.head.totalGlobalMem;
    if (config->capacity && config->capacity < ctx->total_mem)
        ctx->cap = config->capacity;
    ctx->peak_flops = config->peak_flops;
    ctx->flops_efficiency = config->flops_efficiency > 0 ? config->flops_efficiency : 1;
    ctx->hbm_efficiency = config->hbm_efficiency > 0 ? config->hbm_efficiency : 1;
    /* Peak HBM/GDDR bandwidth as NVIDIA's samples compute it: double data
     * rate x memory clock x bus width. 0 when the device does not say. */
    if (config->hbm_bandwidth > 0)
        ctx->hbm_bandwidth = config->hbm_bandwidth;
    else if (mem_khz > 0 && bus_bits > 0)
        ctx->hbm_bandwidth = 2.0 * (double)mem_khz * 1e3 * ((double)bus_bits / 8.0);
    ctx->h2d_bandwidth = config->h2d_bandwidth;
    ctx->d2h_bandwidth = config->d2h_bandwidth;
    ctx->p2p_bandwidth = config->p2p_bandwidth;
    ctx->host_flops = config->host_flops;
    ctx->host_mem_bandwidth = config->host_mem_bandwidth;
    /* Virtual memory when the driver offers it; without, the device still
     * works (allocators use classic segments). */
    size_t g = 0;
    CUmemAllocationProp prop_vm = vmm_prop(ctx);
    if (cham_cuda_vmm_load(&ctx->vmm, why, sizeof why) == CHAM_OK &&
        ctx->vmm.cuMemGetAllocationGranularity(&g, &prop_vm, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
            CUDA_SUCCESS)
        ctx->granularity = g;

    st = cham_device_open_iface(&cuda_iface, ctx, out);
    if (st != CHAM_OK)
        free(ctx);
    return st;
}
