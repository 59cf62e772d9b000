/* What the scheduler shows: per-layer stats of the last run, a Chrome /
 * Perfetto trace (per device a compute lane, a copy lane and the host's
 * enqueueing of each layer) and the
 * placement description (`kerasc summary --placement`). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/model_internal.h"
#include "runtime/sched_internal.h"

typedef struct kc_text {
    char *buf;
    size_t len, cap;
    int failed;
} kc_text;

static void kc_text_add(kc_text *t, const char *fmt, ...) KC_PRINTF(2, 3);
static void kc_text_add(kc_text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->buf && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
        char *grown = realloc(t->buf, cap);
        if (!grown) {
            t->failed = 1;
            return;
        }
        t->buf = grown;
        t->cap = cap;
    }
}

static double kc_mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static const char *kc_dev_label(const kc_sched *sc, int dev)
{
    return dev == KC_SCHED_HOST ? "/CPU:0" : sc->dev[dev].label;
}

static const char *kc_wmode_name(const kc_sched *sc, int i)
{
    const kc_snode *n = &sc->nodes[i];
    if (!kc_sched_layer(sc, i)->n_weights)
        return "-";
    if (n->dev == KC_SCHED_HOST || n->fallback)
        return "host";
    return n->wmode == KC_WMODE_STREAMED ? "streamed" : "resident";
}

static void kc_device_lines(const kc_sched *sc, kc_text *t)
{
    for (int d = 0; d < sc->n_dev; d++) {
        const kc_sdev *dv = &sc->dev[d];
        const kc_res_plan *r = &dv->res;
        char budget[48] = "unlimited";
        if (dv->budget)
            snprintf(budget, sizeof budget, "%.2f MiB", kc_mib(dv->budget));
        kc_text_add(t,
                    "device %s (%s): budget %s, peak %.2f MiB = activations %.2f + resident "
                    "weights %.2f + ring %d x %.2f + workspace %.2f MiB; link %.2f GB/s "
                    "measured%s\n",
                    dv->label, dv->name, budget, kc_mib(dv->peak),
                    kc_mib(dv->block_bytes[KC_BLOCK_ARENA]), kc_mib(r->resident_bytes), r->depth,
                    kc_mib(r->slot_bytes), kc_mib(dv->block_bytes[KC_BLOCK_WORKSPACE]),
                    dv->link_bps / 1e9, dv->link_pinned ? " (pinned)" : "");
        if (r->n_streamed && kc_sched_pin_wanted(sc, dv))
            kc_text_add(t, "streamed weights %s: %.2f of %.2f MiB pinned in host memory "
                           "(whole pages; the rest staged)\n",
                        dv->label, kc_mib(dv->pinned_bytes), kc_mib(dv->pinnable_bytes));
        else if (r->n_streamed)
            kc_text_add(t, "streamed weights %s: staged, not pinned (%s)\n", dv->label,
                        !dv->io->host_pin ? "the backend does not pin"
                        : sc->disk        ? "the disk tier"
                                          : "KC_PIN=0");
    }
}

kc_status kc_sched_build_stats(kc_sched *sc)
{
    const kc_graph *g = sc->s->graph;
    kc_text t = {0};
    kc_device_lines(sc, &t);
    kc_text_add(&t, "%-32s %-14s %-9s %10s %11s %8s\n", "layer", "device", "weights",
                "compute_ms", "transfer_ms", "GB/s");
    double compute = 0, transfer = 0, streamed = 0, bound_copy = 0, enqueue = 0;
    int n_enqueued = 0, untimed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kc_snode *n = &sc->nodes[i];
        if (n->compute_s < 0 && n->compute_s != KC_UNTIMED)
            continue;
        untimed += n->compute_s == KC_UNTIMED;
        if (n->compute_s >= 0)
            compute += n->compute_s;
        if (n->ran_on != KC_SCHED_HOST) {
            enqueue += n->t_end - n->t_start;
            n_enqueued++;
        }
        char xfer[32] = "", rate[32] = "";
        if (n->up_s >= 0) {
            transfer += n->up_s;
            streamed += (double)n->w_bytes;
            bound_copy += (double)n->w_bytes / sc->dev[n->dev].link_bps;
            snprintf(xfer, sizeof xfer, "%.3f", n->up_s * 1e3);
            if (n->up_s > 0)
                snprintf(rate, sizeof rate, "%.2f", (double)n->w_bytes / n->up_s / 1e9);
        }
        char ms[32] = "-";
        if (n->compute_s >= 0)
            snprintf(ms, sizeof ms, "%.3f", n->compute_s * 1e3);
        kc_text_add(&t, "%-32.32s %-14s %-9s %10s %11s %8s\n", g->nodes[i].layer->name,
                    kc_dev_label(sc, n->ran_on), kc_wmode_name(sc, i), ms, xfer, rate);
    }
    if (untimed)
        kc_text_add(&t,
                    "untimed: %d device layers (their times need a profile, --stats, or a "
                    "trace)\n", untimed);
    double bound = compute > bound_copy ? compute : bound_copy;
    /* A device layer's compute time (its events) also counts any wait for
     * the host to enqueue its work: when the host's enqueue time comes
     * close to it, the run is launch-bound, not device-bound. */
    if (sc->graph_note[0])
        kc_text_add(&t, "%s\n", sc->graph_note);
    if (n_enqueued)
        kc_text_add(&t, "host: enqueueing %d device layers took %.3f ms (%.1f us a layer)\n",
                    n_enqueued, enqueue * 1e3, enqueue * 1e6 / n_enqueued);
    size_t boundary_pinned = 0;
    for (int d = 0; d < sc->n_dev; d++)
        boundary_pinned += sc->dev[d].boundary_pinned;
    kc_text_add(&t,
                "total: compute %.3f ms, streamed %.2f MiB in %.3f ms (%.2f GB/s), boundary "
                "copies %.2f MiB",
                compute * 1e3, streamed / 1048576.0, transfer * 1e3,
                transfer > 0 ? streamed / transfer / 1e9 : 0.0, kc_mib(sc->boundary_bytes));
    if (boundary_pinned)
        kc_text_add(&t, ", from %.2f MiB of pinned host pages", kc_mib(boundary_pinned));
    kc_text_add(&t, "\n");
    if (untimed) /* the compute time is unknown: no bound */
        kc_text_add(&t, "run %.3f ms\n", sc->run_s * 1e3);
    else
        kc_text_add(&t,
                    "bound: max(compute %.3f ms, streamed bytes / link %.3f ms) = %.3f ms; run "
                    "%.3f ms; achieved/bound %.3f\n",
                    compute * 1e3, bound_copy * 1e3, bound * 1e3, sc->run_s * 1e3,
                    bound > 0 ? sc->run_s / bound : 0.0);
    if (t.failed) {
        free(t.buf);
        return KC_ERR_NOMEM;
    }
    free(sc->stats);
    sc->stats = t.buf;
    return KC_OK;
}

/* ---------------------------------------------------------------- trace */

static void kc_json_name(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void kc_trace_lane_names(const kc_sched *sc, FILE *f)
{
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{\"name\":\"/CPU:0 "
               "(host)\"}},\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":0,"
               "\"args\":{\"name\":\"compute\"}}");
    for (int d = 0; d < sc->n_dev; d++) {
        fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":",
                d + 1);
        char label[256];
        snprintf(label, sizeof label, "%s (%s, managed)", sc->dev[d].label, sc->dev[d].name);
        kc_json_name(f, label);
        fprintf(f, "}},\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"name\":\"compute\"}},\n{\"ph\":\"M\",\"name\":\"thread_name\","
                   "\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"copy\"}},\n{\"ph\":\"M\","
                   "\"name\":\"thread_name\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":"
                   "\"host enqueue\"}}",
                d + 1, d + 1, d + 1);
    }
}

kc_status kc_sched_write_trace(const kc_sched *sc, const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return kc_fail(KC_ERR_ARG, "trace path too long");
    FILE *f = fopen(tmp, "w");
    if (!f)
        return kc_fail(KC_ERR_IO, "%s: cannot write the trace", path);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    kc_trace_lane_names(sc, f);
    const kc_graph *g = sc->s->graph;
    for (int i = 0; i < g->n_nodes; i++) {
        const kc_snode *n = &sc->nodes[i];
        if (n->compute_s < 0)
            continue;
        int pid = n->ran_on == KC_SCHED_HOST ? 0 : n->ran_on + 1;
        fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"compute\",\"name\":");
        kc_json_name(f, g->nodes[i].layer->name);
        fprintf(f, ",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"class\":", pid,
                n->start_s * 1e6, n->compute_s * 1e6);
        kc_json_name(f, g->nodes[i].layer->class_name);
        fprintf(f, ",\"weights\":\"%s\"}}", kc_wmode_name(sc, i));
        if (pid > 0) { /* the host's side of a device layer: its enqueueing */
            fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"enqueue\",\"name\":");
            kc_json_name(f, g->nodes[i].layer->name);
            fprintf(f, ",\"pid\":%d,\"tid\":2,\"ts\":%.3f,\"dur\":%.3f}", pid,
                    n->t_start * 1e6, (n->t_end - n->t_start) * 1e6);
        }
        if (n->up_s >= 0) {
            fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"copy\",\"name\":");
            char name[300];
            snprintf(name, sizeof name, "upload %s", g->nodes[i].layer->name);
            kc_json_name(f, name);
            fprintf(f, ",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%zu}}",
                    n->dev + 1, n->up_at * 1e6, n->up_s * 1e6, n->w_bytes);
        }
    }
    fprintf(f, "\n]}\n");
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        remove(tmp);
        return kc_fail(KC_ERR_IO, "%s: cannot write the trace", path);
    }
    return KC_OK;
}

/* ------------------------------------------------------------- describe */

static int kc_home(const kc_sched *sc, int node)
{
    const kc_snode *n = &sc->nodes[node];
    return n->fallback ? KC_SCHED_HOST : n->dev;
}

/* The device a value is produced on (model inputs: the host). */
static int kc_value_home(const kc_sched *sc, int v)
{
    const kc_graph *g = sc->s->graph;
    int p = g->values[v].producer;
    while (p >= 0 && sc->s->fused.skip[p])
        p = g->values[g->nodes[p].inputs[0]].producer;
    return p < 0 ? KC_SCHED_HOST : kc_home(sc, p);
}

void kc_sched_describe(const kc_sched *sc, FILE *out)
{
    const kc_session *s = sc->s;
    const kc_graph *g = s->graph;
    kc_text t = {0};
    kc_device_lines(sc, &t);
    fputs(t.buf ? t.buf : "", out);
    free(t.buf);
    fprintf(out, "%-32s %-22s %-15s %-9s %12s %12s\n", "layer", "class", "device", "variables",
            "weight_bytes", "bytes_in");
    size_t cross[KC_SCHED_MAX_DEVICES + 1][KC_SCHED_MAX_DEVICES + 1] = {{0}};
    for (int i = 0; i < g->n_nodes; i++) {
        if (s->fused.skip[i])
            continue;
        const kc_node *node = &g->nodes[i];
        int home = kc_home(sc, i);
        size_t in_bytes = 0;
        for (int k = 0; k < node->n_inputs; k++) {
            int from = kc_value_home(sc, node->inputs[k]);
            if (from == home)
                continue;
            size_t b = (size_t)kc_shape_count(&s->plan.shape[node->inputs[k]]) * sizeof(float);
            in_bytes += b;
            cross[from + 1][home + 1] += b;
        }
        size_t wb = 0;
        const kc_layer *l = kc_sched_layer(sc, i);
        for (int w = 0; w < l->n_weights; w++)
            wb += (size_t)kc_shape_count(&l->weights[w].shape) * sizeof(float);
        char dev[64];
        snprintf(dev, sizeof dev, "%s%s", kc_dev_label(sc, home),
                 sc->nodes[i].fallback ? "*" : "");
        fprintf(out, "%-32.32s %-22.22s %-15s %-9s %12zu %12zu\n", node->layer->name,
                node->layer->class_name, dev, kc_wmode_name(sc, i), wb, in_bytes);
    }
    for (int k = 0; k < g->n_outputs; k++) {
        int from = kc_value_home(sc, g->outputs[k]);
        if (from != KC_SCHED_HOST)
            cross[from + 1][0] +=
                (size_t)kc_shape_count(&s->plan.shape[g->outputs[k]]) * sizeof(float);
    }
    if (sc->n_fallback)
        fprintf(out, "* the device has no kernel for this layer: it runs on /CPU:0 (%d layers)\n",
                sc->n_fallback);
    fprintf(out, "device boundaries (activation bytes per run):\n");
    int any = 0;
    for (int a = 0; a <= sc->n_dev; a++)
        for (int b = 0; b <= sc->n_dev; b++)
            if (cross[a][b]) {
                fprintf(out, "  %s -> %s: %zu\n", kc_dev_label(sc, a - 1), kc_dev_label(sc, b - 1),
                        cross[a][b]);
                any = 1;
            }
    if (!any)
        fprintf(out, "  none\n");
}
