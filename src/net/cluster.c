/* ClusterSpec parsing (see cluster.h). The spec comes from the user's
 * command line or a file they were sent, and its addresses end up in
 * ZeroMQ endpoints, so every name, host and port is checked against a
 * strict grammar and every count against the fixed capacities: nothing is
 * truncated silently and nothing outside the grammar reaches libzmq. */
#include "net/cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "format/fileio.h"

#define KC_CLUSTER_FILE_MAX ((size_t)1 << 20)
/* Longest DNS name (RFC 1035, without the trailing dot). */
#define KC_CLUSTER_DNS_MAX 253
/* The inline form lives on a command line; anything longer is a mistake. */
#define KC_CLUSTER_INLINE_MAX ((size_t)1 << 16)
/* "[" + 253 + "]:" + 5 digits, with room to spare. */
#define KC_CLUSTER_ADDR_TEXT_MAX 300

/* ------------------------------------------------------------- addresses */

static kc_status kc_cluster_parse_port(const char *text, const char *port, int *out)
{
    size_t n = strlen(port);
    int v = 0;
    /* Five digits at most, so the value cannot overflow before the range check. */
    if (n == 0 || n > 5)
        return kc_fail(KC_ERR_ARG, "address '%s': port '%s' is not a number from 1 to 65535", text,
                       port);
    for (size_t i = 0; i < n; i++) {
        if (port[i] < '0' || port[i] > '9')
            return kc_fail(KC_ERR_ARG, "address '%s': port '%s' is not a number from 1 to 65535",
                           text, port);
        v = v * 10 + (port[i] - '0');
    }
    if (v < 1 || v > 65535)
        return kc_fail(KC_ERR_ARG, "address '%s': port %d is outside 1-65535", text, v);
    *out = v;
    return KC_OK;
}

static int kc_cluster_all_digits_dots(const char *host)
{
    for (const char *p = host; *p; p++)
        if (!(*p == '.' || (*p >= '0' && *p <= '9')))
            return 0;
    return 1;
}

/* A DNS name or a dotted IPv4 address: [A-Za-z0-9.-], 1-253 characters. */
static kc_status kc_cluster_check_host(const char *text, const char *host, size_t n)
{
    if (n == 0)
        return kc_fail(KC_ERR_ARG, "address '%s': empty host (expected HOST:PORT)", text);
    if (n > KC_CLUSTER_DNS_MAX)
        return kc_fail(KC_ERR_ARG, "address '%.60s...': host is longer than %d characters", text,
                       KC_CLUSTER_DNS_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)host[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-';
        if (c == ':')
            return kc_fail(KC_ERR_ARG,
                           "address '%s': host contains ':' (write an IPv6 address in brackets, "
                           "[::1]:2222)",
                           text);
        if (!ok)
            return kc_fail(
                KC_ERR_ARG,
                "address '%s': host has a character outside A-Z a-z 0-9 . - (byte 0x%02x)", text,
                c);
    }
    return KC_OK;
}

/* A name of digits and dots is meant as IPv4; catch "10.0.0.256" here
 * rather than as a DNS failure on another machine later. */
static kc_status kc_cluster_check_ipv4(const char *text, const char *host)
{
    struct in_addr v4;
    if (kc_cluster_all_digits_dots(host) && inet_pton(AF_INET, host, &v4) != 1)
        return kc_fail(KC_ERR_ARG, "address '%s': '%s' is not a valid IPv4 address", text, host);
    return KC_OK;
}

static kc_status kc_cluster_check_ipv6(const char *text, const char *host)
{
    struct in6_addr v6;
    if (inet_pton(AF_INET6, host, &v6) != 1)
        return kc_fail(KC_ERR_ARG, "address '%s': '[%s]' is not a valid IPv6 address", text, host);
    return KC_OK;
}

kc_status kc_cluster_parse_addr(const char *text, kc_cluster_addr *out)
{
    if (!text || !out)
        return kc_fail(KC_ERR_ARG, "cluster address: missing argument");
    memset(out, 0, sizeof *out);
    size_t len = strnlen(text, KC_CLUSTER_ADDR_TEXT_MAX + 1);
    if (len > KC_CLUSTER_ADDR_TEXT_MAX)
        return kc_fail(KC_ERR_ARG, "address '%.40s...': longer than %d characters", text,
                       KC_CLUSTER_ADDR_TEXT_MAX);
    const char *port;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':')
            return kc_fail(KC_ERR_ARG, "address '%s': expected [IPV6]:PORT", text);
        size_t n = (size_t)(close - text - 1);
        if (n == 0 || n >= 46) /* INET6_ADDRSTRLEN */
            return kc_fail(KC_ERR_ARG, "address '%s': '[...]' is not a valid IPv6 address", text);
        memcpy(out->host, text + 1, n);
        out->host[n] = '\0';
        KC_TRY(kc_cluster_check_ipv6(text, out->host));
        out->ipv6 = 1;
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon)
            return kc_fail(KC_ERR_ARG, "address '%s': no port (expected HOST:PORT)", text);
        size_t n = (size_t)(colon - text);
        KC_TRY(kc_cluster_check_host(text, text, n));
        memcpy(out->host, text, n);
        out->host[n] = '\0';
        KC_TRY(kc_cluster_check_ipv4(text, out->host));
        port = colon + 1;
    }
    return kc_cluster_parse_port(text, port, &out->port);
}

void kc_cluster_endpoint(const kc_cluster_addr *a, char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    if (a->ipv6)
        snprintf(buf, size, "tcp://[%s]:%d", a->host, a->port);
    else
        snprintf(buf, size, "tcp://%s:%d", a->host, a->port);
}

int kc_cluster_is_loopback(const kc_cluster_addr *a)
{
    if (a->ipv6) {
        struct in6_addr v6;
        if (inet_pton(AF_INET6, a->host, &v6) != 1)
            return 0;
        if (IN6_IS_ADDR_LOOPBACK(&v6))
            return 1;
        /* ::ffff:127.x.y.z is IPv4 loopback seen through a v6 socket. */
        return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
    }
    if (strcasecmp(a->host, "localhost") == 0 || strcasecmp(a->host, "localhost.") == 0)
        return 1;
    struct in_addr v4;
    if (inet_pton(AF_INET, a->host, &v4) != 1)
        return 0;
    return ((const unsigned char *)&v4.s_addr)[0] == 127;
}

/* ------------------------------------------------------------- structure */

static kc_status kc_cluster_check_name(const char *name, size_t n)
{
    if (n == 0)
        return kc_fail(KC_ERR_ARG, "empty job name");
    if (n >= KC_CLUSTER_NAME_MAX)
        return kc_fail(KC_ERR_ARG, "job name '%.*s...' is longer than %d characters", 32, name,
                       KC_CLUSTER_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return kc_fail(KC_ERR_ARG, "job name '%.*s' has a character outside A-Z a-z 0-9 _ -",
                           (int)n, name);
    }
    return KC_OK;
}

/* Add a job named name[0..n) to c; refuses duplicates and a ninth job. */
static kc_status kc_cluster_add_job(kc_cluster *c, const char *name, size_t n, kc_cluster_job **job)
{
    KC_TRY(kc_cluster_check_name(name, n));
    for (int i = 0; i < c->n_jobs; i++)
        if (strlen(c->jobs[i].name) == n && memcmp(c->jobs[i].name, name, n) == 0)
            return kc_fail(KC_ERR_ARG, "job '%.*s' is given twice", (int)n, name);
    if (c->n_jobs >= KC_CLUSTER_MAX_JOBS)
        return kc_fail(KC_ERR_LIMIT, "more than %d jobs", KC_CLUSTER_MAX_JOBS);
    *job = &c->jobs[c->n_jobs++];
    memcpy((*job)->name, name, n);
    (*job)->name[n] = '\0';
    return KC_OK;
}

static kc_status kc_cluster_add_task(kc_cluster_job *job, kc_cluster_task **task)
{
    if (job->n_tasks >= KC_CLUSTER_MAX_TASKS)
        return kc_fail(KC_ERR_LIMIT, "job '%s': more than %d tasks", job->name,
                       KC_CLUSTER_MAX_TASKS);
    *task = &job->tasks[job->n_tasks++];
    return KC_OK;
}

static kc_status kc_cluster_add_replica(const kc_cluster_job *job, kc_cluster_task *task,
                                        const char *addr)
{
    int t = (int)(task - job->tasks);
    if (task->n_replicas >= KC_CLUSTER_MAX_REPLICAS)
        return kc_fail(KC_ERR_LIMIT, "job '%s' task %d: more than %d replicas", job->name, t,
                       KC_CLUSTER_MAX_REPLICAS);
    kc_status st = kc_cluster_parse_addr(addr, &task->replicas[task->n_replicas]);
    if (st != KC_OK)
        return kc_fail_context(st, "job '%s' task %d", job->name, t);
    task->n_replicas++;
    return KC_OK;
}

/* ------------------------------------------------------------------ JSON */

static kc_status kc_cluster_json_task(kc_cluster_job *job, const cJSON *item)
{
    kc_cluster_task *task = NULL;
    KC_TRY(kc_cluster_add_task(job, &task));
    int t = job->n_tasks - 1;
    if (cJSON_IsString(item))
        return kc_cluster_add_replica(job, task, item->valuestring);
    if (!cJSON_IsArray(item))
        return kc_fail(KC_ERR_FORMAT,
                       "job '%s' task %d: expected an address string or a list of replica "
                       "addresses",
                       job->name, t);
    const cJSON *r;
    cJSON_ArrayForEach (r, item) {
        if (!cJSON_IsString(r))
            return kc_fail(KC_ERR_FORMAT, "job '%s' task %d: a replica address is not a string",
                           job->name, t);
        KC_TRY(kc_cluster_add_replica(job, task, r->valuestring));
    }
    if (task->n_replicas == 0)
        return kc_fail(KC_ERR_FORMAT, "job '%s' task %d: empty replica list", job->name, t);
    return KC_OK;
}

static kc_status kc_cluster_json_job(kc_cluster *c, const cJSON *member)
{
    kc_cluster_job *job = NULL;
    const char *name = member->string ? member->string : "";
    KC_TRY(kc_cluster_add_job(c, name, strlen(name), &job));
    if (!cJSON_IsArray(member))
        return kc_fail(KC_ERR_FORMAT, "job '%s': expected a list of task addresses", job->name);
    const cJSON *item;
    cJSON_ArrayForEach (item, member) {
        KC_TRY(kc_cluster_json_task(job, item));
    }
    if (job->n_tasks == 0)
        return kc_fail(KC_ERR_FORMAT, "job '%s': empty task list", job->name);
    return KC_OK;
}

static kc_status kc_cluster_json_root(const cJSON *root, kc_cluster *out)
{
    if (!cJSON_IsObject(root))
        return kc_fail(KC_ERR_FORMAT, "expected a JSON object of job name -> list of addresses");
    const cJSON *member;
    cJSON_ArrayForEach (member, root) {
        KC_TRY(kc_cluster_json_job(out, member));
    }
    if (out->n_jobs == 0)
        return kc_fail(KC_ERR_FORMAT, "no jobs");
    return KC_OK;
}

static int kc_cluster_only_space(const char *p, const char *end)
{
    for (; p < end; p++)
        if (!(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            return 0;
    return 1;
}

kc_status kc_cluster_parse_json(const char *text, size_t len, const char *label, kc_cluster *out)
{
    if (!label)
        label = "cluster";
    if (!text || !out)
        return kc_fail(KC_ERR_ARG, "%s: missing argument", label);
    memset(out, 0, sizeof *out);
    if (len > KC_CLUSTER_FILE_MAX)
        return kc_fail(KC_ERR_LIMIT, "%s: cluster spec is larger than %zu bytes", label,
                       KC_CLUSTER_FILE_MAX);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return kc_fail(KC_ERR_FORMAT, "%s: invalid JSON near byte %zu", label, at);
    }
    kc_status st = KC_OK;
    /* cJSON stops at the end of the first value; a second one is a mistake. */
    if (!end || end < text || end > text + len || !kc_cluster_only_space(end, text + len))
        st = kc_fail(KC_ERR_FORMAT, "%s: text after the JSON object", label);
    else
        st = kc_cluster_json_root(root, out);
    cJSON_Delete(root);
    if (st != KC_OK) {
        memset(out, 0, sizeof *out);
        return kc_fail_context(st, "%s", label);
    }
    return KC_OK;
}

/* ---------------------------------------------------------------- inline */

/* Copy [p, end) into buf (cap bytes incl. NUL); refuses what does not fit. */
static kc_status kc_cluster_copy(const char *p, const char *end, char *buf, size_t cap)
{
    size_t n = (size_t)(end - p);
    if (n >= cap)
        return kc_fail(KC_ERR_ARG, "address '%.40s...' is too long", p);
    memcpy(buf, p, n);
    buf[n] = '\0';
    return KC_OK;
}

/* Find the next sep in [p, end), or end. */
static const char *kc_cluster_next(const char *p, const char *end, char sep)
{
    const char *q = memchr(p, sep, (size_t)(end - p));
    return q ? q : end;
}

/* "h1:2222|h3:2222" -> one task. */
static kc_status kc_cluster_inline_task(kc_cluster_job *job, const char *p, const char *end)
{
    kc_cluster_task *task = NULL;
    KC_TRY(kc_cluster_add_task(job, &task));
    for (;;) {
        const char *bar = kc_cluster_next(p, end, '|');
        if (bar == p)
            return kc_fail(KC_ERR_ARG, "job '%s' task %d: empty address", job->name,
                           job->n_tasks - 1);
        char addr[KC_CLUSTER_ADDR_TEXT_MAX + 1];
        KC_TRY(kc_cluster_copy(p, bar, addr, sizeof addr));
        KC_TRY(kc_cluster_add_replica(job, task, addr));
        if (bar == end)
            return KC_OK;
        p = bar + 1;
    }
}

/* "worker=h1:2222,h2:2222" -> one job. */
static kc_status kc_cluster_inline_job(kc_cluster *c, const char *p, const char *end)
{
    const char *eq = kc_cluster_next(p, end, '=');
    if (eq == end)
        return kc_fail(KC_ERR_ARG, "'%.*s': expected JOB=HOST:PORT[,HOST:PORT...]",
                       (int)(end - p > 80 ? 80 : end - p), p);
    kc_cluster_job *job = NULL;
    KC_TRY(kc_cluster_add_job(c, p, (size_t)(eq - p), &job));
    p = eq + 1;
    if (p == end)
        return kc_fail(KC_ERR_ARG, "job '%s': empty task list", job->name);
    for (;;) {
        const char *comma = kc_cluster_next(p, end, ',');
        if (comma == p)
            return kc_fail(KC_ERR_ARG, "job '%s' task %d: empty address", job->name, job->n_tasks);
        KC_TRY(kc_cluster_inline_task(job, p, comma));
        if (comma == end)
            return KC_OK;
        p = comma + 1;
    }
}

static kc_status kc_cluster_inline_all(const char *text, size_t len, kc_cluster *out)
{
    const char *p = text, *end = text + len;
    if (len == 0)
        return kc_fail(KC_ERR_ARG, "no jobs");
    for (;;) {
        const char *semi = kc_cluster_next(p, end, ';');
        if (semi == p)
            return kc_fail(KC_ERR_ARG, "empty job between ';'");
        KC_TRY(kc_cluster_inline_job(out, p, semi));
        if (semi == end)
            return KC_OK;
        p = semi + 1;
    }
}

kc_status kc_cluster_parse_inline(const char *text, kc_cluster *out)
{
    if (!text || !out)
        return kc_fail(KC_ERR_ARG, "cluster: missing argument");
    memset(out, 0, sizeof *out);
    size_t len = strnlen(text, KC_CLUSTER_INLINE_MAX + 1);
    if (len > KC_CLUSTER_INLINE_MAX)
        return kc_fail(KC_ERR_LIMIT, "cluster: inline spec is longer than %zu characters",
                       KC_CLUSTER_INLINE_MAX);
    kc_status st = kc_cluster_inline_all(text, len, out);
    if (st != KC_OK) {
        memset(out, 0, sizeof *out);
        return kc_fail_context(st, "cluster '%.60s%s'", text, len > 60 ? "..." : "");
    }
    return KC_OK;
}

/* ------------------------------------------------------------------ load */

kc_status kc_cluster_load(const char *arg, kc_cluster *out)
{
    if (!arg || !*arg || !out)
        return kc_fail(KC_ERR_ARG, "cluster: empty --cluster argument");
    struct stat st;
    if (stat(arg, &st) == 0) {
        char *data = NULL;
        size_t len = 0;
        KC_TRY(kc_read_file(arg, KC_CLUSTER_FILE_MAX, &data, &len));
        kc_status status = kc_cluster_parse_json(data, len, arg, out);
        free(data);
        return status;
    }
    int err = errno;
    if (strchr(arg, '='))
        return kc_cluster_parse_inline(arg, out);
    memset(out, 0, sizeof *out);
    return kc_fail(KC_ERR_IO,
                   "cluster '%s': cannot open: %s (and not an inline spec JOB=HOST:PORT,...)", arg,
                   strerror(err));
}

const kc_cluster_task *kc_cluster_find(const kc_cluster *c, const char *job, int task)
{
    if (!c || !job) {
        kc_fail(KC_ERR_ARG, "cluster: no job given");
        return NULL;
    }
    for (int i = 0; i < c->n_jobs; i++) {
        const kc_cluster_job *j = &c->jobs[i];
        if (strcmp(j->name, job) != 0)
            continue;
        if (task < 0 || task >= j->n_tasks) {
            kc_fail(KC_ERR_ARG, "cluster: job '%s' has no task %d (it has tasks 0-%d)", job, task,
                    j->n_tasks - 1);
            return NULL;
        }
        return &j->tasks[task];
    }
    char names[KC_CLUSTER_MAX_JOBS * (KC_CLUSTER_NAME_MAX + 2) + 1] = "";
    for (int i = 0; i < c->n_jobs && i < KC_CLUSTER_MAX_JOBS; i++) {
        if (i)
            strcat(names, ", ");
        strncat(names, c->jobs[i].name, KC_CLUSTER_NAME_MAX - 1);
    }
    kc_fail(KC_ERR_ARG, "cluster: no job '%.64s' (jobs: %s)", job, c->n_jobs ? names : "none");
    return NULL;
}
