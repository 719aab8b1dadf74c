/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_internal: the state shared by the files of the ONNX / MindIR
 * reader while it reads one model; private to them.
 *
 * The reader (onnx_mindir_reader.h) is split by what each part knows:
 *   onnx_mindir_reader.c    the two formats: opening a model, the layout's life
 *   onnx_mindir_graph.c     the graph walker's visitor (pb_graph_walk.h):
 *                           frames, naming, graphs, nodes, attributes, the
 *                           model's header fields
 *   onnx_mindir_tensor.c    one TensorProto: its fields, dims and type, where
 *                           its bytes are, the decoded-typed-fields file
 *   onnx_mindir_external.c  external data: its fields, and the data files
 *                           opened beneath the model's directory
 *   onnx_mindir_legacy.c    the legacy split MindIR layout (<prefix>_variables/)
 *   onnx_mindir_state.c     the layout kept in a saved index, and read back
 */
#ifndef CK_ONNX_MINDIR_INTERNAL_H
#define CK_ONNX_MINDIR_INTERNAL_H

#include <errno.h>

#include "../core/model.h"
#include "../core/name_map.h"
#include "../pb/pb_graph_walk.h"
#include "../pb/pb_layout.h"
#include "../pb/pb_wire.h"

/* Where the walk is: which frame encloses what it finds, and how to name
 * it. */
typedef struct where {
    int32_t frame;
    bool main;                  /* in the main graph */
    const char *suffix;         /* "%@NODE.ATTR" inside subgraphs */
} where;

/* One TensorProto's fields, as read.  An offset named "_at" is that of the
 * key of the field that gave a value: what a message about the value names. */
typedef struct tinfo {
    int64_t dims[CK_MAX_DIMS];
    uint64_t dim_at[CK_MAX_DIMS + 1]; /* [CK_MAX_DIMS]: the first dim too many */
    uint32_t ndim;
    bool too_many_dims;
    long type;
    uint64_t type_at;
    bool has_type;
    ck_pb_str name;
    uint64_t raw_off, raw_len, raw_at;
    bool has_raw;
    uint32_t typed_field;       /* the one typed field present, 0 if none */
    uint32_t typed_runs;        /* its occurrences */
    uint64_t typed_off, typed_len; /* the single packed run, when typed_runs is 1 */
    int typed_wire;
    uint64_t typed_key_off;
    bool external;              /* data_location EXTERNAL / external_data present */
    ck_pb_str location;
    uint64_t ext_off, ext_len;
    uint64_t ext_off_at, ext_len_at;
    bool has_ext_len;
} tinfo;

/* The MindIR ModelProto fields MindSpore's loader checks. */
typedef struct model_header {
    bool has_producer, has_version, has_le, has_irv;
    uint64_t le, irv, irv_off;
} model_header;

typedef struct rd {
    ck_pb_walk w;               /* the walk; its cursor w.r is the reader's */
    ck_model *m;
    const ck_pb_schema *s;
    ck_pb_layout *pb;
    ck_source *src;             /* the protobuf file being walked ... */
    uint32_t src_id;            /* ... and its source id */
    ck_error *err;
    size_t cap_pbt;
    int dec_fd;                 /* decoded typed fields, -1 until needed */
    uint64_t dec_size;
    char q[CK_QUOTE_BUF];
    ck_pb_str scratch;
    tinfo ti;
    ck_name_map locations;      /* external location text -> source id */
    model_header hdr;
} rd;

#define PATH(d) ((d)->src->path)
#define OFF(x) ((unsigned long long)(x))

static inline int nomem(rd *d)
{
    return ck_nomem(d->err, PATH(d));
}

/* A tensor's name, quoted for a message. */
static inline const char *tensor_label(rd *d, const ck_tensor *t)
{
    return ck_quote(d->q, t->name, t->name_len);
}

/* onnx_mindir_graph.c: walk d->src as a ModelProto (and check MindIR's
 * header), or as one GraphProto (a variables file). */
int omr_walk_model(rd *d);
int omr_walk_file_graph(rd *d);

/* onnx_mindir_tensor.c: index the TensorProto field under f (its key
 * read), in the message ending at end.  value_name names Constants (the
 * node's output); NULL: the tensor's own name. */
int omr_add_tensor(rd *d, const pb_field *f, uint64_t end, const where *w, ck_pb_role role,
                   const ck_pb_str *value_name, const char *holder, uint8_t part);
/* Make the decoded-typed-fields file a source, once the walk is done. */
int omr_bind_decoded(rd *d);

/* onnx_mindir_external.c: an external_data field under f, into ti. */
int omr_read_external(rd *d, const pb_field *f, uint64_t end, tinfo *ti);
/* The source of an external location, opened on first use. */
long omr_external_source(rd *d, ck_tensor *t, const ck_pb_str *loc);

/* onnx_mindir_legacy.c: a legacy split MindIR's variables files. */
int omr_walk_legacy_variables(rd *d);

/* onnx_mindir_state.c: an empty layout of the format's field numbers. */
ck_pb_layout *omr_layout_new(bool mindir);

/* onnx_mindir_state.c: the format hooks of a saved index (format.h). */
int omr_save_state(const ck_model *m, unsigned char **state, size_t *len);
int omr_load_state(ck_model *m, const ck_open_opts *o, const unsigned char *in, size_t len,
                   ck_error *err);
int omr_check_state(const ck_model *m, ck_error *err);

#endif
