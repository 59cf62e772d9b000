/* oneDNN plumbing shared by the conv and pool kernels.
 *
 * Scratchpads: by default oneDNN allocates a primitive's scratchpad on
 * every execution (and frees it after), which for the large convolutions
 * is an mmap/munmap plus page faults per layer per run. kerasc asks for
 * user-managed scratchpads and hands every primitive one buffer per
 * calling thread, grown to the largest need and then reused: nothing is
 * allocated per run once every layer has run once. */
#include "kernels/dnnl_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/huge.h"
#include "base/mem.h"
#include "base/pool.h"
#include "base/threads.h"

/* libgomp (see base/threads.c) */
int omp_get_max_threads(void);
void omp_set_num_threads(int n);

int kc_dnnl_solo_enter(int solo)
{
    if (!solo)
        return 0;
    int prev = omp_get_max_threads();
    if (prev > 1)
        omp_set_num_threads(1);
    return prev;
}

void kc_dnnl_solo_leave(int solo, int prev)
{
    if (solo && prev > 1)
        omp_set_num_threads(prev);
}

static dnnl_engine_t kc_engine;
static dnnl_stream_t kc_stream;
/* Streams for lanes 1.. (lane 0 is kc_stream); made on the building
 * thread before any parallel run, so never raced. */
static dnnl_stream_t kc_lane_stream[KC_DNNL_MAX_CUTS];
static pthread_mutex_t kc_lane_lock = PTHREAD_MUTEX_INITIALIZER;
static int kc_engine_ok;
static pthread_once_t kc_engine_once = PTHREAD_ONCE_INIT;

static void kc_engine_init(void)
{
    kc_engine_ok = dnnl_engine_create(&kc_engine, dnnl_cpu, 0) == dnnl_success &&
                   dnnl_stream_create(&kc_stream, kc_engine, dnnl_stream_default_flags) ==
                       dnnl_success;
}

int kc_dnnl_ready(void)
{
    if (!kc_dnnl_enabled())
        return 0;
    pthread_once(&kc_engine_once, kc_engine_init);
    return kc_engine_ok;
}

dnnl_engine_t kc_dnnl_engine(void) { return kc_engine; }

int kc_dnnl_avx512(void)
{
    /* the ISA values are bit sets: avx2_vnni (0x407) is above
     * avx512_core (0x27) without containing it */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), want = dnnl_cpu_isa_avx512_core;
    return (isa & want) == want;
}

dnnl_primitive_attr_t kc_dnnl_attr_new(void)
{
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return NULL;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) !=
        dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

/* A thread's buffers, freed when the thread exits: OpenMP pool threads
 * run cut layers' parts, and libgomp ends threads when a team shrinks (a
 * session with fewer threads than the last). */
typedef struct kc_dnnl_ws {
    void *buf[KC_DNNL_SLOTS];
    size_t cap[KC_DNNL_SLOTS];
    unsigned char huge[KC_DNNL_SLOTS]; /* buf is kc_huge_alloc's (cap bytes) */
} kc_dnnl_ws;

/* From this size on a workspace gets a mapping of its own, its whole
 * huge pages advised (where they are on, base/huge.h): the kernels write
 * and read it at every run (Winograd's transformed tiles, gathered
 * pixels). Below, it stays in the heap: rounded up to a huge page, each
 * slot of each thread came resident whole (MobileNetV2's peak RSS +10 MB
 * at batch 1). */
#define KC_WS_HUGE_FROM KC_HUGE_PAGE_BYTES

static void kc_ws_release(kc_dnnl_ws *ws, int slot)
{
    if (ws->huge[slot])
        kc_huge_free(ws->buf[slot], ws->cap[slot]);
    else
        free(ws->buf[slot]);
    ws->buf[slot] = NULL;
    ws->cap[slot] = 0;
    ws->huge[slot] = 0;
}

static pthread_key_t kc_ws_key;
static pthread_once_t kc_ws_once = PTHREAD_ONCE_INIT;
static int kc_ws_key_ok;

static void kc_ws_free(void *p)
{
    kc_dnnl_ws *ws = p;
    for (int i = 0; i < KC_DNNL_SLOTS; i++)
        kc_ws_release(ws, i);
    free(ws);
}

static void kc_ws_key_init(void) { kc_ws_key_ok = pthread_key_create(&kc_ws_key, kc_ws_free) == 0; }

void *kc_dnnl_workspace(int slot, size_t bytes)
{
    if (slot < 0 || slot >= KC_DNNL_SLOTS)
        return NULL;
    pthread_once(&kc_ws_once, kc_ws_key_init);
    if (!kc_ws_key_ok)
        return NULL;
    kc_dnnl_ws *ws = pthread_getspecific(kc_ws_key);
    if (!ws) {
        ws = calloc(1, sizeof *ws);
        if (!ws || pthread_setspecific(kc_ws_key, ws)) {
            free(ws);
            return NULL;
        }
    }
    if (bytes <= ws->cap[slot])
        return ws->buf[slot];
    void *p = NULL;
    int huge = bytes >= KC_WS_HUGE_FROM && kc_huge_maps_on();
    if (huge) {
        if (!(p = kc_huge_alloc(bytes)))
            return NULL;
    } else if (posix_memalign(&p, 64, bytes))
        return NULL;
    kc_ws_release(ws, slot);
    ws->buf[slot] = p;
    ws->cap[slot] = bytes;
    ws->huge[slot] = (unsigned char)huge;
    return p;
}

kc_status kc_dnnl_prim_init(kc_dnnl_prim *p, const_dnnl_primitive_desc_t pd, int n,
                            const int *args, const dnnl_memory_desc_t *const *mds)
{
    memset(p, 0, sizeof *p);
    if (n > KC_DNNL_MAX_ARGS)
        return kc_fail(KC_ERR_LIMIT, "too many oneDNN arguments");
    if (dnnl_primitive_create(&p->prim, pd) != dnnl_success)
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN could not create the primitive");
    p->n = n;
    for (int i = 0; i < n; i++) {
        p->arg[i] = args[i];
        if (dnnl_memory_create(&p->mem[i], mds[i], kc_engine, DNNL_MEMORY_NONE) !=
            dnnl_success)
            return kc_fail(KC_ERR_NOMEM, "oneDNN memory creation failed");
    }
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->scratch_bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (p->scratch_bytes &&
        dnnl_memory_create(&p->scratch, smd, kc_engine, DNNL_MEMORY_NONE) != dnnl_success)
        return kc_fail(KC_ERR_NOMEM, "oneDNN memory creation failed");
    return KC_OK;
}

int kc_dnnl_plan_cuts(int64_t batch, int64_t out_rows, int64_t act_bytes, int64_t weight_bytes,
                      kc_dnnl_cut *cuts)
{
    int threads = kc_threads_max();
    int64_t along = batch > 1 ? batch : out_rows;
    int n = threads < KC_DNNL_MAX_CUTS ? threads : KC_DNNL_MAX_CUTS;
    if (along < n)
        n = (int)along;
    if (kc_env_off("KC_CUT") || n < 2 || act_bytes < KC_DNNL_CUT_MIN_BYTES ||
        act_bytes < weight_bytes * (n - 1)) {
        cuts[0] = (kc_dnnl_cut){0, 0, batch};
        return 1;
    }
    for (int k = 0; k < n; k++)
        cuts[k] = (kc_dnnl_cut){batch == 1, along * k / n, along * (k + 1) / n};
    return n;
}

/* Floats in one step of spatial axis `axis` (the product of the later
 * dims, NHWC order: spatial axes then channels); axis 0 of -1: an image. */
static size_t kc_dnnl_step(const dnnl_dims_t d, int sp, int axis)
{
    size_t n = (size_t)d[1];
    for (int i = sp - 1; i >= axis; i--)
        n *= (size_t)d[2 + i];
    return n;
}

void kc_dnnl_window_cut(const kc_dnnl_window *whole, const kc_dnnl_cut *cut,
                        kc_dnnl_window *g, size_t *src_off, size_t *dst_off)
{
    *g = *whole;
    if (!cut->by_rows) {
        g->src[0] = g->dst[0] = cut->hi - cut->lo;
        *src_off = (size_t)cut->lo * kc_dnnl_step(whole->src, whole->sp, 0);
        *dst_off = (size_t)cut->lo * kc_dnnl_step(whole->dst, whole->sp, 0);
        return;
    }
    int64_t len = whole->src[2], s = whole->strides[0];
    int64_t first = cut->lo * s - whole->pad_l[0];
    int64_t last = first + (cut->hi - cut->lo - 1) * s + whole->extent0; /* one past */
    g->pad_l[0] = first < 0 ? -first : 0;
    g->pad_r[0] = last > len ? last - len : 0;
    int64_t r0 = first < 0 ? 0 : first, r1 = last > len ? len : last;
    g->src[2] = r1 - r0;
    g->dst[2] = cut->hi - cut->lo;
    *src_off = (size_t)r0 * kc_dnnl_step(whole->src, whole->sp, 1);
    *dst_off = (size_t)cut->lo * kc_dnnl_step(whole->dst, whole->sp, 1);
}

int kc_dnnl_small(int64_t work, int64_t weight_bytes)
{
    return work < KC_DNNL_SOLO_WORK && weight_bytes < KC_DNNL_TEAM_WEIGHT_BYTES;
}

kc_status kc_dnnl_build_cut(const kc_dnnl_window *whole, const kc_dnnl_cut *cuts, int n,
                            int small, kc_dnnl_part_build_fn build, void *arg)
{
    int solo = n > 1 || small;
    int prev = kc_dnnl_solo_enter(solo);
    kc_status s = KC_OK;
    for (int k = 0; k < n && s == KC_OK; k++) {
        kc_dnnl_window g = *whole;
        size_t src_off = 0, dst_off = 0;
        if (n > 1)
            kc_dnnl_window_cut(whole, &cuts[k], &g, &src_off, &dst_off);
        s = build(arg, k, &g, src_off, dst_off, n == 1 && solo);
    }
    kc_dnnl_solo_leave(solo, prev);
    if (s == KC_OK && n > 1)
        s = kc_dnnl_lanes(n);
    return s;
}

kc_status kc_dnnl_lanes(int n)
{
    kc_status s = KC_OK;
    pthread_mutex_lock(&kc_lane_lock);
    for (int i = 1; i < n && i < KC_DNNL_MAX_CUTS && s == KC_OK; i++)
        if (!kc_lane_stream[i] && dnnl_stream_create(&kc_lane_stream[i], kc_engine,
                                                     dnnl_stream_default_flags) != dnnl_success) {
            kc_lane_stream[i] = NULL;
            s = kc_fail(KC_ERR_UNSUPPORTED, "oneDNN could not create a stream");
        }
    pthread_mutex_unlock(&kc_lane_lock);
    return s;
}

char *kc_dnnl_lane_spare(void *spare, size_t bytes, int lane, size_t need)
{
    if (!spare || lane < 0)
        return NULL;
    uintptr_t at = (uintptr_t)spare, first = (at + 63) & ~(uintptr_t)63;
    size_t skip = first - at;
    if (skip > bytes || (size_t)(lane + 1) > (bytes - skip) / (need ? need : 1))
        return NULL;
    return (char *)first + (size_t)lane * need;
}

size_t kc_dnnl_pd_bytes(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

kc_status kc_dnnl_run(kc_dnnl_prim *p, void *const *ptrs) { return kc_dnnl_run_lane(p, ptrs, 0); }

kc_status kc_dnnl_run_lane(kc_dnnl_prim *p, void *const *ptrs, int lane)
{
    return kc_dnnl_run_in(p, ptrs, lane, NULL);
}

/* Batch lane bl's copies of p's memories (bl >= 1), made on its first
 * run: only lane bl's thread touches them. */
static kc_status kc_dnnl_lane_mems(kc_dnnl_prim *p, int bl, dnnl_memory_t **mem,
                                   dnnl_memory_t *scratch)
{
    if (bl >= KC_DNNL_MAX_BATCH_LANES)
        return kc_fail(KC_ERR_LIMIT, "batch lane %d past the last (%d)", bl,
                       KC_DNNL_MAX_BATCH_LANES - 1);
    dnnl_memory_t *m = p->lane_mem[bl - 1];
    for (int i = 0; i <= p->n; i++) {
        dnnl_memory_t from = i < p->n ? p->mem[i] : p->scratch;
        const dnnl_memory_desc_t *md = NULL;
        if (m[i] || !from)
            continue;
        if (dnnl_memory_get_memory_desc(from, &md) != dnnl_success ||
            dnnl_memory_create(&m[i], md, kc_engine, DNNL_MEMORY_NONE) != dnnl_success) {
            m[i] = NULL;
            return kc_fail(KC_ERR_NOMEM, "oneDNN memory creation failed");
        }
    }
    *mem = m;
    *scratch = m[p->n];
    return KC_OK;
}

kc_status kc_dnnl_run_in(kc_dnnl_prim *p, void *const *ptrs, int lane, void *scratch)
{
    int bl = kc_batch_lane() > 0 ? kc_batch_lane() : p->shared ? lane : 0;
    dnnl_memory_t *mem = p->mem, scratch_mem = p->scratch;
    if (bl > 0)
        KC_TRY(kc_dnnl_lane_mems(p, bl, &mem, &scratch_mem));
    dnnl_stream_t stream = lane > 0 ? kc_lane_stream[lane] : bl > 0 ? kc_lane_stream[bl] : kc_stream;
    dnnl_exec_arg_t args[KC_DNNL_MAX_ARGS + 1];
    for (int i = 0; i < p->n; i++) {
        if (dnnl_memory_set_data_handle(mem[i], ptrs[i]) != dnnl_success)
            return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN rejected a buffer");
        args[i] = (dnnl_exec_arg_t){p->arg[i], mem[i]};
    }
    int n = p->n;
    if (scratch_mem) {
        void *buf = scratch ? scratch
                            : kc_dnnl_workspace(KC_DNNL_SLOT_SCRATCHPAD, p->scratch_bytes);
        if (!buf)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a oneDNN scratchpad");
        if (dnnl_memory_set_data_handle(scratch_mem, buf) != dnnl_success)
            return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN rejected its scratchpad");
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch_mem};
    }
    int prev = kc_dnnl_solo_enter(p->solo);
    kc_pool_team_note(); /* oneDNN's OpenMP team may start (base/pool.c) */
    int bad = dnnl_primitive_execute(p->prim, stream, n, args) != dnnl_success ||
              dnnl_stream_wait(stream) != dnnl_success;
    kc_dnnl_solo_leave(p->solo, prev);
    if (bad)
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN primitive failed to execute");
    return KC_OK;
}

void kc_dnnl_prim_destroy(kc_dnnl_prim *p)
{
    for (int i = 0; i < p->n; i++)
        if (p->mem[i])
            dnnl_memory_destroy(p->mem[i]);
    if (p->scratch)
        dnnl_memory_destroy(p->scratch);
    for (int l = 0; l < KC_DNNL_MAX_BATCH_LANES - 1; l++)
        for (int i = 0; i <= KC_DNNL_MAX_ARGS; i++)
            if (p->lane_mem[l][i])
                dnnl_memory_destroy(p->lane_mem[l][i]);
    if (p->prim)
        dnnl_primitive_destroy(p->prim);
    memset(p, 0, sizeof *p);
}

/* The reorder's scratchpad of `need` bytes: in the spare range when it
 * fits, else a buffer of its own for the one call (what oneDNN would
 * allocate), or NULL when that fails. */
static void *kc_dnnl_pack_scratch(size_t need, void *spare, size_t spare_bytes, void **owned)
{
    *owned = NULL;
    void *in_spare = kc_dnnl_lane_spare(spare, spare_bytes, 0, kc_dnnl_align64(need));
    if (in_spare)
        return in_spare;
    if (posix_memalign(owned, 64, kc_dnnl_align64(need)))
        *owned = NULL;
    return *owned;
}

kc_status kc_dnnl_pack(const dnnl_memory_desc_t *w_md, const dnnl_memory_desc_t *to_md,
                       const float *w, void *spare, size_t spare_bytes, float **packed)
{
    size_t bytes = dnnl_memory_desc_get_size(to_md);
    /* On huge pages from 1 MiB on (from 2 MiB each on its own, below in
     * the weights heap: kc_calloc_weights, whose comment has the
     * measurements). An earlier one had InceptionV3 at batch 8 20-30%
     * slower so (24.7-25.3 against 28.0-34.7 ms an image); on 12-05 it was
     * level (0.997-0.999 in two sets of alternating pairs). */
    float *buf = kc_calloc_weights(bytes / sizeof(float) + 1, sizeof(float));
    if (!buf)
        return KC_ERR_NOMEM;
    *packed = buf;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t from = NULL, to = NULL, scratch_mem = NULL;
    void *scratch = NULL, *scratch_owned = NULL;
    size_t need = 0; /* the reorder's scratchpad bytes */
    kc_status status = KC_OK;
    dnnl_engine_t eng = kc_dnnl_engine();
    dnnl_stream_t stream = NULL;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    if (!attr || dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) ||
        dnnl_memory_create(&from, w_md, eng, (void *)w) ||
        dnnl_memory_create(&to, to_md, eng, buf) ||
        dnnl_reorder_primitive_desc_create(&rpd, w_md, eng, to_md, eng, attr) ||
        dnnl_primitive_create(&reorder, rpd)) {
        status = kc_fail(KC_ERR_UNSUPPORTED, "oneDNN cannot reorder the weights");
    } else if ((need = kc_dnnl_pd_bytes(rpd, dnnl_query_scratchpad_md)) &&
               (!(scratch = kc_dnnl_pack_scratch(need, spare, spare_bytes, &scratch_owned)) ||
                dnnl_memory_create(&scratch_mem,
                                   dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0),
                                   eng, scratch))) {
        status = scratch ? kc_fail(KC_ERR_UNSUPPORTED, "oneDNN cannot reorder the weights")
                         : KC_ERR_NOMEM;
    } else {
        dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, scratch_mem}};
        kc_pool_team_note();
        if (dnnl_primitive_execute(reorder, stream, scratch_mem ? 3 : 2, args) ||
            dnnl_stream_wait(stream))
            status = kc_fail(KC_ERR_UNSUPPORTED, "oneDNN weight reorder failed");
    }
    if (reorder)
        dnnl_primitive_destroy(reorder);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (from)
        dnnl_memory_destroy(from);
    if (to)
        dnnl_memory_destroy(to);
    if (scratch_mem)
        dnnl_memory_destroy(scratch_mem);
    free(scratch_owned);
    if (stream)
        dnnl_stream_destroy(stream);
    return status;
}
