/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_graph: the reader's visitor of the graph walk
 * (pb_graph_walk.h; onnx_mindir_internal.h lists the reader's files).
 *
 * The walker goes through the messages; this file decides what the reader
 * keeps of them: a frame for each message on the way to a tensor
 * (pb_layout.h), the name each tensor is shown by (the naming rules are in
 * onnx_mindir_reader.h), the node holding a tensor, where new main-graph
 * tensors go, and the ModelProto fields the formats check.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dir_name.h"
#include "onnx_mindir_internal.h"

/* What the reader keeps while it is in one message: its frame and naming
 * for the tensors inside, and per kind of message what naming them needs. */
typedef struct level {
    where w;
    size_t frames_before, tensors_before; /* to give back an empty subtree's frames */
    struct node_info *node;     /* a graph's: for its nodes; a node's or an attribute's:
                                 * the node's */
    ck_pb_str *name;            /* an attribute's or a map parameter's name */
    bool shown;                 /* an attribute whose tensors are indexed */
    const char *holder;         /* an attribute's node, for messages (made on first use) */
    const char *sub_suffix;     /* an attribute's subgraphs' suffix (made on first use) */
    uint64_t insert;            /* a graph's: after its last field numbered up to the
                                 * tensor list's */
} level;

typedef struct node_info {
    ck_pb_str name, op, output;
    long index;
} node_info;

/* ---- frames ---- */

static long push_frame(rd *d, const ck_pb_level *lv, int32_t parent)
{
    ck_pb_layout *pb = d->pb;
    if (pb->n_frames == pb->cap_frames) {
        size_t cap = pb->cap_frames ? pb->cap_frames * 2 : 64;
        ck_pb_frame *fr = realloc(pb->frames, cap * sizeof *fr);
        if (fr == NULL)
            return nomem(d);
        pb->frames = fr;
        pb->cap_frames = cap;
    }
    pb->frames[pb->n_frames] = (ck_pb_frame){
        .key_off = lv->key_off, .len_off = lv->len_off, .body_off = lv->body,
        .body_end = lv->end, .parent = parent};
    return (long)pb->n_frames++;
}

/* Frames are only kept on the way to a tensor: a subtree that held none
 * gives its frames back, so their number is bounded by the tensors'. */
static void pop_if_empty(rd *d, size_t frames_before, size_t tensors_before)
{
    if (d->m->index.count == tensors_before)
        d->pb->n_frames = frames_before;
}

/* ---- naming ---- */

/* "%@" + the escaped holder label + "." + attribute: kept short, so the
 * value name stays readable in the directory name. */
#define SUFFIX_MAX 120

static const char *make_suffix(rd *d, const ck_pb_str *node, long node_index,
                               const ck_pb_str *attr)
{
    char label[CK_DIR_NAME_MAX + 1], idx[32];
    const char *base = node->buf;
    size_t base_len = node->len;
    if (base_len == 0) {
        base_len = (size_t)snprintf(idx, sizeof idx, "#%ld", node_index);
        base = idx;
    }
    size_t n = ck_dir_name(base, base_len, NULL, label);
    char out[CK_DIR_NAME_MAX + 1];
    int k = snprintf(out, sizeof out, "%%@%.*s.", (int)n, label);
    char attr_esc[CK_DIR_NAME_MAX + 1];
    size_t an = ck_dir_name(attr->buf, attr->len, NULL, attr_esc);
    snprintf(out + k, sizeof out - (size_t)k, "%.*s", (int)an, attr_esc);
    size_t len = strlen(out);
    if (len > SUFFIX_MAX) {
        /* Cut the holder label, keep it unique with the hash of the whole. */
        char hashed[SUFFIX_MAX + 1];
        snprintf(hashed, sizeof hashed, "%.*s%%~%016llx", SUFFIX_MAX - 18, out,
                 (unsigned long long)ck_fnv1a64(out, len));
        return ck_arena_strndup(&d->m->index.arena, hashed, strlen(hashed));
    }
    return ck_arena_strndup(&d->m->index.arena, out, len);
}


/* Whether the attribute's tensors are shown: a Constant's value always,
 * any other in ONNX. */
static bool shows_tensors(const rd *d, const node_info *n, const ck_pb_str *attr)
{
    if (strcmp(n->op.buf, "Constant") == 0 && strcmp(attr->buf, "value") == 0)
        return true;
    return d->s->all_attr_tensors;
}

/* The node holding an attribute's tensors, for messages only: its name,
 * quoted; a node without one is "#INDEX (OP)" as for readers
 * (pb_users.c), but an unnamed Constant is "", which messages name as
 * "a Constant node". */
static const char *holder_label(rd *d, const node_info *n)
{
    char label[CK_QUOTE_BUF + 48];
    if (n->name.len > 0 || strcmp(n->op.buf, "Constant") == 0)
        snprintf(label, sizeof label, "%s", ck_quote(d->q, n->name.buf, n->name.len));
    else if (n->op.len > 0)
        snprintf(label, sizeof label, "#%ld (%s)", n->index,
                 ck_quote(d->q, n->op.buf, n->op.len));
    else
        snprintf(label, sizeof label, "#%ld", n->index);
    return ck_arena_strndup(&d->m->index.arena, label, strlen(label));
}

/* ---- entering and leaving messages ---- */

static bool is_graph(ck_pb_kind kind)
{
    return kind == CK_PB_MAIN_GRAPH || kind == CK_PB_FUNCTION || kind == CK_PB_SUBGRAPH ||
           kind == CK_PB_FILE_GRAPH;
}

/* A MindIR function: its tensors are named NAME%@FUNCTION.function, an
 * unnamed one by its frame number. */
static int enter_function(rd *d, const ck_pb_level *lv, level *l)
{
    ck_pb_str *gname = &d->scratch;
    ck_pb_str fn = {.buf = "function", .len = 8};
    if (ck_pb_find_str(&d->w, lv->body, lv->end, d->s->graph_name, "GraphProto.name",
                       gname) < 0)
        return -1;
    if ((l->w.suffix = make_suffix(d, gname, (long)l->w.frame, &fn)) == NULL)
        return nomem(d);
    return 0;
}

/* A subgraph of an attribute: its tensors are named NAME%@NODE.ATTR. */
static int enter_subgraph(rd *d, level *attr, level *l)
{
    if (attr->sub_suffix == NULL &&
        (attr->sub_suffix = make_suffix(d, &attr->node->name, attr->node->index,
                                        attr->name)) == NULL)
        return nomem(d);
    l->w.suffix = attr->sub_suffix;
    return 0;
}

static int enter_graph(rd *d, const ck_pb_level *lv, level *up, level *l)
{
    if (lv->kind == CK_PB_MAIN_GRAPH)
        d->pb->main_graph = l->w.frame;
    if (lv->kind == CK_PB_FUNCTION && enter_function(d, lv, l) < 0)
        return -1;
    if (lv->kind == CK_PB_SUBGRAPH && enter_subgraph(d, up, l) < 0)
        return -1;
    l->insert = lv->body;
    if ((l->node = malloc(sizeof *l->node)) == NULL)
        return nomem(d);
    return 0;
}

/* A node's name, op_type and first output, for naming what it holds. */
static int enter_node(rd *d, const ck_pb_level *lv, level *l)
{
    node_info *n = l->node;
    n->index = lv->index;
    if (ck_pb_find_str(&d->w, lv->body, lv->end, d->s->node_name, "NodeProto.name",
                       &n->name) < 0 ||
        ck_pb_find_str(&d->w, lv->body, lv->end, d->s->node_op, "NodeProto.op_type",
                       &n->op) < 0 ||
        ck_pb_find_str(&d->w, lv->body, lv->end, d->s->node_output, "NodeProto.output",
                       &n->output) < 0)
        return -1;
    return 0;
}

static int enter_named(rd *d, const ck_pb_level *lv, level *l, uint32_t field,
                       const char *what)
{
    if ((l->name = malloc(sizeof *l->name)) == NULL)
        return nomem(d);
    return ck_pb_find_str(&d->w, lv->body, lv->end, field, what, l->name);
}

static int visit_enter(ck_pb_walk *w, ck_pb_level *lv)
{
    rd *d = w->ctx;
    level *up = lv->up != NULL ? lv->up->user : NULL;
    level *l = calloc(1, sizeof *l);
    if (l == NULL)
        return nomem(d);
    lv->user = l;
    l->w = (where){.frame = CK_PB_NO_FRAME, .main = lv->main,
                   .suffix = up != NULL ? up->w.suffix : NULL};
    l->frames_before = d->pb->n_frames;
    l->tensors_before = d->m->index.count;
    l->node = up != NULL && !is_graph(lv->kind) ? up->node : NULL; /* a graph has its own */
    /* A file's graph has no field, so no frame: its tensors are at the
     * top of their file. */
    if (lv->kind != CK_PB_FILE_GRAPH) {
        long fr = push_frame(d, lv, up != NULL ? up->w.frame : CK_PB_NO_FRAME);
        if (fr < 0)
            return -1;
        l->w.frame = (int32_t)fr;
    }
    if (is_graph(lv->kind))
        return enter_graph(d, lv, up, l);
    if (lv->kind == CK_PB_NODE)
        return enter_node(d, lv, l);
    if (lv->kind == CK_PB_MAP)
        return enter_named(d, lv, l, d->s->map_name, "MapTensorProto.name");
    if (enter_named(d, lv, l, d->s->attr_name, "AttributeProto.name") < 0)
        return -1;
    l->shown = shows_tensors(d, l->node, l->name);
    return 0;
}

/* The frame of a message whose subtree held no tensor is given back,
 * except the main graph's: new tensors go there. */
static void visit_leave(ck_pb_walk *w, ck_pb_level *lv, bool ok)
{
    rd *d = w->ctx;
    level *l = lv->user;
    if (l == NULL)
        return;
    if (ok && lv->kind != CK_PB_MAIN_GRAPH && lv->kind != CK_PB_FILE_GRAPH)
        pop_if_empty(d, l->frames_before, l->tensors_before);
    if (is_graph(lv->kind)) {
        if (lv->main)
            d->pb->insert_off = l->insert;
        free(l->node);
    }
    free(l->name);
    free(l);
    lv->user = NULL;
}

/* ---- tensors and the fields of graphs ---- */

/* Attribute tensors (TENSOR t, TENSORS tensors) are named after the node's
 * first output, as a Constant's value. */
static int attr_tensor(rd *d, const ck_pb_level *lv, level *l, const pb_field *f)
{
    if (l->holder == NULL && (l->holder = holder_label(d, l->node)) == NULL)
        return nomem(d);
    ck_pb_role role = lv->main ? CK_ROLE_CONST : CK_ROLE_SUB;
    return omr_add_tensor(d, f, lv->end, &l->w, role, &l->node->output, l->holder,
                          CK_PART_WHOLE);
}

static int visit_tensor(ck_pb_walk *w, const ck_pb_level *lv, const pb_field *f, int part)
{
    rd *d = w->ctx;
    level *l = lv->user;
    int rc;
    if (lv->kind == CK_PB_ATTR && !l->shown)
        return 0;
    if (lv->kind == CK_PB_ATTR)
        rc = attr_tensor(d, lv, l, f);
    else if (lv->kind == CK_PB_MAP) /* three tensors under one name, read-only */
        rc = omr_add_tensor(d, f, lv->end, &l->w, CK_ROLE_MAP, l->name, NULL,
                            (uint8_t)(CK_PART_MAP_KEY + part));
    else
        rc = omr_add_tensor(d, f, lv->end, &l->w, lv->main ? CK_ROLE_TOP : CK_ROLE_SUB, NULL,
                            NULL, CK_PART_WHOLE);
    return rc < 0 ? -1 : 1;
}

/* MindIR: the main graph's name, the prefix of its parameters' names. */
static int visit_graph_field(ck_pb_walk *w, const ck_pb_level *lv, const pb_field *f)
{
    rd *d = w->ctx;
    if (!lv->main || f->num != d->s->graph_name || !d->pb->mindir)
        return 0;
    ck_pb_str *gname = &d->scratch;
    if (ck_pb_read_str(w, f, lv->end, "GraphProto.name", gname) < 0)
        return -1;
    d->pb->graph_name = ck_arena_strndup(&d->m->index.arena, gname->buf, gname->len);
    d->pb->graph_name_len = gname->len;
    if (d->pb->graph_name == NULL)
        return nomem(d);
    return 1;
}

static void visit_graph_field_done(ck_pb_walk *w, const ck_pb_level *lv, const pb_field *f)
{
    rd *d = w->ctx;
    level *l = lv->user;
    /* New main-graph tensors go after the last field numbered up to the
     * tensor list's, which is where writers put that list. */
    if (f->num <= d->s->graph_tensor)
        l->insert = w->r.pos;
    if (lv->main && !d->pb->mindir && f->num == CK_ONNX_GRAPH_INPUT)
        d->pb->inputs_end = w->r.pos;
}

/* ---- the model ---- */

/* ModelProto fields the formats check: ONNX's ir_version (initializers
 * must be inputs before 4), MindIR's header (check_mindir_header). */
static int visit_model_field(ck_pb_walk *w, const pb_field *f)
{
    rd *d = w->ctx;
    model_header *h = &d->hdr;
    uint64_t end = w->r.src->size, v = 0;
    bool mindir = d->pb->mindir;
    int rc;
    if (!mindir && f->num == 1) {
        rc = ck_pb_read_varint_field(w, f, end, "ModelProto.ir_version", &v);
        d->pb->ir_version = (int64_t)v;
    } else if (mindir && (f->num == 2 || f->num == 5)) {
        rc = pb_skip(&w->r, end, f->key_off, f->wire_type, w->err);
        if (f->wire_type != PB_WT_LEN)
            return ck_pb_bad_wire(w, f, f->num == 2 ? "producer_name" : "model_version",
                                  PB_WT_LEN);
        *(f->num == 2 ? &h->has_producer : &h->has_version) = true;
    } else if (mindir && f->num == 10) {
        rc = ck_pb_read_varint_field(w, f, end, "ModelProto.little_endian", &h->le);
        h->has_le = true;
    } else if (mindir && f->num == 13) {
        h->irv_off = f->key_off;
        rc = ck_pb_read_varint_field(w, f, end, "ModelProto.mind_ir_version", &h->irv);
        h->has_irv = true;
    } else {
        return 0;
    }
    return rc < 0 ? -1 : 1;
}

static int check_mindir_header(rd *d, const model_header *h)
{
    if (!h->has_producer)
        return ck_fail(d->err, EINVAL, "%s: not a MindIR model: no producer_name (MindSpore's "
                       "loader requires it)", PATH(d));
    if (!h->has_version)
        return ck_fail(d->err, EINVAL, "%s: not a MindIR model: no model_version (MindSpore's "
                       "loader requires it)", PATH(d));
    if (h->has_le && h->le != 1)
        return ck_fail(d->err, EINVAL, "%s: MindIR model is big-endian (little_endian false); "
                       "this host is little-endian", PATH(d));
    if (h->has_irv && h->irv > 3)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: mind_ir_version %llu is not a valid "
                       "version (0..3)", PATH(d), OFF(h->irv_off), OFF(h->irv));
    return 0;
}

static const ck_pb_visitor visitor = {
    .enter = visit_enter,
    .leave = visit_leave,
    .tensor = visit_tensor,
    .model_field = visit_model_field,
    .graph_field = visit_graph_field,
    .graph_field_done = visit_graph_field_done,
};

int omr_walk_model(rd *d)
{
    ck_pb_walk_init(&d->w, d->s, &visitor, d, d->src, d->err);
    if (ck_pb_walk_model(&d->w) < 0)
        return -1;
    return d->pb->mindir ? check_mindir_header(d, &d->hdr) : 0;
}

int omr_walk_file_graph(rd *d)
{
    ck_pb_walk_init(&d->w, d->s, &visitor, d, d->src, d->err);
    return ck_pb_walk_file_graph(&d->w);
}
