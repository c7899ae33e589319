//===- Search.h - Balancing and strategy search -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The planner's fast model of a strategy (DESIGN.md, "The planner"). A model
// is a profile: its ops in program order with their cost and what tensor
// parallelism does to them. A layout says how many devices each pipeline
// stage has, which ops it runs, how many pipelines run side by side and how
// ranks map onto the cluster. evaluate() predicts a layout's step time and
// each stage's memory; balance() makes a layout hardware-aware as Whale
// does (stage boundaries in proportion to device speed, the stages that
// keep the most activations on the devices with the most memory, batch
// shares in proportion to speed); search() enumerates (dp, tp, pp,
// micro-batches, schedule, layout) and ranks them.
//
// shoal-sim replays a compiled plan op by op; this model works on the
// unpartitioned graph so that it can rank hundreds of strategies in well
// under a second.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_PLANNER_SEARCH_H
#define SHOAL_PLANNER_SEARCH_H

#include "shoal/Planner/CostModel.h"

#include <string>
#include <vector>

namespace shoal {
namespace planner {

/// What the planner times of one op: a forward op, or one of the ops its
/// gradient rule builds (the ops shoal-autodiff makes), timed as the
/// compiled plan's ops are.
struct OpPiece {
  double flops = 0, bytes = 0;
  /// Of `bytes`, those of weights, constants and weight gradients: they do
  /// not shrink with the batch (tensor parallelism divides a sharded
  /// weight's).
  double weightBytes = 0;
  double rows = 0; ///< a matrix product's rows (0: not one)
  /// A matrix product's operand and result elements: mixed precision casts
  /// them (float32 to the low type and back); `castWeightElements` of them
  /// are a weight's.
  double castElements = 0, castWeightElements = 0;
  /// Under tensor parallelism: of `bytes` (and `castElements`), those of
  /// activations that stay whole on every rank of the group (a
  /// column-parallel product's input, a row-parallel one's partial sum);
  /// the others are divided over it. `hasSplit`: the op reads or writes a
  /// split value, so its work divides too.
  double wholeBytes = 0, castWholeElements = 0;
  bool hasSplit = true;
};

/// One op of the model, in program order, for the graph's whole batch: its
/// forward (the OpPiece) and what the layouts do to it.
struct OpCost : OpPiece {
  /// Its backward, op by op (ModelProfile::hasBackward).
  std::vector<OpPiece> backward;
  double params = 0;   ///< parameters of the weights it reads (each once)
  /// Of `params`, how many weights (ZeRO reduce-scatters each gradient on
  /// its own).
  int weights = 0;
  /// Its reads of a weight, each counted (ZeRO-3 gathers a weight before
  /// each reader, shoal-zero): in the forward, and by its backward (a
  /// product's input gradient reads the weight again, a bias's does not);
  /// the count and the parameters they read.
  int weightReads = 0, backwardWeightReads = 0;
  double weightReadParams = 0, backwardWeightReadParams = 0;
  double outBytes = 0; ///< the activations it produces
  /// Under tensor parallelism its work divides over the group (Megatron's
  /// column- and row-parallel products and the ops between them).
  bool tpSharded = false;
  /// Under tensor parallelism its result is split too (a column-parallel
  /// product and the ops on its result); the others' results (row-parallel
  /// products, LayerNorms, residual adds) are whole on every rank unless
  /// the stage is sequence-parallel.
  bool outSplit = false;
  /// Under tensor parallelism, bytes all-reduced after it (a row-parallel
  /// product, a vocabulary-parallel embedding).
  double tpAllReduceBytes = 0;
  /// Under tensor parallelism in training, bytes its backward all-reduces:
  /// a column-parallel product's input gradient (Megatron-LM's f), when its
  /// input needs one.
  double tpBackwardAllReduceBytes = 0;
  /// Under tensor parallelism in training, the vocabulary-parallel loss on
  /// its split result (the logits the graph returns): the statistics it
  /// all-reduces, in the forward and again in the backward (the row
  /// maximum, then the sum and the target's logit).
  std::vector<double> tpLossAllReduceBytes;
  /// Under tensor parallelism, bytes of its split results that the graph
  /// returns: a forward step gathers them (a training step's loss reads
  /// them split).
  double tpGatherBytes = 0;
  /// Under tensor parallelism, the size of the dimension its work divides
  /// along (a column-parallel product's columns, a row-parallel one's
  /// rows, what the ops on split values inherit); 0: not known.
  double splitSize = 0;
  /// A stage may end after this op: one activation of `cutBytes` crosses.
  bool cutAfter = false;
  double cutBytes = 0;
  /// Activation bytes alive just after this op (values freed at last use).
  double liveBytes = 0;
  /// A product of two activations of its own type (x * y) makes x's
  /// gradient from y first, then y's from x: when this op is the last
  /// backward reader of y, y dies between the two, and y's gradient takes
  /// its place. `reusedBytes` of y, made by op `reusedFrom` (-1: none).
  double reusedBytes = 0;
  int reusedFrom = -1;
  /// Of `outBytes`, what a training step keeps for the backward (results a
  /// consumer's gradient reads, the outputs); of those, the attention
  /// cores' (the scores and their softmax, which selective recomputation
  /// recomputes instead).
  double savedBytes = 0, coreBytes = 0;
  /// `savedBytes` result by result: the bytes and the op whose backward
  /// reads the result last (reverse mode runs the backward last to first,
  /// so the first reader in forward order that reads it for its gradient;
  /// this op when its own gradient reads it or it is an output). A
  /// recomputed layer's backward frees the result after that op's.
  std::vector<std::pair<int, double>> savedUntil;
  /// The constants it reads (indices into ModelProfile::constantBytes): a
  /// stage's program holds each of its ops' once.
  std::vector<int> constants;
  /// Selective recomputation runs it again before its backward (an
  /// attention core's op up to its softmax, shoal-recompute's segment).
  bool selectiveRecompute = false;
  /// The layer it belongs to (ModelProfile::layers; -1: none), a segment
  /// of full recomputation.
  int layer = -1;
};

struct ModelProfile {
  std::vector<OpCost> ops;
  /// Bytes of each distinct constant (equal value and type: one buffer per
  /// program, shoal-compact-constants), and whether it is floating point
  /// (16-bit when the whole model is).
  std::vector<double> constantBytes;
  std::vector<bool> constantIsFloat;
  /// Layers found from the node names (full recomputation's segments; 0:
  /// none found, the cut points stand for them).
  int layers = 0;
  double batch = 1;  ///< samples the ops' figures are for
  double tokens = 1; ///< tokens per sample (1 when there is no sequence)
  /// A step processes `batch * batchScale` samples (a graph written for one
  /// sample can stand for a large global batch).
  double batchScale = 1;
  /// Every op's `backward` is filled (from the gradient rules); otherwise a
  /// training step is timed as three forwards.
  bool hasBackward = false;
  /// Parameters the optimizer updates (the step's AdamW reads and writes
  /// its weight, gradient and two moments: `optimizerBytesPerParam` per
  /// parameter, the AdamW op's cost).
  static constexpr double optimizerBytesPerParam = 16;

  double stepBatch() const { return batch * batchScale; }
};

/// Train: every saved activation kept; TrainRecompute: full recomputation
/// (the layer inputs kept); TrainSelective: the attention cores recomputed.
enum class StepKind { Forward, Train, TrainRecompute, TrainSelective };

struct PlanOptions {
  StepKind step = StepKind::Forward;
  Precision precision = Precision::FP32;
  /// Only layouts with these degrees (0: any); an empty schedule: any.
  int dp = 0, tp = 0, pp = 0, microBatches = 0, microBatchSize = 0;
  int virtualStages = 0; ///< interleaved chunks per stage (0: 2 or 4)
  std::string schedule;
  /// Whale's balancing; false gives the even split to compare with.
  bool balance = true;
  /// ZeRO stage of a training step (the training config's `zero`): the
  /// memory model splits state, gradients, weights over the dp replicas.
  int zeroStage = 0;
  /// Mixed-precision training (the training config's `precision: bf16|fp16`):
  /// the products run in `precision`, but the weights and their gradients
  /// stay float32 (4 bytes per parameter each, no separate master copy).
  bool fp32Weights = false;
  /// With fp32Weights: the whole model in `precision` (shoal-mixed-precision's
  /// default): every op moves 16-bit activations, products read 16-bit
  /// copies of the weights (one cast per weight read), and activation
  /// memory is 16-bit; false: only the products, cast around each
  /// (bf16-autocast).
  bool lowActivations = false;
  /// Shards by speed are rounded to whole multiples of this many elements
  /// (shoal-plan's shard-multiple), as the compiler cuts them.
  int64_t shardMultiple = 64;
  /// Batch shares may be compiled as batch blocks (one replicated scope,
  /// one micro-batch): the annotated layout's one TaskGraph takes them.
  bool batchBlocks = false;
};

/// One pipeline stage of a layout.
struct StagePlan {
  int begin = 0, end = 0; ///< ops [begin, end)
  int devices = 1;        ///< per pipeline
  /// Per op in [begin, end): split (tensor parallel) or replicated over the
  /// stage's devices (each takes a part of the micro-batch).
  std::vector<char> split;
  /// World ranks: offset + replica * stride + index in the stage.
  int offset = 0, stride = 1;
  /// Its split ops run with sequence parallelism (`sequence_parallel:
  /// true`): the activations tensor parallelism keeps whole are split
  /// along the sequence too.
  bool sequenceParallel = false;
  /// Shards by speed, as compiled (one replica, one stage, devices of
  /// different speeds): each device's weight (per mille of the split); its
  /// split ops take that part of the work. Empty: equal shards.
  std::vector<int64_t> shardWeights;
  /// shardForWholeWork gave the fast devices more than their speed's share.
  bool shardsBeyondSpeed = false;

  // Filled in by evaluate().
  std::string device;     ///< the slowest device type among its ranks
  double seconds = 0;     ///< one micro-batch on the slowest replica
  double tpSeconds = 0;   ///< of which tensor-parallel all-reduces
  int inFlight = 1;       ///< micro-batches whose activations it keeps
  double memoryBytes = 0; ///< per device
  double capacityBytes = 0;
  MemoryEstimate memory;
};

struct Layout {
  int dp = 1, microBatches = 1, virtualStages = 1;
  std::string schedule = "1f1b"; ///< gpipe, 1f1b, interleaved
  /// Ranks: pipeline-major (a pipeline's stages on consecutive ranks, as
  /// Megatron-LM) or stage-major (a stage's replicas on consecutive ranks,
  /// so that a stage can sit on one kind of device).
  bool stageMajor = false;
  std::vector<StagePlan> stages;
  /// Samples per data-parallel replica (pipeline); empty: equal.
  std::vector<double> batchShares;
  /// One stage (pp = 1) with uneven batch shares, as compiled: replica i
  /// runs replicaMicroBatches[i] micro-batches of the same size, stepBatch
  /// / sum(replicaMicroBatches) samples (and batchShares[i] is that times
  /// its count); `microBatches` is then their sum, the micro-batches of the
  /// one-replica program the compiler builds. Empty: every replica runs
  /// `microBatches`.
  std::vector<int> replicaMicroBatches;
  /// One stage (pp = 1), one device per replica, one micro-batch, as
  /// compiled: replica i runs one block of batchShares[i] samples (the
  /// compiler's batch blocks, uneven blocks of the batch dimension; docs/
  /// Planner.md "Uneven batch shares").
  bool batchBlocks = false;
  /// Batch shares by speed that the compiler cannot build for this layout
  /// (sharesNotCompiled says why) and the step they would take: the layout
  /// is predicted, and compiled, with equal shares.
  std::vector<double> uncompiledShares;
  double uncompiledStepSeconds = 0;

  // Filled in by evaluate().
  /// Per stage: whether the activations it receives go as Megatron's
  /// scatter/gather (shoal-pipeline's `scatter-gather`). It and its
  /// neighbour (the stage before it; for stage 0 the one after) are split
  /// over the same tp size t > 1 at their boundary, neither is
  /// sequence-parallel, and on the cluster it pays: under 1F1B and
  /// interleaved schedules when sending 1/t and all-gathering over the
  /// receivers' tp group is faster than sending the whole value (not where
  /// the tp ranks' own link is no faster than the one between the stages);
  /// under GPipe, whose transfers hide behind the micro-batches but for the
  /// fill and the drain, when the (p - 1) hops save more than the
  /// all-gathers of every micro-batch cost. shoal-plan records the stages
  /// (`shoal.plan`'s `scatter_gather_stages`) and shoal-pipeline follows
  /// them; it also leaves out values that cross once per step and a value
  /// a column-split product leaves split, which it sees in the IR.
  std::vector<char> scatterGather;
  double stepSeconds = 0;
  double computeSeconds = 0; ///< the slowest pipeline without bubble
  double bubbleSeconds = 0, p2pSeconds = 0, dpSeconds = 0, tpSeconds = 0;
  double optimizerSeconds = 0; ///< the optimizer's update (training)
  double flopsPerStep = 0; ///< model FLOPs, including recomputation
  bool fits = true;

  int tp() const;
  int pp() const { return static_cast<int>(stages.size()); }
  int worldSize() const;
  /// "dp=2 tp=4 pp=2 m=8 1f1b" and the layout's other choices.
  std::string describe() const;
};

/// Sets the stages' ranks from the layout's order (pipeline-major, or
/// stage-major with the stages in the given order of rank blocks).
void placeRanks(Layout &layout, const std::vector<int> &blockOrder = {});

/// Predicts `layout`: fills in its times, memory and `fits`.
void evaluate(Layout &layout, const ModelProfile &profile,
              const Cluster &cluster, const CostModel &cost,
              const PlanOptions &options);

/// Whale's balancing of a layout whose stage sizes and devices are fixed:
/// moves stage boundaries (to ops with `cutAfter`) so that every stage
/// takes the same time on its own devices, tries both rank orders with the
/// stages that keep the most micro-batches on the devices with the most
/// memory, and gives each replica a batch share in proportion to its speed.
/// `moveBoundaries` false keeps the stages' ops.
void balance(Layout &layout, const ModelProfile &profile,
             const Cluster &cluster, const CostModel &cost,
             const PlanOptions &options, bool moveBoundaries = true);

/// Shards by speed where the compiler builds them: a layout of one stage
/// and one replica whose split devices differ in speed gets shardWeights
/// in proportion to their speed. True if it set them.
bool shardBySpeed(Layout &layout, const Cluster &cluster,
                  const PlanOptions &options);

/// Shards that also balance the work every split device does whole (the
/// ops not split), which the slow devices do slower: from shardBySpeed's
/// weights, the fast devices get more, as much as the cost model says is
/// fastest. Evaluates `layout` for each candidate.
void shardForWholeWork(Layout &layout, const ModelProfile &profile,
                       const Cluster &cluster, const CostModel &cost,
                       const PlanOptions &options);

/// The even split of `ops` into `pp` stages by FLOPs at cut points (the
/// non-hardware-aware baseline); false if there are too few cut points.
bool cutEvenly(Layout &layout, const ModelProfile &profile);

/// Every layout of `profile` on `cluster` that options allow, balanced and
/// evaluated, best first (layouts that fit before those that do not).
std::vector<Layout> search(const ModelProfile &profile, const Cluster &cluster,
                           const CostModel &cost, const PlanOptions &options);

/// What balancing changed in `chosen` against the annotated layout
/// `asIs` (the same stages), a line each, and why: stage boundaries moved
/// by speed, stages placed on other ranks (with the memory each needs
/// against the devices it now has and those it had), batch shares. Stage k
/// is called `names[k]` when given. Empty when nothing changed.
std::vector<std::string> explainChanges(const Layout &asIs,
                                        const Layout &chosen,
                                        const Cluster &cluster,
                                        const std::vector<std::string> &names);

/// A table of the first `top` layouts with their predicted time and memory
/// and why the first one won.
std::string explain(const std::vector<Layout> &ranked, const Cluster &cluster,
                    int top);

/// "3.52 GiB".
std::string formatBytes(double bytes);

/// Why `layout`'s batch shares by speed are not compiled (its
/// uncompiledShares): a pipeline, tensor-parallel replicas, or ZeRO.
std::string sharesNotCompiled(const Layout &layout);

/// Shares as --explain prints them, run-length: "54/10", "3 (x8)/1 (x8)".
std::string formatShares(const std::vector<double> &shares);

} // namespace planner
} // namespace shoal

#endif // SHOAL_PLANNER_SEARCH_H
