//===- LtLayout.cpp - Row-major products as cuBLASLt calls ------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "LtLayout.h"

#include <stdexcept>

using namespace shoal::rt::lt;

LtMatmul shoal::rt::lt::toLt(const RowMajorProduct &p) {
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 1 || p.strideA < 0 ||
      p.strideB < 0 || p.strideC < 0)
    throw std::invalid_argument("a row-major product with a negative size "
                                "or stride, or no batch entry");
  LtMatmul lt;
  // C^T[n, m] = op(B)^T op(A)^T, column-major.
  lt.m = p.n;
  lt.n = p.m;
  lt.k = p.k;
  lt.batch = p.batch;
  // Row-major B stored [k, n] is column-major n x k with leading dimension
  // n: op(B)^T as it is. Stored [n, k] (transB) it is column-major k x n
  // with leading dimension k: transposed.
  lt.transFirst = p.transB;
  lt.ldFirst = p.transB ? p.k : p.n;
  // Row-major A stored [m, k] is column-major k x m (leading dimension k):
  // op(A)^T as it is; stored [k, m] (transA), m x k: transposed.
  lt.transSecond = p.transA;
  lt.ldSecond = p.transA ? p.m : p.k;
  lt.ldC = p.n;
  lt.strideFirst = p.strideB;
  lt.strideSecond = p.strideA;
  lt.strideC = p.strideC;
  switch (p.epilogue) {
  case Epilogue::None:
    break;
  case Epilogue::Bias:
    // Along the row-major result's columns: the column-major one's rows.
    lt.epilogue = "BIAS";
    lt.biasLength = lt.m;
    break;
  case Epilogue::Gelu:
    lt.epilogue = "GELU_AUX";
    lt.ldAux = lt.ldC;
    break;
  case Epilogue::GeluBias:
    lt.epilogue = "GELU_AUX_BIAS";
    lt.biasLength = lt.m;
    lt.ldAux = lt.ldC;
    break;
  case Epilogue::DGelu:
    lt.epilogue = "DGELU";
    lt.ldAux = lt.ldC;
    break;
  case Epilogue::BiasGradOfB:
    // op(B)^T is cuBLASLt's first operand (M x K): reduced over K.
    lt.epilogue = "BGRADA";
    lt.biasLength = lt.m;
    break;
  case Epilogue::BiasGradOfA:
    // op(A)^T is its second (K x N): reduced over K.
    lt.epilogue = "BGRADB";
    lt.biasLength = lt.n;
    break;
  }
  return lt;
}
