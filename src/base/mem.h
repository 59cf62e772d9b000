/* Checked allocation: every size computed from file contents goes through
 * these, so an absurd count fails with KC_ERR_LIMIT/NOMEM instead of
 * overflowing. */
#ifndef KC_MEM_H
#define KC_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "kerasc.h"

/* calloc(count, size) with overflow check; NULL on failure (sets error).
 * Small pages (buffers, states); packed weights take kc_calloc_weights,
 * the session's arena and the threads' workspaces base/huge.h's. */
void *kc_calloc(size_t count, size_t size);
/* kc_calloc on a cache line's start (64-byte aligned; from 2 MiB on as
 * kc_alloc_array's), zeroed; free() frees it. For what a kernel's loop
 * reads a vector at a time: calloc's 16-byte alignment made every 64-byte
 * load of such an array span two cache lines (kc_calloc_weights). */
void *kc_calloc_aligned(size_t count, size_t size);
/* kc_calloc for a kernel's packed weights (written whole at build, read
 * on every run for the session's life): from KC_WHEAP_MIN (1 MiB) to 2
 * MiB in the weights heap (base/huge.h: side by side in chunks of
 * transparent huge pages, 64-byte aligned, zeroed), from 2 MiB on 2 MiB
 * aligned and advised onto huge pages as kc_alloc_array's (its tail on
 * small pages, resident as touched). A model larger than the caches
 * streams them from memory on every run, a TLB miss per 4 KiB page.
 * Measured 12-05 on the 2-vCPU Zen 5, alternating pairs against small
 * pages, with arrays from 2 MiB on each on huge pages of its own:
 * ResNet50 batch 1 0.983 and 0.993 of the time (two sets of ten), batch
 * 8 0.987, InceptionV3 batch 1 0.990, batch 8 0.997, four images on one
 * thread 0.878 (three), MobileNetV2 0.993; peak RSS unchanged. (Earlier
 * sessions had measured InceptionV3 batch 8 10-30% slower with packed
 * kernels on huge pages; not reproduced.) From 12-07 the smaller arrays
 * too, in the heap's chunks, with the arena and the workspaces on huge
 * pages: huge.c has the measurements.
 * KC_HUGEPAGES=0: small pages. */
void *kc_calloc_weights(size_t count, size_t size);
/* Frees a kc_calloc_weights array: the weights heap's (its pages given
 * back, its chunk with its last array), or one of the heap's with its
 * huge-page advice taken back (kc_mem_free_pages). The only way to free
 * one: free() cannot take the weights heap's. */
void kc_free_weights(void *p);
/* count*size bytes, NOT zeroed, for a transient buffer the caller writes
 * whole before reading it (a zip member, a dataset on its way to the
 * snapshot). From 2 MiB on page-aligned (whole pages, which an owner may
 * drop), 2 MiB aligned and advised onto transparent huge pages: a fresh
 * 4 KiB page costs ~11 us at its first write in this project's VMs (a
 * paravirtualised MMU), 275 ms for 100 MB, 2 MiB ones 9-15 ms. What
 * kernels read at run time takes kc_calloc_weights or base/huge.h's
 * buffers. KC_HUGEPAGES=0: small pages only. NULL
 * on failure (sets error); free() frees it. */
void *kc_alloc_array(size_t count, size_t size);
/* realloc to count*size bytes with overflow check; NULL on failure, old
 * block untouched. */
void *kc_realloc_array(void *ptr, size_t count, size_t size);
char *kc_strdup(const char *s);
char *kc_strndup(const char *s, size_t n);
/* Grow *items (capacity *cap) to hold at least need elements. */
kc_status kc_grow(void **items, size_t *cap, size_t need, size_t elem_size);

/* free(p), p holding `bytes`, after giving the pages wholly inside it back
 * to the system. A weight array freed after its kernel packed a copy of
 * its own is otherwise a hole in the heap that stays resident while later,
 * larger copies (Winograd's transformed kernels) cannot reuse it: on the
 * nsfwjs InceptionV3 at batch 1 such holes added 23 MB of peak RSS. Only
 * the array's own pages: malloc_trim, which gives back every free page of
 * the heap, made MobileNetV2 5-8% slower at batch 8 (memory allocated
 * again after it comes back as small pages). */
void kc_mem_free_pages(void *p, size_t bytes);

/* a*b into *out; nonzero when it overflows. */
int kc_mul_overflows(int64_t a, int64_t b, int64_t *out);

/* With KC_MEM_TRACE set in the environment, print this process's resident
 * and peak resident memory (VmRSS, VmHWM) after `stage` to stderr: how the
 * memory budget of a load and a session is measured stage by stage. */
void kc_mem_trace(const char *stage);
/* 1 when KC_MEM_TRACE=nodes: a session then calls kc_mem_trace_node after
 * each node it runs (decided once, at its creation). */
int kc_mem_trace_nodes(void);
/* The same as kc_mem_trace after one node, printed only when the peak
 * rose: which layer sets a session's peak. */
void kc_mem_trace_node(const char *layer_name);

#endif
