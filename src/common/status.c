/* Descriptions of status codes and the library's version string. */
#include "chameleon/status.h"

const char *cham_version(void)
{
    return "0.1.0";
}

const char *cham_status_string(cham_status_t status)
{
    switch (status) {
    case CHAM_OK: return "ok";
    case CHAM_NOT_READY: return "not ready";
    case CHAM_ERR_INVALID_ARG: return "invalid argument";
    case CHAM_ERR_NOT_FOUND: return "not found";
    case CHAM_ERR_UNSUPPORTED: return "unsupported";
    case CHAM_ERR_OUT_OF_MEMORY: return "out of device memory";
    case CHAM_ERR_HOST_BUDGET: return "pinned host memory budget exhausted";
    case CHAM_ERR_HOST_OOM: return "out of host memory";
    case CHAM_ERR_DEVICE_UNAVAILABLE: return "device unavailable";
    case CHAM_ERR_BACKEND: return "backend error";
    case CHAM_ERR_HAZARD: return "hazard detected";
    case CHAM_ERR_POLICY_MISMATCH: return "policy does not match the op sequence";
    }
    return "unknown status";
}
