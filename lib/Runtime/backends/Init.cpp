//===- Init.cpp - Registering the backends of this build --------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The one place that knows which backends a build has (as IREE's
// hal/drivers/init.c): the ShoalRuntimeBackends library, compiled with
// SHOAL_HAVE_CUDA when the CUDA backend is built. The tools call
// registerAllBackends once at start-up. The CPU backend is linked in; the
// CUDA backend is a module (libshoal_cuda_backend.so next to the tools, in
// ../lib, or SHOAL_CUDA_BACKEND) loaded when a run first asks for a CUDA
// device or NCCL, so that a CPU run neither links nor maps the CUDA
// libraries.
//
//===----------------------------------------------------------------------===//

#include "BackendRegistry.h"
#include "shoal/Runtime/Runtime.h"

#ifdef SHOAL_HAVE_CUDA
#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include <dlfcn.h>
#endif

namespace shoal {
namespace rt {
// Each backend's registration (cpu/Backend.h, cuda/Backend.h), declared
// here so that no file outside a backend's folder includes its headers.
void registerCpuBackend();
} // namespace rt
} // namespace shoal

#ifdef SHOAL_HAVE_CUDA
namespace {

/// The CUDA backend module: SHOAL_CUDA_BACKEND, else
/// libshoal_cuda_backend.so in ../lib of the running tool's folder.
std::string cudaModulePath() {
  if (const char *p = std::getenv("SHOAL_CUDA_BACKEND"); p && *p)
    return p;
  std::error_code ec;
  std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return "libshoal_cuda_backend.so";
  return (exe.parent_path().parent_path() / "lib" / "libshoal_cuda_backend.so")
      .string();
}

void loadCudaModule() {
  std::string path = cudaModulePath();
  void *module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!module) {
    const char *why = ::dlerror();
    throw shoal::rt::Error(fmt::format(
        "cannot load the CUDA backend {}: {} (set SHOAL_CUDA_BACKEND to the "
        "module's path; --backend cpu needs none)",
        path, why ? why : "unknown error"));
  }
  auto entry =
      reinterpret_cast<void (*)()>(::dlsym(module, "shoalRegisterCudaBackend"));
  if (!entry)
    throw shoal::rt::Error(fmt::format(
        "{} is no shoal CUDA backend (no shoalRegisterCudaBackend)", path));
  entry();
}

} // namespace
#endif

void shoal::rt::registerAllBackends() {
  static const bool registered = [] {
    registerCpuBackend();
#ifdef SHOAL_HAVE_CUDA
    registerBackendLoader(BackendKind::CUDA, "nccl", loadCudaModule);
#endif
    return true;
  }();
  (void)registered;
}
