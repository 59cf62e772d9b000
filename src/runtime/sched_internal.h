/* The scheduler's state, shared by sched.c (placement, residency, runs)
 * and sched_report.c (stats, trace, placement description). */
#ifndef KC_SCHED_INTERNAL_H
#define KC_SCHED_INTERNAL_H

#include "backend/backend.h"
#include "device/placement.h"
#include "runtime/residency.h"
#include "runtime/sched.h"

#define KC_SCHED_MAX_DEVICES 8
#define KC_SCHED_HOST (-1)
#define KC_UNTIMED (-2.0)

enum { KC_BLOCK_ARENA, KC_BLOCK_RESIDENT, KC_BLOCK_RING, KC_BLOCK_WORKSPACE, KC_SDEV_BLOCKS };

/* One managed device: its backend and the blocks inside its budget. */
typedef struct kc_sdev {
    kc_devspec spec;
    char label[96];                /* "/GPU:0" */
    char name[128];                /* "NVIDIA H200", "host CPU" */
    const kc_backend_iface *io;
    kc_backend *b;
    size_t budget;                 /* 0 = unlimited */
    double link_bps;               /* measured upload bandwidth */
    double flops_per_s;            /* nominal, for the cost model */
    char *block[KC_SDEV_BLOCKS];
    size_t block_bytes[KC_SDEV_BLOCKS];
    size_t allocated, peak;        /* bytes held from the backend */
    kc_res_plan res;
    int *stream_nodes;             /* node index per streamed sequence number */
    kc_backend_event *ev_base;     /* recorded at each run's start */
    double base_offset;            /* host seconds from run start to ev_base */
    void **pins;                   /* host ranges host_pin locked (sched_pin.c) */
    int n_pins;
    size_t pinned_bytes;           /* of the streamed weights, page-locked */
    size_t pinnable_bytes;         /* the streamed weights' bytes */
    size_t boundary_pinned;        /* host arena bytes of values it copies, locked */
    int link_pinned;               /* link_bps measured from pinned memory */
} kc_sdev;

typedef struct kc_snode {
    int dev;                       /* placed device, KC_SCHED_HOST for the host */
    int fallback;                  /* the device lacks the op: runs on the host */
    int ran_on;                    /* where the last run computed it */
    int item;                      /* has weights on its device (>= 0) */
    kc_wmode wmode;
    size_t w_offset, w_bytes;
    int seq;                       /* streamed: order on its device */
    void *state;                   /* the device backend's per-node state */
    kc_backend_event *ev_start, *ev_end, *ev_up_start, *ev_up_end;
    double t_start, t_end;         /* host-run nodes; for device nodes, the
                                      host's time enqueueing it (run()) */
    double start_s, compute_s;     /* last run, seconds from run start;
                                      compute_s KC_UNTIMED: ran, not timed */
    double up_at, up_s;            /* its upload (streamed), or -1 */
} kc_snode;

struct kc_sched {
    kc_session *s;
    kc_placement pl;
    kc_sdev dev[KC_SCHED_MAX_DEVICES];
    int n_dev;
    kc_snode *nodes;
    unsigned *where;               /* per root value: bit 0 host, bit d+1 device d */
    int variables_on_host;
    int strict, max_depth, n_fallback;
    int layer_times;               /* time each device layer with events */
    int warned[2];
    size_t device_memory;
    size_t host_memory;            /* disk tier: bytes of weights paged in ahead */
    int disk;                      /* the model's weights are file-backed */
    char *trace_path;
    char *stats;
    double run_t0, run_s;
    size_t boundary_bytes;         /* activation bytes copied between devices */
    /* sched_pin.c: per root value, 1 + the device that copied it to or
     * from the host in this plan's first run (0: none); after that run
     * their host pages are locked (boundary_pinned) */
    unsigned char *crossed;
    int boundary_done;
    /* sched_graph.c: the plan's run replayed as one captured graph. */
    void *graph;                   /* dev[0]'s captured run, or NULL */
    unsigned *graph_where;         /* `where` after the captured run */
    int graph_eager_runs;          /* eager runs of this plan, none blocked */
    int graph_blocked;             /* this run met a host layer or a mask */
    int graph_off;                 /* no graph for this plan */
    char graph_note[256];          /* for the stats: replayed, or why not */
};

const kc_layer *kc_sched_layer(const kc_sched *sc, int i);
/* sched.c, for sched_graph.c: make value v present on device `dev`
 * (KC_SCHED_HOST: the host), and run node i where it is placed. */
kc_status kc_sched_ensure(kc_sched *sc, int v, int dev);
kc_status kc_sched_run_one(kc_sched *sc, int i);

/* sched_graph.c: a run of nodes first..last on one GPU as a CUDA graph.
 * `*done` is set when the graph computed them (captured on the plan's
 * second run, replayed after); otherwise the caller runs them layer by
 * layer. */
kc_status kc_sched_graph_run(kc_sched *sc, int first, int last, int *done);
/* After a run layer by layer: whether it may be captured next time. */
void kc_sched_graph_eager_done(kc_sched *sc);
/* A new plan: the graph names the last plan's pointers and shapes.
 * Touches no device unless a graph exists (safe with no device). */
void kc_sched_graph_reset(kc_sched *sc);

/* sched_pin.c: page-lock device d's streamed weights for the plan (after
 * unlocking the last plan's), and unlock them. */
int kc_sched_pin_wanted(const kc_sched *sc, const kc_sdev *dv);
kc_status kc_sched_pin_streamed(kc_sched *sc, int d);
void kc_sched_unpin_device(kc_sched *sc, int d);
/* Once per plan, after its first run: lock the host arena pages of the
 * values that run copied between the host and a GPU. */
kc_status kc_sched_pin_boundary(kc_sched *sc);
kc_status kc_sched_build_stats(kc_sched *sc);
kc_status kc_sched_write_trace(const kc_sched *sc, const char *path);

#endif
