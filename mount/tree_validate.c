/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_validate: what blocks a save (tree_validate.h).
 *
 * A save checks every entry before anything is written: a missing meta
 * or out, a meta not valid yet, an out whose size is not the one its
 * meta's shape needs.  Each refusal names
 * its tensor, and all of them are said at once, so that a user fixing
 * one does not learn of the next at the next save.
 */
#include "tree_validate.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../codec/core/dtype.h"
#include "../codec/view.h"

static int validate(const tree *tr, const entry *e, ck_error *err)
{
    char q[CK_QUOTE_BUF];
    const char *path = tr->model->path;
    if (!entry_has_meta(e))
        return ck_fail(err, EINVAL, "%s: tensor '%s' has no meta; nothing was saved", path,
                       tree_quoted(tr, e, q));
    if (!entry_has_out(e))
        return ck_fail(err, EINVAL, "%s: tensor '%s' has no out; nothing was saved", path,
                       tree_quoted(tr, e, q));
    const ck_dtype *dt = entry_dtype(tr, e);
    if (dt == NULL)
        return ck_fail(err, EINVAL, "%s: tensor '%s': its meta is not valid; nothing was saved",
                       path, tree_quoted(tr, e, q));
    if (dt->kind == CK_KIND_STR)
        return 0;
    uint32_t ndim;
    const int64_t *dims = entry_dims(tr, e, &ndim);
    uint64_t want;
    /* out's byte count, as the view counts it */
    if (ck_shape_product(ck_view_shape(), dt, dims, ndim, &want) >= 0)
        return ck_fail(err, EINVAL, "%s: tensor '%s': the meta's shape is too large", path,
                       tree_quoted(tr, e, q));
    uint64_t have = entry_out_size(tr, e);
    if (have != want) {
        char shape[CK_META_MAX];
        size_t n = (size_t)snprintf(shape, sizeof shape, "[");
        for (uint32_t i = 0; i < ndim && n < sizeof shape; i++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? "," : "",
                                  (long long)dims[i]);
        snprintf(shape + n, sizeof shape - n, "]");
        return ck_fail(err, EINVAL, "%s: tensor '%s': out is %llu bytes but meta %s %s needs "
                       "%llu; nothing was saved", path, tree_quoted(tr, e, q),
                       (unsigned long long)have, shape, dt->of_name, (unsigned long long)want);
    }
    return 0;
}

/* The entries that block a save, each as validate() says it without the
 * model's path and "; nothing was saved", joined with "; " as many as
 * joined's CK_ERROR_MSG_MAX bytes hold (*shown of them) beside the path;
 * hold: mark each (entry.held).  *first: the first one's own message.  How
 * many there are. */
size_t tree_blockers(tree *tr, bool hold, char *joined, size_t *shown, ck_error *first)
{
    static const char tail[] = "; nothing was saved";
    const char *path = tr->model->path;
    size_t plen = strlen(path), n_bad = 0, len = 0;
    *shown = 0;
    joined[0] = '\0';
    for (size_t i = 0; i < tr->n_entries; i++) {
        ck_error one = {0};
        if (tr->entries[i].deleted || validate(tr, &tr->entries[i], &one) == 0)
            continue;
        tr->entries[i].held = hold;
        if (n_bad++ == 0)
            *first = one;
        /* "PATH: tensor ...; nothing was saved" -> "tensor ..." */
        const char *m = one.msg;
        size_t mlen = strlen(m);
        if (mlen > plen + 2 && strncmp(m, path, plen) == 0 && m[plen] == ':')
            m += plen + 2, mlen -= plen + 2;
        if (mlen >= sizeof tail - 1 && strcmp(m + mlen - (sizeof tail - 1), tail) == 0)
            mlen -= sizeof tail - 1;
        if (len + mlen + 2 + 96 + plen >= CK_ERROR_MSG_MAX)
            continue; /* counted, not shown */
        len += (size_t)snprintf(joined + len, CK_ERROR_MSG_MAX - len, "%s%.*s",
                                *shown ? "; " : "", (int)mlen, m);
        (*shown)++;
    }
    return n_bad;
}

/* Every entry that blocks the save, named in one line: a user fixing
 * the first would otherwise learn of the next only at the next save.
 * One refusal reads as validate() says it; several are joined, as many
 * as the line holds, and counted. */
int tree_validate_all(tree *tr, ck_error *err)
{
    char joined[CK_ERROR_MSG_MAX];
    size_t shown;
    size_t n_bad = tree_blockers(tr, false, joined, &shown, err);
    const char *path = tr->model->path;
    if (n_bad <= 1)
        return n_bad == 0 ? 0 : -1;
    if (shown < n_bad)
        return ck_fail(err, EINVAL, "%s: %zu tensors block the save: %s; and %zu more; nothing "
                       "was saved", path, n_bad, joined, n_bad - shown);
    return ck_fail(err, EINVAL, "%s: %zu tensors block the save: %s; nothing was saved", path,
                   n_bad, joined);
}

void tree_unhold(tree *tr)
{
    for (size_t i = 0; i < tr->n_entries; i++)
        tr->entries[i].held = false;
}
