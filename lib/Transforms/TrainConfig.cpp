//===- TrainConfig.cpp - Reading train.yaml ---------------------*- C++ -*-===//
//
// The training configuration of shoal-compile --train (docs/Training.md):
// the loss of shoal-autodiff and the optimizer of shoal-optimizer.
//
//===----------------------------------------------------------------------===//

#include "shoal/Support/Files.h"
#include "shoal/Transforms/Passes.h"

#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <yaml-cpp/yaml.h>

using namespace shoal;

namespace {

struct Reader {
  std::string path;
  std::string error;

  bool fail(const YAML::Node &n, const std::string &msg) {
    if (error.empty())
      error = path + ":" + std::to_string(n.Mark().line + 1) + ": " + msg;
    return false;
  }

  /// Every key of map `n` must be in `known`.
  bool checkKeys(const YAML::Node &n, const char *what,
                 std::initializer_list<const char *> known) {
    if (!n.IsMap())
      return fail(n, std::string(what) + " must be a mapping");
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!it->first.IsScalar())
        return fail(it->first,
                    std::string("a key of ") + what + " must be a name");
      std::string key = it->first.Scalar();
      bool ok = false;
      std::string list;
      for (const char *k : known) {
        ok |= key == k;
        list += (list.empty() ? "" : ", ") + std::string(k);
      }
      if (!ok)
        return fail(it->first, "unknown key '" + key + "' in " + what +
                                   " (expected one of " + list + ")");
    }
    return true;
  }

  template <typename T>
  bool get(const YAML::Node &map, const char *key, T &out, const char *what) {
    YAML::Node n = map[key];
    if (!n)
      return true;
    try {
      out = n.as<T>();
    } catch (const YAML::Exception &) {
      return fail(n, std::string("'") + key + "' must be " + what);
    }
    return true;
  }
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
  Reader r{path, ""};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception &e) {
    return r.path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg;
  }
  if (!r.checkKeys(root, "the training config",
                   {"version", "loss", "optimizer", "frozen", "grad_bucket_mb",
                    "zero", "recompute", "precision", "loss_scale"}))
    return r.error;
  int64_t version = 1;
  if (!r.get(root, "version", version, "an integer"))
    return r.error;
  if (version != 1) {
    r.fail(root["version"],
           "unsupported version " + std::to_string(version) + " (expected 1)");
    return r.error;
  }
  YAML::Node loss = root["loss"];
  if (!loss) {
    r.fail(root, "missing 'loss' (e.g. {kind: cross_entropy, output: "
                 "logits})");
    return r.error;
  }
  if (!r.checkKeys(loss, "loss",
                   {"kind", "output", "labels", "ignore_index"}) ||
      !r.get(loss, "kind", out.loss, "a string") ||
      !r.get(loss, "output", out.output, "a string") ||
      !r.get(loss, "labels", out.labels, "a string") ||
      !r.get(loss, "ignore_index", out.ignoreIndex, "an integer"))
    return r.error;
  if (out.loss != "cross_entropy" && out.loss != "mse") {
    r.fail(loss["kind"],
           "unknown loss '" + out.loss + "' (expected cross_entropy or mse)");
    return r.error;
  }
  if (YAML::Node frozen = root["frozen"]) {
    if (!frozen.IsSequence()) {
      r.fail(frozen, "'frozen' must be a list of initializer patterns");
      return r.error;
    }
    for (const YAML::Node &p : frozen) {
      if (!p.IsScalar()) {
        r.fail(p, "each 'frozen' entry must be an initializer pattern (a "
                  "string)");
        return r.error;
      }
      out.frozen.push_back(p.as<std::string>());
      out.frozenWhere.push_back(r.path + ":" +
                                std::to_string(p.Mark().line + 1));
    }
  }
  OptimizerPassOptions &o = out.optimizer;
  if (YAML::Node bucket = root["grad_bucket_mb"]) {
    if (!r.get(root, "grad_bucket_mb", o.gradBucketMb, "a number"))
      return r.error;
    if (!(o.gradBucketMb >= 0) || !std::isfinite(o.gradBucketMb)) {
      r.fail(bucket, "'grad_bucket_mb' must be a number >= 0 (MiB; 0: one "
                     "all-reduce per gradient)");
      return r.error;
    }
  }
  if (YAML::Node zero = root["zero"]) {
    if (!r.get(root, "zero", out.zero, "an integer"))
      return r.error;
    if (out.zero < 0 || out.zero > 3) {
      r.fail(zero, "'zero' must be 0, 1, 2 or 3 (the ZeRO stage), got " +
                       std::to_string(out.zero));
      return r.error;
    }
  }
  if (YAML::Node rc = root["recompute"]) {
    if (!r.get(root, "recompute", out.recompute, "a string"))
      return r.error;
    if (out.recompute != "none" && out.recompute != "full" &&
        out.recompute != "selective") {
      r.fail(rc, "'recompute' must be none, full or selective, got '" +
                     out.recompute + "'");
      return r.error;
    }
  }
  MixedPrecisionPassOptions &mp = out.mixedPrecision;
  if (YAML::Node p = root["precision"]) {
    if (!r.get(root, "precision", mp.precision, "a string"))
      return r.error;
    if (mp.precision != "fp32" && mp.precision != "bf16" &&
        mp.precision != "fp16") {
      r.fail(p, "'precision' must be fp32, bf16 or fp16, got '" + mp.precision +
                    "'");
      return r.error;
    }
    // fp16 scales the loss by default (PyTorch's GradScaler defaults).
    mp.lossScale = mp.precision == "fp16";
  }
  if (YAML::Node ls = root["loss_scale"]) {
    if (mp.precision != "fp16") {
      r.fail(ls, "'loss_scale' applies to 'precision: fp16' only (bf16 and "
                 "fp32 keep float32's exponent range), but the precision is " +
                     mp.precision);
      return r.error;
    }
    if (ls.IsScalar()) {
      std::string mode = ls.as<std::string>();
      if (mode != "dynamic" && mode != "none") {
        r.fail(ls, "'loss_scale' must be dynamic, none or a mapping "
                   "{initial, growth_interval, growth_factor, "
                   "backoff_factor, min}, got '" +
                       mode + "'");
        return r.error;
      }
      mp.lossScale = mode == "dynamic";
    } else {
      if (!r.checkKeys(ls, "loss_scale",
                       {"initial", "growth_interval", "growth_factor",
                        "backoff_factor", "min"}) ||
          !r.get(ls, "initial", mp.initialScale, "a number") ||
          !r.get(ls, "growth_interval", mp.growthInterval, "an integer") ||
          !r.get(ls, "growth_factor", mp.growthFactor, "a number") ||
          !r.get(ls, "backoff_factor", mp.backoffFactor, "a number") ||
          !r.get(ls, "min", mp.minScale, "a number"))
        return r.error;
      if (auto [key, what] = checkLossScale(mp); key) {
        r.fail(ls[key] ? ls[key] : ls,
               std::string("'loss_scale.") + key + "' must be " + what);
        return r.error;
      }
      mp.lossScale = true;
    }
  }
  if (YAML::Node opt = root["optimizer"]) {
    if (!r.checkKeys(opt, "optimizer",
                     {"kind", "lr", "betas", "eps", "momentum", "weight_decay",
                      "clip_norm", "warmup_steps", "total_steps", "min_lr"}) ||
        !r.get(opt, "kind", o.optimizer, "a string") ||
        !r.get(opt, "lr", o.lr, "a number") ||
        !r.get(opt, "eps", o.eps, "a number") ||
        !r.get(opt, "momentum", o.momentum, "a number") ||
        !r.get(opt, "weight_decay", o.weightDecay, "a number") ||
        !r.get(opt, "clip_norm", o.clipNorm, "a number") ||
        !r.get(opt, "warmup_steps", o.warmupSteps, "an integer") ||
        !r.get(opt, "total_steps", o.totalSteps, "an integer") ||
        !r.get(opt, "min_lr", o.minLr, "a number"))
      return r.error;
    if (YAML::Node betas = opt["betas"]) {
      std::vector<double> b;
      if (!r.get(opt, "betas", b, "a list of two numbers"))
        return r.error;
      if (b.size() != 2) {
        r.fail(betas, "'betas' must be a list of two numbers");
        return r.error;
      }
      o.beta1 = b[0];
      o.beta2 = b[1];
    }
    if (o.optimizer != "adamw" && o.optimizer != "sgd") {
      r.fail(opt["kind"],
             "unknown optimizer '" + o.optimizer + "' (expected adamw or sgd)");
      return r.error;
    }
  }
  return "";
}
