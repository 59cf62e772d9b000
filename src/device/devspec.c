/* Device-string parser, following TensorFlow's DeviceNameUtils::ParseFullName:
 * '/'-separated "key:value" parts in the order job, replica, task, device,
 * where the device part is "device:TYPE:N" or the legacy "TYPE:N". */
#include "device/devspec.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static kc_status kc_devspec_bad(const char *text, const char *why)
{
    return kc_fail(KC_ERR_ARG,
                   "device '%s': %s (expected e.g. /CPU:0, /GPU:0, /device:GPU:1 or "
                   "/job:worker/task:1/GPU:0)",
                   text, why);
}

static int kc_parse_index(const char *s, size_t len, int *out)
{
    if (len == 0 || len > 6)
        return 0;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

/* "CPU:0" / "gpu:1": the type and index; 0 if not that form. */
static int kc_parse_type_index(const char *s, size_t len, kc_device_type *type, int *index)
{
    const char *colon = memchr(s, ':', len);
    if (!colon)
        return 0;
    size_t tlen = (size_t)(colon - s);
    if (tlen == 3 && !strncasecmp(s, "CPU", 3))
        *type = KC_DEVICE_CPU;
    else if (tlen == 3 && !strncasecmp(s, "GPU", 3))
        *type = KC_DEVICE_GPU;
    else
        return 0;
    return kc_parse_index(colon + 1, len - tlen - 1, index);
}

static kc_status kc_devspec_part(const char *text, const char *p, size_t len, int *stage,
                                 kc_devspec *out)
{
    /* stage: 0 job, 1 replica, 2 task, 3 device, 4 done */
    if (len > 4 && !strncmp(p, "job:", 4) && *stage == 0) {
        size_t n = len - 4;
        if (n == 0 || n >= KC_DEVSPEC_JOB_MAX)
            return kc_devspec_bad(text, "bad job name");
        for (size_t i = 0; i < n; i++)
            if (!isalnum((unsigned char)p[4 + i]) && p[4 + i] != '_' && p[4 + i] != '-')
                return kc_devspec_bad(text, "bad job name");
        memcpy(out->job, p + 4, n);
        out->job[n] = '\0';
        *stage = 1;
        return KC_OK;
    }
    if (len > 8 && !strncmp(p, "replica:", 8) && *stage <= 1) {
        if (!kc_parse_index(p + 8, len - 8, &out->replica))
            return kc_devspec_bad(text, "bad replica number");
        *stage = 2;
        return KC_OK;
    }
    if (len > 5 && !strncmp(p, "task:", 5) && *stage <= 2) {
        if (!kc_parse_index(p + 5, len - 5, &out->task))
            return kc_devspec_bad(text, "bad task number");
        *stage = 3;
        return KC_OK;
    }
    if (*stage <= 3) {
        const char *d = p;
        size_t dlen = len;
        if (len > 7 && !strncmp(p, "device:", 7)) {
            d += 7;
            dlen -= 7;
        }
        if (kc_parse_type_index(d, dlen, &out->type, &out->index)) {
            out->has_device = 1;
            *stage = 4;
            return KC_OK;
        }
        if (memchr(d, ':', dlen) && dlen >= 3 && !isdigit((unsigned char)d[0]))
            return kc_devspec_bad(text, "unknown device type (kerasc knows CPU and GPU)");
    }
    return kc_devspec_bad(text, "unexpected part");
}

kc_status kc_devspec_parse(const char *text, kc_devspec *out)
{
    memset(out, 0, sizeof *out);
    out->replica = -1;
    out->task = -1;
    if (!text || !*text)
        return kc_fail(KC_ERR_ARG, "empty device string");
    if (strlen(text) > 256)
        return kc_fail(KC_ERR_ARG, "device string longer than 256 characters");
    const char *p = text;
    if (*p == '/')
        p++;
    int stage = 0;
    while (*p) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0)
            return kc_devspec_bad(text, "empty part");
        KC_TRY(kc_devspec_part(text, p, len, &stage, out));
        p += len;
        if (*p == '/')
            p++;
        if (end && !*p)
            return kc_devspec_bad(text, "trailing '/'");
    }
    if (!out->has_device && !out->job[0])
        return kc_devspec_bad(text, "no device");
    if ((out->task >= 0 || out->replica >= 0) && !out->job[0])
        return kc_devspec_bad(text, "a task or replica needs a job");
    return KC_OK;
}

void kc_devspec_format(const kc_devspec *s, char *buf, size_t size)
{
    char prefix[KC_DEVSPEC_JOB_MAX + 48] = "";
    if (s->job[0]) {
        int n = snprintf(prefix, sizeof prefix, "/job:%s", s->job);
        if (s->replica >= 0)
            n += snprintf(prefix + n, sizeof prefix - (size_t)n, "/replica:%d", s->replica);
        if (s->task >= 0)
            snprintf(prefix + n, sizeof prefix - (size_t)n, "/task:%d", s->task);
    }
    if (!s->has_device)
        snprintf(buf, size, "%s", prefix);
    else if (prefix[0])
        snprintf(buf, size, "%s/device:%s:%d", prefix, s->type == KC_DEVICE_GPU ? "GPU" : "CPU",
                 s->index);
    else
        snprintf(buf, size, "/%s:%d", s->type == KC_DEVICE_GPU ? "GPU" : "CPU", s->index);
}

int kc_devspec_equal(const kc_devspec *a, const kc_devspec *b)
{
    if (a->has_device != b->has_device)
        return 0;
    if (a->has_device && (a->type != b->type || a->index != b->index))
        return 0;
    if (a->job[0] && b->job[0] && (strcmp(a->job, b->job) || a->task != b->task))
        return 0;
    return 1;
}

int kc_devspec_is_local(const kc_devspec *s) { return !s->job[0]; }
