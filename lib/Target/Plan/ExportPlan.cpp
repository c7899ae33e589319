//===- ExportPlan.cpp - Partitioned module to protobuf plan -----*- C++ -*-===//
//
// Flattens the TaskGraphs of a partitioned `@main` into one SPMD program of
// proto/plan.proto: values with local types, weights with the slice each
// rank loads, constants, ops with ONNX kinds and attributes, collectives.
//
//===----------------------------------------------------------------------===//

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"
#include "shoal/Schema/OpTable.h"
#include "shoal/Target/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "plan.pb.h"
#include "shoal/Schema/Fingerprint.h"
#include "shoal/Schema/WeightDigest.h"
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

using namespace mlir;
using namespace shoal;

namespace {

/// Module attribute (unit): the weights are shapes only and `shoal.source`
/// holds no data (bench/gpt_mlir.py writes it); the plan is for shoal-sim.
constexpr llvm::StringLiteral kShapesOnlyAttr = "shoal.shapes_only";

/// The kind plans give `kind` (include/shoal/Schema/Ops.def, which the
/// runtime parses plans with).
StringRef planKind(rt::OpKind kind) { return rt::opKindName(kind); }

/// `text` for a plan's string fields, which must be UTF-8: as it is when it
/// is, else with every byte outside a valid UTF-8 sequence written `\xNN`
/// (and `\` as `\\`). ONNX names are bytes; the op names and task graph
/// names this writes are for errors, traces and reports, while the names
/// that are keys (ports, initializers) are `bytes` fields and kept exact.
static std::string planText(StringRef text) {
  const auto *begin = reinterpret_cast<const llvm::UTF8 *>(text.data());
  const auto *end = begin + text.size();
  const llvm::UTF8 *probe = begin;
  if (llvm::isLegalUTF8String(&probe, end))
    return text.str();
  std::string out;
  for (const llvm::UTF8 *p = begin; p < end;) {
    unsigned n = llvm::getUTF8SequenceSize(p, end);
    if (n > 0 && *p != '\\') {
      out.append(reinterpret_cast<const char *>(p), n);
      p += n;
      continue;
    }
    if (*p == '\\')
      out += "\\\\";
    else {
      const char *hex = "0123456789ABCDEF";
      out += {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
    }
    ++p;
  }
  return out;
}

/// The types of Ops.def's SHOAL_OP_ATTR rows.
enum class AttrType { Int, Float, String, Ints, Floats, Strings };

/// One SHOAL_OP_ATTR row: an attribute op kind `kind` takes (the runtime
/// refuses any other).
struct OpAttrRow {
  rt::OpKind kind;
  std::string_view name;
  AttrType type;
};

constexpr OpAttrRow kOpAttrs[] = {
#define SHOAL_OP_ATTR(Kind, Name, Type)                                        \
  {rt::OpKind::Kind, Name, AttrType::Type},
#include "shoal/Schema/Ops.def"
};

/// Ops.def's row for attribute `name` of `kind`, or null.
constexpr const OpAttrRow *findOpAttr(rt::OpKind kind, std::string_view name) {
  for (const OpAttrRow &row : kOpAttrs)
    if (row.kind == kind && row.name == name)
      return &row;
  return nullptr;
}

/// Whether Ops.def lists attribute `name` of type `type` for `kind`.
constexpr bool opTakesAttr(rt::OpKind kind, std::string_view name,
                           AttrType type) {
  const OpAttrRow *row = findOpAttr(kind, name);
  return row && row->type == type;
}

const char *attrTypeName(AttrType type) {
  switch (type) {
  case AttrType::Int:
    return "Int";
  case AttrType::Float:
    return "Float";
  case AttrType::String:
    return "String";
  case AttrType::Ints:
    return "Ints";
  case AttrType::Floats:
    return "Floats";
  case AttrType::Strings:
    return "Strings";
  }
  return "?";
}

/// Whether a plan attribute holds a value of `type` as the runtime reads it
/// (a Float may be written as an integer).
bool holdsType(const plan::Attribute &a, AttrType type) {
  switch (type) {
  case AttrType::Int:
    return a.value_case() == plan::Attribute::kI;
  case AttrType::Float:
    return a.value_case() == plan::Attribute::kF ||
           a.value_case() == plan::Attribute::kI;
  case AttrType::String:
    return a.value_case() == plan::Attribute::kS;
  case AttrType::Ints:
    return a.value_case() == plan::Attribute::kInts;
  case AttrType::Floats:
    return a.value_case() == plan::Attribute::kFloats;
  case AttrType::Strings:
    return a.value_case() == plan::Attribute::kStrings;
  }
  return false;
}

/// Attribute `NAME` of op kind `KIND` (a constant rt::OpKind), which Ops.def
/// must list with type `TYPE`: every attribute the exporter writes for an op
/// of its own is named through this, so that a name, kind or type that
/// Ops.def does not have fails to compile.
#define PLAN_ATTR(KIND, TYPE, NAME)                                            \
  ([] {                                                                        \
    static_assert(opTakesAttr(KIND, NAME, AttrType::TYPE),                     \
                  "include/shoal/Schema/Ops.def lists no attribute " NAME      \
                  " of type " #TYPE " for this op kind");                      \
    return llvm::StringLiteral(NAME);                                          \
  }())

/// The kind `K` as a type, for helpers that write the same attributes for
/// several kinds.
template <rt::OpKind K> using KindTag = std::integral_constant<rt::OpKind, K>;

class PlanWriter {
public:
  PlanWriter(ModuleOp module) : module(module) {}

  LogicalResult write(raw_ostream &os, StringRef planDir, bool text) {
    func::FuncOp func = module.lookupSymbol<func::FuncOp>("main");
    if (!func)
      return module.emitError() << "plan export needs a 'func.func @main'";
    Block &entry = func.getBody().front();
    auto tgs = entry.getOps<TaskGraphOp>();
    if (tgs.empty() && !llvm::hasSingleElement(entry))
      return func.emitError()
             << "'@main' has no shoal.task_graph; run shoal-parallelize "
                "before exporting a plan";
    if (llvm::any_of(tgs, [](TaskGraphOp tg) {
          return tg->hasAttr(ShoalDialect::kStageAttr);
        }))
      return writeStaged(os, planDir, text, func);
    // A graph without nodes (outputs are inputs) is a program of no ops on
    // one rank.
    mesh = tgs.empty()
               ? MeshAttr::get(
                     module.getContext(),
                     Builder(module.getContext()).getStrArrayAttr({"dp", "tp"}),
                     {1, 1})
               : (*tgs.begin()).getMeshAttr();
    for (TaskGraphOp tg : tgs)
      if (tg.getMeshAttr() != mesh)
        return tg.emitError() << "TaskGraph '" << tg.getSymName()
                              << "' uses another mesh; one plan program "
                                 "needs one mesh";

    if (failed(writeHeader(1, planDir)))
      return failure();
    fillMesh(plan.mutable_mesh(), mesh, /*dropMicroBatch=*/false);
    prog = plan.add_programs();
    prog->set_role("spmd");

    for (BlockArgument arg : entry.getArguments())
      addInputPort(func, arg);
    for (Operation &op : entry) {
      if (auto tg = dyn_cast<TaskGraphOp>(op)) {
        if (failed(writeTaskGraph(tg)))
          return failure();
        continue;
      }
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (auto [i, v] : llvm::enumerate(ret.getOperands()))
          addOutputPort(func, i, v);
        continue;
      }
      return op.emitError() << "'" << op.getName()
                            << "' outside a TaskGraph cannot be exported";
    }
    return serialize(os, text);
  }

private:
  /// The fingerprint of initializer `name` of the module's ONNX source, or 0
  /// when it cannot be read now (a module whose source is elsewhere): the
  /// plan then does not check that weight.
  uint64_t weightDigest(const std::string &name) {
    if (plan.sources_size() == 0 ||
        plan.sources(0).kind() != plan::WeightSource::ONNX)
      return 0;
    try {
      if (!weightFile) {
        auto source =
            module->getAttrOfType<StringAttr>(ShoalDialect::kSourceAttr);
        weightFile = std::make_unique<shoal::rt::OnnxWeightDigests>(
            source.getValue().str());
      }
      return weightFile->digest(name);
    } catch (const std::exception &) {
      return 0;
    }
  }

  std::unique_ptr<shoal::rt::OnnxWeightDigests> weightFile;

  LogicalResult serialize(raw_ostream &os, bool text) {
    plan.set_content_sha256(shoal::rt::planContentSha256(plan));
    std::string bytes;
    if (text) {
      google::protobuf::TextFormat::PrintToString(plan, &bytes);
      os << bytes;
      return success();
    }
    // Deterministic: the attributes are a map, whose order would otherwise
    // change from run to run; the same module gives the same bytes.
    bool ok;
    {
      google::protobuf::io::StringOutputStream stream(&bytes);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      ok = plan.SerializeToCodedStream(&coded);
    }
    if (!ok)
      return module.emitError() << "could not serialize the plan";
    os << bytes;
    return success();
  }

  LogicalResult writeHeader(int version, StringRef planDir) {
    plan.set_magic("shoal.plan");
    plan.set_format_version(version);
    plan.set_producer("shoal 0.1");
    if (auto device = module->getAttrOfType<StringAttr>(kDeviceAttr)) {
      if (device.getValue() == "cuda")
        plan.set_default_device(plan::CUDA);
      else if (device.getValue() == "cpu")
        plan.set_default_device(plan::CPU);
      else
        return module.emitError()
               << "'" << kDeviceAttr << "' must be \"cpu\" or \"cuda\", got '"
               << device.getValue() << "'";
    }
    if (auto source =
            module->getAttrOfType<StringAttr>(ShoalDialect::kSourceAttr)) {
      auto *src = plan.add_sources();
      // A shapes-only module (bench/gpt_mlir.py) names a model that holds
      // no data: shoal-sim can predict the plan, shoal-run refuses it.
      src->set_kind(module->hasAttr(kShapesOnlyAttr)
                        ? plan::WeightSource::SHAPES_ONLY
                        : plan::WeightSource::ONNX);
      src->set_path(relativeTo(source.getValue(), planDir));
    }
    if (auto training = module->getAttrOfType<DictionaryAttr>(
            ShoalDialect::kTrainingAttr)) {
      auto *t = plan.mutable_training();
      auto str = [&](StringRef key) {
        auto v = training.getAs<StringAttr>(key);
        return v ? v.getValue().str() : std::string();
      };
      t->set_loss(str("loss"));
      t->set_labels(str("labels"));
      t->set_optimizer(str("optimizer"));
      if (auto bucket = training.getAs<FloatAttr>("grad_bucket_mb"))
        t->set_grad_bucket_mb(bucket.getValueAsDouble());
      t->set_precision(str("precision"));
      if (auto ls = training.getAs<DictionaryAttr>("loss_scale")) {
        auto f = [&](StringRef key) {
          auto v = ls.getAs<FloatAttr>(key);
          return v ? v.getValueAsDouble() : 0.0;
        };
        plan::LossScale *out = t->mutable_loss_scale();
        out->set_initial(f("initial"));
        out->set_growth_factor(f("growth_factor"));
        out->set_backoff_factor(f("backoff_factor"));
        out->set_min(f("min"));
        if (auto n = ls.getAs<IntegerAttr>("growth_interval"))
          out->set_growth_interval(n.getInt());
      }
    }
    return success();
  }

  static bool isMicroBatchAxis(Attribute name) {
    return cast<StringAttr>(name).getValue() == ShoalDialect::kMicroBatchAxis;
  }

  static void fillMesh(plan::Mesh *out, MeshAttr m, bool dropMicroBatch) {
    for (auto [name, size] : llvm::zip(m.getAxes(), m.getShape())) {
      if (dropMicroBatch && isMicroBatchAxis(name))
        continue;
      auto *axis = out->add_axes();
      axis->set_name(cast<StringAttr>(name).getValue().str());
      axis->set_size(size);
    }
  }

  /// A side of a transfer, for one micro-batch: no "mb" axis anywhere.
  static void fillLayout(plan::Layout *out, LayoutAttr l) {
    fillMesh(out->mutable_mesh(), l.getMesh(), /*dropMicroBatch=*/true);
    ShardingAttr s = l.getSharding();
    for (unsigned d = 0; d < s.getDims().size(); ++d) {
      auto *dim = out->mutable_sharding()->add_dims();
      for (StringRef a : s.getDimAxes(d))
        if (a != ShoalDialect::kMicroBatchAxis)
          dim->add_axes(a.str());
    }
    out->mutable_placement()->set_offset(l.getOffset());
    out->mutable_placement()->set_stride(l.getStride());
  }

  /// One micro-batch's global type of `local`, laid out as `side`.
  void fillTransfer(plan::Transfer *out, int64_t id, Value local,
                    LayoutAttr side, LayoutAttr from, LayoutAttr to) {
    out->set_id(id);
    auto type = cast<RankedTensorType>(local.getType());
    auto *global = out->mutable_global_type();
    global->set_dtype(dtypeOf(type.getElementType()));
    for (int64_t d = 0; d < type.getRank(); ++d) {
      int64_t n = 1;
      for (StringRef a : side.getSharding().getDimAxes(d))
        if (a != ShoalDialect::kMicroBatchAxis)
          n *= side.getMesh().getAxisSize(a);
      global->add_shape(type.getDimSize(d) * n);
    }
    fillLayout(out->mutable_src(), from);
    fillLayout(out->mutable_dst(), to);
  }

  /// Pipeline plans (format version 2): one program per device group.
  LogicalResult writeStaged(raw_ostream &os, StringRef planDir, bool text,
                            func::FuncOp func) {
    Block &entry = func.getBody().front();
    SmallVector<SmallVector<TaskGraphOp>> groups;
    for (auto tg : entry.getOps<TaskGraphOp>()) {
      auto stage = tg->getAttrOfType<IntegerAttr>(ShoalDialect::kStageAttr);
      auto place =
          tg->getAttrOfType<DenseI64ArrayAttr>(ShoalDialect::kPlacementAttr);
      if (!stage || !place || !tg.getMeshAttr())
        return tg.emitError() << "TaskGraph '" << tg.getSymName()
                              << "' has no stage, placement or mesh, but "
                                 "others do";
      int64_t g = stage.getInt();
      if (g >= (int64_t)groups.size())
        groups.resize(g + 1);
      groups[g].push_back(tg);
    }
    for (Operation &op : entry)
      if (!isa<TaskGraphOp, func::ReturnOp>(op))
        return op.emitError() << "'" << op.getName()
                              << "' outside a TaskGraph cannot be exported; "
                                 "run shoal-pipeline first";
    if (failed(writeHeader(2, planDir)))
      return failure();
    MeshAttr first = groups.front().front().getMeshAttr();
    // Every device group holds dp x tp ranks of the world (placed
    // pipeline-major or, by shoal-plan, stage-major).
    int64_t world = 0;
    for (auto &group : groups) {
      MeshAttr mesh = group.front().getMeshAttr();
      world += mesh.getAxisSize("dp") * mesh.getAxisSize("tp");
    }
    auto *worldAxis = plan.mutable_mesh()->add_axes();
    worldAxis->set_name("world");
    worldAxis->set_size(world);
    int64_t microBatches =
        std::max<int64_t>(1, first.getAxisSize(ShoalDialect::kMicroBatchAxis));
    auto *pipe = plan.mutable_pipeline();
    if (auto k =
            module->getAttrOfType<StringAttr>(ShoalDialect::kScheduleKindAttr))
      pipe->set_schedule(k.getValue().str());
    else
      pipe->set_schedule("gpipe");
    pipe->set_stages(groups.size());
    pipe->set_micro_batches(microBatches);
    int64_t chunks = 1;
    if (auto v = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kVirtualStagesAttr))
      chunks = v.getInt();
    pipe->set_chunks(chunks);
    auto schedules =
        func->getAttrOfType<ArrayAttr>(ShoalDialect::kScheduleAttr);

    Operation *ret = entry.getTerminator();
    for (auto [g, tgs] : llvm::enumerate(groups)) {
      if (tgs.empty())
        return func.emitError() << "pipeline stage " << g << " is empty";
      prog = plan.add_programs();
      ids.clear();
      mesh = tgs.front().getMeshAttr();
      prog->set_role("stage" + std::to_string(g));
      prog->set_stage(g);
      fillMesh(prog->mutable_mesh(), mesh, /*dropMicroBatch=*/false);
      auto place = tgs.front()->getAttrOfType<DenseI64ArrayAttr>(
          ShoalDialect::kPlacementAttr);
      prog->mutable_placement()->set_offset(place[0]);
      prog->mutable_placement()->set_stride(place[1]);
      prog->set_num_micro_batches(microBatches);
      llvm::StringMap<int> taskIndex;
      for (TaskGraphOp tg : tgs) {
        if (tg.getMeshAttr() != mesh ||
            tg->getAttr(ShoalDialect::kPlacementAttr) != place)
          return tg.emitError() << "TaskGraph '" << tg.getSymName()
                                << "' differs in mesh or ranks from the "
                                   "rest of pipeline stage "
                                << g;
        taskIndex[tg.getSymName()] = prog->tasks_size();
        prog->add_tasks(planText(tg.getSymName()));
      }
      // Graph inputs this stage reads.
      for (BlockArgument arg : entry.getArguments()) {
        if (!llvm::any_of(arg.getUsers(), [&](Operation *u) {
              return llvm::is_contained(tgs, u);
            }))
          continue;
        addInputPort(func, arg);
      }
      for (TaskGraphOp tg : tgs)
        if (failed(writeTaskGraph(tg)))
          return failure();
      // Graph outputs this stage produces.
      for (auto [i, v] : llvm::enumerate(ret->getOperands())) {
        auto tg = v.getDefiningOp<TaskGraphOp>();
        if (!tg) {
          if (g == 0)
            return ret->emitError()
                   << "graph output " << i
                   << " is a graph input; pipelines cannot export that yet";
          continue;
        }
        if (!llvm::is_contained(tgs, tg))
          continue;
        addOutputPort(func, i, v);
      }
      if (!schedules)
        continue;
      if (g >= schedules.size())
        return func.emitError() << "'" << ShoalDialect::kScheduleAttr
                                << "' has no entry for stage " << g;
      for (auto step : cast<ArrayAttr>(schedules[g]).getAsRange<StringAttr>()) {
        StringRef text = step.getValue();
        auto [head, task] = text.split(':');
        int64_t mb = -1;
        auto it = taskIndex.find(task);
        if (head.size() < 2 || (head[0] != 'F' && head[0] != 'B') ||
            head.drop_front().getAsInteger(10, mb) || mb < 0 ||
            mb >= microBatches || it == taskIndex.end())
          return func.emitError()
                 << "bad schedule step '" << text << "' for stage " << g
                 << " (expected F<micro-batch>:<TaskGraph of the stage>)";
        auto *s = prog->add_schedule();
        s->set_task(it->second);
        s->set_micro_batch(mb);
        s->set_backward(head[0] == 'B');
      }
    }
    // shoal-plan's kMicroBatchSharesAttr.
    if (auto shares = module->getAttrOfType<DenseI64ArrayAttr>(
            "shoal.micro_batch_shares"))
      if (failed(applyShares(func, shares.asArrayRef(), microBatches)))
        return failure();
    return serialize(os, text);
  }

  /// shoal-plan's compiled batch shares (module attribute
  /// `shoal.micro_batch_shares`, micro-batches per rank): the module holds
  /// one replica's program, gradient accumulation over all the step's
  /// micro-batches; it becomes the program of every rank, each running its
  /// own number of them (Program.micro_batch_shares). Its "dp" axis grows
  /// to the ranks, every dimension and every collective over "mb" also
  /// runs over "dp" (the accumulating all-reduces then sum over the
  /// replicas too), and the schedule is written for the largest count.
  LogicalResult applyShares(func::FuncOp func, ArrayRef<int64_t> shares,
                            int64_t microBatches) {
    auto fail = [&](const Twine &why) {
      return func.emitError() << "cannot compile the batch shares of "
                                 "shoal.micro_batch_shares: "
                              << why;
    };
    if (plan.programs_size() != 1)
      return fail("the plan has " + Twine(plan.programs_size()) +
                  " programs, shares are for one");
    plan::Program *prog = plan.mutable_programs(0);
    const std::string mb = ShoalDialect::kMicroBatchAxis.str();
    bool hasDp = false, hasMb = false;
    for (const auto &a : prog->mesh().axes()) {
      if (a.name() != mb && a.size() != 1)
        return fail("the program runs on " + Twine(a.size()) +
                    " devices along '" + a.name() +
                    "'; it must be one replica's");
      hasDp |= a.name() == "dp";
      hasMb |= a.name() == mb;
    }
    int64_t total = 0, most = 0;
    for (int64_t c : shares) {
      if (c < 1)
        return fail("a rank gets " + Twine(c) + " micro-batches");
      total += c;
      most = std::max(most, c);
    }
    if (!hasDp || !hasMb || total != microBatches)
      return fail("the shares sum to " + Twine(total) +
                  " micro-batches, the program has " + Twine(microBatches));
    int64_t ranks = static_cast<int64_t>(shares.size());
    plan.mutable_mesh()->mutable_axes(0)->set_size(ranks);
    for (auto &a : *prog->mutable_mesh()->mutable_axes()) {
      if (a.name() == mb)
        a.set_size(most);
      else if (a.name() == "dp")
        a.set_size(ranks);
    }
    prog->mutable_placement()->set_offset(0);
    prog->mutable_placement()->set_stride(0);
    prog->set_num_micro_batches(static_cast<int32_t>(most));
    if (plan.has_pipeline())
      plan.mutable_pipeline()->set_micro_batches(static_cast<int32_t>(most));
    auto widen = [&](google::protobuf::RepeatedPtrField<std::string> *axes) {
      if (llvm::is_contained(*axes, mb) && !llvm::is_contained(*axes, "dp"))
        axes->Add("dp");
    };
    auto widenPort = [&](plan::Port &port) {
      for (auto &d : *port.mutable_sharding()->mutable_dims())
        widen(d.mutable_axes());
    };
    for (auto &port : *prog->mutable_inputs())
      widenPort(port);
    for (auto &port : *prog->mutable_outputs())
      widenPort(port);
    for (auto &op : *prog->mutable_ops())
      if (auto it = op.mutable_attrs()->find("axes");
          it != op.mutable_attrs()->end() && it->second.has_strings())
        widen(it->second.mutable_strings()->mutable_values());
    // The schedule for `most` micro-batches: each rank runs those of its
    // own micro-batches (PlanLoader), a task that runs once a step (the
    // optimizer, at the last micro-batch) at its own last.
    std::vector<char> once(prog->tasks_size(), microBatches > 1);
    for (const auto &st : prog->schedule())
      if (st.micro_batch() != microBatches - 1)
        once[st.task()] = 0;
    std::vector<plan::ScheduleStep> steps;
    for (const auto &st : prog->schedule()) {
      plan::ScheduleStep t = st;
      if (once[st.task()])
        t.set_micro_batch(most - 1);
      else if (st.micro_batch() >= most)
        continue;
      steps.push_back(t);
    }
    prog->clear_schedule();
    for (const auto &st : steps)
      *prog->add_schedule() = st;
    for (std::size_t q = 0; q < shares.size();) {
      std::size_t r = q;
      while (r < shares.size() && shares[r] == shares[q])
        ++r;
      plan::MicroBatchShare *s = prog->add_micro_batch_shares();
      s->set_ranks(static_cast<int32_t>(r - q));
      s->set_micro_batches(static_cast<int32_t>(shares[q]));
      q = r;
    }
    return success();
  }

  ModuleOp module;
  MeshAttr mesh;
  plan::Plan plan;
  plan::Program *prog = nullptr;
  llvm::DenseMap<Value, int> ids;

  static std::string relativeTo(StringRef path, StringRef dir) {
    if (dir.empty())
      return path.str();
    SmallString<256> absDir(dir);
    llvm::sys::fs::make_absolute(absDir);
    llvm::sys::path::remove_dots(absDir, /*remove_dot_dot=*/true);
    std::string prefix = std::string(absDir.str()) + "/";
    if (path.starts_with(prefix))
      return path.drop_front(prefix.size()).str();
    return path.str();
  }

  /// ONNX TensorProto.DataType of an element type (for Cast's `to`).
  static int64_t onnxDataType(Type t) {
    if (t.isF32())
      return 1;
    if (t.isUnsignedInteger(8))
      return 2;
    if (t.isInteger(8))
      return 3;
    if (t.isInteger(32))
      return 6;
    if (t.isInteger(64))
      return 7;
    if (t.isInteger(1))
      return 9;
    if (t.isF16())
      return 10;
    if (t.isF64())
      return 11;
    if (t.isBF16())
      return 16;
    return 0;
  }

  static plan::DType dtypeOf(Type t) {
    if (t.isF32())
      return plan::F32;
    if (t.isF64())
      return plan::F64;
    if (t.isF16())
      return plan::F16;
    if (t.isBF16())
      return plan::BF16;
    if (t.isInteger(1))
      return plan::BOOL;
    if (t.isInteger(64))
      return plan::I64;
    if (t.isInteger(32))
      return plan::I32;
    if (t.isUnsignedInteger(8))
      return plan::U8;
    if (t.isInteger(8))
      return plan::I8;
    return plan::DTYPE_UNSPECIFIED;
  }

  void fillType(plan::TensorType *out, RankedTensorType type) {
    out->set_dtype(dtypeOf(type.getElementType()));
    for (int64_t d : type.getShape())
      out->add_shape(d);
  }

  /// Global type and sharding of a value from its local type.
  void fillGlobal(plan::TensorType *out, plan::Sharding *sh, Value v,
                  ShardingAttr sharding) {
    auto type = cast<RankedTensorType>(v.getType());
    out->set_dtype(dtypeOf(type.getElementType()));
    for (int64_t d = 0; d < type.getRank(); ++d) {
      int64_t n = 1;
      auto *dim = sh->add_dims();
      if (sharding)
        for (StringRef a : sharding.getDimAxes(d)) {
          n *= mesh.getAxisSize(a);
          dim->add_axes(a.str());
        }
      out->add_shape(type.getDimSize(d) * n);
    }
  }

  void fillPort(plan::Port *port, Value v, ShardingAttr sharding) {
    port->set_value(idOf(v));
    fillGlobal(port->mutable_global_type(), port->mutable_sharding(), v,
               sharding);
  }

  /// The current program's port for graph input `arg`.
  void addInputPort(func::FuncOp func, BlockArgument arg) {
    unsigned i = arg.getArgNumber();
    auto *port = prog->add_inputs();
    auto name = func.getArgAttrOfType<StringAttr>(i, "shoal.name");
    port->set_name(name ? name.getValue().str() : "input" + std::to_string(i));
    fillPort(
        port, arg,
        func.getArgAttrOfType<ShardingAttr>(i, ShoalDialect::kShardingAttr));
  }

  /// The current program's port for graph output `i`, the value `v`.
  void addOutputPort(func::FuncOp func, unsigned i, Value v) {
    auto *port = prog->add_outputs();
    auto name = func.getResultAttrOfType<StringAttr>(i, "shoal.name");
    port->set_name(name ? name.getValue().str() : "output" + std::to_string(i));
    fillPort(
        port, v,
        func.getResultAttrOfType<ShardingAttr>(i, ShoalDialect::kShardingAttr));
  }

  int idOf(Value v) {
    auto [it, inserted] = ids.try_emplace(v, prog->values_size());
    if (inserted)
      fillType(prog->add_values(), cast<RankedTensorType>(v.getType()));
    return it->second;
  }

  LogicalResult writeTaskGraph(TaskGraphOp tg) {
    Block &body = tg.getBody().front();
    for (auto [arg, in] : llvm::zip(body.getArguments(), tg.getInputs()))
      ids[arg] = idOf(in);
    for (Operation &op : body) {
      if (auto yield = dyn_cast<YieldOp>(op)) {
        for (auto [r, v] : llvm::zip(tg.getResults(), yield.getOperands()))
          ids[r] = idOf(v);
        continue;
      }
      if (auto w = dyn_cast<WeightOp>(op)) {
        bool zeros = w->hasAttr(ShoalDialect::kZeroInitAttr);
        if (plan.sources_size() == 0 && !zeros)
          return w.emitError()
                 << "weight '" << w.getName() << "' but the module has no '"
                 << ShoalDialect::kSourceAttr << "'";
        auto *weight = prog->add_weights();
        weight->set_value(idOf(w));
        weight->set_initializer(w.getName().str());
        weight->set_source(0);
        weight->set_zero_init(zeros);
        if (!zeros)
          weight->set_digest(weightDigest(getSourceName(w).str()));
        if (auto range = w->getAttrOfType<DictionaryAttr>(
                ShoalDialect::kSourceRangeAttr)) {
          plan::WeightRange *r = weight->mutable_range();
          r->set_name(getSourceName(w).str());
          for (int64_t d : range.getAs<DenseI64ArrayAttr>("shape").asArrayRef())
            r->add_shape(d);
          r->set_axis(range.getAs<IntegerAttr>("axis").getInt());
          r->set_start(range.getAs<IntegerAttr>("start").getInt());
        }
        ShardingAttr s;
        if (auto list =
                w->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr))
          s = cast<ShardingAttr>(list[0]);
        fillGlobal(weight->mutable_global_type(), weight->mutable_sharding(), w,
                   s);
        // Uneven shards: the local type times the blocks overstates it.
        if (auto shape =
                w->getAttrOfType<DenseI64ArrayAttr>("shoal.global_shape")) {
          weight->mutable_global_type()->clear_shape();
          for (int64_t d : shape.asArrayRef())
            weight->mutable_global_type()->add_shape(d);
        }
        if (auto src = w->getAttrOfType<DenseI64ArrayAttr>(
                ShoalDialect::kSourceShapeAttr))
          for (int64_t d : src.asArrayRef())
            weight->add_source_shape(d);
        continue;
      }
      if (auto c = dyn_cast<ConstantOp>(op)) {
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!dense)
          return c.emitError() << "only dense constants can be exported";
        auto *constant = prog->add_constants();
        constant->set_value(idOf(c));
        constant->set_data(denseBytes(dense));
        constant->set_loss_scale(c->hasAttr(ShoalDialect::kLossScaleAttr));
        continue;
      }
      if (failed(writeOp(&op, tg.getSymName())))
        return failure();
    }
    writeUneven(tg);
    return success();
  }

  /// Shards by speed (shoal-partition's "shoal.uneven" and
  /// "shoal.uneven_layouts", lib/Transforms/ShardingUtils.h): the program's
  /// uneven axis and the global type and sharding of every value whose
  /// blocks differ between ranks.
  void writeUneven(TaskGraphOp tg) {
    auto uneven = tg->getAttrOfType<DictionaryAttr>("shoal.uneven");
    if (!uneven)
      return;
    auto axis = uneven.getAs<StringAttr>("axis");
    auto weights = uneven.getAs<DenseI64ArrayAttr>("weights");
    auto multiple = uneven.getAs<IntegerAttr>("multiple");
    bool known = false;
    for (const plan::UnevenAxis &u : prog->uneven_axes())
      known |= u.axis() == axis.getValue();
    if (!known) {
      plan::UnevenAxis *u = prog->add_uneven_axes();
      u->set_axis(axis.str());
      for (int64_t w : weights.asArrayRef())
        u->add_weights(w);
      u->set_multiple(multiple.getInt());
    }
    auto write = [&](Value v, Attribute entry) {
      auto layout = dyn_cast<DictionaryAttr>(entry);
      auto it = ids.find(v);
      if (!layout || it == ids.end())
        return;
      plan::ValueLayout *l = prog->add_value_layouts();
      l->set_value(it->second);
      auto type = cast<RankedTensorType>(v.getType());
      l->mutable_global_type()->set_dtype(dtypeOf(type.getElementType()));
      for (int64_t d :
           layout.getAs<DenseI64ArrayAttr>("global_shape").asArrayRef())
        l->mutable_global_type()->add_shape(d);
      auto sharding = layout.getAs<ShardingAttr>("sharding");
      for (unsigned d = 0; d < type.getRank(); ++d) {
        auto *dim = l->mutable_sharding()->add_dims();
        for (StringRef a : sharding.getDimAxes(d))
          dim->add_axes(a.str());
      }
    };
    // Graph inputs with uneven blocks (batch blocks): their port's value.
    if (auto args = tg->getAttrOfType<ArrayAttr>("shoal.uneven_arg_layouts"))
      for (auto [arg, entry] :
           llvm::zip(tg.getBody().front().getArguments(), args))
        write(arg, entry);
    for (Operation &op : tg.getBody().front())
      if (auto list = op.getAttrOfType<ArrayAttr>("shoal.uneven_layouts"))
        for (auto [r, entry] : llvm::zip(op.getResults(), list))
          write(r, entry);
  }

  static std::string denseBytes(DenseElementsAttr dense) {
    std::string out;
    Type et = dense.getElementType();
    unsigned width = et.isInteger(1) ? 8 : et.getIntOrFloatBitWidth();
    auto put = [&](const APInt &bits) {
      for (unsigned b = 0; b < width / 8; ++b)
        out.push_back(static_cast<char>(bits.extractBitsAsZExtValue(8, b * 8)));
    };
    if (isa<FloatType>(et)) {
      for (APFloat v : dense.getValues<APFloat>())
        put(v.bitcastToAPInt());
    } else {
      for (APInt v : dense.getValues<APInt>())
        put(v.zextOrTrunc(width));
    }
    return out;
  }

  /// Every attribute written for `op` must be one Ops.def lists for its
  /// kind, with its type: the runtime refuses any other. Ops of the shoal
  /// dialect are held to that when this file compiles (PLAN_ATTR); an ONNX
  /// op's attributes, named by the model, are checked here.
  static LogicalResult checkAttrs(Operation *op, StringRef kind,
                                  const plan::Op &out) {
    rt::OpKind k;
    if (!rt::lookupOpKind(std::string_view(kind.data(), kind.size()), k))
      return op->emitError() << "'" << op->getName() << "' of kind '" << kind
                             << "' has no executable form in the plan (not "
                                "an op kind of include/shoal/Schema/Ops.def)";
    // In name order: the map's own order changes from run to run.
    std::vector<std::string> names;
    for (const auto &entry : out.attrs())
      names.push_back(entry.first);
    llvm::sort(names);
    for (const std::string &name : names) {
      const OpAttrRow *row = findOpAttr(k, name);
      if (row && holdsType(out.attrs().at(name), row->type))
        continue;
      InFlightDiagnostic diag = op->emitError();
      if (!isa<OnnxOp>(op))
        diag << "internal error: the plan export and "
                "include/shoal/Schema/Ops.def disagree: ";
      diag << "attribute '" << name << "' of op kind '" << kind << "' ";
      if (row)
        diag << "is not of type " << attrTypeName(row->type)
             << ", which Ops.def gives it";
      else
        diag << "is not one include/shoal/Schema/Ops.def lists for that kind";
      if (isa<OnnxOp>(op))
        diag << " (shoal-run would refuse the plan)";
      return diag;
    }
    return success();
  }

  LogicalResult writeOp(Operation *op, StringRef taskGraph) {
    plan::Op *out = prog->add_ops();
    auto attrs = out->mutable_attrs();
    auto setI = [&](StringRef n, int64_t v) { (*attrs)[n.str()].set_i(v); };
    auto setF = [&](StringRef n, double v) { (*attrs)[n.str()].set_f(v); };
    // LayerNorm and its gradients: axis, epsilon, and rms when RMSNorm.
    auto setNorm = [&](auto norm, auto kind) {
      constexpr rt::OpKind K = decltype(kind)::value;
      setI(PLAN_ATTR(K, Int, "axis"), norm.getAxis());
      setF(PLAN_ATTR(K, Float, "epsilon"), norm.getEpsilon().convertToDouble());
      if (norm.getRms())
        setI(PLAN_ATTR(K, Int, "rms"), 1);
      return planKind(K);
    };
    auto setInts = [&](StringRef n, ArrayRef<int64_t> v) {
      auto *ints = (*attrs)[n.str()].mutable_ints();
      for (int64_t x : v)
        ints->add_values(x);
    };
    auto setStrs = [&](StringRef n, ArrayAttr v) {
      auto *strs = (*attrs)[n.str()].mutable_strings();
      for (auto s : v.getAsValueRange<StringAttr>())
        strs->add_values(planText(s));
    };
    auto setS = [&](StringRef n, StringRef v) {
      (*attrs)[n.str()].set_s(planText(v));
    };
    // A vocabulary-parallel op's block (Ops.def "shard_axes").
    auto setShard = [&](auto kind, ArrayAttr axes,
                        std::optional<uint64_t> size) {
      constexpr rt::OpKind K = decltype(kind)::value;
      if (!axes || !size)
        return;
      setStrs(PLAN_ATTR(K, Strings, "shard_axes"), axes);
      setI(PLAN_ATTR(K, Int, "shard_size"), static_cast<int64_t>(*size));
    };
    // An optimizer update's settings (AdamW's and SGD's common ones).
    auto setUpdate = [&](auto kind, auto update) {
      constexpr rt::OpKind K = decltype(kind)::value;
      setF(PLAN_ATTR(K, Float, "lr"), update.getLr().convertToDouble());
      setF(PLAN_ATTR(K, Float, "weight_decay"),
           update.getWeightDecay().convertToDouble());
      setF(PLAN_ATTR(K, Float, "clip_norm"),
           update.getClipNorm().convertToDouble());
      setI(PLAN_ATTR(K, Int, "warmup_steps"), update.getWarmupSteps());
      setI(PLAN_ATTR(K, Int, "total_steps"), update.getTotalSteps());
      setF(PLAN_ATTR(K, Float, "min_lr"), update.getMinLr().convertToDouble());
      if (update.getLrSchedule() != "cosine")
        setS(PLAN_ATTR(K, String, "lr_schedule"), update.getLrSchedule());
      if (update->hasAttr(ShoalDialect::kMirrorAttr))
        setI(PLAN_ATTR(K, Int, "mirror"), 1);
      if (auto z = update->template getAttrOfType<ArrayAttr>(
              ShoalDialect::kZeroAxesAttr))
        setStrs(PLAN_ATTR(K, Strings, "zero_axes"), z);
      return planKind(K);
    };
    using rt::OpKind;
    StringRef kind =
        llvm::TypeSwitch<Operation *, StringRef>(op)
            .Case([](AddOp) { return planKind(OpKind::Add); })
            .Case([](SubOp) { return planKind(OpKind::Sub); })
            .Case([](MulOp) { return planKind(OpKind::Mul); })
            .Case([](DivOp) { return planKind(OpKind::Div); })
            .Case([](PowOp) { return planKind(OpKind::Pow); })
            .Case([](ErfOp) { return planKind(OpKind::Erf); })
            .Case([](TanhOp) { return planKind(OpKind::Tanh); })
            .Case([](ReluOp) { return planKind(OpKind::Relu); })
            .Case([](SqrtOp) { return planKind(OpKind::Sqrt); })
            .Case([](ExpOp) { return planKind(OpKind::Exp); })
            .Case([](NegOp) { return planKind(OpKind::Neg); })
            .Case([](SigmoidOp) { return planKind(OpKind::Sigmoid); })
            .Case([](SinOp) { return planKind(OpKind::Sin); })
            .Case([](CosOp) { return planKind(OpKind::Cos); })
            .Case([](AbsOp) { return planKind(OpKind::Abs); })
            .Case([](LogOp) { return planKind(OpKind::Log); })
            .Case([](ReciprocalOp) { return planKind(OpKind::Reciprocal); })
            .Case([](FloorOp) { return planKind(OpKind::Floor); })
            .Case([](CeilOp) { return planKind(OpKind::Ceil); })
            .Case([](NotOp) { return planKind(OpKind::Not); })
            .Case([](MaxOp) { return planKind(OpKind::Max); })
            .Case([](MinOp) { return planKind(OpKind::Min); })
            .Case([](EqualOp) { return planKind(OpKind::Equal); })
            .Case([](LessOp) { return planKind(OpKind::Less); })
            .Case([](GreaterOp) { return planKind(OpKind::Greater); })
            .Case([](LessOrEqualOp) { return planKind(OpKind::LessOrEqual); })
            .Case([](GreaterOrEqualOp) {
              return planKind(OpKind::GreaterOrEqual);
            })
            .Case([](AndOp) { return planKind(OpKind::And); })
            .Case([](OrOp) { return planKind(OpKind::Or); })
            .Case([](XorOp) { return planKind(OpKind::Xor); })
            .Case([](WhereOp) { return planKind(OpKind::Where); })
            .Case([&](CastOp c) {
              constexpr OpKind K = OpKind::Cast;
              setI(PLAN_ATTR(K, Int, "to"),
                   onnxDataType(c.getType().getElementType()));
              return planKind(K);
            })
            // An ONNX op's attributes under their own names: checked
            // against Ops.def below, as they are written.
            .Case([&](OnnxOp o) {
              for (NamedAttribute a : o.getOnnxAttrs()) {
                StringRef n = a.getName().getValue();
                Attribute v = a.getValue();
                if (auto i = dyn_cast<IntegerAttr>(v))
                  setI(n, i.getInt());
                else if (auto f = dyn_cast<FloatAttr>(v))
                  setF(n, f.getValueAsDouble());
                else if (auto str = dyn_cast<StringAttr>(v))
                  setS(n, str.getValue());
                else if (auto ints = dyn_cast<DenseI64ArrayAttr>(v))
                  setInts(n, ints.asArrayRef());
                else if (auto fs = dyn_cast<DenseF32ArrayAttr>(v)) {
                  auto *floats = (*attrs)[n.str()].mutable_floats();
                  for (float x : fs.asArrayRef())
                    floats->add_values(x);
                }
              }
              return o.getOpType();
            })
            .Case([](MatMulOp) { return planKind(OpKind::MatMul); })
            .Case([&](GemmOp g) {
              constexpr OpKind K = OpKind::Gemm;
              setF(PLAN_ATTR(K, Float, "alpha"),
                   g.getAlpha().convertToDouble());
              setF(PLAN_ATTR(K, Float, "beta"), g.getBeta().convertToDouble());
              setI(PLAN_ATTR(K, Int, "transA"), g.getTransA());
              setI(PLAN_ATTR(K, Int, "transB"), g.getTransB());
              return planKind(K);
            })
            .Case([&](SoftmaxOp s) {
              constexpr OpKind K = OpKind::Softmax;
              setI(PLAN_ATTR(K, Int, "axis"), s.getAxis());
              return planKind(K);
            })
            .Case([&](LayerNormOp l) {
              return setNorm(l, KindTag<OpKind::LayerNormalization>());
            })
            .Case([&](GatherOp g) {
              constexpr OpKind K = OpKind::Gather;
              setI(PLAN_ATTR(K, Int, "axis"), g.getAxis());
              setShard(KindTag<K>(), g.getShardAxesAttr(), g.getShardSize());
              return planKind(K);
            })
            .Case([&](ReshapeOp r) {
              constexpr OpKind K = OpKind::Reshape;
              setInts(PLAN_ATTR(K, Ints, "shape"), r.getType().getShape());
              return planKind(K);
            })
            .Case([&](TransposeOp t) {
              constexpr OpKind K = OpKind::Transpose;
              setInts(PLAN_ATTR(K, Ints, "perm"), t.getPerm());
              return planKind(K);
            })
            .Case([&](ReduceMeanOp r) {
              constexpr OpKind K = OpKind::ReduceMean;
              setInts(PLAN_ATTR(K, Ints, "axes"), r.getAxes());
              setI(PLAN_ATTR(K, Int, "keepdims"), r.getKeepdims());
              return planKind(K);
            })
            .Case([&](ReduceSumOp r) {
              constexpr OpKind K = OpKind::ReduceSum;
              setInts(PLAN_ATTR(K, Ints, "axes"), r.getAxes());
              setI(PLAN_ATTR(K, Int, "keepdims"), r.getKeepdims());
              return planKind(K);
            })
            .Case([&](GeluOp g) {
              constexpr OpKind K = OpKind::Gelu;
              if (g.getApproximate() != "none")
                setS(PLAN_ATTR(K, String, "approximate"), g.getApproximate());
              return planKind(K);
            })
            .Case([&](GeluGradOp g) {
              constexpr OpKind K = OpKind::GeluGrad;
              if (g.getApproximate() != "none")
                setS(PLAN_ATTR(K, String, "approximate"), g.getApproximate());
              return planKind(K);
            })
            .Case([&](ExpandOp e) {
              constexpr OpKind K = OpKind::Expand;
              setInts(PLAN_ATTR(K, Ints, "shape"), e.getType().getShape());
              return planKind(K);
            })
            .Case([&](SoftmaxCrossEntropyOp c) {
              constexpr OpKind K = OpKind::SoftmaxCrossEntropy;
              setI(PLAN_ATTR(K, Int, "ignore_index"), c.getIgnoreIndex());
              return planKind(K);
            })
            .Case([&](SoftmaxCrossEntropyGradOp c) {
              constexpr OpKind K = OpKind::SoftmaxCrossEntropyGrad;
              setI(PLAN_ATTR(K, Int, "ignore_index"), c.getIgnoreIndex());
              return planKind(K);
            })
            .Case([&](SoftmaxGradOp s) {
              constexpr OpKind K = OpKind::SoftmaxGrad;
              setI(PLAN_ATTR(K, Int, "axis"), s.getAxis());
              return planKind(K);
            })
            .Case([&](LayerNormGradOp l) {
              return setNorm(l, KindTag<OpKind::LayerNormalizationGrad>());
            })
            .Case([&](LayerNormScaleGradOp l) {
              return setNorm(l, KindTag<OpKind::LayerNormalizationScaleGrad>());
            })
            .Case([&](GatherGradOp g) {
              constexpr OpKind K = OpKind::GatherGrad;
              setI(PLAN_ATTR(K, Int, "axis"), 0);
              setShard(KindTag<K>(), g.getShardAxesAttr(), g.getShardSize());
              return planKind(K);
            })
            .Case([&](VocabMaxOp v) {
              constexpr OpKind K = OpKind::VocabMax;
              setShard(KindTag<K>(), v.getShardAxesAttr(), v.getShardSize());
              return planKind(K);
            })
            .Case([&](VocabStatsOp v) {
              constexpr OpKind K = OpKind::VocabStats;
              setShard(KindTag<K>(), v.getShardAxesAttr(), v.getShardSize());
              setI(PLAN_ATTR(K, Int, "ignore_index"), v.getIgnoreIndex());
              return planKind(K);
            })
            .Case([&](VocabCrossEntropyOp v) {
              constexpr OpKind K = OpKind::VocabCrossEntropy;
              setI(PLAN_ATTR(K, Int, "ignore_index"), v.getIgnoreIndex());
              return planKind(K);
            })
            .Case([&](VocabCrossEntropyGradOp v) {
              constexpr OpKind K = OpKind::VocabCrossEntropyGrad;
              setShard(KindTag<K>(), v.getShardAxesAttr(), v.getShardSize());
              setI(PLAN_ATTR(K, Int, "ignore_index"), v.getIgnoreIndex());
              return planKind(K);
            })
            .Case([&](AdamWOp a) {
              constexpr OpKind K = OpKind::AdamW;
              setF(PLAN_ATTR(K, Float, "beta1"),
                   a.getBeta1().convertToDouble());
              setF(PLAN_ATTR(K, Float, "beta2"),
                   a.getBeta2().convertToDouble());
              setF(PLAN_ATTR(K, Float, "eps"), a.getEps().convertToDouble());
              return setUpdate(KindTag<K>(), a);
            })
            .Case([&](SGDOp a) {
              constexpr OpKind K = OpKind::SGD;
              setF(PLAN_ATTR(K, Float, "momentum"),
                   a.getMomentum().convertToDouble());
              return setUpdate(KindTag<K>(), a);
            })
            .Case([&](AssignOp) { return planKind(OpKind::Assign); })
            .Case([&](AddLayerNormOp l) {
              constexpr OpKind K = OpKind::AddLayerNorm;
              setI(PLAN_ATTR(K, Int, "axis"), l.getAxis());
              setF(PLAN_ATTR(K, Float, "epsilon"),
                   l.getEpsilon().convertToDouble());
              return planKind(K);
            })
            .Case([&](AttentionOp a) {
              constexpr OpKind K = OpKind::Attention;
              setF(PLAN_ATTR(K, Float, "scale"),
                   a.getScale().convertToDouble());
              return planKind(K);
            })
            .Case([&](AttentionGradOp a) {
              constexpr OpKind K = OpKind::AttentionGrad;
              setF(PLAN_ATTR(K, Float, "scale"),
                   a.getScale().convertToDouble());
              return planKind(K);
            })
            .Case([&](AllReduceOp c) {
              constexpr OpKind K = OpKind::AllReduce;
              setStrs(PLAN_ATTR(K, Strings, "axes"), c.getAxes());
              if (c.getReduction() != "sum")
                setS(PLAN_ATTR(K, String, "reduction"), c.getReduction());
              return planKind(K);
            })
            .Case([&](AllGatherOp c) {
              constexpr OpKind K = OpKind::AllGather;
              setI(PLAN_ATTR(K, Int, "dim"), c.getDim());
              setStrs(PLAN_ATTR(K, Strings, "axes"), c.getAxes());
              return planKind(K);
            })
            .Case([&](ReduceScatterOp c) {
              constexpr OpKind K = OpKind::ReduceScatter;
              setI(PLAN_ATTR(K, Int, "dim"), c.getDim());
              setStrs(PLAN_ATTR(K, Strings, "axes"), c.getAxes());
              return planKind(K);
            })
            .Case([&](LocalSliceOp c) {
              constexpr OpKind K = OpKind::LocalSlice;
              setI(PLAN_ATTR(K, Int, "dim"), c.getDim());
              setStrs(PLAN_ATTR(K, Strings, "axes"), c.getAxes());
              return planKind(K);
            })
            .Case([&](AllToAllOp c) {
              constexpr OpKind K = OpKind::AllToAll;
              setI(PLAN_ATTR(K, Int, "split_dim"), c.getSplitDim());
              setI(PLAN_ATTR(K, Int, "concat_dim"), c.getConcatDim());
              setStrs(PLAN_ATTR(K, Strings, "axes"), c.getAxes());
              return planKind(K);
            })
            .Case([&](SendOp s) {
              constexpr OpKind K = OpKind::Send;
              fillTransfer(out->mutable_transfer(), s.getId(), s.getInput(),
                           s.getFrom(), s.getFrom(), s.getTo());
              if (s->hasAttr(ShoalDialect::kLastMicroBatchAttr))
                setI(PLAN_ATTR(K, Int, "last_micro_batch"), 1);
              return planKind(K);
            })
            .Case([&](RecvOp r) {
              constexpr OpKind K = OpKind::Recv;
              fillTransfer(out->mutable_transfer(), r.getId(), r.getResult(),
                           r.getTo(), r.getFrom(), r.getTo());
              if (r->hasAttr(ShoalDialect::kLastMicroBatchAttr))
                setI(PLAN_ATTR(K, Int, "last_micro_batch"), 1);
              return planKind(K);
            })
            .Default([](Operation *) { return ""; });
    if (kind.empty())
      return op->emitError()
             << "'" << op->getName() << "' has no executable form in the plan";
    if (failed(checkAttrs(op, kind, *out)))
      return failure();
    out->set_kind(kind.str());
    for (Value v : op->getOperands())
      out->add_inputs(idOf(v));
    for (Value v : op->getResults())
      out->add_outputs(idOf(v));
    if (auto loc = dyn_cast<NameLoc>(op->getLoc()))
      out->set_name(planText(loc.getName().getValue()));
    out->set_task_graph(planText(taskGraph));
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      out->set_flops(cost.getFlops());
      out->set_bytes(cost.getBytes());
    }
    return success();
  }
};

} // namespace

LogicalResult shoal::exportPlan(ModuleOp module, raw_ostream &os,
                                StringRef planDir) {
  return PlanWriter(module).write(os, planDir, /*text=*/false);
}

LogicalResult shoal::exportPlanAsText(ModuleOp module, raw_ostream &os) {
  return PlanWriter(module).write(os, /*planDir=*/"", /*text=*/true);
}
