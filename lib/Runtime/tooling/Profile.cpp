//===- Profile.cpp - Measured op and communication times --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Each rank turns its own ops and collectives into JSON text (medians over
// the timed steps); world rank 0 gathers those, and the raw Send/Recv times
// of every step, which only it can pair: a transfer's time is from the later
// of the Send's and the Recv's start to the arrival of its last message, so
// that time spent waiting for a sender that is still computing does not
// count. Step-relative times of different ranks are comparable because each
// step starts after a barrier.
//
//===----------------------------------------------------------------------===//

#include "tooling/Profile.h"

#include "shoal/Support/Files.h"

#include "Executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <set>
#include <tuple>

using namespace shoal::rt;

double shoal::rt::median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double upper = v[mid];
  if (v.size() % 2)
    return upper;
  double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

void ProfileRecorder::addStep(const StepProfile &profile, double seconds) {
  int step = static_cast<int>(stepSeconds.size());
  for (const OpTime &t : profile.ops)
    opSeconds[{t.op, t.microBatch}].push_back(t.seconds);
  for (const TransferTime &t : profile.transfers)
    transfers.push_back({step, t});
  stepSeconds.push_back(seconds);
}

namespace {

/// Kinds the planner's simulator times as matrix products; their records
/// carry the rows of the product (the result's elements over its last
/// dimension), as the simulator computes them.
bool isMatMulClass(OpKind k) {
  return k == OpKind::MatMul || k == OpKind::Gemm || k == OpKind::Attention ||
         k == OpKind::Conv;
}

std::string number(double v) { return fmt::format("{:.9g}", v); }

} // namespace

void ProfileRecorder::write(const std::string &path, const ProfileRunInfo &info,
                            Communicator &world) const {
  int rank = world.rank(), size = world.size();
  std::vector<int> node = nodeOfRanks(world);

  // This rank's ops and collectives.
  std::vector<std::string> ops, collectives;
  std::vector<int64_t> coords = plan.mesh.coordsOf(plan.meshRank);
  for (const auto &entry : opSeconds) {
    const OpInfo &op = plan.ops.at(entry.first.first);
    int mb = entry.first.second;
    double seconds = median(entry.second);
    std::string rows;
    if (isMatMulClass(op.kind) && !op.outputs.empty() && op.outputs[0] >= 0) {
      const Shape &shape = plan.values[op.outputs[0]].shape;
      double m = 1;
      for (std::size_t d = 0; d + 1 < shape.size(); ++d)
        m *= static_cast<double>(shape[d]);
      rows = fmt::format(", \"rows\": {:.0f}", m);
    }
    const TaskInfo &task = plan.tasks[op.task];
    ops.push_back(fmt::format(
        "{{\"op\": {}, \"name\": {}, \"kind\": {}, \"task\": {}, "
        "\"micro_batch\": {}, \"flops\": {:.0f}, \"bytes\": {:.0f}{}, "
        "\"seconds\": {}}}",
        op.index, jsonString(op.name), jsonString(op.kindName),
        jsonString(task.name), mb, op.flops, op.bytes, rows, number(seconds)));
    if (op.kind != OpKind::AllReduce && op.kind != OpKind::AllGather &&
        op.kind != OpKind::AllToAll)
      continue;
    // Bytes per rank as the cost model counts them: an all-gather's
    // result, the input of the others.
    int value = op.kind == OpKind::AllGather ? op.outputs[0] : op.inputs[0];
    TensorType type = plan.values[value];
    double bytes = static_cast<double>(numElements(type.shape)) *
                   static_cast<double>(dtypeSize(type.dtype));
    int64_t color = plan.mesh.groupColor(op.attrs.meshAxes, coords);
    std::set<int> nodes;
    int groupSize = 0;
    for (int64_t r = 0; r < plan.mesh.worldSize(); ++r)
      if (plan.mesh.groupColor(op.attrs.meshAxes, plan.mesh.coordsOf(r)) ==
          color) {
        ++groupSize;
        nodes.insert(node.at(plan.programRanks.at(r)));
      }
    collectives.push_back(fmt::format(
        "{{\"op\": {}, \"kind\": {}, \"micro_batch\": {}, \"bytes\": {:.0f}, "
        "\"group_size\": {}, \"group_nodes\": {}, \"seconds\": {}}}",
        op.index, jsonString(op.kindName), mb, bytes, groupSize, nodes.size(),
        number(seconds)));
  }
  std::string copy =
      copyRate > 0 ? fmt::format(", \"copy_GBps\": {}", number(copyRate / 1e9))
                   : std::string();
  std::string mine = fmt::format(
      "    {{\"rank\": {}, \"node\": {}, \"program\": {}, \"role\": {}, "
      "\"stage\": {}, \"device\": {}{},\n     \"ops\": [{}],\n     "
      "\"collectives\": [{}]}}",
      rank, node[rank], plan.program, jsonString(plan.role), plan.stage,
      jsonString(info.deviceType), copy,
      ops.empty() ? ""
                  : "\n      " + fmt::format("{}", fmt::join(ops, ",\n      ")),
      collectives.empty()
          ? ""
          : "\n      " +
                fmt::format("{}", fmt::join(collectives, ",\n      ")));
  std::vector<std::string> parts = gatherText(mine, world, "profile");

  // Raw Send/Recv times: [send, transfer, micro-batch, step, rank, start,
  // end, bytes, number of peers, peers...] per record.
  std::vector<double> raw;
  for (const auto &entry : transfers) {
    const TransferTime &t = entry.second;
    raw.insert(raw.end(),
               {t.send ? 1.0 : 0.0, double(t.transfer), double(t.microBatch),
                double(entry.first), double(rank), t.startUs, t.endUs,
                double(t.bytes), double(t.peers.size())});
    for (int64_t p : t.peers)
      raw.push_back(static_cast<double>(p));
  }
  std::string packed(raw.size() * sizeof(double), '\0');
  if (!raw.empty())
    std::memcpy(packed.data(), raw.data(), packed.size());
  std::vector<std::string> gathered = gatherText(packed, world, "profile");
  std::vector<double> all;
  for (const std::string &part : gathered) {
    std::size_t n = part.size() / sizeof(double);
    all.resize(all.size() + n);
    if (n)
      std::memcpy(all.data() + all.size() - n, part.data(), part.size());
  }
  if (rank != 0)
    return;

  struct Raw {
    bool send;
    int transfer, mb, step, rank;
    double start, end, bytes;
    std::vector<int> peers;
  };
  std::vector<Raw> records;
  for (std::size_t i = 0; i < all.size();) {
    Raw r{all[i] != 0,     int(all[i + 1]), int(all[i + 2]),
          int(all[i + 3]), int(all[i + 4]), all[i + 5],
          all[i + 6],      all[i + 7],      {}};
    int n = static_cast<int>(all[i + 8]);
    for (int k = 0; k < n; ++k)
      r.peers.push_back(static_cast<int>(all[i + 9 + k]));
    i += 9 + n;
    records.push_back(std::move(r));
  }
  // (transfer, micro-batch, destination) -> seconds per step.
  struct Pair {
    std::vector<int> sources;
    double bytes = 0;
    std::vector<double> seconds;
  };
  std::map<std::tuple<int, int, int>, Pair> pairs;
  for (const Raw &recv : records) {
    if (recv.send)
      continue;
    double sendStart = -1e300;
    for (const Raw &send : records)
      if (send.send && send.transfer == recv.transfer && send.mb == recv.mb &&
          send.step == recv.step &&
          std::count(recv.peers.begin(), recv.peers.end(), send.rank) &&
          std::count(send.peers.begin(), send.peers.end(), recv.rank))
        sendStart = std::max(sendStart, send.start);
    double begin = std::max(recv.start, sendStart);
    Pair &p = pairs[{recv.transfer, recv.mb, recv.rank}];
    p.sources = recv.peers;
    p.bytes = recv.bytes;
    p.seconds.push_back(std::max(0.0, recv.end - begin) * 1e-6);
  }
  std::vector<std::string> transferText;
  for (const auto &entry : pairs) {
    auto [transfer, mb, dst] = entry.first;
    const Pair &p = entry.second;
    std::set<int> nodes{node.at(dst)};
    for (int s : p.sources)
      nodes.insert(node.at(s));
    transferText.push_back(fmt::format(
        "{{\"transfer\": {}, \"micro_batch\": {}, \"src\": [{}], \"dst\": {}, "
        "\"bytes\": {:.0f}, \"nodes\": {}, \"seconds\": {}}}",
        transfer, mb, fmt::join(p.sources, ", "), dst, p.bytes, nodes.size(),
        number(median(p.seconds))));
  }

  std::string text = fmt::format(
      "{{\n  \"format\": \"shoal-profile\",\n  \"version\": 1,\n"
      "  \"plan\": {},\n  \"device\": {},\n  \"device_name\": {},\n"
      "  \"precision\": {},\n  \"world_size\": {},\n  \"nodes\": {},\n"
      "  \"steps\": {},\n  \"warmup\": {},\n  \"step_seconds\": {},\n"
      "  \"ranks\": [\n{}\n  ],\n  \"transfers\": [{}]\n}}\n",
      jsonString(info.planPath), jsonString(info.deviceType),
      jsonString(info.deviceName), jsonString(info.precision), size,
      *std::max_element(node.begin(), node.end()) + 1, info.steps, info.warmup,
      number(median(stepSeconds)), fmt::join(parts, ",\n"),
      transferText.empty()
          ? ""
          : "\n    " + fmt::format("{}", fmt::join(transferText, ",\n    ")) +
                "\n  ");
  if (std::string e = shoal::writeFileAtomically(path, text); !e.empty())
    throw Error(fmt::format("cannot write the profile {}", e));
}

double shoal::rt::measureCopyBandwidth(Device &device, std::size_t bytes) {
  TensorType type{DType::F32, {static_cast<int64_t>(bytes / 4)}};
  Tensor src = device.allocate(type), dst = device.allocate(type);
  device.zero(src);
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    device.synchronize();
    auto start = std::chrono::steady_clock::now();
    device.copy(src, dst);
    device.synchronize();
    double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    // The first copy warms up (page faults, caches).
    if (i > 0 && s > 0)
      best = std::max(best, 2.0 * static_cast<double>(type.numBytes()) / s);
  }
  return best;
}
