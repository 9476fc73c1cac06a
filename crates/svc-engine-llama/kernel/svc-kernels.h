// svc's kernels for ggml's CPU backend, shared between the files of this
// folder (attention.cpp adopts a backend and rewrites its graphs' nodes).
#pragma once

#include "ggml.h"

// Whether `node` is a matrix product that product.cpp computes as ggml
// would (Q4_1, Q4_K or Q6_K weights, not repacked, by F32 activations).
bool svc_product_supported(const ggml_tensor * node);

// The custom operation computing such a node (ggml_custom_op_t).
void svc_product(ggml_tensor * dst, int ith, int nth, void * userdata);
