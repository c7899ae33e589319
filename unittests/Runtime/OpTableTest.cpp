//===- OpTableTest.cpp - The op table and the kernel registry ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "KernelRegistry.h"
#include "Ops.h"
#include "PlanLoader.h"
#include "cpu/Backend.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <set>

using namespace shoal;
using namespace shoal::rt;
using namespace shoal::rt::test;

namespace {

/// Expects `stmt` to throw Error with `part` in its message.
#define EXPECT_THROW_MSG(stmt, part)                                           \
  do {                                                                         \
    try {                                                                      \
      stmt;                                                                    \
      ADD_FAILURE() << "no error from " #stmt;                                 \
    } catch (const Error &e) {                                                 \
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)           \
          << "message was: " << e.what();                                      \
    }                                                                          \
  } while (0)

/// An op checked by its type rule, as the plan loader does, with the program
/// values it reads and writes.
struct CheckedOp {
  explicit CheckedOp(const std::string &kind) { op.set_kind(kind); }
  CheckedOp &in(DType dtype, const Shape &shape) {
    op.add_inputs(value(dtype, shape));
    return *this;
  }
  CheckedOp &absentIn() {
    op.add_inputs(-1);
    return *this;
  }
  CheckedOp &out(DType dtype, const Shape &shape) {
    op.add_outputs(value(dtype, shape));
    return *this;
  }
  CheckedOp &absentOut() {
    op.add_outputs(-1);
    return *this;
  }
  CheckedOp &attr(const std::string &name, int64_t v) {
    PlanBuilder::attrInt(op, name, v);
    return *this;
  }
  CheckedOp &attrs(const std::string &name, const std::vector<int64_t> &v) {
    PlanBuilder::attrInts(op, name, v);
    return *this;
  }
  CheckedOp &axes(const std::vector<std::string> &v) {
    PlanBuilder::attrStrings(op, "axes", v);
    return *this;
  }
  OpInfo check(const Mesh &mesh = Mesh()) {
    plan.values = types;
    return checkOp(op, 0, types, mesh);
  }
  int value(DType dtype, const Shape &shape) {
    types.push_back({dtype, shape});
    return static_cast<int>(types.size()) - 1;
  }

  plan::Op op;
  std::vector<TensorType> types;
  LoadedPlan plan;
};

/// Runs the CPU kernel of `info` as the scheduler does: outputs allocated
/// with their declared types, except for ops that alias their input.
std::vector<Tensor> runCpu(const CheckedOp &c, const OpInfo &info,
                           const std::vector<const Tensor *> &inputs,
                           int64_t groupIndex = 0) {
  registerCpuKernels();
  KernelFn fn = findKernel(info.kind, BackendKind::CPU);
  EXPECT_NE(fn, nullptr) << info.kindName;
  std::vector<Tensor> outputs;
  for (int v : info.outputs)
    outputs.push_back(v >= 0 && !info.aliasesInput ? Tensor(c.types[v])
                                                   : Tensor());
  // CPU kernels never touch the device; until the CPU Device exists, any
  // storage stands for it.
  alignas(std::max_align_t) static char deviceStorage[64];
  KernelContext ctx{c.plan, reinterpret_cast<Device &>(deviceStorage),
                    groupIndex};
  fn(ctx, info, inputs, outputs);
  return outputs;
}

} // namespace

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

TEST(OpTable, NamesRoundTrip) {
  std::set<std::string> names;
  for (const OpKindInfo &row : kOpKindTable) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " twice";
    OpKind kind;
    ASSERT_TRUE(parseOpKind(row.name, kind)) << row.name;
    EXPECT_EQ(kind, row.kind);
    EXPECT_STREQ(opKindName(kind), row.name);
    EXPECT_NE(knownOpKinds().find(row.name), std::string::npos);
  }
  EXPECT_EQ(static_cast<int>(names.size()), kNumOpKinds);
  OpKind kind;
  EXPECT_FALSE(parseOpKind("NoSuchOp", kind));
  EXPECT_FALSE(parseOpKind("matmul", kind));
}

TEST(OpTable, AritiesAndFlagsAreConsistent) {
  for (const OpKindInfo &row : kOpKindTable) {
    SCOPED_TRACE(row.name);
    EXPECT_LE(0, row.minInputs);
    EXPECT_LE(row.minInputs, row.maxInputs);
    EXPECT_LE(0, row.minOutputs);
    EXPECT_LE(row.minOutputs, row.maxOutputs);
    // Only optimizer updates and Sends have no outputs.
    if (row.maxOutputs == 0) {
      EXPECT_TRUE(opKindHas(row.kind, kOptimizer | kTransfer));
    }
    // Ops that communicate run over mesh axes.
    if (opKindHas(row.kind, kCommunicates)) {
      EXPECT_TRUE(opKindHas(row.kind, kCollective));
    }
  }
  EXPECT_TRUE(opKindHas("AllReduce", kCommunicates));
  EXPECT_FALSE(opKindHas("LocalSlice", kCommunicates));
  EXPECT_TRUE(opKindHas("LocalSlice", kCollective));
  EXPECT_TRUE(opKindHas("Conv", kMatMulClass));
  EXPECT_FALSE(opKindHas("NoSuchOp", kMatMulClass));
}

TEST(OpTable, ArityComesFromTheTable) {
  CheckedOp c("Concat");
  c.out(DType::F32, {0});
  EXPECT_THROW_MSG(c.check(), "expects at least 1 inputs, got 0");
  CheckedOp s("SGD");
  s.in(DType::F32, {2}).in(DType::F32, {2}).absentIn();
  PlanBuilder::attrFloat(s.op, "lr", 0.1);
  EXPECT_NO_THROW(s.check());
  // Variadic inputs are all required.
  CheckedOp m("Max");
  m.in(DType::F32, {2}).absentIn().out(DType::F32, {2});
  EXPECT_THROW_MSG(m.check(), "input #1 is value id -1, out of range");
}

TEST(OpTable, TypeRulesSayWhichOpsAlias) {
  CheckedOp r("Reshape");
  r.in(DType::F32, {2, 3}).out(DType::F32, {6}).attrs("shape", {-1});
  EXPECT_TRUE(r.check().aliasesInput);

  CheckedOp id("ReduceSum");
  id.in(DType::F32, {2, 3}).out(DType::F32, {2, 3});
  id.attr("noop_with_empty_axes", 1);
  EXPECT_TRUE(id.check().aliasesInput);

  CheckedOp sum("ReduceSum");
  sum.in(DType::F32, {2, 3}).out(DType::F32, {1, 1});
  EXPECT_FALSE(sum.check().aliasesInput);

  for (const OpKindInfo &row : kOpKindTable)
    if (row.kind != OpKind::Reshape && row.kind != OpKind::ReduceMean &&
        row.kind != OpKind::ReduceSum) {
      EXPECT_FALSE(opKindHas(row.kind, kMayAlias)) << row.name;
    }
}

//===----------------------------------------------------------------------===//
// The kernel registry
//===----------------------------------------------------------------------===//

TEST(KernelRegistry, EveryKernelOpHasACpuKernel) {
  registerCpuKernels();
  registerCpuKernels(); // idempotent
  for (const OpKindInfo &row : kOpKindTable) {
    KernelFn fn = findKernel(row.kind, BackendKind::CPU);
    if (opKindHas(row.kind, kSchedulerOps))
      EXPECT_EQ(fn, nullptr) << row.name << " is the scheduler's";
    else
      EXPECT_NE(fn, nullptr) << row.name << " has no CPU kernel";
  }
}

TEST(KernelRegistry, RegisterReplacesAndFindIsPerBackend) {
  registerCpuKernels();
  KernelFn cpuAdd = findKernel(OpKind::Add, BackendKind::CPU);
  KernelFn cudaAdd = findKernel(OpKind::Add, BackendKind::CUDA);
  KernelFn fake = [](KernelContext &, const OpInfo &,
                     const std::vector<const Tensor *> &,
                     std::vector<Tensor> &) {};
  registerKernel(OpKind::Add, BackendKind::CUDA, fake);
  EXPECT_EQ(findKernel(OpKind::Add, BackendKind::CUDA), fake);
  EXPECT_EQ(findKernel(OpKind::Add, BackendKind::CPU), cpuAdd);
  registerKernel(OpKind::Add, BackendKind::CUDA, cudaAdd);
}

//===----------------------------------------------------------------------===//
// CPU kernels through the registry
//===----------------------------------------------------------------------===//

TEST(CpuKernels, AddBroadcasts) {
  CheckedOp c("Add");
  c.in(DType::F32, {2, 2}).in(DType::F32, {2}).out(DType::F32, {2, 2});
  OpInfo info = c.check();
  Tensor a = makeTensor<float>({2, 2}, {1, 2, 3, 4});
  Tensor b = makeTensor<float>({2}, {10, 20});
  std::vector<Tensor> out = runCpu(c, info, {&a, &b});
  EXPECT_EQ(toVector<float>(out[0]), (std::vector<float>{11, 22, 13, 24}));
}

TEST(CpuKernels, ComparisonsMapToTheirOwnKernel) {
  // No dependence on the order of OpKind: each comparison is its own
  // registration.
  Tensor a = makeTensor<float>({3}, {1, 2, 3});
  Tensor b = makeTensor<float>({3}, {2, 2, 2});
  std::vector<std::pair<const char *, std::vector<uint8_t>>> cases = {
      {"Equal", {0, 1, 0}},
      {"Less", {1, 0, 0}},
      {"Greater", {0, 0, 1}},
      {"LessOrEqual", {1, 1, 0}},
      {"GreaterOrEqual", {0, 1, 1}}};
  for (const auto &[kind, want] : cases) {
    CheckedOp c(kind);
    c.in(DType::F32, {3}).in(DType::F32, {3}).out(DType::Bool, {3});
    std::vector<Tensor> out = runCpu(c, c.check(), {&a, &b});
    EXPECT_EQ(toVector<uint8_t>(out[0]), want) << kind;
  }
}

TEST(CpuKernels, ReshapeAliasesItsInput) {
  CheckedOp c("Reshape");
  c.in(DType::F32, {2, 3}).out(DType::F32, {3, 2}).attrs("shape", {3, 2});
  OpInfo info = c.check();
  Tensor x = makeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> out = runCpu(c, info, {&x});
  EXPECT_EQ(out[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(out[0].rawData(), x.rawData());
}

TEST(CpuKernels, ReduceIdentityAliasesAndReduceSums) {
  Tensor x = makeTensor<float>({2, 2}, {1, 2, 3, 4});
  CheckedOp id("ReduceMean");
  id.in(DType::F32, {2, 2}).out(DType::F32, {2, 2});
  id.attr("noop_with_empty_axes", 1);
  std::vector<Tensor> same = runCpu(id, id.check(), {&x});
  EXPECT_EQ(same[0].rawData(), x.rawData());

  CheckedOp sum("ReduceSum");
  sum.in(DType::F32, {2, 2}).out(DType::F32, {2}).attrs("axes", {1});
  sum.attr("keepdims", 0);
  std::vector<Tensor> out = runCpu(sum, sum.check(), {&x});
  EXPECT_EQ(toVector<float>(out[0]), (std::vector<float>{3, 7}));
}

TEST(CpuKernels, LocalSliceKeepsTheGroupIndexBlock) {
  Mesh mesh({"x"}, {2});
  CheckedOp c("LocalSlice");
  c.in(DType::F32, {4}).out(DType::F32, {2}).attr("dim", 0).axes({"x"});
  OpInfo info = c.check(mesh);
  Tensor x = makeTensor<float>({4}, {1, 2, 3, 4});
  EXPECT_EQ(toVector<float>(runCpu(c, info, {&x}, 0)[0]),
            (std::vector<float>{1, 2}));
  EXPECT_EQ(toVector<float>(runCpu(c, info, {&x}, 1)[0]),
            (std::vector<float>{3, 4}));
}

TEST(CpuKernels, OptionalOperandsMayBeAbsent) {
  // Gemm without C.
  CheckedOp g("Gemm");
  g.in(DType::F32, {1, 2}).in(DType::F32, {2, 1}).out(DType::F32, {1, 1});
  Tensor a = makeTensor<float>({1, 2}, {1, 2});
  Tensor b = makeTensor<float>({2, 1}, {3, 4});
  EXPECT_EQ(toVector<float>(runCpu(g, g.check(), {&a, &b})[0]),
            (std::vector<float>{11}));

  // Split with an output nobody reads.
  CheckedOp s("Split");
  s.in(DType::F32, {4}).out(DType::F32, {2}).absentOut();
  Tensor x = makeTensor<float>({4}, {1, 2, 3, 4});
  std::vector<Tensor> parts = runCpu(s, s.check(), {&x});
  EXPECT_EQ(toVector<float>(parts[0]), (std::vector<float>{1, 2}));
  EXPECT_FALSE(parts[1].defined());
}

TEST(CpuKernels, AnInputWithoutDataIsAnError) {
  CheckedOp c("Mul");
  c.in(DType::F32, {2}).in(DType::F32, {2}).out(DType::F32, {2});
  OpInfo info = c.check();
  Tensor a = makeTensor<float>({2}, {1, 2});
  Tensor empty;
  EXPECT_THROW_MSG(runCpu(c, info, {&a, &empty}), "input #1 has no data");
}
