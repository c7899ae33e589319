//===- TestUtil.h - Helpers for the runtime tests ---------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_UNITTESTS_RUNTIME_TESTUTIL_H
#define SHOAL_UNITTESTS_RUNTIME_TESTUTIL_H

#include "Tensor.h"

#include "plan.pb.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace shoal {
namespace rt {
class Communicator;
namespace test {

/// Starts MPI (a world of one unless launched by mpiexec) once.
inline void ensureMpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    MPI_Init(nullptr, nullptr);
}

/// The MPI world as a Communicator, MPI started by ensureMpi (TestMain.cpp).
Communicator &mpiWorld();

inline int worldRank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int worldSize() {
  int s;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// Folders made by makeTempDir, removed when the process exits.
inline std::vector<std::string> &tempDirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

/// A fresh temporary folder under $TMPDIR or /tmp, removed at exit unless
/// SHOAL_KEEP_TEST_FILES is set.
inline std::string makeTempDir() {
  if (tempDirs().empty() && !std::getenv("SHOAL_KEEP_TEST_FILES"))
    std::atexit([] {
      for (const std::string &d : tempDirs()) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    });
  const char *base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base && *base ? base : "/tmp") + "/shoal-rt-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    throw std::runtime_error("mkdtemp failed");
  tempDirs().push_back(buf.data());
  return buf.data();
}

inline void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline Tensor randomF32(const Shape &shape, std::mt19937 &rng, float lo = -1.f,
                        float hi = 1.f) {
  Tensor t(DType::F32, shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  float *p = t.data<float>();
  for (int64_t i = 0; i < t.numElements(); ++i)
    p[i] = dist(rng);
  return t;
}

inline Tensor randomI64(const Shape &shape, std::mt19937 &rng, int64_t lo,
                        int64_t hi) {
  Tensor t(DType::I64, shape);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  int64_t *p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numElements(); ++i)
    p[i] = dist(rng);
  return t;
}

template <typename T>
inline Tensor makeTensor(const Shape &shape, const std::vector<T> &values) {
  Tensor t(DTypeOf<T>::value, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numElements());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <typename T> inline std::vector<T> toVector(const Tensor &t) {
  const T *p = t.data<T>();
  return std::vector<T>(p, p + t.numElements());
}

/// Row-major strides (in elements).
inline std::vector<int64_t> stridesOf(const Shape &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

/// Coordinates of flat index `i` in `shape`.
inline std::vector<int64_t> unravel(int64_t i, const Shape &shape) {
  std::vector<int64_t> c(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    c[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return c;
}

/// Flat index in `shape` of output coordinates `c` under numpy broadcasting
/// (shape right-aligned with c; size-1 dimensions repeat).
inline int64_t broadcastIndex(const std::vector<int64_t> &c,
                              const Shape &shape) {
  int64_t idx = 0;
  std::size_t lead = c.size() - shape.size();
  for (std::size_t d = 0; d < shape.size(); ++d)
    idx = idx * shape[d] + (shape[d] == 1 ? 0 : c[lead + d]);
  return idx;
}

inline void expectAllNear(const Tensor &actual,
                          const std::vector<double> &expected,
                          double tol = 1e-5) {
  ASSERT_EQ(actual.numElements(), static_cast<int64_t>(expected.size()));
  const float *p = actual.data<float>();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    double bound = tol * std::max(1.0, std::fabs(expected[i]));
    ASSERT_NEAR(p[i], expected[i], bound) << "at flat index " << i;
  }
}

/// Builds plans in tests.
class PlanBuilder {
public:
  explicit PlanBuilder(
      const std::vector<std::pair<std::string, int64_t>> &mesh) {
    plan.set_magic("shoal.plan");
    plan.set_format_version(1);
    plan.set_producer("shoal-runtime-tests");
    for (const auto &a : mesh) {
      auto *axis = plan.mutable_mesh()->add_axes();
      axis->set_name(a.first);
      axis->set_size(a.second);
    }
    prog = plan.add_programs();
    prog->set_role("main");
  }

  static void setType(plan::TensorType *t, plan::DType dtype,
                      const Shape &shape) {
    t->set_dtype(dtype);
    for (int64_t d : shape)
      t->add_shape(d);
  }
  static void setSharding(plan::Sharding *s,
                          const std::vector<std::vector<std::string>> &dims) {
    for (const auto &d : dims) {
      auto *dim = s->add_dims();
      for (const auto &a : d)
        dim->add_axes(a);
    }
  }

  /// Adds a value of local type (dtype, shape); returns its id.
  int value(const Shape &shape, plan::DType dtype = plan::F32) {
    setType(prog->add_values(), dtype, shape);
    return prog->values_size() - 1;
  }

  void input(const std::string &name, int v, const Shape &global,
             const std::vector<std::vector<std::string>> &sharding = {},
             plan::DType dtype = plan::F32) {
    port(prog->add_inputs(), name, v, global, sharding, dtype);
  }
  void output(const std::string &name, int v, const Shape &global,
              const std::vector<std::vector<std::string>> &sharding = {},
              plan::DType dtype = plan::F32) {
    port(prog->add_outputs(), name, v, global, sharding, dtype);
  }

  int source(const std::string &path) {
    auto *s = plan.add_sources();
    s->set_kind(plan::WeightSource::ONNX);
    s->set_path(path);
    return plan.sources_size() - 1;
  }

  void weight(const std::string &init, int v, int source, const Shape &global,
              const std::vector<std::vector<std::string>> &sharding = {},
              plan::DType dtype = plan::F32) {
    auto *w = prog->add_weights();
    w->set_value(v);
    w->set_initializer(init);
    w->set_source(source);
    setType(w->mutable_global_type(), dtype, global);
    setSharding(w->mutable_sharding(), sharding);
  }

  void constantF32(int v, const std::vector<float> &data) {
    auto *c = prog->add_constants();
    c->set_value(v);
    c->set_data(std::string(reinterpret_cast<const char *>(data.data()),
                            data.size() * sizeof(float)));
  }

  plan::Op &op(const std::string &kind, const std::vector<int> &inputs,
               const std::vector<int> &outputs, const std::string &name = "") {
    plan::Op *o = prog->add_ops();
    o->set_kind(kind);
    for (int i : inputs)
      o->add_inputs(i);
    for (int i : outputs)
      o->add_outputs(i);
    o->set_name(name.empty() ? kind + "_" + std::to_string(prog->ops_size())
                             : name);
    return *o;
  }

  static void attrInt(plan::Op &o, const std::string &name, int64_t v) {
    (*o.mutable_attrs())[name].set_i(v);
  }
  static void attrFloat(plan::Op &o, const std::string &name, double v) {
    (*o.mutable_attrs())[name].set_f(v);
  }
  static void attrInts(plan::Op &o, const std::string &name,
                       const std::vector<int64_t> &v) {
    auto *ints = (*o.mutable_attrs())[name].mutable_ints();
    for (int64_t x : v)
      ints->add_values(x);
  }
  static void attrStrings(plan::Op &o, const std::string &name,
                          const std::vector<std::string> &v) {
    auto *s = (*o.mutable_attrs())[name].mutable_strings();
    for (const auto &x : v)
      s->add_values(x);
  }

  void save(const std::string &path) const {
    writeFile(path, plan.SerializeAsString());
  }

  // Format version 2.

  using Axes = std::vector<std::pair<std::string, int64_t>>;
  using DimAxes = std::vector<std::vector<std::string>>;

  static void setMesh(plan::Mesh *m, const Axes &axes) {
    m->clear_axes();
    for (const auto &a : axes) {
      auto *axis = m->add_axes();
      axis->set_name(a.first);
      axis->set_size(a.second);
    }
  }

  /// Makes this a format-version-2 plan on a world of `n` ranks.
  void worldOf(int64_t n) {
    plan.set_format_version(2);
    setMesh(plan.mutable_mesh(), {{"world", n}});
  }

  /// Sets the current program's mesh, placement and micro-batches.
  void place(const Axes &mesh, int64_t offset = 0, int64_t stride = 0,
             int numMicroBatches = 1) {
    setMesh(prog->mutable_mesh(), mesh);
    prog->mutable_placement()->set_offset(offset);
    prog->mutable_placement()->set_stride(stride);
    prog->set_num_micro_batches(numMicroBatches);
  }

  /// Adds a program and makes it the current one.
  plan::Program *addProgram(const std::string &role) {
    prog = plan.add_programs();
    prog->set_role(role);
    return prog;
  }

  /// One side of a transfer.
  struct Side {
    Axes mesh;
    DimAxes sharding;
    int64_t offset = 0, stride = 0;
  };

  static void setTransfer(plan::Transfer *t, int id, const Shape &global,
                          const Side &src, const Side &dst,
                          plan::DType dtype = plan::F32) {
    t->set_id(id);
    setType(t->mutable_global_type(), dtype, global);
    for (auto [layout, side] : {std::make_pair(t->mutable_src(), &src),
                                std::make_pair(t->mutable_dst(), &dst)}) {
      setMesh(layout->mutable_mesh(), side->mesh);
      setSharding(layout->mutable_sharding(), side->sharding);
      layout->mutable_placement()->set_offset(side->offset);
      layout->mutable_placement()->set_stride(side->stride);
    }
  }

  plan::Op &send(int v, int id, const Shape &global, const Side &src,
                 const Side &dst, const std::string &name = "") {
    plan::Op &o = op("Send", {v}, {}, name);
    setTransfer(o.mutable_transfer(), id, global, src, dst);
    return o;
  }
  plan::Op &recv(int v, int id, const Shape &global, const Side &src,
                 const Side &dst, const std::string &name = "") {
    plan::Op &o = op("Recv", {}, {v}, name);
    setTransfer(o.mutable_transfer(), id, global, src, dst);
    return o;
  }

  plan::Plan plan;
  plan::Program *prog;

private:
  void port(plan::Port *p, const std::string &name, int v, const Shape &global,
            const std::vector<std::vector<std::string>> &sharding,
            plan::DType dtype) {
    p->set_name(name);
    p->set_value(v);
    setType(p->mutable_global_type(), dtype, global);
    setSharding(p->mutable_sharding(), sharding);
  }
};

/// A format-version-2 plan for a world of 4 with two programs over 2
/// micro-batches: "first" on ranks 0-1 (mesh mb=2, x=2) reads x[4, 6] (rows
/// over mb, columns over x) and sends each micro-batch's [2, 6] block
/// (transfer 7) to "second" on ranks 2-3 (mesh mb=2, y=2), which receives it
/// in rows over y and outputs y = h + h [4, 6] with rows over (mb, y).
inline PlanBuilder twoProgramPlan() {
  PlanBuilder b({{"world", 4}});
  b.worldOf(4);
  b.prog->set_role("first");
  b.place({{"mb", 2}, {"x", 2}}, 0, 0, 2);
  PlanBuilder::Side src{{{"x", 2}}, {{}, {"x"}}, 0, 0};
  PlanBuilder::Side dst{{{"y", 2}}, {{"y"}, {}}, 2, 0};
  int x = b.value({2, 3});
  b.input("x", x, {4, 6}, {{"mb"}, {"x"}});
  b.send(x, 7, {2, 6}, src, dst, "send_h");
  b.addProgram("second");
  b.place({{"mb", 2}, {"y", 2}}, 2, 0, 2);
  b.prog->set_stage(1);
  int h = b.value({1, 6});
  b.recv(h, 7, {2, 6}, src, dst, "recv_h");
  int y = b.value({1, 6});
  b.op("Add", {h, h}, {y}, "double");
  b.output("y", y, {4, 6}, {{"mb", "y"}, {}});
  auto *pipe = b.plan.mutable_pipeline();
  pipe->set_schedule("gpipe");
  pipe->set_stages(2);
  pipe->set_micro_batches(2);
  pipe->set_chunks(1);
  return b;
}

} // namespace test
} // namespace rt
} // namespace shoal

#endif // SHOAL_UNITTESTS_RUNTIME_TESTUTIL_H
