/* Memory on transparent huge pages (see huge.h).
 *
 * Why: in this project's VMs (a paravirtualised MMU) a TLB miss costs a
 * walk of two page tables, and the kernels stream through megabytes at
 * every run: the arena's activations (ResNet50 at batch 1: 5.2 MB, rows
 * of its 14x14 images 4 KB apart, each on its own 4 KiB page), the
 * threads' workspaces (Winograd's transformed tiles, gathered pixels),
 * and the packed weights (100 MB for ResNet50). Packed arrays of 2 MiB
 * and more were already on huge pages (mem.c, 12-05), those below
 * (ResNet50's 14x14 1x1 kernels, 1 MB each) on the heap's small pages;
 * rounding each up to a huge page of its own would have cost ResNet50
 * some 15 MB of resident memory, so they share chunks here. On the 2-vCPU Zen 5 of bench/results (12-07,
 * ResNet50 batch 1, ten alternating runs of 40, each part behind an
 * environment switch): the arena alone 0.992 and 0.994 of the time
 * (faster in 9 of 10), the packed weights from 256 KiB each rounded up
 * to huge pages of their own 0.993 more, the workspaces 0.997 more, all
 * three 0.986-0.989 (0.963 in a noisy phase). As landed, against the
 * binary before, alternating: ResNet50 batch 1 0.967 (the median of 14
 * pairs' ratios, faster in 13), batch 8 0.992 (6 pairs), InceptionV3
 * batch 1 0.966 (5 of 6 faster), MobileNetV2 level; the same output
 * bits. Peak RSS: rounded up to whole huge pages, the workspaces and the
 * arena came resident whole (MobileNetV2 +10 MB), and in the weights
 * heap the whole pages under packed arrays' untouched padding
 * (InceptionV3 +6 MB, at its budget at batch 8): so only the whole pages
 * inside a buffer are advised (kc_huge_alloc), workspaces below 2 MiB
 * stay in the heap, and packed arrays from 2 MiB on keep huge pages of
 * their own (mem.c); peak RSS then +0 to +4 MB.
 *
 * The weights heap hands out chunks of KC_WHEAP_CHUNK (address space
 * reserved, resident as touched) front to back, and a freed array's
 * range again (its holes, first fit): kernels pack their weights once
 * per plan and free them when the plan changes, so a chunk fills, then
 * empties, and is unmapped; a freed array's whole huge pages are given
 * back at once (as kc_mem_free_pages does for the heap's arrays). */
#include "base/huge.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"

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

/* The huge pages wholly inside [p, p + bytes): [*lo, *hi), empty where
 * *hi <= *lo. */
static void kc_huge_inside(const void *p, size_t bytes, uintptr_t *lo, uintptr_t *hi)
{
    *lo = ((uintptr_t)p + KC_HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(KC_HUGE_PAGE_BYTES - 1);
    *hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(KC_HUGE_PAGE_BYTES - 1);
}

void kc_huge_advise(void *p, size_t bytes)
{
    uintptr_t lo, hi;
    kc_huge_inside(p, bytes, &lo, &hi);
    if (kc_huge_pages_on() && hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: ignored where unsupported */
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
    /* the whole huge pages inside `bytes` only: the last one's rest would
     * come resident whole at its first touch (a huge page is faulted in
     * at once), so what lies past the last whole page stays on small
     * pages, resident as touched */
    kc_huge_advise((void *)at, bytes);
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
    size_t size, used; /* [base, base + used) handed out or in holes */
    long live;         /* arrays given and not yet freed */
} kc_wheap_chunk;

/* A freed range below a chunk's `used`, to be handed out again: kernels
 * pack their weights again when a plan changes (InceptionV3's branch
 * lanes: 86 of its 88 packed arrays freed once, 105 MB), and without
 * reuse each freed array's edges stayed resident (+8 MB of peak RSS). */
typedef struct kc_wheap_hole {
    char *at;
    size_t size;
    int chunk;
} kc_wheap_hole;

static kc_wheap_chunk kc_wheap[KC_WHEAP_MAX_CHUNKS];
static int kc_wheap_n;
static kc_wheap_hole *kc_holes; /* by address, no two adjacent in one chunk */
static int kc_n_holes;
static size_t kc_cap_holes;
static pthread_mutex_t kc_wheap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t kc_wheap_once = PTHREAD_ONCE_INIT;

/* A child of fork() has one thread: the lock, which another thread may
 * have held at the fork, starts again free. */
static void kc_wheap_after_fork(void) { pthread_mutex_init(&kc_wheap_lock, NULL); }

static void kc_wheap_init(void) { (void)pthread_atfork(NULL, NULL, kc_wheap_after_fork); }

/* The chunk holding address at, or -1. */
static int kc_wheap_chunk_of(const char *at)
{
    for (int i = 0; i < kc_wheap_n; i++)
        if (at >= kc_wheap[i].base && at < kc_wheap[i].base + kc_wheap[i].size)
            return i;
    return -1;
}

/* A chunk with room for `need` bytes past its `used`, mapping a new one
 * where none has; -1 with the error set where that fails. */
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

/* [at, at + need), from the start of a hole that ends at `end`, zeroed.
 * The whole huge pages inside a hole were given back (kc_wheap_hole_add)
 * and read as zeros; only the partial ones at its two ends may keep what
 * freed arrays held. Only those are written here: writing the others
 * would make them resident before the array's owner does, and where it
 * never does (a packing's zero padding), for nothing. */
static void kc_wheap_zero(char *at, size_t need, const char *end)
{
    uintptr_t a = (uintptr_t)at, stop = a + need, first_whole, last_whole;
    kc_huge_inside(at, (size_t)(end - at), &first_whole, &last_whole);
    if (first_whole >= last_whole) { /* no whole page inside the hole */
        memset(at, 0, need);
        return;
    }
    memset(at, 0, (first_whole < stop ? first_whole : stop) - a);
    if (stop > last_whole)
        memset((void *)last_whole, 0, stop - last_whole);
}

/* `need` bytes from the first hole that holds them, zeroed, or NULL. */
static char *kc_wheap_from_hole(size_t need)
{
    for (int h = 0; h < kc_n_holes; h++) {
        kc_wheap_hole *hole = &kc_holes[h];
        if (hole->size < need)
            continue;
        char *at = hole->at, *end = hole->at + hole->size;
        kc_wheap[hole->chunk].live++;
        hole->at += need;
        hole->size -= need;
        if (!hole->size) {
            memmove(hole, hole + 1, (size_t)(kc_n_holes - h - 1) * sizeof *hole);
            kc_n_holes--;
        }
        kc_wheap_zero(at, need, end);
        return at;
    }
    return NULL;
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
    char *header = kc_wheap_from_hole(need);
    if (!header) {
        int i = kc_wheap_room(need);
        if (i >= 0) {
            header = kc_wheap[i].base + kc_wheap[i].used; /* fresh pages: zero */
            kc_wheap[i].used += need;
            kc_wheap[i].live++;
        }
    }
    if (header)
        memcpy(header, &need, sizeof need);
    pthread_mutex_unlock(&kc_wheap_lock);
    return header ? header + KC_WHEAP_HEADER : NULL;
}

/* [p, p + bytes)'s whole huge pages given back: they read as zeros
 * after, and hold no memory until written. Only whole ones: giving back
 * part of a huge page splits it, and the arrays beside would lie on
 * small pages from then on; the edges stay resident until handed out
 * again or the chunk empties. */
static void kc_wheap_give_back(char *p, size_t bytes)
{
    uintptr_t lo, hi;
    kc_huge_inside(p, bytes, &lo, &hi);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* [at, at + size) of chunk c freed: a hole, merged with those beside it
 * in the chunk, or given back to the chunk's end (where the holes' array
 * cannot grow, the range stays out of use until the chunk empties). */
static void kc_wheap_hole_add(int c, char *at, size_t size)
{
    int h = 0;
    while (h < kc_n_holes && kc_holes[h].at < at)
        h++;
    if (h > 0 && kc_holes[h - 1].chunk == c && kc_holes[h - 1].at + kc_holes[h - 1].size == at) {
        h--; /* merged into the hole before */
        at = kc_holes[h].at;
        size += kc_holes[h].size;
        memmove(&kc_holes[h], &kc_holes[h + 1], (size_t)(kc_n_holes - h - 1) * sizeof *kc_holes);
        kc_n_holes--;
    }
    if (h < kc_n_holes && kc_holes[h].chunk == c && at + size == kc_holes[h].at) {
        size += kc_holes[h].size; /* and the one after */
        memmove(&kc_holes[h], &kc_holes[h + 1], (size_t)(kc_n_holes - h - 1) * sizeof *kc_holes);
        kc_n_holes--;
    }
    kc_wheap_give_back(at, size);
    kc_wheap_chunk *ch = &kc_wheap[c];
    if (at + size == ch->base + ch->used) { /* the chunk's end: bump from there again */
        ch->used = (size_t)(at - ch->base);
        return;
    }
    if (kc_grow((void **)&kc_holes, &kc_cap_holes, (size_t)kc_n_holes + 1, sizeof *kc_holes) !=
        KC_OK)
        return;
    memmove(&kc_holes[h + 1], &kc_holes[h], (size_t)(kc_n_holes - h) * sizeof *kc_holes);
    kc_holes[h] = (kc_wheap_hole){at, size, c};
    kc_n_holes++;
}

/* Chunk c, empty, unmapped; its holes and its slot (the last chunk's
 * from then on) go. */
static void kc_wheap_drop_chunk(int c)
{
    int kept = 0;
    for (int h = 0; h < kc_n_holes; h++)
        if (kc_holes[h].chunk != c)
            kc_holes[kept++] = kc_holes[h];
    kc_n_holes = kept;
    kc_huge_free(kc_wheap[c].base, kc_wheap[c].size);
    int last = --kc_wheap_n;
    kc_wheap[c] = kc_wheap[last];
    for (int h = 0; h < kc_n_holes; h++)
        if (kc_holes[h].chunk == last)
            kc_holes[h].chunk = c;
}

int kc_wheap_free(void *p)
{
    if (!p)
        return 0;
    char *header = (char *)p - KC_WHEAP_HEADER;
    pthread_mutex_lock(&kc_wheap_lock);
    int c = kc_wheap_chunk_of(p);
    if (c < 0) {
        pthread_mutex_unlock(&kc_wheap_lock);
        return 0;
    }
    if (--kc_wheap[c].live == 0)
        kc_wheap_drop_chunk(c);
    else {
        size_t need;
        memcpy(&need, header, sizeof need);
        kc_wheap_hole_add(c, header, need);
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
