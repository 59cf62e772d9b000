/* What every oneDNN kernel shares: the CPU engine and stream, and a
 * primitive bundled with its argument memories, created once per node and
 * shape so that a run only binds pointers (no allocation per run). */
#ifndef KC_DNNL_COMMON_H
#define KC_DNNL_COMMON_H

#include <oneapi/dnnl/dnnl.h>

#include "kernels/kernel.h"

#define KC_DNNL_MAX_ARGS 8

typedef struct kc_dnnl_prim {
    dnnl_primitive_t prim;
    int n;                                /* arguments bound by the caller */
    int arg[KC_DNNL_MAX_ARGS];
    dnnl_memory_t mem[KC_DNNL_MAX_ARGS];
    dnnl_memory_t scratch;                /* NULL when none is needed */
    size_t scratch_bytes;
    int solo;                             /* runs on the calling thread alone */
} kc_dnnl_prim;

/* Work below this many multiply-accumulates (or element visits) runs on
 * the calling thread alone: waking the OpenMP team and meeting at its
 * barrier costs tens of microseconds, more than a second thread saves on
 * a small layer (MobileNetV2's 7x7 blocks). */
#define KC_DNNL_SOLO_WORK ((int64_t)4 << 20)

/* Around a small primitive's creation and every execution: one OpenMP
 * thread (oneDNN sizes its partitioning when the primitive is created).
 * enter returns what leave restores; both do nothing unless solo. */
int kc_dnnl_solo_enter(int solo);
void kc_dnnl_solo_leave(int solo, int prev);

/* Per-thread buffers every primitive on the thread shares, each grown to
 * the largest request and then kept: the scratchpad, and the blocked
 * copies of a Winograd convolution's source and destination. */
enum { KC_DNNL_SLOT_SCRATCHPAD, KC_DNNL_SLOT_SRC, KC_DNNL_SLOT_DST, KC_DNNL_SLOTS };
void *kc_dnnl_workspace(int slot, size_t bytes);

/* 1 when oneDNN may be used (KC_DNNL is not 0 and the engine exists). */
int kc_dnnl_ready(void);
dnnl_engine_t kc_dnnl_engine(void);
/* A new attr with the scratchpad managed by kerasc (see dnnl_common.c). */
dnnl_primitive_attr_t kc_dnnl_attr_new(void);
/* Create p's primitive from pd and one memory per argument (args[i] with
 * descriptor mds[i]); kc_dnnl_run then binds the pointers. p->solo is set
 * by the caller after init (and the pd created inside solo_enter/leave). */
kc_status kc_dnnl_prim_init(kc_dnnl_prim *p, const_dnnl_primitive_desc_t pd, int n,
                            const int *args, const dnnl_memory_desc_t *const *mds);
/* Execute with ptrs[i] as argument i and wait. */
kc_status kc_dnnl_run(kc_dnnl_prim *p, void *const *ptrs);
void kc_dnnl_prim_destroy(kc_dnnl_prim *p);

#endif
