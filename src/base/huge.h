/* Memory on transparent huge pages for what the kernels touch at every
 * run: the session's arena, the threads' workspaces, and the weights
 * heap, where the kernels' packed weights lie side by side (huge.c). */
#ifndef KC_HUGE_H
#define KC_HUGE_H

#include <stddef.h>

/* A transparent huge page. */
#define KC_HUGE_PAGE_BYTES ((size_t)2 << 20)

/* Whether memory is advised onto huge pages at all (KC_HUGEPAGES=0: not;
 * read once, every buffer of a process alike). */
int kc_huge_pages_on(void);

/* Whether the arena, the workspaces and the weights heap take mappings
 * of their own (kc_huge_alloc): kc_huge_pages_on, and not in a build
 * with AddressSanitizer, which checks only the heap's blocks (an overrun
 * of a packed kernel or of the arena must still be caught there). */
int kc_huge_maps_on(void);

/* madvise(MADV_HUGEPAGE) on the huge pages wholly inside [p, p + bytes)
 * (where kc_huge_pages_on): pages around them stay small, so the hint
 * never makes memory resident that the buffer does not use. */
void kc_huge_advise(void *p, size_t bytes);

/* bytes mapped on their own, 2 MiB aligned, zeroed, the whole huge
 * pages inside them advised onto huge pages (where kc_huge_pages_on), the
 * rest of the last one on small pages (resident as touched, not whole);
 * NULL with the error set on failure. kc_huge_free with the same bytes
 * unmaps it (p NULL: nothing). */
void *kc_huge_alloc(size_t bytes);
void kc_huge_free(void *p, size_t bytes);

/* The weights heap: arrays of at least KC_WHEAP_MIN bytes laid side by
 * side, 64-byte aligned, in chunks of huge pages (kc_huge_alloc), so
 * that an array of any size is on huge pages without rounding each up to
 * one. From 1 MiB: ResNet50's 14x14 1x1 kernels (1 MiB each) are what
 * gains; from 64 KiB, InceptionV3's smaller arrays (its branch lanes pack
 * their kernels again) added 8 MB of peak RSS at batch 8, over its
 * budget, for no time (ResNet50 batch 1 1.000 against from 64 KiB).
 * Zeroed; NULL with the error set on failure. kc_wheap_free gives an
 * array's whole huge pages back at once and a chunk back whole once every
 * array in it is freed; it returns 0, doing nothing, for a pointer the
 * heap did not give. Thread-safe. */
#define KC_WHEAP_MIN ((size_t)1 << 20)
void *kc_wheap_alloc(size_t bytes);
int kc_wheap_free(void *p);

/* For tests: the chunks the weights heap holds now. */
int kc_wheap_chunks(void);

#endif
