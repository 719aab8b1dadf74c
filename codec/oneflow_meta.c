#include "oneflow_meta.h"

#include <inttypes.h>
#include <stdio.h>

size_t ck_meta_format(const ck_dtype *dtype, const int64_t *dims, uint32_t ndim, char *buf,
                      size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "shape {\n");
    for (uint32_t i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "  dim: %" PRId64 "\n", dims[i]);
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "}\ndata_type: %s\n", dtype->of_name);
    return n < cap ? n : cap - 1;
}
