/* Error reporting: one process-wide message buffer, kept simple on purpose (boards run one
 * model per process; a thread pool never reports errors from worker threads). */
#include "pk_internal.h"

#include <stdarg.h>
#include <stdio.h>

static char pk_error_buf[1024]; /* room for a truncated OpenCL build log */

pk_status pk_fail(pk_status s, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pk_error_buf, sizeof pk_error_buf, fmt, ap);
    va_end(ap);
    return s;
}

const char* pk_last_error(void) {
    return pk_error_buf;
}

const char* pk_status_name(pk_status s) {
    static const char* const names[] = {"PK_OK",        "PK_ERR_IO",  "PK_ERR_FORMAT",
                                        "PK_ERR_NOMEM", "PK_ERR_ARG", "PK_ERR_KERNEL",
                                        "PK_ERR_DEVICE"};
    if ((int)s < 0 || (size_t)s >= sizeof names / sizeof names[0]) return "?";
    return names[s];
}
