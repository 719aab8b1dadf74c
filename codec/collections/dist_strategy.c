/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dist_strategy: MindSpore's parallel strategy file (dist_strategy.h).
 *
 * The checks follow what MindSpore's merge assumes
 * (mindspore/python/mindspore/parallel/_tensor.py, _parallel_serialization.py):
 * one device matrix and one tensor map per parameter, map entries naming
 * device axes that exist, each at most once, and an optimizer shard whose
 * step is the model-parallel slice count and whose step x size divides the
 * devices.  Pipeline strategies (names "<stage>-<name>" with a stage other
 * than 0) cut the model across stages that no one rank set holds: refused.
 */
#define _GNU_SOURCE
#include "dist_strategy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/byte_source.h"
#include "../core/decimal.h"
#include "../core/model_dir.h"
#include "node_strategy.pb-c.h"
#include "../pb/pb_wire.h"

typedef Mindspore__Straspb__ParallelStrategyMap strategy_map;
typedef Mindspore__Straspb__ParallelLayouts parallel_layouts;

#define MAX_DEVICE_DIM 0x7fffffffLL

/* What a strategy file may cost unpacked: UNPACK_PER_BYTE times its size
 * plus UNPACK_BASE.  An empty sub-message is 2 bytes on the wire and
 * unpacks into a struct, an array slot and protobuf-c's 32-byte scan
 * record: a file of such items would take 20 to 30 times its size.  Its
 * cost is first added up from the wire (unpacked_cost, before the file is
 * read into memory); then the unpack charges every allocation to the
 * budget (budget_alloc), so that what the sum leaves out (the scan
 * records) is refused too, the moment it crosses the budget.  MindSpore's
 * strategies cost 7.5 times their size as charged here (the fixtures'). */
#define UNPACK_PER_BYTE 12u
#define UNPACK_BASE (1u << 20)
#define BUDGET_HDR 16u /* keeps the block's alignment; stands for malloc's own header */

typedef struct unpack_budget {
    size_t left;
    bool over; /* an allocation was refused for the budget */
} unpack_budget;

static void *budget_alloc(void *ctx, size_t size)
{
    unpack_budget *b = ctx;
    size_t cost;
    if (__builtin_add_overflow(size, (size_t)BUDGET_HDR, &cost) || cost > b->left) {
        b->over = true;
        return NULL;
    }
    size_t *p = malloc(cost);
    if (p == NULL)
        return NULL;
    p[0] = cost;
    b->left -= cost;
    return (char *)p + BUDGET_HDR;
}

/* ctx NULL: freeing after the unpack, when nothing is counted any more. */
static void budget_free(void *ctx, void *ptr)
{
    if (ptr == NULL)
        return;
    size_t *p = (size_t *)(void *)((char *)ptr - BUDGET_HDR);
    if (ctx != NULL)
        ((unpack_budget *)ctx)->left += p[0];
    free(p);
}

static const ProtobufCAllocator budget_freer = {.alloc = budget_alloc, .free = budget_free};

static size_t budget_of(size_t len)
{
    return (size_t)UNPACK_PER_BYTE * len + UNPACK_BASE; /* len is at most 256 MiB */
}

static int over_budget(const char *path, size_t len, ck_error *err)
{
    return ck_fail(err, EFBIG, "%s: the strategy file would take more than %zu bytes of "
                   "memory unpacked (%u times its %zu bytes, plus %u): too many empty or tiny "
                   "items for what it describes", path, budget_of(len), UNPACK_PER_BYTE, len,
                   UNPACK_BASE);
}

#define UNKNOWN_FIELD_COST (sizeof(ProtobufCMessageUnknownField) + BUDGET_HDR)
#define MAX_DEPTH 8 /* the schema nests 4 deep */

/* Add to *cost what protobuf-c allocates to unpack the message desc that
 * ends at end (as budget_alloc charges it, less the scan records), until
 * it passes max.  -1 on a wire error, which is left to protobuf-c to
 * report. */
static int unpacked_cost(pb_reader *r, const ProtobufCMessageDescriptor *desc, uint64_t end,
                         unsigned depth, size_t max, size_t *cost, ck_error *err)
{
    pb_field f;
    int more = 0;
    *cost += desc->sizeof_message + BUDGET_HDR;
    while (*cost <= max && (more = pb_next_field(r, end, &f, err)) > 0) {
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(desc,
                                                                                    f.num);
        bool repeated = fd != NULL && fd->label == PROTOBUF_C_LABEL_REPEATED;
        uint64_t at = r->pos, len;
        if (fd == NULL || f.wire_type != PB_WT_LEN) { /* in the struct, an array slot, or kept */
            if (pb_skip(r, end, f.key_off, f.wire_type, err) < 0)
                return -1;
            *cost += fd == NULL ? UNKNOWN_FIELD_COST + (size_t)(r->pos - at) : repeated ? 8 : 0;
            continue;
        }
        if (pb_read_len(r, end, f.key_off, &len, err) < 0)
            return -1;
        uint64_t sub_end = r->pos + len;
        *cost += repeated ? sizeof(void *) : 0;
        if (fd->type == PROTOBUF_C_TYPE_MESSAGE && depth < MAX_DEPTH) {
            if (unpacked_cost(r, fd->descriptor, sub_end, depth + 1, max, cost, err) < 0)
                return -1;
        } else if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_BYTES) {
            *cost += (size_t)len + 1 + BUDGET_HDR;
        } else { /* packed scalars: at most one a byte */
            *cost += 8 * (size_t)len;
        }
        pb_seek(r, sub_end);
    }
    return more < 0 ? -1 : 0;
}

/* Refuse the strategy file open as fd, size bytes, whose unpacked cost
 * adds up past its budget. */
static int check_unpacked_cost(int fd, size_t size, const char *path, ck_error *err)
{
    ck_error wire = {0};
    pb_reader r;
    size_t cost = 0;
    ck_source *src = ck_source_wrap_fd(fd, size, path, err);
    if (src == NULL)
        return -1;
    pb_reader_init(&r, src, 0);
    (void)unpacked_cost(&r, &mindspore__straspb__parallel_strategy_map__descriptor, size, 0,
                        budget_of(size), &cost, &wire);
    ck_source_close(src);
    return cost > budget_of(size) ? over_budget(path, size, err) : 0;
}

/* The whole file, which must be a regular file of at most the bound. */
static unsigned char *read_file(const char *path, size_t *len, ck_error *err)
{
    struct stat st;
    int fd = ck_open_regular(AT_FDCWD, path, O_RDONLY, 0, &st);
    if (fd < 0) {
        if (st.st_mode != 0)
            ck_fail(err, EINVAL, "%s: the strategy file is %s, not a regular file", path,
                    ck_file_kind(st.st_mode));
        else
            ck_fail_errno(err, errno, "%s: cannot open the strategy file", path);
        return NULL;
    }
    unsigned char *buf = NULL;
    if (st.st_size == 0) {
        ck_fail(err, EINVAL, "%s: the strategy file is empty", path);
    } else if ((uint64_t)st.st_size > CK_STRATEGY_MAX_BYTES) {
        ck_fail(err, EFBIG, "%s: %lld bytes is too big for a strategy file (at most %u)", path,
                (long long)st.st_size, CK_STRATEGY_MAX_BYTES);
    } else if (check_unpacked_cost(fd, (size_t)st.st_size, path, err) < 0) {
        /* refused before anything is read into memory */
    } else if ((buf = malloc((size_t)st.st_size)) == NULL) {
        ck_nomem(err, path);
    } else {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                ck_fail_errno(err, n < 0 ? errno : EIO, "%s: cannot read the strategy file",
                              path);
                free(buf);
                buf = NULL;
                break;
            }
            got += (size_t)n;
        }
        *len = got;
    }
    close(fd);
    return buf;
}

/* "<stage>-<name>" (MindSpore's merged pipeline strategies): the stage and
 * where the name starts.  A name with no '-' is stage 0 as it is. */
static int split_stage(const char *path, const char *full, uint64_t *stage, const char **name,
                       ck_error *err)
{
    char q[CK_QUOTE_BUF];
    const char *dash = strchr(full, '-');
    *stage = 0;
    *name = full;
    if (dash == NULL)
        return 0;
    uint64_t v = 0;
    if (strchr(dash + 1, '-') != NULL || !ck_decimal(full, (size_t)(dash - full), &v))
        return ck_fail(err, EINVAL, "%s: '%s': a '-' in a name that is not '<stage>-<name>'",
                       path, ck_quote(q, full, strlen(full)));
    *stage = v;
    *name = dash + 1;
    return 0;
}

static int bad(const char *path, const char *name, ck_error *err, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(err, EINVAL, "%s: parameter '%s': %s", path, ck_quote(q, name, strlen(name)),
                   what);
}

/* The device matrix and the tensor map: sizes in range, map entries naming
 * existing axes, none twice. */
static int check_axes(const char *path, const char *name, const parallel_layouts *pl,
                      uint64_t *devices, ck_error *err)
{
    if (pl->n_dev_matrix != 1 || pl->n_tensor_map != 1)
        return bad(path, name, err, "want exactly one dev_matrix and one tensor_map");
    if (pl->n_param_split_shape > 1 || pl->n_indices_offset > 1)
        return bad(path, name, err, "more than one param_split_shape or indices_offset");
    const Mindspore__Straspb__DevMatrix *dm = pl->dev_matrix[0];
    const Mindspore__Straspb__TensorMap *tm = pl->tensor_map[0];
    if (dm->n_dim == 0 || dm->n_dim > 64 || tm->n_dim > 64)
        return bad(path, name, err, "a dev_matrix of 1 to 64 axes and a tensor_map of at most "
                   "64 entries");
    uint64_t prod = 1;
    for (size_t i = 0; i < dm->n_dim; i++) {
        if (dm->dim[i] < 1 || dm->dim[i] > MAX_DEVICE_DIM ||
            __builtin_mul_overflow(prod, (uint64_t)dm->dim[i], &prod) || prod > MAX_DEVICE_DIM)
            return bad(path, name, err, "a dev_matrix size out of range");
    }
    uint64_t used = 0;
    for (size_t i = 0; i < tm->n_dim; i++) {
        int64_t k = tm->dim[i];
        if (k < -1 || k >= (int64_t)dm->n_dim)
            return bad(path, name, err, "a tensor_map entry names no axis of the dev_matrix");
        if (k >= 0 && (used & (1ull << k)))
            return bad(path, name, err, "the tensor_map uses a device axis twice");
        if (k >= 0)
            used |= 1ull << k;
    }
    *devices = prod;
    return 0;
}

/* The optimizer shard: as _construct_tensor_layout_for_opt_shard requires. */
static int check_opt_shard(const char *path, ck_layout *l, const parallel_layouts *pl,
                           uint64_t devices, ck_error *err)
{
    int32_t step = pl->opt_weight_shard_step, size = pl->opt_weight_shard_size;
    if (pl->field < 0 || step < 0 || size < -1)
        return bad(path, l->name, err, "a negative field, opt_weight_shard_step or "
                   "opt_weight_shard_size");
    if (size == -1) { /* _extract_layout_item: the whole group */
        if (step == 0)
            return bad(path, l->name, err, "opt_weight_shard_size -1 with "
                       "opt_weight_shard_step 0");
        size = (int32_t)(devices / (uint64_t)step);
    }
    l->opt_step = (uint32_t)step;
    l->opt_size = (uint32_t)size;
    if (step == 0 || size == 0) {
        l->opt_step = l->opt_size = 0;
        return 0;
    }
    uint64_t mp = 1;
    for (uint32_t d = 0; d < l->n_map; d++)
        mp *= ck_layout_split(l, d); /* distinct axes: at most the device count */
    if ((uint64_t)step != mp)
        return bad(path, l->name, err, "opt_weight_shard_step is not the model-parallel slice "
                   "count");
    if (devices % ((uint64_t)step * (uint64_t)size) != 0)
        return bad(path, l->name, err, "the optimizer shard does not divide the devices");
    return 0;
}

static int fill_layout(const char *path, const Mindspore__Straspb__ParallelLayoutItem *it,
                       ck_layout *l, uint64_t *devices, ck_error *err)
{
    uint64_t stage;
    if (split_stage(path, it->param_name, &stage, &l->name, err) < 0)
        return -1;
    if (stage != 0)
        return bad(path, it->param_name, err, "a pipeline stage other than 0 (pipeline "
                   "strategies are not merged)");
    const parallel_layouts *pl = it->parallel_layouts;
    if (check_axes(path, it->param_name, pl, devices, err) < 0)
        return -1;
    l->dev = pl->dev_matrix[0]->dim;
    l->n_dev = (uint32_t)pl->dev_matrix[0]->n_dim;
    l->map = pl->tensor_map[0]->dim;
    l->n_map = (uint32_t)pl->tensor_map[0]->n_dim;
    l->field = pl->field;
    l->uneven = pl->n_param_split_shape == 1 && pl->param_split_shape[0]->n_dim > 0;
    return check_opt_shard(path, l, pl, *devices, err);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const ck_layout *)a)->name, ((const ck_layout *)b)->name);
}

static int fill_layouts(const char *path, const strategy_map *msg, ck_strategy *s,
                        ck_error *err)
{
    if (msg->n_parallel_layout_item == 0)
        return ck_fail(err, EINVAL, "%s: the strategy has no parallel_layout_item", path);
    s->layouts = calloc(msg->n_parallel_layout_item, sizeof *s->layouts);
    if (s->layouts == NULL)
        return ck_nomem(err, path);
    for (size_t i = 0; i < msg->n_parallel_layout_item; i++) {
        uint64_t devices = 0;
        if (fill_layout(path, msg->parallel_layout_item[i], &s->layouts[i], &devices, err) < 0)
            return -1;
        if (i > 0 && devices != s->devices) {
            char q[CK_QUOTE_BUF];
            const char *name = msg->parallel_layout_item[i]->param_name;
            return ck_fail(err, EINVAL, "%s: parameter '%s': a device matrix of %llu devices, "
                           "the others have %llu", path, ck_quote(q, name, strlen(name)),
                           (unsigned long long)devices, (unsigned long long)s->devices);
        }
        s->devices = devices;
        s->n++;
    }
    qsort(s->layouts, s->n, sizeof *s->layouts, by_name);
    for (size_t i = 1; i < s->n; i++)
        if (strcmp(s->layouts[i - 1].name, s->layouts[i].name) == 0)
            return bad(path, s->layouts[i].name, err, "listed twice");
    return 0;
}

int ck_strategy_load(const char *path, ck_strategy *s, ck_error *err)
{
    memset(s, 0, sizeof *s);
    size_t len = 0;
    unsigned char *buf = read_file(path, &len, err);
    if (buf == NULL)
        return -1;
    /* protobuf-c refuses a truncated message and a missing required field. */
    unpack_budget b = {.left = budget_of(len)};
    ProtobufCAllocator a = {.alloc = budget_alloc, .free = budget_free, .allocator_data = &b};
    strategy_map *msg = mindspore__straspb__parallel_strategy_map__unpack(&a, len, buf);
    free(buf);
    if (msg == NULL && b.over)
        return over_budget(path, len, err);
    if (msg == NULL)
        return ck_fail(err, EINVAL, "%s: not a MindSpore parallel strategy file "
                       "(ParallelStrategyMap does not decode)", path);
    s->msg = msg;
    if (fill_layouts(path, msg, s, err) < 0) {
        ck_strategy_free(s);
        return -1;
    }
    return 0;
}

void ck_strategy_free(ck_strategy *s)
{
    free(s->layouts);
    if (s->msg != NULL)
        mindspore__straspb__parallel_strategy_map__free_unpacked(
            s->msg, (ProtobufCAllocator *)&budget_freer);
    memset(s, 0, sizeof *s);
}

const ck_layout *ck_strategy_find(const ck_strategy *s, const char *name, size_t len)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *m = s->layouts[mid].name;
        size_t mlen = strlen(m);
        int c = memcmp(m, name, mlen < len ? mlen : len);
        if (c == 0)
            c = (mlen > len) - (mlen < len);
        if (c == 0)
            return &s->layouts[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

uint64_t ck_layout_split(const ck_layout *l, uint32_t d)
{
    int64_t k = l->map[d];
    return k < 0 ? 1 : (uint64_t)l->dev[l->n_dev - 1 - (uint32_t)k];
}
