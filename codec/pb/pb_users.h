/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pb_users: which graph node reads a main-graph tensor of an ONNX or
 * MindIR model.
 *
 * A node names the tensors it reads in its `input` list.  Deleting or
 * renaming an initializer (ONNX) / parameter (MindIR) that some node still
 * reads would save a model its runtime refuses, so the front-end asks here
 * before it lets rmdir(2) or rename(2) of such a tensor through.
 *
 * The answer comes from one scan of the graph structure in the file: the
 * main graph, MindIR functions, and every subgraph of a node attribute (If
 * and Loop bodies).  The scan is a visitor of the graph walk the reader
 * makes (pb_graph_walk.h), so it follows the graphs the reader does, as
 * deep.  Tensor payloads are skipped by their length.  The scan is done
 * once, on the first question, and kept until a commit replaces the model,
 * so mounting does not pay for it and `rm -r` of many tensors does not
 * rescan the file for each.  Names are matched as the index holds them,
 * the file's spelling, which node inputs use: a MindIR parameter keeps its
 * "GRAPH:" prefix there.  Its memory is bounded by the
 * model's tensors: a map slot per main-graph tensor (keys borrowed from the
 * index), 4 bytes per tensor, and the label of at most one reading node per
 * main-graph tensor.
 */
#ifndef CK_PB_USERS_H
#define CK_PB_USERS_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/ck_error.h"
#include "../core/model.h"

typedef struct ck_pb_users ck_pb_users;

/* Scan m (an ONNX or MindIR model) for the nodes that read its main-graph
 * tensors.  The result borrows m's tensor names: free it before closing m.
 * NULL with err filled on failure (ENOMEM, EIO, or a graph nested deeper
 * than the reader allows). */
ck_pb_users *ck_pb_users_scan(const ck_model *m, ck_error *err);
void ck_pb_users_free(ck_pb_users *u);

/* A node's label in a message: its name quoted (ck_quote), or "#N (OP)",
 * its position in its graph and its op_type quoted, when it has none. */
#define CK_PB_USERS_NODE_BUF (2 * CK_QUOTE_BUF + 32)

/* Whether a node reads the main-graph tensor called name, as the file
 * spells it (MindIR parameters keep their "GRAPH:" prefix there); if so,
 * node gets the label of the first such node the scan met (file order). */
bool ck_pb_users_find(const ck_pb_users *u, const char *name, size_t len,
                      char node[CK_PB_USERS_NODE_BUF]);

/* The graph-reader rule behind ck_model_may_remove() for an ONNX or
 * MindIR model: tensor id may go unless a node reads it or holds it.  The
 * users are scanned on the first question and kept in m. */
int ck_pb_may_remove(ck_model *m, uint32_t id, const char *shown, ck_error *err);

#endif
