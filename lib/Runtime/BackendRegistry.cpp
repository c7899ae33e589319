//===- BackendRegistry.cpp - Backends that register themselves --*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "BackendRegistry.h"

#include "Backend.h"
#include "Communicator.h"
#include "Device.h"

#include <fmt/format.h>

#include <string>

using namespace shoal::rt;

namespace {

BackendInfo backends[kNumBackends];
bool registered[kNumBackends] = {};

struct Loader {
  void (*load)() = nullptr;
  const char *worldName = nullptr;
  bool tried = false;
  std::string error;
};
Loader loaders[kNumBackends];

/// Loads backend `i` if it has a loader and is not registered yet; throws
/// the loader's Error (every time it is asked).
void ensureLoaded(int i) {
  Loader &l = loaders[i];
  if (registered[i] || !l.load)
    return;
  if (!l.tried) {
    l.tried = true;
    try {
      l.load();
    } catch (const Error &e) {
      l.error = e.what();
    }
  }
  if (!registered[i] && !l.error.empty())
    throw Error(l.error);
}

} // namespace

void shoal::rt::registerBackendLoader(BackendKind kind,
                                      const char *deviceWorldName,
                                      void (*load)()) {
  Loader &l = loaders[static_cast<int>(kind)];
  l = Loader();
  l.load = load;
  l.worldName = deviceWorldName;
}

void shoal::rt::registerBackend(const BackendInfo &info) {
  backends[static_cast<int>(info.kind)] = info;
  registered[static_cast<int>(info.kind)] = true;
}

const BackendInfo *shoal::rt::findBackend(BackendKind kind) {
  int i = static_cast<int>(kind);
  ensureLoaded(i);
  return registered[i] ? &backends[i] : nullptr;
}

const BackendInfo *shoal::rt::findBackendWithWorld(const std::string &name) {
  for (int i = 0; i < kNumBackends; ++i)
    if (!registered[i] && loaders[i].worldName && name == loaders[i].worldName)
      ensureLoaded(i);
  for (int i = 0; i < kNumBackends; ++i)
    if (registered[i] && backends[i].makeDeviceWorld &&
        backends[i].deviceWorldName && name == backends[i].deviceWorldName)
      return &backends[i];
  return nullptr;
}

std::unique_ptr<Device> shoal::rt::makeDevice(BackendKind kind, int localRank,
                                              Precision matmul) {
  bool any = false;
  for (int i = 0; i < kNumBackends; ++i)
    any |= registered[i] || loaders[i].load;
  if (!any)
    throw Error("no backend is registered (the tool must call "
                "registerAllBackends, BackendRegistry.h)");
  const BackendInfo *b = findBackend(kind);
  if (!b || !b->makeDevice) {
    const char *title = backendTitle(kind);
    throw Error(fmt::format(
        "no {} device: this build of shoal has no {} backend (configure "
        "with -DSHOAL_ENABLE_{}=ON where its toolkit exists); use --backend "
        "cpu",
        title, title, title));
  }
  return b->makeDevice(localRank, matmul);
}

std::unique_ptr<Communicator>
shoal::rt::makeDeviceWorld(const std::string &name, Communicator &bootstrap,
                           Device &device) {
  const BackendInfo *b = findBackendWithWorld(name);
  if (!b)
    throw Error(fmt::format("--comm {}: this build of shoal has no backend "
                            "with that communicator",
                            name));
  return b->makeDeviceWorld(bootstrap, device);
}

void shoal::rt::registerBackendKernels(BackendKind kind) {
  if (const BackendInfo *b = findBackend(kind); b && b->registerKernels)
    b->registerKernels();
}

void shoal::rt::configureBackends(int ranksOnNode) {
  for (int i = 0; i < kNumBackends; ++i)
    if (registered[i] && backends[i].configureProcess)
      backends[i].configureProcess(ranksOnNode);
}
