/* TensorFlow ClusterSpec: which machines run which tasks.
 *
 * JSON, as tf.train.ClusterSpec takes it:
 *   {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"], "ps": ["10.0.0.3:2222"]}
 * with kerasc's extension for replicas (a task that is a list of addresses,
 * requests fail over among them):
 *   {"worker": [["h1:2222", "h3:2222"], "h2:2222"]}
 * or inline: "worker=h1:2222,h2:2222" and several jobs with ';':
 *   "worker=h1:2222,h2:2222;ps=h3:2222"; a task's replicas with '|':
 *   "worker=h1:2222|h3:2222,h2:2222".
 * Addresses are HOST:PORT (host: a DNS name, IPv4, or [IPv6]); port 1-65535. */
#ifndef KC_CLUSTER_H
#define KC_CLUSTER_H

#include <stddef.h>

#include "base/error.h"

#define KC_CLUSTER_MAX_JOBS 8
#define KC_CLUSTER_MAX_TASKS 64
#define KC_CLUSTER_MAX_REPLICAS 4
#define KC_CLUSTER_NAME_MAX 64
#define KC_CLUSTER_HOST_MAX 256

typedef struct kc_cluster_addr {
    char host[KC_CLUSTER_HOST_MAX]; /* without brackets for IPv6 */
    int port;
    int ipv6;
} kc_cluster_addr;

typedef struct kc_cluster_task {
    kc_cluster_addr replicas[KC_CLUSTER_MAX_REPLICAS];
    int n_replicas;                 /* >= 1 */
} kc_cluster_task;

typedef struct kc_cluster_job {
    char name[KC_CLUSTER_NAME_MAX]; /* [A-Za-z0-9_-]+ */
    kc_cluster_task tasks[KC_CLUSTER_MAX_TASKS];
    int n_tasks;
} kc_cluster_job;

typedef struct kc_cluster {
    kc_cluster_job jobs[KC_CLUSTER_MAX_JOBS];
    int n_jobs;
} kc_cluster;

/* Parse JSON text (label names it in errors). */
kc_status kc_cluster_parse_json(const char *text, size_t len, const char *label, kc_cluster *out);
/* Parse the inline form. */
kc_status kc_cluster_parse_inline(const char *text, kc_cluster *out);
/* --cluster ARG: an existing file is read as JSON (at most 1 MiB), anything
 * else containing '=' is the inline form. */
kc_status kc_cluster_load(const char *arg, kc_cluster *out);
/* The task, or NULL with an error naming job and task. */
const kc_cluster_task *kc_cluster_find(const kc_cluster *c, const char *job, int task);
/* "HOST:PORT" / "[v6]:PORT" -> addr; one-line error on anything else. */
kc_status kc_cluster_parse_addr(const char *text, kc_cluster_addr *out);
/* "tcp://host:port" (IPv6 in brackets) for ZeroMQ. */
void kc_cluster_endpoint(const kc_cluster_addr *a, char *buf, size_t size);
/* Is the address a loopback one (127.0.0.0/8, ::1, "localhost")? */
int kc_cluster_is_loopback(const kc_cluster_addr *a);

#endif
