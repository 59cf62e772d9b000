/* libFuzzer target for the wire decoder (kc_wire_decode), which reads
 * bytes straight off the network.
 *
 * Beyond "no crash, no over-read", it checks the contract: a failure gives
 * a nonempty one-line message and leaves no tensors behind; a success
 * re-encodes to exactly the input bytes (the format has one encoding per
 * message) and decodes again to identical fields. */
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/tensor.h"
#include "kerasc.h"
#include "net/receive.h"
#include "net/wire.h"

/* A decoded PUT_MODEL goes on into a worker's model store (its JSON header
 * and piece checks), in a private directory made once per process and
 * removed at exit. */
static char kc_fuzz_dir[] = "/tmp/kc_fuzz_receive_XXXXXX";

static void kc_wire_fuzz_cleanup(void)
{
    DIR *d = opendir(kc_fuzz_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", kc_fuzz_dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(kc_fuzz_dir);
}

static void kc_wire_fuzz_receive(const kc_wire_msg *m)
{
    static kc_receiver r;
    static int ready;
    if (!ready) {
        if (!mkdtemp(kc_fuzz_dir) || kc_receiver_init(&r, kc_fuzz_dir, 1 << 20) != KC_OK)
            abort();
        atexit(kc_wire_fuzz_cleanup);
        ready = 1;
    }
    uint64_t offset = 0;
    int complete = 0;
    if (kc_receiver_put(&r, m, &offset, &complete) != KC_OK) {
        const char *err = kc_last_error();
        if (err[0] == '\0' || strchr(err, '\n') != NULL || complete)
            abort();
    } else if (offset == 0 || offset > r.total) {
        abort();
    }
}

static void kc_wire_fuzz_check_error(const kc_wire_msg *m)
{
    const char *err = kc_last_error();
    if (err[0] == '\0' || strchr(err, '\n') != NULL || m->n_tensors != 0 || m->text != NULL)
        abort();
}

static void kc_wire_fuzz_same(const kc_wire_msg *a, const kc_wire_msg *b)
{
    if (a->type != b->type || a->request_id != b->request_id || a->stage != b->stage ||
        a->flags != b->flags || a->text_len != b->text_len || a->n_tensors != b->n_tensors)
        abort();
    if (a->text_len && memcmp(a->text, b->text, a->text_len) != 0)
        abort();
    for (int i = 0; i < a->n_tensors; i++) {
        const kc_wire_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (x->dtype != y->dtype || !kc_shape_equal(&x->shape, &y->shape) || x->bytes != y->bytes)
            abort();
        if (x->bytes && memcmp(x->data, y->data, x->bytes) != 0)
            abort();
    }
}

static void kc_wire_fuzz_round_trip(const kc_wire_msg *m, const uint8_t *data, size_t size)
{
    size_t need = kc_wire_size(m);
    if (need != size)
        abort();
    unsigned char *buf = malloc(need);
    if (!buf)
        return;
    if (kc_wire_encode(m, buf, need) != need || memcmp(buf, data, size) != 0)
        abort();
    kc_wire_msg back;
    if (kc_wire_decode(buf, need, need, &back) != KC_OK)
        abort();
    kc_wire_fuzz_same(m, &back);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kc_wire_msg m;
    /* A cap below the input size must refuse it, whatever the bytes. */
    if (size > 0 && kc_wire_decode(data, size, size - 1, &m) != KC_ERR_LIMIT)
        abort();
    if (kc_wire_decode(data, size, size, &m) != KC_OK) {
        kc_wire_fuzz_check_error(&m);
        return 0;
    }
    kc_wire_fuzz_round_trip(&m, data, size);
    if (m.type == KC_WIRE_PUT_MODEL)
        kc_wire_fuzz_receive(&m);
    return 0;
}
