//===- OpCheck.h - One op through its type rule and kernel ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// For the kernel tests: an op built with its value types and attributes,
// checked by its type rule as the plan loader checks it (`checkOp`), and
// run through its registered kernel as the scheduler runs it; errorOf and
// EXPECT_CONTAINS for the messages of rejected ones.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_UNITTESTS_RUNTIME_OPCHECK_H
#define SHOAL_UNITTESTS_RUNTIME_OPCHECK_H

#include "BackendRegistry.h"
#include "ErrorOf.h"
#include "KernelRegistry.h"
#include "Ops.h"
#include "PlanLoader.h"
#include "cpu/Backend.h"
#include "shoal/Runtime/Error.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace shoal {
namespace rt {
namespace test {

#define EXPECT_CONTAINS(text, part)                                            \
  do {                                                                         \
    std::string text_ = (text);                                                \
    EXPECT_NE(text_.find(part), std::string::npos)                             \
        << "message was: " << text_;                                           \
  } while (0)

/// One op against `types`, checked the way plan validation does.
struct OpCheck {
  explicit OpCheck(const std::string &kind) { op.set_kind(kind); }
  int value(DType dtype, const Shape &shape) {
    types.push_back({dtype, shape});
    return static_cast<int>(types.size()) - 1;
  }
  OpCheck &in(DType dtype, const Shape &shape) {
    op.add_inputs(value(dtype, shape));
    return *this;
  }
  OpCheck &absentIn() {
    op.add_inputs(-1);
    return *this;
  }
  OpCheck &out(DType dtype, const Shape &shape) {
    op.add_outputs(value(dtype, shape));
    return *this;
  }
  OpCheck &absentOut() {
    op.add_outputs(-1);
    return *this;
  }
  OpCheck &i(const std::string &name, int64_t v) {
    PlanBuilder::attrInt(op, name, v);
    return *this;
  }
  OpCheck &f(const std::string &name, double v) {
    PlanBuilder::attrFloat(op, name, v);
    return *this;
  }
  OpCheck &s(const std::string &name, const std::string &v) {
    (*op.mutable_attrs())[name].set_s(v);
    return *this;
  }
  OpCheck &ints(const std::string &name, const std::vector<int64_t> &v) {
    op.mutable_attrs()->erase(name);
    PlanBuilder::attrInts(op, name, v);
    return *this;
  }
  OpCheck &strs(const std::string &name, const std::vector<std::string> &v) {
    op.mutable_attrs()->erase(name);
    PlanBuilder::attrStrings(op, name, v);
    return *this;
  }
  OpInfo info() const { return checkOp(op, 0, types, mesh); }
  /// The type rule's message, or "" when the op passes.
  std::string error() const {
    return errorOf([&] { checkOp(op, 0, types, mesh); });
  }
  /// Runs the registered kernel of `backend` as the scheduler does: the
  /// outputs allocated with their declared types (on the host), this rank
  /// at `groupIndex` in the op's group.
  std::vector<Tensor> run(const std::vector<const Tensor *> &inputs,
                          BackendKind backend = BackendKind::CPU,
                          int64_t groupIndex = 0) {
    registerCpuKernels();
    OpInfo inf = info();
    KernelFn fn = findKernel(inf.kind, backend);
    EXPECT_NE(fn, nullptr) << inf.kindName;
    std::vector<Tensor> outputs;
    for (int v : inf.outputs)
      outputs.push_back(v >= 0 ? Tensor(types[v]) : Tensor());
    plan.values = types;
    // CPU kernels never touch the device, nor do CUDA kernels that refuse
    // their operands.
    alignas(std::max_align_t) static char deviceStorage[64];
    KernelContext ctx{plan, reinterpret_cast<Device &>(deviceStorage),
                      groupIndex};
    if (fn)
      fn(ctx, inf, inputs, outputs);
    return outputs;
  }
  /// Host tensors of the input types.
  std::vector<Tensor> inputTensors() const {
    std::vector<Tensor> t;
    for (int v : op.inputs())
      t.push_back(Tensor(types[v]));
    return t;
  }

  plan::Op op;
  std::vector<TensorType> types;
  /// The mesh of the op's axes (the vocabulary-parallel ops' shard_axes).
  Mesh mesh;
  LoadedPlan plan;
};

} // namespace test
} // namespace rt
} // namespace shoal

#endif // SHOAL_UNITTESTS_RUNTIME_OPCHECK_H
