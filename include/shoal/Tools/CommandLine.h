//===- CommandLine.h - Tools' --help without LLVM's options -----*- C++ -*-===//
//
// The tools link LLVM libraries that register hundreds of options of their
// own (--aarch64-*, --amdgpu-*, ...). A tool puts its options in its own
// category and calls hideUnrelatedOptions before it registers anything
// else (MLIR's main functions register theirs when they run): --help then
// shows the tool's options, --help-hidden still lists every option, and
// every flag keeps working.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_TOOLS_COMMANDLINE_H
#define SHOAL_TOOLS_COMMANDLINE_H

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/CommandLine.h"

namespace shoal {

/// Hides from --help every option registered so far that is in none of
/// `categories` (LLVM's --help, --version and the like stay); unlike
/// llvm::cl::HideUnrelatedOptions, --help-hidden still lists them.
inline void hideUnrelatedOptions(
    llvm::ArrayRef<const llvm::cl::OptionCategory *> categories) {
  namespace cl = llvm::cl;
  llvm::StringMap<cl::Option *> &options = cl::getRegisteredOptions();
  llvm::SmallPtrSet<cl::Option *, 16> reallyHidden;
  for (auto &entry : options)
    if (entry.second->getOptionHiddenFlag() == cl::ReallyHidden)
      reallyHidden.insert(entry.second);
  cl::HideUnrelatedOptions(categories);
  for (auto &entry : options)
    if (entry.second->getOptionHiddenFlag() == cl::ReallyHidden &&
        !reallyHidden.contains(entry.second))
      entry.second->setHiddenFlag(cl::Hidden);
}

} // namespace shoal

#endif // SHOAL_TOOLS_COMMANDLINE_H
