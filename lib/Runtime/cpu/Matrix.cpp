//===- Matrix.cpp - CPU kernels: matrix products ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the matrix products family of Ops.def, registered per op.
// Their bodies are still in Kernels.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

SHOAL_CPU_KERNEL(matmulKernel) { matmul(input(in, 0), input(in, 1), out[0]); }

SHOAL_CPU_KERNEL(gemmKernel) {
  const OpAttrs &a = op.attrs;
  gemm(input(in, 0), input(in, 1), optionalInput(in, 2), a.alpha, a.beta,
       a.transA, a.transB, out[0]);
}

SHOAL_CPU_KERNEL(attentionKernel) {
  attention(input(in, 0), input(in, 1), input(in, 2), optionalInput(in, 3),
            op.attrs.scale, out[0]);
}

} // namespace

void shoal::rt::cpu::registerMatrixKernels() {
  registerCpuKernel(OpKind::MatMul, matmulKernel);
  registerCpuKernel(OpKind::Gemm, gemmKernel);
  registerCpuKernel(OpKind::Attention, attentionKernel);
}
