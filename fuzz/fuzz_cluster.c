/* libFuzzer target for the ClusterSpec parsers (JSON and inline), which
 * take text from the user's command line or from a file they were sent.
 *
 * The first byte picks the parser; the rest is the text. On success every
 * task of every job must be found by kc_cluster_find and each replica must
 * format as an endpoint and parse back to the same address; on failure the
 * message is one nonempty line. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kerasc.h"
#include "net/cluster.h"

static kc_cluster g_cluster;

static void kc_cluster_fuzz_check_error(void)
{
    const char *err = kc_last_error();
    if (err[0] == '\0' || strchr(err, '\n') != NULL || g_cluster.n_jobs != 0)
        abort();
}

/* "tcp://HOST:PORT" -> "HOST:PORT" must parse back to a. */
static void kc_cluster_fuzz_addr(const kc_cluster_addr *a)
{
    char ep[KC_CLUSTER_HOST_MAX + 32];
    kc_cluster_endpoint(a, ep, sizeof ep);
    if (strncmp(ep, "tcp://", 6) != 0)
        abort();
    kc_cluster_addr back;
    if (kc_cluster_parse_addr(ep + 6, &back) != KC_OK || strcmp(back.host, a->host) != 0 ||
        back.port != a->port || back.ipv6 != a->ipv6 || a->port < 1 || a->port > 65535)
        abort();
    (void)kc_cluster_is_loopback(a);
    /* A tiny buffer truncates, never overflows. */
    char small[5];
    kc_cluster_endpoint(a, small, sizeof small);
}

static void kc_cluster_fuzz_walk(void)
{
    if (g_cluster.n_jobs < 1 || g_cluster.n_jobs > KC_CLUSTER_MAX_JOBS)
        abort();
    for (int j = 0; j < g_cluster.n_jobs; j++) {
        const kc_cluster_job *job = &g_cluster.jobs[j];
        if (job->n_tasks < 1 || job->n_tasks > KC_CLUSTER_MAX_TASKS)
            abort();
        for (int t = 0; t < job->n_tasks; t++) {
            const kc_cluster_task *task = kc_cluster_find(&g_cluster, job->name, t);
            if (task != &job->tasks[t] || task->n_replicas < 1 ||
                task->n_replicas > KC_CLUSTER_MAX_REPLICAS)
                abort();
            for (int r = 0; r < task->n_replicas; r++)
                kc_cluster_fuzz_addr(&task->replicas[r]);
        }
        if (kc_cluster_find(&g_cluster, job->name, job->n_tasks) != NULL)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int json = data[0] & 1;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    kc_status st = json ? kc_cluster_parse_json(text, size - 1, "fuzz", &g_cluster)
                        : kc_cluster_parse_inline(text, &g_cluster);
    if (st != KC_OK)
        kc_cluster_fuzz_check_error();
    else
        kc_cluster_fuzz_walk();
    free(text);
    return 0;
}
