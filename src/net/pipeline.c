/* The split-run client (see pipeline.h). */
#include "net/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "model/model_internal.h"
#include "net/digest.h"
#include "net/msg.h"
#include "runtime/stage.h"

#define KC_P_MAX_MESSAGE ((size_t)4 << 30)

typedef struct kc_pipe {
    const kc_model *m;
    const kc_pipeline_options *o;
    kc_net *net;
    const kc_cluster_task *task[KC_PIPELINE_MAX_STAGES];
    int replica[KC_PIPELINE_MAX_STAGES];
    void *sock[KC_PIPELINE_MAX_STAGES];
    char name[KC_PIPELINE_MAX_STAGES][96];
    char sha[KC_SHA256_HEX];
    uint64_t next_id;
    int failed_stage;              /* set by a failure that names a stage */
    kc_net_rx rx;
} kc_pipe;

static double kc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int kc_deadline(const kc_pipe *p) { return p->o->deadline_ms > 0 ? p->o->deadline_ms : 30000; }

static void kc_disconnect(kc_pipe *p)
{
    for (int k = 0; k < p->o->n_stages; k++) {
        kc_net_close(p->sock[k]);
        p->sock[k] = NULL;
    }
}

static void kc_task_name(const kc_pipe *p, int k, char *buf, size_t size)
{
    const kc_cluster_addr *a = &p->task[k]->replicas[p->replica[k]];
    snprintf(buf, size, "/job:%s/task:%d (%s:%d)", p->o->place[k].job, p->o->place[k].task,
             a->host, a->port);
}

/* The LOAD_STAGE spec for stage k (next = the chosen replica of k+1). */
static void kc_stage_spec(const kc_pipe *p, int k, int64_t batch_max, char *buf, size_t size)
{
    const char *file = strrchr(p->o->model_path, '/');
    file = file ? file + 1 : p->o->model_path;
    int first = k == 0 ? 0 : p->o->last_node[k - 1] + 1;
    char device[160] = "/CPU:0";
    if (p->o->place[k].has_device) {
        kc_devspec local = p->o->place[k];
        local.job[0] = '\0';
        local.task = local.replica = -1;
        kc_devspec_format(&local, device, sizeof device);
    }
    char next[512] = "null";
    if (k + 1 < p->o->n_stages) {
        const kc_cluster_addr *a = &p->task[k + 1]->replicas[p->replica[k + 1]];
        snprintf(next, sizeof next, "{\"address\":\"%s%s%s:%d\",\"name\":\"/job:%s/task:%d\"}",
                 a->ipv6 ? "[" : "", a->host, a->ipv6 ? "]" : "", a->port,
                 p->o->place[k + 1].job, p->o->place[k + 1].task);
    }
    snprintf(buf, size,
             "{\"stage\":%d,\"model\":\"%s\",\"sha256\":\"%s\",\"first\":%d,\"last\":%d,"
             "\"batch_max\":%lld,\"device\":\"%s\",\"next\":%s}",
             k, file, p->sha, first, p->o->last_node[k], (long long)batch_max, device, next);
}

/* Wait for one message on stage k's socket; fails naming the task. */
static kc_status kc_await(kc_pipe *p, int k, double until, kc_wire_msg *m)
{
    for (;;) {
        int left = (int)((until - kc_now()) * 1000);
        char who[300];
        kc_task_name(p, k, who, sizeof who);
        if (left <= 0) {
            p->failed_stage = k;
            return kc_fail(KC_ERR_DEVICE, "%s did not answer within %d ms (down, unreachable, "
                           "or not accepting this client's key)", who, kc_deadline(p));
        }
        int got = 0;
        KC_TRY(kc_net_recv(p->sock[k], 0, left, KC_P_MAX_MESSAGE, &p->rx, &got));
        if (!got)
            continue;
        if (kc_wire_decode(p->rx.buf, p->rx.len, KC_P_MAX_MESSAGE, m) != KC_OK)
            return kc_fail_context(KC_ERR_FORMAT, "%s sent a malformed message", who);
        if (m->type == KC_WIRE_ERROR) {
            p->failed_stage = (int)m->stage < p->o->n_stages ? (int)m->stage : k;
            return kc_fail(KC_ERR_DEVICE, "%.*s", (int)m->text_len, m->text);
        }
        return KC_OK;
    }
}

static kc_status kc_load_all(kc_pipe *p, int64_t batch_max)
{
    for (int k = 0; k < p->o->n_stages; k++)
        KC_TRY(kc_net_connect(p->net, &p->task[k]->replicas[p->replica[k]], &p->sock[k]));
    for (int k = 0; k < p->o->n_stages; k++) {
        char spec[2048];
        kc_stage_spec(p, k, batch_max, spec, sizeof spec);
        kc_wire_msg msg;
        kc_msg_text(&msg, KC_WIRE_LOAD_STAGE, ++p->next_id, (uint32_t)k, spec);
        KC_TRY(kc_net_send(p->sock[k], NULL, 0, &msg));
    }
    double until = kc_now() + kc_deadline(p) / 1000.0;
    for (int k = 0; k < p->o->n_stages; k++) {
        kc_wire_msg reply;
        p->failed_stage = k;
        KC_TRY(kc_await(p, k, until, &reply));
        if (reply.type != KC_WIRE_LOAD_REPLY)
            return kc_fail(KC_ERR_FORMAT, "unexpected answer to a stage load");
    }
    return KC_OK;
}

/* Rows [first, first+rows) of t as a new tensor. */
static kc_status kc_slice(const kc_tensor *t, int64_t first, int64_t rows, kc_tensor **out)
{
    kc_shape s = t->shape;
    size_t row = kc_dtype_size(t->dtype) * (size_t)(kc_shape_count(&s) / (s.dims[0] ? s.dims[0] : 1));
    s.dims[0] = rows;
    KC_TRY(kc_tensor_new(KC_F32, s.rank, s.dims, out));
    if (t->dtype == KC_F32) {
        memcpy((*out)->data, (const char *)t->data + row * (size_t)first, row * (size_t)rows);
        return KC_OK;
    }
    kc_tensor_free(*out);
    *out = NULL;
    return kc_fail(KC_ERR_ARG, "split runs take float32 inputs");
}

/* Position of value v among the model's inputs or outputs. */
static int kc_index_of(const int *list, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (list[i] == v)
            return i;
    return -1;
}

static kc_status kc_send_microbatches(kc_pipe *p, const kc_tensor *const *inputs,
                                      const int *order, int n_in, int64_t batch, int64_t mb,
                                      uint64_t *first_id)
{
    *first_id = p->next_id + 1;
    for (int64_t at = 0; at < batch; at += mb) {
        int64_t rows = batch - at < mb ? batch - at : mb;
        kc_tensor *part[KC_WIRE_MAX_TENSORS] = {0};
        kc_status s = KC_OK;
        for (int i = 0; s == KC_OK && i < n_in; i++)
            s = kc_slice(inputs[order[i]], at, rows, &part[i]);
        if (s == KC_OK) {
            kc_wire_msg msg;
            kc_msg_tensors(&msg, KC_WIRE_RUN, ++p->next_id, 0, part, n_in);
            s = kc_net_send(p->sock[0], NULL, 0, &msg);
        }
        for (int i = 0; i < n_in; i++)
            kc_tensor_free(part[i]);
        KC_TRY(s);
    }
    return KC_OK;
}

static kc_status kc_collect(kc_pipe *p, const int *order, int n_out, int64_t batch, int64_t mb,
                            uint64_t first_id, kc_tensor **outputs)
{
    int64_t n_mb = (batch + mb - 1) / mb;
    double until = kc_now() + kc_deadline(p) / 1000.0 * 2;
    for (int64_t got = 0; got < n_mb; got++) {
        kc_wire_msg m;
        KC_TRY(kc_await(p, 0, until, &m));
        if (m.type != KC_WIRE_RESULT || m.request_id < first_id ||
            m.request_id >= first_id + (uint64_t)n_mb || m.n_tensors != n_out)
            return kc_fail(KC_ERR_FORMAT, "unexpected answer from the pipeline");
        int64_t at = (int64_t)(m.request_id - first_id) * mb;
        if (p->o->stats && m.text_len > 2 && m.text[0] == '[') { /* per-stage compute ms */
            const char *c = m.text + 1;
            for (int k = 0; k < p->o->n_stages && c < m.text + m.text_len; k++) {
                char *end;
                double ms = strtod(c, &end);
                if (end == c)
                    break;
                p->o->stats->compute_ms[k] += ms;
                c = end + 1;
            }
        }
        for (int i = 0; i < n_out; i++) {
            const kc_wire_tensor *t = &m.tensors[i];
            kc_tensor **dst = &outputs[order[i]];
            if (!*dst) {
                kc_shape s = t->shape;
                s.dims[0] = batch;
                KC_TRY(kc_tensor_new(KC_F32, s.rank, s.dims, dst));
            }
            size_t row = t->bytes / (size_t)(t->shape.dims[0] ? t->shape.dims[0] : 1);
            if (t->dtype != KC_F32 || (*dst)->shape.rank != t->shape.rank ||
                at + t->shape.dims[0] > batch)
                return kc_fail(KC_ERR_FORMAT, "a result does not fit the batch");
            memcpy((char *)(*dst)->data + row * (size_t)at, t->data, t->bytes);
        }
    }
    return KC_OK;
}

/* Activation bytes entering each stage per micro-batch. */
static void kc_stage_in_bytes(const kc_pipe *p, int64_t mb, size_t *bytes)
{
    for (int k = 0; k < p->o->n_stages; k++) {
        int *v = NULL, n = 0;
        bytes[k] = 0;
        int cut = k == 0 ? 0 : p->o->last_node[k - 1] + 1;
        if (kc_model_live_values(p->m, cut, &v, &n) != KC_OK)
            continue;
        for (int i = 0; i < n; i++)
            bytes[k] += (size_t)(kc_model_value_sample_floats(p->m, v[i]) * mb) * sizeof(float);
        free(v);
    }
}

static kc_status kc_attempt(kc_pipe *p, const kc_tensor *const *inputs, int n_inputs,
                            kc_tensor **outputs, int n_outputs)
{
    const kc_graph *g = p->m->graph;
    int64_t batch = inputs[0]->shape.dims[0];
    int64_t mb = p->o->microbatch > 0 && p->o->microbatch < batch ? p->o->microbatch : batch;
    int *in_vals = NULL, *out_vals = NULL, n_in = 0, n_out = 0;
    int in_order[KC_WIRE_MAX_TENSORS], out_order[KC_WIRE_MAX_TENSORS];
    kc_status s = kc_model_live_values(p->m, 0, &in_vals, &n_in);
    if (s == KC_OK)
        s = kc_model_live_values(p->m, g->n_nodes, &out_vals, &n_out);
    if (s == KC_OK && (n_in > KC_WIRE_MAX_TENSORS || n_out != n_outputs || n_in > n_inputs))
        s = kc_fail(KC_ERR_UNSUPPORTED, "this model's inputs/outputs cannot be split");
    for (int i = 0; s == KC_OK && i < n_in; i++)
        in_order[i] = kc_index_of(g->inputs, g->n_inputs, in_vals[i]);
    for (int i = 0; s == KC_OK && i < n_out; i++)
        out_order[i] = kc_index_of(g->outputs, g->n_outputs, out_vals[i]);
    uint64_t first_id = 0;
    if (s == KC_OK)
        s = kc_load_all(p, mb);
    if (p->o->stats)
        memset(p->o->stats, 0, sizeof *p->o->stats);
    double t0 = kc_now();
    if (s == KC_OK)
        s = kc_send_microbatches(p, inputs, in_order, n_in, batch, mb, &first_id);
    if (s == KC_OK)
        s = kc_collect(p, out_order, n_out, batch, mb, first_id, outputs);
    if (s == KC_OK && p->o->stats) {
        p->o->stats->wall_s = kc_now() - t0;
        p->o->stats->n_microbatches = (int)((batch + mb - 1) / mb);
        kc_stage_in_bytes(p, mb, p->o->stats->in_bytes);
    }
    free(in_vals);
    free(out_vals);
    kc_disconnect(p);
    return s;
}

kc_status kc_pipeline_run(const kc_model *m, const kc_pipeline_options *o,
                          const kc_tensor *const *inputs, int n_inputs, kc_tensor **outputs,
                          int n_outputs)
{
    kc_pipe p = {.m = m, .o = o};
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = NULL;
    for (int k = 0; k < o->n_stages; k++) {
        p.task[k] = kc_cluster_find(&o->cluster, o->place[k].job, o->place[k].task);
        if (!p.task[k])
            return kc_last_error()[0] ? KC_ERR_ARG : kc_fail(KC_ERR_ARG, "no such task");
    }
    KC_TRY(kc_sha256_file(o->model_path, p.sha));
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
        if (k < 0 || p.replica[k] + 1 >= p.task[k]->n_replicas)
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
