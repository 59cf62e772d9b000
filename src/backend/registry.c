/* Backend lookup and plugin loading (see registry.h). The plugin is opened
 * once per process and never closed: its code may be referenced by
 * sessions until exit. */
#include "backend/registry.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void kc_host_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kerasc: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const kc_backend_host kc_host = {kc_fail, kc_host_warn};

const kc_backend_host *kc_backend_host_services(void) { return &kc_host; }

static pthread_once_t kc_cuda_once = PTHREAD_ONCE_INIT;
static const kc_backend_iface *kc_cuda_iface;
static char kc_cuda_why[PATH_MAX + 512];

static void *kc_try_open(const char *dir)
{
    char path[PATH_MAX];
    int n = dir ? snprintf(path, sizeof path, "%s/%s", dir, KC_BACKEND_CUDA_LIBRARY)
                : snprintf(path, sizeof path, "%s", KC_BACKEND_CUDA_LIBRARY);
    if (n < 0 || (size_t)n >= sizeof path)
        return NULL; /* a directory too long for a path cannot hold the plugin */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && dir && access(path, F_OK) == 0)
        snprintf(kc_cuda_why, sizeof kc_cuda_why, "%.*s cannot be loaded: %.400s", (int)(PATH_MAX - 1), path, dlerror());
    return h;
}

static void kc_cuda_load(void)
{
    snprintf(kc_cuda_why, sizeof kc_cuda_why,
             "the CUDA backend (%s) was not found next to the executable, in "
             "KC_BACKEND_PATH or on the library path", KC_BACKEND_CUDA_LIBRARY);
    void *h = NULL;
    const char *env = getenv("KC_BACKEND_PATH");
    if (env && *env)
        h = kc_try_open(env);
    if (!h) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash) {
                *slash = '\0';
                h = kc_try_open(exe);
            }
        }
    }
    if (!h)
        h = kc_try_open(NULL);
    if (!h)
        return;
    kc_backend_entry_fn entry;
    *(void **)&entry = dlsym(h, KC_BACKEND_CUDA_ENTRY);
    const kc_backend_iface *iface = entry ? entry() : NULL;
    if (!iface || iface->abi != KC_BACKEND_ABI) {
        snprintf(kc_cuda_why, sizeof kc_cuda_why,
                 "%s is from a different kerasc build (backend ABI mismatch)",
                 KC_BACKEND_CUDA_LIBRARY);
        return;
    }
    kc_cuda_iface = iface;
}

const kc_backend_iface *kc_backend_find(kc_device_type type, char *why, size_t why_size)
{
    if (type == KC_DEVICE_CPU)
        return kc_backend_cpu_iface();
    if (kc_backend_fake_gpu_iface())
        return kc_backend_fake_gpu_iface();
    pthread_once(&kc_cuda_once, kc_cuda_load);
    if (!kc_cuda_iface && why)
        snprintf(why, why_size, "%s", kc_cuda_why);
    return kc_cuda_iface;
}
