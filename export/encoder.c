#include "encoder.h"

#include "ckpt_writer.h"
#include "onnx_mindir_writer.h"

int ck_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
              ck_commit_group *g, ck_error *err)
{
    if (m->format == CK_FORMAT_CKPT)
        return ck_ckpt_write(m, tensors, n, NULL, g->files[0].fd, err);
    return ck_pb_write(m, tensors, n, g, err);
}
