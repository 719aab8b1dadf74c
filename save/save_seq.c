/* SPDX-License-Identifier: Apache-2.0 */
/* save_seq: the save sequence's phases (see save_seq.h). */
#include "save_seq.h"

#include <stdlib.h>

#include "../codec/io/commit_group.h"
#include "encoder.h"

struct ck_save {
    ck_commit_group group;      /* the new files (zeroed: none yet) */
    const ck_model *m;          /* the model saved */
    ck_save_opts o;
    ck_model *saved;            /* the new files as read back (keep_as), until taken */
};

ck_save *ck_save_begin(const ck_model_dir *dir, const ck_model *m, const ck_save_opts *o,
                       ck_error *err)
{
    ck_save *s = calloc(1, sizeof *s);
    if (s == NULL) {
        ck_nomem(err, m->path);
        return NULL;
    }
    s->m = m;
    if (o != NULL)
        s->o = *o;
    if (ck_group_begin(&s->group, dir, err) < 0) {
        ck_save_abort(s);
        return NULL;
    }
    s->group.progress = s->o.progress;
    s->group.own_data = s->o.own_data;
    s->group.data_replace = s->o.data_replace;
    return s;
}

static int check(const ck_save *s, ck_error *err)
{
    return s->o.check != NULL ? s->o.check(s->o.check_arg, err) : 0;
}

int ck_save_run(ck_save *s, const ck_write_tensor *w, size_t n, ck_error *err)
{
    /* Checked first so that a changed file is named as such (its bytes
     * would not read back), and again just before the commit point. */
    if (check(s, err) < 0 ||
        ck_encode_keep(s->m, w, n, &s->group, s->o.keep_as,
                       s->o.keep_as != NULL ? &s->saved : NULL, err) < 0 ||
        check(s, err) < 0)
        return -1;
    return ck_group_commit_point(&s->group, err);
}

ck_model *ck_save_take_saved(ck_save *s)
{
    ck_model *m = s->saved;
    s->saved = NULL;
    return m;
}

bool ck_save_pending(const ck_save *s)
{
    return s != NULL && ck_group_pending(&s->group);
}

int ck_save_finish(ck_save *s, ck_error *err)
{
    if (s == NULL)
        return 0;
    int rc = ck_group_finish(&s->group, err); /* 0 when no commit point was passed */
    ck_save_abort(s);
    return rc;
}

void ck_save_abort(ck_save *s)
{
    if (s == NULL)
        return;
    ck_group_abort(&s->group);
    ck_model_close(s->saved);
    free(s);
}
