/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pb_graph_walk: the one walk of an ONNX or MindIR graph structure.
 *
 * Two parts of ckptfs read the message tree of these models: the reader,
 * which indexes every tensor (onnx_mindir_reader.h), and the node-reader
 * scan, which notes which node reads each main-graph tensor (pb_users.h).
 * They must follow the same messages to the same depth, so the tree is
 * walked here only, and each is a visitor: the walker calls it back for
 * every message it enters and leaves, every tensor field, every node input
 * and the fields it leaves to the visitor.
 *
 * The walk follows ModelProto -> graph (and MindIR's functions) -> node ->
 * attribute -> subgraph -> node ..., and MindIR's map parameters in the
 * main graph.  It streams the file with pb_wire: every length is checked
 * against the end of its message before it is used, messages of the wrong
 * wire type are refused, and graphs nest at most CK_PB_MAX_DEPTH deep (the
 * walk recurses once per level: the limit bounds the stack).  Field numbers
 * come from a table per format (MindIR started as a copy of onnx.proto with
 * other numbers).
 */
#ifndef CK_PB_GRAPH_WALK_H
#define CK_PB_GRAPH_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/byte_source.h"
#include "../core/ck_error.h"
#include "pb_wire.h"

/* Message nesting the walker follows (graphs within nodes within graphs). */
#define CK_PB_MAX_DEPTH 32
/* Longest name, node name or external location read. */
#define CK_PB_MAX_NAME 4096

/* Field numbers of the messages walked and read (onnx-format.md 1,
 * mindspore-formats.md 4.2).  0: the format has no such field. */
typedef struct ck_pb_schema {
    const char *format;         /* "ONNX" or "MindIR", for messages */
    uint32_t model_graph, model_functions;
    uint32_t graph_node, graph_name, graph_tensor, graph_map;
    uint32_t node_input, node_output, node_name, node_op, node_attr;
    uint32_t attr_name, attr_t, attr_g, attr_tensors, attr_graphs;
    uint32_t t_dims, t_type, t_segment, t_float, t_int32, t_string, t_int64, t_name, t_raw,
        t_double, t_uint64, t_external, t_location;
    uint32_t map_name, map_part[3];
    /* Every node attribute's tensors are shown, not only a Constant's
     * value: ONNX keeps values there (ConstantOfShape.value...), MindIR
     * describes each node's output type and shape there, without data. */
    bool all_attr_tensors;
} ck_pb_schema;

extern const ck_pb_schema ck_pb_onnx_schema;
extern const ck_pb_schema ck_pb_mindir_schema;

/* A short string field, read whole (names, op types, locations). */
typedef struct ck_pb_str {
    char buf[CK_PB_MAX_NAME];
    size_t len;
    bool set;
} ck_pb_str;

typedef enum ck_pb_kind {
    CK_PB_MAIN_GRAPH,           /* ModelProto.graph */
    CK_PB_FUNCTION,             /* MindIR ModelProto.functions: a graph */
    CK_PB_SUBGRAPH,             /* AttributeProto.g / .graphs (If and Loop bodies) */
    CK_PB_FILE_GRAPH,           /* a whole file that is one GraphProto (a legacy
                                 * split MindIR's variables file): no field holds it */
    CK_PB_NODE,                 /* GraphProto.node */
    CK_PB_ATTR,                 /* NodeProto.attribute */
    CK_PB_MAP,                  /* MindIR GraphProto.map_parameter (main graph only) */
} ck_pb_kind;

/* A message being walked, and the messages around it. */
typedef struct ck_pb_level {
    const struct ck_pb_level *up; /* the enclosing message, NULL for a graph at the top */
    ck_pb_kind kind;
    bool main;                  /* in the main graph (or a variables file), not in a
                                 * subgraph or a function */
    int depth;                  /* graphs it is in: 1 in a top graph */
    uint64_t key_off;           /* the key of the field holding it (0: a file's graph) */
    uint64_t len_off;           /* that field's length prefix */
    uint64_t body, end;         /* its body */
    long index;                 /* a node: its position among its graph's nodes */
    void *user;                 /* the visitor's, set when it enters the message */
} ck_pb_level;

typedef struct ck_pb_walk ck_pb_walk;

/* The visitor's callbacks; any may be NULL.  Each returns -1 with the
 * walk's error filled to stop the walk.  A callback may move the cursor
 * (w->r) inside the message it is given: the walker puts it back. */
typedef struct ck_pb_visitor {
    /* A message entered (lv->body is not read yet) and left: leave is
     * called for every entered message, ok false when the walk failed in
     * it, so that the visitor can free what enter made. */
    int (*enter)(ck_pb_walk *w, ck_pb_level *lv);
    void (*leave)(ck_pb_walk *w, ck_pb_level *lv, bool ok);
    /* A TensorProto field under the cursor (its key read) in lv: a graph's
     * initializer / parameter, an attribute's t or tensors, or part `part`
     * of a map (key, value, status): 1 when read (the cursor after it), 0
     * to have it skipped. */
    int (*tensor)(ck_pb_walk *w, const ck_pb_level *lv, const pb_field *f, int part);
    /* A node's input, its `len` bytes under the cursor. */
    int (*node_input)(ck_pb_walk *w, const ck_pb_level *node, uint64_t len);
    /* A field of the model, or of a graph, that the walker does not follow
     * (its key read): 1 when read, 0 to have it skipped. */
    int (*model_field)(ck_pb_walk *w, const pb_field *f);
    int (*graph_field)(ck_pb_walk *w, const ck_pb_level *graph, const pb_field *f);
    /* After each field of a graph, the cursor past it. */
    void (*graph_field_done)(ck_pb_walk *w, const ck_pb_level *graph, const pb_field *f);
} ck_pb_visitor;

struct ck_pb_walk {
    pb_reader r;                /* the cursor, shared with the visitor */
    const ck_pb_schema *s;
    const ck_pb_visitor *v;
    void *ctx;                  /* the visitor's */
    ck_error *err;
    int depth;                  /* graphs entered */
};

/* Set w up to walk src from its start. */
void ck_pb_walk_init(ck_pb_walk *w, const ck_pb_schema *s, const ck_pb_visitor *v, void *ctx,
                     ck_source *src, ck_error *err);
/* Walk the file as a ModelProto: its main graph (exactly one) and
 * functions. */
int ck_pb_walk_model(ck_pb_walk *w);
/* Walk the whole file as one GraphProto at the top (CK_PB_FILE_GRAPH). */
int ck_pb_walk_file_graph(ck_pb_walk *w);

/* Helpers for visitors, reading at w's cursor inside [.., end); each
 * returns 0, or -1 with the error filled.  Messages name the field `what`
 * and the offset of its key. */
int ck_pb_bad_wire(ck_pb_walk *w, const pb_field *f, const char *what, int want);
/* Enter the LEN field under the cursor: its length prefix is at *len_off,
 * its body is [*body, *body_end). */
int ck_pb_enter(ck_pb_walk *w, const pb_field *f, uint64_t end, const char *what,
                uint64_t *len_off, uint64_t *body, uint64_t *body_end);
/* Read the LEN field under the cursor into s (at most CK_PB_MAX_NAME - 1
 * bytes). */
int ck_pb_read_str(ck_pb_walk *w, const pb_field *f, uint64_t end, const char *what,
                   ck_pb_str *s);
int ck_pb_read_varint_field(ck_pb_walk *w, const pb_field *f, uint64_t end, const char *what,
                            uint64_t *v);
/* The first occurrence of a small string field of the message [body, end)
 * into out (out->set false if none).  Moves the cursor. */
int ck_pb_find_str(ck_pb_walk *w, uint64_t body, uint64_t end, uint32_t field,
                   const char *what, ck_pb_str *out);

#endif
