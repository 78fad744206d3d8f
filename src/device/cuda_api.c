/* Loads the CUDA runtime (libcudart) with dlopen and looks up the functions
 * of cuda_api.h with dlsym, so that nothing is linked against CUDA: a
 * program using Chameleon builds and starts without the toolkit, and only
 * opening a "cuda" device needs the runtime. See docs/cuda.md, "Finding the
 * CUDA runtime". */
#include "device/cuda_api.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/message.h"

const char *const cham_cudart_search_order[] = {
    "libcudart.so.13",                   /* the version the backend is written for */
    "libcudart.so.12",
    "libcudart.so",                      /* the toolkit's development link */
    "/usr/local/cuda/lib64/libcudart.so", /* the toolkit's default place, when the
                                            dynamic linker is not told about it */
    NULL,
};

/* One function of the table: its symbol and where its pointer goes. */
typedef struct cudart_sym {
    const char *name;
    size_t offset;
} cudart_sym_t;

#define SYM(fn) {#fn, offsetof(cham_cudart_t, fn)}
static const cudart_sym_t cudart_syms[] = {
    SYM(cudaRuntimeGetVersion),
    SYM(cudaGetLastError),
    SYM(cudaGetErrorName),
    SYM(cudaGetErrorString),
    SYM(cudaGetDeviceCount),
    SYM(cudaSetDevice),
    SYM(cudaGetDeviceProperties),
    SYM(cudaDeviceGetAttribute),
    SYM(cudaDeviceSynchronize),
    SYM(cudaMalloc),
    SYM(cudaFree),
    SYM(cudaHostAlloc),
    SYM(cudaFreeHost),
    SYM(cudaMemcpyAsync),
    SYM(cudaStreamCreateWithFlags),
    SYM(cudaStreamDestroy),
    SYM(cudaStreamSynchronize),
    SYM(cudaStreamWaitEvent),
    SYM(cudaEventCreateWithFlags),
    SYM(cudaEventDestroy),
    SYM(cudaEventRecord),
    SYM(cudaEventQuery),
    SYM(cudaEventSynchronize),
    SYM(cudaLaunchHostFunc),
};
#undef SYM

/* Function and object pointers have the same size and representation on
 * every platform with dlsym (POSIX requires it); copying the bytes avoids
 * the cast ISO C does not define. */
_Static_assert(sizeof(void *) == sizeof(cudaError_t (*)(void)),
               "dlsym results must fit a function pointer");

/* Looks up every function of the table in handle. On a missing symbol
 * writes dlerror()'s text into err and returns false. */
static bool resolve(void *handle, cham_cudart_t *rt, char *err, size_t err_size)
{
    for (size_t i = 0; i < sizeof cudart_syms / sizeof cudart_syms[0]; i++) {
        const char *name = cudart_syms[i].name;
        void *sym = NULL;
        /* CUDA 12's headers map cudaGetDeviceProperties to the _v2 symbol;
         * its plain symbol fills the pre-12 struct. Both start with the head
         * this backend reads, and the buffer has room for either. */
        if (strcmp(name, "cudaGetDeviceProperties") == 0)
            sym = dlsym(handle, "cudaGetDeviceProperties_v2");
        if (!sym) {
            (void)dlerror();
            sym = dlsym(handle, name);
        }
        if (!sym) {
            const char *why = dlerror();
            cham_set_err(err, err_size, "%s", why ? why : name);
            return false;
        }
        memcpy((char *)rt + cudart_syms[i].offset, &sym, sizeof sym);
    }
    return true;
}

/* Opens one candidate. Returns the handle, or NULL with dlerror()'s text
 * (or "not found") in why. */
static void *open_library(const char *name, char *why, size_t why_size)
{
    (void)dlerror();
    void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *e = dlerror();
        cham_set_err(why, why_size, "%s", e ? e : "not found");
    }
    return handle;
}

/* Fills rt from an open handle, checks the version. On failure closes the
 * handle (nothing of CUDA ran yet) and writes the reason into err. */
static cham_status_t take_library(void *handle, const char *name, const char *origin,
                                  cham_cudart_t *rt, char *err, size_t err_size)
{
    char why[256];
    memset(rt, 0, sizeof *rt);
    if (!resolve(handle, rt, why, sizeof why)) {
        cham_set_err(err, err_size, "cuda: %s%s is not a usable CUDA runtime: %s", name,
                     origin, why);
        dlclose(handle);
        return CHAM_ERR_DEVICE_UNAVAILABLE;
    }
    int version = 0;
    cudaError_t e = rt->cudaRuntimeGetVersion(&version);
    if (e != cudaSuccess || version < CHAM_CUDA_RUNTIME_MIN_VERSION) {
        if (e != cudaSuccess)
            cham_set_err(err, err_size, "cuda: %s%s: cudaRuntimeGetVersion failed (error %d)",
                         name, origin, e);
        else
            cham_set_err(err, err_size, "cuda: %s%s is CUDA runtime %d.%d; the cuda backend "
                         "needs %d.%d or later", name, origin, version / 1000,
                         version % 1000 / 10, CHAM_CUDA_RUNTIME_MIN_VERSION / 1000,
                         CHAM_CUDA_RUNTIME_MIN_VERSION % 1000 / 10);
        memset(rt, 0, sizeof *rt);
        dlclose(handle);
        return CHAM_ERR_DEVICE_UNAVAILABLE;
    }
    rt->version = version;
    cham_copy_str(rt->library, sizeof rt->library, name);
    /* The handle is deliberately never closed: unloading the CUDA runtime
     * while the process may still hold contexts, streams or pinned memory
     * from it is not supported by CUDA. dlopen counts references, so
     * loading it again for another device costs only the lookups. */
    return CHAM_OK;
}

cham_status_t cham_cudart_load(cham_cudart_t *rt, char *err, size_t err_size)
{
    char why[256];
    const char *env = getenv(CHAM_CUDA_RUNTIME_ENV);
    if (env && *env) {
        void *handle = open_library(env, why, sizeof why);
        if (!handle) {
            cham_set_err(err, err_size, "cuda: could not load the CUDA runtime named by "
                         CHAM_CUDA_RUNTIME_ENV "=%s: %s", env, why);
            return CHAM_ERR_DEVICE_UNAVAILABLE;
        }
        return take_library(handle, env, " (from " CHAM_CUDA_RUNTIME_ENV ")", rt, err,
                            err_size);
    }
    return cham_cudart_search(cham_cudart_search_order, rt, err, err_size);
}

cham_status_t cham_cudart_search(const char *const *names, cham_cudart_t *rt, char *err,
                                 size_t err_size)
{
    CHAM_ASSERT(names && names[0] && rt);
    char why[256];
    char first[256] = "";
    for (size_t i = 0; names[i]; i++) {
        void *handle = open_library(names[i], why, sizeof why);
        if (handle)
            return take_library(handle, names[i], "", rt, err, err_size);
        if (i == 0)
            cham_copy_str(first, sizeof first, why);
    }
    /* The first candidate's reason is the one worth reading: the others are
     * fallbacks and fail the same way. */
    char others[256] = "";
    size_t used = 0;
    for (size_t i = 1; names[0] && names[i] && used < sizeof others; i++)
        used += (size_t)snprintf(others + used, sizeof others - used, "%s%s",
                                 i > 1 ? ", " : "", names[i]);
    cham_set_err(err, err_size, "cuda: could not load the CUDA runtime: %s%s%s%s; set "
                 CHAM_CUDA_RUNTIME_ENV " to the library's path", first,
                 used ? " (also tried " : "", others, used ? ")" : "");
    return CHAM_ERR_DEVICE_UNAVAILABLE;
}
