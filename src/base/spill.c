/* Disk-tier bookkeeping (see spill.h). */
#include "base/spill.h"
#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KC_SPILL_MAX_MAPS 256

static _Thread_local const char *kc_spill_current;
static _Thread_local void *kc_spill_maps[KC_SPILL_MAX_MAPS];
static _Thread_local size_t kc_spill_lens[KC_SPILL_MAX_MAPS];
static _Thread_local int kc_spill_n;

/* Every live spill mapping in the process, for kc_spill_owns. */
static pthread_mutex_t kc_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uintptr_t start, end;
} kc_registry[KC_SPILL_MAX_MAPS];
static int kc_registry_n;

void kc_spill_begin(const char *dir)
{
    kc_spill_current = dir;
    kc_spill_n = 0;
}

void kc_spill_end(void ***maps, size_t **lens, int *n)
{
    *maps = NULL;
    *lens = NULL;
    *n = 0;
    if (kc_spill_n) {
        *maps = malloc((size_t)kc_spill_n * sizeof **maps);
        *lens = malloc((size_t)kc_spill_n * sizeof **lens);
        if (*maps && *lens) {
            memcpy(*maps, kc_spill_maps, (size_t)kc_spill_n * sizeof **maps);
            memcpy(*lens, kc_spill_lens, (size_t)kc_spill_n * sizeof **lens);
            *n = kc_spill_n;
        } else { /* cannot hand them over: keep them mapped (leak, not crash) */
            free(*maps);
            free(*lens);
            *maps = NULL;
            *lens = NULL;
        }
    }
    kc_spill_current = NULL;
    kc_spill_n = 0;
}

const char *kc_spill_dir(void) { return kc_spill_current; }

int kc_spill_tmpfile(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/kerasc-spill-XXXXXX", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0)
        unlink(path);
    return fd;
}

int kc_spill_named_tmpfile(const char *dir, char *path, size_t path_size)
{
    if (snprintf(path, path_size, "%s/kerasc-spill-XXXXXX", dir) >= (int)path_size) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkostemp(path, O_CLOEXEC);
}

int kc_spill_adopt(void *map, size_t len)
{
    if (kc_spill_n == KC_SPILL_MAX_MAPS)
        return 0;
    pthread_mutex_lock(&kc_registry_lock);
    int ok = kc_registry_n < KC_SPILL_MAX_MAPS;
    if (ok) {
        kc_registry[kc_registry_n].start = (uintptr_t)map;
        kc_registry[kc_registry_n].end = (uintptr_t)map + len;
        kc_registry_n++;
    }
    pthread_mutex_unlock(&kc_registry_lock);
    if (!ok)
        return 0;
    kc_spill_maps[kc_spill_n] = map;
    kc_spill_lens[kc_spill_n++] = len;
    return 1;
}

void kc_spill_unmap(void *map, size_t len)
{
    pthread_mutex_lock(&kc_registry_lock);
    for (int i = 0; i < kc_registry_n; i++)
        if (kc_registry[i].start == (uintptr_t)map) {
            kc_registry[i] = kc_registry[--kc_registry_n];
            break;
        }
    pthread_mutex_unlock(&kc_registry_lock);
    munmap(map, len);
}

int kc_spill_owns(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int owned = 0;
    pthread_mutex_lock(&kc_registry_lock);
    for (int i = 0; i < kc_registry_n && !owned; i++)
        owned = a >= kc_registry[i].start && a < kc_registry[i].end;
    pthread_mutex_unlock(&kc_registry_lock);
    return owned;
}

void kc_wfree(void *p)
{
    if (p && !kc_spill_owns(p))
        free(p);
}

void kc_wfree_pages(void *p, size_t bytes)
{
    if (p && !kc_spill_owns(p))
        kc_mem_free_pages(p, bytes);
}
