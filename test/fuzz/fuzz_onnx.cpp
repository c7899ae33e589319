// fuzz-onnx: bytes -> ModelProto -> shoal's validation -> ONNX's checker and
// strict shape inference with data propagation, in the importer's order
// (lib/Target/ONNX/ImportONNX.cpp). A crash, hang or sanitizer report in any
// of them is a finding; exceptions are the errors shoal reports.
#include "../../lib/Target/ONNX/Validate.h"

#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"

#include <cstddef>
#include <cstdint>
#include <exception>

namespace ONNX_NAMESPACE {
namespace checker {
void check_model(const ModelProto &model, CheckerContext &ctx);
} // namespace checker
} // namespace ONNX_NAMESPACE

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  onnx::ModelProto model;
  if (size > (1 << 20) || !model.ParseFromArray(data, static_cast<int>(size)) ||
      !model.has_graph() || model.opset_import_size() == 0)
    return 0;
  if (shoal::onnx_import::validateModel(model))
    return 0;
  try {
    onnx::checker::CheckerContext ctx;
    ctx.set_model_dir("/nonexistent/");
    onnx::checker::check_model(model, ctx);
    onnx::ShapeInferenceOptions options(true, 1, true);
    onnx::shape_inference::InferShapes(
        model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception &) {
  }
  return 0;
}
