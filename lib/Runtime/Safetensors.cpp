//===- Safetensors.cpp - Reading safetensors checkpoints --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Safetensors.h"

#include "Half.h"
#include "Json.h"
#include "Sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

using namespace shoal::rt;
namespace fs = std::filesystem;

namespace {

/// safetensors' own limit on the header (100 MB).
constexpr uint64_t kMaxHeader = 100'000'000;

const char *kConvertHint = "a torch.save'd state dict (pytorch_model.bin, "
                           ".pt) is converted by "
                           "scripts/torch_to_safetensors.py";

/// A non-negative integer of a header (shape entries, offsets).
bool jsonCount(const JsonValue &v, uint64_t &out) {
  if (v.kind != JsonValue::Number || v.text.empty() || v.text.size() > 18)
    return false;
  uint64_t n = 0;
  for (char c : v.text) {
    if (c < '0' || c > '9')
      return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  out = n;
  return true;
}

std::string shapeText(const Shape &s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

bool isFloat(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

float toFloat(DType d, const uint8_t *p) {
  if (d == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::BF16 ? bf16ToFloat(h) : halfToFloat(h);
}

void fromFloat(DType d, float f, uint8_t *p) {
  if (d == DType::F32) {
    std::memcpy(p, &f, 4);
    return;
  }
  uint16_t h = d == DType::BF16 ? floatToBF16(f) : floatToHalf(f);
  std::memcpy(p, &h, 2);
}

} // namespace

bool shoal::rt::safetensorsToDType(const std::string &name, DType &dtype) {
  static const std::pair<const char *, DType> table[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
      {"F64", DType::F64}, {"I64", DType::I64}, {"I32", DType::I32},
      {"I8", DType::I8},   {"U8", DType::U8},   {"BOOL", DType::Bool}};
  for (const auto &[n, d] : table)
    if (name == n) {
      dtype = d;
      return true;
    }
  return false;
}

const char *shoal::rt::safetensorsDTypeName(DType d) {
  switch (d) {
  case DType::F32:
    return "F32";
  case DType::F16:
    return "F16";
  case DType::BF16:
    return "BF16";
  case DType::F64:
    return "F64";
  case DType::I64:
    return "I64";
  case DType::I32:
    return "I32";
  case DType::I8:
    return "I8";
  case DType::U8:
    return "U8";
  case DType::Bool:
    return "BOOL";
  }
  return "?";
}

SafetensorsWeights::SafetensorsWeights(const std::string &path) : root(path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(fmt::format("{}: no such file or folder", path));
  if (!fs::is_directory(path, ec)) {
    indexFile(path);
    return;
  }
  folder = true;
  fs::path single = fs::path(path) / "model.safetensors";
  fs::path indexPath = fs::path(path) / "model.safetensors.index.json";
  if (fs::is_regular_file(single, ec)) {
    indexFile(single.string());
    return;
  }
  if (!fs::is_regular_file(indexPath, ec))
    throw Error(
        fmt::format("folder {} holds neither model.safetensors nor "
                    "model.safetensors.index.json (the files of Hugging Face's "
                    "save_pretrained); {}",
                    path, kConvertHint));
  std::string text;
  {
    std::ifstream in(indexPath);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in)
      throw Error(fmt::format("cannot read {}", indexPath.string()));
    text = ss.str();
  }
  std::string what = fmt::format("{} is not a valid index", indexPath.string());
  JsonValue root = parseJson(text.data(), text.size(), what);
  const JsonValue *map = root.find("weight_map");
  if (root.kind != JsonValue::Object || !map || map->kind != JsonValue::Object)
    throw Error(fmt::format("{} (no \"weight_map\" object)", what));
  // Each shard once, in the order of first mention.
  std::map<std::string, std::size_t> shards;
  for (const auto &[name, file] : map->members) {
    if (file.kind != JsonValue::String)
      throw Error(
          fmt::format("{}: the file of '{}' is not a string", what, name));
    fs::path rel(file.text);
    if (file.text.empty() || rel.has_root_path() || rel.has_parent_path() ||
        file.text == "." || file.text == "..")
      throw Error(fmt::format("{}: '{}' names the file '{}', which is not a "
                              "file of the folder",
                              what, name, file.text));
    if (!shards.count(file.text)) {
      std::size_t before = files.size();
      indexFile((fs::path(path) / rel).string());
      shards[file.text] = before;
    }
    const SafetensorsTensor *t = find(name);
    if (!t || t->file != shards[file.text])
      throw Error(fmt::format("{} names '{}' in {}, whose header has no such "
                              "tensor",
                              indexPath.string(), name, file.text));
  }
}

SafetensorsWeights::~SafetensorsWeights() = default;
SafetensorsWeights::SafetensorsWeights(SafetensorsWeights &&) noexcept =
    default;

void SafetensorsWeights::indexFile(const std::string &path) {
  auto mapped = std::make_unique<MappedFile>(path, "safetensors file");
  const MappedFile &f = *mapped;
  auto bad = [&](const std::string &why) {
    return Error(
        fmt::format("{} is not a valid safetensors file: {}", path, why));
  };
  if (f.size() < 8)
    throw bad(fmt::format("{} bytes, less than the 8-byte header length; {}",
                          f.size(), kConvertHint));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | f.data()[i];
  if (n < 2 || n > kMaxHeader || n > f.size() - 8)
    throw bad(
        fmt::format("its header length {} does not fit the file of {} "
                    "bytes{}",
                    n, f.size(),
                    f.data()[0] == 'P' && f.data()[1] == 'K'
                        ? fmt::format(" (a zip archive: {})", kConvertHint)
                        : std::string()));
  const char *header = reinterpret_cast<const char *>(f.data() + 8);
  if (header[0] != '{')
    throw bad(
        fmt::format("its header does not start with '{{'; {}", kConvertHint));
  JsonValue h = parseJson(
      header, n,
      fmt::format("{} is not a valid safetensors file: its header", path));
  if (h.kind != JsonValue::Object)
    throw bad("its header is not a JSON object");
  uint64_t dataStart = 8 + n, dataSize = f.size() - dataStart;
  std::size_t fileIndex = files.size();
  for (const auto &[name, v] : h.members) {
    if (name == "__metadata__")
      continue;
    const JsonValue *dtype = v.find("dtype"), *shape = v.find("shape"),
                    *offsets = v.find("data_offsets");
    if (v.kind != JsonValue::Object || !dtype ||
        dtype->kind != JsonValue::String || !shape ||
        shape->kind != JsonValue::Array || !offsets ||
        offsets->kind != JsonValue::Array || offsets->items.size() != 2)
      throw bad(fmt::format("tensor '{}' needs \"dtype\", \"shape\" and "
                            "\"data_offsets\" [begin, end]",
                            name));
    SafetensorsTensor t;
    t.name = name;
    t.dtypeName = dtype->text;
    t.known = safetensorsToDType(t.dtypeName, t.dtype);
    t.file = fileIndex;
    uint64_t elements = 1;
    for (const JsonValue &d : shape->items) {
      uint64_t dim;
      if (!jsonCount(d, dim) || dim > (uint64_t(1) << 40))
        throw bad(fmt::format("tensor '{}' has a bad shape entry '{}'", name,
                              d.text));
      t.shape.push_back(static_cast<int64_t>(dim));
      if (dim != 0 && elements > (uint64_t(1) << 62) / dim)
        throw bad(fmt::format("tensor '{}' has too many elements", name));
      elements *= dim;
    }
    uint64_t begin, end;
    if (!jsonCount(offsets->items[0], begin) ||
        !jsonCount(offsets->items[1], end) || begin > end || end > dataSize)
      throw bad(fmt::format("tensor '{}' has data_offsets [{}, {}] outside "
                            "its {} bytes of data",
                            name, offsets->items[0].text,
                            offsets->items[1].text, dataSize));
    t.offset = dataStart + begin;
    t.size = end - begin;
    if (t.known && elements * dtypeSize(t.dtype) != t.size)
      throw bad(fmt::format("tensor '{}' is {} {} ({} bytes) but has {} "
                            "bytes of data",
                            name, t.dtypeName, shapeText(t.shape),
                            elements * dtypeSize(t.dtype), t.size));
    if (!index.emplace(name, t).second)
      throw bad(fmt::format("tensor '{}' appears twice", name));
  }
  files.push_back(std::move(mapped));
}

std::vector<std::string> SafetensorsWeights::names() const {
  std::vector<std::string> out;
  for (const auto &entry : index)
    out.push_back(entry.first);
  return out;
}

const SafetensorsTensor *
SafetensorsWeights::find(const std::string &name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &it->second;
}

const std::string &
SafetensorsWeights::filePath(const SafetensorsTensor &t) const {
  return files[t.file]->path();
}

Tensor SafetensorsWeights::loadBlock(const std::string &name,
                                     const TensorType &global,
                                     const Shape &offsets, const Shape &local,
                                     const Shape &sourceShape) const {
  const SafetensorsTensor *t = find(name);
  if (!t)
    throw Error(fmt::format("{} has no tensor '{}'", root, name));
  const std::string &file = filePath(*t);
  const Shape &expected = sourceShape.empty() ? global.shape : sourceShape;
  if (t->shape != expected)
    throw Error(fmt::format("tensor '{}' of {} has shape {}, but the model's "
                            "weight has shape {}",
                            name, file, shapeText(t->shape),
                            shapeText(expected)));
  bool convert = t->known && t->dtype != global.dtype && isFloat(t->dtype) &&
                 isFloat(global.dtype);
  if (!t->known || (t->dtype != global.dtype && !convert))
    throw Error(fmt::format("tensor '{}' of {} is {}, but the model's weight "
                            "is {} (F32, BF16 and F16 convert to each other; "
                            "other types must be equal)",
                            name, file, t->dtypeName,
                            safetensorsDTypeName(global.dtype)));
  const uint8_t *src = files[t->file]->data() + t->offset;
  Tensor block(t->dtype, local);
  if (block.numElements() > 0)
    extractBlock(src, global.shape, dtypeSize(t->dtype), offsets, local,
                 block.rawData());
  if (t->dtype == DType::Bool) {
    uint8_t *b = block.data<uint8_t>();
    for (int64_t i = 0, e = block.numElements(); i < e; ++i)
      b[i] = b[i] != 0;
  }
  if (!convert)
    return block;
  Tensor out(global.dtype, local);
  const auto *in = static_cast<const uint8_t *>(block.rawData());
  auto *o = static_cast<uint8_t *>(out.rawData());
  std::size_t si = dtypeSize(t->dtype), so = dtypeSize(global.dtype);
  for (int64_t i = 0, e = out.numElements(); i < e; ++i)
    fromFloat(global.dtype, toFloat(t->dtype, in + i * si), o + i * so);
  return out;
}

Tensor SafetensorsWeights::loadTensor(const std::string &name) const {
  const SafetensorsTensor *t = find(name);
  if (!t)
    throw Error(fmt::format("{} has no tensor '{}'", root, name));
  if (!t->known)
    throw Error(fmt::format("tensor '{}' of {} is {}, which shoal does not "
                            "read",
                            name, filePath(*t), t->dtypeName));
  return loadBlock(name, {t->dtype, t->shape}, Shape(t->shape.size(), 0),
                   t->shape);
}

WeightNameMatch
shoal::rt::matchWeightNames(const std::vector<std::string> &weights,
                            const std::vector<std::string> &tensors,
                            const std::string *givenPrefix,
                            const std::string &what) {
  std::set<std::string> names(tensors.begin(), tensors.end());
  auto score = [&](const std::string &prefix) {
    std::size_t n = 0;
    for (const std::string &w : weights)
      if (w.size() > prefix.size() &&
          w.compare(0, prefix.size(), prefix) == 0 &&
          names.count(w.substr(prefix.size())))
        ++n;
    return n;
  };
  WeightNameMatch match;
  if (givenPrefix) {
    match.prefix = *givenPrefix;
  } else {
    std::set<std::string> candidates = {""};
    for (const std::string &w : weights)
      for (std::size_t i = 0; i + 1 < w.size(); ++i)
        if (w[i] == '.' && names.count(w.substr(i + 1)))
          candidates.insert(w.substr(0, i + 1));
    std::size_t best = 0;
    std::vector<std::string> tied;
    for (const std::string &c : candidates) {
      std::size_t s = score(c);
      if (s > best) {
        best = s;
        tied = {c};
      } else if (s == best && s > 0) {
        tied.push_back(c);
      }
    }
    if (tied.size() > 1) {
      std::vector<std::string> quoted;
      for (const std::string &c : tied)
        quoted.push_back(fmt::format("'{}'", c));
      throw Error(fmt::format("the names of the model's weights match the "
                              "tensors of {} equally well ({} of {}) with "
                              "any of the prefixes {} stripped; give the "
                              "prefix with --hf-prefix",
                              what, best, weights.size(),
                              fmt::join(quoted, ", ")));
    }
    if (!tied.empty())
      match.prefix = tied[0];
  }
  std::set<std::string> used;
  for (const std::string &w : weights) {
    std::string n = strippedName(match, w);
    if (w.compare(0, match.prefix.size(), match.prefix) == 0 &&
        names.count(n)) {
      match.matched[w] = n;
      used.insert(n);
    } else {
      match.missing.push_back(w);
    }
  }
  std::sort(match.missing.begin(), match.missing.end());
  for (const std::string &n : names)
    if (!used.count(n))
      match.unused.push_back(n);
  return match;
}

std::string shoal::rt::strippedName(const WeightNameMatch &match,
                                    const std::string &weight) {
  const std::string &p = match.prefix;
  if (!p.empty() && weight.size() > p.size() &&
      weight.compare(0, p.size(), p) == 0)
    return weight.substr(p.size());
  return weight;
}
