/* The split-run client (see pipeline.h).
 *
 * Stages placed on cluster tasks form segments: runs of consecutive remote
 * stages, where each worker forwards to the next and the segment's last
 * answer comes back (relayed) to the client. Stages placed on a local
 * device run here, between segments. Each micro-batch moves through the
 * stages in order; up to KC_P_WINDOW are in flight at once, so every stage
 * (local or remote) works while the others do. */
#include "net/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "base/clock.h"
#include "base/mem.h"
#include "model/model_internal.h"
#include "net/digest.h"
#include "net/msg.h"
#include "net/upload.h"
#include "runtime/stage.h"

#define KC_P_MAX_MESSAGE ((size_t)4 << 30)
#define KC_P_WINDOW 64

typedef struct kc_mb {
    int64_t at, rows;
    int stage;                     /* the next stage to run (n_stages: done) */
    uint64_t id;                   /* its request while in a remote segment, else 0 */
    int n;                         /* tensors held: the inputs of `stage` */
    kc_tensor *t[KC_WIRE_MAX_TENSORS];
} kc_mb;

typedef struct kc_pipe {
    const kc_model *m;
    const kc_pipeline_options *o;
    kc_net *net;
    const kc_cluster_task *task[KC_PIPELINE_MAX_STAGES];
    int replica[KC_PIPELINE_MAX_STAGES];
    void *sock[KC_PIPELINE_MAX_STAGES];       /* remote stages' workers */
    void *mon[KC_PIPELINE_MAX_STAGES];        /* their connections' monitors */
    int seg_end[KC_PIPELINE_MAX_STAGES];      /* a head's segment's last stage */
    kc_stage_plan plan[KC_PIPELINE_MAX_STAGES];
    kc_session *local[KC_PIPELINE_MAX_STAGES]; /* stages run here */
    char sha[KC_SHA256_HEX];
    uint64_t next_id;
    int uploaded[KC_PIPELINE_MAX_STAGES];     /* the model was streamed to stage k's worker */
    int failed_stage;              /* set by a failure that names a stage */
    uint32_t failed_flags;         /* its ERROR's flags */
    double last_progress;
    kc_net_rx rx;
} kc_pipe;

static int kc_deadline(const kc_pipe *p) { return p->o->deadline_ms > 0 ? p->o->deadline_ms : 30000; }

int kc_pipeline_stage_is_local(const kc_pipeline_options *o, int k)
{
    return kc_devspec_is_local(&o->place[k]);
}

static int kc_remote(const kc_pipe *p, int k) { return !kc_pipeline_stage_is_local(p->o, k); }

static void kc_task_name(const kc_pipe *p, int k, char *buf, size_t size)
{
    if (!kc_remote(p, k)) {
        char dev[128];
        kc_devspec_format(&p->o->place[k], dev, sizeof dev);
        snprintf(buf, size, "this client (%s)", dev);
        return;
    }
    const kc_cluster_addr *a = &p->task[k]->replicas[p->replica[k]];
    snprintf(buf, size, "/job:%s/task:%d (%s:%d)", p->o->place[k].job, p->o->place[k].task,
             a->host, a->port);
}

static int kc_first_node(const kc_pipe *p, int k) { return k == 0 ? 0 : p->o->last_node[k - 1] + 1; }

static void kc_release(kc_pipe *p)
{
    for (int k = 0; k < p->o->n_stages; k++) {
        kc_net_unwatch(p->sock[k], p->mon[k]);
        kc_net_close(p->sock[k]);
        p->sock[k] = NULL;
        p->mon[k] = NULL;
        kc_session_free(p->local[k]);
        p->local[k] = NULL;
        kc_stage_plan_free(&p->plan[k]);
    }
}

/* The LOAD_STAGE spec for remote stage k (next: stage k+1 when it is
 * remote too, so the worker forwards to it directly). A worker waits for
 * its next stage one deadline per stage after it, plus one: the deepest
 * worker gives up first, so an error names the task that failed. */
static void kc_stage_spec(const kc_pipe *p, int k, int64_t batch_max, char *buf, size_t size)
{
    const char *file = strrchr(p->o->model_path, '/');
    file = file ? file + 1 : p->o->model_path;
    char device[160] = "/CPU:0";
    if (p->o->place[k].has_device) {
        kc_devspec local = p->o->place[k];
        local.job[0] = '\0';
        local.task = local.replica = -1;
        kc_devspec_format(&local, device, sizeof device);
    }
    char next[512] = "null";
    if (k + 1 < p->o->n_stages && kc_remote(p, k + 1)) {
        const kc_cluster_addr *a = &p->task[k + 1]->replicas[p->replica[k + 1]];
        snprintf(next, sizeof next, "{\"address\":\"%s%s%s:%d\",\"name\":\"/job:%s/task:%d\"}",
                 a->ipv6 ? "[" : "", a->host, a->ipv6 ? "]" : "", a->port,
                 p->o->place[k + 1].job, p->o->place[k + 1].task);
    }
    snprintf(buf, size,
             "{\"stage\":%d,\"model\":\"%s\",\"sha256\":\"%s\",\"first\":%d,\"last\":%d,"
             "\"batch_max\":%lld,\"device\":\"%s\",\"next\":%s,\"deadline_ms\":%lld}",
             k, file, p->sha, kc_first_node(p, k), p->o->last_node[k], (long long)batch_max,
             device, next, (long long)kc_deadline(p) * (p->seg_end[k] - k + 1));
}

/* ------------------------------------------------------------ loading */

/* A lost connection or a refused key on stage k's link fails at once. */
static kc_status kc_check_link(kc_pipe *p, int k)
{
    kc_net_event e = kc_net_watch_event(p->mon[k]);
    if (e == KC_NET_FINE)
        return KC_OK;
    char who[300];
    kc_task_name(p, k, who, sizeof who);
    p->failed_stage = k;
    if (e == KC_NET_REFUSED)
        return kc_fail(KC_ERR_REFUSED, "%s is not accepting this client's key (the CURVE "
                       "handshake was refused)", who);
    return kc_fail(KC_ERR_DEVICE, "lost the connection to %s (the worker stopped, or the link "
                   "went down)", who);
}

/* One message from stage k's worker before `until` (an ERROR fails with
 * its text; its flags are kept in failed_flags). */
static kc_status kc_await(kc_pipe *p, int k, double until, kc_wire_msg *m)
{
    char who[300];
    kc_task_name(p, k, who, sizeof who);
    for (;;) {
        int left = (int)((until - kc_now()) * 1000);
        if (left <= 0) {
            p->failed_stage = k;
            return kc_fail(KC_ERR_DEVICE, "%s did not answer within %d ms (down, unreachable, "
                           "or not accepting this client's key)", who, kc_deadline(p));
        }
        zmq_pollitem_t items[2] = {{p->sock[k], 0, ZMQ_POLLIN, 0}, {p->mon[k], 0, ZMQ_POLLIN, 0}};
        int rc = zmq_poll(items, p->mon[k] ? 2 : 1, left);
        if (rc > 0 && p->mon[k] && (items[1].revents & ZMQ_POLLIN))
            KC_TRY(kc_check_link(p, k));
        if (rc <= 0 || !(items[0].revents & ZMQ_POLLIN))
            continue;
        int got = 0;
        KC_TRY(kc_net_recv(p->sock[k], 0, 0, KC_P_MAX_MESSAGE, &p->rx, &got));
        if (!got)
            continue;
        if (kc_wire_decode(p->rx.buf, p->rx.len, KC_P_MAX_MESSAGE, m) != KC_OK)
            return kc_fail_context(KC_ERR_FORMAT, "%s sent a malformed message", who);
        if (m->type == KC_WIRE_ERROR) {
            p->failed_stage = (int)m->stage < p->o->n_stages ? (int)m->stage : k;
            p->failed_flags = m->flags;
            return kc_fail(KC_ERR_DEVICE, "%.*s", (int)m->text_len, m->text);
        }
        return KC_OK;
    }
}

static kc_status kc_send_load(kc_pipe *p, int k, int64_t batch_max)
{
    char spec[2048];
    kc_stage_spec(p, k, batch_max, spec, sizeof spec);
    kc_wire_msg msg;
    kc_msg_text(&msg, KC_WIRE_LOAD_STAGE, ++p->next_id, (uint32_t)k, spec);
    return kc_net_send(p->sock[k], NULL, 0, &msg);
}

/* Stage k's answer to its LOAD; a worker without the model file gets it
 * streamed from here, then is asked again. */
static kc_status kc_load_remote(kc_pipe *p, int k, int64_t batch_max, double until)
{
    kc_wire_msg reply;
    p->failed_flags = 0;
    kc_status s = kc_await(p, k, until, &reply);
    if (s != KC_OK && (p->failed_flags & KC_WIRE_FLAG_NEED_MODEL)) {
        char who[300];
        kc_task_name(p, k, who, sizeof who);
        p->failed_stage = k;
        /* A worker serving two stages asked twice: it has the file by now. */
        int sent = 0;
        for (int j = 0; j < k && !sent; j++)
            sent = p->uploaded[j] && p->task[j] == p->task[k] && p->replica[j] == p->replica[k];
        if (!sent) {
            fprintf(stderr, "kerasc: %s has no copy of the model: streaming it\n", who);
            KC_TRY(kc_upload_model(p->sock[k], p->o->model_path, p->sha, kc_deadline(p), who,
                                   &p->next_id, &p->rx));
            p->uploaded[k] = 1;
        }
        KC_TRY(kc_send_load(p, k, batch_max));
        s = kc_await(p, k, kc_now() + kc_deadline(p) / 1000.0, &reply);
    }
    KC_TRY(s);
    if (reply.type != KC_WIRE_LOAD_REPLY)
        return kc_fail(KC_ERR_FORMAT, "unexpected answer to a stage load");
    return KC_OK;
}

static kc_status kc_load_local(kc_pipe *p, int k)
{
    char device[128];
    kc_devspec_format(&p->o->place[k], device, sizeof device);
    kc_session_options so = {.device = device};
    p->failed_stage = k;
    KC_TRY(kc_session_new(p->m, &so, &p->local[k]));
    return kc_session_set_stage(p->local[k], &p->plan[k]);
}

static kc_status kc_load_all(kc_pipe *p, int64_t batch_max)
{
    int n = p->o->n_stages;
    memset(p->uploaded, 0, sizeof p->uploaded);
    for (int k = 0; k < n; k++) {
        KC_TRY(kc_stage_plan_build(p->m, kc_first_node(p, k), p->o->last_node[k], &p->plan[k]));
        if (p->plan[k].n_inputs > KC_WIRE_MAX_TENSORS || p->plan[k].n_outputs > KC_WIRE_MAX_TENSORS)
            return kc_fail(KC_ERR_LIMIT, "more than %d tensors cross the cut before or after "
                           "stage %d", KC_WIRE_MAX_TENSORS, k);
    }
    for (int k = n - 1; k >= 0; k--)
        p->seg_end[k] = k + 1 < n && kc_remote(p, k) && kc_remote(p, k + 1) ? p->seg_end[k + 1] : k;
    for (int k = 0; k < n; k++)
        if (kc_remote(p, k)) {
            KC_TRY(kc_net_connect(p->net, &p->task[k]->replicas[p->replica[k]], &p->sock[k]));
            KC_TRY(kc_net_watch(p->net, p->sock[k], &p->mon[k]));
        }
    for (int k = 0; k < n; k++)
        if (kc_remote(p, k))
            KC_TRY(kc_send_load(p, k, batch_max));
    /* The local stages are built while the workers load theirs. */
    for (int k = 0; k < n; k++)
        if (!kc_remote(p, k))
            KC_TRY(kc_load_local(p, k));
    double until = kc_now() + kc_deadline(p) / 1000.0;
    for (int k = 0; k < n; k++)
        if (kc_remote(p, k)) {
            p->failed_stage = k;
            KC_TRY(kc_load_remote(p, k, batch_max, until));
        }
    return KC_OK;
}

/* ------------------------------------------------------------ micro-batches */

/* Rows [first, first+rows) of t, as a view (rows are contiguous): what is
 * sent or fed to a local stage is read from the caller's batch itself. */
static kc_status kc_slice(const kc_tensor *t, int64_t first, int64_t rows, kc_tensor **out)
{
    if (t->dtype != KC_F32)
        return kc_fail(KC_ERR_ARG, "split runs take float32 inputs");
    kc_shape s = t->shape;
    size_t row = sizeof(float) * (size_t)(kc_shape_count(&s) / (s.dims[0] ? s.dims[0] : 1));
    s.dims[0] = rows;
    *out = kc_tensor_wrap(KC_F32, &s, (char *)t->data + row * (size_t)first);
    return *out ? KC_OK : KC_ERR_NOMEM;
}

static void kc_mb_clear(kc_mb *mb)
{
    for (int i = 0; i < mb->n; i++) {
        kc_tensor_free(mb->t[i]);
        mb->t[i] = NULL;
    }
    mb->n = 0;
}

static kc_status kc_run_local(kc_pipe *p, kc_mb *mb)
{
    int k = mb->stage;
    kc_tensor *out[KC_WIRE_MAX_TENSORS] = {0};
    double t0 = kc_now();
    kc_status s = kc_session_run_stage(p->local[k], mb->rows, (const kc_tensor *const *)mb->t, out);
    if (s != KC_OK) {
        p->failed_stage = k;
        return s;
    }
    double took = kc_now() - t0;
    if (p->o->stats)
        p->o->stats->compute_ms[k] += took * 1e3;
    /* Time spent computing here is not time the workers were silent. */
    p->last_progress += took;
    kc_mb_clear(mb);
    memcpy(mb->t, out, sizeof out);
    mb->n = p->plan[k].n_outputs;
    mb->stage++;
    return KC_OK;
}

/* Run the micro-batch's local stages, then hand it to the next remote
 * segment (or leave it done). */
static kc_status kc_advance(kc_pipe *p, kc_mb *mb)
{
    while (mb->stage < p->o->n_stages && !kc_remote(p, mb->stage))
        KC_TRY(kc_run_local(p, mb));
    if (mb->stage == p->o->n_stages)
        return KC_OK;
    int k = mb->stage;
    kc_wire_msg msg;
    kc_msg_tensors(&msg, KC_WIRE_RUN, ++p->next_id, (uint32_t)k, mb->t, mb->n);
    if (kc_net_send(p->sock[k], NULL, 0, &msg) != KC_OK) {
        char who[300];
        kc_task_name(p, k, who, sizeof who);
        p->failed_stage = k;
        return kc_fail_context(KC_ERR_DEVICE, "sending to %s", who);
    }
    mb->id = p->next_id;
    kc_mb_clear(mb);
    return KC_OK;
}

/* A segment's answer must be exactly the values live after its last stage,
 * at this micro-batch's rows, before any byte of it is used. */
static kc_status kc_check_answer(const kc_pipe *p, int head, const kc_mb *mb,
                                 const kc_wire_msg *m)
{
    int last = p->seg_end[head];
    const kc_stage_plan *plan = &p->plan[last];
    char who[300];
    kc_task_name(p, head, who, sizeof who);
    if (m->type != KC_WIRE_RESULT || m->n_tensors != plan->n_outputs)
        return kc_fail(KC_ERR_FORMAT, "%s: stage %d answered with %d tensors, %d expected", who,
                       last, m->n_tensors, plan->n_outputs);
    for (int i = 0; i < m->n_tensors; i++) {
        const kc_shape *want = &p->m->graph->values[plan->outputs[i]].shape;
        const kc_shape *got = &m->tensors[i].shape;
        int ok = m->tensors[i].dtype == KC_F32 && got->rank == want->rank &&
                 got->dims[0] == mb->rows;
        for (int d = 1; ok && d < got->rank; d++)
            ok = want->dims[d] < 0 || got->dims[d] == want->dims[d];
        if (!ok)
            return kc_fail(KC_ERR_FORMAT, "%s: stage %d answered tensor %d with the wrong dtype "
                           "or shape", who, last, i);
    }
    return KC_OK;
}

static void kc_add_times(kc_pipe *p, int head, const kc_wire_msg *m)
{
    if (!p->o->stats || m->text_len < 2 || m->text[0] != '[')
        return;
    const char *c = m->text + 1, *end_text = m->text + m->text_len;
    for (int k = head; k <= p->seg_end[head] && c < end_text; k++) {
        char *end;
        double ms = strtod(c, &end);
        if (end == c)
            break;
        p->o->stats->compute_ms[k] += ms;
        c = end + 1;
    }
}

static kc_status kc_take_answer(kc_pipe *p, kc_mb *mb, const kc_wire_msg *m)
{
    int head = mb->stage, last = p->seg_end[head];
    p->failed_stage = head;
    KC_TRY(kc_check_answer(p, head, mb, m));
    kc_add_times(p, head, m);
    KC_TRY(kc_msg_to_tensors(m, mb->t));
    mb->n = m->n_tensors;
    mb->stage = last + 1;
    mb->id = 0;
    return kc_advance(p, mb);
}

/* The in-flight micro-batch a request id belongs to. */
static kc_mb *kc_mb_of(kc_mb *mbs, int64_t n, uint64_t id)
{
    for (int64_t i = 0; i < n; i++)
        if (mbs[i].id == id)
            return &mbs[i];
    return NULL;
}

/* Wait up to timeout_ms (0: just look) for an answer from a segment head
 * with work in flight, and take it. mbs: the micro-batches started and not
 * yet finished (only these can be in flight, at most KC_P_WINDOW of them
 * waiting), so a long batch is not rescanned on every call. Silence past the deadline since the
 * last answer fails, naming the oldest waiting micro-batch's task. */
static kc_status kc_poll_answers(kc_pipe *p, kc_mb *mbs, int64_t n_mb, int timeout_ms, int *took)
{
    *took = 0;
    zmq_pollitem_t items[2 * KC_PIPELINE_MAX_STAGES];
    int head[2 * KC_PIPELINE_MAX_STAGES], n = 0, oldest = -1;
    for (int k = 0; k < p->o->n_stages; k++) {
        int waiting = 0;
        for (int64_t i = 0; i < n_mb && !waiting; i++)
            waiting = mbs[i].id && mbs[i].stage == k;
        if (!waiting)
            continue;
        items[n] = (zmq_pollitem_t){p->sock[k], 0, ZMQ_POLLIN, 0};
        head[n++] = k;
        items[n] = (zmq_pollitem_t){p->mon[k], 0, ZMQ_POLLIN, 0};
        head[n++] = -1 - k;
    }
    for (int64_t i = 0; i < n_mb && oldest < 0; i++)
        oldest = mbs[i].id ? mbs[i].stage : -1;
    if (!n)
        return KC_OK;
    /* Longer than any worker waits for its next stage (see kc_stage_spec),
     * so the error names the task that failed. */
    double limit = p->last_progress + kc_deadline(p) * (p->o->n_stages + 1) / 1000.0;
    int left = (int)((limit - kc_now()) * 1000);
    if (left <= 0) {
        char who[300];
        kc_task_name(p, oldest, who, sizeof who);
        p->failed_stage = oldest;
        return kc_fail(KC_ERR_DEVICE, "%s did not answer within %d ms (down, unreachable, or "
                       "not accepting this client's key)", who,
                       kc_deadline(p) * (p->o->n_stages + 1));
    }
    int rc = zmq_poll(items, n, timeout_ms < left ? timeout_ms : left);
    for (int i = 0; rc > 0 && i < n; i++) {
        if (!(items[i].revents & ZMQ_POLLIN))
            continue;
        if (head[i] < 0) {
            KC_TRY(kc_check_link(p, -1 - head[i]));
            continue;
        }
        kc_wire_msg m;
        KC_TRY(kc_await(p, head[i], kc_now() + 1, &m));
        kc_mb *mb = kc_mb_of(mbs, n_mb, m.request_id);
        if (!mb || mb->stage != head[i])
            continue; /* an answer to an abandoned request */
        p->last_progress = kc_now();
        *took = 1;
        return kc_take_answer(p, mb, &m);
    }
    return KC_OK;
}

/* Copy a finished micro-batch's outputs into the batch's. */
static kc_status kc_finish(const kc_pipe *p, kc_mb *mb, const int *out_order, int64_t batch,
                           kc_tensor **outputs)
{
    for (int i = 0; i < mb->n; i++) {
        const kc_tensor *t = mb->t[i];
        kc_tensor **dst = &outputs[out_order[i]];
        if (!*dst) {
            kc_shape s = t->shape;
            s.dims[0] = batch;
            KC_TRY(kc_tensor_new(KC_F32, s.rank, s.dims, dst));
        }
        size_t row = (size_t)kc_shape_count(&t->shape) / (size_t)mb->rows * sizeof(float);
        memcpy((char *)(*dst)->data + row * (size_t)mb->at, t->data, row * (size_t)mb->rows);
    }
    (void)p;
    kc_mb_clear(mb);
    return KC_OK;
}

/* Position of value v among the model's inputs or outputs. */
static int kc_index_of(const int *list, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (list[i] == v)
            return i;
    return -1;
}

typedef struct kc_flow {
    const kc_tensor *const *inputs;
    int in_order[KC_WIRE_MAX_TENSORS], n_in;
    int out_order[KC_WIRE_MAX_TENSORS];
    int64_t batch, rows;          /* rows: per micro-batch */
    kc_tensor **outputs;
    double t0;                    /* when the first micro-batch started */
} kc_flow;

static kc_status kc_start(kc_pipe *p, const kc_flow *f, kc_mb *mb, int64_t index)
{
    mb->at = index * f->rows;
    mb->rows = f->batch - mb->at < f->rows ? f->batch - mb->at : f->rows;
    for (int i = 0; i < f->n_in; i++) {
        KC_TRY(kc_slice(f->inputs[f->in_order[i]], mb->at, mb->rows, &mb->t[i]));
        mb->n = i + 1;
    }
    return kc_advance(p, mb);
}

/* Every micro-batch through every stage, up to KC_P_WINDOW in flight;
 * answers are taken first, so the remote stages never wait on us. */
static kc_status kc_flow_run(kc_pipe *p, const kc_flow *f)
{
    int64_t n_mb = (f->batch + f->rows - 1) / f->rows, started = 0, done = 0;
    kc_mb *mbs = kc_calloc((size_t)n_mb, sizeof *mbs);
    if (!mbs)
        return KC_ERR_NOMEM;
    kc_status s = KC_OK;
    p->last_progress = kc_now();
    while (s == KC_OK && done < n_mb) {
        int took = 0;
        s = kc_poll_answers(p, mbs + done, started - done, 0, &took);
        if (s == KC_OK && !took) {
            int64_t in_flight = 0;
            for (int64_t i = done; i < started; i++)
                in_flight += mbs[i].id != 0;
            if (started < n_mb && in_flight < KC_P_WINDOW)
                s = kc_start(p, f, &mbs[started], started), started++;
            else
                s = kc_poll_answers(p, mbs + done, started - done, 100, &took);
        }
        /* Micro-batches finish in order of their index. */
        while (s == KC_OK && done < started && mbs[done].stage == p->o->n_stages) {
            s = kc_finish(p, &mbs[done++], f->out_order, f->batch, f->outputs);
            if (done == 1 && p->o->stats)
                p->o->stats->first_s = kc_now() - f->t0;
        }
    }
    for (int64_t i = 0; i < n_mb; i++)
        kc_mb_clear(&mbs[i]);
    free(mbs);
    return s;
}

/* Activation bytes entering each stage per micro-batch. */
static void kc_stage_in_bytes(const kc_pipe *p, int64_t mb, size_t *bytes)
{
    for (int k = 0; k < p->o->n_stages; k++) {
        bytes[k] = 0;
        for (int i = 0; i < p->plan[k].n_inputs; i++)
            bytes[k] += (size_t)(kc_model_value_sample_floats(p->m, p->plan[k].inputs[i]) * mb) *
                        sizeof(float);
    }
}

static kc_status kc_flow_setup(const kc_pipe *p, kc_flow *f, int n_inputs, int n_outputs)
{
    const kc_graph *g = p->m->graph;
    int *in_vals = NULL, *out_vals = NULL, n_in = 0, n_out = 0;
    kc_status s = kc_model_live_values(p->m, 0, &in_vals, &n_in);
    if (s == KC_OK)
        s = kc_model_live_values(p->m, g->n_nodes, &out_vals, &n_out);
    if (s == KC_OK && (n_in > KC_WIRE_MAX_TENSORS || n_out > KC_WIRE_MAX_TENSORS ||
                       n_out != n_outputs || n_in > n_inputs))
        s = kc_fail(KC_ERR_UNSUPPORTED, "this model's inputs/outputs cannot be split");
    for (int i = 0; s == KC_OK && i < n_in; i++)
        f->in_order[i] = kc_index_of(g->inputs, g->n_inputs, in_vals[i]);
    for (int i = 0; s == KC_OK && i < n_out; i++)
        f->out_order[i] = kc_index_of(g->outputs, g->n_outputs, out_vals[i]);
    f->n_in = n_in;
    free(in_vals);
    free(out_vals);
    return s;
}

static kc_status kc_attempt(kc_pipe *p, const kc_tensor *const *inputs, int n_inputs,
                            kc_tensor **outputs, int n_outputs)
{
    kc_flow f = {.inputs = inputs, .outputs = outputs, .batch = inputs[0]->shape.dims[0]};
    f.rows = p->o->microbatch > 0 && p->o->microbatch < f.batch ? p->o->microbatch : f.batch;
    kc_status s = kc_flow_setup(p, &f, n_inputs, n_outputs);
    if (s == KC_OK)
        s = kc_load_all(p, f.rows);
    if (p->o->stats)
        memset(p->o->stats, 0, sizeof *p->o->stats);
    f.t0 = kc_now();
    if (s == KC_OK)
        s = kc_flow_run(p, &f);
    if (s == KC_OK && p->o->stats) {
        p->o->stats->wall_s = kc_now() - f.t0;
        p->o->stats->n_microbatches = (int)((f.batch + f.rows - 1) / f.rows);
        kc_stage_in_bytes(p, f.rows, p->o->stats->in_bytes);
    }
    kc_release(p);
    return s;
}

kc_status kc_pipeline_run(const kc_model *m, const kc_pipeline_options *o,
                          const kc_tensor *const *inputs, int n_inputs, kc_tensor **outputs,
                          int n_outputs)
{
    kc_pipe p = {.m = m, .o = o};
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = NULL;
    if (n_inputs < 1 || inputs[0]->shape.rank < 1 || inputs[0]->shape.dims[0] < 1)
        return kc_fail(KC_ERR_ARG, "a split run needs a batch of at least one sample");
    for (int k = 0; k < o->n_stages; k++) {
        if (kc_pipeline_stage_is_local(o, k))
            continue;
        p.task[k] = kc_cluster_find(&o->cluster, o->place[k].job, o->place[k].task);
        if (!p.task[k])
            return kc_last_error()[0] ? KC_ERR_ARG : kc_fail(KC_ERR_ARG, "no such task");
    }
    KC_TRY(kc_sha256_file_cached(o->model_path, p.sha));
    KC_TRY(kc_net_new(&o->sec, &p.net));
    kc_status s;
    for (;;) {
        p.failed_stage = -1;
        s = kc_attempt(&p, inputs, n_inputs, outputs, n_outputs);
        if (s == KC_OK)
            break;
        for (int i = 0; i < n_outputs; i++) {
            kc_tensor_free(outputs[i]);
            outputs[i] = NULL;
        }
        int k = p.failed_stage;
        if (k < 0 || !p.task[k] || p.replica[k] + 1 >= p.task[k]->n_replicas)
            break;
        char who[300];
        kc_task_name(&p, k, who, sizeof who);
        fprintf(stderr, "kerasc: warning: %s: %s; failing over to its next replica\n", who,
                kc_last_error());
        p.replica[k]++;
    }
    kc_net_rx_free(&p.rx);
    kc_net_free(p.net);
    return s;
}

kc_status kc_cluster_query(kc_net *net, const kc_cluster_addr *addr, int timeout_ms,
                           size_t probe_bytes, char *buf, size_t size, double *probe_seconds)
{
    void *sock = NULL;
    KC_TRY(kc_net_connect(net, addr, &sock));
    kc_net_rx rx = {0};
    kc_wire_msg msg;
    kc_msg_text(&msg, KC_WIRE_STATUS, 1, 0, NULL);
    double until = kc_now() + timeout_ms / 1000.0;
    kc_status s = kc_net_send(sock, NULL, 0, &msg);
    int got = 0;
    while (s == KC_OK && !got && kc_now() < until)
        s = kc_net_recv(sock, 0, (int)((until - kc_now()) * 1000) + 1, 1 << 20, &rx, &got);
    kc_wire_msg reply;
    if (s == KC_OK && !got)
        s = kc_fail(KC_ERR_DEVICE, "%s:%d did not answer within %d ms", addr->host, addr->port,
                    timeout_ms);
    if (s == KC_OK && (kc_wire_decode(rx.buf, rx.len, 1 << 20, &reply) != KC_OK ||
                       reply.type != KC_WIRE_STATUS_REPLY))
        s = kc_fail(KC_ERR_FORMAT, "%s:%d sent an unexpected answer", addr->host, addr->port);
    if (s == KC_OK)
        snprintf(buf, size, "%.*s", (int)reply.text_len, reply.text);
    /* Bandwidth probe: a PING carrying probe_bytes, answered by a PONG. */
    if (s == KC_OK && probe_bytes && probe_seconds) {
        kc_tensor *t = NULL;
        int64_t dims[1] = {(int64_t)(probe_bytes / sizeof(float))};
        s = kc_tensor_new(KC_F32, 1, dims, &t);
        /* Twice, keeping the faster: the first pays for fresh buffers'
         * page faults on both ends. */
        *probe_seconds = -1;
        for (uint64_t id = 2; s == KC_OK && id <= 3; id++) {
            kc_msg_tensors(&msg, KC_WIRE_PING, id, 0, &t, 1);
            double t0 = kc_now();
            s = kc_net_send(sock, NULL, 0, &msg);
            got = 0;
            while (s == KC_OK && !got && kc_now() < until + 5)
                s = kc_net_recv(sock, 0, 1000, 1 << 20, &rx, &got);
            double dt = kc_now() - t0;
            if (got && (*probe_seconds < 0 || dt < *probe_seconds))
                *probe_seconds = dt;
        }
        kc_tensor_free(t);
    }
    kc_net_rx_free(&rx);
    kc_net_close(sock);
    return s;
}
