//===- Validate.h - Checks before ONNX's own code sees a model ---*- C++
//-*-===//
//
// ONNX's checker does not look at everything that ONNX's shape inference and
// version converter assume: an initializer's data may be shorter than its
// dims say (ParseData then writes past its buffer), a graph output may have
// no producer (the converter dereferences it), a stride may be 0 (shape
// inference divides by it). validateModel checks those before any of ONNX's
// code runs on the model. It needs neither MLIR nor a file, so the fuzz
// target (test/fuzz) calls it directly.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TARGET_ONNX_VALIDATE_H
#define SHOAL_LIB_TARGET_ONNX_VALIDATE_H

#include "onnx/onnx_pb.h"

#include <optional>
#include <string>

namespace shoal {
namespace onnx_import {

/// The first problem found in `model` (naming the node, initializer or
/// attribute), or nullopt when ONNX's checker, shape inference and version
/// converter may be given it.
std::optional<std::string> validateModel(const onnx::ModelProto &model);

/// Element count of a tensor with these dims, or nullopt when a dim is
/// negative or the product exceeds `limit`.
std::optional<int64_t>
checkedElementCount(const google::protobuf::RepeatedField<int64_t> &dims,
                    int64_t limit);

} // namespace onnx_import
} // namespace shoal

#endif // SHOAL_LIB_TARGET_ONNX_VALIDATE_H
