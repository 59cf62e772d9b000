/* Calibrating the split planner against the real workers: each stage's
 * task reports its measured GEMM speed and free memory (STATUS) and a
 * 4 MiB probe times the link into it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "net/calibrate.h"
#include "net/planner.h"

/* The task's first replica that answers: a split run fails over the same
 * way, so a dead replica 0 must not stop the plan. */
static kc_status kc_calibrate_task(kc_net *net, const kc_cluster_task *t, int timeout_ms,
                                   size_t probe_bytes, char *text, size_t size, double *probe)
{
    kc_status s = KC_ERR_ARG;
    for (int r = 0; r < t->n_replicas; r++) {
        s = kc_cluster_query(net, &t->replicas[r], timeout_ms, probe_bytes, text, size, probe);
        if (s == KC_OK)
            return KC_OK;
        if (r + 1 < t->n_replicas)
            fprintf(stderr, "kerasc: warning: %s; asking the task's next replica\n",
                    kc_last_error());
    }
    return s;
}

kc_status kc_plan_calibrate(const kc_pipeline_options *o, kc_plan_worker *workers)
{
    kc_net *net = NULL;
    KC_TRY(kc_net_new(&o->sec, &net));
    kc_status s = KC_OK;
    double here_gflops = 0;
    for (int k = 0; s == KC_OK && k < o->n_stages; k++) {
        if (kc_pipeline_stage_is_local(o, k)) {
            /* A stage on this client: its speed is measured here; its
             * inputs come from here (stage 0) or over the link from the
             * previous stage's worker. */
            here_gflops = here_gflops > 0 ? here_gflops : kc_plan_gemm_gflops();
            workers[k].flops_per_s = here_gflops > 0 ? here_gflops * 1e9 : 1e10;
            workers[k].memory_bytes = 0;
            workers[k].bytes_per_s = k ? workers[k - 1].bytes_per_s : 1e12;
            continue;
        }
        const kc_cluster_task *t = kc_cluster_find(&o->cluster, o->place[k].job, o->place[k].task);
        if (!t) {
            s = KC_ERR_ARG;
            break;
        }
        char text[1024];
        double probe = -1;
        const size_t probe_bytes = (size_t)4 << 20;
        s = kc_calibrate_task(net, t, o->deadline_ms > 0 ? o->deadline_ms : 5000, probe_bytes,
                              text, sizeof text, &probe);
        if (s != KC_OK)
            break;
        cJSON *j = cJSON_Parse(text);
        const cJSON *gf = cJSON_GetObjectItemCaseSensitive(j, "gflops");
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "free_memory_mb");
        workers[k].flops_per_s = cJSON_IsNumber(gf) && gf->valuedouble > 0 ? gf->valuedouble * 1e9
                                                                            : 1e10;
        workers[k].memory_bytes = cJSON_IsNumber(mem) && mem->valuedouble > 0
                                      ? (size_t)mem->valuedouble << 20 : 0;
        workers[k].bytes_per_s = probe > 0 ? (double)probe_bytes / probe : 1e9;
        cJSON_Delete(j);
    }
    kc_net_free(net);
    return s;
}
