/* Memory on transparent huge pages (see huge.h).
 *
 * Why: in this project's VMs (a paravirtualised MMU) a TLB miss costs a
 * walk of two page tables, and the kernels stream through megabytes at
 * every run: the arena's activations (ResNet50 at batch 1: 5.2 MB, rows
 * of its 14x14 images 4 KB apart, each on its own 4 KiB page), the
 * threads' workspaces (Winograd's transformed tiles, gathered pixels),
 * and the packed weights (100 MB for ResNet50). Packed arrays of 2 MiB
 * and more were already on huge pages (mem.c, 12-05), but each with a
 * small-page tail, and those below 2 MiB (ResNet50's 14x14 1x1 kernels,
 * 1 MB each) on the heap's small pages; rounding each up to a huge page
 * of its own would have cost ResNet50 50 MB of resident memory, so they
 * share chunks here. On the 2-vCPU Zen 5 of bench/results (12-07,
 * ResNet50 batch 1, ten alternating runs of 40, each part behind an
 * environment switch): the arena alone 0.992 and 0.994 of the time
 * (faster in 9 of 10), the packed weights from 256 KiB each rounded up
 * to huge pages of their own 0.993 more, the workspaces 0.997 more, all
 * three 0.986-0.989 (0.963 in a noisy phase). As landed (this file),
 * against the binary before, alternating: ResNet50 batch 1 0.986 (the
 * median of 16 pairs' ratios, faster in 14), batch 8 0.993 (8 pairs),
 * InceptionV3 batch 1 0.971 (7 of 8 faster), MobileNetV2 batch 1 0.990,
 * batch 8 0.996; the same output bits; peak RSS +8 MB at batch 1 (the
 * workspaces' and the arena's last pages), +6 MB at batch 8.
 *
 * The weights heap is a bump allocator over chunks of KC_WHEAP_CHUNK
 * (address space reserved, resident as touched): kernels pack their
 * weights once per plan and free them all together when the plan
 * changes, so a chunk fills, then empties, and is unmapped; a freed
 * array's whole huge pages are given back at once (as kc_mem_free_pages
 * does for the heap's arrays), its edges with the chunk. */
#include "base/huge.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/env.h"
#include "base/error.h"

int kc_huge_pages_on(void)
{
    static int on = -1;
    if (on < 0)
        on = !kc_env_off("KC_HUGEPAGES");
    return on;
}

int kc_huge_maps_on(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 0;
#else
    return kc_huge_pages_on();
#endif
#else
    return kc_huge_pages_on();
#endif
}

/* bytes rounded up to a multiple of `to` (a power of two); 0 on overflow. */
static size_t kc_round_up(size_t bytes, size_t to)
{
    return bytes > SIZE_MAX - (to - 1) ? 0 : (bytes + to - 1) & ~(to - 1);
}

void *kc_huge_alloc(size_t bytes)
{
    size_t whole = kc_round_up(bytes ? bytes : 1, KC_HUGE_PAGE_BYTES);
    if (!whole || whole > SIZE_MAX - KC_HUGE_PAGE_BYTES) {
        kc_fail(KC_ERR_LIMIT, "a buffer of %zu bytes is too large", bytes);
        return NULL;
    }
    /* a huge page more than asked, so that a 2 MiB boundary lies inside;
     * what lies outside the aligned range goes back at once */
    size_t span = whole + KC_HUGE_PAGE_BYTES;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (raw == MAP_FAILED) {
        kc_fail(KC_ERR_NOMEM, "out of memory mapping %zu bytes", whole);
        return NULL;
    }
    uintptr_t at = ((uintptr_t)raw + KC_HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(KC_HUGE_PAGE_BYTES - 1);
    size_t head = at - (uintptr_t)raw, tail = span - head - whole;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap((char *)at + whole, tail);
    if (kc_huge_pages_on())
        (void)madvise((void *)at, whole, MADV_HUGEPAGE); /* a hint: ignored where unsupported */
    return (void *)at;
}

void kc_huge_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, kc_round_up(bytes ? bytes : 1, KC_HUGE_PAGE_BYTES));
}

/* ------------------------------------------------------------ weights heap */

/* A chunk's size where no array asks for more: address space only until
 * touched. */
#define KC_WHEAP_CHUNK ((size_t)64 << 20)
#define KC_WHEAP_MAX_CHUNKS 256
/* Each array follows a header of this many bytes holding its size: the
 * arrays stay 64-byte aligned. */
#define KC_WHEAP_HEADER ((size_t)64)

typedef struct kc_wheap_chunk {
    char *base;
    size_t size, used;
    long live; /* arrays given and not yet freed */
} kc_wheap_chunk;

static kc_wheap_chunk kc_wheap[KC_WHEAP_MAX_CHUNKS];
static int kc_wheap_n;
static pthread_mutex_t kc_wheap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t kc_wheap_once = PTHREAD_ONCE_INIT;

/* A child of fork() has one thread: the lock, which another thread may
 * have held at the fork, starts again free. */
static void kc_wheap_after_fork(void) { pthread_mutex_init(&kc_wheap_lock, NULL); }

static void kc_wheap_init(void) { (void)pthread_atfork(NULL, NULL, kc_wheap_after_fork); }

/* A chunk with room for `need` bytes, mapping a new one where none has;
 * -1 with the error set where that fails. */
static int kc_wheap_room(size_t need)
{
    for (int i = 0; i < kc_wheap_n; i++)
        if (kc_wheap[i].size - kc_wheap[i].used >= need)
            return i;
    if (kc_wheap_n == KC_WHEAP_MAX_CHUNKS) {
        kc_fail(KC_ERR_LIMIT, "the weights heap holds %d chunks already", KC_WHEAP_MAX_CHUNKS);
        return -1;
    }
    size_t size = need > KC_WHEAP_CHUNK ? kc_round_up(need, KC_HUGE_PAGE_BYTES) : KC_WHEAP_CHUNK;
    char *base = size ? kc_huge_alloc(size) : NULL;
    if (!base)
        return -1;
    kc_wheap[kc_wheap_n] = (kc_wheap_chunk){base, size, 0, 0};
    return kc_wheap_n++;
}

void *kc_wheap_alloc(size_t bytes)
{
    size_t need = kc_round_up(bytes ? bytes : 1, 64);
    if (!need || need > SIZE_MAX - KC_WHEAP_HEADER) {
        kc_fail(KC_ERR_LIMIT, "an array of %zu bytes is too large", bytes);
        return NULL;
    }
    need += KC_WHEAP_HEADER;
    pthread_once(&kc_wheap_once, kc_wheap_init);
    pthread_mutex_lock(&kc_wheap_lock);
    int i = kc_wheap_room(need);
    char *p = NULL;
    if (i >= 0) {
        kc_wheap_chunk *c = &kc_wheap[i];
        char *header = c->base + c->used;
        memcpy(header, &bytes, sizeof bytes);
        c->used += need;
        c->live++;
        p = header + KC_WHEAP_HEADER; /* zero: fresh pages, never handed out before */
    }
    pthread_mutex_unlock(&kc_wheap_lock);
    return p;
}

/* [p, p + bytes)'s whole huge pages given back: they read as zeros
 * after, and hold no memory until written. Only whole ones: giving back
 * part of a huge page splits it, and the arrays beside would lie on
 * small pages from then on (a kernel's packing frees a temporary array
 * at build, between arrays that stay); the edges stay resident until
 * the chunk empties. */
static void kc_wheap_give_back(char *p, size_t bytes)
{
    uintptr_t lo = ((uintptr_t)p + KC_HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(KC_HUGE_PAGE_BYTES - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(KC_HUGE_PAGE_BYTES - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int kc_wheap_free(void *p)
{
    if (!p)
        return 0;
    char *at = p;
    pthread_mutex_lock(&kc_wheap_lock);
    int i = 0;
    while (i < kc_wheap_n && !(at > kc_wheap[i].base && at < kc_wheap[i].base + kc_wheap[i].used))
        i++;
    if (i == kc_wheap_n) {
        pthread_mutex_unlock(&kc_wheap_lock);
        return 0;
    }
    kc_wheap_chunk *c = &kc_wheap[i];
    if (--c->live == 0) { /* the chunk whole: unmapped, its slot to the last */
        kc_huge_free(c->base, c->size);
        kc_wheap[i] = kc_wheap[--kc_wheap_n];
    } else {
        size_t bytes;
        memcpy(&bytes, at - KC_WHEAP_HEADER, sizeof bytes);
        kc_wheap_give_back(at, bytes);
    }
    pthread_mutex_unlock(&kc_wheap_lock);
    return 1;
}

int kc_wheap_chunks(void)
{
    pthread_mutex_lock(&kc_wheap_lock);
    int n = kc_wheap_n;
    pthread_mutex_unlock(&kc_wheap_lock);
    return n;
}
