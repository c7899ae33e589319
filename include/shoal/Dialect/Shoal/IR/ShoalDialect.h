//===- ShoalDialect.h - shoal dialect ---------------------------*- C++ -*-===//

#ifndef SHOAL_DIALECT_SHOAL_IR_SHOALDIALECT_H
#define SHOAL_DIALECT_SHOAL_IR_SHOALDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "shoal/Dialect/Shoal/IR/ShoalDialect.h.inc"
#include "shoal/Dialect/Shoal/IR/ShoalEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "shoal/Dialect/Shoal/IR/ShoalAttributes.h.inc"

#endif // SHOAL_DIALECT_SHOAL_IR_SHOALDIALECT_H
