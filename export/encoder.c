#include "encoder.h"

#include <limits.h>

#include "atomic_writer.h"
#include "ckpt_writer.h"
#include "onnx_mindir_writer.h"
#include "verify.h"

int ck_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
              ck_commit_group *g, ck_error *err)
{
    int rc = m->format == CK_FORMAT_CKPT ? ck_ckpt_write(m, tensors, n, NULL, g->files[0].fd, err)
                                         : ck_pb_write(m, tensors, n, g, err);
    /* Nothing is committed that the reader would refuse or read otherwise. */
    return rc < 0 ? -1 : ck_verify_save(m, tensors, n, g, err);
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
    if (m->format != CK_FORMAT_CKPT) {
        char big[PATH_MAX];
        ck_pb_big_data_name(m, big, sizeof big);
        ck_atomic_cleanup(d, big, m->st.st_uid);
    }
}
