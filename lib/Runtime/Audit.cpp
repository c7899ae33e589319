//===- Audit.cpp - Where a plan's ops would run --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Audit.h"

#include "BackendRegistry.h"
#include "MemoryPlan.h"
#include "PlanLoader.h"
#include "shoal/Support/Files.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <climits>
#include <set>

using namespace shoal;
using namespace shoal::rt;

namespace {

OperandDesc descOf(const LoadedPlan &plan, int v) {
  if (v < 0 || v >= static_cast<int>(plan.values.size()))
    return {};
  const TensorType &t = plan.values[v];
  return {true, t.dtype, t.shape};
}

} // namespace

void shoal::rt::auditProgram(const LoadedPlan &plan, BackendKind backend,
                             bool deviceComm, PlanAudit &out) {
  registerBackendKernels(kReferenceBackend);
  registerBackendKernels(backend);
  const bool host = backend == BackendKind::CPU;
  MemoryPlan memory = planMemory(plan);
  auto add = [&](const OpInfo &op, const std::string &where) {
    ++out.ops[{op.kindName, where}];
  };
  auto staged = [&](const OpInfo &op, const std::string &why) {
    add(op, "host-staged: " + why);
    ++out.hostStaged;
  };
  const UpdateKernels &updates = findUpdateKernels(backend);
  for (const OpInfo &op : plan.ops) {
    if (op.has(kOptimizer)) {
      // The executor's update (Updates.cpp): the backend's update kernel,
      // else the reference one on host copies.
      bool sgd = op.kind == OpKind::SGD;
      bool has = sgd ? updates.sgd != nullptr : updates.adamw != nullptr;
      if (has || host) {
        add(op, "device");
      } else {
        add(op, fmt::format("host: no {} update kernel", op.kindName));
        ++out.hostFallbacks;
      }
      // ZeRO-1/2: the updated block is gathered into the whole weight
      // (Executor::gatherZeroWeight: device buffers under NCCL, else host
      // tensors).
      if (!op.attrs.zeroAxes.empty() && !host) {
        if (deviceComm) {
          ++out.ops[{"ZeRO weight gather", "device collective"}];
        } else {
          ++out.ops[{"ZeRO weight gather",
                     "host-staged: gathered on the host"}];
          ++out.hostStaged;
        }
      }
      continue;
    }
    if (op.has(kTransfer)) {
      // Send and Recv go through host buffers on the world communicator.
      if (host)
        add(op, "host communicator");
      else
        staged(op, "sent from host buffers");
      continue;
    }
    if (op.has(kCommunicates) || op.kind == OpKind::ReduceScatter) {
      if (host) {
        add(op, "host communicator");
      } else if (deviceComm && (op.kind == OpKind::AllReduce ||
                                op.kind == OpKind::ReduceScatter ||
                                op.kind == OpKind::AllToAll ||
                                (op.kind == OpKind::AllGather &&
                                 op.attrs.gatherBlocks.empty()))) {
        // (Executor::collective and reduceScatter: device buffers, blocks
        // packed and reordered on the device.)
        add(op, "device collective");
      } else if (op.kind == OpKind::AllReduce) {
        staged(op, "a host communicator");
      } else {
        staged(op, "runs on host tensors");
      }
      continue;
    }
    std::vector<OperandDesc> in, outs;
    for (int v : op.inputs)
      in.push_back(descOf(plan, v));
    // (An aliasing op's kernel gets no output buffer: it sets the output.)
    for (int v : op.outputs)
      outs.push_back(aliasesInput(op) ? OperandDesc{} : descOf(plan, v));
    bool addInto = op.index < static_cast<int>(memory.accumulatesInto.size()) &&
                   memory.accumulatesInto[op.index] >= 0;
    std::string why = kernelWhyNot(backend, op, in, outs, addInto);
    // (A product that sums itself over micro-batches writes the first one.)
    if (why.empty() && addInto)
      why = kernelWhyNot(backend, op, in, outs, false);
    if (why.empty()) {
      std::string label = kernelLabel(backend, op, in, outs);
      add(op, label.empty() ? "device" : "device: " + label);
    } else {
      add(op, "host: " + why);
      ++out.hostFallbacks;
    }
  }
  if (!host && plan.training.clipping && !updates.sumOfSquares) {
    ++out.ops[{"clip norm", "host: no sumOfSquares update kernel"}];
    ++out.hostFallbacks;
  }
  ++out.programs;
}

PlanAudit shoal::rt::auditPlanFile(const std::string &path, BackendKind backend,
                                   bool deviceComm) {
  std::string bytes;
  if (std::string e = readRegularFile(path, bytes, INT32_MAX); !e.empty())
    throw Error(fmt::format("cannot read plan {}: {}", path, e));
  plan::Plan proto;
  if (!proto.ParseFromString(bytes))
    throw Error(fmt::format("plan {} is not a valid shoal plan (it does not "
                            "parse as a shoal.plan.Plan message)",
                            path));
  // The world: the mesh's axes but the micro-batches'.
  int64_t world = 1;
  for (const plan::MeshAxis &a : proto.mesh().axes())
    if (a.name() != "mb")
      world *= std::max<int64_t>(1, a.size());
  PlanAudit audit;
  std::vector<bool> covered(static_cast<std::size_t>(world), false);
  for (int64_t rank = 0; rank < world; ++rank) {
    if (covered[rank])
      continue;
    LoadedPlan loaded = checkPlan(proto, path, world, rank);
    for (int64_t r : loaded.programRanks)
      if (r >= 0 && r < world)
        covered[r] = true;
    covered[rank] = true;
    auditProgram(loaded, backend, deviceComm, audit);
  }
  if (backend != BackendKind::CPU) {
    if (audit.hostFallbacks)
      audit.notCapturable.push_back(
          fmt::format("{} ops run on the CPU", audit.hostFallbacks));
    if (audit.hostStaged)
      audit.notCapturable.push_back(
          fmt::format("{} collectives or transfers go through host buffers",
                      audit.hostStaged));
    audit.notCapturable.push_back(
        "the CUDA engine does not capture graphs yet");
  }
  return audit;
}

std::string shoal::rt::formatAudit(const PlanAudit &audit,
                                   const std::string &backend,
                                   const std::string &comm) {
  std::string s = fmt::format(
      "shoal-run --audit: --backend {}{}: {} program{} (one rank of each)\n",
      backend, comm.empty() ? "" : " --comm " + comm, audit.programs,
      audit.programs == 1 ? "" : "s");
  s += "| op | runs | ops |\n| --- | --- | ---: |\n";
  for (const auto &[key, count] : audit.ops)
    s += fmt::format("| {} | {} | {} |\n", key.first, key.second, count);
  s += fmt::format("host fallbacks: {}; host-staged collectives and "
                   "transfers: {}\n",
                   audit.hostFallbacks, audit.hostStaged);
  if (backend != "cpu")
    s += audit.notCapturable.empty()
             ? std::string("CUDA graph: the step could be captured\n")
             : fmt::format("CUDA graph: no ({})\n",
                           fmt::join(audit.notCapturable, "; "));
  return s;
}
