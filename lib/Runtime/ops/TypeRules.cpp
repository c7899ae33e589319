//===- TypeRules.cpp - What the type rules share ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "ops/TypeRules.h"

#include "plan.pb.h"

#include <fmt/format.h>

using namespace shoal;
using namespace shoal::rt;

namespace {

const char *attrTypeName(AttrType t) {
  switch (t) {
  case AttrType::Int:
    return "an integer (i)";
  case AttrType::Float:
    return "a float (f or i)";
  case AttrType::String:
    return "a string (s)";
  case AttrType::Ints:
    return "a list of integers (ints)";
  case AttrType::Floats:
    return "a list of floats (floats)";
  case AttrType::Strings:
    return "a list of strings (strings)";
  }
  return "?";
}

} // namespace

//===----------------------------------------------------------------------===//
// AttrReader
//===----------------------------------------------------------------------===//

AttrReader::AttrReader(const plan::Op &op,
                       std::map<std::string, AttrType> allowed)
    : op(op), allowed(std::move(allowed)) {
  for (const auto &kv : op.attrs())
    if (!this->allowed.count(kv.first)) {
      std::vector<std::string> names;
      for (const auto &a : this->allowed)
        names.push_back(a.first);
      throw Error(fmt::format(
          "unknown attribute '{}' ({})", kv.first,
          names.empty()
              ? std::string("this op takes no attributes")
              : fmt::format("expected one of: {}", fmt::join(names, ", "))));
    }
}

bool AttrReader::has(const std::string &name) const {
  return op.attrs().count(name);
}

int64_t AttrReader::getInt(const std::string &name, int64_t dflt) const {
  const plan::Attribute *a = find(name);
  if (!a)
    return dflt;
  if (a->value_case() != plan::Attribute::kI)
    wrongType(name);
  return a->i();
}

bool AttrReader::getBool(const std::string &name, bool dflt) const {
  int64_t v = getInt(name, dflt ? 1 : 0);
  if (v != 0 && v != 1)
    throw Error(fmt::format("attribute '{}' must be 0 or 1, got {}", name, v));
  return v != 0;
}

double AttrReader::getDouble(const std::string &name, double dflt) const {
  const plan::Attribute *a = find(name);
  if (!a)
    return dflt;
  if (a->value_case() == plan::Attribute::kF)
    return a->f();
  if (a->value_case() == plan::Attribute::kI)
    return static_cast<double>(a->i());
  wrongType(name);
}

std::string AttrReader::getString(const std::string &name,
                                  const std::string &dflt) const {
  const plan::Attribute *a = find(name);
  if (!a)
    return dflt;
  if (a->value_case() != plan::Attribute::kS)
    wrongType(name);
  return a->s();
}

std::vector<int64_t> AttrReader::getInts(const std::string &name) const {
  const plan::Attribute *a = find(name);
  if (!a)
    return {};
  if (a->value_case() != plan::Attribute::kInts)
    wrongType(name);
  return {a->ints().values().begin(), a->ints().values().end()};
}

std::vector<double> AttrReader::getFloats(const std::string &name) const {
  const plan::Attribute *a = find(name);
  if (!a)
    return {};
  if (a->value_case() != plan::Attribute::kFloats)
    wrongType(name);
  return {a->floats().values().begin(), a->floats().values().end()};
}

std::vector<std::string> AttrReader::getStrings(const std::string &name) const {
  const plan::Attribute *a = find(name);
  if (!a)
    return {};
  if (a->value_case() != plan::Attribute::kStrings)
    wrongType(name);
  return {a->strings().values().begin(), a->strings().values().end()};
}

void AttrReader::require(const std::string &name) const {
  if (!has(name))
    throw Error(fmt::format("missing required attribute '{}' ({})", name,
                            attrTypeName(allowed.at(name))));
}

const plan::Attribute *AttrReader::find(const std::string &name) const {
  auto it = op.attrs().find(name);
  return it == op.attrs().end() ? nullptr : &it->second;
}

void AttrReader::wrongType(const std::string &name) const {
  throw Error(fmt::format("attribute '{}' must be {}", name,
                          attrTypeName(allowed.at(name))));
}

//===----------------------------------------------------------------------===//
// TypeRuleContext and helpers
//===----------------------------------------------------------------------===//

std::string TypeRuleContext::typesStr() const {
  std::vector<std::string> parts;
  for (int v : info.inputs)
    parts.push_back(v < 0 ? std::string("none") : types[v].str());
  return fmt::format("{}", fmt::join(parts, ", "));
}

void TypeRuleContext::requireDType(const TensorType &t, DType dtype,
                                   const char *what) const {
  if (t.dtype != dtype)
    throw Error(
        fmt::format("{} must be {}, got {}", what, dtypeName(dtype), t.str()));
}

int64_t shoal::rt::normalizeAxis(int64_t axis, int64_t rank, const char *what) {
  if (axis < -rank || axis >= rank)
    throw Error(
        fmt::format("{} {} is out of range for rank {}", what, axis, rank));
  return axis < 0 ? axis + rank : axis;
}

bool shoal::rt::isNumeric(DType d) { return d != DType::Bool; }

bool shoal::rt::isFloat(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::F16 ||
         d == DType::BF16;
}

void TypeRuleContext::requireFloat(const TensorType &t, const char *what,
                                   bool f64) const {
  if (!isFloat(t.dtype) || (t.dtype == DType::F64 && !f64))
    throw Error(fmt::format("{} must be f32, {}f16 or bf16, got {}", what,
                            f64 ? "f64, " : "", t.str()));
}

bool shoal::rt::isHalf(DType d) { return d == DType::F16 || d == DType::BF16; }

void TypeRuleContext::requireDTypeOrF32(const TensorType &t, DType dtype,
                                        const char *what,
                                        const char *like) const {
  if (!isHalf(dtype))
    return requireDType(t, dtype, what);
  if (t.dtype != dtype && t.dtype != DType::F32)
    throw Error(fmt::format("{} must be f32 or {} (like {}), got {}", what,
                            dtypeName(dtype), like, t.str()));
}

DType TypeRuleContext::f32OrDType(int i, DType dtype, const char *what,
                                  const char *like) const {
  if (!isHalf(dtype) || i >= static_cast<int>(info.outputs.size()) ||
      info.outputs[i] < 0)
    return dtype;
  const TensorType &declared = declaredOutput(i);
  if (declared.dtype == DType::F32)
    return DType::F32;
  if (declared.dtype != dtype)
    throw Error(fmt::format("{} must be f32 or {} (like {}), got {}", what,
                            dtypeName(dtype), like, declared.str()));
  return dtype;
}

std::vector<int64_t> shoal::rt::readList(const AttrReader &attrs,
                                         const char *name, std::size_t n,
                                         int64_t dflt, int64_t min,
                                         const char *what) {
  std::vector<int64_t> v = attrs.getInts(name);
  if (v.empty())
    v.assign(n, dflt);
  if (v.size() != n)
    throw Error(fmt::format("attribute '{}' {} has {} entries, expected {} "
                            "({})",
                            name, formatShape(v), v.size(), n, what));
  for (int64_t x : v)
    if (x < min)
      throw Error(fmt::format("attribute '{}' {} has an entry below {}", name,
                              formatShape(v), min));
  return v;
}

bool shoal::rt::rmsAttr(const AttrReader &attrs) {
  int64_t rms = attrs.getInt("rms", 0);
  if (rms != 0 && rms != 1)
    throw Error(fmt::format("rms must be 0 or 1, got {}", rms));
  return rms == 1;
}

void shoal::rt::checkEpsilon(float epsilon) {
  if (!(epsilon >= 0))
    throw Error(fmt::format("epsilon must be >= 0, got {}", epsilon));
}
