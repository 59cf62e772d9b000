/* LD_PRELOAD shim that counts heap allocations, for `kerasc bench`'s
 * allocs_per_inference line (and the test asserting it is 0): malloc,
 * calloc, realloc, the aligned allocators and C++'s operator new (oneDNN)
 * all end in one of these. Each forwards to glibc's own entry point and
 * bumps the counters; kerasc bench finds kc_alloc_shim_count and
 * kc_alloc_shim_large with dlsym. "Large" is 64 KiB and up: the size at
 * which a per-run allocation costs page faults (glibc serves those from
 * mmap or fresh heap pages), unlike the small tcache hits. */
#include <stddef.h>

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);

#define KC_LARGE_ALLOC ((size_t)64 << 10)

static unsigned long kc_allocs, kc_large;

unsigned long kc_alloc_shim_count(void) { return __atomic_load_n(&kc_allocs, __ATOMIC_RELAXED); }
unsigned long kc_alloc_shim_large(void) { return __atomic_load_n(&kc_large, __ATOMIC_RELAXED); }

static void kc_count_size(size_t size)
{
    __atomic_add_fetch(&kc_allocs, 1, __ATOMIC_RELAXED);
    if (size >= KC_LARGE_ALLOC)
        __atomic_add_fetch(&kc_large, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t size)
{
    kc_count_size(size);
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    kc_count_size(n * size);
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    kc_count_size(size);
    return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size)
{
    kc_count_size(size);
    return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    kc_count_size(size);
    return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    kc_count_size(size);
    void *p = __libc_memalign(align, size);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}

void *valloc(size_t size)
{
    kc_count_size(size);
    return __libc_valloc(size);
}

void *pvalloc(size_t size)
{
    kc_count_size(size);
    return __libc_pvalloc(size);
}
