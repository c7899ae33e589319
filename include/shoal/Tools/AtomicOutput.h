//===- AtomicOutput.h - -o of MLIR's drivers, written atomically ---------===//
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

/// Where the value of `-o`/`--o` is in a command line (`-o FILE`,
/// `-o=FILE`; the last one counts, nothing after `--`).
struct OutputArgument {
  /// The argument holding the file name; -1 without -o.
  int index = -1;
  /// What comes before the name in that argument ("" or "-o=").
  std::string prefix;
  /// The file name ("" without -o).
  std::string file;
};

inline OutputArgument findOutputArgument(int argc, char **argv) {
  OutputArgument out;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef a = argv[i];
    if (a == "--")
      break;
    if ((a == "-o" || a == "--o") && i + 1 < argc) {
      out = {i + 1, "", argv[i + 1]};
      ++i;
    } else if (a.starts_with("-o=") || a.starts_with("--o=")) {
      std::size_t eq = a.find('=') + 1;
      out = {i, a.substr(0, eq).str(), a.substr(eq).str()};
    }
  }
  return out;
}

/// Runs `run(argc, argv)` (a main function that returns 0 on success) with
/// the value of `-o`/`--o` (`-o FILE`, `-o=FILE`) replaced as described
/// above; "-" (stdout) and a missing -o are passed through.
inline int runWithAtomicOutput(int argc, char **argv, llvm::StringRef tool,
                               llvm::function_ref<int(int, char **)> run) {
  OutputArgument where = findOutputArgument(argc, argv);
  if (where.index < 0)
    return run(argc, argv);
  std::vector<std::string> args(argv, argv + argc);
  int valueAt = where.index;
  const std::string &prefix = where.prefix;
  const std::string &output = where.file;
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
