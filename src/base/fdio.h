/* Writing a whole buffer to a file descriptor: short writes and EINTR
 * retried, in pieces of at most 1 GiB (Linux caps one write near 2 GiB). */
#ifndef KC_FDIO_H
#define KC_FDIO_H

#include <stddef.h>

#include "base/error.h"

/* `what` names the file in the error: "<what>: cannot write: <reason>". */
kc_status kc_write_full(int fd, const void *buf, size_t len, const char *what);

#endif
