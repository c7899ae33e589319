//===- Indexing.cpp - CPU kernels: indexing ---------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the indexing family of Ops.def, registered per op.
// Their bodies are still in Kernels.cpp and Kernels2.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

SHOAL_CPU_KERNEL(gatherKernel) {
  gather(input(in, 0), input(in, 1), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(gatherElementsKernel) {
  gatherElements(input(in, 0), input(in, 1), op.attrs.axis, out[0]);
}

SHOAL_CPU_KERNEL(scatterElementsKernel) {
  scatterElements(input(in, 0), input(in, 1), input(in, 2), op.attrs.axis,
                  op.attrs.reduction, out[0]);
}

SHOAL_CPU_KERNEL(topKKernel) {
  const OpAttrs &a = op.attrs;
  topK(input(in, 0), a.k, a.axis, a.largest, out[0], optionalOutput(out, 1));
}

} // namespace

void shoal::rt::cpu::registerIndexingKernels() {
  registerCpuKernel(OpKind::Gather, gatherKernel);
  registerCpuKernel(OpKind::GatherElements, gatherElementsKernel);
  registerCpuKernel(OpKind::ScatterElements, scatterElementsKernel);
  registerCpuKernel(OpKind::TopK, topKKernel);
}
