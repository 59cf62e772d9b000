/* File digests (see digest.h). */
#include "net/digest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void kc_sha256_begin(kc_sha256 *h)
{
    /* sodium_init is idempotent and thread-safe; SHA-256 itself needs no
     * random source, so a failure here cannot make a digest wrong. */
    int started = sodium_init();
    (void)started;
    crypto_hash_sha256_init(&h->state);
}

void kc_sha256_add(kc_sha256 *h, const void *data, size_t len)
{
    crypto_hash_sha256_update(&h->state, data, len);
}

void kc_sha256_end(kc_sha256 *h, char hex[KC_SHA256_HEX])
{
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&h->state, digest);
    sodium_bin2hex(hex, KC_SHA256_HEX, digest, sizeof digest);
}

void kc_sha256_mem(const void *data, size_t len, char hex[KC_SHA256_HEX])
{
    kc_sha256 h;
    kc_sha256_begin(&h);
    kc_sha256_add(&h, data, len);
    kc_sha256_end(&h, hex);
}

kc_status kc_sha256_file(const char *path, char hex[KC_SHA256_HEX])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kc_fail(KC_ERR_IO, "%s: %s", path, strerror(errno));
    unsigned char *buf = malloc(1 << 20);
    if (!buf) {
        fclose(f);
        return KC_ERR_NOMEM;
    }
    kc_sha256 h;
    kc_sha256_begin(&h);
    size_t n;
    while ((n = fread(buf, 1, 1 << 20, f)) > 0)
        kc_sha256_add(&h, buf, n);
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad)
        return kc_fail(KC_ERR_IO, "%s: read error", path);
    kc_sha256_end(&h, hex);
    return KC_OK;
}

typedef struct kc_digest_memo {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    char hex[KC_SHA256_HEX];
} kc_digest_memo;

#define KC_DIGEST_MEMOS 16
static kc_digest_memo kc_memos[KC_DIGEST_MEMOS];
static int kc_n_memos, kc_next_memo;

static int kc_memo_matches(const kc_digest_memo *m, const struct stat *st)
{
    return m->dev == st->st_dev && m->ino == st->st_ino && m->size == st->st_size &&
           m->mtime.tv_sec == st->st_mtim.tv_sec && m->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

kc_status kc_sha256_file_cached(const char *path, char hex[KC_SHA256_HEX])
{
    struct stat st;
    if (stat(path, &st) != 0)
        return kc_fail(KC_ERR_IO, "%s: %s", path, strerror(errno));
    for (int i = 0; i < kc_n_memos; i++)
        if (kc_memo_matches(&kc_memos[i], &st)) {
            memcpy(hex, kc_memos[i].hex, KC_SHA256_HEX);
            return KC_OK;
        }
    KC_TRY(kc_sha256_file(path, hex));
    kc_digest_memo *m = &kc_memos[kc_next_memo];
    kc_next_memo = (kc_next_memo + 1) % KC_DIGEST_MEMOS;
    kc_n_memos += kc_n_memos < KC_DIGEST_MEMOS;
    *m = (kc_digest_memo){st.st_dev, st.st_ino, st.st_size, st.st_mtim, ""};
    memcpy(m->hex, hex, KC_SHA256_HEX);
    return KC_OK;
}

int kc_sha256_hex_valid(const char *text)
{
    if (!text || strlen(text) != 64)
        return 0;
    for (const char *c = text; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return 0;
    return 1;
}
