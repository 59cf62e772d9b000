/* The network-facing parsers of the multi-machine feature: ClusterSpec
 * (JSON and inline), the binary wire format and CURVE key files. Every
 * accepted form is checked field by field, and every rejection gives a
 * status and a one-line message that names the input and the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/tensor.h"
#include "kerasc.h"
#include "net/cluster.h"
#include "net/keys.h"
#include "net/wire.h"

/* ~540 KB: static rather than on the stack. */
static kc_cluster g_cluster;

static void expect_one_line_error(const char *want)
{
    const char *err = kc_last_error();
    if (err[0] == '\0' || strchr(err, '\n'))
        fail_msg("error is empty or more than one line: '%s'", err);
    if (want && !strstr(err, want))
        fail_msg("error '%s' does not contain '%s'", err, want);
}

static void write_text_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

/* A fresh directory under KC_TEST_TMP for one test. */
static void make_tmp_dir(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "%s/net_%s_XXXXXX", KC_TEST_TMP, tag);
    mkdir(KC_TEST_TMP, 0755);
    assert_non_null(mkdtemp(buf));
}

/* ============================================================== cluster */

static void expect_addr(const kc_cluster_task *t, int r, const char *host, int port, int ipv6)
{
    assert_true(r < t->n_replicas);
    assert_string_equal(t->replicas[r].host, host);
    assert_int_equal(t->replicas[r].port, port);
    assert_int_equal(t->replicas[r].ipv6, ipv6);
}

static void test_cluster_json_lists(void **state)
{
    (void)state;
    const char *j =
        "{\"worker\": [\"10.0.0.1:2222\", \"10.0.0.2:2222\"], \"ps\": [\"10.0.0.3:2222\"]}\n";
    assert_int_equal(kc_cluster_parse_json(j, strlen(j), "spec.json", &g_cluster), KC_OK);
    assert_int_equal(g_cluster.n_jobs, 2);
    assert_string_equal(g_cluster.jobs[0].name, "worker");
    assert_int_equal(g_cluster.jobs[0].n_tasks, 2);
    assert_string_equal(g_cluster.jobs[1].name, "ps");
    assert_int_equal(g_cluster.jobs[1].n_tasks, 1);
    expect_addr(&g_cluster.jobs[0].tasks[1], 0, "10.0.0.2", 2222, 0);
    assert_int_equal(g_cluster.jobs[0].tasks[1].n_replicas, 1);
    expect_addr(&g_cluster.jobs[1].tasks[0], 0, "10.0.0.3", 2222, 0);
}

static void test_cluster_json_replicas(void **state)
{
    (void)state;
    const char *j =
        "{\"worker\": [[\"h1:2222\", \"h3.example.com:2223\"], \"h2:2222\"],"
        " \"eval\": [\"[::1]:9000\", [\"[fe80::1]:1\", \"a-b.c:65535\", \"127.0.0.1:1\","
        " \"localhost:7\"]], \"chief_0\": [\"h:1\"]}";
    assert_int_equal(kc_cluster_parse_json(j, strlen(j), "spec", &g_cluster), KC_OK);
    assert_int_equal(g_cluster.n_jobs, 3);
    const kc_cluster_task *t = &g_cluster.jobs[0].tasks[0];
    assert_int_equal(t->n_replicas, 2);
    expect_addr(t, 0, "h1", 2222, 0);
    expect_addr(t, 1, "h3.example.com", 2223, 0);
    expect_addr(&g_cluster.jobs[1].tasks[0], 0, "::1", 9000, 1);
    t = &g_cluster.jobs[1].tasks[1];
    assert_int_equal(t->n_replicas, 4);
    expect_addr(t, 0, "fe80::1", 1, 1);
    expect_addr(t, 1, "a-b.c", 65535, 0);
    assert_string_equal(g_cluster.jobs[2].name, "chief_0");
}

static void test_cluster_json_limits_ok(void **state)
{
    (void)state;
    /* Exactly at the caps: 8 jobs, 64 tasks, 4 replicas, 253-char host. */
    static char j[65536];
    size_t n = (size_t)snprintf(j, sizeof j, "{\"big\": [");
    for (int i = 0; i < KC_CLUSTER_MAX_TASKS; i++)
        n += (size_t)snprintf(j + n, sizeof j - n, "%s\"h%d:%d\"", i ? "," : "", i, 1000 + i);
    n += (size_t)snprintf(j + n, sizeof j - n, "], \"rep\": [[\"a:1\",\"b:2\",\"c:3\",\"d:4\"]]");
    for (int i = 0; i < KC_CLUSTER_MAX_JOBS - 2; i++)
        n += (size_t)snprintf(j + n, sizeof j - n, ", \"j%d\": [\"x:1\"]", i);
    char host[254];
    memset(host, 'a', 253);
    host[253] = '\0';
    snprintf(j + n, sizeof j - n, ", \"j9\": [\"%s:1\"]}", host);
    assert_int_equal(kc_cluster_parse_json(j, strlen(j), "big", &g_cluster), KC_ERR_LIMIT);
    expect_one_line_error("more than 8 jobs");
    /* Drop one job so the 253-character host is the eighth. */
    char *drop = strstr(j, ", \"j0\": [\"x:1\"]");
    memmove(drop, drop + strlen(", \"j0\": [\"x:1\"]"),
            strlen(drop) - strlen(", \"j0\": [\"x:1\"]") + 1);
    assert_int_equal(kc_cluster_parse_json(j, strlen(j), "big", &g_cluster), KC_OK);
    assert_int_equal(g_cluster.n_jobs, 8);
    assert_int_equal(g_cluster.jobs[0].n_tasks, 64);
    expect_addr(&g_cluster.jobs[0].tasks[63], 0, "h63", 1063, 0);
    assert_int_equal(g_cluster.jobs[1].tasks[0].n_replicas, 4);
    assert_int_equal((int)strlen(g_cluster.jobs[7].tasks[0].replicas[0].host), 253);
}

static void test_cluster_inline_forms(void **state)
{
    (void)state;
    assert_int_equal(kc_cluster_parse_inline("worker=h1:2222,h2:2222", &g_cluster), KC_OK);
    assert_int_equal(g_cluster.n_jobs, 1);
    assert_int_equal(g_cluster.jobs[0].n_tasks, 2);
    expect_addr(&g_cluster.jobs[0].tasks[1], 0, "h2", 2222, 0);

    assert_int_equal(
        kc_cluster_parse_inline("worker=h1:2222|h3:2222,h2:2222;ps=[::1]:2223", &g_cluster), KC_OK);
    assert_int_equal(g_cluster.n_jobs, 2);
    assert_int_equal(g_cluster.jobs[0].tasks[0].n_replicas, 2);
    expect_addr(&g_cluster.jobs[0].tasks[0], 1, "h3", 2222, 0);
    expect_addr(&g_cluster.jobs[0].tasks[1], 0, "h2", 2222, 0);
    assert_string_equal(g_cluster.jobs[1].name, "ps");
    expect_addr(&g_cluster.jobs[1].tasks[0], 0, "::1", 2223, 1);
}

typedef struct cluster_case {
    int json; /* 1: JSON, 0: inline */
    const char *text;
    kc_status status;
    const char *message;
} cluster_case;

static const cluster_case cluster_bad[] = {
    {1, "{\"w\": [\"h:0\"]}", KC_ERR_ARG, "port 0 is outside 1-65535"},
    {1, "{\"w\": [\"h:65536\"]}", KC_ERR_ARG, "port 65536 is outside"},
    {1, "{\"w\": [\"h:x\"]}", KC_ERR_ARG, "port 'x' is not a number"},
    {1, "{\"w\": [\"h:\"]}", KC_ERR_ARG, "port '' is not a number"},
    {1, "{\"w\": [\"h:123456\"]}", KC_ERR_ARG, "port '123456'"},
    {1, "{\"w\": [\"h:-1\"]}", KC_ERR_ARG, "port '-1'"},
    {1, "{\"w\": [\"h\"]}", KC_ERR_ARG, "no port"},
    {1, "{\"w\": [\":22\"]}", KC_ERR_ARG, "empty host"},
    {1, "{\"w\": [\"h_1:22\"]}", KC_ERR_ARG, "outside A-Z a-z 0-9 . -"},
    {1, "{\"w\": [\"h 1:22\"]}", KC_ERR_ARG, "outside A-Z a-z 0-9 . -"},
    {1, "{\"w\": [\"h/x:22\"]}", KC_ERR_ARG, "outside A-Z"},
    {1, "{\"w\": [\"::1:22\"]}", KC_ERR_ARG, "IPv6 address in brackets"},
    {1, "{\"w\": [\"[zz::1]:22\"]}", KC_ERR_ARG, "not a valid IPv6 address"},
    {1, "{\"w\": [\"[::1]22\"]}", KC_ERR_ARG, "expected [IPV6]:PORT"},
    {1, "{\"w\": [\"[]:22\"]}", KC_ERR_ARG, "not a valid IPv6"},
    {1, "{\"w\": [\"10.0.0.256:22\"]}", KC_ERR_ARG, "not a valid IPv4 address"},
    {1, "{\"w\": []}", KC_ERR_FORMAT, "job 'w': empty task list"},
    {1, "{\"w\": [[]]}", KC_ERR_FORMAT, "job 'w' task 0: empty replica list"},
    {1, "{}", KC_ERR_FORMAT, "no jobs"},
    {1, "{\"w\": [\"a:1\"], \"w\": [\"b:1\"]}", KC_ERR_ARG, "job 'w' is given twice"},
    {1, "{\"w\": [[\"a:1\",\"a:2\",\"a:3\",\"a:4\",\"a:5\"]]}", KC_ERR_LIMIT,
     "more than 4 replicas"},
    {1, "{\"w\": \"h:1\"}", KC_ERR_FORMAT, "job 'w': expected a list"},
    {1, "{\"w\": {\"0\": \"h:1\"}}", KC_ERR_FORMAT, "job 'w': expected a list"},
    {1, "{\"w\": [1]}", KC_ERR_FORMAT, "task 0: expected an address string"},
    {1, "{\"w\": [null]}", KC_ERR_FORMAT, "task 0: expected an address string"},
    {1, "{\"w\": [[\"a:1\", 2]]}", KC_ERR_FORMAT, "replica address is not a string"},
    {1, "[\"h:1\"]", KC_ERR_FORMAT, "expected a JSON object"},
    {1, "\"w=h:1\"", KC_ERR_FORMAT, "expected a JSON object"},
    {1, "{\"w\": [\"h:1\"]", KC_ERR_FORMAT, "invalid JSON"},
    {1, "", KC_ERR_FORMAT, "invalid JSON"},
    {1, "{\"w\": [\"h:1\"]} {}", KC_ERR_FORMAT, "text after the JSON object"},
    {1, "{\"bad name\": [\"h:1\"]}", KC_ERR_ARG, "outside A-Z a-z 0-9 _ -"},
    {1, "{\"\": [\"h:1\"]}", KC_ERR_ARG, "empty job name"},
    {0, "", KC_ERR_ARG, "no jobs"},
    {0, "worker", KC_ERR_ARG, "expected JOB=HOST:PORT"},
    {0, "worker=", KC_ERR_ARG, "empty task list"},
    {0, "=h:1", KC_ERR_ARG, "empty job name"},
    {0, "worker=h:1;", KC_ERR_ARG, "empty job"},
    {0, ";worker=h:1", KC_ERR_ARG, "empty job"},
    {0, "worker=h:1,,h2:2", KC_ERR_ARG, "task 1: empty address"},
    {0, "worker=h:1,", KC_ERR_ARG, "task 1: empty address"},
    {0, "worker=h:1|", KC_ERR_ARG, "task 0: empty address"},
    {0, "w=h:1;w=h:2", KC_ERR_ARG, "job 'w' is given twice"},
    {0, "worker=h:0", KC_ERR_ARG, "port 0"},
    {0, "worker=h:65536", KC_ERR_ARG, "port 65536"},
    {0, "worker=h:x", KC_ERR_ARG, "port 'x'"},
    {0, "worker=h!:1", KC_ERR_ARG, "outside A-Z"},
    {0, "worker = h:1", KC_ERR_ARG, "outside A-Z a-z 0-9 _ -"},
    {0, "worker=a:1|b:2|c:3|d:4|e:5", KC_ERR_LIMIT, "more than 4 replicas"},
    {0, "a=h:1;b=h:1;c=h:1;d=h:1;e=h:1;f=h:1;g=h:1;h=h:1;i=h:1", KC_ERR_LIMIT, "more than 8 jobs"},
};

static void test_cluster_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cluster_bad / sizeof cluster_bad[0]; i++) {
        const cluster_case *c = &cluster_bad[i];
        kc_error_clear();
        kc_status st =
            c->json ? kc_cluster_parse_json(c->text, strlen(c->text), "spec.json", &g_cluster)
                    : kc_cluster_parse_inline(c->text, &g_cluster);
        if (st != c->status)
            fail_msg("'%s': status %s, want %s (%s)", c->text, kc_status_name(st),
                     kc_status_name(c->status), kc_last_error());
        expect_one_line_error(c->message);
        /* The error names the input: the label for JSON, the text inline. */
        expect_one_line_error(c->json ? "spec.json" : "cluster '");
        assert_int_equal(g_cluster.n_jobs, 0);
    }
}

static void test_cluster_too_many_tasks(void **state)
{
    (void)state;
    static char text[8192];
    size_t n = (size_t)snprintf(text, sizeof text, "worker=");
    for (int i = 0; i <= KC_CLUSTER_MAX_TASKS; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%sh%d:1", i ? "," : "", i);
    assert_int_equal(kc_cluster_parse_inline(text, &g_cluster), KC_ERR_LIMIT);
    expect_one_line_error("job 'worker': more than 64 tasks");
    /* The same in JSON. */
    static char j[8192];
    n = (size_t)snprintf(j, sizeof j, "{\"worker\": [");
    for (int i = 0; i <= KC_CLUSTER_MAX_TASKS; i++)
        n += (size_t)snprintf(j + n, sizeof j - n, "%s\"h%d:1\"", i ? "," : "", i);
    snprintf(j + n, sizeof j - n, "]}");
    assert_int_equal(kc_cluster_parse_json(j, strlen(j), "many", &g_cluster), KC_ERR_LIMIT);
    expect_one_line_error("more than 64 tasks");
    /* A 254-character host and a long job name. */
    char host[300];
    memset(host, 'a', 254);
    snprintf(host + 254, sizeof host - 254, ":1");
    assert_int_equal(kc_cluster_parse_addr(host, &g_cluster.jobs[0].tasks[0].replicas[0]),
                     KC_ERR_ARG);
    expect_one_line_error("host is longer than 253 characters");
    char name[200];
    memset(name, 'n', 100);
    snprintf(name + 100, sizeof name - 100, "=h:1");
    assert_int_equal(kc_cluster_parse_inline(name, &g_cluster), KC_ERR_ARG);
    expect_one_line_error("is longer than 63 characters");
    /* Inline text over the 64 KiB cap. */
    char *huge = malloc(70000);
    assert_non_null(huge);
    memset(huge, 'a', 69999);
    huge[69999] = '\0';
    assert_int_equal(kc_cluster_parse_inline(huge, &g_cluster), KC_ERR_LIMIT);
    expect_one_line_error("longer than");
    free(huge);
}

static void test_cluster_load(void **state)
{
    (void)state;
    char dir[512], path[600];
    make_tmp_dir(dir, sizeof dir, "cluster");
    snprintf(path, sizeof path, "%s/cluster.json", dir);
    write_text_file(path, "{\"worker\": [\"h1:2222\", \"h2:2222\"]}", 0644);
    assert_int_equal(kc_cluster_load(path, &g_cluster), KC_OK);
    assert_int_equal(g_cluster.jobs[0].n_tasks, 2);

    /* A file is JSON even if its name contains '='. */
    snprintf(path, sizeof path, "%s/a=b.json", dir);
    write_text_file(path, "{\"ps\": [\"h3:1\"]}", 0644);
    assert_int_equal(kc_cluster_load(path, &g_cluster), KC_OK);
    assert_string_equal(g_cluster.jobs[0].name, "ps");
    write_text_file(path, "ps=h3:1", 0644);
    assert_int_equal(kc_cluster_load(path, &g_cluster), KC_ERR_FORMAT);
    expect_one_line_error("invalid JSON");
    expect_one_line_error(path);

    assert_int_equal(kc_cluster_load("worker=h1:1,h2:2", &g_cluster), KC_OK);
    assert_int_equal(g_cluster.jobs[0].n_tasks, 2);

    /* Missing file without '=': says the file is missing. */
    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(kc_cluster_load(path, &g_cluster), KC_ERR_IO);
    expect_one_line_error("No such file");
    expect_one_line_error("missing.json");
    /* Missing file with '=': the inline form, and its error. */
    assert_int_equal(kc_cluster_load("worker=nope", &g_cluster), KC_ERR_ARG);
    expect_one_line_error("no port");
    /* A directory. */
    assert_int_equal(kc_cluster_load(dir, &g_cluster), KC_ERR_IO);
    expect_one_line_error("directory");
    assert_int_equal(kc_cluster_load("", &g_cluster), KC_ERR_ARG);
    expect_one_line_error(NULL);
    unlink(path);
    snprintf(path, sizeof path, "%s/cluster.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/a=b.json", dir);
    unlink(path);
    rmdir(dir);
}

static void test_cluster_find(void **state)
{
    (void)state;
    assert_int_equal(kc_cluster_parse_inline("worker=h1:1,h2:2;ps=h3:3", &g_cluster), KC_OK);
    const kc_cluster_task *t = kc_cluster_find(&g_cluster, "worker", 1);
    assert_non_null(t);
    expect_addr(t, 0, "h2", 2, 0);
    t = kc_cluster_find(&g_cluster, "ps", 0);
    assert_non_null(t);
    expect_addr(t, 0, "h3", 3, 0);

    assert_null(kc_cluster_find(&g_cluster, "worker", 2));
    expect_one_line_error("job 'worker' has no task 2 (it has tasks 0-1)");
    assert_null(kc_cluster_find(&g_cluster, "worker", -1));
    expect_one_line_error("no task -1");
    assert_null(kc_cluster_find(&g_cluster, "chief", 0));
    expect_one_line_error("no job 'chief' (jobs: worker, ps)");
    assert_null(kc_cluster_find(&g_cluster, NULL, 0));
    expect_one_line_error(NULL);
    static kc_cluster empty;
    assert_null(kc_cluster_find(&empty, "worker", 0));
    expect_one_line_error("jobs: none");
}

static void test_cluster_endpoint_loopback(void **state)
{
    (void)state;
    kc_cluster_addr a;
    char buf[300];
    assert_int_equal(kc_cluster_parse_addr("10.1.2.3:2222", &a), KC_OK);
    kc_cluster_endpoint(&a, buf, sizeof buf);
    assert_string_equal(buf, "tcp://10.1.2.3:2222");
    assert_false(kc_cluster_is_loopback(&a));
    assert_int_equal(kc_cluster_parse_addr("[2001:db8::7]:80", &a), KC_OK);
    kc_cluster_endpoint(&a, buf, sizeof buf);
    assert_string_equal(buf, "tcp://[2001:db8::7]:80");
    assert_false(kc_cluster_is_loopback(&a));
    assert_int_equal(kc_cluster_parse_addr("worker-1.example.com:9", &a), KC_OK);
    kc_cluster_endpoint(&a, buf, sizeof buf);
    assert_string_equal(buf, "tcp://worker-1.example.com:9");
    /* A small buffer truncates, NUL-terminated. */
    kc_cluster_endpoint(&a, buf, 8);
    assert_string_equal(buf, "tcp://w");

    static const char *const loop[] = {"127.0.0.1:1",        "127.1.2.3:1", "localhost:1",
                                       "LocalHost:1",        "[::1]:1",     "[::ffff:127.0.0.1]:1",
                                       "[0:0:0:0:0:0:0:1]:1"};
    for (size_t i = 0; i < sizeof loop / sizeof loop[0]; i++) {
        assert_int_equal(kc_cluster_parse_addr(loop[i], &a), KC_OK);
        if (!kc_cluster_is_loopback(&a))
            fail_msg("'%s' is loopback", loop[i]);
    }
    static const char *const remote[] = {
        "128.0.0.1:1", "10.0.0.127:1",        "127.example.com:1", "localhost.example.com:1",
        "[::2]:1",     "[::ffff:10.0.0.1]:1", "0.0.0.0:1"};
    for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++) {
        assert_int_equal(kc_cluster_parse_addr(remote[i], &a), KC_OK);
        if (kc_cluster_is_loopback(&a))
            fail_msg("'%s' is not loopback", remote[i]);
    }
}

/* ================================================================= wire */

static const float g_f32[6] = {1, 2, 3, 4, 5, 6};
static const int64_t g_i64 = -42;
static const uint8_t g_u8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static const uint16_t g_f16[3] = {0x3c00, 0x4000, 0x4200};

/* A RESULT with text and four tensors: f32 (2,3), i64 scalar, u8 (2,2,2),
 * bool (0,5) and f16 (3,). */
static void sample_msg(kc_wire_msg *m)
{
    memset(m, 0, sizeof *m);
    m->type = KC_WIRE_RESULT;
    m->request_id = 0x0102030405060708ull;
    m->stage = 3;
    m->flags = 0x80000001u;
    m->text = "{\"ok\": \"h\xc3\xa9\"}\n";
    m->text_len = strlen(m->text);
    int64_t d0[2] = {2, 3}, d2[3] = {2, 2, 2}, d3[2] = {0, 5}, d4[1] = {3};
    m->tensors[0] = (kc_wire_tensor){KC_F32, kc_shape_make(2, d0), g_f32, sizeof g_f32};
    m->tensors[1] = (kc_wire_tensor){KC_I64, kc_shape_make(0, NULL), &g_i64, sizeof g_i64};
    m->tensors[2] = (kc_wire_tensor){KC_U8, kc_shape_make(3, d2), g_u8, sizeof g_u8};
    m->tensors[3] = (kc_wire_tensor){KC_BOOL, kc_shape_make(2, d3), NULL, 0};
    m->tensors[4] = (kc_wire_tensor){KC_F16, kc_shape_make(1, d4), g_f16, sizeof g_f16};
    m->n_tensors = 5;
}

static unsigned char *encode_msg(const kc_wire_msg *m, size_t *len)
{
    size_t n = kc_wire_size(m);
    assert_true(n >= KC_WIRE_HEADER_BYTES);
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    assert_int_equal(kc_wire_encode(m, buf, n), n);
    *len = n;
    return buf;
}

static void expect_same_msg(const kc_wire_msg *a, const kc_wire_msg *b)
{
    assert_int_equal(a->type, b->type);
    assert_true(a->request_id == b->request_id);
    assert_int_equal(a->stage, b->stage);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->text_len, b->text_len);
    if (a->text_len)
        assert_memory_equal(a->text, b->text, a->text_len);
    assert_int_equal(a->n_tensors, b->n_tensors);
    for (int i = 0; i < a->n_tensors; i++) {
        const kc_wire_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        assert_int_equal(x->dtype, y->dtype);
        assert_true(kc_shape_equal(&x->shape, &y->shape));
        assert_int_equal(x->bytes, y->bytes);
        if (x->bytes)
            assert_memory_equal(x->data, y->data, x->bytes);
    }
}

static void test_wire_round_trip(void **state)
{
    (void)state;
    kc_wire_msg m, back;
    sample_msg(&m);
    size_t n;
    unsigned char *buf = encode_msg(&m, &n);
    assert_memory_equal(buf, "KCW1", 4);
    assert_int_equal(kc_wire_decode(buf, n, n, &back), KC_OK);
    expect_same_msg(&m, &back);
    /* Views point into the buffer, right after the text. */
    assert_ptr_equal(back.text + back.text_len, back.tensors[0].data);
    free(buf);

    /* No tensors, just an error line. */
    memset(&m, 0, sizeof m);
    m.type = KC_WIRE_ERROR;
    m.request_id = 1;
    m.text = "worker: out of memory";
    m.text_len = strlen(m.text);
    buf = encode_msg(&m, &n);
    assert_int_equal(n, KC_WIRE_HEADER_BYTES + m.text_len);
    assert_int_equal(kc_wire_decode(buf, n, 1 << 20, &back), KC_OK);
    expect_same_msg(&m, &back);
    free(buf);

    /* Nothing at all: a PING is just the header. */
    memset(&m, 0, sizeof m);
    m.type = KC_WIRE_PING;
    m.request_id = UINT64_MAX;
    buf = encode_msg(&m, &n);
    assert_int_equal(n, KC_WIRE_HEADER_BYTES);
    assert_int_equal(kc_wire_decode(buf, n, n, &back), KC_OK);
    expect_same_msg(&m, &back);
    free(buf);
}

static void test_wire_truncated_everywhere(void **state)
{
    (void)state;
    kc_wire_msg m, back;
    sample_msg(&m);
    size_t n;
    unsigned char *buf = encode_msg(&m, &n);
    for (size_t len = 0; len < n; len++) {
        /* A copy of exactly len bytes, so ASan sees any over-read. */
        unsigned char *cut = malloc(len ? len : 1);
        assert_non_null(cut);
        memcpy(cut, buf, len);
        kc_error_clear();
        if (kc_wire_decode(cut, len, n, &back) == KC_OK)
            fail_msg("a message cut to %zu of %zu bytes decoded", len, n);
        expect_one_line_error("wire message");
        assert_int_equal(back.n_tensors, 0);
        free(cut);
    }
    /* One byte too many. */
    unsigned char *longer = calloc(1, n + 1);
    memcpy(longer, buf, n);
    assert_int_equal(kc_wire_decode(longer, n + 1, n + 1, &back), KC_ERR_FORMAT);
    expect_one_line_error("body_bytes");
    free(longer);
    free(buf);
}

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

typedef struct wire_patch {
    size_t offset;
    uint64_t value;
    int bytes;
    kc_status status;
    const char *message;
} wire_patch;

/* Offsets in the sample: header 0..40, tensor 0's descriptor at 40
 * (dtype, rank, reserved, dims at 48 and 56), tensor 1's at 64. */
static const wire_patch wire_patches[] = {
    {0, 0x3157434c, 4, KC_ERR_FORMAT, "bad magic"},
    {3, '2', 1, KC_ERR_FORMAT, "bad magic"},
    {4, 2, 2, KC_ERR_UNSUPPORTED, "version 2"},
    {4, 0, 2, KC_ERR_UNSUPPORTED, "version 0"},
    {6, 0, 2, KC_ERR_FORMAT, "unknown type 0"},
    {6, KC_WIRE_TYPE_END, 2, KC_ERR_FORMAT, "unknown type 12"},
    {6, 0xffff, 2, KC_ERR_FORMAT, "unknown type 65535"},
    {8, 0, 8, KC_ERR_FORMAT, "request id 0"},
    {20, 65, 4, KC_ERR_LIMIT, "tensors (at most 64)"},
    {20, 0xffffffff, 4, KC_ERR_LIMIT, "tensors (at most 64)"},
    {20, 4, 4, KC_ERR_FORMAT, "body_bytes"},
    {20, 6, 4, KC_ERR_FORMAT, "tensor 5 has invalid dtype 123"}, /* reads the text's '{' */
    {24, 0, 8, KC_ERR_FORMAT, "body_bytes says 0"},
    {24, UINT64_MAX, 8, KC_ERR_FORMAT, "body_bytes says"},
    {36, 0, 4, KC_ERR_FORMAT, "text and tensors take"},
    {36, (1 << 20) + 1, 4, KC_ERR_LIMIT, "text of 1048577 bytes"},
    {36, 0xffffffff, 4, KC_ERR_LIMIT, "exceeds the limit"},
    {40, 0, 1, KC_ERR_FORMAT, "tensor 0 has invalid dtype 0"},
    {40, KC_BOOL + 1, 1, KC_ERR_FORMAT, "invalid dtype 14"},
    {40, 255, 1, KC_ERR_FORMAT, "invalid dtype 255"},
    {40, KC_F64, 1, KC_ERR_FORMAT, "text and tensors take"},
    {41, 9, 1, KC_ERR_LIMIT, "rank 9"},
    {41, 255, 1, KC_ERR_LIMIT, "rank 255"},
    {42, 1, 2, KC_ERR_FORMAT, "nonzero reserved"},
    {44, 0x01000000, 4, KC_ERR_FORMAT, "nonzero reserved"},
    {48, (uint64_t)-1, 8, KC_ERR_LIMIT, "tensor 0 dim 0 is -1"},
    {48, (uint64_t)1 << 63, 8, KC_ERR_LIMIT, "tensor 0 dim 0"},
    {48, ((uint64_t)1 << 40) + 1, 8, KC_ERR_LIMIT, "allowed 0 to 2^40"},
    {48, (uint64_t)1 << 40, 8, KC_ERR_LIMIT, "more than 2^40 elements"},
    {48, (uint64_t)1 << 38, 8, KC_ERR_FORMAT, "body_bytes"},
    {48, 0, 8, KC_ERR_FORMAT, "text and tensors take"},
    {64, 0, 1, KC_ERR_FORMAT, "tensor 1 has invalid dtype"},
};

static void test_wire_rejections(void **state)
{
    (void)state;
    kc_wire_msg m, back;
    sample_msg(&m);
    size_t n;
    unsigned char *good = encode_msg(&m, &n);
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < sizeof wire_patches / sizeof wire_patches[0]; i++) {
        const wire_patch *p = &wire_patches[i];
        memcpy(buf, good, n);
        put_le(buf + p->offset, p->value, p->bytes);
        kc_error_clear();
        kc_status st = kc_wire_decode(buf, n, n, &back);
        if (st != p->status)
            fail_msg("patch %zu (offset %zu): status %s, want %s (%s)", i, p->offset,
                     kc_status_name(st), kc_status_name(p->status), kc_last_error());
        expect_one_line_error(p->message);
        assert_int_equal(back.n_tensors, 0);
        assert_null(back.text);
    }
    /* The caller's cap. */
    assert_int_equal(kc_wire_decode(good, n, n - 1, &back), KC_ERR_LIMIT);
    expect_one_line_error("exceeds the limit");
    assert_int_equal(kc_wire_decode(NULL, 0, 100, &back), KC_ERR_FORMAT);
    expect_one_line_error("shorter than the 40-byte header");
    free(buf);
    free(good);
}

/* Dims whose product overflows 64 bits when multiplied naively. */
static void test_wire_dims_overflow(void **state)
{
    (void)state;
    unsigned char buf[40 + 8 + 64];
    memset(buf, 0, sizeof buf);
    put_le(buf, KC_WIRE_MAGIC, 4);
    put_le(buf + 4, 1, 2);
    put_le(buf + 6, KC_WIRE_RUN, 2);
    put_le(buf + 8, 7, 8);
    put_le(buf + 20, 1, 4);
    buf[40] = KC_F32;
    buf[41] = 8;
    for (int d = 0; d < 8; d++)
        put_le(buf + 48 + 8 * d, (uint64_t)1 << 40, 8);
    kc_wire_msg back;
    assert_int_equal(kc_wire_decode(buf, sizeof buf, sizeof buf, &back), KC_ERR_LIMIT);
    expect_one_line_error("more than 2^40 elements");
    /* A zero dim first makes every later product 0, but each dim is still capped. */
    put_le(buf + 48, 0, 8);
    put_le(buf + 56, (uint64_t)1 << 62, 8);
    assert_int_equal(kc_wire_decode(buf, sizeof buf, sizeof buf, &back), KC_ERR_LIMIT);
    expect_one_line_error("tensor 0 dim 1");
    /* Every dim 0 ... fine, an empty tensor. */
    memset(buf + 48, 0, 64);
    assert_int_equal(kc_wire_decode(buf, sizeof buf, sizeof buf, &back), KC_OK);
    assert_int_equal(back.tensors[0].bytes, 0);
    assert_int_equal(back.tensors[0].shape.rank, 8);
}

static void test_wire_too_many_tensors(void **state)
{
    (void)state;
    static unsigned char buf[40 + 65 * 8];
    memset(buf, 0, sizeof buf);
    put_le(buf, KC_WIRE_MAGIC, 4);
    put_le(buf + 4, 1, 2);
    put_le(buf + 6, KC_WIRE_RUN, 2);
    put_le(buf + 8, 7, 8);
    for (int i = 0; i < 65; i++)
        buf[40 + 8 * i] = KC_U8; /* rank 0: one byte each */
    kc_wire_msg back;
    put_le(buf + 20, 64, 4);
    put_le(buf + 24, 64, 8);
    /* 64 scalar u8 tensors: descriptors then 64 data bytes (re-using the
     * 65th descriptor's 8 bytes + 56 more would not fit, so build exactly). */
    static unsigned char ok[40 + 64 * 8 + 64];
    memcpy(ok, buf, 40 + 64 * 8);
    memset(ok + 40 + 64 * 8, 1, 64);
    assert_int_equal(kc_wire_decode(ok, sizeof ok, sizeof ok, &back), KC_OK);
    assert_int_equal(back.n_tensors, 64);
    put_le(buf + 20, 65, 4);
    assert_int_equal(kc_wire_decode(buf, sizeof buf, sizeof buf, &back), KC_ERR_LIMIT);
    expect_one_line_error("65 tensors (at most 64)");
    /* The encoder refuses the same. */
    kc_wire_msg m;
    memset(&m, 0, sizeof m);
    m.type = KC_WIRE_RUN;
    m.request_id = 1;
    m.n_tensors = 65;
    for (int i = 0; i < KC_WIRE_MAX_TENSORS; i++)
        m.tensors[i] = (kc_wire_tensor){KC_U8, kc_shape_make(0, NULL), ok, 1};
    assert_int_equal(kc_wire_size(&m), 0);
    m.n_tensors = -1;
    assert_int_equal(kc_wire_size(&m), 0);
}

/* Text rules: UTF-8 everywhere, no NUL, ERROR a single line. */
static void test_wire_text(void **state)
{
    (void)state;
#define T(s) s, sizeof(s) - 1
    static const struct {
        kc_wire_type type;
        const char *text;
        size_t len;
        int ok;
    } cases[] = {
        {KC_WIRE_ERROR, T("plain message"), 1},
        {KC_WIRE_ERROR, T("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), 1},
        {KC_WIRE_ERROR, T("two\nlines"), 0},
        {KC_WIRE_ERROR, T("cr\rhere"), 0},
        {KC_WIRE_STATUS_REPLY, T("{\n  \"a\": 1\n}"), 1},
        {KC_WIRE_STATUS_REPLY, T("nul\0inside"), 0},
        {KC_WIRE_ERROR, T("nul\0inside"), 0},
        {KC_WIRE_LOAD_STAGE, T("\xc0\x80"), 0},         /* overlong NUL */
        {KC_WIRE_LOAD_STAGE, T("\xe0\x80\xaf"), 0},     /* overlong '/' */
        {KC_WIRE_LOAD_STAGE, T("\xed\xa0\x80"), 0},     /* surrogate */
        {KC_WIRE_LOAD_STAGE, T("\xf4\x90\x80\x80"), 0}, /* > U+10FFFF */
        {KC_WIRE_LOAD_STAGE, T("\xf5\x80\x80\x80"), 0},
        {KC_WIRE_LOAD_STAGE, T("\xff"), 0},
        {KC_WIRE_LOAD_STAGE, T("ab\xc3"), 0}, /* cut sequence */
        {KC_WIRE_LOAD_STAGE, T("\xc3("), 0},
        {KC_WIRE_LOAD_STAGE, T("\xf4\x8f\xbf\xbf"), 1}, /* U+10FFFF */
    };
#undef T
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* Build the message by hand so bad text reaches the decoder. */
        unsigned char buf[64];
        memset(buf, 0, sizeof buf);
        put_le(buf, KC_WIRE_MAGIC, 4);
        put_le(buf + 4, 1, 2);
        put_le(buf + 6, cases[i].type, 2);
        put_le(buf + 8, 5, 8);
        put_le(buf + 24, cases[i].len, 8);
        put_le(buf + 36, cases[i].len, 4);
        memcpy(buf + 40, cases[i].text, cases[i].len);
        size_t n = 40 + cases[i].len;
        kc_wire_msg back, m;
        kc_status st = kc_wire_decode(buf, n, n, &back);
        memset(&m, 0, sizeof m);
        m.type = cases[i].type;
        m.request_id = 5;
        m.text = cases[i].text;
        m.text_len = cases[i].len;
        size_t size = kc_wire_size(&m);
        if (cases[i].ok) {
            assert_int_equal(st, KC_OK);
            assert_int_equal(size, n);
            unsigned char out[64];
            assert_int_equal(kc_wire_encode(&m, out, sizeof out), n);
            assert_memory_equal(out, buf, n);
        } else {
            if (st != KC_ERR_FORMAT)
                fail_msg("text case %zu decoded (%s)", i, kc_status_name(st));
            expect_one_line_error("text");
            /* The encoder refuses what the decoder would. */
            assert_int_equal(size, 0);
        }
    }
}

static void test_wire_encode_refuses(void **state)
{
    (void)state;
    kc_wire_msg m;
    sample_msg(&m);
    unsigned char buf[512];
    size_t n = kc_wire_size(&m);
    assert_true(n > 0 && n < sizeof buf);
    assert_int_equal(kc_wire_encode(&m, buf, n - 1), 0);
    expect_one_line_error("buffer of");
    m.tensors[0].bytes = 20;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
    expect_one_line_error("tensor 0 says 20 bytes");
    sample_msg(&m);
    m.tensors[2].dtype = KC_DTYPE_INVALID;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
    expect_one_line_error("tensor 2 has invalid dtype");
    sample_msg(&m);
    m.tensors[2].shape.rank = 9;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
    sample_msg(&m);
    m.tensors[0].shape.dims[0] = -1;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
    expect_one_line_error("dim 0 is -1");
    sample_msg(&m);
    m.tensors[0].data = NULL;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
    expect_one_line_error("no data");
    sample_msg(&m);
    m.request_id = 0;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
    sample_msg(&m);
    m.type = KC_WIRE_TYPE_END;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
    sample_msg(&m);
    m.text = NULL;
    assert_int_equal(kc_wire_encode(&m, buf, sizeof buf), 0);
}

static void test_wire_check(void **state)
{
    (void)state;
    kc_wire_msg m;
    sample_msg(&m);
    kc_wire_expect e[5];
    for (int i = 0; i < 5; i++) {
        e[i].dtype = m.tensors[i].dtype;
        e[i].shape = m.tensors[i].shape;
    }
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_OK);
    e[0].shape.dims[0] = -1; /* a free batch */
    assert_int_equal(kc_wire_check(&m, e, 5, 2), KC_OK);
    assert_int_equal(kc_wire_check(&m, e, 5, 1), KC_ERR_LIMIT);
    expect_one_line_error("tensor 0: batch 2 exceeds the limit of 1");

    assert_int_equal(kc_wire_check(&m, e, 4, 0), KC_ERR_SHAPE);
    expect_one_line_error("has 5 tensors, the stage expects 4");

    e[2].dtype = KC_F32;
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_ERR_SHAPE);
    expect_one_line_error("tensor 2: dtype uint8, the stage expects float32");
    e[2].dtype = KC_U8;

    e[4].shape.rank = 2;
    e[4].shape.dims[1] = 1;
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_ERR_SHAPE);
    expect_one_line_error("tensor 4: rank 1");
    e[4].shape = m.tensors[4].shape;

    e[2].shape.dims[1] = 3;
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_ERR_SHAPE);
    expect_one_line_error("tensor 2: dim 1 is 2, the stage expects 3");
    e[2].shape.dims[1] = -1;
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_OK);

    /* Two free batch dims must agree: tensor 2 has batch 2 like tensor 0,
     * tensor 3 has batch 0. */
    e[2].shape.dims[0] = -1;
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_OK);
    e[3].shape.dims[0] = -1;
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_ERR_SHAPE);
    expect_one_line_error("tensor 3: batch 0 differs from tensor 0's 2");

    e[1].shape.rank = 12;
    assert_int_equal(kc_wire_check(&m, e, 5, 0), KC_ERR_ARG);
    assert_int_equal(kc_wire_check(&m, NULL, 5, 0), KC_ERR_ARG);
    memset(&m, 0, sizeof m);
    assert_int_equal(kc_wire_check(&m, NULL, 0, 0), KC_OK);
}

static void test_wire_replay(void **state)
{
    (void)state;
    kc_wire_replay r = {0};
    assert_false(kc_wire_replay_accept(&r, 0));
    assert_true(kc_wire_replay_accept(&r, 1));
    assert_false(kc_wire_replay_accept(&r, 1));
    assert_true(kc_wire_replay_accept(&r, 5));
    assert_false(kc_wire_replay_accept(&r, 4));
    assert_false(kc_wire_replay_accept(&r, 5));
    assert_true(kc_wire_replay_accept(&r, 6));
    assert_true(kc_wire_replay_accept(&r, UINT64_MAX));
    assert_false(kc_wire_replay_accept(&r, UINT64_MAX));
    assert_false(kc_wire_replay_accept(NULL, 7));
}

/* ================================================================= keys */

static void file_mode(const char *path, mode_t want)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, want);
}

static void test_keys_round_trip(void **state)
{
    (void)state;
    char dir[512], name[600], path[700];
    make_tmp_dir(dir, sizeof dir, "keys");
    snprintf(name, sizeof name, "%s/worker0", dir);
    kc_keypair kp, back;
    assert_int_equal(kc_keypair_generate(&kp), KC_OK);
    assert_true(kc_key_valid(kp.public_z85));
    assert_true(kc_key_valid(kp.secret_z85));
    assert_int_equal(kc_keypair_save(&kp, name, 0), KC_OK);
    snprintf(path, sizeof path, "%s.key", name);
    file_mode(path, 0600);
    snprintf(path, sizeof path, "%s.pub", name);
    file_mode(path, 0644);

    assert_int_equal(kc_keypair_load(name, &back), KC_OK);
    assert_string_equal(back.public_z85, kp.public_z85);
    assert_string_equal(back.secret_z85, kp.secret_z85);
    snprintf(path, sizeof path, "%s.key", name);
    assert_int_equal(kc_keypair_load(path, &back), KC_OK);
    assert_string_equal(back.secret_z85, kp.secret_z85);

    char pub[KC_KEY_Z85_LEN + 1];
    snprintf(path, sizeof path, "%s.pub", name);
    assert_int_equal(kc_public_key_load(path, pub), KC_OK);
    assert_string_equal(pub, kp.public_z85);
    assert_int_equal(kc_public_key_load(kp.public_z85, pub), KC_OK);
    assert_string_equal(pub, kp.public_z85);

    /* No overwrite without force; force replaces both. */
    kc_keypair kp2;
    assert_int_equal(kc_keypair_generate(&kp2), KC_OK);
    assert_string_not_equal(kp2.secret_z85, kp.secret_z85);
    assert_int_equal(kc_keypair_save(&kp2, name, 0), KC_ERR_IO);
    expect_one_line_error("already exists (--force replaces it)");
    assert_int_equal(kc_keypair_load(name, &back), KC_OK);
    assert_string_equal(back.secret_z85, kp.secret_z85);
    assert_int_equal(kc_keypair_save(&kp2, name, 1), KC_OK);
    assert_int_equal(kc_keypair_load(name, &back), KC_OK);
    assert_string_equal(back.secret_z85, kp2.secret_z85);
    snprintf(path, sizeof path, "%s.key", name);
    file_mode(path, 0600);

    /* Only .pub present still refuses, and writes nothing. */
    unlink(path);
    assert_int_equal(kc_keypair_save(&kp, name, 0), KC_ERR_IO);
    expect_one_line_error(".pub: already exists");
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s.pub", name);
    unlink(path);

    /* Invalid pair, missing directory. */
    kc_keypair bad = kp;
    bad.secret_z85[3] = ' ';
    assert_int_equal(kc_keypair_save(&bad, name, 1), KC_ERR_ARG);
    snprintf(path, sizeof path, "%s/no/such/dir/k", dir);
    assert_int_equal(kc_keypair_save(&kp, path, 0), KC_ERR_IO);
    expect_one_line_error("No such file");
    assert_int_equal(kc_keypair_load(path, &back), KC_ERR_IO);
    expect_one_line_error("k.key: cannot open");
    rmdir(dir);
}

static void test_keys_permissions(void **state)
{
    (void)state;
    char dir[512], name[600], path[700];
    make_tmp_dir(dir, sizeof dir, "perm");
    snprintf(name, sizeof name, "%s/client", dir);
    kc_keypair kp, back;
    assert_int_equal(kc_keypair_generate(&kp), KC_OK);
    assert_int_equal(kc_keypair_save(&kp, name, 0), KC_OK);
    snprintf(path, sizeof path, "%s.key", name);
    static const mode_t modes[] = {0644, 0640, 0604, 0660, 0601};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        assert_int_equal(chmod(path, modes[i]), 0);
        assert_int_equal(kc_keypair_load(name, &back), KC_ERR_REFUSED);
        char want[64];
        snprintf(want, sizeof want, "permissions %04o are too open; chmod 600", (unsigned)modes[i]);
        expect_one_line_error(want);
        expect_one_line_error("client.key");
        assert_string_equal(back.secret_z85, "");
    }
    assert_int_equal(chmod(path, 0400), 0);
    assert_int_equal(kc_keypair_load(name, &back), KC_OK);
    unlink(path);
    snprintf(path, sizeof path, "%s.pub", name);
    unlink(path);
    rmdir(dir);
}

static void test_keys_bad_key_files(void **state)
{
    (void)state;
    char dir[512], path[600], text[512];
    make_tmp_dir(dir, sizeof dir, "badkey");
    snprintf(path, sizeof path, "%s/k.key", dir);
    kc_keypair a, b, back;
    assert_int_equal(kc_keypair_generate(&a), KC_OK);
    assert_int_equal(kc_keypair_generate(&b), KC_OK);

    /* Comments, blank lines, CRLF and spacing are fine. */
    snprintf(text, sizeof text, "# made by hand\r\n\r\n  public=%s\r\nsecret   =   %s  \r\n",
             a.public_z85, a.secret_z85);
    write_text_file(path, text, 0600);
    assert_int_equal(kc_keypair_load(path, &back), KC_OK);
    assert_string_equal(back.secret_z85, a.secret_z85);

    static const char *const wants[] = {
        "does not belong to the secret key",  "needs both",
        "line 2: expected 'public = KEY'",    "line 2: the key is given twice",
        "line 1: not a 40-character Z85 key", "needs both"};
    for (int i = 0; i < 6; i++) {
        switch (i) {
        case 0:
            snprintf(text, sizeof text, "public = %s\nsecret = %s\n", b.public_z85, a.secret_z85);
            break;
        case 1: snprintf(text, sizeof text, "public = %s\n", a.public_z85); break;
        case 2:
            snprintf(text, sizeof text, "public = %s\nprivate = %s\n", a.public_z85, a.secret_z85);
            break;
        case 3:
            snprintf(text, sizeof text, "public = %s\npublic = %s\n", a.public_z85, a.public_z85);
            break;
        case 4:
            snprintf(text, sizeof text, "public = %sx\nsecret = %s\n", a.public_z85, a.secret_z85);
            break;
        default: snprintf(text, sizeof text, "%s", ""); break;
        }
        write_text_file(path, text, 0600);
        assert_int_equal(kc_keypair_load(path, &back), KC_ERR_FORMAT);
        expect_one_line_error(wants[i]);
        expect_one_line_error("k.key");
    }
    /* Too big to be a key file. */
    char *big = malloc(5000);
    memset(big, '#', 4999);
    big[4999] = '\0';
    write_text_file(path, big, 0600);
    free(big);
    assert_int_equal(kc_keypair_load(path, &back), KC_ERR_LIMIT);
    expect_one_line_error("not a key file");
    unlink(path);
    /* A directory named like a key. */
    mkdir(path, 0700);
    assert_int_equal(kc_keypair_load(path, &back), KC_ERR_IO);
    expect_one_line_error("not a regular file");
    rmdir(path);
    rmdir(dir);
}

static void test_keys_valid(void **state)
{
    (void)state;
    kc_keypair kp;
    assert_int_equal(kc_keypair_generate(&kp), KC_OK);
    char k[64];
    assert_false(kc_key_valid(NULL));
    assert_false(kc_key_valid(""));
    snprintf(k, sizeof k, "%.39s", kp.public_z85);
    assert_false(kc_key_valid(k));
    snprintf(k, sizeof k, "%s0", kp.public_z85);
    assert_false(kc_key_valid(k));
    static const char bad_chars[] = {' ', '"', '\'', ',',  ';',    '_',
                                     '`', '|', '~',  '\\', '\x7f', '\x80'};
    for (size_t i = 0; i < sizeof bad_chars; i++) {
        snprintf(k, sizeof k, "%s", kp.public_z85);
        k[17] = bad_chars[i];
        assert_false(kc_key_valid(k));
    }
    /* 40 Z85 characters whose 5-char groups overflow 32 bits. */
    assert_false(kc_key_valid("################################"
                              "########"));
    assert_true(kc_key_valid("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"));

    char pub[KC_KEY_Z85_LEN + 1];
    assert_int_equal(kc_public_key_load("not-a-key-and-no-file", pub), KC_ERR_IO);
    expect_one_line_error("not a 40-character Z85 key");
    assert_string_equal(pub, "");
    assert_int_equal(kc_public_key_load("", pub), KC_ERR_ARG);
}

static void test_keys_authorized(void **state)
{
    (void)state;
    char dir[512], path[600], text[2048];
    make_tmp_dir(dir, sizeof dir, "auth");
    snprintf(path, sizeof path, "%s/authorized_keys", dir);
    kc_keypair k[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(kc_keypair_generate(&k[i]), KC_OK);
    snprintf(text, sizeof text,
             "# workers may talk to these clients\n"
             "\n"
             "%s alice@laptop\n"
             "   \t\n"
             "  # indented comment\n"
             "%s\r\n"
             "\t%s\tbuild server",
             k[0].public_z85, k[1].public_z85, k[2].public_z85);
    write_text_file(path, text, 0644);
    kc_key_list list;
    assert_int_equal(kc_key_list_load(path, &list), KC_OK);
    assert_int_equal(list.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(list.keys[i], k[i].public_z85);
        assert_true(kc_key_list_contains(&list, k[i].public_z85));
        /* Secret keys are not public keys. */
        assert_false(kc_key_list_contains(&list, k[i].secret_z85));
    }
    assert_false(kc_key_list_contains(&list, NULL));
    assert_false(kc_key_list_contains(&list, ""));
    char longer[64];
    snprintf(longer, sizeof longer, "%sX", k[0].public_z85);
    assert_false(kc_key_list_contains(&list, longer));
    kc_key_list_free(&list);
    assert_null(list.keys);
    assert_int_equal(list.n, 0);
    kc_key_list_free(&list);

    /* The first public key of the list file also loads as a .pub. */
    char pub[KC_KEY_Z85_LEN + 1];
    assert_int_equal(kc_public_key_load(path, pub), KC_OK);
    assert_string_equal(pub, k[0].public_z85);

    /* A bad key names its line. */
    static const char *const bad_lines[] = {"tooshort", "%s0",     "%sX comment",
                                            "%.39s~ x", "%.39s\"", "public = %s"};
    for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, bad_lines[i], k[1].public_z85);
        snprintf(text, sizeof text, "# list\n%s\n\n%s\n%s\n", k[0].public_z85, line,
                 k[2].public_z85);
        write_text_file(path, text, 0644);
        assert_int_equal(kc_key_list_load(path, &list), KC_ERR_FORMAT);
        expect_one_line_error("authorized_keys line 4: not a Z85 public key");
        assert_null(list.keys);
        assert_int_equal(list.n, 0);
    }
    /* No keys at all. */
    write_text_file(path, "# nobody\n\n", 0644);
    assert_int_equal(kc_key_list_load(path, &list), KC_ERR_FORMAT);
    expect_one_line_error("no keys");
    assert_int_equal(kc_public_key_load(path, pub), KC_ERR_FORMAT);
    expect_one_line_error("no public key");
    /* Too many keys. */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i <= KC_KEYS_MAX; i++)
        fprintf(f, "%s %d\n", k[i % 3].public_z85, i);
    fclose(f);
    assert_int_equal(kc_key_list_load(path, &list), KC_ERR_LIMIT);
    expect_one_line_error("more than 1024 keys");
    assert_null(list.keys);
    unlink(path);
    assert_int_equal(kc_key_list_load(path, &list), KC_ERR_IO);
    expect_one_line_error("No such file");
    rmdir(dir);
}

/* ========================================================== regressions */

#define FUZZ_CORPUS KC_TEST_DATA "/../../fuzz/corpus/"

static unsigned char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 16];
    *len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return buf;
}

/* The fuzzers' seed corpora, through the fuzz targets' own checks: every
 * wire seed but "truncated" decodes and re-encodes to the same bytes,
 * every cluster seed but the "*_bad" ones parses. The 60-second fuzz runs
 * found no crashing input; any found later is added to these folders. */
static void test_fuzz_seeds(void **state)
{
    (void)state;
    static const char *const wire[] = {"ping",         "error", "status_reply", "run_f32",
                                       "result_mixed", "rank8", "truncated"};
    for (size_t i = 0; i < sizeof wire / sizeof wire[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, FUZZ_CORPUS "wire/%s", wire[i]);
        size_t len;
        const unsigned char *data = read_whole(path, &len);
        kc_wire_msg m;
        kc_status st = kc_wire_decode(data, len, len, &m);
        if (strcmp(wire[i], "truncated") == 0) {
            assert_int_equal(st, KC_ERR_FORMAT);
            expect_one_line_error("wire message");
            continue;
        }
        if (st != KC_OK)
            fail_msg("%s: %s", wire[i], kc_last_error());
        size_t n;
        unsigned char *again = encode_msg(&m, &n);
        assert_int_equal(n, len);
        assert_memory_equal(again, data, len);
        free(again);
    }
    static const char *const cluster[] = {"json_lists",      "json_replicas", "json_bad",
                                          "inline_two_jobs", "inline_one",    "inline_bad"};
    for (size_t i = 0; i < sizeof cluster / sizeof cluster[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, FUZZ_CORPUS "cluster/%s", cluster[i]);
        size_t len;
        unsigned char *data = read_whole(path, &len);
        assert_true(len >= 1 && len < (1 << 16));
        data[len] = '\0';
        const char *text = (const char *)data + 1;
        kc_status st = (data[0] & 1) ? kc_cluster_parse_json(text, len - 1, cluster[i], &g_cluster)
                                     : kc_cluster_parse_inline(text, &g_cluster);
        if (strstr(cluster[i], "_bad")) {
            assert_int_not_equal(st, KC_OK);
            expect_one_line_error(NULL);
        } else if (st != KC_OK) {
            fail_msg("%s: %s", cluster[i], kc_last_error());
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_json_lists),
        cmocka_unit_test(test_cluster_json_replicas),
        cmocka_unit_test(test_cluster_json_limits_ok),
        cmocka_unit_test(test_cluster_inline_forms),
        cmocka_unit_test(test_cluster_errors),
        cmocka_unit_test(test_cluster_too_many_tasks),
        cmocka_unit_test(test_cluster_load),
        cmocka_unit_test(test_cluster_find),
        cmocka_unit_test(test_cluster_endpoint_loopback),
        cmocka_unit_test(test_wire_round_trip),
        cmocka_unit_test(test_wire_truncated_everywhere),
        cmocka_unit_test(test_wire_rejections),
        cmocka_unit_test(test_wire_dims_overflow),
        cmocka_unit_test(test_wire_too_many_tensors),
        cmocka_unit_test(test_wire_text),
        cmocka_unit_test(test_wire_encode_refuses),
        cmocka_unit_test(test_wire_check),
        cmocka_unit_test(test_wire_replay),
        cmocka_unit_test(test_keys_round_trip),
        cmocka_unit_test(test_keys_permissions),
        cmocka_unit_test(test_keys_bad_key_files),
        cmocka_unit_test(test_keys_valid),
        cmocka_unit_test(test_keys_authorized),
        cmocka_unit_test(test_fuzz_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
