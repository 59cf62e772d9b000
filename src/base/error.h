/* Errors: one thread-local message per thread, set by the function that
 * detects the failure; callers above add context (file, layer) as a prefix. */
#ifndef KC_ERROR_H
#define KC_ERROR_H

#include "kerasc.h"

#if defined(__GNUC__)
#define KC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KC_PRINTF(a, b)
#include <stddef.h>
/* snprintf that reports truncation as KC_ERR_LIMIT (paths built from file
 * contents must never be silently cut). */
kc_status kc_format(char *buf, size_t cap, const char *fmt, ...) KC_PRINTF(3, 4);

#endif

/* Set the error message and return the status, so callers write
 * `return kc_fail(KC_ERR_FORMAT, "bad %s", what);`. */
kc_status kc_fail(kc_status status, const char *fmt, ...) KC_PRINTF(2, 3);
/* Prefix the current message with "<context>: " (no-op if already prefixed
 * with the same text); returns status unchanged. */
kc_status kc_fail_context(kc_status status, const char *fmt, ...) KC_PRINTF(2, 3);
void kc_error_clear(void);

#define KC_TRY(expr)                          \
    do {                                      \
        kc_status kc_try_status_ = (expr);    \
        if (kc_try_status_ != KC_OK)          \
            return kc_try_status_;            \
    } while (0)

#include <stddef.h>
/* snprintf that reports truncation as KC_ERR_LIMIT (paths built from file
 * contents must never be silently cut). */
kc_status kc_format(char *buf, size_t cap, const char *fmt, ...) KC_PRINTF(3, 4);

#endif
