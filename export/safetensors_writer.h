/*
 * safetensors_writer: encode a tree back into a safetensors file
 * (safetensors_writer.c says how it is laid out).
 */
#ifndef CK_SAFETENSORS_WRITER_H
#define CK_SAFETENSORS_WRITER_H

#include "encoder.h"

/* The writer (encoder.h). */
extern const ck_writer ck_safetensors_writer;

#endif
