/* The built-in backends' entry points, found by name in device.c. Each one
 * reads the config, builds its context and calls cham_device_open_iface(). */
#ifndef CHAM_DEVICE_BACKENDS_H
#define CHAM_DEVICE_BACKENDS_H

#include "common/message.h"
#include "chameleon/backend.h"

cham_status_t cham_sim_open(const cham_device_config_t *config, cham_device_t **out);
/* Loads the CUDA runtime with dlopen (cuda_api.h), then opens the device. */
cham_status_t cham_cuda_open(const cham_device_config_t *config, cham_device_t **out);

/* Records the message for cham_device_last_error(NULL) after a failed open. */
void cham_device_set_open_error(const char *fmt, ...) CHAM_PRINTF(1, 2);

#endif
