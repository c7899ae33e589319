//===- TrainConfig.cpp - Reading train.yaml ---------------------*- C++ -*-===//
//
// The training configuration of shoal-compile --train (docs/Training.md):
// the loss of shoal-autodiff and the optimizer of shoal-optimizer.
//
//===----------------------------------------------------------------------===//

#include "shoal/Support/Files.h"
#include "shoal/Support/Yaml.h"
#include "shoal/Transforms/Passes.h"

#include "llvm/Support/GlobPattern.h"

#include <cmath>
#include <optional>
#include <yaml-cpp/yaml.h>

using namespace shoal;

namespace {

struct Reader {
  std::string path;

  /// "FILE:LINE: msg" at `n`, with yaml-cpp's line + 1 even where `n` has
  /// none ("train.yaml:0" for an empty file), as this reader always wrote.
  [[noreturn]] void fail(const YAML::Node &n, const std::string &msg) const {
    throw yaml::Error(path + ":" + std::to_string(yaml::lineOf(n) + 1) + ": " +
                      msg);
  }

  /// `n` is a mapping and every key of it is in `known`.
  void checkKeys(const YAML::Node &n, const char *what,
                 const std::vector<std::string> &known) const {
    if (!n.IsMap())
      fail(n, std::string(what) + " must be a mapping");
    yaml::checkKeys(path, n, what, known, "one of " + yaml::join(known));
  }

  /// The key `key` of `map` into `out`, if it is there.
  template <typename T>
  void get(const YAML::Node &map, const char *key, T &out,
           const char *what) const {
    YAML::Node n = map[key];
    if (!n)
      return;
    std::optional<T> v = yaml::as<T>(n);
    if (!v)
      fail(n, std::string("'") + key + "' must be " + what);
    out = std::move(*v);
  }

  void read(const std::string &text, TrainConfig &out) const;
};

} // namespace

std::pair<const char *, const char *>
shoal::checkLossScale(const MixedPrecisionPassOptions &o) {
  if (!(o.initialScale > 0) || !std::isfinite(o.initialScale))
    return {"initial", "a finite number > 0"};
  if (!(o.minScale > 0) || o.minScale > o.initialScale)
    return {"min", "> 0 and at most the initial scale"};
  if (!(o.growthFactor >= 1) || !std::isfinite(o.growthFactor))
    return {"growth_factor", "a finite number >= 1"};
  if (!(o.backoffFactor > 0 && o.backoffFactor < 1))
    return {"backoff_factor", "in (0, 1)"};
  if (o.growthInterval < 1)
    return {"growth_interval", "at least 1 (steps)"};
  return {nullptr, nullptr};
}

std::string shoal::parseTrainConfig(llvm::StringRef path, TrainConfig &out) {
  std::string text;
  if (std::string e = readRegularFile(path.str(), text, kMaxSpecBytes);
      !e.empty())
    return path.str() + ": cannot read the training config: " + e;
  return parseTrainConfigText(path.str(), text, out);
}

std::string shoal::parseTrainConfigText(const std::string &path,
                                        const std::string &text,
                                        TrainConfig &out) {
  try {
    Reader{path}.read(text, out);
  } catch (const yaml::Error &e) {
    return e.what();
  }
  return "";
}

void Reader::read(const std::string &text, TrainConfig &out) const {
  YAML::Node root = yaml::load(path, text);
  checkKeys(root, "the training config",
            {"version", "loss", "optimizer", "frozen", "grad_bucket_mb", "zero",
             "recompute", "precision", "loss_scale"});
  int64_t version = 1;
  get(root, "version", version, "an integer");
  if (version != 1)
    fail(root["version"],
         "unsupported version " + std::to_string(version) + " (expected 1)");
  YAML::Node loss = root["loss"];
  if (!loss)
    fail(root, "missing 'loss' (e.g. {kind: cross_entropy, output: "
               "logits})");
  checkKeys(loss, "loss", {"kind", "output", "labels", "ignore_index"});
  get(loss, "kind", out.loss, "a string");
  get(loss, "output", out.output, "a string");
  get(loss, "labels", out.labels, "a string");
  get(loss, "ignore_index", out.ignoreIndex, "an integer");
  if (out.loss != "cross_entropy" && out.loss != "mse")
    fail(loss["kind"],
         "unknown loss '" + out.loss + "' (expected cross_entropy or mse)");
  if (YAML::Node frozen = root["frozen"]) {
    if (!frozen.IsSequence())
      fail(frozen, "'frozen' must be a list of initializer patterns");
    for (const YAML::Node &p : frozen) {
      if (!p.IsScalar())
        fail(p, "each 'frozen' entry must be an initializer pattern (a "
                "string)");
      out.frozen.push_back(p.Scalar());
      out.frozenWhere.push_back(yaml::where(path, p));
    }
  }
  OptimizerPassOptions &o = out.optimizer;
  if (YAML::Node bucket = root["grad_bucket_mb"]) {
    get(root, "grad_bucket_mb", o.gradBucketMb, "a number");
    if (!(o.gradBucketMb >= 0) || !std::isfinite(o.gradBucketMb))
      fail(bucket, "'grad_bucket_mb' must be a number >= 0 (MiB; 0: one "
                   "all-reduce per gradient)");
  }
  if (YAML::Node zero = root["zero"]) {
    get(root, "zero", out.zero, "an integer");
    if (out.zero < 0 || out.zero > 3)
      fail(zero, "'zero' must be 0, 1, 2 or 3 (the ZeRO stage), got " +
                     std::to_string(out.zero));
  }
  if (YAML::Node rc = root["recompute"]) {
    get(root, "recompute", out.recompute, "a string");
    if (out.recompute != "none" && out.recompute != "full" &&
        out.recompute != "selective")
      fail(rc, "'recompute' must be none, full or selective, got '" +
                   out.recompute + "'");
  }
  MixedPrecisionPassOptions &mp = out.mixedPrecision;
  if (YAML::Node p = root["precision"]) {
    get(root, "precision", mp.precision, "a string");
    // bf16-autocast / fp16-autocast: only the matrix products in the low
    // type (the slower mode, kept for those who ask for it by name).
    for (std::string low : {"bf16", "fp16"})
      if (mp.precision == low + "-autocast") {
        mp.precision = low;
        mp.autocast = true;
      }
    if (mp.precision != "fp32" && mp.precision != "bf16" &&
        mp.precision != "fp16")
      fail(p, "'precision' must be fp32, bf16, fp16, bf16-autocast or "
              "fp16-autocast, got '" +
                  mp.precision + "'");
    // fp16 scales the loss by default (PyTorch's GradScaler defaults).
    mp.lossScale = mp.precision == "fp16";
  }
  if (YAML::Node ls = root["loss_scale"]) {
    if (mp.precision != "fp16")
      fail(ls, "'loss_scale' applies to 'precision: fp16' only (bf16 and "
               "fp32 keep float32's exponent range), but the precision is " +
                   mp.precision);
    if (ls.IsScalar()) {
      std::string mode = ls.Scalar();
      if (mode != "dynamic" && mode != "none")
        fail(ls, "'loss_scale' must be dynamic, none or a mapping "
                 "{initial, growth_interval, growth_factor, "
                 "backoff_factor, min}, got '" +
                     mode + "'");
      mp.lossScale = mode == "dynamic";
    } else {
      checkKeys(ls, "loss_scale",
                {"initial", "growth_interval", "growth_factor",
                 "backoff_factor", "min"});
      get(ls, "initial", mp.initialScale, "a number");
      get(ls, "growth_interval", mp.growthInterval, "an integer");
      get(ls, "growth_factor", mp.growthFactor, "a number");
      get(ls, "backoff_factor", mp.backoffFactor, "a number");
      get(ls, "min", mp.minScale, "a number");
      if (auto [key, what] = checkLossScale(mp); key)
        fail(ls[key] ? ls[key] : ls,
             std::string("'loss_scale.") + key + "' must be " + what);
      mp.lossScale = true;
    }
  }
  if (YAML::Node opt = root["optimizer"]) {
    checkKeys(opt, "optimizer",
              {"kind", "lr", "betas", "eps", "momentum", "weight_decay",
               "clip_norm", "warmup_steps", "total_steps", "min_lr",
               "lr_schedule", "no_decay"});
    get(opt, "kind", o.optimizer, "a string");
    get(opt, "lr", o.lr, "a number");
    get(opt, "eps", o.eps, "a number");
    get(opt, "momentum", o.momentum, "a number");
    get(opt, "weight_decay", o.weightDecay, "a number");
    get(opt, "clip_norm", o.clipNorm, "a number");
    get(opt, "warmup_steps", o.warmupSteps, "an integer");
    get(opt, "total_steps", o.totalSteps, "an integer");
    get(opt, "min_lr", o.minLr, "a number");
    if (YAML::Node s = opt["lr_schedule"]) {
      get(opt, "lr_schedule", o.lrSchedule, "a string");
      if (o.lrSchedule != "cosine" && o.lrSchedule != "linear" &&
          o.lrSchedule != "constant")
        fail(s, "'lr_schedule' must be cosine, linear or constant, got '" +
                    o.lrSchedule + "'");
    }
    // no_decay: `default` (biases and norms get no weight decay), or a list
    // of patterns that replaces the default: the weights it names get none,
    // every other one does ([]: every weight decays).
    if (YAML::Node nd = opt["no_decay"]) {
      if (nd.IsScalar() && nd.Scalar() == "default") {
        o.decayAll = false;
      } else if (nd.IsSequence()) {
        o.decayAll = true;
        std::vector<std::string> patterns;
        for (const YAML::Node &p : nd) {
          if (!p.IsScalar())
            fail(p, "each 'no_decay' entry must be an initializer name "
                    "pattern (a string)");
          if (auto glob = llvm::GlobPattern::create(p.Scalar()); !glob)
            fail(p, "'no_decay' pattern '" + p.Scalar() +
                        "': " + llvm::toString(glob.takeError()));
          patterns.push_back(p.Scalar());
        }
        o.noDecay = patterns;
      } else {
        fail(nd, "'no_decay' must be 'default' (biases and norms) or a list "
                 "of initializer name patterns (the weights without weight "
                 "decay; [] decays every weight)");
      }
    }
    if (YAML::Node betas = opt["betas"]) {
      std::vector<double> b;
      get(opt, "betas", b, "a list of two numbers");
      if (b.size() != 2)
        fail(betas, "'betas' must be a list of two numbers");
      o.beta1 = b[0];
      o.beta2 = b[1];
    }
    if (o.optimizer != "adamw" && o.optimizer != "sgd")
      fail(opt["kind"],
           "unknown optimizer '" + o.optimizer + "' (expected adamw or sgd)");
  }
}
