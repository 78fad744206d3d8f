/* Loading the driver's virtual memory functions (cuda_vmm.h). */
#include "device/cuda_vmm.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "common/message.h"

#define SYM(name) {#name, offsetof(cham_cuda_vmm_t, name)}
static const struct {
    const char *name;
    size_t offset;
} vmm_syms[] = {
    SYM(cuMemGetAllocationGranularity), SYM(cuMemAddressReserve), SYM(cuMemAddressFree),
    SYM(cuMemCreate), SYM(cuMemRelease), SYM(cuMemMap), SYM(cuMemSetAccess), SYM(cuMemUnmap),
};
#undef SYM

cham_status_t cham_cuda_vmm_load(cham_cuda_vmm_t *vmm, char *err, size_t err_size)
{
    memset(vmm, 0, sizeof *vmm);
    (void)dlerror();
    /* Never closed, like the runtime: the driver stays for the process. */
    void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        cham_set_err(err, err_size, "no CUDA driver for virtual memory (libcuda.so.1: %s)",
                     why ? why : "not found");
        return CHAM_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; i < sizeof vmm_syms / sizeof vmm_syms[0]; i++) {
        void *sym = dlsym(handle, vmm_syms[i].name);
        if (!sym) {
            cham_set_err(err, err_size, "the CUDA driver lacks %s", vmm_syms[i].name);
            memset(vmm, 0, sizeof *vmm);
            return CHAM_ERR_UNSUPPORTED;
        }
        memcpy((char *)vmm + vmm_syms[i].offset, &sym, sizeof sym);
    }
    return CHAM_OK;
}
