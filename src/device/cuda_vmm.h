/* The part of CUDA's driver API that virtual memory needs (cuMemCreate,
 * cuMemAddressReserve, cuMemMap, ...: the runtime API has no equivalent),
 * declared here and loaded from libcuda.so.1 with dlopen at open time, as
 * cuda_api.h does for the runtime. Never linked: without a driver the cuda
 * backend simply offers no virtual memory.
 *
 * Each value and layout is the one in NVIDIA's CUDA Driver API reference
 * (https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html and
 * group__CUDA__TYPES.html), checked against the CUDA 13.0 toolkit's cuda.h;
 * tests/test_cuda_abi.c compares them whenever a build finds the toolkit. */
#ifndef CHAM_DEVICE_CUDA_VMM_H
#define CHAM_DEVICE_CUDA_VMM_H

#include <stddef.h>

#include "chameleon/status.h"

typedef int CUresult;                         /* enum cudaError_enum */
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
};
typedef unsigned long long CUdeviceptr;       /* CUdeviceptr_v2 */
typedef unsigned long long CUmemGenericAllocationHandle;

enum {
    CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,      /* CUmemAllocationType */
    CU_MEM_HANDLE_TYPE_NONE = 0x0,            /* CUmemAllocationHandleType */
    CU_MEM_LOCATION_TYPE_DEVICE = 0x1,        /* CUmemLocationType */
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3, /* CUmemAccess_flags */
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,   /* CUmemAllocationGranularity_flags */
};

typedef struct CUmemLocation_st {
    int type;                                 /* CUmemLocationType */
    int id;                                   /* the device ordinal */
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;                                 /* CUmemAllocationType */
    int requestedHandleTypes;                 /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    int flags;                                /* CUmemAccess_flags */
} CUmemAccessDesc;

/* One pointer per driver function; all are required. */
typedef struct cham_cuda_vmm {
    CUresult (*cuMemGetAllocationGranularity)(size_t *granularity,
                                              const CUmemAllocationProp *prop, int option);
    CUresult (*cuMemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags);
    CUresult (*cuMemAddressFree)(CUdeviceptr ptr, size_t size);
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle handle);
    CUresult (*cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags);
    CUresult (*cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count);
    CUresult (*cuMemUnmap)(CUdeviceptr ptr, size_t size);
} cham_cuda_vmm_t;

/* Loads libcuda.so.1 (already loaded by the runtime when a device opened)
 * and fills *vmm. CHAM_ERR_UNSUPPORTED with why in err when the driver is
 * absent or lacks a function. */
cham_status_t cham_cuda_vmm_load(cham_cuda_vmm_t *vmm, char *err, size_t err_size);

#endif
