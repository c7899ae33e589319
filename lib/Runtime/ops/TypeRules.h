//===- TypeRules.h - Type rules of the op kinds -----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Every op kind has a type rule, named in its row of Ops.def and defined in
// the file of its family (ops/Elementwise.cpp, ops/Matrix.cpp, ...). checkOp
// (Ops.cpp) checks the arity and the value ids from the table, then calls
// the rule, which reads the op's attributes into OpAttrs, checks the input
// types and says which output types they give; checkOp compares those with
// the declared ones. Rules throw Error with a message that does not name the
// op (checkOp's caller adds that). No backend owns these rules.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_OPS_TYPERULES_H
#define SHOAL_RUNTIME_OPS_TYPERULES_H

#include "Ops.h"
#include "ops/ShapeRules.h"

#include <map>
#include <string>
#include <vector>

namespace shoal {
namespace plan {
class Attribute;
class Op;
} // namespace plan

namespace rt {

/// The attribute types of Ops.def's SHOAL_OP_ATTR rows.
enum class AttrType { Int, Float, String, Ints, Floats, Strings };

/// Typed access to an op's attribute map that rejects unknown names and
/// wrong types.
class AttrReader {
public:
  AttrReader(const plan::Op &op, std::map<std::string, AttrType> allowed);

  bool has(const std::string &name) const;
  int64_t getInt(const std::string &name, int64_t dflt) const;
  bool getBool(const std::string &name, bool dflt) const;
  float getFloat(const std::string &name, float dflt) const {
    return static_cast<float>(getDouble(name, dflt));
  }
  double getDouble(const std::string &name, double dflt) const;
  std::string getString(const std::string &name, const std::string &dflt) const;
  std::vector<int64_t> getInts(const std::string &name) const;
  std::vector<double> getFloats(const std::string &name) const;
  std::vector<std::string> getStrings(const std::string &name) const;
  /// Throws if `name` is absent.
  void require(const std::string &name) const;

private:
  const plan::Attribute *find(const std::string &name) const;
  [[noreturn]] void wrongType(const std::string &name) const;

  const plan::Op &op;
  std::map<std::string, AttrType> allowed;
};

/// What a type rule works on.
struct TypeRuleContext {
  const plan::Op &op;
  /// The op being built: kind, value ids (checked), attributes to fill in,
  /// aliasesInput to set.
  OpInfo &info;
  /// Local types of every value of the program.
  const std::vector<TensorType> &types;
  const Mesh &mesh;
  const AttrReader &attrs;
  /// The rule's result: the type of every output (checkOp compares them with
  /// the declared types of the outputs that are present).
  std::vector<TensorType> expected;

  OpKind kind() const { return info.kind; }
  OpAttrs &a() { return info.attrs; }
  /// The type of input `i`; null if absent.
  const TensorType *in(int i) const {
    if (i >= static_cast<int>(info.inputs.size()) || info.inputs[i] < 0)
      return nullptr;
    return &types[info.inputs[i]];
  }
  /// Input #0, which every kind with inputs requires.
  const TensorType &x() const { return *in(0); }
  /// The declared type of output `i` (present).
  const TensorType &declaredOutput(int i) const {
    return types[info.outputs[i]];
  }
  /// The input types, "f32[2, 3], none", for messages.
  std::string typesStr() const;
  /// Throws "<what> must be <dtype>, got <t>" unless t has `dtype`.
  void requireDType(const TensorType &t, DType dtype, const char *what) const;
  /// Throws unless t is f32, f16 or bf16 (computed in f32 on the CPU) or,
  /// with `f64`, f64 (computed in double).
  void requireFloat(const TensorType &t, const char *what,
                    bool f64 = false) const;
  /// Throws unless t has `dtype` or, when `dtype` is f16 or bf16, f32 (a
  /// mixed-precision operand: a norm's scale, a bias, a mask, which the
  /// kernels stage through f32 as they do the 16-bit ones): "<what> must be
  /// f32 or bf16 (like <like>), got <t>".
  void requireDTypeOrF32(const TensorType &t, DType dtype, const char *what,
                         const char *like) const;
  /// The dtype of output `i` of an op that computes in f32 from operands
  /// of `dtype`: f32 where `dtype` is f16 or bf16 and the output is declared
  /// f32 (a weight gradient, a sum kept in f32), else `dtype`. Throws "<what>
  /// must be f32 or bf16 (like <like>), got <t>" for a 16-bit `dtype` and an
  /// output declared neither.
  DType f32OrDType(int i, DType dtype, const char *what,
                   const char *like) const;
};

/// A type rule (the Rule column of Ops.def).
using TypeRule = void (*)(TypeRuleContext &ctx);

#define SHOAL_OP(Kind, Name, MinIn, MaxIn, MinOut, MaxOut, Flags, Rule)        \
  void Rule(TypeRuleContext &ctx);
#include "shoal/Schema/Ops.def"

//===----------------------------------------------------------------------===//
// Helpers of the rules
//===----------------------------------------------------------------------===//

/// Normalizes `axis` into [0, rank) (ONNX allows [-rank, rank)).
int64_t normalizeAxis(int64_t axis, int64_t rank, const char *what);

/// Reads and checks the mesh axes of list attribute `key` (required) into
/// `axes` (mesh axis indices) and their number of blocks into `groupSize`.
/// Only with `allowMicroBatch` may the list name the micro-batch axis.
void readMeshAxes(const AttrReader &attrs, const Mesh &mesh, const char *key,
                  std::vector<int> &axes, int64_t &groupSize,
                  bool allowMicroBatch);

/// Reads the `shard_axes` and `shard_size` of a vocabulary-parallel op
/// (Gather, GatherGrad, Vocab*), if it has them (`required`: it must) into
/// meshAxes, groupSize and shardSize, and checks that `local` rows or
/// classes are one ceil-sized block of shard_size over the group. Returns
/// whether the op is vocabulary-parallel.
bool readVocabShard(TypeRuleContext &ctx, int64_t local, bool required);

/// Every dtype but bool.
bool isNumeric(DType d);
/// f32, f64, f16 or bf16.
bool isFloat(DType d);
/// f16 or bf16.
bool isHalf(DType d);

/// Reads a list attribute of `n` entries, each >= `min`; absent or empty
/// gives `n` times `dflt`.
std::vector<int64_t> readList(const AttrReader &attrs, const char *name,
                              std::size_t n, int64_t dflt, int64_t min,
                              const char *what);

/// Throws "epsilon must be >= 0" unless it is.
void checkEpsilon(float epsilon);

/// The `rms` attribute of LayerNormalization and its gradients (0, the
/// default, or 1: RMSNorm); throws for any other value.
bool rmsAttr(const AttrReader &attrs);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_OPS_TYPERULES_H
