//===- ReportText.cpp - The parallelism report as text ----------*- C++ -*-===//
//
// shoal-report's text form: one section per TaskGraph (its devices, every
// collective with its reason and bytes, its transfers, a summary and its
// warnings), the bridges and the totals (docs/Report.md).
//
//===----------------------------------------------------------------------===//

#include "ReportInternal.h"

#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace shoal;
using namespace shoal::report;

namespace {

std::string formatCounts(ArrayRef<std::pair<std::string, int64_t>> counts) {
  std::string s;
  for (auto &[name, n] : counts)
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  return s;
}

} // namespace

void ReportBuilder::printText(raw_ostream &os) {
  int64_t world = 0;
  for (TaskGraphInfo &info : graphs)
    for (int64_t r : info.ranks)
      world = std::max(world, r + 1);
  os << "shoal parallelism report: " << graphs.size()
     << (graphs.size() == 1 ? " TaskGraph" : " TaskGraphs") << " on " << world
     << (world == 1 ? " rank" : " ranks");
  if (!stages.empty() || micro > 1) {
    size_t numStages = std::max<size_t>(1, stages.size());
    os << "; pipeline of " << numStages
       << (numStages == 1 ? " stage, " : " stages, ") << micro
       << (micro == 1 ? " micro-batch" : " micro-batches");
    if (auto k =
            module->getAttrOfType<StringAttr>(ShoalDialect::kScheduleKindAttr))
      os << ", " << k.getValue() << " schedule";
  }
  os << "\n";
  // Float initializers that shoal-autodiff found no gradient reaching: a
  // buffer exported as an initializer, or a weight cut off from the loss.
  if (auto training =
          module->getAttrOfType<DictionaryAttr>(ShoalDialect::kTrainingAttr))
    if (auto names = training.getAs<ArrayAttr>("untrained");
        names && !names.empty()) {
      os << "not trained (no gradient reaches them): ";
      llvm::interleaveComma(names.getAsValueRange<StringAttr>(), os,
                            [&](StringRef n) { os << "'" << n << "'"; });
      os << "\n";
    }
  // What a training import restored of an eval-mode export, and what it
  // could not tell (docs/Importer.md, "Training imports").
  if (auto restored =
          module->getAttrOfType<DictionaryAttr>(ShoalDialect::kRestoredAttr)) {
    auto list = [&](StringRef key) {
      auto a = restored.getAs<ArrayAttr>(key);
      return a ? a : ArrayAttr::get(module.getContext(), {});
    };
    os << "restored parameters: " << list("copies").size()
       << " read through Identity nodes, " << list("ties").size()
       << " tied weights folded into copies";
    for (StringRef tie : list("ties").getAsValueRange<StringAttr>())
      os << "; " << tie;
    os << "\n";
  }
  SmallVector<StringRef> importWarnings;
  if (auto warnings =
          module->getAttrOfType<ArrayAttr>(ShoalDialect::kImportWarningsAttr))
    for (StringRef w : warnings.getAsValueRange<StringAttr>()) {
      os << "warning: import: " << w << "\n";
      importWarnings.push_back(w);
    }
  if (graphs.empty()) {
    os << "no TaskGraphs: run shoal-form-taskgraphs and shoal-partition "
          "first\n";
    return;
  }

  int64_t totalWarnings = importWarnings.size();
  llvm::StringMap<int64_t> totals;
  for (TaskGraphInfo &info : graphs) {
    TaskGraphOp tg = info.tg;
    os << "\nTaskGraph \"" << tg.getSymName()
       << "\": " << stringifyStrategy(tg.getStrategy()) << "("
       << tg.getDevices() << ")";
    if (auto s = tg->getAttrOfType<IntegerAttr>(ShoalDialect::kStageAttr))
      os << ", stage " << s.getInt();
    if (MeshAttr mesh = tg.getMeshAttr())
      os << ", mesh " << formatMesh(tg);
    os << ", ranks " << formatRanks(info.ranks) << "\n";
    if (!info.inputs.empty())
      os << "  inputs: " << info.inputs << "\n";
    for (TransferInfo &t : info.recvs)
      os << "  " << t.text << "\n";
    for (CollectiveInfo &c : info.collectives) {
      os << "  " << c.kind;
      if (!c.dims.empty())
        os << " " << c.dims;
      os << " over " << c.axes;
      if (!c.node.empty())
        os << " at " << c.node;
      if (!c.phase.empty())
        os << " (" << c.phase << ")";
      os << ": " << c.reason << "\n";
      os << "      " << c.shapes << ", ";
      if (isa<LocalSliceOp>(c.op))
        os << "no communication\n";
      else
        os << formatBytes(c.bytes) << " per rank\n";
    }
    for (TransferInfo &t : info.sends)
      os << "  " << t.text << "\n";

    // Summary: counts and bytes by kind, in a fixed order.
    SmallVector<std::pair<std::string, int64_t>> counts;
    int64_t bytes = 0;
    for (StringRef kind :
         {"all_reduce", "all_gather", "all_to_all", "local_slice"}) {
      int64_t n = 0, b = 0;
      for (CollectiveInfo &c : info.collectives)
        if (c.kind == kind) {
          ++n;
          b += c.bytes;
        }
      if (!n)
        continue;
      std::string name = kind.str();
      if (kind != "local_slice")
        name += " (" + formatBytes(b) + ")";
      counts.push_back({name, n});
      bytes += b;
      totals[kind] += n;
    }
    for (auto [list, kind] :
         {std::pair{&info.sends, "send"}, std::pair{&info.recvs, "recv"}}) {
      if (list->empty())
        continue;
      int64_t b = 0;
      for (TransferInfo &t : *list)
        b += t.bytes;
      counts.push_back({std::string(kind) + " (" + formatBytes(b) + ")",
                        (int64_t)list->size()});
      bytes += b;
      totals[kind] += list->size();
    }
    os << "  summary: ";
    if (counts.empty())
      os << "no communication";
    else
      os << formatCounts(counts) << "; " << formatBytes(bytes) << " per rank"
         << (getMicroBatches(tg.getMeshAttr()) > 1 ? " per micro-batch" : "");
    os << "\n";
    for (std::string &w : info.warnings)
      os << "  warning: TaskGraph \"" << tg.getSymName() << "\": " << w << "\n";
    for (std::string &n : info.notes)
      os << "  note: TaskGraph \"" << tg.getSymName() << "\": " << n << "\n";
    totalWarnings += info.warnings.size();
  }

  if (!bridges.empty()) {
    os << "\nbridges:\n";
    for (std::string &b : bridges)
      os << "  " << b << "\n";
  }

  SmallVector<std::pair<std::string, int64_t>> counts;
  for (StringRef kind : {"all_reduce", "all_gather", "all_to_all",
                         "local_slice", "send", "recv"})
    if (int64_t n = totals.lookup(kind))
      counts.push_back({kind.str(), n});
  if (!bridges.empty())
    counts.push_back({"bridge", (int64_t)bridges.size()});
  os << "\ntotal: "
     << (counts.empty() ? "no communication" : formatCounts(counts)) << "; "
     << totalWarnings << (totalWarnings == 1 ? " warning" : " warnings")
     << "\n";
}
