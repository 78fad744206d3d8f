/* The part of the CUDA runtime API that the cuda backend uses, declared here
 * so that Chameleon compiles without the CUDA toolkit, and loaded at run time
 * with dlopen + dlsym (cuda_api.c), so that libchameleon, chameleon.pc and
 * the CMake package need nothing from CUDA. See docs/cuda.md, "Finding the
 * CUDA runtime".
 *
 * Every name below keeps its CUDA spelling, so cuda.c reads like CUDA code.
 * Each value and signature is the one in NVIDIA's CUDA Runtime API reference
 * (https://docs.nvidia.com/cuda/cuda-runtime-api/, the page named on each
 * line) and was checked against the CUDA 13.0 toolkit's cuda_runtime_api.h
 * and driver_types.h; tests/test_cuda_abi.c compares them with those headers
 * whenever a build finds the toolkit. Only the runtime API is used, never the
 * driver API (cu*): libcudart loads libcuda.so.1 itself. */
#ifndef CHAM_DEVICE_CUDA_API_H
#define CHAM_DEVICE_CUDA_API_H

#include <stddef.h>

#include "chameleon/status.h"

/* ---- types (group__CUDART__TYPES.html) ---------------------------------*/

/* enum cudaError. An int here: the x86-64 and AArch64 ABIs pass an enum of
 * this range as an int, and the runtime may return values not listed. */
typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorMemoryAllocation = 2,
    cudaErrorStubLibrary = 34,
    cudaErrorInsufficientDriver = 35,
    cudaErrorCallRequiresNewerDriver = 36,
    cudaErrorDevicesUnavailable = 46,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600,
    cudaErrorSystemNotReady = 802,
    cudaErrorSystemDriverMismatch = 803,
    cudaErrorCompatNotSupportedOnDevice = 804,
};

/* enum cudaMemcpyKind, passed as an int like cudaError_t. */
enum {
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
};

/* enum cudaDeviceAttr: the two attributes read at open. */
enum {
    cudaDevAttrMemoryClockRate = 36,      /* peak memory clock, kHz */
    cudaDevAttrGlobalMemoryBusWidth = 37, /* global memory bus width, bits */
};

/* Flags (#defines in driver_types.h). */
enum {
    cudaHostAllocDefault = 0x00,   /* cudaHostAlloc */
    cudaStreamNonBlocking = 0x01,  /* cudaStreamCreateWithFlags */
    cudaEventDisableTiming = 0x02, /* cudaEventCreateWithFlags */
};

/* Opaque handles, the same incomplete types as CUDA's, so that a
 * cudaStream_t handed to a kernel's native_fn is the caller's cudaStream_t. */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef void (*cudaHostFn_t)(void *userData);

/* The head of struct cudaDeviceProp (structcudaDeviceProp.html): the fields
 * up to totalGlobalMem, in their order, the same in CUDA 12 and 13. The rest
 * of the struct (1008 bytes in CUDA 13) is never read: cudaGetDeviceProperties
 * writes into a cham_cuda_device_prop_t, which has room for all of it. */
typedef struct cham_cuda_device_prop_head {
    char name[256];                  /* ASCII name of the device */
    unsigned char uuid[16];          /* cudaUUID_t */
    char luid[8];
    unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem;           /* bytes */
} cham_cuda_device_prop_head_t;

#define CHAM_CUDA_DEVICE_PROP_ROOM 4096
typedef union cham_cuda_device_prop {
    cham_cuda_device_prop_head_t head;
    long double align;               /* as aligned as any field of the struct */
    unsigned char room[CHAM_CUDA_DEVICE_PROP_ROOM];
} cham_cuda_device_prop_t;

/* ---- functions ----------------------------------------------------------
 * One pointer per runtime function, named as the function; the comment
 * names the reference page. All are required: a library missing one is
 * refused at load. */
typedef struct cham_cudart {
    /* group__CUDART____VERSION.html */
    cudaError_t (*cudaRuntimeGetVersion)(int *runtimeVersion);
    /* group__CUDART__ERROR.html */
    cudaError_t (*cudaGetLastError)(void);
    const char *(*cudaGetErrorName)(cudaError_t error);
    const char *(*cudaGetErrorString)(cudaError_t error);
    /* group__CUDART__DEVICE.html */
    cudaError_t (*cudaGetDeviceCount)(int *count);
    cudaError_t (*cudaSetDevice)(int device);
    cudaError_t (*cudaGetDeviceProperties)(cham_cuda_device_prop_t *prop, int device);
    cudaError_t (*cudaDeviceGetAttribute)(int *value, int attr, int device);
    cudaError_t (*cudaDeviceSynchronize)(void);
    /* group__CUDART__MEMORY.html */
    cudaError_t (*cudaMalloc)(void **devPtr, size_t size);
    cudaError_t (*cudaFree)(void *devPtr);
    cudaError_t (*cudaHostAlloc)(void **pHost, size_t size, unsigned int flags);
    cudaError_t (*cudaFreeHost)(void *ptr);
    cudaError_t (*cudaMemcpyAsync)(void *dst, const void *src, size_t count, int kind,
                                   cudaStream_t stream);
    /* group__CUDART__STREAM.html */
    cudaError_t (*cudaStreamCreateWithFlags)(cudaStream_t *pStream, unsigned int flags);
    cudaError_t (*cudaStreamDestroy)(cudaStream_t stream);
    cudaError_t (*cudaStreamSynchronize)(cudaStream_t stream);
    cudaError_t (*cudaStreamWaitEvent)(cudaStream_t stream, cudaEvent_t event,
                                       unsigned int flags);
    /* group__CUDART__EVENT.html */
    cudaError_t (*cudaEventCreateWithFlags)(cudaEvent_t *event, unsigned int flags);
    cudaError_t (*cudaEventDestroy)(cudaEvent_t event);
    cudaError_t (*cudaEventRecord)(cudaEvent_t event, cudaStream_t stream);
    cudaError_t (*cudaEventQuery)(cudaEvent_t event);
    cudaError_t (*cudaEventSynchronize)(cudaEvent_t event);
    /* group__CUDART__EXECUTION.html; used by tests' native_fn kernels. */
    cudaError_t (*cudaLaunchHostFunc)(cudaStream_t stream, cudaHostFn_t fn, void *userData);

    /* Filled by the loader, not runtime functions. */
    int version;             /* cudaRuntimeGetVersion: 1000 * major + 10 * minor */
    char library[256];       /* the name or path that dlopen loaded */
} cham_cudart_t;

/* The environment variable that names the runtime library to load (a path,
 * or a file name for the dynamic linker's search); when set and not empty,
 * nothing else is tried. */
#define CHAM_CUDA_RUNTIME_ENV "CHAM_CUDA_RUNTIME"

/* The oldest runtime accepted: CUDA 12.0 (cudaRuntimeGetVersion). */
#define CHAM_CUDA_RUNTIME_MIN_VERSION 12000

/* Loads the CUDA runtime and fills *rt: the library named by
 * CHAM_CUDA_RUNTIME if set, else the first of cham_cudart_search_order that
 * dlopen finds. Reads the environment at every call; the library stays
 * loaded for the rest of the process (the CUDA runtime is not meant to be
 * unloaded once used). On failure returns CHAM_ERR_DEVICE_UNAVAILABLE and
 * writes into err a sentence naming what was tried and dlerror()'s text. */
cham_status_t cham_cudart_load(cham_cudart_t *rt, char *err, size_t err_size);

/* The names tried, in order, when CHAM_CUDA_RUNTIME is not set;
 * NULL-terminated. */
extern const char *const cham_cudart_search_order[];

/* The search cham_cudart_load makes without CHAM_CUDA_RUNTIME, over the
 * NULL-terminated names (file names for the dynamic linker, or paths): the
 * first that dlopen finds is used. Tests call it with names that exist
 * nowhere to see the "could not load" message. */
cham_status_t cham_cudart_search(const char *const *names, cham_cudart_t *rt, char *err,
                                 size_t err_size);

#endif
