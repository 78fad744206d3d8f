/* The reference side of test_cuda_abi.c: values read from the CUDA
 * toolkit's own headers. Compiled only when CMake finds the toolkit; kept
 * in its own file because the toolkit's names clash with the declarations
 * of src/device/cuda_api.h. */
#include "cuda_abi_ref.h"

#include <stddef.h>

#include <cuda.h>
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
    /* cuda.h: the driver API's virtual memory (src/device/cuda_vmm.h). */
    V(CUDA_SUCCESS),
    V(CUDA_ERROR_OUT_OF_MEMORY),
    V(CU_MEM_ALLOCATION_TYPE_PINNED),
    V(CU_MEM_HANDLE_TYPE_NONE),
    V(CU_MEM_LOCATION_TYPE_DEVICE),
    V(CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
    V(CU_MEM_ALLOC_GRANULARITY_MINIMUM),
    {"sizeof(CUresult)", (long long)sizeof(CUresult)},
    {"sizeof(CUdeviceptr)", (long long)sizeof(CUdeviceptr)},
    {"sizeof(CUmemGenericAllocationHandle)", (long long)sizeof(CUmemGenericAllocationHandle)},
    {"sizeof(CUmemLocation)", (long long)sizeof(CUmemLocation)},
    {"offsetof(CUmemLocation, id)", (long long)offsetof(CUmemLocation, id)},
    {"sizeof(CUmemAllocationProp)", (long long)sizeof(CUmemAllocationProp)},
    {"offsetof(CUmemAllocationProp, location)",
     (long long)offsetof(CUmemAllocationProp, location)},
    {"offsetof(CUmemAllocationProp, win32HandleMetaData)",
     (long long)offsetof(CUmemAllocationProp, win32HandleMetaData)},
    {"offsetof(CUmemAllocationProp, allocFlags)",
     (long long)offsetof(CUmemAllocationProp, allocFlags)},
    {"sizeof(CUmemAccessDesc)", (long long)sizeof(CUmemAccessDesc)},
    {"offsetof(CUmemAccessDesc, flags)", (long long)offsetof(CUmemAccessDesc, flags)},
};
#undef V

/* The driver functions cuda_vmm.h declares, with its signatures spelled in
 * the toolkit's types: a mismatch is an incompatible-pointer error here.
 * Inside sizeof, so nothing links against libcuda. */
typedef struct {
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                            CUmemAllocationGranularity_flags);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                    unsigned long long);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*unmap)(CUdeviceptr, size_t);
} vmm_signatures_t;
enum {
    vmm_signatures_checked = sizeof((vmm_signatures_t){
        cuMemGetAllocationGranularity, cuMemAddressReserve, cuMemAddressFree, cuMemCreate,
        cuMemRelease, cuMemMap, cuMemSetAccess, cuMemUnmap})
};
const size_t cham_abi_ref_count = sizeof cham_abi_ref / sizeof cham_abi_ref[0];
