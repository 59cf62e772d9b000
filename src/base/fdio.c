/* Whole-buffer writes and reads (see fdio.h). */
#include "base/fdio.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

kc_status kc_write_full(int fd, const void *buf, size_t len, const char *what)
{
    const unsigned char *p = buf;
    while (len > 0) {
        size_t chunk = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        ssize_t wrote = write(fd, p, chunk);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote <= 0)
            return kc_fail(KC_ERR_IO, "%s: cannot write: %s", what,
                           wrote < 0 ? strerror(errno) : "no progress");
        p += wrote;
        len -= (size_t)wrote;
    }
    return KC_OK;
}

kc_status kc_pread_full(int fd, void *buf, size_t len, uint64_t at, const char *what)
{
    unsigned char *p = buf;
    while (len > 0) {
        size_t chunk = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        ssize_t got = pread(fd, p, chunk, (off_t)at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return kc_fail(KC_ERR_IO, "%s: cannot read: %s", what,
                           got < 0 ? strerror(errno) : "end of file");
        p += got;
        at += (uint64_t)got;
        len -= (size_t)got;
    }
    return KC_OK;
}
