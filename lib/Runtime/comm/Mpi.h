//===- Mpi.h - The MPI communicator -----------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_COMM_MPI_H
#define SHOAL_RUNTIME_COMM_MPI_H

#include "Communicator.h"

#include <mpi.h>

namespace shoal {
namespace rt {

/// The MPI communicator under `comm`, or MPI_COMM_NULL when `comm` is not an
/// MPI communicator. For code not yet ported to Communicator only.
MPI_Comm mpiCommOf(Communicator &comm);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_COMM_MPI_H
