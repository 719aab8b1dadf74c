/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_leaf: a pickle's leaf as a tensor (pt_leaf.h).
 */
#define _GNU_SOURCE
#include "pt_leaf.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "../core/byte_source.h"
#include "../core/dtype.h"

const char *ck_pt_view_check(const ck_pt_leaf *l, uint64_t record_size, uint64_t *nbytes)
{
    uint64_t need = 0;
    if (__builtin_mul_overflow(l->numel, (uint64_t)l->dtype->itemsize, &need) ||
        need > record_size)
        return "its storage is longer than its record";
    if (ck_shape_product(&ck_shape_pb, l->dtype, l->sizes, l->ndim, nbytes) >= 0)
        return "its size makes more bytes than a file holds";
    if (*nbytes > need && *nbytes > CK_PT_MAX_REPEATED)
        return "a view bigger than its storage (a stride of 0 repeats elements) and than "
               "the 16 MiB ckptfs shows of one";
    return NULL;
}

/* The last element a view reaches in its storage, past its first
 * (overflow-checked): the view must end inside the storage. */
static int view_reach(const ck_pt_leaf *l, uint64_t *reach)
{
    uint64_t sum = 0;
    for (uint32_t d = 0; d < l->ndim; d++) {
        uint64_t step = 0;
        if (__builtin_mul_overflow((uint64_t)(l->sizes[d] - 1), (uint64_t)l->strides[d], &step) ||
            __builtin_add_overflow(sum, step, &sum))
            return -1;
    }
    *reach = sum;
    return 0;
}

int ck_pt_place_view(ck_arena *a, ck_tensor *t, const ck_pt_leaf *l, uint32_t src,
                     uint64_t data, const char **why)
{
    unsigned es = l->dtype->itemsize;
    uint64_t reach = 0, first = 0, size[CK_MAX_DIMS], stride[CK_MAX_DIMS];
    *why = NULL;
    if (t->nbytes == 0)
        return 0;
    if (view_reach(l, &reach) < 0 || __builtin_add_overflow(l->offset, reach, &first) ||
        first >= l->numel) {
        *why = "its size, stride and offset reach past its storage";
        return -1;
    }
    /* (reach + 1) * es <= numel * es, which the record holds */
    if (ck_tensor_add_extent(t, src, data + l->offset * es, (reach + 1) * es) < 0)
        return -1;
    for (uint32_t d = 0; d < l->ndim; d++) {
        size[d] = (uint64_t)l->sizes[d];
        stride[d] = (uint64_t)l->strides[d];
    }
    return ck_tensor_set_strided(a, t, size, stride, l->ndim, es);
}

/* ---- numbers --------------------------------------------------------------- */

/* Until the scratch file is a source, the numbers' extents name this. */
#define SCRATCH_SRC UINT32_MAX

int ck_pt_number_add(ck_pt_numbers *nums, const ck_model *m, ck_tensor *t, const ck_pt_leaf *l,
                     ck_error *err)
{
    static const struct {
        const char *dtype, *type_name;
        unsigned size;
    } as[] = {
        [CK_PT_INT] = {"Int64", "int", 8},
        [CK_PT_FLOAT] = {"Float64", "float", 8},
        [CK_PT_BOOL] = {"Bool", "bool", 1},
    };
    unsigned char v[8];
    unsigned n = as[l->kind].size;
    for (unsigned i = 0; i < 8; i++)
        v[i] = (unsigned char)(l->value >> (8 * i));
    if (nums->fd < 0 && (nums->fd = ck_scratch_fd(true, m->path, "numbers", err)) < 0)
        return -1;
    if (pwrite(nums->fd, v, n, (off_t)nums->size) != (ssize_t)n)
        return ck_fail(err, errno ? errno : EIO, "%s: writing its numbers: %s", m->path,
                       strerror(errno ? errno : EIO));
    static const int64_t no_dims[1]; /* 0-d, but a shape to compare as every reader gives */
    t->dtype = ck_dtype_by_name(as[l->kind].dtype, strlen(as[l->kind].dtype));
    t->type_name = as[l->kind].type_name;
    t->dims = no_dims;
    t->nbytes = n;
    t->read_only = true; /* a Python number, not a tensor: edits have nowhere to go */
    t->ext0 = (ck_extent){.src = SCRATCH_SRC, .off = nums->size, .len = n};
    t->n_ext = 1;
    nums->size += n;
    return 0;
}

int ck_pt_numbers_bind(ck_pt_numbers *nums, ck_model *m, ck_error *err)
{
    if (nums->fd < 0)
        return 0;
    ck_source *src = ck_source_adopt_fd(nums->fd, "numbers", err);
    nums->fd = -1; /* the source's now, or closed */
    long id = src == NULL ? -1 : ck_model_add_source(m, src, err);
    if (id < 0)
        return -1;
    for (size_t i = 0; i < m->index.count; i++) {
        ck_tensor *t = &m->index.tensors[i];
        if (t->n_ext == 1 && t->ext0.src == SCRATCH_SRC)
            t->ext0.src = (uint32_t)id;
    }
    return 0;
}

void ck_pt_numbers_close(ck_pt_numbers *nums)
{
    if (nums->fd >= 0)
        close(nums->fd);
    nums->fd = -1;
}
