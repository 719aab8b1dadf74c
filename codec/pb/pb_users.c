/* SPDX-License-Identifier: Apache-2.0 */
#include "pb_users.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/arena.h"
#include "../core/name_map.h"
#include "pb_graph_walk.h"
#include "pb_layout.h"
#include "pb_wire.h"

struct ck_pb_users {
    ck_name_map ids;            /* main-graph tensor name -> tensor id */
    uint32_t *reader;           /* per tensor id: index in nodes[], or CK_NAME_MAP_NONE */
    const char **nodes;         /* quoted names of reading nodes, in the arena */
    size_t n_nodes, cap_nodes;  /* at most one per tracked tensor */
    ck_arena arena;
};

/* One scan: a visitor of the graph walk (pb_graph_walk.h), which follows
 * the graphs as the reader does.  The cursor and the name buffer are
 * shared by every nesting level: an input name is looked up as soon as it
 * is read. */
typedef struct scan {
    const ck_model *m;
    ck_pb_users *u;
    uint64_t longest;           /* longest tracked name: longer inputs are skipped unread */
    ck_error *err;
    /* Per graph depth, the entry of the node being walked there, once it
     * reads a tracked tensor (nodes of subgraphs are walked inside their
     * node's attributes). */
    uint32_t node_at[CK_PB_MAX_DEPTH + 1];
    char name[CK_PB_MAX_NAME];
    ck_pb_walk w;
} scan;

static int nomem(scan *s)
{
    return ck_nomem(s->err, s->m->path);
}

/* Record the node [body, end) as a reader: its name, or "#index (op)"
 * when it has none, kept once in the arena.  Moves the cursor. */
static int add_node(scan *s, uint64_t body, uint64_t end, long index, uint32_t *node)
{
    ck_pb_str name, op;
    char q[CK_QUOTE_BUF], label[CK_PB_USERS_NODE_BUF];
    /* The reader read these fields of every node already: no new error. */
    if (ck_pb_find_str(&s->w, body, end, s->w.s->node_name, "NodeProto.name", &name) < 0)
        return -1;
    if (name.len == 0 &&
        ck_pb_find_str(&s->w, body, end, s->w.s->node_op, "NodeProto.op_type", &op) < 0)
        return -1;
    if (name.len > 0)
        snprintf(label, sizeof label, "%s", ck_quote(q, name.buf, name.len));
    else if (op.len > 0)
        snprintf(label, sizeof label, "#%ld (%s)", index, ck_quote(q, op.buf, op.len));
    else
        snprintf(label, sizeof label, "#%ld", index);
    if (s->u->n_nodes == s->u->cap_nodes) /* one per tracked tensor at most */
        return ck_fail(s->err, EIO, "%s: internal error: more reading nodes than tensors",
                       s->m->path);
    const char *kept = ck_arena_strndup(&s->u->arena, label, strlen(label));
    if (kept == NULL)
        return nomem(s);
    *node = (uint32_t)s->u->n_nodes;
    s->u->nodes[s->u->n_nodes++] = kept;
    return 0;
}

/* A node: no entry until it reads a tracked tensor. */
static int visit_enter(ck_pb_walk *w, ck_pb_level *lv)
{
    scan *s = w->ctx;
    if (lv->kind == CK_PB_NODE)
        s->node_at[lv->depth] = CK_NAME_MAP_NONE;
    return 0;
}

/* An input of a node, its len bytes under the cursor: if it names a
 * tracked tensor no node was seen reading yet, this node is its reader.
 * Moves the cursor. */
static int visit_input(ck_pb_walk *w, const ck_pb_level *node, uint64_t len)
{
    scan *s = w->ctx;
    if (len == 0 || len > s->longest || len >= sizeof s->name)
        return 0; /* "": an optional input left out; longer: no tensor's name */
    if (pb_read_bytes(&s->w.r, s->w.r.pos + len, s->name, (size_t)len, s->err) < 0)
        return -1;
    uint32_t id = ck_name_map_get(&s->u->ids, s->name, (size_t)len);
    if (id == CK_NAME_MAP_NONE || s->u->reader[id] != CK_NAME_MAP_NONE)
        return 0;
    uint32_t *entry = &s->node_at[node->depth];
    if (*entry == CK_NAME_MAP_NONE &&
        add_node(s, node->body, node->end, node->index, entry) < 0)
        return -1;
    s->u->reader[id] = *entry;
    return 0;
}

static const ck_pb_visitor visitor = {
    .enter = visit_enter,
    .node_input = visit_input,
};

/* Map every main-graph tensor name to its id; nothing is read yet. */
static int track_tensors(scan *s)
{
    const ck_index *ix = &s->m->index;
    ck_pb_users *u = s->u;
    u->reader = malloc((ix->count ? ix->count : 1) * sizeof *u->reader);
    if (u->reader == NULL)
        return nomem(s);
    for (size_t id = 0; id < ix->count; id++) {
        const ck_tensor *t = &ix->tensors[id];
        u->reader[id] = CK_NAME_MAP_NONE;
        if (ck_pb_layout_of(s->m)->tensors[id].role != CK_ROLE_TOP)
            continue;
        if (ck_name_map_put(&u->ids, t->name, t->name_len, (uint32_t)id) < 0)
            return nomem(s);
        if (t->name_len > s->longest)
            s->longest = t->name_len;
    }
    u->cap_nodes = u->ids.count;
    u->nodes = malloc((u->cap_nodes ? u->cap_nodes : 1) * sizeof *u->nodes);
    return u->nodes == NULL ? nomem(s) : 0;
}

ck_pb_users *ck_pb_users_scan(const ck_model *m, ck_error *err)
{
    ck_pb_users *u = calloc(1, sizeof *u);
    scan *s = calloc(1, sizeof *s);
    if (u == NULL || s == NULL) {
        free(u);
        free(s);
        ck_nomem(err, m->path);
        return NULL;
    }
    ck_name_map_init(&u->ids);
    ck_arena_init(&u->arena);
    int rc = 0;
    if (m->state != NULL) { /* a model created empty has no graph: nothing reads */
        s->m = m;
        s->u = u;
        s->err = err;
        const ck_pb_schema *sc = ck_pb_layout_of(m)->mindir ? &ck_pb_mindir_schema
                                                            : &ck_pb_onnx_schema;
        ck_pb_walk_init(&s->w, sc, &visitor, s, m->sources[0], err);
        rc = track_tensors(s);
        if (rc == 0 && u->ids.count > 0)
            rc = ck_pb_walk_model(&s->w);
    }
    free(s);
    if (rc < 0) {
        ck_pb_users_free(u);
        return NULL;
    }
    return u;
}

void ck_pb_users_free(ck_pb_users *u)
{
    if (u == NULL)
        return;
    ck_name_map_free(&u->ids);
    ck_arena_free(&u->arena);
    free(u->reader);
    free(u->nodes);
    free(u);
}

bool ck_pb_users_find(const ck_pb_users *u, const char *name, size_t len,
                      char node[CK_PB_USERS_NODE_BUF])
{
    uint32_t id = ck_name_map_get(&u->ids, name, len);
    if (id == CK_NAME_MAP_NONE || u->reader[id] == CK_NAME_MAP_NONE)
        return false;
    snprintf(node, CK_PB_USERS_NODE_BUF, "%s", u->nodes[u->reader[id]]);
    return true;
}

/* A tensor that lives inside a node (a Constant's value, a subgraph's
 * tensor, a part of a MindIR map parameter) has no existence apart from
 * it: deleting or renaming it would break the node. */
static int held_by_node(const ck_model *m, const ck_pb_tensor *pt, const char *dir,
                        ck_error *err)
{
    char node[CK_QUOTE_BUF];
    if (pt->role == CK_ROLE_MAP)
        return ck_fail(err, EBUSY, "%s: tensor '%s' is part of a map parameter; it cannot be "
                       "deleted or renamed", m->path, dir);
    if (pt->holder != NULL && pt->holder[0] != '\0')
        return ck_fail(err, EBUSY, "%s: tensor '%s' is held by node '%s'; it cannot be "
                       "deleted or renamed", m->path, dir,
                       ck_quote(node, pt->holder, strlen(pt->holder)));
    if (pt->holder != NULL) /* a Constant without a name */
        return ck_fail(err, EBUSY, "%s: tensor '%s' is the value of a Constant node; it "
                       "cannot be deleted or renamed", m->path, dir);
    return ck_fail(err, EBUSY, "%s: tensor '%s' lives in a subgraph of a node; it cannot be "
                   "deleted or renamed", m->path, dir);
}

int ck_pb_may_remove(ck_model *m, uint32_t id, const char *shown, ck_error *err)
{
    char dir[CK_QUOTE_BUF], node[CK_PB_USERS_NODE_BUF];
    ck_quote(dir, shown, strlen(shown));
    ck_pb_layout *pb = ck_pb_layout_of(m);
    const ck_pb_tensor *pt = &pb->tensors[id];
    if (pt->role != CK_ROLE_TOP)
        return held_by_node(m, pt, dir, err);
    if (pb->users == NULL && (pb->users = ck_pb_users_scan(m, err)) == NULL)
        return -1;
    /* The file's spelling, which node inputs use: MindIR parameters keep
     * their "GRAPH:" prefix there. */
    const ck_tensor *t = &m->index.tensors[id];
    if (!ck_pb_users_find(pb->users, t->name, t->name_len, node))
        return 0;
    return ck_fail(err, EBUSY, "%s: tensor '%s' is an input of node '%s'; it cannot be "
                   "deleted or renamed", m->path, dir, node);
}
