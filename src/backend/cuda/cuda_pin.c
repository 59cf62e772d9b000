/* Host ranges page-locked with cudaHostRegister for the host's host_pin
 * (a session's streamed weights; runtime/sched_pin.c).
 *
 * The registry is process-wide, not per device: CUDA's registrations are,
 * and every copy to or from host memory must know them all, because CUDA
 * refuses a single copy from a range that is only partly registered
 * (cudaErrorInvalidValue, seen on an H200 when a pinned page range ended
 * inside another buffer). The copies (cuda_backend.c) split at the
 * registered ranges' edges with kc_cuda_pin_lookup, and DMA directly only
 * from ranges their own device pinned: another session's may be unpinned
 * while a copy is in flight. Overlapping pins are refused here, before
 * CUDA is asked, so no CUDA error is raised. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

typedef struct kc_cuda_pin {
    char *lo, *hi;            /* [lo, hi) */
    const kc_backend *owner;  /* the device whose host_pin made it */
} kc_cuda_pin;

static pthread_mutex_t kc_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static kc_cuda_pin *kc_pins;
static int kc_n_pins, kc_cap_pins;

static int kc_pin_overlaps(const char *lo, const char *hi)
{
    for (int i = 0; i < kc_n_pins; i++)
        if (lo < kc_pins[i].hi && hi > kc_pins[i].lo)
            return 1;
    return 0;
}

kc_status kc_cuda_host_pin(kc_backend *b, void *ptr, size_t bytes)
{
    if (!b || !ptr || !bytes)
        return KC_ERR_ARG;
    char *lo = ptr, *hi = lo + bytes;
    kc_status st = KC_OK;
    pthread_mutex_lock(&kc_pin_lock);
    if (kc_pin_overlaps(lo, hi)) {
        st = KC_ERR_UNSUPPORTED; /* another session holds these pages */
    } else if (kc_n_pins == kc_cap_pins) {
        int cap = kc_cap_pins ? 2 * kc_cap_pins : 64;
        kc_cuda_pin *grown = realloc(kc_pins, (size_t)cap * sizeof *grown);
        if (grown) {
            kc_pins = grown;
            kc_cap_pins = cap;
        } else {
            st = KC_ERR_NOMEM;
        }
    }
    if (st == KC_OK && (cudaSetDevice(b->device) != cudaSuccess ||
                        cudaHostRegister(ptr, bytes, cudaHostRegisterDefault) != cudaSuccess)) {
        (void)cudaGetLastError(); /* a lock limit, say: those uploads stay staged */
        st = KC_ERR_UNSUPPORTED;
    }
    if (st == KC_OK)
        kc_pins[kc_n_pins++] = (kc_cuda_pin){lo, hi, b};
    pthread_mutex_unlock(&kc_pin_lock);
    return st;
}

/* Entry i unregistered and removed; the lock is held. */
static void kc_pin_drop(kc_backend *b, int i)
{
    /* no copy of this device may still read it */
    (void)cudaSetDevice(b->device);
    (void)cudaStreamSynchronize(b->copy);
    (void)cudaStreamSynchronize(b->compute);
    if (cudaHostUnregister(kc_pins[i].lo) != cudaSuccess) {
        (void)cudaGetLastError();
        if (b->host.warn)
            b->host.warn("cuda: cudaHostUnregister of a pinned weight range failed");
    }
    kc_pins[i] = kc_pins[--kc_n_pins];
}

void kc_cuda_host_unpin(kc_backend *b, void *ptr)
{
    pthread_mutex_lock(&kc_pin_lock);
    for (int i = 0; i < kc_n_pins; i++)
        if (kc_pins[i].owner == b && kc_pins[i].lo == (char *)ptr) {
            kc_pin_drop(b, i);
            break;
        }
    pthread_mutex_unlock(&kc_pin_lock);
}

void kc_cuda_unpin_all(kc_backend *b)
{
    pthread_mutex_lock(&kc_pin_lock);
    for (int i = kc_n_pins - 1; i >= 0; i--)
        if (kc_pins[i].owner == b)
            kc_pin_drop(b, i);
    pthread_mutex_unlock(&kc_pin_lock);
}

kc_cuda_pin_kind kc_cuda_pin_lookup(const kc_backend *b, const void *p, size_t bytes,
                                    size_t *run)
{
    const char *at = p;
    kc_cuda_pin_kind kind = KC_PIN_NONE;
    size_t n = bytes;
    pthread_mutex_lock(&kc_pin_lock);
    for (int i = 0; i < kc_n_pins; i++) {
        if (at >= kc_pins[i].lo && at < kc_pins[i].hi) {
            size_t left = (size_t)(kc_pins[i].hi - at);
            n = left < bytes ? left : bytes;
            kind = kc_pins[i].owner == b ? KC_PIN_OWN : KC_PIN_FOREIGN;
            break;
        }
        if (kc_pins[i].lo > at && (size_t)(kc_pins[i].lo - at) < n)
            n = (size_t)(kc_pins[i].lo - at); /* pageable up to the next range */
    }
    pthread_mutex_unlock(&kc_pin_lock);
    *run = n;
    return kind;
}
