//===- Options.h - What a run is asked to do --------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A leaf header: the options of a run (shoal-run's flags, parsed by
// tools/shoal-run), which includes nothing of the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_OPTIONS_H
#define SHOAL_RUNTIME_OPTIONS_H

#include <cstdint>
#include <string>

namespace shoal {
namespace rt {

/// What to run and where its files are.
struct RunOptions {
  /// The plan file (`.plan`, a serialized shoal.plan.Plan).
  std::string planPath;
  /// Folder holding one `<name>.npy` per program input.
  std::string inputsDir;
  /// Folder the outputs are written to (rank 0 only); created if missing.
  std::string outputsDir;
  /// Print per-op timings of rank 0 to stderr.
  bool verbose = false;
  /// "cpu" or "cuda"; empty: the plan's default device.
  std::string backend;
  /// The communicator: "mpi", "gloo" or "nccl" (CUDA backend); empty: the
  /// launch decides (mpirun: MPI, torchrun-style variables: Gloo).
  std::string comm;
  /// Make an op without a kernel on the chosen backend an error instead of a
  /// one-time warning and a CPU fallback.
  bool strict = false;
  /// --audit: load the plan and print, without running it or needing a
  /// device, where each op would run on `backend` (its kernel or the CPU
  /// on host copies), which collectives would go through host buffers and
  /// whether the step could be captured as a CUDA graph (docs/CUDA.md);
  /// with `strict`, exit 1 if any op or collective leaves the device.
  bool audit = false;
  /// Print the memory line of the rank with the largest peak
  /// (--report-memory).
  bool reportMemory = false;
  /// --report-memory=ranks: a memory line for every rank as well.
  bool reportMemoryRanks = false;
  /// Gradient all-reduce buckets in MiB (--grad-bucket-mb); negative: the
  /// default, 25 (PyTorch DDP's); 0: one all-reduce per gradient.
  double gradBucketMb = -1;
  /// Precision of matrix products on the GPU: fp32, tf32, bf16 or fp16.
  std::string precision = "fp32";
  /// Timed steps (each runs the whole program on the same inputs) and
  /// untimed warm-up steps before them.
  int steps = 1;
  int warmup = 0;
  /// Seconds without progress (no op started, no phase entered) after which
  /// a rank ends the job with an error naming itself and what it waits in
  /// (--stall-timeout); 0: never.
  double stallTimeout = 600;
  /// Peak TFLOP/s of one device for the MFU report when the device is not
  /// in the catalog (CPUs); 0: no MFU.
  double peakTflops = 0;
  /// If set, world rank 0 writes a Chrome trace (JSON) of the last timed
  /// step there: one process per rank, a compute track (one event per task
  /// and micro-batch) and a communication track (one event per Send/Recv).
  std::string tracePath;
  /// If set, world rank 0 writes there (JSON) the median time over the
  /// timed steps of every op, collective and Send/Recv of every rank, for
  /// the planner's calibration (docs/Runtime.md, "Profiles").
  std::string profilePath;
};

/// shoal-run's options for training plans (docs/Training.md, "Running").
struct TrainingOptions {
  /// --data: an integer .npy [N, T + 1] of token rows, or a folder of one
  /// .npy [N, ...] per input; empty: the fixed batch of --inputs.
  std::string dataPath;
  /// --log-every: a progress line every K steps (and after the last).
  int logEvery = 1;
  /// --save DIR and --save-every K (0: only at the end).
  std::string saveDir;
  int saveEvery = 0;
  /// --resume DIR: start from its newest checkpoint.
  std::string resumeDir;
  /// --export-onnx FILE and --export-safetensors DIR: the trained model at
  /// the end of the run (docs/Training.md, "Exporting the trained model").
  std::string exportOnnx, exportSafetensorsDir;
  /// --data-seed: the seed of the sample order of indexed datasets
  /// (docs/Data.md); Megatron's default.
  int64_t dataSeed = 1234;
  /// --resume auto: resume from the newest checkpoint of --save DIR when
  /// there is one, else start fresh.
  bool resumeAuto = false;
  /// --no-verify: read checkpoint shards without checking their CRC-32.
  bool noVerify = false;
  /// --override-schedule: resume a checkpoint saved with other optimizer
  /// settings (learning rate, schedule, betas, ...) under this plan's.
  bool overrideSchedule = false;
  /// --total-steps N: train until step N (a rerun of the same command after
  /// a crash ends at the same step); 0: --steps more steps.
  int64_t totalSteps = 0;
  /// --keep-last K: after each checkpoint, keep only the K newest; 0: all.
  int keepLast = 0;
  /// --metrics FILE: one JSON line per logged step and evaluation.
  std::string metricsPath;
  /// --eval-data, --eval-every N, --eval-steps K: every N steps (and at the
  /// end), K forward-only steps over the evaluation data.
  std::string evalDataPath;
  int evalEvery = 0;
  int evalSteps = 1;
  /// --eval: run no training step, only the evaluation (over --eval-data).
  bool evalOnly = false;
  /// --init-from PATH: the model's weights from a safetensors file or a
  /// Hugging Face save_pretrained folder instead of the ONNX source
  /// (docs/HuggingFace.md); --init-from-partial: weights it lacks keep their
  /// ONNX values instead of being an error.
  std::string initFrom;
  bool initFromPartial = false;
  /// --export-hf DIR: DIR/model.safetensors under Hugging Face's names, with
  /// the config and tokenizer files of --hf-config DIR (else of the
  /// --init-from folder).
  std::string exportHfDir, hfConfigDir;
  /// --hf-prefix P (hfPrefixSet): the prefix the initializer names have over
  /// the Hugging Face names; unset: found by matching the names.
  std::string hfPrefix;
  bool hfPrefixSet = false;
};

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_OPTIONS_H
