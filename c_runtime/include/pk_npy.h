/* pk_npy.h - read and write NumPy .npy files (format 1.0, 2.0 and 3.0), little-endian,
 * the dtypes of pk_dtype; Fortran-order files are read into C order by pk_npy_load. Used by
 * run_bundle; handy for test harnesses. */
#ifndef PK_NPY_H
#define PK_NPY_H

#include "pk_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    pk_dtype dtype;
    int32_t ndim;
    int64_t shape[PK_MAX_NDIM];
    const void* data; /* into the parsed buffer; pk_npy_load aligns it to 64 bytes */
    size_t bytes;
    int fortran_order; /* pk_npy_parse: data is column-major; pk_npy_load: always 0 */
} pk_npy;

/* Parses an .npy image held in buf; `what` names it in messages (e.g. the file path). */
pk_status pk_npy_parse(const void* buf, size_t len, const char* what, pk_npy* out);
/* Reads and parses a regular file (directories and FIFOs are refused unread); *buffer holds
 * the file and must be released with pk_npy_free. */
pk_status pk_npy_load(const char* path, pk_npy* out, void** buffer);
void pk_npy_free(void* buffer);
/* Writes an .npy (format 1.0, or 2.0 when the header needs it). */
pk_status pk_npy_save(const char* path, pk_dtype dtype, int32_t ndim, const int64_t* shape,
                      const void* data, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
