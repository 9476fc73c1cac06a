// svc's kernels for ggml's CPU backend, shared between the files of this
// folder (attention.cpp adopts a backend and rewrites its graphs' nodes).
#pragma once

#include "ggml.h"

// Whether `node` is a matrix product (MUL_MAT, or a mixture of experts'
// MUL_MAT_ID) that product.cpp computes with the bits of ggml's one-token
// dot product for every token (weights of a type ggml multiplies otherwise
// for several tokens, or Q4_1; not repacked; by F32 activations).
bool svc_product_supported(const ggml_tensor * node);

// Whether this build has product.cpp's kernels (AVX2, FMA and F16C): for
// numerics.rs, which chooses ggml's reference kernels where it does not.
extern "C" bool svc_product_available(void);

// The custom operation computing such a node (ggml_custom_op_t).
void svc_product(ggml_tensor * dst, int ith, int nth, void * userdata);
