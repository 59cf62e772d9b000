/* TensorFlow device strings: "/CPU:0", "/GPU:0", "/device:GPU:1",
 * "/job:worker/task:1/GPU:0", "/job:worker/replica:0/task:1/device:GPU:0",
 * and TF 1's lowercase "/cpu:0" / "/gpu:0". The job/task part names a
 * cluster task (the cluster issue); a local session accepts it only when
 * it names this process. */
#ifndef KC_DEVSPEC_H
#define KC_DEVSPEC_H

#include <stddef.h>

#include "backend/backend.h"

#define KC_DEVSPEC_JOB_MAX 64

typedef struct kc_devspec {
    char job[KC_DEVSPEC_JOB_MAX]; /* "" when absent */
    int replica;                  /* -1 when absent */
    int task;                     /* -1 when absent */
    int has_device;               /* 0: "/job:w/task:1" alone (any device) */
    kc_device_type type;
    int index;
} kc_devspec;

/* Parse `text`; on error the message quotes it and says what is wrong. */
kc_status kc_devspec_parse(const char *text, kc_devspec *out);
/* Canonical text, e.g. "/job:worker/task:1/device:GPU:0" or "/CPU:0". */
void kc_devspec_format(const kc_devspec *spec, char *buf, size_t size);
/* Same device (job/task compared only when both name one). */
int kc_devspec_equal(const kc_devspec *a, const kc_devspec *b);
int kc_devspec_is_local(const kc_devspec *spec);

#endif
