/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_pickle: the names in a OneFlow 0.6-0.9 snapshot directory's
 * `pickled_data`, read without executing anything.
 *
 * flow.save(state_dict, dir) writes dir/pickled_data, a pickle of
 * {"protocol_version": 1, "data": OrderedDict([(name, Parameter or Tensor
 * reduced to {"path": "tensor_<N>"}), ...])}, and each tensor's bytes as
 * dir/tensor_<N>/{meta,out} (global tensors: global_tensor_<id>).  OneFlow
 * 1.0's flow.save(..., save_as_external_data=True) writes the same with
 * its magic key ("oneflow" or "__oneflow__": None) in the top dict.  The
 * tensor directories carry no names: the pickle is the only place the
 * real ones are.
 *
 * This reads the small subset of pickle opcodes OneFlow's writer emits
 * (protocols 2 to 5) as a symbolic stack machine: globals are names
 * compared against an allow-list (collections.OrderedDict,
 * oneflow.nn.Parameter, oneflow.Tensor and its internal spellings), never
 * resolved.  Anything else is refused with the byte offset of the opcode
 * that is not understood.  Calling a global makes an empty dict or a
 * tensor node, and only with no arguments; BUILD gives a tensor its state,
 * or an OrderedDict its _metadata (ignored).  Keys must be strings (UTF-8,
 * no NUL); a name or a path given twice is refused.  Bounded: 64 MiB of
 * pickle, 2^20 entries, a stack of 2^16, 64 nested marks, a memo and a
 * node count of about 8 x 2^20; every length checked against the bytes
 * left.
 */
#ifndef CK_ONEFLOW_PICKLE_H
#define CK_ONEFLOW_PICKLE_H

#include <stddef.h>

#include "../collection.h"
#include "../core/ck_error.h"

/* pickled_data bigger than this is refused: OneFlow's is ~100 bytes per
 * tensor. */
#define CK_PICKLE_MAX_BYTES (64u << 20)
/* At most this many tensors in one pickle. */
#define CK_PICKLE_MAX_ENTRIES (1u << 20)

/* Each entry: the state-dict key, and its directory "tensor_<N>"; in the
 * pickle's (the state dict's) order. */
typedef ck_named_dir ck_pickle_entry;
typedef ck_named_dirs ck_pickle_names;

/* Parse buf (len bytes of a pickled_data file; file names it in messages)
 * into out: 0, or -1 with err naming file and the offset.  Duplicate
 * names, duplicate paths, a path that is not one directory name, and a
 * protocol_version other than 1 are refused.  Free out with
 * ck_pickle_names_free (also after a failure). */
int ck_pickle_names_parse(const void *buf, size_t len, const char *file, ck_pickle_names *out,
                          ck_error *err);
void ck_pickle_names_free(ck_pickle_names *names);

#endif
