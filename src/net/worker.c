/* The worker loop (see worker.h). Single-threaded around one zmq_poll: the
 * ROUTER socket (clients and upstream peers) and one DEALER per next-stage
 * peer. A stage's outputs go to the next worker under a worker-local id;
 * its answer comes back on that DEALER and is relayed to whoever asked. */
#include "net/worker.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "base/clock.h"
#include "base/mem.h"
#include "base/procfs.h"
#include "backend/registry.h"
#include "device/devspec.h"
#include "model/model_internal.h"
#include "net/digest.h"
#include "net/msg.h"
#include "net/planner.h"
#include "net/receive.h"
#include "runtime/stage.h"

#define KC_W_MAX_STAGES 16
#define KC_W_MAX_PENDING 1024
#define KC_W_MAX_MESSAGE ((size_t)4 << 30)
/* A peer quiet this long counts as gone when a new one needs its entry
 * (its request-id window starts over should it come back). */
#define KC_W_PEER_IDLE_S 2.0

typedef struct kc_w_stage {
    int loaded;
    char sha[KC_SHA256_HEX];
    kc_model *model;
    kc_session *session;
    kc_stage_plan plan;
    kc_wire_expect expect[KC_WIRE_MAX_TENSORS];
    int64_t batch_max;
    int deadline_ms;            /* for the next stage's answer */
    void *next;                 /* DEALER to the next stage's worker, or NULL */
    void *next_mon;             /* its connection's monitor */
    char *spec;                 /* the LOAD_STAGE text it was built from */
    char next_name[96];         /* "/job:worker/task:1" */
} kc_w_stage;

typedef struct kc_w_pending {
    uint64_t fwd_id;            /* our id towards the next worker */
    uint64_t client_id;         /* the asker's id */
    unsigned char identity[256];
    size_t identity_len;
    double deadline;
    int stage;
    double compute_ms;          /* this worker's part, reported back */
} kc_w_pending;

typedef struct kc_w_peer {
    unsigned char identity[256];
    size_t identity_len;
    kc_wire_replay replay;
    double last_seen;           /* kc_now() of its latest message */
} kc_w_peer;

typedef struct kc_worker {
    const kc_worker_options *o;
    double gflops;              /* measured at start: the planner's cost model */
    kc_net *net;
    void *router;
    kc_w_stage stages[KC_W_MAX_STAGES];
    kc_w_pending pending[KC_W_MAX_PENDING];
    int n_pending;
    kc_w_peer *peers;
    int n_peers;
    kc_receiver recv;           /* models streamed by clients */
    uint64_t next_fwd_id;
    uint64_t served, errors, rejected;
    char name[96];              /* "/job:worker/task:1", in messages to clients */
    char log_name[128];         /* with " replica 1" where the task has several */
} kc_worker;

static volatile sig_atomic_t kc_stop;
static void kc_on_signal(int sig)
{
    (void)sig;
    kc_stop = 1;
}

static void kc_log(const kc_worker *w, const char *fmt, ...) KC_PRINTF(2, 3);
static void kc_log(const kc_worker *w, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* Wall-clock time and the replica: the lines of several workers (and
     * replicas of one task) end up in one log, and a stall shows as a gap. */
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    localtime_r(&now.tv_sec, &tm);
    fprintf(stderr, "kerasc serve %s %02d:%02d:%02d.%03ld: %s\n", w->log_name, tm.tm_hour,
            tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000, line);
}

static void kc_reply_error_flags(kc_worker *w, const kc_net_rx *rx, uint64_t id, int stage,
                                 const char *why, uint32_t flags)
{
    char text[900];
    snprintf(text, sizeof text, "%s: %s", w->name, why);
    /* The wire takes one line of UTF-8: file names in messages may be
     * neither, so anything outside printable ASCII becomes '?'. */
    for (char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    kc_wire_msg msg;
    kc_msg_text(&msg, KC_WIRE_ERROR, id ? id : 1, (uint32_t)stage, text);
    msg.flags = flags;
    kc_net_send(w->router, rx->identity, rx->identity_len, &msg);
    /* "stream me the model" is a step of loading, not a failure */
    if (!(flags & KC_WIRE_FLAG_NEED_MODEL))
        w->errors++;
}

static void kc_reply_error(kc_worker *w, const kc_net_rx *rx, uint64_t id, int stage,
                           const char *why)
{
    kc_reply_error_flags(w, rx, id, stage, why, 0);
}

/* ------------------------------------------------------------ peers */

static int kc_same_identity(const unsigned char *a, size_t a_len, const unsigned char *b,
                            size_t b_len)
{
    return a_len == b_len && !memcmp(a, b, a_len);
}

/* How many peers a worker keeps at once (--max-clients). */
static int kc_max_peers(const kc_worker_options *o)
{
    return o->max_clients > 0 ? o->max_clients : 64;
}

static int kc_peer_pending(const kc_worker *w, const kc_w_peer *p)
{
    for (int i = 0; i < w->n_pending; i++)
        if (kc_same_identity(w->pending[i].identity, w->pending[i].identity_len, p->identity,
                             p->identity_len))
            return 1;
    return 0;
}

/* The slot of the peer seen least recently, if it has been quiet for
 * KC_W_PEER_IDLE_S and nothing of it is in flight; NULL otherwise. */
static kc_w_peer *kc_peer_idle(kc_worker *w, double now)
{
    kc_w_peer *oldest = NULL;
    for (int i = 0; i < w->n_peers; i++) {
        kc_w_peer *p = &w->peers[i];
        if (now - p->last_seen >= KC_W_PEER_IDLE_S && !kc_peer_pending(w, p) &&
            (!oldest || p->last_seen < oldest->last_seen))
            oldest = p;
    }
    return oldest;
}

/* The sender's entry. Every connection is a new ROUTER identity (each
 * client run, each upstream worker's link after a reload), so entries of
 * peers gone quiet are reused: a long-lived worker keeps taking new
 * clients, and --max-clients caps only the peers active at once. */
static kc_w_peer *kc_peer(kc_worker *w, const kc_net_rx *rx)
{
    double now = kc_now();
    for (int i = 0; i < w->n_peers; i++)
        if (kc_same_identity(w->peers[i].identity, w->peers[i].identity_len, rx->identity,
                             rx->identity_len)) {
            w->peers[i].last_seen = now;
            return &w->peers[i];
        }
    kc_w_peer *p = w->n_peers < kc_max_peers(w->o) ? &w->peers[w->n_peers++]
                                                  : kc_peer_idle(w, now);
    if (!p)
        return NULL;
    memset(p, 0, sizeof *p);
    memcpy(p->identity, rx->identity, rx->identity_len);
    p->identity_len = rx->identity_len;
    p->last_seen = now;
    return p;
}

/* ------------------------------------------------------------ stages */

static void kc_stage_release(kc_w_stage *st)
{
    kc_session_free(st->session);
    kc_model_free(st->model);
    kc_stage_plan_free(&st->plan);
    kc_net_unwatch(st->next, st->next_mon);
    kc_net_close(st->next);
    free(st->spec);
    memset(st, 0, sizeof *st);
}

/* The model file named `name` whose SHA-256 is `sha`: the copy in
 * --model-dir, else one a client streamed earlier. *missing is set when
 * there is none, so the client knows to stream it. */
static kc_status kc_locate_model(const kc_worker *w, const char *name, const char *sha,
                                 char *path, size_t size, int *missing)
{
    *missing = 0;
    if (!kc_receive_name_valid(name))
        return kc_fail(KC_ERR_ARG, "model name '%s' is not a plain file name", name);
    char hex[KC_SHA256_HEX] = "";
    if (w->o->model_dir && snprintf(path, size, "%s/%s", w->o->model_dir, name) < (int)size &&
        access(path, R_OK) == 0) {
        KC_TRY(kc_sha256_file_cached(path, hex));
        if (!strcmp(hex, sha))
            return KC_OK;
    }
    if (kc_receiver_find(&w->recv, sha, name, path, size) == KC_OK) {
        char got[KC_SHA256_HEX];
        KC_TRY(kc_sha256_file_cached(path, got));
        if (!strcmp(got, sha))
            return KC_OK;
    }
    *missing = w->recv.max_bytes > 0;
    if (hex[0])
        return kc_fail(KC_ERR_REFUSED, "%s/%s has SHA-256 %.12s..., the client's model %.12s...: "
                       "not the same file%s", w->o->model_dir, name, hex, sha,
                       *missing ? "; stream it" : "");
    return kc_fail(KC_ERR_REFUSED, "no copy of %s (SHA-256 %.12s...) here%s", name, sha,
                   *missing ? "; stream it" : " and --max-model-mb 0 refuses streamed models");
}

static kc_status kc_stage_session(kc_worker *w, kc_w_stage *st, const char *device)
{
    kc_session_options so = {.threads = w->o->threads, .device = device};
    KC_TRY(kc_session_new(st->model, &so, &st->session));
    KC_TRY(kc_session_set_stage(st->session, &st->plan));
    for (int i = 0; i < st->plan.n_inputs && i < KC_WIRE_MAX_TENSORS; i++) {
        st->expect[i].dtype = KC_F32;
        st->expect[i].shape = st->model->graph->values[st->plan.inputs[i]].shape;
        st->expect[i].shape.dims[0] = -1;
    }
    return KC_OK;
}

static kc_status kc_stage_next(kc_worker *w, kc_w_stage *st, const cJSON *next)
{
    const cJSON *addr = cJSON_GetObjectItemCaseSensitive(next, "address");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(next, "name");
    if (!cJSON_IsString(addr) || !cJSON_IsString(name))
        return kc_fail(KC_ERR_FORMAT, "stage spec: 'next' needs an address and a name");
    kc_cluster_addr a;
    KC_TRY(kc_cluster_parse_addr(addr->valuestring, &a));
    snprintf(st->next_name, sizeof st->next_name, "%s", name->valuestring);
    KC_TRY(kc_net_connect(w->net, &a, &st->next));
    return kc_net_watch(w->net, st->next, &st->next_mon);
}

/* LOAD_STAGE: {"stage":k,"model":"file","sha256":"hex","first":i,"last":j,
 *              "batch_max":B,"device":"/GPU:0","next":{...}|null} */
static kc_status kc_load_stage(kc_worker *w, const char *text, size_t len, int *stage_out,
                               int *missing)
{
    *missing = 0;
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j)
        return kc_fail(KC_ERR_FORMAT, "stage spec is not JSON");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "stage");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha256");
    const cJSON *first = cJSON_GetObjectItemCaseSensitive(j, "first");
    const cJSON *last = cJSON_GetObjectItemCaseSensitive(j, "last");
    const cJSON *bmax = cJSON_GetObjectItemCaseSensitive(j, "batch_max");
    const cJSON *device = cJSON_GetObjectItemCaseSensitive(j, "device");
    const cJSON *next = cJSON_GetObjectItemCaseSensitive(j, "next");
    const cJSON *deadline = cJSON_GetObjectItemCaseSensitive(j, "deadline_ms");
    kc_status s = KC_OK;
    if (!cJSON_IsNumber(k) || k->valueint < 0 || k->valueint >= KC_W_MAX_STAGES ||
        !cJSON_IsString(model) || !cJSON_IsString(sha) || !kc_sha256_hex_valid(sha->valuestring) ||
        !cJSON_IsNumber(first) || !cJSON_IsNumber(last) || !cJSON_IsNumber(bmax) ||
        bmax->valuedouble < 1 || bmax->valuedouble > 1e6)
        s = kc_fail(KC_ERR_FORMAT, "stage spec: missing or invalid fields");
    kc_w_stage *st = s == KC_OK ? &w->stages[k->valueint] : NULL;
    char path[4096];
    if (s == KC_OK)
        s = kc_locate_model(w, model->valuestring, sha->valuestring, path, sizeof path, missing);
    /* The same spec again (a client's next run) on the same file: keep the
     * warm session. */
    if (s == KC_OK && st->loaded && st->spec && strlen(st->spec) == len &&
        !memcmp(st->spec, text, len)) {
        *stage_out = k->valueint;
        cJSON_Delete(j);
        return KC_OK;
    }
    if (st)
        kc_stage_release(st);
    if (s == KC_OK)
        s = kc_model_load(path, NULL, &st->model);
    if (s == KC_OK)
        s = kc_stage_plan_build(st->model, first->valueint, last->valueint, &st->plan);
    if (s == KC_OK && st->plan.n_inputs > KC_WIRE_MAX_TENSORS)
        s = kc_fail(KC_ERR_LIMIT, "stage has more than %d inputs", KC_WIRE_MAX_TENSORS);
    if (s == KC_OK)
        s = kc_stage_session(w, st, cJSON_IsString(device) ? device->valuestring : NULL);
    if (s == KC_OK && cJSON_IsObject(next))
        s = kc_stage_next(w, st, next);
    if (s == KC_OK) {
        snprintf(st->sha, sizeof st->sha, "%s", sha->valuestring);
        st->batch_max = (int64_t)bmax->valuedouble;
        st->deadline_ms = cJSON_IsNumber(deadline) && deadline->valuedouble >= 10 &&
                                  deadline->valuedouble <= 36e6
                              ? (int)deadline->valuedouble
                              : (w->o->deadline_ms > 0 ? w->o->deadline_ms : 30000);
        st->spec = kc_strndup(text, len);
        st->loaded = 1;
        *stage_out = k->valueint;
    } else if (st) {
        kc_stage_release(st);
    }
    cJSON_Delete(j);
    return s;
}

/* ------------------------------------------------------------- requests */

static void kc_handle_load(kc_worker *w, const kc_net_rx *rx, const kc_wire_msg *m)
{
    int stage = -1, missing = 0;
    double t0 = kc_now();
    if (kc_load_stage(w, m->text, m->text_len, &stage, &missing) != KC_OK) {
        kc_log(w, "load stage %u refused: %s", m->stage, kc_last_error());
        kc_reply_error_flags(w, rx, m->request_id, (int)m->stage, kc_last_error(),
                             missing ? KC_WIRE_FLAG_NEED_MODEL : 0);
        return;
    }
    const kc_w_stage *st = &w->stages[stage];
    char text[256];
    snprintf(text, sizeof text, "{\"ok\":true,\"stage\":%d,\"inputs\":%d,\"outputs\":%d}", stage,
             st->plan.n_inputs, st->plan.n_outputs);
    kc_wire_msg reply;
    kc_msg_text(&reply, KC_WIRE_LOAD_REPLY, m->request_id, (uint32_t)stage, text);
    kc_net_send(w->router, rx->identity, rx->identity_len, &reply);
    kc_log(w, "loaded stage %d: nodes %d..%d of %s%s%s, %.1f ms", stage, st->plan.first,
           st->plan.last, st->sha, st->next ? ", then " : "", st->next ? st->next_name : "",
           (kc_now() - t0) * 1e3);
}

static kc_status kc_forward(kc_worker *w, kc_w_stage *st, const kc_net_rx *rx,
                            const kc_wire_msg *m, kc_tensor **out, double compute_ms)
{
    if (w->n_pending == KC_W_MAX_PENDING)
        return kc_fail(KC_ERR_LIMIT, "too many requests in flight");
    kc_wire_msg fwd;
    kc_msg_tensors(&fwd, KC_WIRE_RUN, ++w->next_fwd_id, m->stage + 1, out, st->plan.n_outputs);
    KC_TRY(kc_net_send(st->next, NULL, 0, &fwd));
    kc_w_pending *p = &w->pending[w->n_pending++];
    p->fwd_id = w->next_fwd_id;
    p->client_id = m->request_id;
    memcpy(p->identity, rx->identity, rx->identity_len);
    p->identity_len = rx->identity_len;
    p->deadline = kc_now() + st->deadline_ms / 1000.0;
    p->stage = (int)m->stage;
    p->compute_ms = compute_ms;
    return KC_OK;
}

static void kc_handle_run(kc_worker *w, const kc_net_rx *rx, const kc_wire_msg *m)
{
    double t0 = kc_now();
    if (m->stage >= KC_W_MAX_STAGES || !w->stages[m->stage].loaded) {
        w->rejected++;
        kc_reply_error(w, rx, m->request_id, (int)m->stage, "stage not loaded here");
        return;
    }
    kc_w_stage *st = &w->stages[m->stage];
    if (m->n_tensors != st->plan.n_inputs ||
        kc_wire_check(m, st->expect, st->plan.n_inputs, st->batch_max) != KC_OK) {
        w->rejected++;
        kc_reply_error(w, rx, m->request_id, (int)m->stage,
                       m->n_tensors != st->plan.n_inputs ? "wrong number of tensors"
                                                         : kc_last_error());
        return;
    }
    /* The request's tensors are read where they arrived and the stage's
     * outputs sent from the session's memory: no copies of our own. */
    kc_tensor in_views[KC_WIRE_MAX_TENSORS], out_views[KC_WIRE_MAX_TENSORS];
    const kc_tensor *in[KC_WIRE_MAX_TENSORS];
    kc_tensor *out[KC_WIRE_MAX_TENSORS];
    for (int i = 0; i < m->n_tensors; i++) {
        in_views[i] = (kc_tensor){.dtype = m->tensors[i].dtype, .shape = m->tensors[i].shape,
                                  .data = (void *)m->tensors[i].data, .owns_data = 0};
        in[i] = &in_views[i];
    }
    for (int i = 0; i < KC_WIRE_MAX_TENSORS; i++)
        out[i] = &out_views[i];
    double c0 = kc_now();
    kc_status s = kc_session_run_stage_views(st->session, m->tensors[0].shape.dims[0], in,
                                             out_views);
    double compute_ms = (kc_now() - c0) * 1e3;
    if (s == KC_OK && st->next)
        s = kc_forward(w, st, rx, m, out, compute_ms);
    else if (s == KC_OK) {
        /* The result carries each stage's compute time (ms), in order. */
        char times[64];
        snprintf(times, sizeof times, "[%.3f]", compute_ms);
        kc_wire_msg res;
        kc_msg_tensors(&res, KC_WIRE_RESULT, m->request_id, m->stage, out, st->plan.n_outputs);
        res.text = times;
        res.text_len = strlen(times);
        s = kc_net_send(w->router, rx->identity, rx->identity_len, &res);
    }
    if (s != KC_OK)
        kc_reply_error(w, rx, m->request_id, (int)m->stage, kc_last_error());
    else
        w->served++;
    kc_log(w, "request %llu stage %u: %s, %.1f ms", (unsigned long long)m->request_id, m->stage,
           s == KC_OK ? (st->next ? "forwarded" : "answered") : "error", (kc_now() - t0) * 1e3);
}

/* PUT_MODEL: one piece of a model file a client streams here. */
static void kc_handle_put(kc_worker *w, const kc_net_rx *rx, const kc_wire_msg *m)
{
    uint64_t offset = 0;
    int complete = 0;
    if (kc_receiver_put(&w->recv, m, &offset, &complete) != KC_OK) {
        w->rejected++;
        kc_log(w, "model piece refused: %s", kc_last_error());
        kc_reply_error(w, rx, m->request_id, 0, kc_last_error());
        return;
    }
    if (complete)
        kc_log(w, "received %s (%llu bytes, SHA-256 %.12s... verified)", w->recv.name,
               (unsigned long long)offset, w->recv.sha);
    char text[128];
    snprintf(text, sizeof text, "{\"ok\":true,\"offset\":%llu,\"complete\":%s}",
             (unsigned long long)offset, complete ? "true" : "false");
    kc_wire_msg reply;
    kc_msg_text(&reply, KC_WIRE_PUT_REPLY, m->request_id, 0, text);
    kc_net_send(w->router, rx->identity, rx->identity_len, &reply);
}

static long kc_free_memory_mb(void)
{
    long kb = kc_proc_value("/proc/meminfo", "MemAvailable: %ld kB");
    return kb < 0 ? -1 : kb / 1024;
}

/* "\"/CPU:0\",\"/GPU:0\",..." for the devices this machine has. */
static void kc_device_list(char *buf, size_t size)
{
    int n = snprintf(buf, size, "\"/CPU:0\"");
    const kc_backend_iface *gpu = kc_backend_find(KC_DEVICE_GPU, NULL, 0);
    int count = gpu ? gpu->device_count() : 0;
    for (int i = 0; i < count && n > 0 && (size_t)n < size - 16; i++)
        n += snprintf(buf + n, size - (size_t)n, ",\"/GPU:%d\"", i);
}

static void kc_handle_status(kc_worker *w, const kc_net_rx *rx, const kc_wire_msg *m)
{
    char stages[512] = "";
    size_t used = 0;
    for (int k = 0; k < KC_W_MAX_STAGES; k++)
        if (w->stages[k].loaded && used < sizeof stages - 32)
            used += (size_t)snprintf(stages + used, sizeof stages - used, "%s%d",
                                     used ? "," : "", k);
    char text[2048], devices[256];
    kc_device_list(devices, sizeof devices);
    snprintf(text, sizeof text,
             "{\"task\":\"%s\",\"devices\":[%s],\"free_memory_mb\":%ld,"
             "\"gflops\":%.1f,\"stages\":[%s],\"served\":%llu,\"errors\":%llu,"
             "\"rejected\":%llu,\"refused_connections\":%llu,\"received_models\":%d}",
             w->name, devices, kc_free_memory_mb(), w->gflops, stages, (unsigned long long)w->served,
             (unsigned long long)w->errors, (unsigned long long)w->rejected,
             (unsigned long long)kc_net_refused(w->net), kc_receiver_count(&w->recv));
    kc_wire_msg reply;
    kc_msg_text(&reply, KC_WIRE_STATUS_REPLY, m->request_id, 0, text);
    kc_net_send(w->router, rx->identity, rx->identity_len, &reply);
}

static void kc_handle_router(kc_worker *w, kc_net_rx *rx)
{
    kc_wire_msg m;
    if (kc_wire_decode(rx->buf, rx->len, KC_W_MAX_MESSAGE, &m) != KC_OK) {
        w->rejected++;
        kc_log(w, "rejected a malformed message: %s", kc_last_error());
        kc_reply_error(w, rx, 1, 0, kc_last_error());
        return;
    }
    kc_w_peer *peer = kc_peer(w, rx);
    if (!peer) {
        w->rejected++;
        kc_reply_error(w, rx, m.request_id, 0, "too many clients active at once (--max-clients)");
        return;
    }
    if (!kc_wire_replay_accept(&peer->replay, m.request_id)) {
        w->rejected++;
        kc_log(w, "rejected a replayed request id %llu", (unsigned long long)m.request_id);
        kc_reply_error(w, rx, m.request_id, 0, "replayed or out-of-order request id");
        return;
    }
    switch (m.type) {
    case KC_WIRE_LOAD_STAGE: kc_handle_load(w, rx, &m); break;
    case KC_WIRE_RUN: kc_handle_run(w, rx, &m); break;
    case KC_WIRE_STATUS: kc_handle_status(w, rx, &m); break;
    case KC_WIRE_PUT_MODEL: kc_handle_put(w, rx, &m); break;
    case KC_WIRE_PING: {
        kc_wire_msg pong;
        kc_msg_text(&pong, KC_WIRE_PONG, m.request_id, 0, NULL);
        kc_net_send(w->router, rx->identity, rx->identity_len, &pong);
        break;
    }
    default:
        w->rejected++;
        kc_reply_error(w, rx, m.request_id, 0, "unexpected message type");
    }
}

/* An answer from a next-stage worker: relay it to whoever asked. */
static void kc_handle_next(kc_worker *w, kc_net_rx *rx)
{
    kc_wire_msg m;
    if (kc_wire_decode(rx->buf, rx->len, KC_W_MAX_MESSAGE, &m) != KC_OK) {
        w->rejected++;
        return;
    }
    for (int i = 0; i < w->n_pending; i++) {
        kc_w_pending *p = &w->pending[i];
        if (p->fwd_id != m.request_id)
            continue;
        m.request_id = p->client_id;
        m.stage = m.type == KC_WIRE_ERROR ? m.stage : (uint32_t)p->stage;
        char times[1024];
        if (m.type == KC_WIRE_RESULT && m.text_len > 1 && m.text_len < sizeof times - 32 &&
            m.text[0] == '[') { /* prepend this stage's time */
            snprintf(times, sizeof times, "[%.3f,%.*s", p->compute_ms, (int)m.text_len - 1,
                     m.text + 1);
            m.text = times;
            m.text_len = strlen(times);
        }
        kc_net_send(w->router, p->identity, p->identity_len, &m);
        w->pending[i] = w->pending[--w->n_pending];
        return;
    }
}

/* Fail the pending requests of `stage` (-1: any; all of them, or only
 * those past their deadline), naming the next stage's task and `reason`
 * (NULL: its deadline passed). */
static void kc_fail_pending(kc_worker *w, int stage, int only_expired, const char *reason)
{
    double now = kc_now();
    for (int i = 0; i < w->n_pending;) {
        kc_w_pending *p = &w->pending[i];
        if ((stage >= 0 && p->stage != stage) || (only_expired && p->deadline > now)) {
            i++;
            continue;
        }
        const kc_w_stage *st = &w->stages[p->stage];
        char why[400], deadline[64];
        snprintf(deadline, sizeof deadline, "did not answer within %d ms", st->deadline_ms);
        snprintf(why, sizeof why, "%s (stage %d) %s", st->next_name, p->stage + 1,
                 reason ? reason : deadline);
        kc_net_rx to = {0};
        memcpy(to.identity, p->identity, p->identity_len);
        to.identity_len = p->identity_len;
        kc_reply_error(w, &to, p->client_id, p->stage + 1, why);
        kc_log(w, "%s", why);
        w->pending[i] = w->pending[--w->n_pending];
    }
}

/* Requests whose next stage did not answer in time fail with its name. */
static void kc_expire(kc_worker *w)
{
    kc_fail_pending(w, -1, 1, NULL);
}

/* The next stage's connection dropped: what was sent to it is lost. */
static void kc_next_link_event(kc_worker *w, int stage)
{
    kc_w_stage *st = &w->stages[stage];
    kc_net_event e = kc_net_watch_event(st->next_mon);
    if (e == KC_NET_DROPPED)
        kc_fail_pending(w, stage, 0, "dropped its connection (it stopped, or the link went "
                        "down)");
    else if (e == KC_NET_REFUSED)
        kc_fail_pending(w, stage, 0, "refused this worker's key: add it to that worker's "
                        "--authorized-keys");
}

static int kc_poll_once(kc_worker *w, kc_net_rx *rx)
{
    zmq_pollitem_t items[1 + 2 * KC_W_MAX_STAGES];
    int owner[1 + 2 * KC_W_MAX_STAGES], n = 0;
    items[n] = (zmq_pollitem_t){w->router, 0, ZMQ_POLLIN, 0};
    owner[n++] = -1;
    for (int k = 0; k < KC_W_MAX_STAGES; k++)
        if (w->stages[k].next) {
            items[n] = (zmq_pollitem_t){w->stages[k].next, 0, ZMQ_POLLIN, 0};
            owner[n++] = k;
            items[n] = (zmq_pollitem_t){w->stages[k].next_mon, 0, ZMQ_POLLIN, 0};
            owner[n++] = KC_W_MAX_STAGES + k;
        }
    int rc = zmq_poll(items, n, 100);
    if (rc <= 0)
        return rc;
    /* Answers from next stages first, all that have arrived: relaying is
     * cheap, and the request waiting on the ROUTER may compute for long. */
    for (int i = 1; i < n; i++) {
        if (!(items[i].revents & ZMQ_POLLIN))
            continue;
        if (owner[i] >= KC_W_MAX_STAGES) {
            kc_next_link_event(w, owner[i] - KC_W_MAX_STAGES);
            continue;
        }
        for (int got = 1; got;) {
            if (kc_net_recv(items[i].socket, 0, 0, KC_W_MAX_MESSAGE, rx, &got) != KC_OK) {
                w->rejected++;
                kc_log(w, "receive: %s", kc_last_error());
                break;
            }
            if (got)
                kc_handle_next(w, rx);
        }
    }
    if (items[0].revents & ZMQ_POLLIN) {
        int got = 0;
        if (kc_net_recv(w->router, 1, 0, KC_W_MAX_MESSAGE, rx, &got) != KC_OK) {
            w->rejected++;
            kc_log(w, "receive: %s", kc_last_error());
        } else if (got) {
            kc_handle_router(w, rx);
        }
    }
    return rc;
}

int kc_worker_serve(const kc_worker_options *o)
{
    kc_worker *w = kc_calloc(1, sizeof *w);
    if (!w)
        return 1;
    w->o = o;
    snprintf(w->name, sizeof w->name, "/job:%s/task:%d", o->job, o->task);
    w->peers = kc_calloc((size_t)kc_max_peers(o), sizeof *w->peers);
    const kc_cluster_task *t = kc_cluster_find(&o->cluster, o->job, o->task);
    kc_status s = w->peers && t ? KC_OK : KC_ERR_ARG;
    if (t && t->n_replicas > 1)
        snprintf(w->log_name, sizeof w->log_name, "%s replica %d", w->name, o->replica);
    else
        snprintf(w->log_name, sizeof w->log_name, "%s", w->name);
    if (s == KC_OK && (o->replica < 0 || o->replica >= t->n_replicas))
        s = kc_fail(KC_ERR_ARG, "task %d has %d address(es), no replica %d", o->task,
                    t->n_replicas, o->replica);
    if (s == KC_OK)
        s = kc_receiver_init(&w->recv, o->cache_dir, o->max_model_bytes);
    if (s == KC_OK)
        s = kc_net_new(&o->sec, &w->net);
    if (s == KC_OK)
        s = kc_net_bind(w->net, &t->replicas[o->replica], &w->router);
    int rc = 0;
    if (s != KC_OK) {
        fprintf(stderr, "kerasc: error: serve %s: %s\n", w->name, kc_last_error());
        rc = 1;
    } else {
        char endpoint[300];
        kc_cluster_endpoint(&t->replicas[o->replica], endpoint, sizeof endpoint);
        char devices[256];
        kc_device_list(devices, sizeof devices);
        kc_log(w, "listening on %s (%s), devices: %s", endpoint,
               o->sec.insecure ? "PLAINTEXT" : "CURVE", devices);
        w->gflops = kc_plan_gemm_gflops();
        signal(SIGINT, kc_on_signal);
        signal(SIGTERM, kc_on_signal);
        kc_net_rx rx = {0};
        while (!kc_stop) {
            kc_poll_once(w, &rx);
            kc_expire(w);
        }
        /* Drain: answer what is in flight (or let it expire), then stop. */
        double until = kc_now() + (o->deadline_ms > 0 ? o->deadline_ms : 30000) / 1000.0;
        while (w->n_pending && kc_now() < until) {
            kc_poll_once(w, &rx);
            kc_expire(w);
        }
        kc_log(w, "stopped: %llu requests served, %llu errors, %llu rejected",
               (unsigned long long)w->served, (unsigned long long)w->errors,
               (unsigned long long)w->rejected);
        kc_net_rx_free(&rx);
    }
    for (int k = 0; k < KC_W_MAX_STAGES; k++)
        kc_stage_release(&w->stages[k]);
    kc_net_close(w->router);
    kc_net_free(w->net);
    kc_receiver_free(&w->recv);
    free(w->peers);
    free(w);
    return rc;
}
