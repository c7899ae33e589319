//===- Audit.h - Where a plan's ops would run ----------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// `shoal-run PLAN --backend cuda --audit` (docs/CUDA.md "Plan audit"): for
// every program of a plan, which of its ops the backend's kernels take
// (each kernel's own check, KernelCheckFn, on the plan's local types) and
// which would run on the CPU on host copies, which collectives and
// transfers would go through host buffers, and whether the step could be
// captured as one CUDA graph. It needs no GPU: the kernels' registrations
// and checks are plain functions of the plan.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_AUDIT_H
#define SHOAL_RUNTIME_AUDIT_H

#include "KernelRegistry.h"

#include <map>
#include <string>
#include <vector>

namespace shoal {
namespace plan {
class Plan;
}
namespace rt {

struct LoadedPlan;

struct PlanAudit {
  /// Per (op kind, where it runs): how many ops of the audited programs.
  /// Where: "device" (the backend's own kernel), "device: <library>" (a
  /// library's: cuBLAS, cuBLASLt), "host: <reason>" (the CPU
  /// kernel on host copies), "device collective", "host-staged: <reason>".
  std::map<std::pair<std::string, std::string>, int> ops;
  /// Ops that would run on the CPU on host copies.
  int hostFallbacks = 0;
  /// Collectives, transfers and ZeRO weight gathers through host buffers.
  int hostStaged = 0;
  /// Why the step could not be captured as one CUDA graph (empty: it
  /// could).
  std::vector<std::string> notCapturable;
  /// Programs audited (one rank of each).
  int programs = 0;
};

/// Audits `plan` (one loaded rank's program) for `backend`; `deviceComm`:
/// the collectives run on a device communicator (--comm nccl). Adds to
/// `out`.
void auditProgram(const LoadedPlan &plan, BackendKind backend, bool deviceComm,
                  PlanAudit &out);

/// Audits every program of the plan file `path` (one rank of each).
/// Throws Error for a plan that does not load.
PlanAudit auditPlanFile(const std::string &path, BackendKind backend,
                        bool deviceComm);

/// The audit as a table for people (one line per op kind and place, then
/// the totals and the CUDA graph verdict).
std::string formatAudit(const PlanAudit &audit, const std::string &backend,
                        const std::string &comm);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_AUDIT_H
