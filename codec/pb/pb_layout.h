/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pb_layout: where the weights of an ONNX or MindIR model sit in its
 * protobuf message tree.
 *
 * Both formats are one big protobuf message whose weights are TensorProto
 * messages nested a few levels down (model -> graph -> initializer, or
 * graph -> node -> attribute -> tensor, or further down inside subgraphs).
 * The reader records, for every weight, the span of its TensorProto field
 * and the chain of enclosing messages ("frames").  The encoder needs
 * nothing else: it copies the file byte for byte except the changed
 * TensorProto fields and the length prefixes of the frames that enclose
 * them.  ck_pb_layout_of finds the layout in a model, so the writer and the
 * node-reader scan (pb_users.h) need not include the reader.
 */
#ifndef CK_PB_LAYOUT_H
#define CK_PB_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/model.h"

#define CK_PB_NO_FRAME (-1)
/* ONNX GraphProto.input: before IR version 4 initializers are declared
 * there too. */
#define CK_ONNX_GRAPH_INPUT 11

/* One enclosing message: its key at key_off, its length prefix at len_off,
 * its body [body_off, body_end).  The file itself is the implicit root. */
typedef struct ck_pb_frame {
    uint64_t key_off, len_off, body_off, body_end;
    int32_t parent;             /* frame index, or CK_PB_NO_FRAME */
} ck_pb_frame;

typedef enum ck_pb_storage {
    CK_STORE_NONE,              /* no data field (a tensor of 0 bytes) */
    CK_STORE_RAW,               /* raw_data, served from the file */
    CK_STORE_TYPED,             /* float_data, int32_data, ...: see typed_field */
    CK_STORE_EXTERNAL,          /* bytes in another file */
} ck_pb_storage;

typedef enum ck_pb_role {
    CK_ROLE_TOP,                /* main graph initializer (ONNX) / parameter (MindIR) */
    CK_ROLE_CONST,              /* a Constant node's value */
    CK_ROLE_SUB,                /* anything inside a subgraph or a function */
    CK_ROLE_MAP,                /* a MindIR map_parameter part */
} ck_pb_role;

typedef struct ck_pb_tensor {
    uint64_t key_off, len_off;  /* the TensorProto field; its body is the
                                 * index tensor's [rec_off, rec_end) */
    int32_t frame;              /* enclosing message */
    uint8_t storage;            /* ck_pb_storage */
    uint8_t role;               /* ck_pb_role */
    uint8_t typed_field;        /* field number of the typed data field */
    uint32_t ext_src;           /* CK_STORE_EXTERNAL: the source holding the bytes */
    uint32_t pbfile;            /* the source whose message holds the TensorProto:
                                 * 0, or a legacy split MindIR's variables file */
    const char *holder;         /* the node holding a CONST/SUB tensor, for messages */
} ck_pb_tensor;

/* The field numbers the encoder needs (they differ between the formats;
 * the graph walk's are in pb_graph_walk.h). */
typedef struct ck_pb_fields {
    uint32_t graph_tensor;      /* GraphProto.initializer / .parameter */
    uint32_t t_dims, t_type, t_float, t_int32, t_string, t_int64, t_name, t_raw, t_double,
        t_uint64, t_external, t_location;
} ck_pb_fields;

typedef struct ck_pb_layout {
    bool mindir;
    ck_pb_fields fields;
    ck_pb_frame *frames;
    size_t n_frames, cap_frames;
    ck_pb_tensor *tensors;      /* parallel to the index's tensors */
    int32_t main_graph;         /* frame of ModelProto.graph, or CK_PB_NO_FRAME */
    uint32_t new_pbfile;        /* the file new main-graph tensors go to: 0, or the
                                 * last variables file of a legacy split MindIR
                                 * (a GraphProto: they go at its top level) */
    uint64_t insert_off;        /* where in that file */
    uint64_t inputs_end;        /* ONNX: after the main graph's last input, or 0 */
    const char *graph_name;     /* MindIR: the prefix of parameter names */
    size_t graph_name_len;
    int64_t ir_version;         /* ONNX ir_version (initializers must be inputs < 4) */
    uint32_t decoded_src;       /* source holding decoded typed fields, 0 if none */
    struct ck_pb_users *users;  /* which nodes read the main-graph tensors: scanned on
                                 * the first removal asked about (pb_users.h) */
    /* Loaded from a saved index (onnx_mindir_state.c): the CRC of the
     * frames' and tensors' key and length prefixes, checked before a save. */
    bool layout_crc_set;
    uint32_t layout_crc;
} ck_pb_layout;

/* The layout of m, an ONNX or MindIR model: the state its reader leaves
 * (onnx_mindir_reader.c), read by the writer and the node-reader scan. */
static inline ck_pb_layout *ck_pb_layout_of(const ck_model *m)
{
    return m->state;
}

#endif
