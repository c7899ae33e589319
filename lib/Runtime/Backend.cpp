//===- Backend.cpp - Backend names ------------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Backend.h"

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

const char *shoal::rt::backendTitle(BackendKind kind) {
  return kind == BackendKind::CUDA ? "CUDA" : "CPU";
}
