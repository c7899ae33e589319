//===- AtomicOutput.h - -o of MLIR's drivers, written atomically -*- C++
//-*-===//
//
// shoal-opt and shoal-translate hand their command line to MLIR's drivers,
// which open `-o FILE` themselves: truncating whatever FILE is, the target
// of a symlink included. runWithAtomicOutput gives the driver a fresh
// temporary file next to FILE instead (through /dev/fd, so the driver opens
// that very file) and renames it over FILE when the driver succeeds: a
// symlink at FILE is replaced, never followed, and a failed run leaves FILE
// as it was.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_TOOLS_ATOMICOUTPUT_H
#define SHOAL_TOOLS_ATOMICOUTPUT_H

#include "shoal/Support/Files.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace shoal {

/// Runs `run(argc, argv)` (a main function that returns 0 on success) with
/// the value of `-o`/`--o` (`-o FILE`, `-o=FILE`) replaced as described
/// above; "-" (stdout) and a missing -o are passed through.
inline int runWithAtomicOutput(int argc, char **argv, llvm::StringRef tool,
                               llvm::function_ref<int(int, char **)> run) {
  std::vector<std::string> args(argv, argv + argc);
  int valueAt = -1; // the argument holding the file name
  std::string prefix;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef a = args[i];
    if (a == "--")
      break;
    if ((a == "-o" || a == "--o") && i + 1 < argc) {
      valueAt = i + 1;
      prefix.clear();
      ++i;
    } else if (a.starts_with("-o=") || a.starts_with("--o=")) {
      valueAt = i;
      prefix = a.substr(0, a.find('=') + 1).str();
    }
  }
  if (valueAt < 0)
    return run(argc, argv);
  std::string output = args[valueAt].substr(prefix.size());
  if (output == "-")
    return run(argc, argv);
  AtomicFile file(output);
  if (!file.ok()) {
    llvm::errs() << tool << ": error: " << file.error() << "\n";
    return 1;
  }
  args[valueAt] = prefix + "/dev/fd/" + std::to_string(file.descriptor());
  std::vector<char *> argvOut;
  for (std::string &a : args)
    argvOut.push_back(a.data());
  argvOut.push_back(nullptr);
  int rc = run(argc, argvOut.data());
  if (rc != 0)
    return rc; // ~AtomicFile removes the temporary file
  if (!file.commit()) {
    llvm::errs() << tool << ": error: " << file.error() << "\n";
    return 1;
  }
  return 0;
}

} // namespace shoal

#endif // SHOAL_TOOLS_ATOMICOUTPUT_H
