/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nodes: the tree's nodes as the kernel sees them (see mount/nodes.h): the
 * node behind an inode number, its attributes and cache timeouts, and its
 * path under the mount point.  Shared by the mount's operations and the
 * replies to saves; no request is answered here.
 */
#include "nodes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../codec/view.h"
#include "file_view.h"

/* The entry behind a tensor inode, or NULL. */
static entry *entry_at(ckfs *fs, uint32_t pos)
{
    return pos < fs->tr.n_entries ? &fs->tr.entries[pos] : NULL;
}

/* The node behind an inode the kernel holds.  snapshot_done's name is
 * absent while the tree has edits (model_ops.c: ckfs_op_lookup, dir_entry), but
 * its inode stays valid, as an unlinked file's does while open: touch
 * creates it, which saves, then checks its attributes and sets its times,
 * perhaps after another program's edit has made the tree dirty again. */
node_kind ckfs_resolve(ckfs *fs, ckfs_ino ino, entry **e)
{
    uint32_t pos = 0;
    node_kind k = ino_kind(ino, &pos);
    *e = NULL;
    if ((fs->view != NULL) != (k == NODE_VIEW) && k != NODE_ROOT)
        return NODE_NONE; /* a view shows no tree, a tree no view */
    if (k == NODE_VIEW && pos >= ckfs_view_count(fs->view))
        return NODE_NONE;
    if (k == NODE_EXTRA) {
        if (pos >= fs->tr.n_extras)
            return NODE_NONE;
        const extra *x = &fs->tr.extras[pos];
        switch (x->alias) {
        case ALIAS_NONE:
            return x->deleted ? NODE_NONE : k;
        case ALIAS_SNAPSHOT_DONE:
            return ckfs_resolve(fs, INO_SNAPSHOT_DONE, e);
        default: /* stands for its directory's meta or out */
            return ckfs_resolve(fs, ino_of_tensor(x->dir, x->alias == ALIAS_META ? NODE_META
                                                                                : NODE_OUT), e);
        }
    }
    if (k == NODE_TENSOR_DIR || k == NODE_META || k == NODE_OUT) {
        *e = entry_at(fs, pos);
        if (*e == NULL || (*e)->deleted || (k == NODE_META && !entry_has_meta(*e)) ||
            (k == NODE_OUT && !entry_has_out(*e)))
            return NODE_NONE;
    }
    return k;
}

/* The directory name of the entry at pos, if it still has one. */
static const char *dir_name_at(const ckfs *fs, uint32_t pos)
{
    const entry *e = pos < fs->tr.n_entries ? &fs->tr.entries[pos] : NULL;
    if (e == NULL || (e->tensor_id == ENTRY_NEW && (e->edit == NULL || !e->edit->dir_name)))
        return NULL;
    return entry_dir_name(&fs->tr, e);
}

/* Where node ino is, with /name appended when name is not NULL: the path a
 * refusal is about, such as MNT/conv1.weight/meta. */
const char *ckfs_path_of(const ckfs *fs, ckfs_ino ino, const char *name, char *buf,
                         size_t cap)
{
    uint32_t pos = 0;
    const char *dir = NULL, *file = NULL;
    node_kind k = ino_kind(ino, &pos);
    if (k == NODE_SNAPSHOT_DONE) {
        file = "snapshot_done";
    } else if (k == NODE_VIEW) {
        file = fs->view != NULL && pos < ckfs_view_count(fs->view)
                   ? ckfs_view_name(fs->view, pos) : NULL;
    } else if (k == NODE_TENSOR_DIR || k == NODE_META || k == NODE_OUT) {
        dir = dir_name_at(fs, pos);
        file = k == NODE_META ? "meta" : k == NODE_OUT ? "out" : NULL;
    } else if (k == NODE_EXTRA && pos < fs->tr.n_extras) {
        const extra *x = &fs->tr.extras[pos];
        dir = x->dir == EXTRA_IN_ROOT ? NULL : dir_name_at(fs, x->dir);
        file = x->name;
    }
    snprintf(buf, cap, "%s%s%s%s%s%s%s", fs->mountpoint, dir ? "/" : "", dir ? dir : "",
             file ? "/" : "", file ? file : "", name ? "/" : "", name ? name : "");
    return buf;
}

/* Who may see what: the tree has the model file's owner and permission
 * bits, which the kernel checks (default_permissions), so no one reads
 * through the mount, even with allow_other, what the file would not let
 * them read.  Files get the r and w bits; directories also x wherever r
 * is.  A read-only mount drops every w; a writable one lets the owner
 * write (-o rw of a 0400 model). */
static mode_t file_mode_of(const ckfs *fs)
{
    mode_t m = fs->tr.file_st.st_mode & 0666;
    return fs->tr.writable ? m | S_IWUSR : m & ~(mode_t)0222;
}

static mode_t dir_mode_of(const ckfs *fs)
{
    mode_t m = file_mode_of(fs);
    return m | (m & 0444) >> 2;
}

/* The attributes of node ino, of kind k (entry e). */
int ckfs_attr_of(ckfs *fs, ckfs_ino ino, node_kind k, const entry *e, struct stat *st)
{
    const struct stat *ms = &fs->tr.file_st;
    mode_t file_mode = file_mode_of(fs);
    mode_t dir_mode = dir_mode_of(fs);
    if (e != NULL && (k == NODE_TENSOR_DIR || k == NODE_META || k == NODE_OUT) &&
        !entry_writable(&fs->tr, e)) { /* the mode says what a write will do */
        file_mode &= ~(mode_t)0222;
        dir_mode &= ~(mode_t)0222;
    }
    memset(st, 0, sizeof *st);
    st->st_ino = fs->ino_base | ino; /* the number the kernel knows */
    st->st_uid = ms->st_uid;
    st->st_gid = ms->st_gid;
    /* The later of the file's time and the node's last edit (tree.h),
     * so that rsync's quick check sees an edit before it is saved. */
    struct timespec t = ms->st_mtim;
    if (k == NODE_ROOT)
        t = tree_root_mtime(&fs->tr);
    else if (k == NODE_EXTRA)
        t = tree_extra_mtime(&fs->tr, ino - INO_EXTRA_BASE);
    else if (e != NULL && k == NODE_TENSOR_DIR)
        t = tree_entry_dir_mtime(&fs->tr, e);
    else if (e != NULL)
        t = tree_entry_mtime(&fs->tr, e);
    st->st_atim = t;
    st->st_mtim = t;
    st->st_ctim = t;
    st->st_blksize = 65536;
    st->st_nlink = 1;
    switch (k) {
    case NODE_ROOT:
        st->st_mode = S_IFDIR | dir_mode;
        st->st_nlink = fs->view != NULL ? 2 : 2 + fs->tr.n_entries;
        break;
    case NODE_VIEW:
        st->st_mode = S_IFREG | file_mode;
        st->st_size = (off_t)ckfs_view_size(fs->view, ino - INO_VIEW_BASE);
        break;
    case NODE_TENSOR_DIR:
        st->st_mode = S_IFDIR | dir_mode;
        st->st_nlink = 2;
        break;
    case NODE_SNAPSHOT_DONE:
        st->st_mode = S_IFREG | file_mode;
        break;
    case NODE_META: {
        char meta[CK_META_MAX];
        st->st_mode = S_IFREG | file_mode;
        st->st_size = (off_t)entry_meta_text(&fs->tr, e, meta, sizeof meta);
        break;
    }
    case NODE_OUT:
        st->st_mode = S_IFREG | file_mode;
        st->st_size = (off_t)entry_out_size(&fs->tr, e);
        break;
    case NODE_EXTRA:
        st->st_mode = ckfs_extra_of(fs, ino)->mode ? ckfs_extra_of(fs, ino)->mode
                                                   : S_IFREG | file_mode;
        st->st_size = (off_t)ckfs_extra_of(fs, ino)->area.size;
        break;
    default:
        return -ENOENT;
    }
    st->st_blocks = (st->st_size + 511) / 512;
    return 0;
}

int ckfs_fill_attr(ckfs *fs, ckfs_ino ino, struct stat *st)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    return ckfs_attr_of(fs, ino, k, e, st);
}

/* How long the kernel may keep a name and attributes.  On a writable
 * mount, snapshot_done comes and goes with the edits, and the temporary
 * files of tools are renamed over meta, out and snapshot_done: the kernel
 * never caches those (invalidating snapshot_done's name from a request
 * would wait for the very directory lock that request holds).  Everything
 * else is cached long, and what changes without the kernel seeing it is
 * invalidated: a meta reformatted when it is parsed at close, the times
 * after a save (ckfs_invalidate_attrs). */
double ckfs_timeout_of(const ckfs *fs, ckfs_ino ino)
{
    uint32_t pos;
    node_kind k = ino_kind(ino, &pos);
    if (fs->tr.writable && (k == NODE_SNAPSHOT_DONE || k == NODE_EXTRA))
        return 0.0;
    return fs->timeout;
}

/* How long the kernel may keep a name.  A tensor directory made in the
 * mount and not saved yet may lose its name at the save, without the
 * kernel seeing it: a copied snapshot's tensor_<N> takes its real
 * name (tree.h, the names file).  The save is answered before the kernel
 * can be told (it would wait for the directory lock of the very request
 * that asked for the save), so such names are not cached at all: the
 * kernel asks again, and learns of the rename as the save is answered. */
static double name_timeout_of(const ckfs *fs, ckfs_ino ino)
{
    uint32_t pos;
    if (fs->tr.writable && ino_kind(ino, &pos) == NODE_TENSOR_DIR && pos < fs->tr.n_entries &&
        fs->tr.entries[pos].tensor_id == ENTRY_NEW)
        return 0.0;
    return ckfs_timeout_of(fs, ino);
}

int ckfs_fill_entry(ckfs *fs, ckfs_ino ino, ckfs_entry_out *e)
{
    memset(e, 0, sizeof *e);
    if (ckfs_fill_attr(fs, ino, &e->attr) < 0)
        return -1;
    e->ino = fs->ino_base | ino;
    e->generation = ckfs_generation_of(fs, e->ino);
    e->attr_timeout = ckfs_timeout_of(fs, ino);
    e->entry_timeout = name_timeout_of(fs, ino);
    return 0;
}

/* The inode numbers of a mount stay those of its tree, whose positions
 * never move; a tree opened afresh from the file numbers its tensors by
 * their place in the file instead (see tree_numbered_as_file). */
bool ckfs_numbered_as_file(ckfs *fs)
{
    pthread_rwlock_rdlock(&fs->lock);
    bool same = !fs->tr.writable || tree_numbered_as_file(&fs->tr);
    pthread_rwlock_unlock(&fs->lock);
    return same;
}
