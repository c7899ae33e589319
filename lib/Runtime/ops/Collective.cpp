//===- Collective.cpp - Type rules: collectives and transfers ---*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

#include <algorithm>

#include <set>

using namespace shoal;
using namespace shoal::rt;

void shoal::rt::readMeshAxes(const AttrReader &attrs, const Mesh &mesh,
                             const char *key, std::vector<int> &axes,
                             int64_t &groupSize, bool allowMicroBatch) {
  attrs.require(key);
  std::set<int> seen;
  for (const std::string &name : attrs.getStrings(key)) {
    int a = mesh.findAxis(name);
    if (a < 0)
      throw Error(fmt::format("mesh axis '{}' is not in the mesh ({})", name,
                              mesh.str()));
    if (!seen.insert(a).second)
      throw Error(fmt::format("mesh axis '{}' is listed twice", name));
    if (a == mesh.microBatchAxis() && !allowMicroBatch)
      throw Error(fmt::format("runs over the micro-batch axis '{}'; "
                              "collectives never run over micro-batches",
                              name));
    axes.push_back(a);
  }
  groupSize = mesh.numBlocks(axes);
}

namespace {

/// Reads and checks a collective's mesh axes. Only LocalSlice (no
/// communication: it keeps this micro-batch's block), AllReduce and
/// ReduceScatter (accumulation over the step's micro-batches) may name the
/// micro-batch axis.
void readCollectiveAxes(const AttrReader &attrs, const Mesh &mesh, OpAttrs &out,
                        bool allowMicroBatch = false) {
  shoal::rt::readMeshAxes(attrs, mesh, "axes", out.meshAxes, out.groupSize,
                          allowMicroBatch);
}

} // namespace

/// AllReduce.
void shoal::rt::allReduceRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  // Over "mb": gradient accumulation (the executor sums the micro-batches
  // of a step, then reduces over the other axes; docs/Training.md).
  readCollectiveAxes(ctx.attrs, ctx.mesh, a, /*allowMicroBatch=*/true);
  if (!isNumeric(x.dtype))
    throw Error(fmt::format("AllReduce is not supported on {} tensors",
                            dtypeName(x.dtype)));
  std::string reduction = ctx.attrs.getString("reduction", "sum");
  if (reduction != "sum" && reduction != "max")
    throw Error(fmt::format("reduction '{}' is not sum or max", reduction));
  a.reduceMax = reduction == "max";
  if (a.reduceMax && std::find(a.meshAxes.begin(), a.meshAxes.end(),
                               ctx.mesh.microBatchAxis()) != a.meshAxes.end())
    throw Error("a max runs over the micro-batch axis; only sums accumulate "
                "over micro-batches");
  ctx.expected.push_back(x);
}

bool shoal::rt::readVocabShard(TypeRuleContext &ctx, int64_t local,
                               bool required) {
  OpAttrs &a = ctx.a();
  bool has = ctx.attrs.has("shard_axes") || ctx.attrs.has("shard_size");
  if (!has && !required)
    return false;
  ctx.attrs.require("shard_size");
  readMeshAxes(ctx.attrs, ctx.mesh, "shard_axes", a.meshAxes, a.groupSize,
               /*allowMicroBatch=*/false);
  if (a.meshAxes.empty())
    throw Error("shard_axes names no mesh axis");
  a.shardSize = ctx.attrs.getInt("shard_size", 0);
  if (a.shardSize < 1)
    throw Error(fmt::format("shard_size must be >= 1, got {}", a.shardSize));
  int64_t block = (a.shardSize + a.groupSize - 1) / a.groupSize;
  if (local != block)
    throw Error(fmt::format("a block of {} rows (classes) is not one of the "
                            "{} blocks of {} over shard_axes (each {})",
                            local, a.groupSize, a.shardSize, block));
  return true;
}

/// AllGather, LocalSlice.
void shoal::rt::gatherSliceRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("dim");
  readCollectiveAxes(ctx.attrs, ctx.mesh, a, ctx.kind() == OpKind::LocalSlice);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  a.dim = normalizeAxis(ctx.attrs.getInt("dim", 0), rank, "dim");
  Shape shape = x.shape;
  if (ctx.kind() == OpKind::AllGather && ctx.attrs.has("uneven_blocks")) {
    // Set by the plan loader for a value with uneven blocks.
    a.gatherBlocks = ctx.attrs.getInts("uneven_blocks");
    if (static_cast<int64_t>(a.gatherBlocks.size()) != a.groupSize)
      throw Error(fmt::format("uneven_blocks has {} blocks for a group of {}",
                              a.gatherBlocks.size(), a.groupSize));
    shape[a.dim] = 0;
    for (int64_t b : a.gatherBlocks)
      shape[a.dim] += b;
  } else if (ctx.kind() == OpKind::AllGather) {
    shape[a.dim] *= a.groupSize;
  } else {
    // Uneven: ceil-sized blocks, the last ones zero-padded.
    shape[a.dim] = (shape[a.dim] + a.groupSize - 1) / a.groupSize;
  }
  ctx.expected.push_back({x.dtype, shape});
}

/// ReduceScatter: along any dimension (ceil-sized blocks, like LocalSlice).
void shoal::rt::reduceScatterRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("dim");
  readCollectiveAxes(ctx.attrs, ctx.mesh, a, /*allowMicroBatch=*/true);
  if (!isNumeric(x.dtype))
    throw Error(fmt::format("ReduceScatter is not supported on {} tensors",
                            dtypeName(x.dtype)));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0)
    throw Error("ReduceScatter needs a tensor of rank >= 1");
  a.dim = normalizeAxis(ctx.attrs.getInt("dim", 0), rank, "dim");
  // The group size without the micro-batch axis.
  std::vector<int> devices;
  for (int axis : a.meshAxes)
    if (axis != ctx.mesh.microBatchAxis())
      devices.push_back(axis);
  if (devices.empty())
    throw Error("ReduceScatter needs a device axis besides the micro-batches");
  int64_t n = ctx.mesh.numBlocks(devices);
  Shape shape = x.shape;
  shape[a.dim] = (shape[a.dim] + n - 1) / n;
  ctx.expected.push_back({x.dtype, shape});
}

/// AllToAll.
void shoal::rt::allToAllRule(TypeRuleContext &ctx) {
  const TensorType &x = ctx.x();
  OpAttrs &a = ctx.a();
  ctx.attrs.require("split_dim");
  ctx.attrs.require("concat_dim");
  readCollectiveAxes(ctx.attrs, ctx.mesh, a);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  a.dim = normalizeAxis(ctx.attrs.getInt("split_dim", 0), rank, "split_dim");
  a.concatDim =
      normalizeAxis(ctx.attrs.getInt("concat_dim", 0), rank, "concat_dim");
  if (a.dim == a.concatDim)
    throw Error(fmt::format("split_dim and concat_dim are both {}", a.dim));
  Shape shape = x.shape;
  if (shape[a.dim] % a.groupSize != 0)
    throw Error(fmt::format("dimension {} of size {} does not split into {} "
                            "blocks",
                            a.dim, shape[a.dim], a.groupSize));
  shape[a.dim] /= a.groupSize;
  shape[a.concatDim] *= a.groupSize;
  ctx.expected.push_back({x.dtype, shape});
}

/// Send, Recv: only checked for having a transfer. Their types depend on
/// the rank, which the plan loader knows: it checks them against the
/// transfer.
void shoal::rt::transferRule(TypeRuleContext &ctx) {
  if (!ctx.op.has_transfer())
    throw Error(fmt::format("a {} needs a transfer (Op.transfer) saying "
                            "how the value is laid out on both sides",
                            ctx.op.kind()));
  ctx.a().lastMicroBatchOnly = ctx.attrs.getInt("last_micro_batch", 0) != 0;
  for (int v : ctx.info.outputs)
    ctx.expected.push_back(v < 0 ? TensorType() : ctx.types[v]);
}
