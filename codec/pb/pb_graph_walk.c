/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pb_graph_walk: the one walk of an ONNX or MindIR graph structure, shared
 * by the reader and the node-reader scan (pb_graph_walk.h).
 */
#include "pb_graph_walk.h"

#include <errno.h>

const ck_pb_schema ck_pb_onnx_schema = {
    .format = "ONNX",
    .model_graph = 7,
    .graph_node = 1, .graph_name = 2, .graph_tensor = 5,
    .node_input = 1, .node_output = 2, .node_name = 3, .node_op = 4, .node_attr = 5,
    .attr_name = 1, .attr_t = 5, .attr_g = 6, .attr_tensors = 10, .attr_graphs = 11,
    .t_dims = 1, .t_type = 2, .t_segment = 3, .t_float = 4, .t_int32 = 5, .t_string = 6,
    .t_int64 = 7, .t_name = 8, .t_raw = 9, .t_double = 10, .t_uint64 = 11,
    .t_external = 13, .t_location = 14,
    .all_attr_tensors = true,
};

const ck_pb_schema ck_pb_mindir_schema = {
    .format = "MindIR",
    .model_graph = 7, .model_functions = 8,
    .graph_node = 1, .graph_name = 2, .graph_tensor = 3, .graph_map = 10,
    .node_input = 1, .node_output = 2, .node_name = 3, .node_op = 4, .node_attr = 5,
    .attr_name = 1, .attr_t = 6, .attr_g = 7, .attr_tensors = 12, .attr_graphs = 13,
    .t_dims = 1, .t_type = 2, .t_float = 3, .t_int32 = 4, .t_string = 5, .t_int64 = 6,
    .t_name = 7, .t_raw = 9, .t_double = 10, .t_uint64 = 11, .t_external = 12,
    .map_name = 1, .map_part = {3, 4, 5},
};

#define PATH(w) ((w)->r.src->path)
#define OFF(x) ((unsigned long long)(x))

void ck_pb_walk_init(ck_pb_walk *w, const ck_pb_schema *s, const ck_pb_visitor *v, void *ctx,
                     ck_source *src, ck_error *err)
{
    w->s = s;
    w->v = v;
    w->ctx = ctx;
    w->err = err;
    pb_reader_init(&w->r, src, 0);
}

/* ---- helpers for visitors ---- */

int ck_pb_bad_wire(ck_pb_walk *w, const pb_field *f, const char *what, int want)
{
    return ck_fail(w->err, EINVAL, "%s: offset %llu: %s field %u has wire type %s, expected %s",
                   PATH(w), OFF(f->key_off), what, f->num, pb_wire_type_name(f->wire_type),
                   pb_wire_type_name(want));
}

int ck_pb_enter(ck_pb_walk *w, const pb_field *f, uint64_t end, const char *what,
                uint64_t *len_off, uint64_t *body, uint64_t *body_end)
{
    *len_off = *body = *body_end = 0;
    if (f->wire_type != PB_WT_LEN)
        return ck_pb_bad_wire(w, f, what, PB_WT_LEN);
    *len_off = w->r.pos;
    uint64_t len;
    if (pb_read_len(&w->r, end, f->key_off, &len, w->err) < 0)
        return -1;
    *body = w->r.pos;
    *body_end = w->r.pos + len;
    return 0;
}

int ck_pb_read_str(ck_pb_walk *w, const pb_field *f, uint64_t end, const char *what,
                   ck_pb_str *s)
{
    if (f->wire_type != PB_WT_LEN)
        return ck_pb_bad_wire(w, f, what, PB_WT_LEN);
    uint64_t len;
    if (pb_read_len(&w->r, end, f->key_off, &len, w->err) < 0)
        return -1;
    if (len >= CK_PB_MAX_NAME)
        return ck_fail(w->err, EINVAL, "%s: offset %llu: %s of %llu bytes (at most %d)",
                       PATH(w), OFF(f->key_off), what, OFF(len), CK_PB_MAX_NAME - 1);
    if (pb_read_bytes(&w->r, end, s->buf, (size_t)len, w->err) < 0)
        return -1;
    s->buf[len] = '\0';
    s->len = (size_t)len;
    s->set = true;
    return 0;
}

int ck_pb_read_varint_field(ck_pb_walk *w, const pb_field *f, uint64_t end, const char *what,
                            uint64_t *v)
{
    if (f->wire_type != PB_WT_VARINT)
        return ck_pb_bad_wire(w, f, what, PB_WT_VARINT);
    return pb_read_varint(&w->r, end, v, w->err);
}

int ck_pb_find_str(ck_pb_walk *w, uint64_t body, uint64_t end, uint32_t field,
                   const char *what, ck_pb_str *out)
{
    out->set = false;
    out->len = 0;
    out->buf[0] = '\0';
    pb_seek(&w->r, body);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&w->r, end, &f, w->err)) > 0) {
        if (f.num == field && !out->set) {
            if (ck_pb_read_str(w, &f, end, what, out) < 0)
                return -1;
        } else if (pb_skip(&w->r, end, f.key_off, f.wire_type, w->err) < 0) {
            return -1;
        }
    }
    return rc;
}

/* ---- the walk ---- */

static int walk_level(ck_pb_walk *w, ck_pb_level *lv);

static bool is_graph(ck_pb_kind kind)
{
    return kind == CK_PB_MAIN_GRAPH || kind == CK_PB_FUNCTION || kind == CK_PB_SUBGRAPH ||
           kind == CK_PB_FILE_GRAPH;
}

/* Walk the message in the LEN field f under the cursor, of the given kind,
 * inside up (NULL: at the top of the model), and leave the cursor after
 * it. */
static int descend(ck_pb_walk *w, const ck_pb_level *up, const pb_field *f, uint64_t end,
                   const char *what, ck_pb_kind kind, long index)
{
    ck_pb_level lv = {.up = up, .kind = kind, .key_off = f->key_off, .index = index};
    if (ck_pb_enter(w, f, end, what, &lv.len_off, &lv.body, &lv.end) < 0)
        return -1;
    /* A function or a subgraph is not the main graph; the rest are in the
     * graph that holds them. */
    lv.main = kind == CK_PB_MAIN_GRAPH ||
              (kind != CK_PB_FUNCTION && kind != CK_PB_SUBGRAPH && up != NULL && up->main);
    lv.depth = up != NULL ? up->depth : 0;
    if (walk_level(w, &lv) < 0)
        return -1;
    pb_seek(&w->r, lv.end);
    return 0;
}

/* A tensor field of lv under the cursor: the visitor's, or skipped. */
static int tensor(ck_pb_walk *w, const ck_pb_level *lv, const pb_field *f, int part)
{
    int rc = w->v->tensor != NULL ? w->v->tensor(w, lv, f, part) : 0;
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    return pb_skip(&w->r, lv->end, f->key_off, f->wire_type, w->err);
}

/* A node input under the cursor: the visitor sees its bytes.  An input of
 * another wire type is no name, and skipped. */
static int node_input(ck_pb_walk *w, const ck_pb_level *lv, const pb_field *f)
{
    if (w->v->node_input == NULL || f->wire_type != PB_WT_LEN)
        return pb_skip(&w->r, lv->end, f->key_off, f->wire_type, w->err);
    uint64_t len;
    if (pb_read_len(&w->r, lv->end, f->key_off, &len, w->err) < 0)
        return -1;
    uint64_t start = w->r.pos;
    if (w->v->node_input(w, lv, len) < 0)
        return -1;
    pb_seek(&w->r, start + len);
    return 0;
}

/* A field the walker does not follow: the visitor's (cb), or skipped. */
static int other_field(ck_pb_walk *w, uint64_t end, const pb_field *f, int cb)
{
    if (cb != 0)
        return cb < 0 ? -1 : 0;
    return pb_skip(&w->r, end, f->key_off, f->wire_type, w->err);
}

static int graph_body(ck_pb_walk *w, const ck_pb_level *lv)
{
    const ck_pb_schema *s = w->s;
    const ck_pb_visitor *v = w->v;
    long nodes = 0;
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&w->r, lv->end, &f, w->err)) > 0) {
        if (f.num == s->graph_node)
            rc = descend(w, lv, &f, lv->end, "GraphProto.node", CK_PB_NODE, nodes++);
        else if (s->graph_map && f.num == s->graph_map && lv->main)
            rc = descend(w, lv, &f, lv->end, "GraphProto.node", CK_PB_MAP, 0);
        else if (f.num == s->graph_tensor)
            rc = tensor(w, lv, &f, 0);
        else
            rc = other_field(w, lv->end, &f,
                             v->graph_field != NULL ? v->graph_field(w, lv, &f) : 0);
        if (rc < 0)
            return -1;
        if (v->graph_field_done != NULL)
            v->graph_field_done(w, lv, &f);
    }
    return rc;
}

static int node_body(ck_pb_walk *w, const ck_pb_level *lv)
{
    const ck_pb_schema *s = w->s;
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&w->r, lv->end, &f, w->err)) > 0) {
        if (f.num == s->node_attr)
            rc = descend(w, lv, &f, lv->end, "NodeProto.attribute", CK_PB_ATTR, 0);
        else if (f.num == s->node_input)
            rc = node_input(w, lv, &f);
        else
            rc = pb_skip(&w->r, lv->end, f.key_off, f.wire_type, w->err);
        if (rc < 0)
            return -1;
    }
    return rc;
}

/* An attribute: its tensors (TENSOR t, TENSORS tensors) and its graphs. */
static int attr_body(ck_pb_walk *w, const ck_pb_level *lv)
{
    const ck_pb_schema *s = w->s;
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&w->r, lv->end, &f, w->err)) > 0) {
        if (f.num == s->attr_t || f.num == s->attr_tensors)
            rc = tensor(w, lv, &f, 0);
        else if (f.num == s->attr_g || f.num == s->attr_graphs)
            rc = descend(w, lv, &f, lv->end, "AttributeProto.g", CK_PB_SUBGRAPH, 0);
        else
            rc = pb_skip(&w->r, lv->end, f.key_off, f.wire_type, w->err);
        if (rc < 0)
            return -1;
    }
    return rc;
}

/* A MindIR map_parameter: three tensors (key, value, status) under one
 * name. */
static int map_body(ck_pb_walk *w, const ck_pb_level *lv)
{
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&w->r, lv->end, &f, w->err)) > 0) {
        int part = -1;
        for (int k = 0; k < 3; k++)
            if (f.num == w->s->map_part[k])
                part = k;
        if (part < 0)
            rc = pb_skip(&w->r, lv->end, f.key_off, f.wire_type, w->err);
        else
            rc = tensor(w, lv, &f, part);
        if (rc < 0)
            return -1;
    }
    return rc;
}

static int body(ck_pb_walk *w, const ck_pb_level *lv)
{
    pb_seek(&w->r, lv->body);
    switch (lv->kind) {
    case CK_PB_NODE:
        return node_body(w, lv);
    case CK_PB_ATTR:
        return attr_body(w, lv);
    case CK_PB_MAP:
        return map_body(w, lv);
    default:
        return graph_body(w, lv);
    }
}

/* Enter lv, walk its body, leave it. */
static int walk_level(ck_pb_walk *w, ck_pb_level *lv)
{
    if (is_graph(lv->kind) && ++lv->depth > CK_PB_MAX_DEPTH)
        return ck_fail(w->err, EINVAL, "%s: offset %llu: graphs nested deeper than the limit "
                       "of %d", PATH(w), OFF(lv->key_off), CK_PB_MAX_DEPTH);
    const ck_pb_visitor *v = w->v;
    int rc = v->enter != NULL ? v->enter(w, lv) : 0;
    if (rc == 0)
        rc = body(w, lv);
    if (v->leave != NULL)
        v->leave(w, lv, rc == 0);
    return rc < 0 ? -1 : 0;
}

int ck_pb_walk_model(ck_pb_walk *w)
{
    const ck_pb_schema *s = w->s;
    uint64_t end = w->r.src->size;
    bool has_graph = false;
    pb_seek(&w->r, 0);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&w->r, end, &f, w->err)) > 0) {
        if (f.num == s->model_graph) {
            if (has_graph)
                return ck_fail(w->err, EINVAL, "%s: offset %llu: a second main graph",
                               PATH(w), OFF(f.key_off));
            rc = descend(w, NULL, &f, end, "ModelProto.graph", CK_PB_MAIN_GRAPH, 0);
            has_graph = true;
        } else if (s->model_functions && f.num == s->model_functions) {
            rc = descend(w, NULL, &f, end, "ModelProto.graph", CK_PB_FUNCTION, 0);
        } else {
            rc = other_field(w, end, &f,
                             w->v->model_field != NULL ? w->v->model_field(w, &f) : 0);
        }
        if (rc < 0)
            return -1;
    }
    if (rc < 0)
        return -1;
    if (!has_graph)
        return ck_fail(w->err, EINVAL, "%s: not an %s model: no graph", PATH(w), s->format);
    return 0;
}

int ck_pb_walk_file_graph(ck_pb_walk *w)
{
    ck_pb_level lv = {.kind = CK_PB_FILE_GRAPH, .main = true, .end = w->r.src->size};
    if (walk_level(w, &lv) < 0)
        return -1;
    pb_seek(&w->r, lv.end);
    return 0;
}
