/* Running an untrusted parser in a child process.
 *
 * libhdf5 is the reference HDF5 reader but it is not hardened against
 * hostile files: fuzzing finds crashes, leaks and hangs inside it. kerasc
 * never lets such a file take the process down: the parsing runs in a
 * forked child with a CPU-time limit, writes its result into a memory file
 * (memfd) and exits. A crash or a hang of the child becomes a clean error
 * in the parent. */
#ifndef KC_SANDBOX_H
#define KC_SANDBOX_H

#include "kerasc.h"

/* Work done in the child: write the result to fd; return KC_OK or fail
 * with kc_fail (the message is passed back to the parent). */
typedef kc_status (*kc_sandbox_work)(void *arg, int fd);

/* Run work in a child (or in-process when KC_SANDBOX=0 is set in the
 * environment, for debugging and in-process fuzzing). On success *fd_out
 * is a readable file descriptor holding what the child wrote, positioned
 * at 0; the caller closes it. label names the input in errors. */
kc_status kc_sandbox_run(const char *label, const char *what, kc_sandbox_work work, void *arg,
                         unsigned cpu_seconds, int *fd_out);

#endif
