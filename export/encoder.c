#include "encoder.h"

#include "ckpt_writer.h"
#include "onnx_mindir_writer.h"

int ck_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n, int out_fd,
              ck_error *err)
{
    if (m->format == CK_FORMAT_CKPT)
        return ck_ckpt_write(m, tensors, n, NULL, out_fd, err);
    return ck_pb_write(m, tensors, n, out_fd, err);
}
