#include "encoder.h"

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
