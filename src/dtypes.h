/*
** dtypes.h — the element types, in resccl_datatype_t's order
** (include/resccl.h): each one's enum tag, short name and size, for the
** compiler (core.h's Dtype, data.c), libresccl (runtime/config.c) and
** resccl-bench alike.
*/
#ifndef RESCCL_DTYPES_H
#define RESCCL_DTYPES_H

#define RX_DTYPES(X)                                                                                  \
  X(I8, "i8", 1) X(U8, "u8", 1) X(I32, "i32", 4) X(U32, "u32", 4) X(I64, "i64", 8) X(U64, "u64", 8) \
  X(F16, "f16", 2) X(F32, "f32", 4) X(F64, "f64", 8) X(BF16, "bf16", 2)

#endif
