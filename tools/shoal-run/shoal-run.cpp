//===- shoal-run.cpp - Run a shoal plan under MPI ---------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// `shoal-run PLAN --inputs DIR --outputs DIR [options]`; see
// docs/Runtime.md. The command line is parsed here into the runtime's
// options; the job itself is the runtime's tooling (runJob,
// shoal/Runtime/Runtime.h), as IREE's iree-run-module is a few lines over
// its tooling library.
//
//===----------------------------------------------------------------------===//

#include "shoal/Runtime/Runtime.h"
#include "shoal/Schema/DeviceCatalog.h"

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace shoal::rt;

namespace {

const char kUsage[] =
    "usage: shoal-run PLAN --inputs DIR --outputs DIR [options]\n"
    "\n"
    "Runs a shoal plan on the ranks of an MPI job; without mpirun it runs as\n"
    "a world of one rank. Start a plan made for N ranks with\n"
    "  mpirun -np N shoal-run PLAN --inputs DIR --outputs DIR\n"
    "or without MPI, as torchrun does, with one process per rank started with\n"
    "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (docs/Runtime.md)\n"
    "\n"
    "  PLAN           the plan file (written by shoal-compile)\n"
    "  --inputs DIR   folder with one <name>.npy per program input\n"
    "  --outputs DIR  folder for one <name>.npy per program output, written\n"
    "                 by the program's first rank (created if missing)\n"
    "  --verbose      print per-op timings of rank 0 to stderr\n"
    "  --backend B    cpu or cuda (default: the plan's device, see\n"
    "                 shoal-compile --device)\n"
    "  --comm C       mpi (under mpirun), gloo (TCP, torchrun-style\n"
    "                 variables; the default when they are set without\n"
    "                 mpirun) or nccl (with --backend cuda)\n"
    "  --strict       an op without a kernel on the backend is an error, not\n"
    "                 a warning and a CPU fallback\n"
    "  --audit        run nothing: print where each op of every program\n"
    "                 would run on --backend (its kernel, or the CPU on\n"
    "                 host copies), which collectives and transfers would\n"
    "                 go through host buffers (--comm nccl: device\n"
    "                 collectives) and whether the step could be captured\n"
    "                 as a CUDA graph; needs no GPU. With --strict, exit 1\n"
    "                 if anything would leave the device\n"
    "  --report-memory  print the bytes of the rank with the largest peak:\n"
    "                 weights, gradients, optimizer state, activations\n"
    "                 (planned) and the measured peak; =ranks: every\n"
    "                 rank's too\n"
    "  --grad-bucket-mb MB  gradient all-reduces packed into buckets of MB\n"
    "                 (default 25; 0: one all-reduce per gradient)\n"
    "  --precision P  matrix products on the GPU: fp32 (default), tf32,\n"
    "                 bf16 or fp16 (fp32 accumulation and storage)\n"
    "  --allow-tf32   same as --precision tf32\n"
    "  --steps N      run the program N times and report step time,\n"
    "                 samples/s, tokens/s and MFU (default 1)\n"
    "  --warmup N     untimed steps before those (default 0)\n"
    "  --peak-tflops X  a device's peak TFLOP/s for MFU when it is not in\n"
    "                 the catalog (e.g. a CPU)\n"
    "  --trace FILE   write a Chrome trace (JSON, chrome://tracing or\n"
    "                 Perfetto) of the last timed step: one track per rank\n"
    "                 for tasks and one for Send/Recv\n"
    "  --profile FILE write every rank's op, collective and Send/Recv times\n"
    "                 (JSON, medians over the timed steps) for the planner's\n"
    "                 calibration (shoal-sim --calibration)\n"
    "  --stall-timeout S  end the job with an error naming the rank and the\n"
    "                 op it waits in when a rank makes no progress for S\n"
    "                 seconds (another rank stopped or died; default 600,\n"
    "                 0: never)\n"
    "\n"
    "Training plans (shoal-compile --train, docs/Training.md):\n"
    "  --steps N      run N optimizer steps (after the checkpoint's, with\n"
    "                 --resume)\n"
    "  --data FILE    .npy [N, T + 1] of token rows (int32, int64, uint16 or\n"
    "                 uint32; N >= B): step s feeds rows (s * B + i) mod N,\n"
    "                 row[:T] to the token input and row[1:] to the labels\n"
    "  --data DIR     one <name>.npy per input (labels.npy included), each\n"
    "                 [N, ...] of the input's shape after its batch B (any\n"
    "                 dtype the input has): step s feeds rows\n"
    "                 (s * B + i) mod N of every file, i < B. Without --data,\n"
    "                 --inputs DIR gives one batch used at every step\n"
    "  --data PREFIX  a Megatron indexed dataset (PREFIX.bin and PREFIX.idx,\n"
    "                 or either path), or a blend \"W1 PREFIX1 W2 PREFIX2 "
    "...\":\n"
    "                 samples of T + 1 tokens, shuffled per epoch\n"
    "                 (docs/Data.md; scripts/preprocess_data.py makes them)\n"
    "  --data-seed N  the sample order of indexed datasets (default 1234)\n"
    "  --total-steps N  train until step N, counted from step 0 (a resumed\n"
    "                 run ends at the same step; instead of --steps)\n"
    "  --log-every K  a progress line every K steps (default 1): step,\n"
    "                 loss (the mean over the K steps), step time, tokens/s,\n"
    "                 MFU, learning rate, gradient norm and time left\n"
    "  --metrics FILE append one JSON line per progress line and evaluation\n"
    "                 (step, loss, lr, grad_norm, step_ms, tokens_per_s, mfu,\n"
    "                 memory_peak_mib, eval_loss, ...; docs/Training.md)\n"
    "  --eval-data D  evaluation data (as --data): after the last step, and\n"
    "                 every N steps with --eval-every N, run --eval-steps K\n"
    "                 (default 1) forward-only steps over its first K\n"
    "                 batches and print the mean loss and perplexity\n"
    "  --eval         train nothing: evaluate the model (or the --resume\n"
    "                 checkpoint) over --eval-data and exit\n"
    "  --save DIR     write a checkpoint at the end (and every K steps with\n"
    "                 --save-every K; --keep-last K keeps the K newest)\n"
    "  --resume DIR   start from the newest checkpoint in DIR (or from the\n"
    "                 step folder DIR/step-N), under this plan's layout;\n"
    "                 --resume auto: from the newest in --save DIR if it\n"
    "                 has one, else from step 0. Every shard's CRC-32 is\n"
    "                 checked (--no-verify: not); --save DIR is locked for\n"
    "                 the run (DIR/.lock): a second job saving there is\n"
    "                 refused. A checkpoint saved with other optimizer\n"
    "                 settings (lr, schedule, betas, ...) is refused\n"
    "                 unless --override-schedule is given\n"
    "  --export-onnx FILE  at the end, write the source ONNX model with the\n"
    "                 trained weights (initializers of 1 KiB or more in\n"
    "                 FILE.data, ONNX external data)\n"
    "  --export-safetensors DIR  at the end, write the trained weights to\n"
    "                 DIR/model.safetensors under their initializer names\n"
    "  --init-from PATH  start from the weights of a safetensors file or a\n"
    "                 Hugging Face save_pretrained folder (model.safetensors\n"
    "                 or a sharded set) instead of the ONNX model's, matched\n"
    "                 by name (docs/HuggingFace.md); not with --resume DIR\n"
    "  --init-from-partial  weights the file lacks keep the ONNX values\n"
    "                 (else an error lists them)\n"
    "  --export-hf DIR  at the end, write DIR/model.safetensors under Hugging\n"
    "                 Face's names, and the config and tokenizer files of\n"
    "                 --hf-config DIR (else of the --init-from folder), for\n"
    "                 from_pretrained(DIR)\n"
    "  --hf-prefix P  the prefix of the ONNX names over Hugging Face's (a\n"
    "                 wrapper module's, e.g. hf.); default: found by matching\n"
    "                 the names of --init-from or of --hf-config's weights\n"
    "  --outputs DIR  optional: writes the last step's loss.npy\n"
    "\n"
    "  --help         print this help\n"
    "\n"
    "In file names, every character of a tensor name outside [A-Za-z0-9_.-]\n"
    "is replaced by '_'.\n";

/// Parses the command line; returns an error message or "".
std::string parseArgs(int argc, char **argv, RunOptions &opts,
                      TrainingOptions &train, bool &help) {
  help = false;
  bool stepsGiven = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *flag, std::string &dst) -> std::string {
      std::string prefix = std::string(flag) + "=";
      if (arg.compare(0, prefix.size(), prefix) == 0) {
        dst = arg.substr(prefix.size());
        return dst.empty() ? fmt::format("{} needs a folder", flag) : "";
      }
      if (i + 1 >= argc)
        return fmt::format("{} needs a folder", flag);
      dst = argv[++i];
      return "";
    };
    if (arg == "--help" || arg == "-h") {
      help = true;
      return "";
    }
    auto number = [&](const char *flag, double &dst) -> std::string {
      std::string text;
      std::string prefix = std::string(flag) + "=";
      if (arg.compare(0, prefix.size(), prefix) == 0)
        text = arg.substr(prefix.size());
      else if (i + 1 < argc)
        text = argv[++i];
      char *end = nullptr;
      dst = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(dst >= 0) || !std::isfinite(dst))
        return fmt::format("{} needs a non-negative number, got '{}'", flag,
                           text);
      return "";
    };
    auto is = [&](const char *flag) {
      std::string f = flag;
      return arg == f || arg.rfind(f + "=", 0) == 0;
    };
    if (arg == "--verbose" || arg == "-v") {
      opts.verbose = true;
    } else if (arg == "--strict") {
      opts.strict = true;
    } else if (arg == "--audit") {
      opts.audit = true;
    } else if (arg == "--report-memory") {
      opts.reportMemory = true;
    } else if (arg == "--report-memory=ranks") {
      opts.reportMemory = opts.reportMemoryRanks = true;
    } else if (is("--grad-bucket-mb")) {
      if (std::string e = number("--grad-bucket-mb", opts.gradBucketMb);
          !e.empty())
        return e;
    } else if (arg == "--allow-tf32") {
      opts.precision = "tf32";
    } else if (is("--backend")) {
      if (std::string e = value("--backend", opts.backend); !e.empty())
        return "--backend needs cpu or cuda";
      if (!isBackendName(opts.backend))
        return fmt::format("--backend must be cpu or cuda, got '{}'",
                           opts.backend);
    } else if (is("--comm")) {
      if (std::string e = value("--comm", opts.comm); !e.empty())
        return "--comm needs mpi, gloo or nccl";
      if (opts.comm != "mpi" && opts.comm != "gloo" && opts.comm != "nccl")
        return fmt::format("--comm must be mpi, gloo or nccl, got '{}'",
                           opts.comm);
    } else if (is("--precision")) {
      if (std::string e = value("--precision", opts.precision); !e.empty())
        return "--precision needs fp32, tf32, bf16 or fp16";
      Precision p;
      if (!parsePrecision(opts.precision, p))
        return fmt::format("--precision must be fp32, tf32, bf16 or fp16, "
                           "got '{}'",
                           opts.precision);
    } else if (is("--steps") || is("--warmup")) {
      bool steps = is("--steps");
      stepsGiven |= steps;
      double n = 0;
      if (std::string e = number(steps ? "--steps" : "--warmup", n); !e.empty())
        return e;
      // Compared as doubles first: converting 1e300 to int is undefined.
      if (n > INT_MAX || n != static_cast<int>(n) || (steps && n < 1))
        return fmt::format("{} needs a whole number from {} to {}",
                           steps ? "--steps" : "--warmup", steps ? 1 : 0,
                           INT_MAX);
      (steps ? opts.steps : opts.warmup) = static_cast<int>(n);
    } else if (is("--log-every") || is("--save-every") || is("--keep-last") ||
               is("--eval-every") || is("--eval-steps") ||
               is("--total-steps")) {
      std::string flag = arg.substr(0, arg.find('='));
      int *dst = flag == "--log-every"    ? &train.logEvery
                 : flag == "--save-every" ? &train.saveEvery
                 : flag == "--keep-last"  ? &train.keepLast
                 : flag == "--eval-every" ? &train.evalEvery
                 : flag == "--eval-steps" ? &train.evalSteps
                                          : nullptr;
      double n = 0;
      if (std::string e = number(flag.c_str(), n); !e.empty())
        return e;
      if (n > INT_MAX || n != static_cast<int>(n) || n < 1)
        return fmt::format("{} needs a whole number from 1 to {}", flag,
                           INT_MAX);
      if (dst)
        *dst = static_cast<int>(n);
      else
        train.totalSteps = static_cast<int64_t>(n);
    } else if (arg == "--eval") {
      train.evalOnly = true;
    } else if (is("--eval-data")) {
      if (std::string e = value("--eval-data", train.evalDataPath); !e.empty())
        return "--eval-data needs a .npy file, a folder or a dataset";
    } else if (is("--metrics")) {
      if (std::string e = value("--metrics", train.metricsPath); !e.empty())
        return "--metrics needs a file";
    } else if (is("--data-seed")) {
      double n = 0;
      if (std::string e = number("--data-seed", n); !e.empty())
        return e;
      if (n > 9007199254740992.0 || n != std::floor(n))
        return "--data-seed needs a whole number from 0 to 2^53";
      train.dataSeed = static_cast<int64_t>(n);
    } else if (is("--data")) {
      if (std::string e = value("--data", train.dataPath); !e.empty())
        return "--data needs a .npy file or a folder";
    } else if (is("--save")) {
      if (std::string e = value("--save", train.saveDir); !e.empty())
        return e;
    } else if (is("--resume")) {
      if (std::string e = value("--resume", train.resumeDir); !e.empty())
        return e;
      // `--resume ./auto` names a folder called auto.
      train.resumeAuto = train.resumeDir == "auto";
      if (train.resumeAuto)
        train.resumeDir.clear();
    } else if (is("--export-onnx")) {
      if (std::string e = value("--export-onnx", train.exportOnnx); !e.empty())
        return "--export-onnx needs a file";
    } else if (is("--export-safetensors")) {
      if (std::string e =
              value("--export-safetensors", train.exportSafetensorsDir);
          !e.empty())
        return e;
    } else if (arg == "--no-verify") {
      train.noVerify = true;
    } else if (arg == "--override-schedule") {
      train.overrideSchedule = true;
    } else if (arg == "--init-from-partial") {
      train.initFromPartial = true;
    } else if (is("--init-from")) {
      if (std::string e = value("--init-from", train.initFrom); !e.empty())
        return "--init-from needs a .safetensors file or a folder";
    } else if (is("--export-hf")) {
      if (std::string e = value("--export-hf", train.exportHfDir); !e.empty())
        return e;
    } else if (is("--hf-config")) {
      if (std::string e = value("--hf-config", train.hfConfigDir); !e.empty())
        return e;
    } else if (arg.rfind("--hf-prefix=", 0) == 0) {
      // `--hf-prefix=` says the names are Hugging Face's as they are.
      train.hfPrefix = arg.substr(std::strlen("--hf-prefix="));
      train.hfPrefixSet = true;
    } else if (arg == "--hf-prefix") {
      if (i + 1 >= argc)
        return "--hf-prefix needs a prefix";
      train.hfPrefix = argv[++i];
      train.hfPrefixSet = true;
    } else if (is("--trace")) {
      if (std::string e = value("--trace", opts.tracePath); !e.empty())
        return "--trace needs a file";
    } else if (is("--profile")) {
      if (std::string e = value("--profile", opts.profilePath); !e.empty())
        return "--profile needs a file";
    } else if (is("--stall-timeout")) {
      if (std::string e = number("--stall-timeout", opts.stallTimeout);
          !e.empty())
        return e;
    } else if (is("--peak-tflops")) {
      if (std::string e = number("--peak-tflops", opts.peakTflops); !e.empty())
        return e;
    } else if (arg == "--inputs" || arg.rfind("--inputs=", 0) == 0) {
      if (std::string e = value("--inputs", opts.inputsDir); !e.empty())
        return e;
    } else if (arg == "--outputs" || arg.rfind("--outputs=", 0) == 0) {
      if (std::string e = value("--outputs", opts.outputsDir); !e.empty())
        return e;
    } else if (!arg.empty() && arg[0] == '-') {
      return fmt::format("unknown option '{}'", arg);
    } else if (opts.planPath.empty()) {
      opts.planPath = arg;
    } else {
      return fmt::format("more than one plan given ('{}' and '{}')",
                         opts.planPath, arg);
    }
  }
  if (opts.planPath.empty())
    return "no plan file given";
  if (opts.audit && !opts.inputsDir.empty())
    return "--audit runs nothing: it takes no --inputs";
  if (train.saveEvery > 0 && train.saveDir.empty())
    return "--save-every needs --save DIR";
  if (train.keepLast > 0 && train.saveDir.empty())
    return "--keep-last needs --save DIR";
  if (train.resumeAuto && train.saveDir.empty())
    return "--resume auto needs --save DIR (the folder it resumes from when "
           "it holds a checkpoint)";
  if (stepsGiven && train.totalSteps > 0)
    return "give --steps N (steps to run) or --total-steps N (the step to "
           "end at), not both";
  if (!train.initFrom.empty() && !train.resumeDir.empty())
    return "give --init-from PATH (the weights a new run starts from) or "
           "--resume DIR (a checkpoint to go on from), not both (with "
           "--resume auto, --init-from applies while --save DIR holds no "
           "checkpoint)";
  if (train.initFromPartial && train.initFrom.empty())
    return "--init-from-partial needs --init-from PATH";
  if (!train.hfConfigDir.empty() && train.exportHfDir.empty())
    return "--hf-config needs --export-hf DIR";
  if (train.hfPrefixSet && train.exportHfDir.empty() && train.initFrom.empty())
    return "--hf-prefix needs --init-from or --export-hf";
  if ((train.evalEvery > 0 || train.evalOnly) && train.evalDataPath.empty())
    return fmt::format("{} needs --eval-data",
                       train.evalOnly ? "--eval" : "--eval-every");
  if (train.evalOnly &&
      (stepsGiven || train.totalSteps > 0 || !train.saveDir.empty() ||
       !train.exportOnnx.empty() || !train.exportSafetensorsDir.empty() ||
       !train.exportHfDir.empty() || !train.dataPath.empty()))
    return "--eval trains nothing: it takes no --steps, --total-steps, "
           "--data, --save or export";
  // --inputs and --outputs: forward plans need them (checked once the plan
  // is loaded); training plans may take --data and skip the outputs.
  return "";
}

} // namespace

int main(int argc, char **argv) {
  registerAllBackends();
  JobRequest request;
  request.usage = kUsage;
  request.usageError =
      parseArgs(argc, argv, request.run, request.train, request.help);
  return runJob(argc, argv, request);
}
