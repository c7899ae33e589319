// A pattern that names only nodes the importer folded away (a Constant
// folded into a Reshape's type, listed in shoal.folded_nodes) places
// nothing: a warning, not the "matches no node" error a typo gets. The
// other patterns of the scope still place their ops.
// RUN: rm -rf %t && mkdir -p %t
// RUN: printf 'version: 1\nscopes:\n  - {replicate: 1, name: a, nodes: ["/blk/MatMul"]}\n  - {replicate: 1, name: b, nodes: ["/blk/Constant", "/blk/Relu"]}\n' > %t/folded.yaml
// RUN: shoal-opt %s --shoal-annotate="spec=%t/folded.yaml" 2>&1 | FileCheck %s
// RUN: printf 'version: 1\nscopes:\n  - {replicate: 1, name: a, nodes: ["/blk/MatMul", "/blk/Constnat"]}\n' > %t/typo.yaml
// RUN: not shoal-opt %s --shoal-annotate="spec=%t/typo.yaml" 2>&1 | FileCheck %s --check-prefix=TYPO

// CHECK: warning: {{.*}}folded.yaml:4: pattern '/blk/Constant' of scope 'b' matches only nodes the importer folded into constants, shapes or attributes (such as '/blk/Constant'): it places nothing
// CHECK: shoal.matmul {{.*}}shoal.scope = "a"
// CHECK: shoal.relu {{.*}}shoal.scope = "b"
// TYPO: error: {{.*}}typo.yaml:3: pattern '/blk/Constnat' of scope 'a' matches no node

module attributes {shoal.folded_nodes = ["/blk/Constant"]} {
  func.func @main(%x: tensor<2x4xf32> {shoal.name = "x"}) -> (tensor<2x4xf32> {shoal.name = "y"}) {
    %w = shoal.weight "w" : tensor<4x4xf32> loc("w")
    %h = shoal.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("/blk/MatMul")
    %y = shoal.relu %h : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("/blk/Relu")
    return %y : tensor<2x4xf32>
  }
}
