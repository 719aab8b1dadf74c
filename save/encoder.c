/* SPDX-License-Identifier: Apache-2.0 */
#include "encoder.h"

#include <errno.h>
#include <limits.h>

#include "../codec/io/atomic_writer.h"
#include "../codec/core/saved_index.h"
#include "../codec/registry.h"
#include "verify.h"

int ck_model_may_save(const ck_model *m, ck_error *err)
{
    if (m->mapped_by != NULL)
        return ck_fail(err, ENOTSUP, "%s: shown through map %s, whose names it does not "
                       "hold: saving edits back through a map is not built yet", m->path,
                       m->mapped_by);
    if (ck_writer_of(m) == NULL)
        return ck_fail(err, ENOTSUP, "%s: ckptfs reads %s models but does not save them yet",
                       m->path, m->format->title);
    const char *why = ck_envelope_read_only(&m->env);
    if (why != NULL)
        return ck_fail(err, ENOTSUP, "%s: %s", m->path, why);
    return 0;
}

int ck_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
              ck_commit_group *g, ck_error *err)
{
    return ck_encode_keep(m, tensors, n, g, NULL, NULL, err);
}

int ck_encode_keep(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                   ck_commit_group *g, const ck_open_opts *as, ck_model **saved,
                   ck_error *err)
{
    /* A loaded index's records are copied as they are: each checked first. */
    if (ck_model_may_save(m, err) < 0 || ck_saved_index_check_all(m, err) < 0)
        return -1;
    const ck_writer *w = ck_writer_of(m);
    /* What the reader would refuse is refused before a byte is written,
     * not found by the read-back check. */
    for (size_t i = 0; i < n; i++) {
        const ck_write_tensor *t = &tensors[i];
        char q[CK_QUOTE_BUF], why[128];
        if (!t->unchanged &&
            ck_shape_refusal(w->shape, t->dtype, t->dims, t->ndim, why, sizeof why) != NULL)
            return ck_fail(err, EINVAL, "%s: tensor '%s': %s cannot hold it: %s; nothing was "
                           "saved", m->path, ck_quote(q, t->name, t->name_len),
                           m->format->title, why);
    }
    int rc = w->encode(m, tensors, n, g, err);
    /* Nothing is committed that the reader would refuse or read otherwise. */
    return rc < 0 ? -1 : ck_verify_save(m, tensors, n, g, as, saved, err);
}

void ck_encode_cleanup(const ck_model *m)
{
    const ck_model_dir *d = m->dir;
    ck_atomic_cleanup(d, d->base, m->st.st_uid);
    for (uint32_t i = 1; i < m->n_sources; i++) {
        const char *rel = ck_dir_rel(d, m->sources[i]->path);
        if (ck_model_is_data_file(m, i) && rel != NULL)
            ck_atomic_cleanup(d, rel, m->st.st_uid);
    }
    char rel[PATH_MAX];
    const ck_writer *w = ck_writer_of(m);
    if (w != NULL && w->new_data_file != NULL && w->new_data_file(m, rel, sizeof rel))
        ck_atomic_cleanup(d, rel, m->st.st_uid);
}
