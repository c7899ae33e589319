//===- GraphBuilder.h - Shoal graph ops for node expansions -----*- C++ -*-===//
//
// Small helpers for converters that expand one ONNX node into several shoal
// ops (Einsum, LSTM, GRU): each builds one op at the importer's insertion
// point, at the node's location, with its result type computed from the
// operands. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TARGET_ONNX_GRAPHBUILDER_H
#define SHOAL_LIB_TARGET_ONNX_GRAPHBUILDER_H

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/IR/Builders.h"

#include <algorithm>

namespace shoal {
namespace onnx_import {

/// Builds shoal ops at `b`'s insertion point, located at `loc`.
struct GraphBuilder {
  mlir::OpBuilder &b;
  mlir::Location loc;

  static llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
    return llvm::cast<mlir::RankedTensorType>(v.getType()).getShape();
  }
  static mlir::Type elemOf(mlir::Value v) {
    return llvm::cast<mlir::RankedTensorType>(v.getType()).getElementType();
  }
  static mlir::RankedTensorType typeLike(llvm::ArrayRef<int64_t> shape,
                                         mlir::Value elemFrom) {
    return mlir::RankedTensorType::get(shape, elemOf(elemFrom));
  }
  /// numpy broadcasting of two shapes (sizes assumed compatible).
  static llvm::SmallVector<int64_t> broadcast(llvm::ArrayRef<int64_t> x,
                                              llvm::ArrayRef<int64_t> y) {
    size_t rank = std::max(x.size(), y.size());
    llvm::SmallVector<int64_t> out(rank, 1);
    for (auto s : {x, y})
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] != 1)
          out[rank - s.size() + i] = s[i];
    return out;
  }

  template <typename OpT> mlir::Value binary(mlir::Value x, mlir::Value y) {
    return b.create<OpT>(loc, typeLike(broadcast(shapeOf(x), shapeOf(y)), x), x,
                         y);
  }
  mlir::Value add(mlir::Value x, mlir::Value y) { return binary<AddOp>(x, y); }
  mlir::Value sub(mlir::Value x, mlir::Value y) { return binary<SubOp>(x, y); }
  mlir::Value mul(mlir::Value x, mlir::Value y) { return binary<MulOp>(x, y); }
  template <typename OpT> mlir::Value unary(mlir::Value x) {
    return b.create<OpT>(loc, x.getType(), x);
  }

  mlir::Value reshape(mlir::Value x, llvm::ArrayRef<int64_t> shape) {
    if (shapeOf(x) == shape)
      return x;
    return b.create<ReshapeOp>(loc, typeLike(shape, x), x);
  }
  mlir::Value transpose(mlir::Value x, llvm::ArrayRef<int64_t> perm) {
    bool identity = true;
    llvm::SmallVector<int64_t> shape;
    for (auto [i, p] : llvm::enumerate(perm)) {
      shape.push_back(shapeOf(x)[p]);
      identity &= static_cast<int64_t>(i) == p;
    }
    if (identity)
      return x;
    return b.create<TransposeOp>(loc, typeLike(shape, x), x,
                                 b.getDenseI64ArrayAttr(perm));
  }
  /// MatMul with numpy batch broadcasting.
  mlir::Value matmul(mlir::Value x, mlir::Value y) {
    llvm::ArrayRef<int64_t> a = shapeOf(x), c = shapeOf(y);
    llvm::SmallVector<int64_t> shape =
        broadcast(a.drop_back(2), c.drop_back(2));
    shape.push_back(a[a.size() - 2]);
    shape.push_back(c.back());
    return b.create<MatMulOp>(loc, typeLike(shape, x), x, y);
  }
  /// x [M, K] times w [N, K] transposed, plus `bias` [N] if given (an
  /// nn.Linear).
  mlir::Value linear(mlir::Value x, mlir::Value w, mlir::Value bias) {
    auto type = typeLike({shapeOf(x)[0], shapeOf(w)[0]}, x);
    return b.create<GemmOp>(loc, type, x, w, bias, b.getF32FloatAttr(1.0f),
                            b.getF32FloatAttr(1.0f), b.getBoolAttr(false),
                            b.getBoolAttr(true));
  }
  mlir::Value reduceSum(mlir::Value x, llvm::ArrayRef<int64_t> axes,
                        bool keepdims) {
    if (axes.empty())
      return x;
    llvm::SmallVector<int64_t> shape;
    for (auto [d, size] : llvm::enumerate(shapeOf(x))) {
      if (!llvm::is_contained(axes, static_cast<int64_t>(d)))
        shape.push_back(size);
      else if (keepdims)
        shape.push_back(1);
    }
    return b.create<ReduceSumOp>(loc, typeLike(shape, x), x,
                                 b.getDenseI64ArrayAttr(axes),
                                 b.getBoolAttr(keepdims));
  }
  /// x[begin:end] along `axis` (a shoal.onnx "Slice").
  mlir::Value slice(mlir::Value x, int64_t axis, int64_t begin, int64_t end) {
    llvm::SmallVector<int64_t> shape(shapeOf(x));
    if (begin == 0 && end == shape[axis])
      return x;
    shape[axis] = end - begin;
    llvm::SmallVector<mlir::NamedAttribute> attrs{
        b.getNamedAttr("starts", b.getDenseI64ArrayAttr({begin})),
        b.getNamedAttr("ends", b.getDenseI64ArrayAttr({end})),
        b.getNamedAttr("axes", b.getDenseI64ArrayAttr({axis}))};
    return onnx("Slice", typeLike(shape, x), attrs, {x});
  }
  /// The values concatenated along `axis` (a shoal.onnx "Concat").
  mlir::Value concat(llvm::ArrayRef<mlir::Value> xs, int64_t axis) {
    if (xs.size() == 1)
      return xs[0];
    llvm::SmallVector<int64_t> shape(shapeOf(xs[0]));
    shape[axis] = 0;
    for (mlir::Value x : xs)
      shape[axis] += shapeOf(x)[axis];
    return onnx("Concat", typeLike(shape, xs[0]),
                {b.getNamedAttr("axis", b.getI64IntegerAttr(axis))}, xs);
  }
  mlir::Value onnx(llvm::StringRef opType, mlir::Type type,
                   llvm::ArrayRef<mlir::NamedAttribute> attrs,
                   llvm::ArrayRef<mlir::Value> inputs) {
    auto op =
        b.create<OnnxOp>(loc, mlir::TypeRange{type}, b.getStringAttr(opType),
                         b.getDictionaryAttr(attrs), inputs);
    return op->getResult(0);
  }
  /// A tensor of `shape` filled with `v`, of `like`'s element type.
  mlir::Value splat(llvm::ArrayRef<int64_t> shape, double v, mlir::Value like) {
    auto type = typeLike(shape, like);
    return b.create<ConstantOp>(
        loc, type,
        mlir::DenseElementsAttr::get(type,
                                     b.getFloatAttr(type.getElementType(), v)));
  }
};

} // namespace onnx_import
} // namespace shoal

#endif // SHOAL_LIB_TARGET_ONNX_GRAPHBUILDER_H
