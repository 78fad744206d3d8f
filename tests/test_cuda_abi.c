/* Checks src/device/cuda_api.h, where the cuda backend declares the part of
 * the CUDA runtime API it uses (so that Chameleon builds without the
 * toolkit), against the toolkit's own headers: every error code, enum value
 * and flag, the size of each enum and handle type as passed, and the layout
 * of the cudaDeviceProp head the backend reads, including that the buffer
 * handed to cudaGetDeviceProperties has room for the whole struct; and the
 * same for src/device/cuda_vmm.h, the driver's virtual memory functions.
 * The expected values come from cuda_abi_ref.c, compiled with the toolkit's
 * cuda_runtime_api.h; without the toolkit at build time the test prints
 * "test_cuda_abi: skipped: ..." and exits 77. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cuda_abi_ref.h"
#include "device/cuda_api.h"
#include "device/cuda_vmm.h"

#if CHAM_TEST_CUDA_HEADERS

#define V(x) {#x, (long long)(x)}
static const cham_abi_value_t ours[] = {
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
    /* cuda_api.h passes enum cudaError, cudaMemcpyKind and cudaDeviceAttr
     * as int: right only if the toolkit's enums are int-sized. */
    {"sizeof(cudaError_t)", (long long)sizeof(cudaError_t)},
    {"sizeof(enum cudaMemcpyKind)", (long long)sizeof(int)},
    {"sizeof(enum cudaDeviceAttr)", (long long)sizeof(int)},
    {"sizeof(cudaStream_t)", (long long)sizeof(cudaStream_t)},
    {"sizeof(cudaEvent_t)", (long long)sizeof(cudaEvent_t)},
    {"offsetof(cudaDeviceProp, name)",
     (long long)offsetof(cham_cuda_device_prop_head_t, name)},
    {"sizeof(cudaDeviceProp.name)",
     (long long)sizeof(((cham_cuda_device_prop_head_t *)0)->name)},
    {"offsetof(cudaDeviceProp, totalGlobalMem)",
     (long long)offsetof(cham_cuda_device_prop_head_t, totalGlobalMem)},
    /* cuda_vmm.h: the driver API's virtual memory. */
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

static long long ref_value(const char *name)
{
    for (size_t i = 0; i < cham_abi_ref_count; i++)
        if (strcmp(cham_abi_ref[i].name, name) == 0)
            return cham_abi_ref[i].value;
    fail_msg("%s: not in cuda_abi_ref.c", name);
    return -1;
}

static void test_values_match_the_toolkit(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
        long long ref = ref_value(ours[i].name);
        if (ours[i].value != ref)
            fail_msg("%s: cuda_api.h says %lld, the toolkit's headers %lld", ours[i].name,
                     ours[i].value, ref);
    }
}

/* cudaGetDeviceProperties writes the whole struct: the buffer must hold it
 * and be as aligned. */
static void test_device_prop_room(void **state)
{
    (void)state;
    assert_true(ref_value("sizeof(cudaDeviceProp)") <=
                (long long)sizeof(cham_cuda_device_prop_t));
    assert_int_equal(sizeof(cham_cuda_device_prop_t), CHAM_CUDA_DEVICE_PROP_ROOM);
    assert_true(ref_value("_Alignof(cudaDeviceProp)") <=
                (long long)_Alignof(cham_cuda_device_prop_t));
    /* The toolkit this build saw is one the loader accepts. */
    assert_true(ref_value("CUDART_VERSION") >= CHAM_CUDA_RUNTIME_MIN_VERSION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_match_the_toolkit),
        cmocka_unit_test(test_device_prop_room),
    };
    return cmocka_run_group_tests_name("cuda_abi", tests, NULL, NULL) ? 1 : 0;
}

#else

int main(void)
{
    printf("test_cuda_abi: skipped: CMake found no CUDA toolkit headers to compare "
           "src/device/cuda_api.h with\n");
    return 77;
}

#endif
