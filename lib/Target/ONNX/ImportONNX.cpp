//===- ImportONNX.cpp - ONNX model import driver ----------------*- C++ -*-===//
//
// Loads a model (binary or ONNX's text syntax), checks what shoal supports
// (opset, op types), applies `--input-shape`, runs ONNX's checker and strict
// shape inference, then hands the graph to the Importer. Every failure,
// including the exceptions ONNX throws, becomes an error that names the
// file.
//
//===----------------------------------------------------------------------===//

#include "shoal/Target/ONNX.h"

#include "Importer.h"
#include "Validate.h"

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"
#include "shoal/Support/Files.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "onnx/checker.h"
#include "onnx/defs/parser.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

#include <cctype>
#include <climits>
#include <exception>
#include <map>
#include <optional>

namespace ONNX_NAMESPACE {
namespace checker {
// Exported by libonnx (1.12) but not declared in its header: the check that
// `check_model(path)` runs, with a context that knows the model's folder.
// Calling it lets external-data locations resolve next to the model (as
// ONNX specifies) without ONNX reading the model file a second time.
void check_model(const ModelProto &model, CheckerContext &ctx);
} // namespace checker
} // namespace ONNX_NAMESPACE

using namespace mlir;
using namespace shoal;

/// Default-domain opsets the importer handles. 13 is the first with
/// single-axis Softmax; 18 moves ReduceMean's axes to an input.
static constexpr int64_t kMinOpset = 13;
static constexpr int64_t kMaxOpset = 17;

std::string shoal::parseInputShape(StringRef text, InputShape &out) {
  size_t eq = text.rfind('=');
  if (eq == StringRef::npos)
    return ("expected 'name=d0,d1,...', got '" + text + "'").str();
  StringRef name = text.take_front(eq).trim();
  StringRef dims = text.drop_front(eq + 1).trim();
  if (name.empty())
    return ("missing input name in '" + text + "'").str();
  out.name = name.str();
  out.dims.clear();
  // `name=` alone gives a scalar.
  if (dims.empty())
    return "";
  SmallVector<StringRef> parts;
  dims.split(parts, ',');
  for (StringRef part : parts) {
    int64_t dim;
    if (part.trim().getAsInteger(10, dim) || dim < 1)
      return ("bad dimension '" + part.trim() + "' in '" + text +
              "': expected positive integers")
          .str();
    out.dims.push_back(dim);
  }
  return "";
}

namespace {

/// Error on `ctx` prefixed with `<path>: `.
InFlightDiagnostic fileError(MLIRContext *ctx, StringRef path) {
  return emitError(UnknownLoc::get(ctx)) << path << ": ";
}

/// Parses `bytes` as a binary ModelProto, or as ONNX's text syntax when the
/// file ends in `.onnxtext`.
LogicalResult parseModel(MLIRContext *ctx, StringRef path, StringRef bytes,
                         onnx::ModelProto &model) {
  auto invalid = [&]() {
    return fileError(ctx, path) << "not a valid ONNX model: ";
  };
  if (path.ends_with(".onnxtext")) {
    std::string text = bytes.str(); // the parser wants a C string
    try {
      onnx::OnnxParser parser(text.c_str());
      auto status = parser.Parse(model);
      if (!status.IsOK())
        return invalid() << status.ErrorMessage();
      if (!parser.EndOfInput())
        return invalid() << "unexpected text after the graph";
    } catch (const std::exception &e) {
      return invalid() << e.what();
    }
  } else {
    if (bytes.size() > static_cast<size_t>(INT_MAX))
      return invalid() << "the file is over 2 GiB, more than protobuf can "
                          "parse; store the weights as external data";
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
      return invalid() << "cannot parse it as a binary ModelProto (is it "
                          "truncated, or not ONNX?)";
  }
  // Random bytes can parse as a protobuf message with unknown fields only.
  if (!model.has_graph())
    return invalid() << "it has no graph";
  if (model.ir_version() <= 0)
    return invalid() << "it has no ir_version";
  if (model.opset_import_size() == 0)
    return invalid() << "it imports no opset (is it truncated?)";
  return success();
}

/// Opsets below kMinOpset down to this one are upgraded with ONNX's own
/// version converter; opsets above kMaxOpset up to this one are rewritten
/// into opset 17 by shoal (OpsetDowngrade.cpp).
static constexpr int64_t kMinConvertibleOpset = 1;
static constexpr int64_t kMaxConvertibleOpset = 21;

/// The model's default-domain opset, if shoal can import it.
FailureOr<int64_t> getOpset(MLIRContext *ctx, StringRef path,
                            const onnx::ModelProto &model) {
  std::optional<int64_t> opset;
  for (const auto &import : model.opset_import())
    if (import.domain().empty() || import.domain() == "ai.onnx")
      opset = import.version();
  if (!opset)
    return fileError(ctx, path)
           << "the model imports no default-domain (ai.onnx) opset; shoal "
              "supports opsets "
           << kMinOpset << " to " << kMaxConvertibleOpset;
  if (*opset < kMinConvertibleOpset || *opset > kMaxConvertibleOpset)
    return fileError(ctx, path)
           << "unsupported default-domain opset " << *opset
           << "; shoal supports opsets " << kMinOpset << " to " << kMaxOpset
           << " (and converts " << kMinConvertibleOpset << " to "
           << kMinOpset - 1 << " with ONNX's version converter, "
           << kMaxOpset + 1 << " to " << kMaxConvertibleOpset
           << " by rewriting the ops that changed)";
  return *opset;
}

/// Rewrites an opset 18-21 model into opset 17.
LogicalResult downgradeOpset(MLIRContext *ctx, StringRef path,
                             StringRef modelDir, onnx::ModelProto &model,
                             int64_t opset) {
  if (auto error = onnx_import::downgradeToOpset17(model, opset, modelDir))
    return fileError(ctx, path) << *error;
  return success();
}

LogicalResult checkAndInferShapes(MLIRContext *ctx, StringRef path,
                                  StringRef modelDir, onnx::ModelProto &model,
                                  bool foldFloatInitializers);

/// Upgrades an opset 1-12 model to kMinOpset with ONNX's version converter.
/// The converter is only given models that ONNX's checker accepts (it is not
/// written for broken ones) and whose shapes inference and folding made as
/// static as they can be: some of its adapters need them (Softmax 12 -> 13
/// needs its input's rank).
LogicalResult upgradeOpset(MLIRContext *ctx, StringRef path, StringRef modelDir,
                           onnx::ModelProto &model, int64_t opset,
                           bool foldFloatInitializers) {
  if (failed(checkAndInferShapes(ctx, path, modelDir, model,
                                 foldFloatInitializers)))
    return failure();
  try {
    model = onnx::version_conversion::ConvertVersion(model, kMinOpset);
  } catch (const std::exception &e) {
    auto diag = fileError(ctx, path)
                << "default-domain opset " << opset
                << " could not be converted to opset " << kMinOpset
                << " by ONNX's version converter: " << e.what();
    if (StringRef(e.what()).contains("shape"))
      diag << " (give the graph inputs static shapes with --input-shape)";
    return diag;
  }
  // Upsample (opsets 7 to 9) and Resize 10 map an output coordinate x to
  // floor(x / scale); the converter makes them Resize 11+ nodes without a
  // coordinate_transformation_mode, whose default (half_pixel) differs.
  if (opset <= 10)
    for (onnx::NodeProto &node : *model.mutable_graph()->mutable_node()) {
      if (node.op_type() != "Resize" ||
          onnx_import::findAttr(node, "coordinate_transformation_mode"))
        continue;
      auto addString = [&](const char *name, const char *value) {
        onnx::AttributeProto *a = node.add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(value);
      };
      addString("coordinate_transformation_mode", "asymmetric");
      if (!onnx_import::findAttr(node, "nearest_mode"))
        addString("nearest_mode", "floor");
    }
  // Shapes are inferred again at the new opset.
  model.mutable_graph()->clear_value_info();
  return success();
}

/// Why an op whose result's shape depends on its input's values cannot be
/// imported, and what a model does instead; empty for other ops.
static StringRef dataDependentShapeHint(StringRef opType) {
  if (opType == "NonZero" || opType == "Compress")
    return "its result's shape depends on its input's values (torch.nonzero, "
           "torch.where with one argument, boolean-mask indexing: a mixture "
           "of experts gathering the tokens routed to each expert), and a "
           "plan's shapes are static. Route with a fixed capacity per expert "
           "instead (torch.topk over the tokens, gather, scatter_add back, "
           "as examples/families/moe.py does), or compute every expert on "
           "every token weighted by its routing weight";
  if (opType == "Unique" || opType == "NonMaxSuppression")
    return "its result's shape depends on its input's values, and a plan's "
           "shapes are static: compute it outside the model, or keep a fixed "
           "number of results (torch.topk) and mask the rest";
  return "";
}

/// Reports every op type (once, on its first node) that has no converter.
LogicalResult checkOpTypes(MLIRContext *ctx, StringRef path,
                           const onnx::GraphProto &graph) {
  llvm::StringSet<> reported;
  std::vector<std::string> names = onnx_import::getNodeNames(graph);
  bool ok = true;
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto &node = graph.node(i);
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (defaultDomain &&
        (onnx_import::lookupConverter(node.op_type()) ||
         onnx_import::isFoldableOp(node.op_type()) ||
         node.op_type() == "Shape" || node.op_type() == "Size"))
      continue;
    if (!reported.insert(node.domain() + "::" + node.op_type()).second)
      continue;
    auto diag = fileError(ctx, path)
                << "node '" << names[i] << "': unsupported ONNX op '"
                << node.op_type() << "'";
    if (!defaultDomain)
      diag << " (domain '" << node.domain() << "')";
    else if (StringRef hint = dataDependentShapeHint(node.op_type());
             !hint.empty())
      diag << ": " << hint;
    ok = false;
  }
  return success(ok);
}

/// Gives the graph inputs named in `shapes` static shapes.
LogicalResult applyInputShapes(MLIRContext *ctx, StringRef path,
                               onnx::GraphProto &graph,
                               ArrayRef<InputShape> shapes) {
  llvm::StringSet<> initializers;
  for (const auto &init : graph.initializer())
    initializers.insert(init.name());
  for (const InputShape &shape : shapes) {
    onnx::ValueInfoProto *input = nullptr;
    for (auto &candidate : *graph.mutable_input())
      if (candidate.name() == shape.name &&
          !initializers.contains(candidate.name()))
        input = &candidate;
    if (!input && initializers.contains(shape.name))
      return fileError(ctx, path)
             << "--input-shape: '" << shape.name
             << "' is an initializer (a weight), not a graph input";
    if (!input) {
      auto diag = fileError(ctx, path)
                  << "--input-shape: the model has no graph input named '"
                  << shape.name << "' (inputs:";
      for (const auto &candidate : graph.input())
        if (!initializers.contains(candidate.name()))
          diag << " '" << candidate.name() << "'";
      return diag << ")";
    }
    if (!input->type().has_tensor_type())
      return fileError(ctx, path) << "--input-shape: graph input '"
                                  << shape.name << "' is not a tensor";
    onnx::TypeProto_Tensor *tensor =
        input->mutable_type()->mutable_tensor_type();
    if (tensor->has_shape() &&
        tensor->shape().dim_size() != static_cast<int>(shape.dims.size()))
      return fileError(ctx, path)
             << "--input-shape: graph input '" << shape.name << "' has rank "
             << tensor->shape().dim_size() << " ("
             << onnx_import::formatShape(tensor->shape()) << "), but "
             << shape.dims.size() << " dimensions were given";
    onnx::TensorShapeProto *dims = tensor->mutable_shape();
    dims->clear_dim();
    for (int64_t d : shape.dims)
      dims->add_dim()->set_dim_value(d);
  }
  return success();
}

/// The static shape of Einsum `equation` on operands of static shapes
/// `in`, or nothing (a malformed equation: the import reports it).
std::optional<std::vector<int64_t>>
einsumShape(llvm::StringRef equation, llvm::ArrayRef<std::vector<int64_t>> in) {
  std::string eq;
  for (char c : equation)
    if (c != ' ')
      eq.push_back(c);
  auto [lhs, rhs] = llvm::StringRef(eq).split("->");
  bool explicitOutput = llvm::StringRef(eq).contains("->");
  llvm::SmallVector<llvm::StringRef> terms;
  lhs.split(terms, ',');
  if (terms.size() != in.size())
    return std::nullopt;
  std::map<char, int64_t> sizes;
  std::map<char, int> counts;
  std::vector<int64_t> ellipsis; // right-aligned, broadcast
  // At most one "..." per term, letters otherwise (ImportEinsum reports a
  // malformed equation).
  auto wellFormed = [](llvm::StringRef term) {
    size_t dots = term.find("...");
    std::string rest = term.str();
    if (dots != llvm::StringRef::npos)
      rest.erase(dots, 3);
    return llvm::all_of(rest, [](char c) {
      return std::isalpha(static_cast<unsigned char>(c));
    });
  };
  if (!wellFormed(rhs) || !llvm::all_of(terms, wellFormed))
    return std::nullopt;
  for (auto [term, shape] : llvm::zip(terms, in)) {
    size_t dots = term.find("...");
    int64_t letters = static_cast<int64_t>(term.size()) -
                      (dots == llvm::StringRef::npos ? 0 : 3);
    int64_t extra = static_cast<int64_t>(shape.size()) - letters;
    if (extra < 0 || (dots == llvm::StringRef::npos && extra != 0))
      return std::nullopt;
    int64_t d = 0;
    for (size_t i = 0; i < term.size();) {
      if (term[i] == '.') {
        std::vector<int64_t> dims(shape.begin() + d, shape.begin() + d + extra);
        if (dims.size() > ellipsis.size())
          ellipsis.insert(ellipsis.begin(), dims.size() - ellipsis.size(), 1);
        for (size_t k = 0; k < dims.size(); ++k) {
          int64_t &e = ellipsis[ellipsis.size() - dims.size() + k];
          e = e == 1 ? dims[k] : e;
        }
        d += extra;
        i += 3;
        continue;
      }
      int64_t size = shape[d++];
      auto [it, fresh] = sizes.emplace(term[i], size);
      if (!fresh && it->second == 1)
        it->second = size;
      ++counts[term[i]];
      ++i;
    }
  }
  std::vector<int64_t> out;
  if (!explicitOutput) {
    out = ellipsis;
    for (auto [label, count] : counts)
      if (count == 1)
        out.push_back(sizes[label]);
    return out;
  }
  for (size_t i = 0; i < rhs.size();) {
    if (rhs[i] == '.') {
      out.insert(out.end(), ellipsis.begin(), ellipsis.end());
      i += 3;
      continue;
    }
    auto it = sizes.find(rhs[i++]);
    if (it == sizes.end())
      return std::nullopt;
    out.push_back(it->second);
  }
  return out;
}

/// ONNX 1.12's shape inference gives an Einsum between activations
/// (maxvit's attention) its rank but no dimensions, and so nothing after
/// it. Fills in the output shape of every Einsum whose operands have static
/// shapes; returns how many it filled.
int inferEinsumShapes(onnx::GraphProto &graph) {
  std::map<std::string, std::vector<int64_t>> known;
  auto record = [&](const onnx::ValueInfoProto &v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
      return;
    std::vector<int64_t> dims;
    for (const auto &d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value())
        return;
      dims.push_back(d.dim_value());
    }
    known[v.name()] = dims;
  };
  for (const auto &v : graph.input())
    record(v);
  for (const auto &v : graph.value_info())
    record(v);
  for (const auto &t : graph.initializer())
    known[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
  int filled = 0;
  for (const onnx::NodeProto &node : graph.node()) {
    if (node.op_type() != "Einsum" || node.output_size() != 1 ||
        known.count(node.output(0)))
      continue;
    const onnx::AttributeProto *eq = onnx_import::findAttr(node, "equation");
    std::vector<std::vector<int64_t>> in;
    for (const std::string &name : node.input()) {
      auto it = known.find(name);
      if (it == known.end())
        break;
      in.push_back(it->second);
    }
    if (!eq || in.size() != static_cast<size_t>(node.input_size()))
      continue;
    std::optional<std::vector<int64_t>> shape = einsumShape(eq->s(), in);
    if (!shape)
      continue;
    onnx::ValueInfoProto *info = nullptr;
    for (auto &v : *graph.mutable_value_info())
      if (v.name() == node.output(0))
        info = &v;
    if (!info) {
      info = graph.add_value_info();
      info->set_name(node.output(0));
    }
    int32_t elem = 0;
    for (const std::string &name : node.input())
      for (const auto *list : {&graph.input(), &graph.value_info()})
        for (const auto &v : *list)
          if (!elem && v.name() == name && v.type().has_tensor_type())
            elem = v.type().tensor_type().elem_type();
    onnx::TypeProto_Tensor *tensor =
        info->mutable_type()->mutable_tensor_type();
    if (!tensor->elem_type() && elem)
      tensor->set_elem_type(elem);
    tensor->mutable_shape()->clear_dim();
    for (int64_t d : *shape)
      tensor->mutable_shape()->add_dim()->set_dim_value(d);
    known[node.output(0)] = *shape;
    ++filled;
  }
  return filled;
}

/// Runs ONNX's checker and strict shape inference, turning their exceptions
/// into errors.
LogicalResult checkAndInferShapes(MLIRContext *ctx, StringRef path,
                                  StringRef modelDir, onnx::ModelProto &model,
                                  bool foldFloatInitializers) {
  try {
    onnx::checker::CheckerContext checkerCtx;
    checkerCtx.set_model_dir(modelDir.str());
    onnx::checker::check_model(model, checkerCtx);
  } catch (const std::exception &e) {
    return fileError(ctx, path) << "ONNX checker failed: " << e.what();
  }
  try {
    onnx::ShapeInferenceOptions options(/*check_type_val=*/true,
                                        /*strict_mode_val=*/1,
                                        /*data_prop_val=*/true);
    onnx::shape_inference::InferShapes(
        model, onnx::OpSchemaRegistry::Instance(), options);
    // Exporters compute shapes at run time; with static inputs they are
    // constants. Fold them and infer again until every shape is known.
    for (int round = 0; round < 16; ++round) {
      if (onnx_import::foldModelConstants(*model.mutable_graph(),
                                          foldFloatInitializers) == 0)
        break;
      model.mutable_graph()->clear_value_info();
      onnx::shape_inference::InferShapes(
          model, onnx::OpSchemaRegistry::Instance(), options);
    }
    // Einsums ONNX gives no dimensions (and what follows them): shoal's
    // shapes, then inference again, until nothing changes.
    for (int round = 0;
         round < 64 && inferEinsumShapes(*model.mutable_graph()) > 0; ++round)
      onnx::shape_inference::InferShapes(
          model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception &e) {
    return fileError(ctx, path) << "ONNX shape inference failed: " << e.what();
  }
  return success();
}

} // namespace

OwningOpRef<ModuleOp> shoal::importONNXBuffer(StringRef path, StringRef bytes,
                                              ArrayRef<InputShape> inputShapes,
                                              MLIRContext *ctx,
                                              bool foldFloatInitializers,
                                              int64_t batchNormGroups,
                                              StringRef restoredModelPath) {
  ctx->loadDialect<ShoalDialect, func::FuncDialect>();

  // External data and `shoal.source` are relative to the model's folder.
  SmallString<256> source(path);
  if (path != "-" && path != "<stdin>") {
    llvm::sys::fs::make_absolute(source);
    llvm::sys::path::remove_dots(source, /*remove_dot_dot=*/true);
  }
  SmallString<256> modelDir = llvm::sys::path::parent_path(source);
  if (!modelDir.empty())
    modelDir += llvm::sys::path::get_separator();

  onnx::ModelProto model;
  if (failed(parseModel(ctx, path, bytes, model)))
    return {};
  // Before any of ONNX's code (or shoal's opset rewriting) reads it.
  if (std::optional<std::string> error = onnx_import::validateModel(model)) {
    fileError(ctx, path) << "not a valid ONNX model: " << *error;
    return {};
  }
  // A training import trains one tensor per parameter of the source model:
  // undo the merges of an eval-mode export (RestoreParameters.cpp) in a copy
  // of the model that the plan then reads its weights from.
  onnx_import::RestoredParameters restored;
  std::string exportedSource;
  if (!foldFloatInitializers) {
    onnx::ModelProto rewritten = model;
    restored = onnx_import::restoreParameters(rewritten, modelDir);
    for (const std::string &w : restored.warnings)
      emitWarning(UnknownLoc::get(ctx)) << path << ": " << w;
    if (restored.changed() && restoredModelPath.empty()) {
      emitWarning(UnknownLoc::get(ctx))
          << path << ": " << restored.copies.size()
          << " parameters are read through Identity nodes and "
          << restored.ties.size()
          << " initializers are folded copies of tied weights (an eval-mode "
             "export); they are trained as the merged tensors, as no file "
             "was given for the restored model";
      restored.copies.clear();
      restored.ties.clear();
    } else if (restored.changed()) {
      SmallString<256> out(restoredModelPath);
      llvm::sys::fs::make_absolute(out);
      llvm::sys::path::remove_dots(out, /*remove_dot_dot=*/true);
      if (std::string err =
              onnx_import::writeRestoredModel(rewritten, modelDir, out);
          !err.empty()) {
        fileError(ctx, path) << "cannot write the restored model: " << err;
        return {};
      }
      exportedSource = source.str().str();
      model = std::move(rewritten);
      source = out;
      modelDir = llvm::sys::path::parent_path(source);
      modelDir += llvm::sys::path::get_separator();
    }
  }
  FailureOr<int64_t> opset = getOpset(ctx, path, model);
  if (failed(opset))
    return {};
  if (*opset > kMaxOpset &&
      failed(downgradeOpset(ctx, path, modelDir, model, *opset)))
    return {};
  // Op types are checked once the model is at an opset shoal knows.
  if (*opset >= kMinOpset && failed(checkOpTypes(ctx, path, model.graph())))
    return {};
  if (failed(applyInputShapes(ctx, path, *model.mutable_graph(), inputShapes)))
    return {};
  if (*opset < kMinOpset &&
      (failed(upgradeOpset(ctx, path, modelDir, model, *opset,
                           foldFloatInitializers)) ||
       failed(checkOpTypes(ctx, path, model.graph()))))
    return {};
  if (failed(checkAndInferShapes(ctx, path, modelDir, model,
                                 foldFloatInitializers)))
    return {};
  onnx_import::Importer importer(ctx, path, source, model);
  importer.foldFloatInitializers = foldFloatInitializers;
  importer.batchNormGroups = batchNormGroups;
  OwningOpRef<ModuleOp> module = importer.run();
  if (!module)
    return module;
  Builder b(ctx);
  if (restored.changed()) {
    SmallVector<std::string> copies, ties;
    for (auto &[param, from] : restored.copies)
      copies.push_back(param);
    for (auto &t : restored.ties)
      ties.push_back(t.copy + " -> " + t.parameter +
                     (t.transposed ? " (transposed)" : ""));
    auto strings = [&](ArrayRef<std::string> list) {
      SmallVector<StringRef> refs(list.begin(), list.end());
      return b.getStrArrayAttr(refs);
    };
    (*module)->setAttr(
        ShoalDialect::kRestoredAttr,
        b.getDictionaryAttr(
            {b.getNamedAttr("model", b.getStringAttr(exportedSource)),
             b.getNamedAttr("copies", strings(copies)),
             b.getNamedAttr("ties", strings(ties))}));
  }
  if (!restored.warnings.empty()) {
    SmallVector<StringRef> refs(restored.warnings.begin(),
                                restored.warnings.end());
    (*module)->setAttr(ShoalDialect::kImportWarningsAttr,
                       b.getStrArrayAttr(refs));
  }
  return module;
}

FailureOr<std::vector<shoal::ONNXNodeName>>
shoal::listONNXNodeNames(StringRef path, MLIRContext *ctx) {
  if (std::string e = checkRegularFile(path.str()); !e.empty()) {
    emitError(UnknownLoc::get(ctx)) << path << ": " << e;
    return failure();
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(UnknownLoc::get(ctx))
        << path << ": cannot read: " << buffer.getError().message();
    return failure();
  }
  onnx::ModelProto model;
  if (failed(parseModel(ctx, path, (*buffer)->getBuffer(), model)))
    return failure();
  if (std::optional<std::string> error = onnx_import::validateModel(model)) {
    fileError(ctx, path) << "not a valid ONNX model: " << *error;
    return failure();
  }
  const onnx::GraphProto &graph = model.graph();
  std::vector<std::string> names = onnx_import::getNodeNames(graph);
  std::vector<ONNXNodeName> out;
  out.reserve(names.size());
  for (int i = 0; i < graph.node_size(); ++i)
    out.push_back({names[i], graph.node(i).op_type(), graph.node(i).name()});
  return out;
}

OwningOpRef<ModuleOp>
shoal::importONNX(StringRef path, ArrayRef<InputShape> inputShapes,
                  MLIRContext *ctx, bool foldFloatInitializers,
                  int64_t batchNormGroups, StringRef restoredModelPath) {
  // A FIFO or a device (/dev/zero) would block or never end.
  if (std::string e = checkRegularFile(path.str()); !e.empty()) {
    emitError(UnknownLoc::get(ctx)) << path << ": " << e;
    return {};
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(UnknownLoc::get(ctx))
        << path << ": cannot read: " << buffer.getError().message();
    return {};
  }
  return importONNXBuffer(path, (*buffer)->getBuffer(), inputShapes, ctx,
                          foldFloatInitializers, batchNormGroups,
                          restoredModelPath);
}
