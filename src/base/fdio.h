/* Writing or reading a whole buffer through a file descriptor: short
 * transfers and EINTR retried, in pieces of at most 1 GiB (Linux caps one
 * call near 2 GiB). */
#ifndef KC_FDIO_H
#define KC_FDIO_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* `what` names the file in the error: "<what>: cannot write: <reason>". */
kc_status kc_write_full(int fd, const void *buf, size_t len, const char *what);
/* len bytes at byte offset `at` (pread): "<what>: cannot read: <reason>",
 * end of file included. */
kc_status kc_pread_full(int fd, void *buf, size_t len, uint64_t at, const char *what);

#endif
