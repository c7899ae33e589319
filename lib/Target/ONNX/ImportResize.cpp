//===- ImportResize.cpp - ONNX Resize ---------------------------*- C++ -*-===//
//
// Resize(X, roi?, scales?, sizes?) becomes a shoal.onnx "Resize". The output
// shape is the result type; given scales (one float per dimension) become
// an attribute, since ONNX's coordinate transform uses them and they are
// not always out / in (4 * 0.6 gives 2). Without it the scales are out / in.
// Upsample (opsets 7 to 9) reaches here as Resize: ONNX's version converter
// rewrites it on the way to opset 13.
//
// Modes nearest (every nearest_mode) and linear (n-linear, every dimension)
// with the coordinate transforms half_pixel, pytorch_half_pixel,
// align_corners, asymmetric and tf_half_pixel_for_nn. Cubic and
// tf_crop_and_resize are refused, as are scales or sizes that are not
// constants.
//
//===----------------------------------------------------------------------===//

#include "GraphBuilder.h"
#include "Importer.h"

using namespace mlir;
using namespace shoal;
using namespace shoal::onnx_import;

LogicalResult onnx_import::convertResize(Importer &im,
                                         const onnx::NodeProto &node) {
  auto x = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(x) || failed(type))
    return failure();
  OpBuilder &b = im.builder();
  ArrayRef<int64_t> in = GraphBuilder::shapeOf(*x), out = type->getShape();
  int64_t rank = in.size();

  auto stringAttr = [&](StringRef name, StringRef dflt) -> std::string {
    const onnx::AttributeProto *a = findAttr(node, name);
    return a ? a->s() : dflt.str();
  };
  std::string mode = stringAttr("mode", "nearest");
  std::string transform =
      stringAttr("coordinate_transformation_mode", "half_pixel");
  std::string nearestMode = stringAttr("nearest_mode", "round_prefer_floor");
  if (mode != "nearest" && mode != "linear")
    return im.nodeError() << "Resize: mode '" << mode
                          << "' is not supported (nearest or linear)";
  if (!llvm::is_contained({"half_pixel", "pytorch_half_pixel", "align_corners",
                           "asymmetric", "tf_half_pixel_for_nn"},
                          transform))
    return im.nodeError()
           << "Resize: coordinate_transformation_mode '" << transform
           << "' is not supported (half_pixel, pytorch_half_pixel, "
              "align_corners, asymmetric or tf_half_pixel_for_nn)";
  if (mode == "nearest" &&
      !llvm::is_contained(
          {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"},
          nearestMode))
    return im.nodeError() << "Resize: unknown nearest_mode '" << nearestMode
                          << "'";

  // Scales (input 2) or sizes (input 3); an empty tensor counts as absent.
  // Input 1 (roi) only matters for tf_crop_and_resize, refused above.
  auto constantInput =
      [&](int i, StringRef what) -> FailureOr<const onnx::TensorProto *> {
    if (!Importer::hasInput(node, i))
      return static_cast<const onnx::TensorProto *>(nullptr);
    const onnx::TensorProto *t = im.getConstantTensor(node, i);
    if (!t)
      return im.nodeError() << "Resize: " << what << " '" << node.input(i)
                            << "' must be a Constant or an initializer: "
                               "shoal needs it at compile time";
    int64_t n = 1;
    for (int64_t d : t->dims())
      n *= d;
    return n == 0 ? nullptr : t;
  };
  auto scalesT = constantInput(2, "scales");
  if (failed(scalesT))
    return failure();
  auto sizesT = constantInput(3, "sizes");
  if (failed(sizesT))
    return failure();
  if (!*scalesT && !*sizesT)
    return im.nodeError() << "Resize needs scales or sizes";
  if (*scalesT && *sizesT)
    return im.nodeError() << "Resize: only one of scales and sizes may be "
                             "given";
  SmallVector<float> scales;
  if (*scalesT) {
    auto data = im.convertTensorData(**scalesT);
    if (failed(data))
      return failure();
    if (!isa<FloatType>(data->getElementType()))
      return im.nodeError() << "Resize: scales must be floats";
    for (APFloat v : data->getValues<APFloat>())
      scales.push_back(v.convertToFloat());
  } else {
    // The result type holds the sizes; the runtime takes the scales as
    // out / in (in double: a float attribute could round a tie of nearest
    // the other way).
    auto sizes = im.getConstantInts(node, 3, "sizes");
    if (failed(sizes))
      return failure();
    if (ArrayRef<int64_t>(*sizes) != out)
      return im.nodeError() << "Resize: sizes do not match the output shape "
                               "of shape inference";
  }
  if (!scales.empty() && static_cast<int64_t>(scales.size()) != rank)
    return im.nodeError() << "Resize: " << scales.size()
                          << " scales for an input of rank " << rank;
  for (auto [d, s] : llvm::enumerate(scales))
    if (!(s > 0) || out[d] <= 0)
      return im.nodeError()
             << "Resize: dimension " << d << " has scale " << s
             << " and output size " << out[d] << " (both must be positive)";

  SmallVector<NamedAttribute> attrs{
      b.getNamedAttr("mode", b.getStringAttr(mode)),
      b.getNamedAttr("coordinate_transformation_mode",
                     b.getStringAttr(transform))};
  if (!scales.empty())
    attrs.push_back(b.getNamedAttr("scales", b.getDenseF32ArrayAttr(scales)));
  if (mode == "nearest")
    attrs.push_back(
        b.getNamedAttr("nearest_mode", b.getStringAttr(nearestMode)));
  GraphBuilder gb{b, im.loc()};
  im.setResult(node, 0, gb.onnx("Resize", *type, attrs, {*x}));
  return success();
}
