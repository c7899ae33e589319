//===- ReportDot.cpp - The parallelism report as a picture ------*- C++ -*-===//
//
// shoal-report's Graphviz form: TaskGraphs as nodes clustered by their
// ranks, with their collectives and warnings in their labels; edges for
// the values between them, the graph's inputs and its outputs.
//
//===----------------------------------------------------------------------===//

#include "ReportInternal.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace shoal;
using namespace shoal::report;

namespace {

/// A string in a dot label: quotes and backslashes escaped, but `\n`
/// (written as the two characters) kept as dot's line break.
std::string escapeDot(StringRef s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    if (ch == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      out += "\\n";
      ++i;
    } else if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return out;
}

} // namespace

void ReportBuilder::printDot(raw_ostream &os) {
  os << "digraph shoal {\n"
        "  rankdir=LR;\n"
        "  graph [fontname=\"Helvetica\", fontsize=11];\n"
        "  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n"
        "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  for (auto &[id, label] : graphInputs)
    os << "  " << id << " [shape=ellipse, label=\"" << escapeDot(label)
       << "\"];\n";
  for (auto &[id, label] : graphOutputs)
    os << "  " << id << " [shape=ellipse, label=\"" << escapeDot(label)
       << "\"];\n";

  // One cluster per device group: TaskGraphs on the same ranks.
  SmallVector<std::pair<std::string, SmallVector<TaskGraphInfo *>>> groups;
  for (TaskGraphInfo &info : graphs) {
    std::string key = formatRanks(info.ranks);
    auto it = llvm::find_if(groups, [&](auto &g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, {}});
      it = std::prev(groups.end());
    }
    it->second.push_back(&info);
  }
  for (auto [g, group] : llvm::enumerate(groups)) {
    os << "  subgraph cluster_" << g << " {\n"
       << "    label=\"ranks " << escapeDot(group.first) << "\";\n"
       << "    style=rounded;\n";
    for (TaskGraphInfo *info : group.second) {
      TaskGraphOp tg = info->tg;
      std::string label = tg.getSymName().str() + "\\n" +
                          stringifyStrategy(tg.getStrategy()).str() + "(" +
                          std::to_string(tg.getDevices()) + ")";
      if (auto s = tg->getAttrOfType<IntegerAttr>(ShoalDialect::kStageAttr))
        label += ", stage " + std::to_string(s.getInt());
      if (MeshAttr mesh = tg.getMeshAttr())
        label += "\\nmesh " + formatMesh(tg);
      label += "\\nranks " + formatRanks(info->ranks);
      for (StringRef kind :
           {"all_reduce", "all_gather", "all_to_all", "local_slice"}) {
        int64_t n = 0, b = 0;
        for (CollectiveInfo &c : info->collectives)
          if (c.kind == kind) {
            ++n;
            b += c.bytes;
          }
        if (!n)
          continue;
        label += "\\n" + std::to_string(n) + " " + kind.str();
        if (kind != "local_slice")
          label += " (" + formatBytes(b) + ")";
      }
      if (!info->warnings.empty())
        label += "\\n" + std::to_string(info->warnings.size()) +
                 (info->warnings.size() == 1 ? " warning" : " warnings");
      os << "    " << nodeId(tg) << " [label=\"" << escapeDot(label) << "\"";
      if (!info->warnings.empty())
        os << ", color=orange, penwidth=2";
      os << "];\n";
    }
    os << "  }\n";
  }
  for (Edge &e : edges) {
    os << "  " << e.from << " -> " << e.to;
    SmallVector<std::string> attrs;
    if (!e.label.empty())
      attrs.push_back("label=\"" + escapeDot(e.label) + "\"");
    if (!e.style.empty())
      attrs.push_back("style=" + e.style);
    if (!attrs.empty())
      os << " [" << llvm::join(attrs, ", ") << "]";
    os << ";\n";
  }
  os << "}\n";
}
