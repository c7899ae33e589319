//===- ShoalAttributes.td - shoal attributes ---------------*- tablegen -*-===//

#ifndef SHOAL_DIALECT_SHOAL_IR_SHOALATTRIBUTES_TD
#define SHOAL_DIALECT_SHOAL_IR_SHOALATTRIBUTES_TD

include "shoal/Dialect/Shoal/IR/ShoalDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Shoal_StrategyReplicate : I32EnumAttrCase<"replicate", 0>;
def Shoal_StrategySplit : I32EnumAttrCase<"split", 1>;
def Shoal_Strategy : I32EnumAttr<"Strategy", "parallel strategy of a scope",
    [Shoal_StrategyReplicate, Shoal_StrategySplit]> {
  let cppNamespace = "::shoal";
}

class Shoal_Attr<string name, string attrMnemonic>
    : AttrDef<Shoal_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Shoal_ScopeAttr : Shoal_Attr<"Scope", "scope"> {
  let summary = "A user scope: replicate(n) or split(n) over a set of nodes";
  let description = [{
    Made by `shoal-annotate` from the spec (or written by hand). Ops carry
    `shoal.scope = "<name>"`; the module carries the list of scopes in
    `shoal.scopes`, in model order.

    ```mlir
    #shoal.scope<"blocks", split, 2>
    ```
  }];
  let parameters = (ins "::mlir::StringAttr":$name,
                        EnumParameter<Shoal_Strategy>:$strategy,
                        "int64_t":$devices);
  let assemblyFormat = "`<` $name `,` $strategy `,` $devices `>`";
  let genVerifyDecl = 1;
}

def Shoal_MeshAttr : Shoal_Attr<"Mesh", "mesh"> {
  let summary = "A logical device mesh with named axes";
  let description = [{
    Ranks are numbered row-major over the axes.

    ```mlir
    #shoal.mesh<["dp", "tp"], [2, 2]>
    ```
  }];
  let parameters = (ins "::mlir::ArrayAttr":$axes,
                        ArrayRefParameter<"int64_t">:$shape);
  let assemblyFormat = "`<` $axes `,` `[` $shape `]` `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Size of the named axis, or 0 if the mesh has no such axis.
    int64_t getAxisSize(::llvm::StringRef axis) const;
    int64_t getNumDevices() const;
  }];
}

def Shoal_ShardingAttr : Shoal_Attr<"Sharding", "sharding"> {
  let summary = "How a tensor's dimensions are split over mesh axes";
  let description = [{
    One entry per dimension: the mesh axes (major first) the dimension is
    split over, or `[]` when it is whole on every rank.

    A split dimension may be strided: `outer` gives, per dimension, how
    many consecutive runs it is viewed as ([outer, size / outer], row
    major); each run is split in blocks over the axes, and a rank holds its
    block of every run. This is a split of a minor factor: after [T, B, E]
    -> [T * B, E] with B split over dp, dimension 0 has outer T. `outer` is
    left out when every entry is 1 (plain block splits).

    ```mlir
    #shoal.sharding<[["dp"], [], ["tp"]]>
    #shoal.sharding<[["dp"], []], outer = [16, 1]>
    ```
  }];
  let parameters = (ins "::mlir::ArrayAttr":$dims,
                        OptionalArrayRefParameter<"int64_t">:$outer);
  let assemblyFormat = "`<` $dims (`,` `outer` `=` `[` $outer^ `]`)? `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Axes of dimension `dim` (empty if whole).
    ::llvm::SmallVector<::llvm::StringRef> getDimAxes(unsigned dim) const;
    /// Number of runs dimension `dim` is split in (1: a plain block split).
    int64_t getDimOuter(unsigned dim) const;
    /// True if some split dimension is strided (outer > 1).
    bool isStrided() const;
    /// True if no dimension is split.
    bool isReplicated() const;
    /// Builds a sharding from per-dimension axis lists.
    static ShardingAttr get(::mlir::MLIRContext *ctx,
        ::llvm::ArrayRef<::llvm::SmallVector<::llvm::StringRef>> dims);
    /// Builds a sharding from per-dimension axis lists and outer counts
    /// (all 1s are stored as none).
    static ShardingAttr get(::mlir::MLIRContext *ctx,
        ::llvm::ArrayRef<::llvm::SmallVector<::llvm::StringRef>> dims,
        ::llvm::ArrayRef<int64_t> outer);
    /// Replicated sharding of the given rank.
    static ShardingAttr getReplicated(::mlir::MLIRContext *ctx, unsigned rank);
  }];
  let skipDefaultBuilders = 0;
}

def Shoal_LayoutAttr : Shoal_Attr<"Layout", "layout"> {
  let summary = "Where a value lives: a mesh placed on world ranks, and a sharding";
  let description = [{
    The rank at mesh coordinates `c` over the device axes (every axis but
    `mb`, the micro-batch axis) is `offset + c[0] * stride + row-major
    index of c[1:]`. Bridges and send/recv between TaskGraphs on different
    device sets carry the layout of both sides.

    ```mlir
    #shoal.layout<mesh = #shoal.mesh<["mb", "dp", "tp"], [4, 2, 2]>, sharding = #shoal.sharding<[["mb", "dp"], []]>, offset = 2, stride = 4>
    ```
  }];
  let parameters = (ins "MeshAttr":$mesh, "ShardingAttr":$sharding,
                        "int64_t":$offset, "int64_t":$stride);
  let assemblyFormat = "`<` struct(params) `>`";
}

#endif // SHOAL_DIALECT_SHOAL_IR_SHOALATTRIBUTES_TD
