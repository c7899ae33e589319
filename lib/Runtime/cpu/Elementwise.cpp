//===- Elementwise.cpp - CPU kernels: element-wise ops ----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The CPU kernels of the element-wise family of Ops.def, registered per op.
// Their bodies are still in Kernels.cpp and Kernels2.cpp, to move here.
//
//===----------------------------------------------------------------------===//

#include "cpu/Kernels.h"
#include "cpu/Registry.h"

using namespace shoal::rt;
using namespace shoal::rt::cpu;

namespace {

template <BinaryOp Op> SHOAL_CPU_KERNEL(binaryKernel) {
  binary(Op, input(in, 0), input(in, 1), out[0]);
}

template <UnaryOp Op> SHOAL_CPU_KERNEL(unaryKernel) {
  unary(Op, input(in, 0), out[0]);
}

template <MathOp Op> SHOAL_CPU_KERNEL(mathKernel) {
  math(Op, input(in, 0), out[0]);
}

template <MinMaxOp Op> SHOAL_CPU_KERNEL(minMaxKernel) {
  std::vector<const Tensor *> all;
  for (std::size_t i = 0; i < in.size(); ++i)
    all.push_back(&input(in, i));
  minMax(Op, all, out[0]);
}

template <CompareOp Op> SHOAL_CPU_KERNEL(compareKernel) {
  compare(Op, input(in, 0), input(in, 1), out[0]);
}

template <LogicOp Op> SHOAL_CPU_KERNEL(logicKernel) {
  logical(Op, input(in, 0), input(in, 1), out[0]);
}

SHOAL_CPU_KERNEL(notKernel) { logicalNot(input(in, 0), out[0]); }

SHOAL_CPU_KERNEL(whereKernel) {
  where(input(in, 0), input(in, 1), input(in, 2), out[0]);
}

SHOAL_CPU_KERNEL(castKernel) { cast(input(in, 0), out[0]); }

SHOAL_CPU_KERNEL(geluKernel) {
  gelu(input(in, 0), optionalInput(in, 1), out[0]);
}

} // namespace

void shoal::rt::cpu::registerElementwiseKernels() {
  registerCpuKernel(OpKind::Add, binaryKernel<BinaryOp::Add>);
  registerCpuKernel(OpKind::Sub, binaryKernel<BinaryOp::Sub>);
  registerCpuKernel(OpKind::Mul, binaryKernel<BinaryOp::Mul>);
  registerCpuKernel(OpKind::Div, binaryKernel<BinaryOp::Div>);
  registerCpuKernel(OpKind::Pow, binaryKernel<BinaryOp::Pow>);
  registerCpuKernel(OpKind::Erf, unaryKernel<UnaryOp::Erf>);
  registerCpuKernel(OpKind::Tanh, unaryKernel<UnaryOp::Tanh>);
  registerCpuKernel(OpKind::Relu, unaryKernel<UnaryOp::Relu>);
  registerCpuKernel(OpKind::Sqrt, unaryKernel<UnaryOp::Sqrt>);
  registerCpuKernel(OpKind::Exp, unaryKernel<UnaryOp::Exp>);
  registerCpuKernel(OpKind::Neg, unaryKernel<UnaryOp::Neg>);
  registerCpuKernel(OpKind::Sigmoid, unaryKernel<UnaryOp::Sigmoid>);
  registerCpuKernel(OpKind::Sin, mathKernel<MathOp::Sin>);
  registerCpuKernel(OpKind::Cos, mathKernel<MathOp::Cos>);
  registerCpuKernel(OpKind::Abs, mathKernel<MathOp::Abs>);
  registerCpuKernel(OpKind::Log, mathKernel<MathOp::Log>);
  registerCpuKernel(OpKind::Reciprocal, mathKernel<MathOp::Reciprocal>);
  registerCpuKernel(OpKind::Floor, mathKernel<MathOp::Floor>);
  registerCpuKernel(OpKind::Ceil, mathKernel<MathOp::Ceil>);
  registerCpuKernel(OpKind::Max, minMaxKernel<MinMaxOp::Max>);
  registerCpuKernel(OpKind::Min, minMaxKernel<MinMaxOp::Min>);
  registerCpuKernel(OpKind::Equal, compareKernel<CompareOp::Equal>);
  registerCpuKernel(OpKind::Less, compareKernel<CompareOp::Less>);
  registerCpuKernel(OpKind::Greater, compareKernel<CompareOp::Greater>);
  registerCpuKernel(OpKind::LessOrEqual, compareKernel<CompareOp::LessOrEqual>);
  registerCpuKernel(OpKind::GreaterOrEqual,
                    compareKernel<CompareOp::GreaterOrEqual>);
  registerCpuKernel(OpKind::And, logicKernel<LogicOp::And>);
  registerCpuKernel(OpKind::Or, logicKernel<LogicOp::Or>);
  registerCpuKernel(OpKind::Xor, logicKernel<LogicOp::Xor>);
  registerCpuKernel(OpKind::Not, notKernel);
  registerCpuKernel(OpKind::Where, whereKernel);
  registerCpuKernel(OpKind::Cast, castKernel);
  registerCpuKernel(OpKind::Gelu, geluKernel);
}
