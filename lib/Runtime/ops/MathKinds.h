//===- MathKinds.h - The element-wise and reduction kinds -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Which arithmetic a family kernel computes, shared by every backend's
// kernels of that family (cpu/Kernels.h, cuda/Kernels.h): part of the op
// model, owned by no backend.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_OPS_MATHKINDS_H
#define SHOAL_RUNTIME_OPS_MATHKINDS_H

namespace shoal {
namespace rt {
namespace arith {

enum class BinaryOp { Add, Sub, Mul, Div, Pow };
enum class UnaryOp { Erf, Tanh, Relu, Sqrt, Exp, Neg, Sigmoid };
enum class ReduceOp { Sum, Mean };

/// The ONNX name of `op` (\c "Add", ...).
inline const char *binaryName(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add:
    return "Add";
  case BinaryOp::Sub:
    return "Sub";
  case BinaryOp::Mul:
    return "Mul";
  case BinaryOp::Div:
    return "Div";
  case BinaryOp::Pow:
    return "Pow";
  }
  return "?";
}

} // namespace arith
} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_OPS_MATHKINDS_H
