/* The CPU backend behind the backend interface (backend.h).
 *
 * Its "device memory" is host memory, so under the residency manager it
 * stands in for a GPU: the scheduler gives it a budget, streams weights
 * into its buffers and prefetches them on a real second queue. Compute is
 * synchronous on the calling thread (the kernels are multi-threaded
 * themselves); the copy stream is a worker thread draining a FIFO of
 * copies, event records and event waits, so uploads genuinely overlap
 * compute. KC_CPU_DEVICE_GBPS=<GB/s> makes the copy stream pace itself to
 * that link bandwidth, to exercise overlap the way a PCIe link would.
 * KC_CPU_DEVICE_SETTLE=1 makes each compute wait, before it runs, until
 * the copy stream has settled: it is copying, blocked on an event the
 * compute has not reached, or out of work. The copy thread then no longer
 * races the compute for a core, so a trace shows what the scheduler
 * allows to overlap rather than what a loaded host let run (tests). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/clock.h"
#include "backend/backend.h"
#include "backend/cpu_exec.h"
#include "base/env.h"
#include "base/mem.h"

struct kc_backend_event {
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    uint64_t recorded;     /* records issued */
    uint64_t completed;    /* records reached by their stream */
    double when;           /* seconds (CLOCK_MONOTONIC) at the last completion */
};

typedef enum { KC_COPY_OP_COPY, KC_COPY_OP_RECORD, KC_COPY_OP_WAIT } kc_copy_op_kind;

typedef struct kc_copy_op {
    kc_copy_op_kind kind;
    void *dst;
    const void *src;
    size_t bytes;
    kc_backend_event *event;
    uint64_t target;       /* RECORD: the record number; WAIT: the one to wait for */
} kc_copy_op;

struct kc_backend {
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    kc_copy_op *queue;     /* ring */
    size_t cap, head, count;
    int busy, stop;
    double gbps;           /* pacing, 0 = as fast as memcpy */
    int settle;            /* KC_CPU_DEVICE_SETTLE: compute waits for the copy stream */
    int copying, blocked;  /* the copy thread is inside a copy / an unmet event wait */
    pthread_cond_t progress; /* broadcast when copying, blocked or count changes */
    struct kc_cpu_pin {      /* ranges host_pin locked (mlock) */
        void *ptr;
        size_t bytes;
    } *pins;
    int n_pins, cap_pins;
    struct kc_cpu_graph *capture; /* fake GPU: the graph being captured */
    int capture_broken;           /* a call that cannot be captured came */
};

static void kc_event_complete(kc_backend_event *e, uint64_t target)
{
    pthread_mutex_lock(&e->lock);
    if (target > e->completed)
        e->completed = target;
    e->when = kc_now();
    pthread_cond_broadcast(&e->done_cond);
    pthread_mutex_unlock(&e->lock);
}

static void kc_event_block(kc_backend_event *e, uint64_t target)
{
    pthread_mutex_lock(&e->lock);
    while (e->completed < target)
        pthread_cond_wait(&e->done_cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

static int kc_event_reached(kc_backend_event *e, uint64_t target)
{
    pthread_mutex_lock(&e->lock);
    int reached = e->completed >= target;
    pthread_mutex_unlock(&e->lock);
    return reached;
}

/* KC_CPU_DEVICE_SETTLE: hold the compute until the copy stream is copying,
 * waiting on the compute, or idle (never on a RECORD or a met WAIT, which
 * it passes without the compute's help). */
static void kc_copy_settle(kc_backend *b)
{
    pthread_mutex_lock(&b->lock);
    while (b->count && !b->copying && !b->blocked)
        pthread_cond_wait(&b->progress, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

/* A paced copy: memcpy in 1 MiB pieces, sleeping to hold `gbps`. */
static void kc_copy_paced(void *dst, const void *src, size_t bytes, double gbps)
{
    double start = kc_now();
    const size_t piece = (size_t)1 << 20;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        memcpy((char *)dst + off, (const char *)src + off, n);
        if (gbps > 0) {
            double due = start + (double)(off + n) / (gbps * 1e9), now = kc_now();
            if (due > now) {
                struct timespec ts = {(time_t)(due - now),
                                      (long)((due - now - (double)(time_t)(due - now)) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
    }
}

static void *kc_copy_worker(void *arg)
{
    kc_backend *b = arg;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        while (!b->count && !b->stop)
            pthread_cond_wait(&b->wake, &b->lock);
        if (!b->count && b->stop)
            break;
        kc_copy_op op = b->queue[b->head];
        b->busy = 1;
        b->copying = op.kind == KC_COPY_OP_COPY;
        b->blocked = op.kind == KC_COPY_OP_WAIT && !kc_event_reached(op.event, op.target);
        pthread_cond_broadcast(&b->progress);
        pthread_mutex_unlock(&b->lock);
        if (op.kind == KC_COPY_OP_COPY)
            kc_copy_paced(op.dst, op.src, op.bytes, b->gbps);
        else if (op.kind == KC_COPY_OP_RECORD)
            kc_event_complete(op.event, op.target);
        else
            kc_event_block(op.event, op.target);
        pthread_mutex_lock(&b->lock);
        b->head = (b->head + 1) % b->cap;
        b->count--;
        b->busy = b->copying = b->blocked = 0;
        pthread_cond_broadcast(&b->progress);
        if (!b->count)
            pthread_cond_broadcast(&b->idle);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

static kc_status kc_copy_push(kc_backend *b, kc_copy_op op)
{
    pthread_mutex_lock(&b->lock);
    if (b->count == b->cap) {
        /* Grow the ring in place (plan time: the scheduler sizes runs so
         * this happens while the queue is first filled, not per run). */
        size_t cap = b->cap * 2;
        kc_copy_op *q = kc_calloc(cap, sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&b->lock);
            return KC_ERR_NOMEM;
        }
        for (size_t i = 0; i < b->count; i++)
            q[i] = b->queue[(b->head + i) % b->cap];
        free(b->queue);
        b->queue = q;
        b->cap = cap;
        b->head = 0;
    }
    b->queue[(b->head + b->count) % b->cap] = op;
    b->count++;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
    return KC_OK;
}

static int kc_cpu_device_count(void) { return 1; }

static kc_status kc_cpu_open(int index, const kc_backend_host *host, kc_backend **out)
{
    (void)host;
    *out = NULL;
    if (index != 0)
        return kc_fail(KC_ERR_ARG, "/CPU:%d: this machine has one CPU device, /CPU:0", index);
    kc_backend *b = kc_calloc(1, sizeof *b);
    if (!b)
        return KC_ERR_NOMEM;
    b->cap = 1024;
    b->queue = kc_calloc(b->cap, sizeof *b->queue);
    const char *gbps = getenv("KC_CPU_DEVICE_GBPS");
    b->gbps = gbps ? strtod(gbps, NULL) : 0;
    if (b->gbps < 0 || b->gbps > 1e4)
        b->gbps = 0;
    b->settle = kc_env_on("KC_CPU_DEVICE_SETTLE");
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->wake, NULL);
    pthread_cond_init(&b->idle, NULL);
    pthread_cond_init(&b->progress, NULL);
    if (!b->queue || pthread_create(&b->worker, NULL, kc_copy_worker, b)) {
        free(b->queue);
        free(b);
        return kc_fail(KC_ERR_NOMEM, "/CPU:0: cannot start the copy stream");
    }
    *out = b;
    return KC_OK;
}

static void kc_cpu_graph_free(kc_backend *b, void *graph);

static void kc_cpu_close(kc_backend *b)
{
    if (!b)
        return;
    kc_cpu_graph_free(b, b->capture); /* a capture never ended */
    pthread_mutex_lock(&b->lock);
    b->stop = 1;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
    pthread_join(b->worker, NULL);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->wake);
    pthread_cond_destroy(&b->idle);
    pthread_cond_destroy(&b->progress);
    for (int i = 0; i < b->n_pins; i++)
        munlock(b->pins[i].ptr, b->pins[i].bytes);
    free(b->pins);
    free(b->queue);
    free(b);
}

/* Page-locking as a GPU backend does (mlock), so that the scheduler's
 * pinning of streamed weights runs on machines without a GPU. The copy
 * thread copies the same way from locked pages; a lock limit refuses it,
 * and those uploads are as before. Like cudaHostRegister, a range that
 * overlaps one already pinned is refused. */
static kc_status kc_cpu_host_pin(kc_backend *b, void *ptr, size_t bytes)
{
    if (!ptr || !bytes)
        return KC_ERR_ARG;
    for (int i = 0; i < b->n_pins; i++) {
        const char *lo = b->pins[i].ptr, *hi = lo + b->pins[i].bytes;
        if ((const char *)ptr < hi && (const char *)ptr + bytes > lo)
            return KC_ERR_UNSUPPORTED;
    }
    if (b->n_pins == b->cap_pins) {
        int cap = b->cap_pins ? 2 * b->cap_pins : 16;
        struct kc_cpu_pin *grown = realloc(b->pins, (size_t)cap * sizeof *grown);
        if (!grown)
            return KC_ERR_NOMEM;
        b->pins = grown;
        b->cap_pins = cap;
    }
    if (mlock(ptr, bytes) != 0)
        return KC_ERR_UNSUPPORTED;
    b->pins[b->n_pins++] = (struct kc_cpu_pin){ptr, bytes};
    return KC_OK;
}

static void kc_cpu_host_unpin(kc_backend *b, void *ptr)
{
    for (int i = 0; i < b->n_pins; i++)
        if (b->pins[i].ptr == ptr) {
            munlock(ptr, b->pins[i].bytes);
            b->pins[i] = b->pins[--b->n_pins];
            return;
        }
}

static kc_status kc_cpu_info(kc_backend *b, kc_backend_info *out)
{
    (void)b;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "host CPU");
    return KC_OK;
}

static int kc_cpu_supports(kc_backend *b, const kc_layer *layer, const kc_node *node)
{
    (void)b;
    (void)node;
    return kc_kernel_lookup(layer->def) != NULL;
}

static size_t kc_cpu_workspace(kc_backend *b, const kc_backend_call *call)
{
    (void)b;
    (void)call;
    return 0;
}

static kc_status kc_cpu_alloc(kc_backend *b, size_t bytes, void **ptr)
{
    (void)b;
    *ptr = NULL;
    if (posix_memalign(ptr, 64, bytes ? bytes : 64))
        return kc_fail(KC_ERR_NOMEM, "/CPU:0: cannot allocate %zu bytes", bytes);
    return KC_OK;
}

static void kc_cpu_free(kc_backend *b, void *ptr)
{
    (void)b;
    free(ptr);
}

/* While a fake GPU captures, calls a CUDA graph cannot hold fail as
 * cudaStreamBeginCapture's ThreadLocal mode makes them fail, and spoil
 * the capture. */
static kc_status kc_cpu_uncapturable(kc_backend *b, const char *what)
{
    b->capture_broken = 1;
    return kc_fail(KC_ERR_UNSUPPORTED, "cpu-as-gpu: %s cannot be captured into a graph", what);
}

static kc_status kc_cpu_upload_async(kc_backend *b, void *dst, const void *src, size_t bytes)
{
    if (b->capture)
        return kc_cpu_uncapturable(b, "an upload on the copy stream");
    return kc_copy_push(b, (kc_copy_op){KC_COPY_OP_COPY, dst, src, bytes, NULL, 0});
}

static kc_status kc_cpu_copy_sync(kc_backend *b, void *dst, const void *src, size_t bytes)
{
    if (b->capture)
        return kc_cpu_uncapturable(b, "a synchronous copy");
    memcpy(dst, src, bytes);
    return KC_OK;
}

static kc_status kc_cpu_event_new(kc_backend *b, kc_backend_event **out)
{
    (void)b;
    kc_backend_event *e = kc_calloc(1, sizeof *e);
    if (!e)
        return KC_ERR_NOMEM;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->done_cond, NULL);
    *out = e;
    return KC_OK;
}

static void kc_cpu_event_free(kc_backend *b, kc_backend_event *e)
{
    (void)b;
    if (!e)
        return;
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->done_cond);
    free(e);
}

static kc_status kc_cpu_capture_record(kc_backend *b, kc_backend_event *e);

static kc_status kc_cpu_record(kc_backend *b, kc_stream_id stream, kc_backend_event *e)
{
    if (b->capture)
        return stream == KC_STREAM_COMPUTE ? kc_cpu_capture_record(b, e)
                                           : kc_cpu_uncapturable(b, "a record on the copy stream");
    pthread_mutex_lock(&e->lock);
    uint64_t target = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    if (stream == KC_STREAM_COMPUTE) {
        kc_event_complete(e, target); /* compute is synchronous */
        return KC_OK;
    }
    return kc_copy_push(b, (kc_copy_op){KC_COPY_OP_RECORD, NULL, NULL, 0, e, target});
}

static kc_status kc_cpu_wait(kc_backend *b, kc_stream_id stream, kc_backend_event *e)
{
    if (b->capture)
        return kc_cpu_uncapturable(b, "an event wait");
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    pthread_mutex_unlock(&e->lock);
    if (stream == KC_STREAM_COMPUTE) {
        kc_event_block(e, target);
        return KC_OK;
    }
    return kc_copy_push(b, (kc_copy_op){KC_COPY_OP_WAIT, NULL, NULL, 0, e, target});
}

static kc_status kc_cpu_event_sync(kc_backend *b, kc_backend_event *e)
{
    return kc_cpu_wait(b, KC_STREAM_COMPUTE, e);
}

static double kc_cpu_elapsed(kc_backend *b, kc_backend_event *from, kc_backend_event *to)
{
    (void)b;
    pthread_mutex_lock(&from->lock);
    double t0 = from->when;
    pthread_mutex_unlock(&from->lock);
    pthread_mutex_lock(&to->lock);
    double t1 = to->when;
    pthread_mutex_unlock(&to->lock);
    return t0 > 0 && t1 > 0 ? t1 - t0 : -1;
}

/* The CPU backend's per-node state: the kernel and its own state. */
typedef struct kc_cpu_node {
    kc_kernel_fn fn;
    kc_kernel_state *kernel_state;
} kc_cpu_node;

static kc_status kc_cpu_capture_run(kc_backend *b, const kc_backend_call *call);

static kc_status kc_cpu_run(kc_backend *b, const kc_backend_call *call)
{
    if (b->capture)
        return kc_cpu_capture_run(b, call);
    kc_cpu_node *n = *call->state;
    if (!n) {
        n = kc_calloc(1, sizeof *n);
        if (!n)
            return KC_ERR_NOMEM;
        n->fn = kc_kernel_lookup(call->layer->def);
        *call->state = n;
        if (!n->fn)
            return kc_fail(KC_ERR_UNSUPPORTED, "no CPU kernel");
    }
    if (b->settle)
        kc_copy_settle(b);
    return kc_cpu_exec(n->fn, call, &n->kernel_state, 1); /* beside the copy thread */
}

static void kc_cpu_state_free(kc_backend *b, void *state)
{
    (void)b;
    kc_cpu_node *n = state;
    if (!n)
        return;
    if (n->kernel_state)
        n->kernel_state->free(n->kernel_state);
    free(n);
}

static kc_status kc_cpu_synchronize(kc_backend *b)
{
    if (b->capture)
        return kc_cpu_uncapturable(b, "a synchronize");
    pthread_mutex_lock(&b->lock);
    while (b->count)
        pthread_cond_wait(&b->idle, &b->lock);
    pthread_mutex_unlock(&b->lock);
    return KC_OK;
}

static const kc_backend_iface kc_cpu_iface = {
    .abi = KC_BACKEND_ABI,
    .name = "cpu",
    .type = KC_DEVICE_CPU,
    .device_count = kc_cpu_device_count,
    .open = kc_cpu_open,
    .close = kc_cpu_close,
    .info = kc_cpu_info,
    .supports = kc_cpu_supports,
    .workspace_bytes = kc_cpu_workspace,
    .alloc = kc_cpu_alloc,
    .free = kc_cpu_free,
    .upload_async = kc_cpu_upload_async,
    .upload = kc_cpu_copy_sync,
    .download = kc_cpu_copy_sync,
    .event_new = kc_cpu_event_new,
    .event_free = kc_cpu_event_free,
    .record = kc_cpu_record,
    .wait = kc_cpu_wait,
    .event_sync = kc_cpu_event_sync,
    .elapsed = kc_cpu_elapsed,
    .run = kc_cpu_run,
    .state_free = kc_cpu_state_free,
    .synchronize = kc_cpu_synchronize,
    .host_pin = kc_cpu_host_pin,
    .host_unpin = kc_cpu_host_unpin,
};

const kc_backend_iface *kc_backend_cpu_iface(void) { return &kc_cpu_iface; }

/* ------------------------------------------ fake GPU: graph capture */

/* A fake GPU captures as the CUDA plugin does (cuda_graph.c), so that the
 * scheduler's graph path (runtime/sched_graph.c) runs and is tested on
 * machines without a GPU: between capture_begin and capture_end, run()
 * and compute-stream records are kept, each call deep-copied, and
 * graph_launch replays them in order. KC_FAKE_GPU_CAPTURE=fail makes the
 * first captured run() fail, as a kernel that cannot be captured would. */
typedef struct kc_cpu_graph_op {
    kc_backend_event *event;      /* a record; NULL: a run of `call` */
    kc_backend_call call;         /* its arrays point into `arrays` */
    void *arrays;
} kc_cpu_graph_op;

typedef struct kc_cpu_graph {
    kc_cpu_graph_op *ops;
    int n, cap;
} kc_cpu_graph;

static void kc_cpu_graph_free(kc_backend *b, void *graph)
{
    (void)b;
    kc_cpu_graph *g = graph;
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        free(g->ops[i].arrays);
    free(g->ops);
    free(g);
}

static kc_cpu_graph_op *kc_cpu_graph_add(kc_backend *b)
{
    kc_cpu_graph *g = b->capture;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        kc_cpu_graph_op *grown = realloc(g->ops, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        g->ops = grown;
        g->cap = cap;
    }
    kc_cpu_graph_op *op = &g->ops[g->n++];
    memset(op, 0, sizeof *op);
    return op;
}

static kc_status kc_cpu_capture_record(kc_backend *b, kc_backend_event *e)
{
    kc_cpu_graph_op *op = kc_cpu_graph_add(b);
    if (!op) {
        b->capture_broken = 1;
        return KC_ERR_NOMEM;
    }
    op->event = e;
    return KC_OK;
}

/* Copy `n` items of `size` bytes to *cursor, advancing it. */
static void *kc_cpu_take(char **cursor, const void *src, size_t n, size_t size)
{
    void *dst = *cursor;
    if (n)
        memcpy(dst, src, n * size);
    *cursor += (n * size + 15) & ~(size_t)15;
    return dst;
}

static int kc_env_fail_capture(void)
{
    const char *v = getenv("KC_FAKE_GPU_CAPTURE");
    return v && !strcmp(v, "fail");
}

static kc_status kc_cpu_capture_run(kc_backend *b, const kc_backend_call *call)
{
    if (kc_env_fail_capture())
        return kc_cpu_uncapturable(b, "this layer (KC_FAKE_GPU_CAPTURE=fail)");
    size_t n_in = (size_t)call->n_in, n_out = (size_t)call->n_out;
    size_t n_w = call->w ? (size_t)call->n_w : 0;
    size_t bytes = n_in * (sizeof(float *) + sizeof(kc_shape)) +
                   n_out * (sizeof(float *) + sizeof(kc_shape)) + n_w * sizeof(float *) + 80;
    kc_cpu_graph_op *op = kc_cpu_graph_add(b);
    char *cursor = op ? malloc(bytes) : NULL;
    if (!cursor) {
        if (op)
            b->capture->n--;
        b->capture_broken = 1;
        return KC_ERR_NOMEM;
    }
    op->arrays = cursor;
    op->call = *call;
    op->call.in = kc_cpu_take(&cursor, call->in, n_in, sizeof *call->in);
    op->call.in_shape = kc_cpu_take(&cursor, call->in_shape, n_in, sizeof *call->in_shape);
    op->call.out = kc_cpu_take(&cursor, call->out, n_out, sizeof *call->out);
    op->call.out_shape = kc_cpu_take(&cursor, call->out_shape, n_out, sizeof *call->out_shape);
    if (n_w)
        op->call.w = kc_cpu_take(&cursor, call->w, n_w, sizeof *call->w);
    return KC_OK;
}

static kc_status kc_cpu_capture_begin(kc_backend *b)
{
    if (b->capture)
        return kc_fail(KC_ERR_ARG, "cpu-as-gpu: already capturing");
    b->capture = kc_calloc(1, sizeof *b->capture);
    b->capture_broken = 0;
    return b->capture ? KC_OK : KC_ERR_NOMEM;
}

static kc_status kc_cpu_capture_end(kc_backend *b, void **graph)
{
    *graph = NULL;
    kc_cpu_graph *g = b->capture;
    b->capture = NULL;
    if (!g)
        return kc_fail(KC_ERR_ARG, "cpu-as-gpu: not capturing");
    if (b->capture_broken) {
        kc_cpu_graph_free(b, g);
        return kc_fail(KC_ERR_UNSUPPORTED, "cpu-as-gpu: the capture was invalidated");
    }
    *graph = g;
    return KC_OK;
}

static kc_status kc_cpu_graph_launch(kc_backend *b, void *graph)
{
    const kc_cpu_graph *g = graph;
    for (int i = 0; i < g->n; i++) {
        const kc_cpu_graph_op *op = &g->ops[i];
        KC_TRY(op->event ? kc_cpu_record(b, KC_STREAM_COMPUTE, op->event)
                         : kc_cpu_run(b, &op->call));
    }
    return KC_OK;
}

/* KC_FAKE_GPUS=N: the CPU backend also poses as N GPUs, so multi-device
 * placement (host CPU + budgeted "GPUs", boundary copies, soft placement)
 * is testable on machines without one. */
static int kc_fake_gpu_count(void)
{
    const char *n = getenv("KC_FAKE_GPUS");
    int count = n ? atoi(n) : 0;
    return count > 0 && count <= 8 ? count : 0;
}

static kc_status kc_fake_gpu_open(int index, const kc_backend_host *host, kc_backend **out)
{
    if (index >= kc_fake_gpu_count())
        return kc_fail(KC_ERR_ARG, "/GPU:%d: KC_FAKE_GPUS provides %d", index,
                       kc_fake_gpu_count());
    return kc_cpu_open(0, host, out);
}

/* KC_FAKE_GPU_WORKSPACE=BYTES: every convolution on a fake GPU asks for
 * BYTES of device workspace, or the cap the host sets in the query
 * (call->workspace_size) when that is less, as the CUDA plugin does with
 * its choice of cuDNN algorithms. Nothing uses it: it tests the scheduler's
 * accounting (sched.c, kc_prepare_device). */
static size_t kc_fake_gpu_workspace(kc_backend *b, const kc_backend_call *call)
{
    (void)b;
    const char *v = getenv("KC_FAKE_GPU_WORKSPACE");
    size_t want = v ? (size_t)strtoull(v, NULL, 10) : 0;
    if (!want || !call->layer || !call->layer->class_name ||
        !strstr(call->layer->class_name, "Conv"))
        return 0;
    return call->workspace_size && call->workspace_size < want ? call->workspace_size : want;
}

static kc_status kc_fake_gpu_info(kc_backend *b, kc_backend_info *out)
{
    (void)b;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "host CPU standing in for a GPU (KC_FAKE_GPUS)");
    return KC_OK;
}

const kc_backend_iface *kc_backend_fake_gpu_iface(void)
{
    static kc_backend_iface iface;
    static int ready;
    if (!ready) { /* first use is single-threaded (session creation) */
        iface = kc_cpu_iface;
        iface.name = "cpu-as-gpu";
        iface.type = KC_DEVICE_GPU;
        iface.device_count = kc_fake_gpu_count;
        iface.open = kc_fake_gpu_open;
        iface.info = kc_fake_gpu_info;
        iface.workspace_bytes = kc_fake_gpu_workspace;
        iface.capture_begin = kc_cpu_capture_begin;
        iface.capture_end = kc_cpu_capture_end;
        iface.graph_launch = kc_cpu_graph_launch;
        iface.graph_free = kc_cpu_graph_free;
        ready = 1;
    }
    return kc_fake_gpu_count() ? &iface : NULL;
}
