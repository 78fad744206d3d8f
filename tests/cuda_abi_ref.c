/* The reference side of test_cuda_abi.c: values read from the CUDA
 * toolkit's own headers. Compiled only when CMake finds the toolkit; kept
 * in its own file because the toolkit's names clash with the declarations
 * of src/device/cuda_api.h. */
#include "cuda_abi_ref.h"

#include <stddef.h>

#include <cuda_runtime_api.h>

#define V(x) {#x, (long long)(x)}
const cham_abi_value_t cham_abi_ref[] = {
    V(cudaSuccess),
    V(cudaErrorMemoryAllocation),
    V(cudaErrorStubLibrary),
    V(cudaErrorInsufficientDriver),
    V(cudaErrorCallRequiresNewerDriver),
    V(cudaErrorDevicesUnavailable),
    V(cudaErrorNoDevice),
    V(cudaErrorInvalidDevice),
    V(cudaErrorNotReady),
    V(cudaErrorSystemNotReady),
    V(cudaErrorSystemDriverMismatch),
    V(cudaErrorCompatNotSupportedOnDevice),
    V(cudaMemcpyHostToDevice),
    V(cudaMemcpyDeviceToHost),
    V(cudaMemcpyDeviceToDevice),
    V(cudaDevAttrMemoryClockRate),
    V(cudaDevAttrGlobalMemoryBusWidth),
    V(cudaHostAllocDefault),
    V(cudaStreamNonBlocking),
    V(cudaEventDisableTiming),
    {"sizeof(cudaError_t)", (long long)sizeof(cudaError_t)},
    {"sizeof(enum cudaMemcpyKind)", (long long)sizeof(enum cudaMemcpyKind)},
    {"sizeof(enum cudaDeviceAttr)", (long long)sizeof(enum cudaDeviceAttr)},
    {"sizeof(cudaStream_t)", (long long)sizeof(cudaStream_t)},
    {"sizeof(cudaEvent_t)", (long long)sizeof(cudaEvent_t)},
    {"offsetof(cudaDeviceProp, name)", (long long)offsetof(struct cudaDeviceProp, name)},
    {"sizeof(cudaDeviceProp.name)", (long long)sizeof(((struct cudaDeviceProp *)0)->name)},
    {"offsetof(cudaDeviceProp, totalGlobalMem)",
     (long long)offsetof(struct cudaDeviceProp, totalGlobalMem)},
    {"sizeof(cudaDeviceProp)", (long long)sizeof(struct cudaDeviceProp)},
    {"_Alignof(cudaDeviceProp)", (long long)_Alignof(struct cudaDeviceProp)},
    {"CUDART_VERSION", (long long)CUDART_VERSION},
};
#undef V
const size_t cham_abi_ref_count = sizeof cham_abi_ref / sizeof cham_abi_ref[0];
