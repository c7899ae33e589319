//===- ShoalInterfaces.td - shoal op interfaces ------------*- tablegen -*-===//

#ifndef SHOAL_DIALECT_SHOAL_IR_SHOALINTERFACES_TD
#define SHOAL_DIALECT_SHOAL_IR_SHOALINTERFACES_TD

include "mlir/IR/OpBase.td"

def Shoal_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::shoal";
  let description = [{
    The op's sharding rule: an einsum-like mapping of every operand and
    result dimension to factors (as in OpenXLA Shardy). A factor that is
    split over a mesh axis splits every dimension it appears in. A
    `reduction` factor appears only in operands; splitting it leaves partial
    sums that need an all-reduce. A `blocked` factor must stay whole (the
    normalized axis of a softmax, the indexed axis of a gather).
  }];
  let methods = [
    InterfaceMethod<"Returns the op's sharding rule.",
      "::shoal::ShardingRule", "getShardingRule">,
  ];
}

def Shoal_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::shoal";
  let description = [{
    The op's cost for the planner: floating-point operations and bytes
    moved, on the op's own (global or local) types.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations of one execution.",
      "int64_t", "getFlops", (ins), [{}], [{
        // Default: one operation per result element.
        int64_t n = 0;
        for (::mlir::Type t : $_op->getResultTypes())
          if (auto rt = ::llvm::dyn_cast<::mlir::RankedTensorType>(t))
            if (rt.hasStaticShape())
              n += rt.getNumElements();
        return n;
      }]>,
    InterfaceMethod<"Bytes read and written by one execution.",
      "int64_t", "getBytes", (ins), [{}], [{
        return ::shoal::getTensorBytes($_op->getOperandTypes()) +
               ::shoal::getTensorBytes($_op->getResultTypes());
      }]>,
  ];
}

def Shoal_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::shoal";
  let description = [{
    The op's gradient rule for reverse-mode differentiation (shoal-autodiff):
    given the gradients of its results (null where a result does not reach
    the loss), builds the gradients of its operands with graph ops at the
    builder's insertion point. An operand that has no gradient (indices,
    masks, comparisons) gets a null value. The rules live in
    lib/Dialect/Shoal/IR/ShoalGradients.cpp; they are written with graph ops
    (and a few *_grad ops) so that backward ops get sharding rules and costs
    like any other op.
  }];
  let methods = [
    InterfaceMethod<"Builds the operands' gradients; fails (with an error "
                    "naming the op) when the op has no gradient rule.",
      "::mlir::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$b,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads),
      [{}], [{
        return ::shoal::buildGradient($_op, b, resultGrads, operandGrads);
      }]>,
  ];
}

#endif // SHOAL_DIALECT_SHOAL_IR_SHOALINTERFACES_TD
