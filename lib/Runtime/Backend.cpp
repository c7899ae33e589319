//===- Backend.cpp - Backend selection and CUDA coverage --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"

#include "PlanLoader.h"

using namespace shoal::rt;

bool shoal::rt::parseBackend(const std::string &text, BackendKind &out) {
  if (text == "cpu")
    out = BackendKind::CPU;
  else if (text == "cuda")
    out = BackendKind::CUDA;
  else
    return false;
  return true;
}

const char *shoal::rt::backendName(BackendKind kind) {
  return kind == BackendKind::CUDA ? "cuda" : "cpu";
}

bool shoal::rt::cudaHasKernel(const LoadedPlan &plan, const OpInfo &op) {
  auto dtypeOf = [&](int v) { return plan.values[v].dtype; };
  switch (op.kind) {
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Mul:
    return dtypeOf(op.outputs[0]) == DType::F32 ||
           dtypeOf(op.outputs[0]) == DType::I64;
  case OpKind::LayerNormalization:
    // The kernel writes only Y; the optional Mean and InvStdDev outputs run
    // on the CPU.
    for (std::size_t i = 1; i < op.outputs.size(); ++i)
      if (op.outputs[i] >= 0)
        return false;
    return true;
  case OpKind::Gelu: {
    // The kernel broadcasts a bias along the last dimension only.
    if (op.inputs.size() < 2 || op.inputs[1] < 0)
      return true;
    const Shape &b = plan.values[op.inputs[1]].shape;
    const Shape &x = plan.values[op.inputs[0]].shape;
    return b.size() == 1 && !x.empty() && b[0] == x.back();
  }
  case OpKind::AddLayerNorm: {
    // The kernel takes scale and bias of the full normalized size.
    const Shape &x = plan.values[op.inputs[0]].shape;
    int64_t cols = 1;
    for (std::size_t i = op.attrs.axis; i < x.size(); ++i)
      cols *= x[i];
    for (std::size_t i = 2; i < op.inputs.size(); ++i)
      if (op.inputs[i] >= 0 && plan.values[op.inputs[i]].numElements() != cols)
        return false;
    return true;
  }
  case OpKind::Attention:
    return true;
  // No CUDA kernels (yet): these run on the CPU.
  case OpKind::Cast:
  case OpKind::Where:
  case OpKind::Equal:
  case OpKind::Less:
  case OpKind::Greater:
  case OpKind::LessOrEqual:
  case OpKind::GreaterOrEqual:
  case OpKind::And:
  case OpKind::Or:
  case OpKind::Xor:
  case OpKind::Not:
  case OpKind::Sin:
  case OpKind::Cos:
  case OpKind::Abs:
  case OpKind::Log:
  case OpKind::Reciprocal:
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Max:
  case OpKind::Min:
  case OpKind::Concat:
  case OpKind::Split:
  case OpKind::Slice:
  case OpKind::Expand:
  case OpKind::Pad:
  case OpKind::Conv:
  case OpKind::BatchNormalization:
  case OpKind::MaxPool:
  case OpKind::AveragePool:
  case OpKind::GlobalAveragePool:
  case OpKind::GlobalMaxPool:
  case OpKind::AllToAll:
  case OpKind::GatherElements:
  case OpKind::ScatterElements:
  case OpKind::TopK:
  case OpKind::Trilu:
    return false;
  // Training plans run on the CPU backend only (kTrainingNeedsCpu).
  case OpKind::SoftmaxCrossEntropy:
  case OpKind::SoftmaxCrossEntropyGrad:
  case OpKind::SoftmaxGrad:
  case OpKind::LayerNormalizationGrad:
  case OpKind::LayerNormalizationScaleGrad:
  case OpKind::GatherGrad:
  case OpKind::AdamW:
  case OpKind::SGD:
    return false;
  case OpKind::Gather:
  case OpKind::Reshape:
  case OpKind::Transpose:
  case OpKind::AllReduce:
  case OpKind::AllGather:
  case OpKind::LocalSlice:
    return true;
  case OpKind::Pow:
    return plan.values[op.inputs[0]].dtype == DType::F32 &&
           plan.values[op.inputs[1]].dtype == DType::F32;
  default:
    // Everything else is float-only on the GPU.
    return dtypeOf(op.outputs[0]) == DType::F32;
  }
}

#ifndef SHOAL_HAVE_CUDA
bool shoal::rt::cudaBackendBuilt() { return false; }

std::unique_ptr<ProgramRunner>
shoal::rt::makeCudaRunner(const LoadedPlan &plan, const CudaOptions &, int) {
  if (plan.training.present)
    throw Error(kTrainingNeedsCpu);
  throw Error("this shoal-run was built without the CUDA backend; rebuild "
              "with -DSHOAL_ENABLE_CUDA=ON on a machine with nvcc, or use "
              "--backend cpu");
}
#endif
