//===- Shape.cpp - CPU kernels: shapes and data movement --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the shapes and data movement family of Ops.def, registered
// per op. Their bodies are still in Kernels.cpp and Kernels2.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

#include "PlanLoader.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

SHOAL_CPU_KERNEL(reshapeKernel) {
  // Shares the input's buffer.
  out[0] = Tensor::alias(input(in, 0), ctx.plan.values[op.outputs[0]].shape);
}

SHOAL_CPU_KERNEL(transposeKernel) {
  transpose(input(in, 0), op.attrs.perm, out[0]);
}

SHOAL_CPU_KERNEL(concatKernel) {
  std::vector<const Tensor *> all;
  for (std::size_t i = 0; i < in.size(); ++i)
    all.push_back(&input(in, i));
  concat(all, op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(splitKernel) {
  std::vector<Tensor *> parts;
  for (std::size_t i = 0; i < out.size(); ++i)
    parts.push_back(optionalOutput(out, i));
  split(input(in, 0), op.attrs.axis, op.attrs.split, parts);
}

SHOAL_CPU_KERNEL(sliceKernel) {
  slice(input(in, 0), op.attrs.starts, op.attrs.steps, out[0]);
}

SHOAL_CPU_KERNEL(expandKernel) { expand(input(in, 0), out[0]); }

SHOAL_CPU_KERNEL(padKernel) {
  const OpAttrs &a = op.attrs;
  pad(input(in, 0), a.pads, a.padMode, a.padValue, out[0]);
}

SHOAL_CPU_KERNEL(triluKernel) {
  trilu(input(in, 0), op.attrs.upper, op.attrs.k, out[0]);
}

} // namespace

void shoal::rt::cpu::registerShapeKernels() {
  registerCpuKernel(OpKind::Reshape, reshapeKernel);
  registerCpuKernel(OpKind::Transpose, transposeKernel);
  registerCpuKernel(OpKind::Concat, concatKernel);
  registerCpuKernel(OpKind::Split, splitKernel);
  registerCpuKernel(OpKind::Slice, sliceKernel);
  registerCpuKernel(OpKind::Expand, expandKernel);
  registerCpuKernel(OpKind::Pad, padKernel);
  registerCpuKernel(OpKind::Trilu, triluKernel);
}
