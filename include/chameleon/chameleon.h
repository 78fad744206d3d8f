/* Chameleon: swap tensors between accelerator and host memory so that
 * training runs when it needs more memory than the accelerator has.
 * This header includes the whole public API. */
#ifndef CHAMELEON_CHAMELEON_H
#define CHAMELEON_CHAMELEON_H

#include "chameleon/status.h"
#include "chameleon/types.h"
#include "chameleon/device.h"
#include "chameleon/sim.h"
#include "chameleon/alloc.h"
#include "chameleon/runtime.h"
#include "chameleon/profile.h"
#include "chameleon/policy.h"
#include "chameleon/protrain.h"
#include "chameleon/workload.h"
#include "chameleon/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHAM_VERSION_MAJOR 0
#define CHAM_VERSION_MINOR 1
#define CHAM_VERSION_PATCH 0

/* cham_version(), the linked library's version: chameleon/status.h. */

#ifdef __cplusplus
}
#endif

#endif
