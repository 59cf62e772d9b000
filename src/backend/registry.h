/* Finding backends: the CPU one is built in; the CUDA one is the plugin
 * libkerasc_cuda.so, looked for in $KC_BACKEND_PATH (a directory), next to
 * the running executable, then on the loader's usual path. */
#ifndef KC_BACKEND_REGISTRY_H
#define KC_BACKEND_REGISTRY_H

#include "backend/backend.h"

const kc_backend_iface *kc_backend_cpu_iface(void);
/* The CPU backend posing as KC_FAKE_GPUS GPUs (tests), or NULL. */
const kc_backend_iface *kc_backend_fake_gpu_iface(void);

/* The interface for a device type, or NULL with `why` saying what is
 * missing (plugin not found, ABI mismatch, no device). */
const kc_backend_iface *kc_backend_find(kc_device_type type, char *why, size_t why_size);

/* The host services handed to plugins. */
const kc_backend_host *kc_backend_host_services(void);

#endif
