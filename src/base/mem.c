#include "mem.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "huge.h"

/* A small page: big arrays on the heap are aligned to it. */
#define KC_SMALL_PAGE ((size_t)4096)

/* bytes (at least 1), 64-byte aligned, or NULL; free() frees it. From 2
 * MiB on, page-aligned (whole pages, which an owner may drop), 2 MiB
 * aligned and advised onto transparent huge pages (mem.h, kc_alloc_array). */
static void *kc_alloc_aligned(size_t bytes)
{
    int big = bytes >= KC_HUGE_PAGE_BYTES, huge = big && kc_huge_pages_on();
    size_t align = huge ? KC_HUGE_PAGE_BYTES : big ? KC_SMALL_PAGE : 64;
    void *p = NULL;
    if (posix_memalign(&p, align, bytes ? bytes : 1))
        return NULL;
    if (huge)
        kc_huge_advise(p, bytes);
    return p;
}

/* count*size bytes (1 for an empty array), or 0 with the error set when
 * the product overflows. */
static size_t kc_array_bytes(size_t count, size_t size)
{
    if (count == 0 || size == 0)
        return 1;
    if (count > SIZE_MAX / size) {
        kc_fail(KC_ERR_LIMIT, "allocation of %zu x %zu bytes overflows", count, size);
        return 0;
    }
    return count * size;
}

/* p, or the out-of-memory error for bytes when it is NULL. */
static void *kc_alloc_checked(void *p, size_t bytes)
{
    if (!p)
        kc_fail(KC_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *kc_calloc(size_t count, size_t size)
{
    size_t bytes = kc_array_bytes(count, size);
    return bytes ? kc_alloc_checked(calloc(bytes, 1), bytes) : NULL;
}

void *kc_calloc_aligned(size_t count, size_t size)
{
    size_t bytes = kc_array_bytes(count, size);
    void *p = bytes ? kc_alloc_checked(kc_alloc_aligned(bytes), bytes) : NULL;
    if (p)
        memset(p, 0, bytes);
    return p;
}

void *kc_calloc_weights(size_t count, size_t size)
{
    size_t bytes = kc_array_bytes(count, size);
    if (!bytes || bytes < KC_WHEAP_MIN || !kc_huge_maps_on())
        return bytes ? kc_calloc_aligned(count, size) : NULL;
    if (bytes < KC_HUGE_PAGE_BYTES)
        return kc_wheap_alloc(bytes); /* zeroed, side by side on huge pages (huge.c) */
    /* from 2 MiB on, huge pages of its own, its tail on small ones: in the
     * weights heap, the whole pages under a kernel's untouched padding
     * came resident too (InceptionV3's peak RSS +2.5 MB at batch 1) */
    void *p = kc_alloc_array(count, size);
    if (p)
        memset(p, 0, bytes); /* memory glibc reuses is not zero */
    return p;
}

void kc_free_weights(void *p)
{
    if (p && !kc_wheap_free(p))
        kc_mem_free_pages(p, malloc_usable_size(p));
}

void *kc_alloc_array(size_t count, size_t size)
{
    size_t bytes = kc_array_bytes(count, size);
    return bytes ? kc_alloc_checked(kc_alloc_aligned(bytes), bytes) : NULL;
}

void *kc_realloc_array(void *ptr, size_t count, size_t size)
{
    size_t bytes = kc_array_bytes(count, size);
    return bytes ? kc_alloc_checked(realloc(ptr, bytes), bytes) : NULL;
}

char *kc_strndup(const char *s, size_t n)
{
    char *d = kc_calloc(n + 1, 1);
    if (d)
        memcpy(d, s, n);
    return d;
}

char *kc_strdup(const char *s) { return kc_strndup(s, strlen(s)); }

kc_status kc_grow(void **items, size_t *cap, size_t need, size_t elem_size)
{
    if (need <= *cap)
        return KC_OK;
    size_t next = *cap ? *cap * 2 : 8;
    while (next < need)
        next *= 2;
    void *p = kc_realloc_array(*items, next, elem_size);
    if (!p)
        return KC_ERR_NOMEM;
    *items = p;
    *cap = next;
    return KC_OK;
}

void kc_mem_free_pages(void *p, size_t bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    if (p && page > 0 && bytes >= (size_t)(4 * page)) {
        /* past the first bytes, where free() writes its bookkeeping */
        uintptr_t lo = ((uintptr_t)p + 64 + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
        uintptr_t hi = ((uintptr_t)p + bytes) & ~((uintptr_t)page - 1);
        if (hi > lo)
            (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
        /* A huge-page array (kc_alloc_array) carved from the heap leaves
         * its range advised: whatever small blocks come there next would
         * fault in 2 MiB at a time. */
        if (hi - lo >= KC_HUGE_PAGE_BYTES)
            (void)madvise((void *)lo, hi - lo, MADV_NOHUGEPAGE);
    }
    free(p);
}

int kc_mul_overflows(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

static long kc_status_kb(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void kc_mem_read(long *rss_kb, long *peak_kb)
{
    FILE *f = fopen("/proc/self/status", "r");
    char text[4096];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    *rss_kb = kc_status_kb(text, "VmRSS:");
    *peak_kb = kc_status_kb(text, "VmHWM:");
}

void kc_mem_trace(const char *stage)
{
    if (!getenv("KC_MEM_TRACE"))
        return;
    long rss, peak;
    kc_mem_read(&rss, &peak);
    /* with the time since the previous trace: where a load spends it */
    static double last; /* a diagnostic: one process, one load at a time */
    double now = kc_now();
    fprintf(stderr, "kerasc mem: %-28s rss %6ld KiB  peak %6ld KiB  +%.1f ms\n", stage, rss, peak,
            last > 0 ? (now - last) * 1e3 : 0.0);
    last = now;
}

int kc_mem_trace_nodes(void)
{
    const char *level = getenv("KC_MEM_TRACE");
    return level && !strcmp(level, "nodes");
}

void kc_mem_trace_node(const char *layer_name)
{
    static long last_peak; /* a diagnostic: one process, one run at a time */
    long rss, peak;
    kc_mem_read(&rss, &peak);
    if (peak > last_peak)
        fprintf(stderr, "kerasc mem: after %-22s rss %6ld KiB  peak %6ld KiB (+%ld)\n",
                layer_name, rss, peak, peak - last_peak);
    last_peak = peak;
}
